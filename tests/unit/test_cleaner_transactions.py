"""Transaction-aware compaction (core/log/cleaner.py, "Transactions" in its docstring).

Every check here reads the log the way a read_committed consumer does (Kafka's
CompletedFetch: the fetch's aborted-transaction list, producers added at an entry's first
offset and dropped at their ABORT marker) and compares with what it read before cleaning.
"""
from __future__ import annotations

import heapq
import struct
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.broker.producer_state import read_end_txn_marker
from core.log import AbortedTxn, Log, LogConfig
from core.log import cleaner
from core.protocol.compression import Compression
from core.protocol.records import (ATTR_DELETE_HORIZON, HEADER_SIZE, BatchInfo, ControlRecord,
                                   build_batch, decode_batch, iter_batch_headers, scan_batches)
from core.protocol.varint import read_varint, read_varlong

T0 = 1_000_000_000
RETENTION = 10_000          # delete.retention.ms of these logs
ABORT, COMMIT = 0, 1


class Clock:
    def __init__(self, t: int = T0):
        self.t = t

    def __call__(self) -> int:
        return self.t


def config(**kw) -> LogConfig:
    base = dict(segment_bytes=400, cleanup_policy=("compact",), delete_retention_ms=RETENTION,
                index_interval_bytes=50)
    base.update(kw)
    return LogConfig(**base)


def marker_batch(pid: int, kind: int, ts: int, epoch: int = 0, coordinator_epoch: int = 0) -> bytes:
    return build_batch([(struct.pack(">hh", 0, kind), struct.pack(">hi", 0, coordinator_epoch), [], ts)],
                       producer_id=pid, producer_epoch=epoch, transactional=True, control=True)


@dataclass
class TxnLog:
    """A compacted Log written as the partition layer writes it: transactional batches,
    markers, and an aborted-transaction entry with the right last stable offset for every
    abort that had records (Kafka's ProducerStateManager gives none for an empty one)."""
    directory: Path
    cfg: LogConfig = field(default_factory=config)
    clock: Clock = field(default_factory=Clock)
    open: dict[int, int] = field(default_factory=dict)   # pid -> first offset of its transaction
    seq: dict[int, int] = field(default_factory=dict)
    sent: dict[int, list[int]] = field(default_factory=dict)   # pid -> its open batches
    ended: list[tuple[list[int], int]] = field(default_factory=list)   # (batches, marker)

    def __post_init__(self):
        self.log = Log.open(self.directory, self.cfg, clock=self.clock)

    def put(self, key: bytes, value: bytes | None) -> int:
        return self.log.append(build_batch([(key, value, [], self.clock.t)])).base_offset

    def send(self, pid: int, *kvs: tuple[bytes, bytes | None],
             compression: Compression = Compression.NONE) -> int:
        seq = self.seq.get(pid, 0)
        first = self.log.append(build_batch([(k, v, [], self.clock.t) for k, v in kvs],
                                            producer_id=pid, producer_epoch=0, base_sequence=seq,
                                            transactional=True, compression=compression)).base_offset
        self.seq[pid] = seq + len(kvs)
        self.open.setdefault(pid, first)
        self.sent.setdefault(pid, []).append(first)
        return first

    def end(self, pid: int, commit: bool) -> int:
        first = self.open.pop(pid, None)
        off = self.log.append(marker_batch(pid, COMMIT if commit else ABORT, self.clock.t)).base_offset
        self.ended.append((self.sent.pop(pid, []), off))
        if not commit and first is not None:
            lso = min(self.open.values(), default=off + 1)   # Kafka: the LSO once it completed
            assert self.log.append_aborted_txn(AbortedTxn(pid, first, off, lso))
        return off

    def commit(self, pid: int) -> int:
        return self.end(pid, True)

    def abort(self, pid: int) -> int:
        return self.end(pid, False)

    @property
    def lso(self) -> int:
        return min(self.open.values(), default=self.log.log_end_offset)

    def close_segments(self) -> None:
        """Roll, so everything written so far lies in closed (cleanable) segments."""
        self.log.roll()

    def clean(self, now: int | None = None, upper: int | None = -1) -> cleaner.CleanResult:
        """One pass with the bound the partition passes: min(high watermark, LSO)."""
        bound = self.lso if upper == -1 else upper
        return cleaner.clean(self.log, self.clock.t if now is None else now,
                             upper_bound_offset=bound)

    def reopen(self) -> None:
        self.log.close()
        self.log = Log.open(self.directory, self.cfg, clock=self.clock)


# ------------------------------------------------------------------ readers


def batches(log: Log) -> list[tuple[BatchInfo, bytes]]:
    """Every batch of the log, in order, with its bytes (position 0)."""
    out: list[tuple[BatchInfo, bytes]] = []
    off = log.log_start_offset
    while off < log.log_end_offset:
        r = log.read(off, 1 << 20)
        if not r.data:
            break
        raw = bytes(r.data)
        for info in iter_batch_headers(raw):
            if info.last_offset >= off and (not out or info.base_offset > out[-1][0].last_offset):
                out.append((info._replace(position=0), raw[info.position:info.position + info.size]))
        off = r.next_offset
    return out


def read_committed(log: Log, upper: int | None = None) -> dict[bytes, bytes]:
    """key -> latest value a read_committed consumer sees reading [log start, upper) in one
    fetch, as Kafka's CompletedFetch does; deleted keys are absent."""
    upper = log.log_end_offset if upper is None else upper
    pending = [(t.first_offset, t.producer_id)
               for t in log.collect_aborted_txns(log.log_start_offset, upper)]
    heapq.heapify(pending)
    aborted: set[int] = set()
    view: dict[bytes, bytes | None] = {}
    for info, raw in batches(log):
        if info.base_offset >= upper:
            break
        if info.producer_id >= 0:
            while pending and pending[0][0] <= info.last_offset:
                aborted.add(heapq.heappop(pending)[1])
            if info.is_control:
                recs = decode_batch(raw, info)
                if recs and isinstance(recs[0], ControlRecord) and recs[0].type == ABORT:
                    aborted.discard(info.producer_id)
                continue
            if info.is_transactional and info.producer_id in aborted:
                continue
        if info.is_control:
            continue
        for rec in decode_batch(raw, info):
            assert not isinstance(rec, ControlRecord)
            if rec.offset < upper and rec.key is not None:
                view[rec.key] = rec.value
    return {k: v for k, v in view.items() if v is not None}


def data_records(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every data record: what read_uncommitted returns."""
    out = []
    for info, raw in batches(log):
        if not info.is_control:
            out += [(r.offset, r.key, r.value) for r in decode_batch(raw, info)
                    if not isinstance(r, ControlRecord)]
    return out


def markers(log: Log) -> dict[int, tuple[int, BatchInfo]]:
    """offset -> (control type or -1 if empty, header) of every control batch."""
    out = {}
    for info, raw in batches(log):
        if info.is_control:
            recs = decode_batch(raw, info)
            kind = recs[0].type if recs and isinstance(recs[0], ControlRecord) else -1
            out[info.base_offset] = (kind, info)
    return out


def entries(log: Log) -> list[AbortedTxn]:
    return log.collect_aborted_txns(log.log_start_offset, log.log_end_offset)


def check_invariants(t: TxnLog) -> None:
    """An aborted-transaction entry and its ABORT marker are in the log together, and a
    transaction that has a record left has its marker."""
    ms = markers(t.log)
    for e in entries(t.log):
        assert ms.get(e.last_offset, (None,))[0] == ABORT, f"{e} lost its marker"
    left = {info.base_offset for info, _raw in batches(t.log) if info.records_count}
    for sent, marker in t.ended:
        assert marker in ms or not left.intersection(sent), f"marker {marker} went before its records"


def filler(t: TxnLog, n: int = 12, tag: bytes = b"f") -> None:
    """Non-transactional records of their own keys, enough for a few segments."""
    for i in range(n):
        t.put(tag + b"%d" % i, b"x" * 20)


# ---------------------------------------------------------- aborted records


def test_committed_value_survives_a_later_aborted_record_of_its_key(tmp_path):
    # The bug: the aborted record was the key's latest in the offset map, so compaction
    # removed the committed one and read_committed lost the key.
    t = TxnLog(tmp_path)
    t.put(b"k", b"committed")
    t.send(7, (b"k", b"aborted"))
    t.abort(7)
    filler(t)
    t.close_segments()
    before = read_committed(t.log)
    assert before[b"k"] == b"committed"
    res = t.clean()
    assert read_committed(t.log) == before
    assert [(k, v) for _o, k, v in data_records(t.log) if k == b"k"] == [(b"k", b"committed")]
    assert res.cleaned and res.aborted_records_removed == 1
    t.reopen()
    assert read_committed(t.log) == before


def test_an_abort_marker_in_the_active_segment_still_counts(tmp_path):
    # The records lie in closed segments, the marker and its entry in the active one.
    t = TxnLog(tmp_path)
    t.put(b"k", b"committed")
    t.send(7, (b"k", b"aborted"))
    filler(t)
    t.close_segments()
    t.abort(7)
    assert t.log.segments[-1].base_offset <= entries(t.log)[0].last_offset
    before = read_committed(t.log)
    res = t.clean()
    assert read_committed(t.log) == before and before[b"k"] == b"committed"
    assert res.aborted_records_removed == 1


def test_txn_offset_commit_survives_an_aborted_one(tmp_path):
    # __consumer_offsets: TxnOffsetCommit writes offsets as transactional records; a
    # committed one must survive a later aborted one of the same group/partition key.
    t = TxnLog(tmp_path)
    t.send(1, (b"g/t/0", b"offset=10"))
    t.commit(1)
    t.send(2, (b"g/t/0", b"offset=20"), (b"g/t/1", b"offset=5"))
    t.abort(2)
    t.send(1, (b"g/t/1", b"offset=7"))
    t.commit(1)
    filler(t)
    t.close_segments()
    before = read_committed(t.log)
    assert before[b"g/t/0"] == b"offset=10" and before[b"g/t/1"] == b"offset=7"
    t.clean()
    assert read_committed(t.log) == before
    check_invariants(t)


def test_aborted_records_are_removed_and_committed_ones_compact(tmp_path):
    t = TxnLog(tmp_path)
    t.send(1, (b"a", b"a1"), (b"b", b"b1"))
    t.commit(1)
    t.send(2, (b"c", b"c-aborted"), (b"d", b"d-aborted"), compression=Compression.GZIP)
    t.send(3, (b"a", b"a2"))             # interleaved committed transaction
    t.send(2, (b"c", b"c-aborted2"))
    t.abort(2)
    t.commit(3)
    t.put(b"b", b"b2")                   # a plain record supersedes a committed one
    filler(t)
    t.close_segments()
    before = read_committed(t.log)
    res = t.clean()
    assert res.aborted_records_removed == 3
    recs = data_records(t.log)
    assert not [r for r in recs if r[2] is not None and r[2].endswith((b"aborted", b"aborted2"))]
    assert [(k, v) for _o, k, v in recs if k in (b"a", b"b")] == [(b"a", b"a2"), (b"b", b"b2")]
    assert read_committed(t.log) == before == {**before, b"a": b"a2", b"b": b"b2"}
    assert b"c" not in before and b"d" not in before
    check_invariants(t)


def test_aborted_records_do_not_fill_the_offset_map(tmp_path):
    # The map budget counts mapped keys only: a big aborted transaction neither takes room
    # nor stops the map short of the committed data after it.
    t = TxnLog(tmp_path, cfg=config(segment_bytes=100_000))
    t.send(5, *[(b"ab%d" % i, b"x") for i in range(50)])
    t.abort(5)
    for i in range(10):
        t.put(b"k%d" % (i % 3), b"v%d" % i)
    t.close_segments()
    before = read_committed(t.log)
    entries_for_4_keys = 4 * 24 * 10 // 9 + 1
    res = cleaner.clean(t.log, T0, dedupe_buffer_size=entries_for_4_keys,
                        upper_bound_offset=t.lso)
    assert not res.map_full and res.end_offset == t.log.segments[0].next_offset
    assert read_committed(t.log) == before
    assert [k for _o, k, _v in data_records(t.log)] == [b"k1", b"k2", b"k0"]


# ------------------------------------------------------------------ markers


def test_markers_stay_while_their_transaction_has_records(tmp_path):
    t = TxnLog(tmp_path)
    t.send(1, (b"a", b"1"))
    c = t.commit(1)
    t.send(2, (b"b", b"1"))
    a = t.abort(2)
    t.send(2, (b"b", b"2"))
    t.commit(2)                                  # pid 2's last batch
    t.send(1, (b"z", b"1"))
    t.commit(1)                                  # pid 1's last batch
    filler(t)
    t.close_segments()
    before = read_committed(t.log)
    for now in (T0, T0 + 1, T0 + 2 * RETENTION, T0 + 3 * RETENTION):
        t.clean(now)
        ms = markers(t.log)
        assert ms[c][0] == COMMIT                # "a" is still there
        assert not ms[c][1].attributes & ATTR_DELETE_HORIZON
        if now == T0:
            assert a in ms, "its transaction had a batch in this pass"
        assert read_committed(t.log) == before
        check_invariants(t)
    assert a not in markers(t.log) and entries(t.log) == [], "emptied, past its horizon: marker and entry gone"


def test_marker_of_an_emptied_commit_is_stamped_then_removed_after_the_horizon(tmp_path):
    t = TxnLog(tmp_path)
    t.send(1, (b"a", b"old"))
    c = t.commit(1)
    t.put(b"a", b"new")                          # compaction empties the transaction
    t.send(1, (b"z", b"1"))
    t.commit(1)                                  # so the marker at c is not pid 1's last
    filler(t)
    t.close_segments()
    before = read_committed(t.log)
    res = t.clean(T0)                            # removes "old"; its marker stays this pass
    assert res.records_removed >= 1 and markers(t.log)[c][0] == COMMIT
    assert not markers(t.log)[c][1].attributes & ATTR_DELETE_HORIZON
    res = t.clean(T0 + 100)                      # finds the transaction empty: stamps it
    kind, info = markers(t.log)[c]
    assert res.cleaned and kind == COMMIT
    assert info.attributes & ATTR_DELETE_HORIZON and info.base_timestamp == T0 + 100 + RETENTION
    assert info.max_timestamp == T0              # the record keeps its timestamp
    assert not t.clean(T0 + 100 + RETENTION - 1).cleaned      # before the horizon: no change
    assert c in markers(t.log)
    res = t.clean(T0 + 100 + RETENTION)
    assert res.markers_removed == 1 and c not in markers(t.log)
    assert read_committed(t.log) == before
    assert not t.clean(T0 + 10 * RETENTION).cleaned            # a fixpoint


def test_stamped_marker_keeps_its_record_timestamp_crc_and_meaning(tmp_path):
    t = TxnLog(tmp_path)
    t.clock.t = T0 - 5_000
    t.send(1, (b"a", b"old"))
    c = t.commit(1)
    t.clock.t = T0
    t.put(b"a", b"new")
    t.send(1, (b"z", b"1"))
    t.commit(1)
    filler(t)
    t.close_segments()
    t.clean(T0)
    t.clean(T0 + 1)
    raw = next(r for info, r in batches(t.log) if info.base_offset == c)
    (info,) = scan_batches(raw)                  # framing and CRC32C check
    assert info.attributes & ATTR_DELETE_HORIZON and info.base_timestamp == T0 + 1 + RETENTION
    _length, pos = read_varint(raw, HEADER_SIZE)
    delta, _pos = read_varlong(raw, pos + 1)
    assert info.base_timestamp + delta == T0 - 5_000 == info.max_timestamp
    m = read_end_txn_marker(raw, info)           # the partition's replay still reads it
    assert m is not None and m.is_commit
    assert decode_batch(raw, info) == [ControlRecord(c, COMMIT, 1)]


def test_empty_abort_without_an_entry_goes_after_the_horizon(tmp_path):
    # The coordinator writes markers to every partition of a transaction, even one that got
    # no records; such an abort has no index entry, and its marker may go.
    t = TxnLog(tmp_path)
    a = t.abort(4)
    t.send(4, (b"z", b"1"))
    t.commit(4)
    filler(t)
    t.close_segments()
    assert entries(t.log) == []
    t.clean(T0)
    kind, info = markers(t.log)[a]
    assert kind == ABORT and info.base_timestamp == T0 + RETENTION
    t.clean(T0 + RETENTION - 1)
    assert a in markers(t.log)
    assert t.clean(T0 + RETENTION).markers_removed == 1
    assert a not in markers(t.log)


def test_abort_marker_goes_with_its_entry_once_emptied_and_past_the_horizon(tmp_path):
    # As in Kafka: an entry without its marker would make a read_committed consumer skip the
    # producer's later transactions of the same fetch, so they go together, and only once
    # the transaction has no batch left and the marker's delete horizon has passed.
    t = TxnLog(tmp_path)
    t.put(b"k", b"v0")
    t.send(3, (b"k", b"aborted"))
    a = t.abort(3)
    t.send(3, (b"k", b"v1"))
    t.commit(3)
    t.send(3, (b"x", b"1"))
    t.commit(3)
    filler(t)
    t.close_segments()
    before = read_committed(t.log)
    assert before[b"k"] == b"v1"
    txns = entries(t.log)
    assert [e.last_offset for e in txns] == [a]
    t.clean(T0)                                  # the aborted record goes; its marker and entry stay
    assert entries(t.log) == txns and markers(t.log)[a][0] == ABORT
    t.clean(T0 + 1)                              # now empty: stamped with its delete horizon
    assert entries(t.log) == txns and markers(t.log)[a][1].attributes & ATTR_DELETE_HORIZON
    assert read_committed(t.log) == before
    t.clean(T0 + RETENTION)                      # before the horizon: nothing changes
    assert entries(t.log) == txns and a in markers(t.log)
    result = t.clean(T0 + RETENTION + 2)
    assert result.markers_removed == 1
    assert a not in markers(t.log) and entries(t.log) == []
    assert read_committed(t.log) == before
    check_invariants(t)
    t.reopen()                                   # recovery finds neither again
    assert entries(t.log) == [] and a not in markers(t.log) and read_committed(t.log) == before


class _Crash(Exception):
    pass


@pytest.mark.parametrize("step", ["swap", "deleted", "renamed"])
def test_a_crash_while_a_marker_and_its_entry_go_leaves_neither(tmp_path, step):
    # The segment that loses the marker held the only entry: its index is swapped for an
    # empty one like every other file, so no crash point leaves the entry behind its marker.
    t = TxnLog(tmp_path)
    t.send(3, (b"k", b"aborted"))
    a = t.abort(3)
    t.send(3, (b"k", b"v1"))
    t.commit(3)
    filler(t)
    t.close_segments()
    before = read_committed(t.log)
    t.clean(T0)
    t.clean(T0 + 1)
    assert [e.last_offset for e in entries(t.log)] == [a]
    t.log.flush()                                # recovery point at the active segment: the
                                                 # restart re-reads nothing, so keeps every index

    def hook(s):
        if s == step:
            raise _Crash(s)

    with pytest.raises(_Crash):
        cleaner.clean(t.log, T0 + RETENTION + 2, upper_bound_offset=t.lso, hook=hook)
    t.log._abandon()
    t.log = Log.open(tmp_path, t.cfg, clock=t.clock)
    assert a not in markers(t.log) and entries(t.log) == []
    assert read_committed(t.log) == before
    check_invariants(t)


def test_a_transaction_past_the_bound_does_not_keep_an_earlier_empty_ones_marker(tmp_path):
    # Producer 5's next transaction has records below the bound and its marker past it;
    # that must not count for its earlier, empty transaction, in any pass over the log.
    t = TxnLog(tmp_path, cfg=config(segment_bytes=300))
    m = t.commit(5)
    filler(t, 4)
    data = t.send(5, (b"a", b"1"))
    t.close_segments()
    filler(t, 4, b"g")
    t.commit(5)
    t.close_segments()
    bound = min(s.base_offset for s in t.log.segments if s.base_offset > data)
    t.clean(upper=bound)
    kind, info = markers(t.log)[m]
    assert kind == COMMIT and info.attributes & ATTR_DELETE_HORIZON


def test_last_batch_of_a_producer_is_kept_even_if_it_is_an_expired_marker(tmp_path):
    t = TxnLog(tmp_path)
    t.send(9, (b"a", b"old"))
    c = t.commit(9)                              # pid 9's last batch: its epoch fences zombies
    t.put(b"a", b"new")
    filler(t)
    t.close_segments()
    for now in (T0, T0 + 1, T0 + 2 * RETENTION):
        t.clean(now)
    kind, info = markers(t.log)[c]
    assert kind == COMMIT and info.records_count == 1 and info.producer_id == 9


def test_an_emptied_batch_goes_once_its_producer_wrote_again(tmp_path):
    # Kept empty while it is producer 5's last batch (its sequence numbers); once the
    # producer wrote again it goes, as in Kafka, and pins no marker.
    t = TxnLog(tmp_path)
    b = t.log.append(build_batch([(b"a", b"1", [], T0)], producer_id=5, producer_epoch=0,
                                 base_sequence=0)).base_offset
    t.put(b"a", b"2")
    filler(t, 4)
    t.close_segments()
    t.clean()
    info = next(i for i, _r in batches(t.log) if i.base_offset == b)
    assert info.records_count == 0 and info.producer_id == 5
    t.log.append(build_batch([(b"z", b"1", [], T0)], producer_id=5, producer_epoch=0,
                             base_sequence=1))
    filler(t, 4, b"g")
    t.close_segments()
    assert t.clean().cleaned
    assert b not in {i.base_offset for i, _r in batches(t.log)}


def test_other_control_records_are_kept(tmp_path):
    t = TxnLog(tmp_path)
    leader_change = build_batch([(struct.pack(">hh", 0, 2), b"\x00\x00", [], T0)],
                                producer_id=8, producer_epoch=0, control=True)
    off = t.log.append(leader_change).base_offset
    t.send(8, (b"z", b"1"))
    t.commit(8)
    filler(t)
    t.close_segments()
    for now in (T0, T0 + 1, T0 + 2 * RETENTION):
        t.clean(now)
    _kind, info = markers(t.log)[off]
    assert info.records_count == 1 and not info.attributes & ATTR_DELETE_HORIZON


def test_entries_stay_with_records_that_remain(tmp_path):
    # An aborted transaction spanning the first uncleanable offset keeps its records above
    # the bound, and its entry, so read_committed still skips them.
    t = TxnLog(tmp_path, cfg=config(segment_bytes=300))
    t.put(b"k", b"v0")
    t.send(6, (b"k", b"aborted-1"))
    filler(t, 6, b"f")
    later = t.send(2, (b"k", b"later"))          # committed after pid 6 aborts
    filler(t, 6, b"g")
    t.send(6, (b"k", b"aborted-2"))
    t.abort(6)
    t.commit(2)
    t.close_segments()
    bound = max(s.base_offset for s in t.log.segments if s.base_offset <= later)
    assert bound > 2
    before = read_committed(t.log, t.log.log_end_offset)
    res = t.clean(upper=bound)
    assert res.cleaned and res.aborted_records_removed == 1
    values = [v for _o, k, v in data_records(t.log) if k == b"k"]
    assert values == [b"v0", b"later", b"aborted-2"]
    assert [e.producer_id for e in entries(t.log)] == [6]
    assert read_committed(t.log) == before and before[b"k"] == b"later"
    check_invariants(t)


# ------------------------------------------------------------------ bounds


def segment_bytes_of(log: Log) -> dict[int, bytes]:
    return {s.base_offset: (log.directory / f"{s.base_offset:020d}.log").read_bytes()
            for s in log.segments}


@pytest.mark.parametrize("lag", [0, 1_000])
def test_nothing_at_or_past_the_upper_bound_is_cleaned(tmp_path, lag):
    t = TxnLog(tmp_path, cfg=config(segment_bytes=300, min_compaction_lag_ms=lag))
    t.clock.t = T0 - 10_000                      # old enough for the lag...
    for i in range(30):
        t.put(b"k%d" % (i % 3), b"v%d" % i)
    t.clock.t = T0                               # ...except the last segment
    t.close_segments()
    t.put(b"k0", b"recent")
    t.close_segments()
    segs = t.log.segments
    assert len(segs) >= 5
    bound = segs[2].base_offset + 1              # inside the third segment
    above = {b: raw for b, raw in segment_bytes_of(t.log).items() if b >= segs[2].base_offset}
    res = t.clean(T0, upper=bound)
    assert res.cleaned and res.end_offset <= segs[2].base_offset
    after = segment_bytes_of(t.log)
    assert {b: raw for b, raw in after.items() if b >= segs[2].base_offset} == above
    assert all(b < segs[2].base_offset or b in above for b in after)


def test_an_open_transaction_bounds_cleaning_even_without_an_upper_bound(tmp_path):
    # A caller that passed only the high watermark must not make the cleaner take an
    # undecided record for a committed one: had it mapped "maybe", the abort that follows
    # would leave read_committed without "k".
    t = TxnLog(tmp_path, cfg=config(segment_bytes=300))
    t.put(b"k", b"committed")
    filler(t, 6)
    t.send(4, (b"k", b"maybe"))
    filler(t, 12, b"g")
    t.close_segments()
    res = t.clean(upper=None)
    assert res.end_offset <= t.open[4]
    assert b"maybe" in [v for _o, _k, v in data_records(t.log)]
    t.abort(4)
    t.close_segments()
    assert read_committed(t.log)[b"k"] == b"committed"
    t.clean(upper=None)
    assert read_committed(t.log)[b"k"] == b"committed"
    check_invariants(t)


# ------------------------------------------------------------------ table


# Each case: a script of operations; then, once cleaned past every horizon, the
# read_committed view, what is left of the key "k" (every value in the log, as
# read_uncommitted reads it) and the markers of the script left (a marker stays while its
# transaction has records; an ABORT one goes with its index entry).
#   ("put", key, value) | ("send", pid, key, value) | ("commit", pid) | ("abort", pid)
CASES = {
    "aborted after committed": (
        [("put", b"k", b"1"), ("send", 1, b"k", b"2"), ("abort", 1)],
        {b"k": b"1"}, [b"1"], []),
    "committed txn after aborted txn": (
        [("send", 1, b"k", b"1"), ("abort", 1), ("send", 1, b"k", b"2"), ("commit", 1)],
        {b"k": b"2"}, [b"2"], [COMMIT]),
    "aborted tombstone does not delete": (
        [("put", b"k", b"1"), ("send", 2, b"k", None), ("abort", 2)],
        {b"k": b"1"}, [b"1"], []),
    "committed tombstone deletes": (
        [("put", b"k", b"1"), ("send", 2, b"k", None), ("commit", 2)],
        {}, [], []),
    "interleaved: aborted then committed, other producers": (
        [("send", 1, b"k", b"a"), ("send", 2, b"k", b"c"), ("abort", 1), ("commit", 2)],
        {b"k": b"c"}, [b"c"], [COMMIT]),
    "interleaved: committed then aborted, other producers": (
        [("send", 2, b"k", b"c"), ("send", 1, b"k", b"a"), ("commit", 2), ("abort", 1)],
        {b"k": b"c"}, [b"c"], [COMMIT]),
    "aborted between two plain writes": (
        [("put", b"k", b"1"), ("send", 3, b"k", b"a"), ("put", b"k", b"2"), ("abort", 3)],
        {b"k": b"2"}, [b"2"], []),
    "committed transaction superseded by a plain write": (
        [("send", 1, b"k", b"t"), ("commit", 1), ("put", b"k", b"p")],
        {b"k": b"p"}, [b"p"], []),
    "empty transactions": (
        [("put", b"k", b"1"), ("commit", 1), ("abort", 2)],
        {b"k": b"1"}, [b"1"], []),
    "only aborted writes": (
        [("send", 1, b"k", b"a"), ("abort", 1), ("send", 1, b"k", b"b"), ("abort", 1)],
        {}, [], []),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_table(tmp_path, name):
    script, view, left, kinds = CASES[name]
    t = TxnLog(tmp_path)
    for op in script:
        if op[0] == "put":
            t.put(op[1], op[2])
        elif op[0] == "send":
            t.send(op[1], (op[2], op[3]))
        else:
            t.end(op[1], op[0] == "commit")
    trailer = t.log.log_end_offset
    for pid in (1, 2, 3):                        # every producer ends on a later transaction
        t.send(pid, (b"last%d" % pid, b"x"))
        t.commit(pid)
    filler(t)
    t.close_segments()
    expected = {**view, **{b"last%d" % p: b"x" for p in (1, 2, 3)},
                **{b"f%d" % i: b"x" * 20 for i in range(12)}}
    assert read_committed(t.log) == expected
    for now in (T0, T0 + 1, T0 + 1 + RETENTION, T0 + 2 + 2 * RETENTION, T0 + 3 + 4 * RETENTION):
        t.clean(now)
        assert read_committed(t.log) == expected
        check_invariants(t)
    assert [v for _o, k, v in data_records(t.log) if k == b"k"] == left
    assert [kind for o, (kind, _i) in sorted(markers(t.log).items()) if o < trailer] == kinds
    assert {e.last_offset for e in entries(t.log)} == {
        o for o, (kind, _i) in markers(t.log).items() if kind == ABORT and o < trailer}


# ------------------------------------------------------------------ property

op = st.one_of(
    st.tuples(st.just("put"), st.sampled_from([b"a", b"b", b"c"]),
              st.one_of(st.none(), st.sampled_from([b"1", b"2", b"3"]))),
    st.tuples(st.just("send"), st.integers(1, 3), st.sampled_from([b"a", b"b", b"c"]),
              st.one_of(st.none(), st.sampled_from([b"4", b"5", b"6"])),
              st.sampled_from([Compression.NONE, Compression.GZIP])),
    st.tuples(st.just("end"), st.integers(1, 3), st.booleans()),
    st.tuples(st.just("roll"),),
    st.tuples(st.just("clean"),),
)


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=st.lists(op, min_size=1, max_size=40), finish=st.booleans(),
       segment_bytes=st.sampled_from([200, 400, 5000]))
def test_read_committed_sees_the_same_after_compaction(tmp_path_factory, script, finish,
                                                       segment_bytes):
    t = TxnLog(tmp_path_factory.mktemp("p"), cfg=config(segment_bytes=segment_bytes))
    clock = t.clock

    def check(views: list) -> None:
        views.append(read_committed(t.log, t.lso))
        check_invariants(t)
        assert views[-1] == views[0], "read_committed changed"

    views: list = []
    for o in script:
        clock.t += 1
        if o[0] == "put":
            t.put(o[1], o[2])
        elif o[0] == "send":
            t.send(o[1], (o[2], o[3]), (b"d", o[3]), compression=o[4])
        elif o[0] == "end":                      # an empty transaction's too
            t.end(o[1], o[2])
        elif o[0] == "roll":
            t.close_segments()
        else:
            views = [read_committed(t.log, t.lso)]
            t.clean()
            check(views)
    if finish:
        for pid in sorted(t.open):
            t.end(pid, pid % 2 == 0)
    t.close_segments()
    views = [read_committed(t.log, t.lso)]
    last_of = {i.producer_id: i.base_offset for i, _r in batches(t.log) if i.producer_id >= 0}
    for advance in (0, 1, RETENTION, RETENTION, 3 * RETENTION):
        clock.t += advance
        t.clean()
        check(views)
    assert last_of == {i.producer_id: i.base_offset for i, _r in batches(t.log) if i.producer_id >= 0}
    if not t.open:                               # everything decided and cleaned:
        heads = [info for info, _raw in batches(t.log)]
        txns = entries(t.log)
        for n, info in enumerate(heads):
            if not info.is_transactional:
                continue
            pid = info.producer_id
            if not info.is_control:              # no aborted record is left
                assert not info.records_count or not any(
                    e.producer_id == pid and e.first_offset <= info.base_offset <= e.last_offset
                    for e in txns)
                continue
            # a marker is left for its transaction's data, its entry, or as pid's last batch
            prev = max((i.base_offset for i in heads[:n] if i.is_control and i.producer_id == pid),
                       default=-1)
            has_data = any(i.producer_id == pid and not i.is_control and i.base_offset > prev
                           for i in heads[:n])
            named = any(e.last_offset == info.base_offset for e in txns)
            assert has_data or named or last_of[pid] == info.base_offset
    t.reopen()
    assert read_committed(t.log, t.lso) == views[0]
    check_invariants(t)
