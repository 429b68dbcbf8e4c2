"""The aborted-transaction index (core/log/txn_index.py) and how the Log keeps it."""
from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.log import AbortedTxn, Log, LogConfig
from core.log import cleaner
from core.log.txn_index import ENTRY_SIZE, TransactionIndex, write_index_file
from core.protocol.records import build_batch

T0 = 1_000_000_000
ABORT, COMMIT = 0, 1


class Clock:
    def __init__(self, t: int = T0):
        self.t = t

    def __call__(self) -> int:
        return self.t


def data(pid: int = -1, key: bytes = b"k", value: bytes = b"v", ts: int = T0) -> bytes:
    if pid < 0:
        return build_batch([(key, value, [], ts)])
    return build_batch([(key, value, [], ts)], producer_id=pid, producer_epoch=0,
                       base_sequence=0, transactional=True)


def marker(pid: int, kind: int = ABORT, ts: int = T0) -> bytes:
    return build_batch([(struct.pack(">hh", 0, kind), struct.pack(">hi", 0, 0), [], ts)],
                       producer_id=pid, producer_epoch=0, transactional=True, control=True)


def abort(log: Log, pid: int, first: int, lso: int | None = None) -> AbortedTxn:
    """Append pid's abort marker and its index entry, as the partition layer will."""
    last = log.append(marker(pid)).base_offset
    txn = AbortedTxn(pid, first, last, last + 1 if lso is None else lso)
    assert log.append_aborted_txn(txn)
    return txn


def txn_files(d: Path) -> dict[int, bytes]:
    return {int(p.name.split(".")[0]): p.read_bytes() for p in sorted(d.glob("*.txnindex"))}


def entries_of(raw: bytes) -> list[AbortedTxn]:
    return [AbortedTxn(*e[1:]) for e in struct.iter_unpack(">hqqqq", raw)]


def segment_of(log: Log, offset: int) -> int:
    return max(s.base_offset for s in log.segments if s.base_offset <= offset)


def new_index(path: Path, base: int = 0, exists: bool = False) -> TransactionIndex:
    return TransactionIndex(path, base, file_exists=exists, max_entries=lambda: 1 << 20)


def kafka_collect(txns: list[AbortedTxn], fetch: int, upper: int) -> tuple[list[AbortedTxn], bool]:
    """Kafka's TransactionIndex.collectAbortedTxns, entry by entry from the first."""
    found = []
    for t in txns:
        if t.last_offset >= fetch and t.first_offset < upper:
            found.append(t)
        if t.last_stable_offset >= upper:
            return found, True
    return found, False


# -------------------------------------------------------------------- format


def test_entry_is_kafkas_34_bytes_version_0(tmp_path):
    idx = new_index(tmp_path / "00000000000000000000.txnindex")
    assert idx.append(AbortedTxn(0x0102030405060708, 5, 9, 10))
    assert idx.append(AbortedTxn(-1, 11, 12, 13))
    raw = (tmp_path / "00000000000000000000.txnindex").read_bytes()
    assert ENTRY_SIZE == 34
    assert raw == bytes.fromhex("0000" "0102030405060708" "0000000000000005" "0000000000000009"
                                "000000000000000a"
                                "0000" "ffffffffffffffff" "000000000000000b" "000000000000000c"
                                "000000000000000d")


def test_a_file_in_kafkas_format_is_read(tmp_path):
    path = tmp_path / "00000000000000000100.txnindex"
    path.write_bytes(struct.pack(">hqqqq", 0, 7, 90, 101, 95) + struct.pack(">hqqqq", 0, 8, 100, 150, 151))
    idx = new_index(path, base=100, exists=True)
    assert idx.entries() == [AbortedTxn(7, 90, 101, 95), AbortedTxn(8, 100, 150, 151)]


# ------------------------------------------------------------ one segment


def test_append_ignores_entries_not_past_the_last(tmp_path):
    path = tmp_path / "00000000000000000000.txnindex"
    idx = new_index(path)
    assert not path.exists()                      # created by the first entry only
    a, b = AbortedTxn(1, 0, 5, 6), AbortedTxn(2, 3, 9, 10)
    assert idx.append(a) and idx.append(b)
    before = path.read_bytes()
    assert not idx.append(b)                      # a replay re-adding the same entry
    assert not idx.append(AbortedTxn(3, 1, 7, 8))  # behind the last: already covered
    assert not idx.append(AbortedTxn(2, 3, 9, 99))
    assert path.read_bytes() == before and idx.entries() == [a, b]
    with pytest.raises(ValueError):
        idx.append(AbortedTxn(4, 20, 19, 21))     # first after last
    with pytest.raises(ValueError):
        new_index(tmp_path / "x.txnindex", base=50).append(AbortedTxn(4, 1, 49, 50))


TXNS = [AbortedTxn(1, 0, 10, 2), AbortedTxn(2, 5, 20, 8), AbortedTxn(3, 15, 30, 31),
        AbortedTxn(4, 25, 40, 41)]


@pytest.mark.parametrize("fetch,upper,expected,complete", [
    (0, 5, [0], True),            # #1 starts at 5, outside; its lso 8 >= 5 ends the search
    (0, 6, [0, 1], True),
    (11, 16, [1, 2], True),       # #0 ended before 11; #2's lso 31 >= 16 ends the search
    (21, 26, [2], True),
    (31, 35, [3], True),
    (41, 50, [], False),          # nothing left, and nothing says the search is complete
    (0, 1, [0], True),            # #0's own lso 2 >= 1
    (35, 31, [], True),           # an empty range: an earlier entry's lso passes it
])
def test_collect_table(tmp_path, fetch, upper, expected, complete):
    idx = new_index(tmp_path / "00000000000000000000.txnindex")
    for t in TXNS:
        idx.append(t)
    got = idx.collect(fetch, upper)
    assert (got.aborted, got.complete) == ([TXNS[i] for i in expected], complete)
    assert (got.aborted, got.complete) == kafka_collect(TXNS, fetch, upper)


def test_truncate_to_drops_markers_at_or_after(tmp_path):
    path = tmp_path / "00000000000000000000.txnindex"
    idx = new_index(path)
    for t in TXNS:
        idx.append(t)
    idx.truncate_to(41)
    assert idx.entries() == TXNS
    idx.truncate_to(30)                           # a marker at 30 goes
    assert idx.entries() == TXNS[:2]
    assert path.read_bytes() == b"".join(t.pack() for t in TXNS[:2])
    assert idx.collect(21, 26) == ([], False)     # and collect forgets it
    assert idx.append(AbortedTxn(9, 22, 23, 24))  # the log goes on from there
    idx.truncate_to(0)
    assert idx.entries() == [] and path.read_bytes() == b""
    assert new_index(path, exists=True).entries() == []


# (producer id, span, step, lso lag); producer id 0 with every offset 0 would be the all-zero
# entry that load takes for a zero-filled tail (Kafka never writes it: its lso would be 1).
entry_lists = st.lists(st.tuples(st.integers(1, 5), st.integers(0, 40), st.integers(1, 20),
                                 st.integers(0, 60)), max_size=12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=entry_lists, queries=st.lists(st.tuples(st.integers(0, 200), st.integers(0, 200)),
                                         min_size=1, max_size=10))
def test_collect_equals_kafkas_scan_and_survives_reload(tmp_path_factory, raw, queries):
    path = tmp_path_factory.mktemp("t") / "00000000000000000000.txnindex"
    idx = new_index(path)
    last = -1
    txns = []
    for pid, span, step, lso_delta in raw:
        last += step
        t = AbortedTxn(pid, max(0, last - span), last, max(0, last + 1 - lso_delta))
        assert idx.append(t)
        txns.append(t)
    reloaded = new_index(path, exists=bool(txns))
    for fetch, upper in queries:
        assert tuple(idx.collect(fetch, upper)) == kafka_collect(txns, fetch, upper)
        assert tuple(reloaded.collect(fetch, upper)) == kafka_collect(txns, fetch, upper)


# ----------------------------------------------------------------- a log


def build(d: Path, clock: Clock | None = None, cfg: LogConfig | None = None) -> tuple[Log, dict]:
    """Five segments (bases 0, 3, 5, 7, 11), single-record batches:

        seg 0: 0 p1   1 p2   2 p3
        seg 3: 3 ABORT p2 (ongoing p1@0, p3@2: lso 0)   4 p4
        seg 5: 5 plain   6 ABORT p1 (ongoing p3@2, p4@4: lso 2)
        seg 7: 7 ABORT p3 (lso 4)   8 COMMIT p4   9 p6   10 ABORT p6 (nothing ongoing: lso 11)
        seg 11 (active): 11 plain
    """
    log = Log.open(d, cfg or LogConfig(), clock=clock or Clock())
    e = {}
    for pid in (1, 2, 3):
        log.append(data(pid))
    log.roll()
    e[2] = abort(log, 2, 1, lso=0)
    log.append(data(4))
    log.roll()
    log.append(data())
    e[1] = abort(log, 1, 0, lso=2)
    log.roll()
    e[3] = abort(log, 3, 2, lso=4)
    log.append(marker(4, COMMIT))
    log.append(data(6))
    e[6] = abort(log, 6, 9)
    log.roll()
    log.append(data())
    assert [s.base_offset for s in log.segments] == [0, 3, 5, 7, 11]
    assert e[6] == AbortedTxn(6, 9, 10, 11)
    return log, e


def test_segments_without_aborts_have_no_file(tmp_path):
    log = Log.open(tmp_path, LogConfig(), clock=Clock())
    for i in range(5):
        log.append(data(7))
        log.append(marker(7, COMMIT))
        log.roll()
    log.close()
    assert not list(tmp_path.glob("*.txnindex"))
    log, e = build(tmp_path / "b")
    assert sorted(txn_files(tmp_path / "b")) == [3, 5, 7]
    for t in e.values():
        assert t in entries_of(txn_files(tmp_path / "b")[segment_of(log, t.last_offset)])


def test_collect_across_segments(tmp_path, monkeypatch):
    log, e = build(tmp_path)
    searched = []
    real = TransactionIndex.collect

    def spy(self, fetch, upper):
        searched.append(self.base_offset)
        return real(self, fetch, upper)

    monkeypatch.setattr(TransactionIndex, "collect", spy)
    # A transaction that starts in the range may be aborted segments later: p1 and p3 began
    # below 3, their markers are in segments 5 and 7; the search stops at p3's entry (lso 4).
    assert log.collect_aborted_txns(0, 3) == [e[2], e[1], e[3]]
    assert searched == [3, 5, 7]                  # segment 0 has no entries: not even looked at
    searched.clear()
    assert log.collect_aborted_txns(5, 7) == [e[1], e[3]]
    assert searched == [5, 7]
    searched.clear()
    assert log.collect_aborted_txns(3, 5) == [e[2], e[1], e[3]]
    assert log.collect_aborted_txns(8, 11) == [e[6]]
    assert log.collect_aborted_txns(11, 12) == []
    # An entry whose lso passes the bound ends the search: later segments are not read.
    searched.clear()
    log.append(data(8))
    e[8] = abort(log, 8, 11, lso=11)              # in segment 11, overlaps [11, 12)
    assert log.collect_aborted_txns(11, 12) == [e[8]]
    searched.clear()
    assert log.collect_aborted_txns(8, 11) == [e[6]]
    assert searched == [7]                        # e[6]'s lso 11 >= 11: segment 11 skipped


def test_a_log_without_entries_never_searches(tmp_path, monkeypatch):
    log = Log.open(tmp_path, LogConfig(), clock=Clock())
    for _ in range(20):
        log.append(data(3))
        log.roll()

    def boom(*a):
        raise AssertionError("searched a segment without entries")

    monkeypatch.setattr(TransactionIndex, "collect", boom)
    monkeypatch.setattr(TransactionIndex, "_load", boom)
    assert log.collect_aborted_txns(0, log.log_end_offset) == []
    log.close()
    log = Log.open(tmp_path, LogConfig(), clock=Clock())
    assert log.collect_aborted_txns(0, log.log_end_offset) == []


def test_marker_must_be_in_the_log(tmp_path):
    log, e = build(tmp_path)
    with pytest.raises(ValueError):
        log.append_aborted_txn(AbortedTxn(9, 11, log.log_end_offset, 13))
    assert not log.append_aborted_txn(e[1])       # already there
    before = txn_files(tmp_path)
    assert not log.append_aborted_txn(AbortedTxn(5, 0, 8, 9))   # behind segment 7's last (10)
    assert txn_files(tmp_path) == before


def test_entries_survive_close_and_reopen(tmp_path):
    log, e = build(tmp_path)
    files = txn_files(tmp_path)
    leo = log.log_end_offset
    log.close()
    log = Log.open(tmp_path, LogConfig(), clock=Clock())
    assert log.txn_index_complete_below == leo    # clean shutdown: nothing to re-derive
    assert (tmp_path / "recovery-point-offset").read_text().split() == ["0", str(leo)]
    assert txn_files(tmp_path) == files
    assert log.collect_aborted_txns(0, 3) == [e[2], e[1], e[3]]
    assert log.collect_aborted_txns(8, 11) == [e[6]]
    assert not log.append_aborted_txn(e[6])       # a replay over complete segments adds nothing
    assert txn_files(tmp_path) == files


# ------------------------------------------------------------- damaged files


def test_torn_last_entry_is_cut_on_load(tmp_path, caplog):
    log, e = build(tmp_path)
    log.close()
    path = tmp_path / "00000000000000000007.txnindex"
    whole = path.read_bytes()
    path.write_bytes(whole + AbortedTxn(9, 10, 10, 11).pack()[:20])   # a crash mid-write
    log = Log.open(tmp_path, LogConfig(), clock=Clock())
    with caplog.at_level(logging.WARNING, logger="core.log.txn_index"):
        assert log.collect_aborted_txns(8, 11) == [e[6]]
    assert path.read_bytes() == whole
    assert "not whole valid entries" in caplog.text


@pytest.mark.parametrize("tail", [
    bytes(34) * 3,                                         # a zero-filled tail
    struct.pack(">hqqqq", 1, 9, 10, 10, 11),               # an unknown version
    struct.pack(">hqqqq", 0, 9, 10, 9, 11),                # last offset going backwards
    struct.pack(">hqqqq", 0, 9, 10, 3, 11),                # a marker before the segment
])
def test_invalid_entries_are_cut_with_what_follows(tmp_path, tail):
    log, e = build(tmp_path)
    log.close()
    path = tmp_path / "00000000000000000007.txnindex"
    whole = path.read_bytes()
    path.write_bytes(whole + tail + AbortedTxn(9, 10, 10, 11).pack())
    log = Log.open(tmp_path, LogConfig(), clock=Clock())
    assert log.collect_aborted_txns(7, 11) == [e[3], e[6]]
    assert path.read_bytes() == whole


def test_zeros_at_the_start_of_the_first_segments_index_are_a_torn_tail(tmp_path):
    # A crash can leave a file whose size grew before its data was written: zeros. At base
    # 0 an all-zero entry would pass every other check (Kafka never writes one: lso >= 1).
    path = tmp_path / "00000000000000000000.txnindex"
    path.write_bytes(bytes(ENTRY_SIZE) + AbortedTxn(1, 0, 5, 6).pack())
    assert new_index(path, exists=True).entries() == []
    assert path.read_bytes() == b""


def test_a_new_segment_does_not_inherit_a_stray_file(tmp_path):
    log = Log.open(tmp_path, LogConfig(), clock=Clock())
    log.append(data(1))
    stray = tmp_path / "00000000000000000001.txnindex"
    stray.write_bytes(AbortedTxn(7, 1, 1, 2).pack())   # left by an earlier segment at 1
    log.roll()
    assert not stray.exists()
    txn = abort(log, 1, 0)
    log.close()
    log = Log.open(tmp_path, LogConfig(), clock=Clock())
    assert log.collect_aborted_txns(0, 2) == [txn]
    assert entries_of(stray.read_bytes()) == [txn]


def test_absurd_file_size_is_not_read_whole(tmp_path, monkeypatch):
    log, e = build(tmp_path)
    log.close()
    path = tmp_path / "00000000000000000007.txnindex"
    whole = path.read_bytes()
    with open(path, "r+b") as f:
        f.truncate(1 << 30)                                # 1 GiB, sparse, for a tiny segment
    reads = []
    real_pread = os.pread

    def pread(fd, n, pos):
        reads.append(n)
        return real_pread(fd, n, pos)

    monkeypatch.setattr(os, "pread", pread)
    log = Log.open(tmp_path, LogConfig(), clock=Clock())
    assert log.collect_aborted_txns(7, 11) == [e[3], e[6]]
    monkeypatch.undo()
    assert max(reads) < 1 << 16
    assert path.read_bytes() == whole


# ------------------------------------------------- truncation and retention


def test_truncation_drops_entries_with_their_markers(tmp_path):
    log, e = build(tmp_path)
    assert log.txn_index_complete_below == 0      # a new log: the index is complete below its end (0)
    log.truncate_to(7)                            # segments 7 and 11 go
    assert sorted(txn_files(tmp_path)) == [3, 5]
    assert log.collect_aborted_txns(0, 3) == [e[2], e[1]]
    assert log.txn_index_complete_below == 0
    log.close()
    log = Log.open(tmp_path, LogConfig(), clock=Clock())
    assert log.txn_index_complete_below == 7
    log.truncate_to(6)                            # the marker at 6 goes, its segment stays
    assert log.txn_index_complete_below == 6
    assert txn_files(tmp_path)[5] == b""
    assert log.collect_aborted_txns(0, 6) == [e[2]]
    # the log goes on: a new abort at offset 6 is recorded in segment 5 again
    again = abort(log, 1, 0, lso=2)
    assert again.last_offset == 6 and entries_of(txn_files(tmp_path)[5]) == [again]
    log.close()
    log = Log.open(tmp_path, LogConfig(), clock=Clock())
    assert log.collect_aborted_txns(0, 6) == [e[2], again]


def test_truncate_fully_removes_every_entry(tmp_path):
    log, e = build(tmp_path)
    log.truncate_fully_and_start_at(100)
    assert txn_files(tmp_path) == {}
    assert log.txn_index_complete_below == 100
    assert log.collect_aborted_txns(100, 101) == []


def test_retention_and_delete_records_take_entries_with_their_segments(tmp_path):
    clock = Clock(T0 + 10 * 86_400_000)           # every batch is 10 days old
    log, e = build(tmp_path, clock, LogConfig(retention_ms=86_400_000))
    assert log.apply_retention(high_watermark=5) == 2   # segments 0 and 3
    assert sorted(txn_files(tmp_path)) == [5, 7]
    assert log.collect_aborted_txns(5, 7) == [e[1], e[3]]
    assert log.collect_aborted_txns(log.log_start_offset, 6) == [e[1], e[3]]
    log.delete_records(8)                         # segment 5 goes, 7 holds the new start
    assert sorted(txn_files(tmp_path)) == [7]
    assert log.collect_aborted_txns(8, 11) == [e[6]]
    log.close()
    log = Log.open(tmp_path, LogConfig(), clock=clock)
    assert log.collect_aborted_txns(8, 11) == [e[6]]


def test_a_rebuild_that_cuts_the_log_drops_the_entries_of_the_lost_markers(tmp_path):
    log, e = build(tmp_path)
    log.close()
    seg7 = tmp_path / "00000000000000000007.log"
    os.truncate(seg7, seg7.stat().st_size - 5)   # the marker at 10 is torn (bit rot after a clean stop)
    log = Log.open(tmp_path, LogConfig(), clock=Clock())
    assert log.collect_aborted_txns(8, 11) == [e[6]]   # not re-read yet
    log.read(7, 1 << 20)                          # the read finds the tear and rebuilds
    assert log.collect_aborted_txns(8, 11) == []
    assert entries_of(txn_files(tmp_path)[7]) == [e[3]]


# ------------------------------------------------------------------ flush


@pytest.fixture
def synced(monkeypatch):
    """Names of the files fsynced (fdatasync or fsync)."""
    names: list[str] = []
    real = os.fdatasync, os.fsync

    def spy(i):
        def call(fd):
            names.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
            real[i](fd)
        return call

    monkeypatch.setattr(os, "fdatasync", spy(0))
    monkeypatch.setattr(os, "fsync", spy(1))
    return names


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_flush_syncs_the_txn_index_with_its_segment(tmp_path, synced):
    log = Log.open(tmp_path, LogConfig(), clock=Clock())
    log.append(data(1))
    synced.clear()
    abort(log, 1, 0)
    assert not any(n.endswith(".txnindex") for n in synced)   # not on the append path
    log.flush()
    assert "00000000000000000000.txnindex" in synced
    synced.clear()
    log.flush()
    assert "00000000000000000000.txnindex" not in synced     # nothing new to sync


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_entry_for_an_already_flushed_marker_is_synced_at_once(tmp_path, synced):
    log = Log.open(tmp_path, LogConfig(flush_messages=1))   # every append fsyncs
    log.append(data(1))
    last = log.append(marker(1)).base_offset
    assert log.flushed_offset == last + 1
    synced.clear()
    assert log.append_aborted_txn(AbortedTxn(1, 0, last, last + 1))
    assert "00000000000000000000.txnindex" in synced


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_txn_indexes_hold_no_descriptor(tmp_path):
    log, e = build(tmp_path)
    assert log.collect_aborted_txns(0, 3)          # every index loaded
    prefix = os.path.realpath(tmp_path) + os.sep
    open_names = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
                  if os.path.exists(f"/proc/self/fd/{fd}")]
    ours = [n for n in open_names if n.startswith(prefix)]
    assert not [n for n in ours if n.endswith(".txnindex")]
    assert len(ours) <= len(log.segments) + 2
    log.close()


# --------------------------------------------------------------- recovery


def test_unclean_shutdown_discards_the_rebuilt_segments_entries(tmp_path):
    clock = Clock()
    d = tmp_path
    log = Log.open(d, LogConfig(), clock=clock)
    e = {}
    for pid in (1, 2, 3):
        log.append(data(pid))
    log.roll()
    e[2] = abort(log, 2, 1, lso=0)
    log.roll()
    log.flush()                                   # a roll was flushed: checkpoint at 4
    assert (d / "recovery-point-offset").read_text().split() == ["0", "4"]
    e[1] = abort(log, 1, 0, lso=2)                # segment 4, after the recovery point
    log.roll()
    e[3] = abort(log, 3, 2)                       # segment 5
    log.roll()
    log.append(data())                            # the active segment 6 has no entry
    log._abandon()                                # crash: nothing since the flush is trusted
    assert sorted(txn_files(d)) == [3, 4, 5]

    log = Log.open(d, LogConfig(), clock=clock)
    assert log.txn_index_complete_below == 4      # base of the segment holding the recovery point
    assert sorted(txn_files(d)) == [3]            # 4 and 5 were rebuilt: their entries went
    assert log.collect_aborted_txns(0, 3) == [e[2]]
    # The recovery point stays there until the re-derived entries are flushed.
    assert (d / "recovery-point-offset").read_text().split() == ["0", "4"]
    assert log.flushed_offset == 4

    # The partition replays from below 4: a marker it meets again below 4 adds nothing.
    assert not log.append_aborted_txn(e[2])
    assert log.append_aborted_txn(e[1]) and log.append_aborted_txn(e[3])
    assert not log.append_aborted_txn(e[3])
    assert log.collect_aborted_txns(0, 3) == [e[2], e[1], e[3]]

    log._abandon()                                # a crash before they were flushed...
    log = Log.open(d, LogConfig(), clock=clock)
    assert log.txn_index_complete_below == 4      # ...re-derives them again
    assert sorted(txn_files(d)) == [3]
    assert log.append_aborted_txn(e[1]) and log.append_aborted_txn(e[3])
    log.flush()
    clock.t += 61_000                             # the recovery-point checkpoint falls due
    log.maybe_flush()
    assert (d / "recovery-point-offset").read_text().split() == ["0", str(log.log_end_offset)]

    log._abandon()                                # now only the active segment is re-read
    log = Log.open(d, LogConfig(), clock=clock)
    assert log.txn_index_complete_below == 6
    assert log.collect_aborted_txns(0, 3) == [e[2], e[1], e[3]]


def test_recovery_with_a_cut_reports_the_first_discarded_segment(tmp_path):
    log, e = build(tmp_path)                      # nothing flushed: the recovery point is 0
    log._abandon()
    seg7 = tmp_path / "00000000000000000007.log"
    raw = bytearray(seg7.read_bytes())
    raw[-3] ^= 0xFF                               # corrupt segment 7's last batch
    seg7.write_bytes(raw)
    log = Log.open(tmp_path, LogConfig(), clock=Clock())
    assert log.log_end_offset == 10
    assert log.txn_index_complete_below == 0
    assert txn_files(tmp_path) == {}
    assert (tmp_path / "recovery-point-offset").read_text().split() == ["0", "0"]


def test_clean_shutdown_with_a_rebuilt_active_segment(tmp_path):
    log, e = build(tmp_path)
    log.append(data(9))
    e[9] = abort(log, 9, 12)                      # in the active segment 11
    log.close()
    (tmp_path / "00000000000000000011.index").unlink()   # the active segment must be rebuilt
    log = Log.open(tmp_path, LogConfig(), clock=Clock())
    assert log.txn_index_complete_below == 11
    assert sorted(txn_files(tmp_path)) == [3, 5, 7]
    assert log.collect_aborted_txns(8, 11) == [e[6]]
    assert log.append_aborted_txn(e[9])
    assert log.collect_aborted_txns(12, 14) == [e[9]]


# -------------------------------------------------------------- compaction


def compacted(d: Path) -> tuple[Log, list[AbortedTxn], dict]:
    """A compacted log whose closed segments hold keyed transactional records and markers."""
    cfg = LogConfig(segment_bytes=400, cleanup_policy=("compact",), index_interval_bytes=50)
    log = Log.open(d, cfg, clock=Clock())
    txns = []
    latest = {}
    for i in range(40):
        pid = 100 + i % 4
        key = b"k%d" % (i % 3)
        first = log.append(data(pid, key, b"v%d" % i)).base_offset
        latest[key] = first
        if i % 4 == 3:
            txns.append(abort(log, pid, first, lso=0))   # lso 0: no search ever stops early
        else:
            log.append(marker(pid, COMMIT))
    log.roll()
    log.append(data(key=b"last"))   # the active segment holds no marker
    assert len(log.segments) > 4
    return log, txns, latest


def check_entries_follow_markers(log: Log, d: Path, txns: list[AbortedTxn]) -> None:
    assert log.collect_aborted_txns(0, log.log_end_offset) == txns
    bases = {s.base_offset for s in log.segments}
    files = txn_files(d)
    assert set(files) <= bases                     # no file of a replaced segment is left
    for base, raw in files.items():
        nxt = next(s.next_offset for s in log.segments if s.base_offset == base)
        assert all(base <= t.last_offset < nxt for t in entries_of(raw))
    assert [t for base in sorted(files) for t in entries_of(files[base])] == txns


def test_cleaning_keeps_the_entries_of_the_cleaned_segments(tmp_path):
    log, txns, latest = compacted(tmp_path)
    before = len(log.segments)
    res = cleaner.clean(log, T0)
    assert res.cleaned and res.records_removed > 0 and len(log.segments) < before
    check_entries_follow_markers(log, tmp_path, txns)
    log.close()
    log = Log.open(tmp_path, log.config, clock=Clock())
    check_entries_follow_markers(log, tmp_path, txns)


class Crash(Exception):
    pass


@pytest.mark.parametrize("step", ["swap", "deleted", "renamed"])
def test_cleaner_crash_keeps_the_entries(tmp_path, step):
    log, txns, latest = compacted(tmp_path)
    log.flush()                                   # recovery point at the active segment
    cfg = log.config

    def hook(s):
        if s == step:
            raise Crash(s)

    with pytest.raises(Crash):
        cleaner.clean(log, T0, hook=hook)
    if step != "renamed":
        assert list(tmp_path.glob("*.txnindex.swap"))
    log._abandon()
    log = Log.open(tmp_path, cfg, clock=Clock())
    assert not list(tmp_path.glob("*.swap")) and not list(tmp_path.glob("*.cleaned"))
    check_entries_follow_markers(log, tmp_path, txns)
    assert cleaner.clean(log, T0).skipped is None
    check_entries_follow_markers(log, tmp_path, txns)


def test_swap_with_the_txn_index_already_renamed(tmp_path):
    # A crash after `.txnindex.swap` was renamed into place, before the log's rename.
    log, txns, latest = compacted(tmp_path)
    log.flush()
    cfg = log.config
    plan = cleaner.prepare(log, T0)
    group = next(g for g in plan.groups if g.changed and len(g.segments) > 1)
    stem = group.segments[0].log_path.stem
    carried = [t for s in group.segments for t in s.txn_index.entries()]
    assert carried
    write_index_file(tmp_path / f"{stem}.txnindex", carried)
    for kind in ("index", "timeindex"):
        os.replace(tmp_path / f"{stem}.{kind}.cleaned", tmp_path / f"{stem}.{kind}")
    os.replace(tmp_path / f"{stem}.log.cleaned", tmp_path / f"{stem}.log.swap")
    log._abandon()
    log = Log.open(tmp_path, cfg, clock=Clock())
    check_entries_follow_markers(log, tmp_path, txns)
