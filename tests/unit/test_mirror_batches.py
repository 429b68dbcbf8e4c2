"""Batch pass-through (mirror/batches.py): what the mirror forwards from a source fetch.

Logs are built with core.protocol.records.build_batch, transaction markers as Kafka writes
them (control batch, key int16 version + int16 type, ABORT 0 / COMMIT 1). The aborted list a
test passes is the one a broker answers a read_committed fetch with: the (producer id, first
offset) of every aborted transaction that overlaps the fetched range. Every output is checked
the way a Kafka target would check a Produce (scan_batches with from_client=True: framing,
CRC32C, count equals offset range) and decoded back with core's decoder.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, event, given, settings, strategies as st

from core.protocol.compression import Compression, compress
from core.protocol.records import (
    ATTR_CONTROL, ATTR_DELETE_HORIZON, ATTR_LOG_APPEND_TIME, ATTR_TRANSACTIONAL, CRC_START,
    HEADER_SIZE, Record, build_batch, decode_batch, read_batch_header, scan_batches,
    set_log_append_time)
from core.protocol.varint import write_varint
from mirror.batches import (
    CorruptBatchError, MirrorBatchError, PreparedBatches, UnsupportedMagicError,
    prepare_for_target)

PROPERTY = settings(max_examples=250, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow])
CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
MIRROR = (4242, 3, 0)  # the mirror's own idempotent producer: id, epoch, next sequence


# --------------------------------------------------------------------------- a source log


def rec(offset: int, ts: int = 1_700_000_000_000) -> tuple:
    """Keys name their upstream offset, so where a record came from is visible downstream."""
    return (b"o%d" % offset, b"value-%d" % offset, [("h", b"%d" % offset), ("n", None)], ts + offset)


def marker_batch(offset: int, pid: int, commit: bool, epoch: int = 0) -> bytes:
    key = struct.pack(">hh", 0, 1 if commit else 0)
    value = struct.pack(">hi", 0, 5)  # version, coordinator epoch
    return build_batch([(key, value, [], 1000)], base_offset=offset, producer_id=pid,
                       producer_epoch=epoch, transactional=True, control=True)


@dataclass
class SourceLog:
    """A partition as a broker holds it, with the facts a broker answers a fetch with."""
    batches: list[tuple[bytes, int, int]] = field(default_factory=list)  # (bytes, base, last)
    records: dict[int, tuple] = field(default_factory=dict)   # offset -> record, data only
    committed: set[int] = field(default_factory=set)          # offsets read_committed returns
    open_txn: dict[int, list[int]] = field(default_factory=dict)  # pid -> offsets so far
    txn_first: dict[int, int] = field(default_factory=dict)   # pid -> first offset of open txn
    aborted_txns: list[tuple[int, int, int]] = field(default_factory=list)  # pid, first, marker
    next_offset: int = 0

    def _append(self, data: bytes, n: int) -> tuple[int, int]:
        base = self.next_offset
        self.batches.append((data, base, base + n - 1))
        self.next_offset += n
        return base, base + n - 1

    def data(self, n: int, *, pid: int = -1, txn: bool = False,
             compression: Compression = Compression.NONE) -> None:
        base = self.next_offset
        recs = [rec(base + i) for i in range(n)]
        self._append(build_batch(recs, base_offset=base, compression=compression, producer_id=pid,
                                 producer_epoch=0 if pid >= 0 else -1,
                                 base_sequence=0 if pid >= 0 else -1, transactional=txn), n)
        for i, r in enumerate(recs):
            self.records[base + i] = r
        if txn:
            self.txn_first.setdefault(pid, base)
            self.open_txn.setdefault(pid, []).extend(range(base, base + n))
        else:
            self.committed.update(range(base, base + n))

    def end(self, pid: int, commit: bool) -> None:
        offset = self.next_offset
        self._append(marker_batch(offset, pid, commit), 1)
        offsets = self.open_txn.pop(pid, [])
        first = self.txn_first.pop(pid, None)
        if commit:
            self.committed.update(offsets)
        elif first is not None:
            self.aborted_txns.append((pid, first, offset))

    def run(self, ops) -> "SourceLog":
        for op in ops:
            kind, *args = op
            if kind == "d":
                self.data(*args)
            elif kind == "i":      # idempotent, not transactional
                self.data(args[1], pid=args[0])
            elif kind == "t":
                self.data(args[1], pid=args[0], txn=True)
            elif kind in ("c", "a"):
                self.end(args[0], commit=kind == "c")
            else:
                raise ValueError(op)
        return self

    @property
    def lso(self) -> int:
        return min(self.txn_first.values(), default=self.next_offset)

    def fetch(self, offset: int, max_bytes: int | None = None) -> tuple[bytes, list]:
        """What a broker returns from `offset`: whole batches from the one holding it, cut
        at max_bytes (possibly inside a batch), and the overlapping aborted transactions."""
        chosen = [b for b in self.batches if b[2] >= offset]
        data = b"".join(b[0] for b in chosen)
        if max_bytes is not None:
            data = data[:max_bytes]
        upper = self.next_offset
        aborted = [(pid, first) for pid, first, marker in self.aborted_txns
                   if marker >= offset and first < upper]
        return data, aborted


def target_batches(out: PreparedBatches) -> list[list[Record]]:
    """Decode each output batch after checking it as a broker checks a client's Produce."""
    decoded = []
    for view in out.views():
        (info,) = scan_batches(view, from_client=True)
        decoded.append(decode_batch(view, info))
    return decoded


def upstream_offsets(out: PreparedBatches) -> list[int]:
    return [int(r.key[1:]) for batch in target_batches(out) for r in batch]


# --------------------------------------------------------------------------- read_committed


@dataclass
class Case:
    name: str
    ops: list
    kept: list[tuple[int, int]]       # upstream (base, last) of each forwarded batch
    control: int = 0
    aborted: int = 0
    fetch_offset: int = 0
    next_offset: int | None = None    # default: the log's end


CASES = [
    Case("plain batches", [("d", 3), ("d", 2)], kept=[(0, 2), (3, 4)]),
    Case("idempotent producer's batches", [("i", 9, 3), ("i", 9, 1)], kept=[(0, 2), (3, 3)]),
    Case("committed transaction, marker dropped",
         [("t", 7, 3), ("c", 7), ("d", 2)], kept=[(0, 2), (4, 5)], control=1),
    Case("aborted transaction dropped with its marker",
         [("t", 7, 3), ("a", 7), ("d", 2)], kept=[(4, 5)], control=1, aborted=1),
    Case("aborted transaction of several batches, interleaved with others",
         [("t", 7, 2), ("d", 1), ("t", 8, 1), ("t", 7, 2), ("a", 7), ("c", 8)],
         kept=[(2, 2), (3, 3)], control=2, aborted=2),
    Case("same producer: aborted, then a committed transaction",
         [("t", 7, 3), ("a", 7), ("d", 2), ("t", 8, 2), ("c", 8), ("t", 7, 1), ("c", 7)],
         kept=[(4, 5), (6, 7), (9, 9)], control=3, aborted=1),
    Case("same producer: committed, then aborted",
         [("t", 7, 2), ("c", 7), ("t", 7, 2), ("a", 7)],
         kept=[(0, 1)], control=2, aborted=1),
    Case("an idempotent batch of an aborting producer id is not transactional: kept",
         [("t", 7, 2), ("i", 7, 1), ("a", 7)], kept=[(2, 2)], control=1, aborted=1),
    Case("commit marker of a producer with nothing open",
         [("d", 1), ("c", 5), ("d", 1)], kept=[(0, 0), (2, 2)], control=1),
    Case("only markers", [("c", 5), ("a", 6)], kept=[], control=2),
    Case("fetch from a batch boundary mid-log: earlier aborted transaction not listed",
         [("t", 7, 2), ("a", 7), ("t", 7, 2), ("c", 7)],
         kept=[(3, 4)], control=1, fetch_offset=3),
    Case("fetch inside an aborted transaction's run", [("t", 7, 2), ("t", 7, 2), ("a", 7), ("d", 1)],
         kept=[(5, 5)], control=1, aborted=1, fetch_offset=2),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_read_committed_like_kafkas_consumer(case: Case):
    log = SourceLog().run(case.ops)
    fetched, aborted = log.fetch(case.fetch_offset)
    out = prepare_for_target(fetched, fetch_offset=case.fetch_offset, aborted=aborted, producer=MIRROR)
    assert [(b.upstream_base_offset, b.upstream_last_offset) for b in out.batches] == case.kept
    assert (out.skipped_control, out.skipped_aborted) == (case.control, case.aborted)
    assert out.next_fetch_offset == (case.next_offset if case.next_offset is not None else log.next_offset)
    assert out.consumed_bytes == len(fetched)
    expected = sorted(o for o in log.committed if o >= case.fetch_offset)
    assert upstream_offsets(out) == expected
    assert out.skipped_aborted_records == sum(
        1 for o in log.records if o >= case.fetch_offset and o not in log.committed)


def test_aborted_list_as_fetch_response_objects():
    log = SourceLog().run([("t", 7, 3), ("a", 7), ("d", 2)])
    fetched, aborted = log.fetch(0)
    objects = [SimpleNamespace(producer_id=p, first_offset=o) for p, o in aborted]
    out = prepare_for_target(memoryview(fetched), fetch_offset=0, aborted=objects)
    assert upstream_offsets(out) == [4, 5]


def test_without_the_aborted_list_an_aborted_transaction_is_indistinguishable():
    # Why the mirror must fetch read_committed: a read_uncommitted answer has no aborted list.
    log = SourceLog().run([("t", 7, 2), ("a", 7)])
    out = prepare_for_target(log.fetch(0)[0], fetch_offset=0, aborted=None)
    assert upstream_offsets(out) == [0, 1]


# --------------------------------------------------------------------------- the rewrite


@pytest.mark.parametrize("producer", [MIRROR, None], ids=["mirror-producer", "no-producer"])
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("transactional", [False, True], ids=["plain", "txn"])
def test_rewrite_keeps_records_and_payload(codec, producer, transactional):
    recs = [rec(100 + i) for i in range(5)]
    source = build_batch(recs, base_offset=100, compression=codec, producer_id=77, producer_epoch=2,
                         base_sequence=40, partition_leader_epoch=12, transactional=transactional)
    fetched = source + (marker_batch(105, 77, commit=True) if transactional else b"")
    out = prepare_for_target(fetched, fetch_offset=100, producer=producer)
    (batch,) = out.batches
    data = bytes(out.data)
    src, dst = read_batch_header(source), read_batch_header(data)
    assert data[HEADER_SIZE:] == source[HEADER_SIZE:]           # records, compressed or not
    assert dst.base_offset == 0 and dst.partition_leader_epoch == -1
    if producer:
        assert (dst.producer_id, dst.producer_epoch, dst.base_sequence) == (4242, 3, 0)
        assert out.next_sequence == 5
    else:
        assert (dst.producer_id, dst.producer_epoch, dst.base_sequence) == (-1, -1, -1)
        assert out.next_sequence is None
    assert dst.attributes == src.attributes & ~ATTR_TRANSACTIONAL
    assert (dst.base_timestamp, dst.max_timestamp, dst.last_offset_delta, dst.records_count) == (
        src.base_timestamp, src.max_timestamp, src.last_offset_delta, src.records_count)
    assert dst.crc == crc32c(data[CRC_START:])
    assert batch == (0, len(source), 100, 104, 5, 0 if producer else -1, False, False, False, False)
    (decoded,) = target_batches(out)
    assert [(r.key, r.value, r.headers, r.timestamp, r.timestamp_type) for r in decoded] == [
        (k, v, h, ts, 0) for k, v, h, ts in recs]
    assert out.next_fetch_offset == (106 if transactional else 105)


def test_log_append_time_is_kept():
    buf = bytearray(build_batch([rec(0), rec(1)], compression=Compression.ZSTD))
    set_log_append_time(buf, scan_batches(buf), 1_800_000_000_000)
    out = prepare_for_target(buf, fetch_offset=0, producer=MIRROR)
    assert read_batch_header(out.data).attributes & ATTR_LOG_APPEND_TIME
    (decoded,) = target_batches(out)
    assert [(r.timestamp, r.timestamp_type) for r in decoded] == [(1_800_000_000_000, 1)] * 2


def test_delete_horizon_bit_is_cleared_and_timestamps_unchanged():
    buf = bytearray(build_batch([rec(0), rec(1)]))
    before = [r.timestamp for r in decode_batch(buf, scan_batches(buf)[0])]
    struct.pack_into(">h", buf, 21, struct.unpack_from(">h", buf, 21)[0] | ATTR_DELETE_HORIZON)
    struct.pack_into(">I", buf, 17, crc32c(bytes(buf[CRC_START:])))
    out = prepare_for_target(buf, fetch_offset=0)
    assert not read_batch_header(out.data).attributes & ATTR_DELETE_HORIZON
    (decoded,) = target_batches(out)
    assert [r.timestamp for r in decoded] == before


def test_sequences_run_on_across_batches_and_wrap_like_kafka():
    fetched = build_batch([rec(0), rec(1), rec(2)]) + build_batch([rec(3)], base_offset=3) \
        + build_batch([rec(4), rec(5)], base_offset=4)
    start = 2**31 - 2
    out = prepare_for_target(fetched, fetch_offset=0, producer=(1, 0, start))
    assert [b.base_sequence for b in out.batches] == [2**31 - 2, 1, 2]
    assert [read_batch_header(v).base_sequence for v in out.views()] == [2**31 - 2, 1, 2]
    assert out.next_sequence == start + 6  # unbounded, like core.client.idempotence


@pytest.mark.parametrize("producer", [(-1, 0, 0), (1, -1, 0), (1, 32768, 0), (1, 0, -1)])
def test_invalid_mirror_producer(producer):
    with pytest.raises(ValueError, match="invalid mirror producer"):
        prepare_for_target(build_batch([rec(0)]), fetch_offset=0, producer=producer)


def test_one_view_per_batch_for_produce():
    log = SourceLog().run([("d", 2), ("t", 7, 1), ("c", 7), ("d", 3)])
    out = prepare_for_target(log.fetch(0)[0], fetch_offset=0, producer=MIRROR)
    views = list(out.views())
    assert [len(v) for v in views] == [b.size for b in out.batches]
    assert b"".join(views) == out.data
    assert out.records_count == 6
    for v in views:
        assert len(scan_batches(v, from_client=True)) == 1
        assert not read_batch_header(v).attributes & (ATTR_TRANSACTIONAL | ATTR_CONTROL)


# --------------------------------------------------------------------------- the fetch's edges


def test_partial_trailing_batch_is_left_for_the_next_fetch():
    log = SourceLog().run([("d", 3), ("d", 4)])
    whole, _ = log.fetch(0)
    for cut in (1, 10, HEADER_SIZE, len(log.batches[1][0]) - 1):
        out = prepare_for_target(whole[:-cut], fetch_offset=0)
        assert upstream_offsets(out) == [0, 1, 2]
        assert out.next_fetch_offset == 3
        assert out.consumed_bytes == len(log.batches[0][0])


@pytest.mark.parametrize("fetched", [b"", b"\x00" * 16, build_batch([rec(0)] * 1)[:40]],
                         ids=["empty", "short", "cut-batch"])
def test_nothing_whole_consumes_nothing(fetched):
    out = prepare_for_target(fetched, fetch_offset=7, producer=MIRROR)
    assert (out.batches, bytes(out.data), out.next_fetch_offset, out.consumed_bytes) == ([], b"", 7, 0)
    assert out.next_sequence == 0


def test_aborted_batches_are_skipped_before_their_marker_arrives():
    # The aborted list, not the marker, says the transaction aborted: the marker may be cut
    # off (or not written yet in this answer) and the batches are still dropped.
    log = SourceLog().run([("d", 1), ("t", 7, 2), ("t", 7, 2), ("a", 7), ("d", 1)])
    fetched, aborted = log.fetch(0)
    cut = sum(len(b[0]) for b in log.batches[:3]) + 5   # into the marker
    out = prepare_for_target(fetched[:cut], fetch_offset=0, aborted=aborted)
    assert upstream_offsets(out) == [0]
    assert (out.skipped_aborted, out.skipped_control, out.next_fetch_offset) == (2, 0, 5)
    rest, aborted = log.fetch(5)
    out = prepare_for_target(rest, fetch_offset=5, aborted=aborted)
    assert upstream_offsets(out) == [6]
    assert (out.skipped_aborted, out.skipped_control, out.next_fetch_offset) == (0, 1, 7)


def test_last_stable_offset_holds_back_open_transactions():
    log = SourceLog().run([("d", 2), ("t", 7, 2), ("d", 1), ("t", 8, 1), ("c", 8)])
    assert log.lso == 2
    fetched, aborted = log.fetch(0)
    out = prepare_for_target(fetched, fetch_offset=0, aborted=aborted, last_stable_offset=log.lso)
    assert upstream_offsets(out) == [0, 1]
    assert out.stopped_at_lso and out.next_fetch_offset == 2
    assert out.consumed_bytes == len(log.batches[0][0])
    for unknown in (None, -1):
        assert prepare_for_target(fetched, fetch_offset=0, last_stable_offset=unknown).next_fetch_offset == 7


def test_batches_below_the_fetch_offset_are_consumed_not_forwarded():
    log = SourceLog().run([("d", 2), ("d", 2), ("d", 1)])
    fetched = b"".join(b[0] for b in log.batches)   # a broker that sends more than asked
    out = prepare_for_target(fetched, fetch_offset=4)
    assert upstream_offsets(out) == [4]
    assert (out.skipped_before_position, out.next_fetch_offset) == (2, 5)


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.ZSTD], ids=lambda c: c.name)
def test_fetch_inside_a_batch_forwards_only_records_from_the_position(codec):
    recs = [rec(10 + i) for i in range(6)]
    buf = bytearray(build_batch(recs, base_offset=10, compression=codec))
    set_log_append_time(buf, scan_batches(buf), 1_800_000_000_000)
    out = prepare_for_target(buf, fetch_offset=13, producer=MIRROR)
    (batch,) = out.batches
    assert (batch.upstream_base_offset, batch.upstream_last_offset, batch.records_count, batch.reencoded) == (
        13, 15, 3, True)
    assert batch.run == 3          # trimmed, not compacted: 13..15 keep their distance downstream
    info = read_batch_header(out.data)
    assert info.compression == codec and info.attributes & ATTR_LOG_APPEND_TIME
    (decoded,) = target_batches(out)
    assert [(r.key, r.value, r.headers, r.timestamp) for r in decoded] == [
        (k, v, h, 1_800_000_000_000) for k, v, h, _ in recs[3:]]
    assert out.next_sequence == 3 and out.next_fetch_offset == 16


def compacted_batch(base: int, deltas: list[int], last_delta: int, *, codec=Compression.NONE,
                    records_count: int | None = None) -> bytes:
    """A batch as Kafka's cleaner leaves it: records keep their offset deltas, the header keeps
    the original last offset delta (so its count and offset range disagree)."""
    body = bytearray()
    for d in deltas:
        k, v, _h, ts = rec(base + d)
        r = bytearray(b"\x00")
        write_varint(r, ts - rec(base)[3])  # zig-zag, int64-safe
        write_varint(r, d)
        write_varint(r, len(k))
        r += k
        write_varint(r, len(v))
        r += v
        write_varint(r, 0)
        write_varint(body, len(r))
        body += r
    payload = compress(codec, bytes(body)) if codec else bytes(body)
    count = len(deltas) if records_count is None else records_count
    head = bytearray(HEADER_SIZE)
    struct.pack_into(">qiibIhiqqqhii", head, 0, base, HEADER_SIZE - 12 + len(payload), 0, 2, 0, int(codec),
                     last_delta, rec(base)[3], rec(base + last_delta)[3], -1, -1, -1, count)
    batch = head + payload
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[CRC_START:])))
    return bytes(batch)


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.GZIP], ids=lambda c: c.name)
def test_compacted_batch_is_rebuilt_because_produce_needs_count_equal_range(codec):
    fetched = compacted_batch(20, [1, 4, 6], 7, codec=codec) + build_batch([rec(28)], base_offset=28)
    out = prepare_for_target(fetched, fetch_offset=20, producer=MIRROR)
    assert [(b.upstream_base_offset, b.upstream_last_offset, b.records_count, b.reencoded)
            for b in out.batches] == [(21, 27, 3, True), (28, 28, 1, False)]
    # Produce closes the compacted batch's gaps up, so it has no run; the whole one does.
    assert [b.run for b in out.batches] == [0, 1]
    assert upstream_offsets(out) == [21, 24, 26, 28]
    assert [b.base_sequence for b in out.batches] == [0, 3]
    assert out.next_sequence == 4 and out.next_fetch_offset == 29
    assert read_batch_header(out.data).compression == codec


def test_empty_batch_is_consumed_not_forwarded():
    # Compaction can empty a batch and keep it (for its producer state): count 0, no records.
    fetched = compacted_batch(0, [], 4) + build_batch([rec(5)], base_offset=5)
    out = prepare_for_target(fetched, fetch_offset=0, producer=MIRROR)
    assert upstream_offsets(out) == [5]
    assert (out.skipped_empty, out.next_fetch_offset, out.next_sequence) == (1, 6, 1)


# --------------------------------------------------------------------------- bad input


def corrupt(batch: bytes, at: int) -> bytes:
    buf = bytearray(batch)
    buf[at] ^= 0xFF
    return bytes(buf)


@pytest.mark.parametrize("where", [HEADER_SIZE + 3, 21, 45, -1],
                         ids=["record", "attributes", "producer", "last-byte"])
def test_corrupt_crc_is_refused_naming_the_offset(where):
    good = build_batch([rec(0), rec(1)])
    bad = build_batch([rec(2)], base_offset=2)
    fetched = good + corrupt(bad, where if where >= 0 else len(bad) - 1)
    with pytest.raises(CorruptBatchError, match=r"batch at offset 2: CRC32C mismatch") as info:
        prepare_for_target(fetched, fetch_offset=0, producer=MIRROR)
    assert info.value.offset == 2


def test_corrupt_marker_and_aborted_batches_are_refused_too():
    log = SourceLog().run([("t", 7, 1), ("a", 7)])
    fetched, aborted = log.fetch(0)
    n = len(log.batches[0][0])
    for at, offset in ((HEADER_SIZE + 2, 0), (n + HEADER_SIZE + 2, 1)):
        with pytest.raises(CorruptBatchError, match=f"offset {offset}"):
            prepare_for_target(corrupt(fetched, at), fetch_offset=0, aborted=aborted)


def test_old_magic_is_refused():
    v0 = struct.pack(">qiIbbii", 5, 14, 0, 0, 0, -1, -1)  # offset, size, crc, magic 0, attrs, key, value
    v1 = struct.pack(">qiIbbqii", 6, 22, 0, 1, 0, 0, -1, -1)
    for msg, offset in ((v0, 5), (v1, 6)):
        with pytest.raises(UnsupportedMagicError, match=f"batch at offset {offset}: message format magic"):
            prepare_for_target(build_batch([rec(0)]) + msg, fetch_offset=0)


@pytest.mark.parametrize("patch, message", [
    ((16, ">b", 3), "unknown magic 3"),
    ((8, ">i", 20), "shorter than its 61-byte header"),
    ((8, ">i", -5), "negative batch length"),
], ids=["magic", "short", "negative"])
def test_damaged_framing_is_refused(patch, message):
    buf = bytearray(build_batch([rec(0)]))
    struct.pack_into(patch[1], buf, patch[0], patch[2])
    with pytest.raises(CorruptBatchError, match=message):
        prepare_for_target(bytes(buf), fetch_offset=0)


def test_unknown_codec_is_refused():
    buf = bytearray(build_batch([rec(0)]))
    struct.pack_into(">h", buf, 21, 6)
    struct.pack_into(">I", buf, 17, crc32c(bytes(buf[CRC_START:])))
    with pytest.raises(CorruptBatchError, match="unknown compression codec 6"):
        prepare_for_target(bytes(buf), fetch_offset=0)


@pytest.mark.parametrize("key", [b"\x00\x00", b"\xff\xff\x00\x00", None],
                         ids=["short", "negative-version", "null"])
def test_malformed_transaction_marker_is_refused(key):
    batch = build_batch([(key, b"", [], 1)], producer_id=3, producer_epoch=0, transactional=True,
                        control=True)
    with pytest.raises(CorruptBatchError, match="batch at offset 0: control record"):
        prepare_for_target(batch, fetch_offset=0)


def test_errors_share_one_base():
    assert issubclass(CorruptBatchError, MirrorBatchError)
    assert issubclass(UnsupportedMagicError, MirrorBatchError)
    assert issubclass(MirrorBatchError, ValueError)


# --------------------------------------------------------------------------- property


@st.composite
def source_logs(draw) -> SourceLog:
    log = SourceLog()
    for _ in range(draw(st.integers(0, 20))):
        kind = draw(st.sampled_from(["d", "i", "t", "t", "t", "end", "end", "compacted"]))
        codec = draw(st.sampled_from(CODECS))
        n = draw(st.integers(1, 4))
        if kind == "d":
            log.data(n, compression=codec)
        elif kind == "i":
            log.data(n, pid=100 + draw(st.integers(0, 1)), compression=codec)
        elif kind == "t":
            log.data(n, pid=draw(st.integers(1, 2)), txn=True, compression=codec)
        elif kind == "end":
            log.end(draw(st.integers(1, 2)), commit=draw(st.booleans()))
        else:
            last = n + 2
            deltas = sorted(draw(st.sets(st.integers(0, last), max_size=3)))
            base = log.next_offset
            log.batches.append((compacted_batch(base, deltas, last, codec=codec), base, base + last))
            for d in deltas:
                k, v, _headers, ts = rec(base + d)
                log.records[base + d] = (k, v, [], ts)  # compacted_batch writes no headers
                log.committed.add(base + d)
            log.next_offset += last + 1
    return log


@PROPERTY
@given(log=source_logs(), data=st.data())
def test_fetch_loop_forwards_exactly_what_read_committed_returns(log: SourceLog, data):
    """Fetch from a random start with random size limits until the LSO: the forwarded records
    are exactly the committed records from the start, in order, each once, each accepted by a
    target's Produce checks, with the mirror's sequences running on without a gap."""
    lso = log.lso
    start = data.draw(st.just(0) | st.integers(0, lso), label="start")
    position, sequence = start, 5
    forwarded: list[Record] = []
    cut_short = False
    for _round in range(200):
        if position >= lso:
            break
        fetched, aborted = log.fetch(position)
        whole = read_batch_header(fetched).size
        # Brokers return at least one whole batch (KIP-74), often cut inside a later one; a
        # client with a too small limit may see only part of the first (once per loop here).
        if not cut_short and data.draw(st.integers(0, 9), label="cut_short") == 0:
            cut_short, limit = True, data.draw(st.integers(1, whole - 1), label="short")
        else:
            limit = data.draw(st.integers(whole, len(fetched)), label="max_bytes")
        out = prepare_for_target(fetched[:limit], fetch_offset=position, aborted=aborted,
                                 last_stable_offset=lso, producer=(9, 1, sequence))
        assert out.next_fetch_offset >= position
        for seen, what in ((out.skipped_aborted, "aborted batch skipped"),
                           (out.stopped_at_lso, "stopped at LSO"),
                           (any(b.reencoded for b in out.batches), "batch rebuilt"),
                           (out.skipped_empty, "empty batch skipped")):
            if seen:
                event(what)
        if limit < whole:
            assert out.consumed_bytes == 0 and out.next_fetch_offset == position and not out.batches
            continue
        returned = [b for b in log.batches if b[2] >= position]
        ends, total = [], 0
        for b in returned:
            total += len(b[0])
            ends.append((total, b[2] + 1))
        assert out.consumed_bytes in {0} | {end for end, _nxt in ends}
        expected_next = max([nxt for end, nxt in ends if end <= out.consumed_bytes], default=position)
        assert out.next_fetch_offset == expected_next
        for b, records in zip(out.batches, target_batches(out)):
            assert b.base_sequence == sequence and b.records_count == len(records)
            sequence += len(records)
            offsets = [int(r.key[1:]) for r in records]
            assert b.upstream_base_offset <= offsets[0] and offsets[-1] <= b.upstream_last_offset
            forwarded += records
        assert out.next_sequence == sequence
        position = out.next_fetch_offset
    else:
        pytest.fail("the fetch loop made no progress")
    assert position == max(lso, start)
    expected = [log.records[o] for o in sorted(log.committed) if start <= o < lso]
    assert [(r.key, r.value, r.headers, r.timestamp) for r in forwarded] == expected


def test_restamp_producer_gives_a_valid_batch_under_the_new_producer():
    from core.protocol.records import build_batch, decode_batch, iter_batch_headers
    from mirror.batches import restamp_producer
    original = build_batch([(b"k", b"v", [], 1000), (b"k2", b"v2", [], 1001)],
                           producer_id=7, producer_epoch=0, base_sequence=40)
    out = restamp_producer(original, 9, 2, 2**31 + 5)          # sequences wrap as on the wire
    [info] = list(iter_batch_headers(out))
    assert (info.producer_id, info.producer_epoch, info.base_sequence) == (9, 2, 5)
    records = decode_batch(out, info, verify_crc=True)          # the CRC was recomputed
    assert [(r.key, r.value) for r in records] == [(b"k", b"v"), (b"k2", b"v2")]


# --------------------------------------------------------------------------- keep_producers (DR links)


def _kept_log() -> tuple[bytearray, list[str]]:
    """Batches of every kind a DR link meets, and what each should be written under."""
    parts, expect = bytearray(), []
    offset = 0

    def add(n, expected, **kw):
        nonlocal offset
        parts.extend(build_batch([rec(offset + i) for i in range(n)], base_offset=offset, **kw))
        expect.append(expected)
        offset += n
    add(3, "kept", producer_id=7001, producer_epoch=2, base_sequence=40)       # an idempotent app producer
    add(2, "mirror")                                                            # no producer
    add(2, "kept", producer_id=7001, producer_epoch=2, base_sequence=43)
    add(2, "mirror", producer_id=9000, producer_epoch=0, base_sequence=0, transactional=True)
    add(1, "kept", producer_id=8123, producer_epoch=0, base_sequence=2**31 - 1)  # at the sequence wrap
    parts.extend(marker_batch(offset, 9000, commit=True))
    offset += 1
    return parts, expect


@pytest.mark.parametrize("keep", [True, False])
def test_a_dr_link_keeps_an_idempotent_producers_fields_and_stamps_the_rest(keep):
    log, expect = _kept_log()
    out = prepare_for_target(log, fetch_offset=0, producer=MIRROR, keep_producers=keep)
    headers = [read_batch_header(view) for view in out.views()]
    assert [b.kept_producer for b in out.batches] == [e == "kept" and keep for e in expect]
    sources = [h for h in scan_batches(log) if not h.is_control]
    mirror_seq = 0
    for batch, dst, src in zip(out.batches, headers, sources):
        if batch.kept_producer:
            assert (dst.producer_id, dst.producer_epoch, dst.base_sequence) == \
                (src.producer_id, src.producer_epoch, src.base_sequence)
        else:
            # The mirror's sequence counts only the batches it stamps.
            assert (dst.producer_id, dst.producer_epoch, dst.base_sequence) == (4242, 3, mirror_seq)
            mirror_seq += dst.records_count
        assert not dst.attributes & ATTR_TRANSACTIONAL
        assert dst.crc == crc32c(bytes(view_of(out, batch))[CRC_START:])
    assert out.next_sequence == mirror_seq
    scan_batches(out.data, from_client=True)        # a Kafka target takes every one


def test_a_batch_rebuilt_from_a_position_inside_it_cannot_keep_its_producers_sequences():
    buf = build_batch([rec(10 + i) for i in range(6)], base_offset=10, producer_id=7001, producer_epoch=0,
                      base_sequence=10)
    out = prepare_for_target(buf, fetch_offset=13, producer=MIRROR, keep_producers=True)
    (batch,) = out.batches
    assert batch.reencoded and not batch.kept_producer
    assert read_batch_header(out.data).producer_id == 4242


def view_of(out: PreparedBatches, batch) -> memoryview:
    return memoryview(out.data)[batch.position:batch.position + batch.size]


# --------------------------------------------------------------------------- copy_transactions (DR links)


def test_a_dr_link_keeps_committed_transactions_as_transactions_and_forwards_their_commit():
    """mirror/txn_gate.py: a committed transaction's batches keep producer, sequences and the
    transactional bit, and its COMMIT marker is forwarded as it is (for the copier to hold);
    an aborted transaction's batches and its ABORT marker are not forwarded at all."""
    log = bytearray()
    log += build_batch([rec(0), rec(1)], base_offset=0, producer_id=9000, producer_epoch=2, base_sequence=7,
                       transactional=True)
    log += build_batch([rec(2)], base_offset=2, producer_id=7001, producer_epoch=0, base_sequence=0)
    log += marker_batch(3, 9000, commit=True, epoch=2)
    log += build_batch([rec(4)], base_offset=4, producer_id=9100, producer_epoch=0, base_sequence=0,
                       transactional=True)
    log += marker_batch(5, 9100, commit=False)
    out = prepare_for_target(log, fetch_offset=0, aborted=[(9100, 4)], producer=MIRROR, keep_producers=True,
                             copy_transactions=True)
    headers = [read_batch_header(view) for view in out.views()]
    assert [(b.upstream_base_offset, b.transactional, b.marker, b.kept_producer) for b in out.batches] == [
        (0, True, False, True), (2, False, False, True), (3, False, True, True)]
    txn, _, commit = headers
    assert (txn.producer_id, txn.producer_epoch, txn.base_sequence) == (9000, 2, 7)
    assert txn.attributes & ATTR_TRANSACTIONAL and not txn.is_control
    assert commit.is_control and commit.attributes & ATTR_TRANSACTIONAL and commit.producer_id == 9000
    assert bytes(view_of(out, out.batches[2]))[HEADER_SIZE:] == bytes(marker_batch(3, 9000, commit=True, epoch=2))[HEADER_SIZE:]
    for batch, dst in zip(out.batches, headers):
        assert dst.base_offset == 0 and dst.crc == crc32c(bytes(view_of(out, batch))[CRC_START:])
    assert (out.skipped_aborted, out.skipped_control, out.next_sequence, out.next_fetch_offset) == (1, 1, 0, 6)
    scan_batches(out.data)
    # Without the option the same log is copied as before: plain records, no marker.
    plain = prepare_for_target(log, fetch_offset=0, aborted=[(9100, 4)], producer=MIRROR, keep_producers=True)
    assert [(b.transactional, b.marker) for b in plain.batches] == [(False, False), (False, False)]
    # A resume past the marker does not forward it again.
    again = prepare_for_target(log, fetch_offset=4, aborted=[(9100, 4)], producer=MIRROR, keep_producers=True,
                               copy_transactions=True)
    assert again.batches == []
