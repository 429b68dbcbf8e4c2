"""core/log: append, read, indexes, timestamps, DeleteRecords, reopen."""
from __future__ import annotations

import struct

import pytest

from core.log import Log, LogConfig, OffsetOutOfRange, OffsetsOutOfOrder
from core.protocol.records import (ATTR_LOG_APPEND_TIME, build_batch, decode_batch,
                                   iter_batch_headers, scan_batches)
from tests.support.records import batch


class Clock:
    def __init__(self, now: int = 1_700_000_000_000):
        self.now = now

    def __call__(self) -> int:
        return self.now


def stored(data: bytes, base: int) -> bytes:
    """A batch as the log stores it: base offset patched, nothing else changed."""
    return struct.pack(">q", base) + data[8:]


def fill(log: Log, count: int, *, ts0: int = 1_000, ts_step: int = 10) -> dict[int, bytes]:
    """Append `count` batches of 1-4 records and varied sizes; {base offset: stored bytes}."""
    out = {}
    for i in range(count):
        data = batch(n=1 + i % 4, size=10 + (i * 37) % 150, ts=ts0 + i * ts_step, tag=i)
        res = log.append(data)
        out[res.base_offset] = stored(data, res.base_offset)
    return out


def read_everything(log: Log) -> list[bytes]:
    """Every batch from the log start to the end, as raw batch bytes."""
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        res = log.read(offset, 1 << 20)
        if not res.data:    # only past the last batch, after truncate_to mid-batch
            break
        data = bytes(res.data)
        out += [data[h.position:h.position + h.size] for h in iter_batch_headers(data)]
        offset = res.next_offset
    return out


CONFIG = LogConfig(segment_bytes=1500, index_interval_bytes=200)


def test_round_trip_across_segments_from_every_offset(tmp_path):
    log = Log.open(tmp_path / "t-0", CONFIG)
    expected = fill(log, 80)
    bases = sorted(expected)
    assert log.log_end_offset == sum(h.last_offset_delta + 1 for h in
                                     (scan_batches(b)[0] for b in expected.values()))
    assert len(log.segments) >= 4
    # Every offset, including those in the middle of a batch, returns its whole batch.
    for offset in range(log.log_end_offset):
        res = log.read(offset, 1)
        (h,) = scan_batches(bytes(res.data))
        assert h.base_offset <= offset <= h.last_offset
        assert bytes(res.data) == expected[h.base_offset]
        assert res.first_offset == h.base_offset and res.next_offset == h.last_offset + 1
    assert read_everything(log) == [expected[b] for b in bases]
    assert log.read(log.log_end_offset, 100).data == b""


def test_files_follow_kafka_layout_and_index_entries_point_at_batches(tmp_path):
    d = tmp_path / "t-0"
    log = Log.open(d, CONFIG)
    expected = fill(log, 80)
    seg_bases = [s.base_offset for s in log.segments]
    assert seg_bases[0] == 0 and all(b in expected for b in seg_bases)
    names = {p.name for p in d.iterdir()}
    entries = 0
    for base in seg_bases:
        for suffix in (".log", ".index", ".timeindex"):
            assert f"{base:020d}{suffix}" in names
        raw = (d / f"{base:020d}.log").read_bytes()
        index = (d / f"{base:020d}.index").read_bytes()
        assert len(index) % 8 == 0
        for rel, pos in struct.iter_unpack(">ii", index):
            entries += 1
            (h,) = scan_batches(raw[pos:pos + struct.unpack_from(">i", raw, pos + 8)[0] + 12])
            assert h.last_offset == base + rel
        timeindex = (d / f"{base:020d}.timeindex").read_bytes()
        stamps = [ts for ts, _ in struct.iter_unpack(">qi", timeindex)]
        assert stamps == sorted(set(stamps))
    assert entries >= 2 * len(seg_bases)


def test_read_respects_max_bytes_but_returns_at_least_one_batch(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig())
    sizes = []
    for i in range(5):
        data = batch(n=2, size=100, tag=i)
        sizes.append(len(data))
        log.append(data)
    one = log.read(0, 10)
    assert len(one.data) == sizes[0] and one.next_offset == 2
    assert log.read(0, 10, min_one_batch=False).data == b""
    two = log.read(0, sizes[0] + sizes[1] + sizes[2] - 1)
    assert len(two.data) == sizes[0] + sizes[1] and two.next_offset == 4
    assert len(log.read(3, 10_000).data) == sum(sizes[1:])   # mid-batch: whole batch 2..3


def test_read_never_returns_batches_reaching_max_offset(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=1000))
    for i in range(10):
        log.append(batch(n=3, size=50, tag=i))          # batches cover 3i .. 3i+2
    assert [s.base_offset for s in log.segments][:2] == [0, 12]
    res = log.read(0, 1 << 20, max_offset=7)           # batch 6..8 holds offset 7: excluded
    assert [h.last_offset for h in iter_batch_headers(res.data)] == [2, 5]
    assert log.read(6, 1 << 20, max_offset=7).data == b""
    assert log.read(6, 1 << 20, max_offset=6).data == b""
    res = log.read(0, 1 << 20, max_offset=9)
    assert [h.last_offset for h in iter_batch_headers(res.data)] == [2, 5, 8]
    assert res.next_offset == 9
    assert log.read(12, 1 << 20, max_offset=14).data == b""     # in the next segment
    assert [h.last_offset for h in iter_batch_headers(log.read(12, 1 << 20, max_offset=15).data)] == [14]


def test_offset_out_of_range(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig())
    fill(log, 5)
    leo = log.log_end_offset
    with pytest.raises(OffsetOutOfRange) as err:
        log.read(leo + 1, 100)
    assert (err.value.log_start_offset, err.value.log_end_offset) == (0, leo)
    log.delete_records(3)
    with pytest.raises(OffsetOutOfRange):
        log.read(2, 100)
    assert log.read(3, 100).data
    with pytest.raises(OffsetOutOfRange):
        log.delete_records(leo + 1)


def test_offset_for_timestamp_across_segments(tmp_path):
    log = Log.open(tmp_path / "t-0", CONFIG)
    expected = fill(log, 60, ts0=10_000, ts_step=10)    # batch i: max timestamp 10_000 + 10i
    assert len(log.segments) >= 3
    by_ts = {scan_batches(b)[0].max_timestamp: base for base, b in expected.items()}
    for target in (0, 10_000, 10_005, 10_010, 10_123, 10_300, 10_590):
        ts = min(t for t in by_ts if t >= target)
        assert log.offset_for_timestamp(target) == (by_ts[ts], ts)
    assert log.offset_for_timestamp(10_591) is None
    assert log.max_timestamp_and_offset() == (10_590, by_ts[10_590])
    # Below the log start the answer is the log start.
    log.delete_records(by_ts[10_210] + 1)             # batch 21 holds two records
    assert log.offset_for_timestamp(0) == (by_ts[10_210] + 1, 10_210)


def test_offset_for_timestamp_with_unordered_timestamps(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=600, index_interval_bytes=50))
    stamps = [500, 100, 900, 300, 950, 200, 990, 10, 1000]
    bases = [log.append(batch(size=100, ts=ts)).base_offset for ts in stamps]
    for target in (0, 150, 500, 501, 920, 951, 995, 1000):
        i = next(i for i, ts in enumerate(stamps) if ts >= target)
        assert log.offset_for_timestamp(target) == (bases[i], stamps[i])
    assert log.offset_for_timestamp(1001) is None
    assert log.max_timestamp_and_offset() == (1000, bases[-1])


def test_empty_log(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig())
    assert (log.log_start_offset, log.log_end_offset, log.size_bytes) == (0, 0, 0)
    assert log.read(0, 100).data == b""
    assert log.offset_for_timestamp(0) is None
    assert log.max_timestamp_and_offset() == (-1, -1)


def test_reopen_after_clean_close_preserves_everything(tmp_path):
    d = tmp_path / "t-0"
    log = Log.open(d, CONFIG)
    expected = fill(log, 50)
    log.delete_records(7)
    before = (log.log_start_offset, log.log_end_offset, [s.base_offset for s in log.segments],
              log.offset_for_timestamp(1_100), log.max_timestamp_and_offset())
    content = read_everything(log)
    log.close()
    assert (d / ".kafka_cleanshutdown").exists()
    log = Log.open(d, CONFIG)
    assert not (d / ".kafka_cleanshutdown").exists()   # a crash from now on is unclean
    assert log.recovered_truncated_bytes == 0
    assert (log.log_start_offset, log.log_end_offset, [s.base_offset for s in log.segments],
            log.offset_for_timestamp(1_100), log.max_timestamp_and_offset()) == before
    assert read_everything(log) == content
    res = log.append(batch(n=2))
    assert res.base_offset == before[1]
    assert read_everything(log)[-1] == stored(batch(n=2), before[1])
    assert sorted(expected)[-1] < res.base_offset


def test_delete_records_persists_across_reopen(tmp_path):
    d = tmp_path / "t-0"
    log = Log.open(d, CONFIG)
    fill(log, 60)
    seg_count = len(log.segments)
    third = log.segments[2].base_offset
    assert log.delete_records(third + 1) == third + 1
    assert len(log.segments) == seg_count - 2          # the two segments wholly below went
    assert not (d / f"{0:020d}.log").exists()
    assert log.delete_records(5) == third + 1           # never moves back
    log._abandon()                                      # even without a clean shutdown
    log = Log.open(d, CONFIG)
    assert log.log_start_offset == third + 1
    with pytest.raises(OffsetOutOfRange):
        log.read(third, 100)
    log.close()
    log = Log.open(d, CONFIG)
    assert log.log_start_offset == third + 1
    leo = log.log_end_offset
    assert log.delete_records(-1) == leo                # -1: up to the log end
    assert log.read(leo, 100).data == b""
    assert log.append(batch()).base_offset == leo


def test_append_keeps_offsets_without_assignment(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=500))
    log.append(build_batch([(None, b"a", [], 1)], base_offset=0), assign_offsets=False)
    res = log.append(build_batch([(None, b"b", [], 2)] * 3, base_offset=10), assign_offsets=False)
    assert (res.base_offset, res.last_offset, log.log_end_offset) == (10, 12, 13)
    with pytest.raises(OffsetsOutOfOrder):
        log.append(build_batch([(None, b"c", [], 3)], base_offset=12), assign_offsets=False)
    assert [h.base_offset for h in iter_batch_headers(log.read(1, 1000).data)] == [10]
    assert log.append(batch()).base_offset == 13


def test_log_append_time_and_in_place_patching(tmp_path):
    clock = Clock(5_000)
    log = Log.open(tmp_path / "t-0", LogConfig(message_timestamp_type="LogAppendTime"),
                   clock=clock)
    log.append(batch())
    data = bytearray(batch(n=2, ts=1))
    res = log.append(data)
    assert (res.base_offset, res.log_append_time, res.max_timestamp) == (1, 5_000, 5_000)
    assert struct.unpack_from(">q", data)[0] == 1        # a bytearray is patched in place
    h = scan_batches(bytes(log.read(1, 1000).data))[0]   # and its CRC still holds
    assert h.attributes & ATTR_LOG_APPEND_TIME and h.max_timestamp == 5_000
    assert all(r.timestamp == 5_000 for r in decode_batch(bytes(log.read(1, 1000).data), h))


def test_truncate_to(tmp_path):
    log = Log.open(tmp_path / "t-0", CONFIG)
    expected = fill(log, 60)
    bases = sorted(expected)
    segs_before = len(log.segments)
    cut = bases[21]                       # batch 21 holds two records
    log.truncate_to(cut + 1)              # mid-batch: the batch holding cut+1 goes whole
    assert log.log_end_offset == cut + 1
    assert len(log.segments) < segs_before
    assert read_everything(log) == [expected[b] for b in bases[:21]]
    assert log.append(batch()).base_offset == cut + 1
    log.truncate_to(bases[3])
    assert read_everything(log) == [expected[b] for b in bases[:3]]
    log.close()
    log = Log.open(tmp_path / "t-0", CONFIG)
    assert log.log_end_offset == bases[3]
    assert read_everything(log) == [expected[b] for b in bases[:3]]


def test_reads_from_recent_batches_follow_a_truncation_and_a_different_append(tmp_path):
    """A follower reads where recent batches start (a segment finds those without its index);
    after a truncation, new batches of other sizes at the same offsets are what it reads,
    and batches long past the recent ones are still found through the index."""
    clock = Clock()
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=1 << 20, index_interval_bytes=200), clock=clock)
    expected = fill(log, 300, ts0=clock.now)    # one segment: no roll for its age
    bases = sorted(expected)
    assert all(bytes(log.read(b, 1).data) == expected[b] for b in bases)   # old and recent
    log.truncate_to(bases[-3])
    # One batch where there were three: the old batches' offsets now fall inside it.
    span = bases[-1] + 4 - bases[-3]
    data = stored(batch(n=span, size=50, ts=clock.now, tag=200), bases[-3])
    log.append(data, assign_offsets=False)
    assert len(log.segments) == 1
    for base in bases[-3:]:
        assert bytes(log.read(base, 1).data) == data
    after = stored(batch(n=1, size=400, ts=clock.now, tag=201), bases[-3] + span)
    log.append(after, assign_offsets=False)
    assert bytes(log.read(bases[-3] + span, 1).data) == after
    assert bytes(log.read(bases[5], 1).data) == expected[bases[5]]


def test_truncate_below_log_start_starts_over(tmp_path):
    log = Log.open(tmp_path / "t-0", CONFIG)
    fill(log, 30)
    log.delete_records(20)
    log.truncate_to(10)
    assert (log.log_start_offset, log.log_end_offset, len(log.segments)) == (10, 10, 1)
    assert log.append(batch()).base_offset == 10


def test_delete_removes_directory(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig())
    fill(log, 3)
    log.delete()
    assert not (tmp_path / "t-0").exists()
