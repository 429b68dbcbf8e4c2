"""core/log crash recovery: torn writes, bad CRCs, zero tails, broken indexes."""
from __future__ import annotations

import os
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.log import Log, LogConfig
from core.protocol.records import build_batch, iter_batch_headers

CONFIG = LogConfig(segment_bytes=1500, index_interval_bytes=200)


def batch(n: int = 1, size: int = 20, ts: int = 1_000, tag: int = 0) -> bytes:
    return build_batch([(b"k%d" % i, bytes([tag % 256]) * size, [], ts) for i in range(n)])


def stored(data: bytes, base: int) -> bytes:
    return struct.pack(">q", base) + data[8:]


def fill(log: Log, count: int, start_tag: int = 0) -> list[bytes]:
    out = []
    for i in range(start_tag, start_tag + count):
        data = batch(n=1 + i % 3, size=10 + (i * 53) % 200, ts=1_000 + i, tag=i)
        out.append(stored(data, log.append(data).base_offset))
    return out


def read_everything(log: Log) -> list[bytes]:
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        res = log.read(offset, 1 << 20)
        assert res.data, f"no data at {offset}"
        data = bytes(res.data)
        out += [data[h.position:h.position + h.size] for h in iter_batch_headers(data)]
        offset = res.next_offset
    return out


def every_offset_readable(log: Log, batches: list[bytes]) -> None:
    by_base = {struct.unpack_from(">q", b)[0]: b for b in batches}
    for offset in range(log.log_start_offset, log.log_end_offset):
        res = log.read(offset, 1)
        assert bytes(res.data) == by_base[res.first_offset]
        assert res.first_offset <= offset < res.next_offset


def crash(log: Log) -> None:
    log._abandon()


def active_log_path(log: Log):
    return log.segments[-1].path


def next_offset(batches: list[bytes]) -> int:
    h = next(iter_batch_headers(batches[-1]))
    return h.last_offset + 1


def check_recovered(d, batches, cut_bytes):
    log = Log.open(d, CONFIG)
    assert log.recovered_truncated_bytes == cut_bytes
    assert log.log_end_offset == next_offset(batches)
    assert read_everything(log) == batches
    every_offset_readable(log, batches)
    leo = log.log_end_offset
    more = batch(n=2, tag=99)
    assert log.append(more).base_offset == leo          # appends carry on at the right offset
    assert read_everything(log) == batches + [stored(more, leo)]
    return log


def test_torn_partial_batch_is_cut(tmp_path):
    d = tmp_path / "t-0"
    log = Log.open(d, CONFIG)
    batches = fill(log, 40)
    path = active_log_path(log)
    crash(log)
    half = stored(batch(n=3, size=300), 0)[:150]
    with open(path, "ab") as f:
        f.write(half)
    check_recovered(d, batches, len(half))


def test_bad_crc_in_last_batch_is_cut(tmp_path):
    d = tmp_path / "t-0"
    log = Log.open(d, CONFIG)
    batches = fill(log, 40)
    path = active_log_path(log)
    crash(log)
    raw = bytearray(path.read_bytes())
    raw[-5] ^= 0xFF                                      # inside the last batch's records
    path.write_bytes(raw)
    check_recovered(d, batches[:-1], len(batches[-1]))


def test_zero_filled_tail_is_cut(tmp_path):
    d = tmp_path / "t-0"
    log = Log.open(d, CONFIG)
    batches = fill(log, 40)
    path = active_log_path(log)
    crash(log)
    with open(path, "ab") as f:
        f.write(bytes(4096))
    check_recovered(d, batches, 4096)


def test_valid_batch_with_backward_offset_is_cut(tmp_path):
    """A well-formed batch whose offsets go backwards (stale data) ends the log too."""
    d = tmp_path / "t-0"
    log = Log.open(d, CONFIG)
    batches = fill(log, 40)
    path = active_log_path(log)
    crash(log)
    with open(path, "ab") as f:
        f.write(batches[-2])
    check_recovered(d, batches, len(batches[-2]))


@pytest.mark.parametrize("flushed", [False, True])
def test_missing_or_garbage_indexes_are_rebuilt(tmp_path, flushed):
    """Unflushed segments are rebuilt by recovery; flushed ones when first used."""
    d = tmp_path / "t-0"
    log = Log.open(d, CONFIG)
    batches = fill(log, 60)
    segs = log.segments
    assert len(segs) >= 4
    if flushed:
        log.flush()
    crash(log)
    segs[-1].path.with_suffix(".index").unlink()                         # active: missing
    segs[-1].path.with_suffix(".timeindex").write_bytes(os.urandom(37))  # and garbage
    segs[1].path.with_suffix(".index").write_bytes(os.urandom(64))       # closed: garbage
    segs[2].path.with_suffix(".index").unlink()                          # closed: missing
    # closed: an entry that keeps the order but points into the middle of a batch
    index = segs[0].path.with_suffix(".index")
    entries = list(struct.iter_unpack(">ii", index.read_bytes()))
    assert len(entries) >= 2
    entries[0] = (entries[0][0], entries[0][1] + 3)
    index.write_bytes(b"".join(struct.pack(">ii", *e) for e in entries))
    log = check_recovered(d, batches, 0)
    log.close()
    for seg in segs[:3]:
        assert seg.path.with_suffix(".index").exists()
    log = Log.open(d, CONFIG)
    assert read_everything(log)[:len(batches)] == batches


def test_index_deleted_after_clean_shutdown(tmp_path):
    d = tmp_path / "t-0"
    log = Log.open(d, CONFIG)
    batches = fill(log, 60)
    segs = log.segments
    log.close()
    for seg in segs:
        seg.path.with_suffix(".index").unlink()
        seg.path.with_suffix(".timeindex").unlink()
    log = Log.open(d, CONFIG)
    assert log.recovered_truncated_bytes == 0
    assert read_everything(log) == batches
    assert log.offset_for_timestamp(1_030) == (struct.unpack_from(">q", batches[30])[0], 1_030)


def test_kafka_preallocated_index_with_zero_tail(tmp_path):
    d = tmp_path / "t-0"
    log = Log.open(d, CONFIG)
    batches = fill(log, 60)
    segs = log.segments
    log.close()
    for seg in segs:    # as Kafka leaves them after a crash: padded to segment.index.bytes
        for suffix in (".index", ".timeindex"):
            p = seg.path.with_suffix(suffix)
            p.write_bytes(p.read_bytes() + bytes(1 << 20))
    log = Log.open(d, CONFIG)
    assert read_everything(log) == batches
    every_offset_readable(log, batches)
    assert log.offset_for_timestamp(1_045) == (struct.unpack_from(">q", batches[45])[0], 1_045)
    assert segs[0].path.with_suffix(".index").stat().st_size < 1 << 20   # zeros trimmed


def test_torn_tail_after_clean_shutdown_marker(tmp_path):
    d = tmp_path / "t-0"
    log = Log.open(d, CONFIG)
    batches = fill(log, 20)
    path = active_log_path(log)
    log.close()
    with open(path, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x03")
    check_recovered(d, batches, 11)


def test_corruption_in_unflushed_middle_segment_drops_later_segments(tmp_path):
    d = tmp_path / "t-0"
    log = Log.open(d, CONFIG)
    batches = fill(log, 60)
    segs = log.segments
    assert len(segs) >= 4 and log.flushed_offset == 0   # nothing fsynced since open
    crash(log)
    victim = segs[1]
    raw = bytearray(victim.path.read_bytes())
    third = next(h for i, h in enumerate(iter_batch_headers(raw)) if i == 2)
    raw[third.position + 70] ^= 0x55
    victim.path.write_bytes(raw)
    kept = [b for b in batches if struct.unpack_from(">q", b)[0] < third.base_offset]
    dropped = sum(s.size_bytes for s in segs[2:]) + len(raw) - third.position
    log = check_recovered(d, kept, dropped)
    assert [s.base_offset for s in log.segments][:2] == [segs[0].base_offset, victim.base_offset]
    for seg in segs[2:]:
        assert not seg.path.exists()


def test_recovery_point_spares_flushed_segments(tmp_path):
    """Segments below the recovery point are not re-read after a crash (nor cut)."""
    d = tmp_path / "t-0"
    log = Log.open(d, CONFIG)
    batches = fill(log, 60)
    log.flush()
    segs = log.segments
    crash(log)
    raw = bytearray(segs[0].path.read_bytes())
    raw[-5] ^= 0xFF            # bit rot in flushed data: recovery must not go looking
    segs[0].path.write_bytes(raw)
    log = Log.open(d, CONFIG)
    assert log.recovered_truncated_bytes == 0
    assert log.log_end_offset == next_offset(batches)


def test_log_start_beyond_recovered_end_starts_empty_there(tmp_path):
    d = tmp_path / "t-0"
    log = Log.open(d, CONFIG)
    fill(log, 10)
    leo = log.log_end_offset
    log.delete_records(leo)
    path = active_log_path(log)
    crash(log)
    os.truncate(path, 0)                   # the unflushed data was lost, the log start was not
    log = Log.open(d, CONFIG)
    assert (log.log_start_offset, log.log_end_offset) == (leo, leo)
    assert log.append(batch()).base_offset == leo


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shape=st.lists(st.tuples(st.integers(1, 5), st.integers(0, 400)), min_size=1, max_size=25),
       cut_fraction=st.floats(0, 1), index_interval=st.sampled_from([0, 100, 4096]))
def test_recovery_keeps_exactly_the_whole_batches_before_a_cut(tmp_path_factory, shape,
                                                               cut_fraction, index_interval):
    d = tmp_path_factory.mktemp("prop") / "t-0"
    config = LogConfig(segment_bytes=2000, index_interval_bytes=index_interval)
    log = Log.open(d, config)
    batches = []
    for i, (n, size) in enumerate(shape):
        data = batch(n=n, size=size, ts=i, tag=i)
        batches.append(stored(data, log.append(data).base_offset))
    active = log.segments[-1]
    crash(log)
    raw = active.path.read_bytes()
    cut = int(len(raw) * cut_fraction)
    os.truncate(active.path, cut)
    in_active = list(iter_batch_headers(raw))
    whole = [h for h in in_active if h.position + h.size <= cut]
    kept = [b for b in batches if struct.unpack_from(">q", b)[0] < active.base_offset]
    kept += [raw[h.position:h.position + h.size] for h in whole]

    log = Log.open(d, config)
    assert log.recovered_truncated_bytes == cut - sum(h.size for h in whole)
    assert read_everything(log) == kept
    expected_end = (whole[-1].last_offset + 1 if whole else active.base_offset)
    assert log.log_end_offset == expected_end
    assert log.append(batch(tag=7)).base_offset == expected_end
    log.close()
