"""core/raft/storage.py: the quorum-state file, the metadata log on core/log, snapshots."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.protocol.records import scan_batches
from core.raft.entries import Entry, OffsetAndEpoch, SnapshotId
from core.raft.log import RaftLog
from core.raft.ready import Snapshot
from core.raft.state import QuorumState
from core.raft.storage import (METADATA_PARTITION_DIR, QUORUM_STATE_FILE, MetadataLog,
                               QuorumStateStore, RaftStorage, StorageCorrupt,
                               parse_snapshot_file_name, snapshot_file_name)


def entries(epochs: list[int], start: int = 0, control_at: tuple[int, ...] = ()) -> list[Entry]:
    return [Entry(start + i, epoch, b"o%de%d" % (start + i, epoch), start + i in control_at)
            for i, epoch in enumerate(epochs)]


def dump(log: RaftLog) -> tuple:
    return (log.start_offset, log.end_offset, log.start_epoch, log.last_epoch,
            log.latest_snapshot, log.slice(log.start_offset, log.end_offset))


def reopen(directory: Path, old: MetadataLog | None = None, crash: bool = False) -> MetadataLog:
    if old is not None:
        if crash:
            old.core_log._abandon()
        else:
            old.close()
    return MetadataLog.open(directory)


# --------------------------------------------------------------------------- quorum state


def test_quorum_state_missing_file_is_fresh(tmp_path: Path) -> None:
    assert QuorumStateStore(tmp_path / QUORUM_STATE_FILE).read() == QuorumState()


def test_quorum_state_round_trip_and_kafka_json(tmp_path: Path) -> None:
    store = QuorumStateStore(tmp_path / QUORUM_STATE_FILE, cluster_id="", voters=[3, 1, 2])
    state = QuorumState(leader_epoch=7, leader_id=-1, voted_id=2)
    store.write(state)
    assert store.read() == state
    assert QuorumStateStore(tmp_path / QUORUM_STATE_FILE).read() == state
    # Golden: Kafka's FileQuorumStateStore version 0 shape.
    raw = (tmp_path / QUORUM_STATE_FILE).read_text()
    assert raw == ('{"clusterId":"","leaderId":-1,"leaderEpoch":7,"votedId":2,"appliedOffset":0,'
                   '"currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],'
                   '"data_version":0}')
    store.write(QuorumState(leader_epoch=8, leader_id=3, voted_id=-1))
    assert store.read() == QuorumState(8, 3, -1)
    assert not (tmp_path / (QUORUM_STATE_FILE + ".tmp")).exists()


def test_quorum_state_reads_kafka_files(tmp_path: Path) -> None:
    path = tmp_path / QUORUM_STATE_FILE
    path.write_text('{"clusterId":"","leaderId":1,"leaderEpoch":2,"votedId":-1,'
                    '"appliedOffset":0,"currentVoters":[],"data_version":0}\n')
    assert QuorumStateStore(path).read() == QuorumState(2, 1, -1)
    path.write_text('{"leaderId":-1,"leaderEpoch":2,"votedId":1,'
                    '"votedDirectoryId":"J8aAPcfLQt2bqs1JT_rMgQ","data_version":1}')
    assert QuorumStateStore(path).read() == QuorumState(2, -1, 1)
    path.write_text('{"leaderId":-1,"leaderEpoch":-1,"votedId":-1,"data_version":1}')
    assert QuorumStateStore(path).read() == QuorumState()


@pytest.mark.parametrize("content", [
    b"", b"{", b"\xff\xfe", b"[]", b'{"leaderEpoch":3,"leaderId":1,"votedId":-1}',
    b'{"leaderEpoch":3,"leaderId":1,"votedId":-1,"data_version":9}',
    b'{"leaderEpoch":"3","leaderId":1,"votedId":-1,"data_version":0}',
    b'{"leaderEpoch":-5,"leaderId":1,"votedId":-1,"data_version":0}',
    b'{"leaderEpoch":3,"leaderId":1,"votedId":-1,"data_ver',   # torn write
])
def test_quorum_state_corrupt_file_is_an_error_naming_it(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / QUORUM_STATE_FILE
    path.write_bytes(content)
    with pytest.raises(StorageCorrupt, match=str(path)):
        QuorumStateStore(path).read()


def test_quorum_state_crash_before_rename_keeps_the_old_state(tmp_path: Path) -> None:
    store = QuorumStateStore(tmp_path / QUORUM_STATE_FILE)
    store.write(QuorumState(4, -1, 1))
    # A crash between writing the temp file and the rename leaves a partial temp file.
    (tmp_path / (QUORUM_STATE_FILE + ".tmp")).write_bytes(b'{"leaderEpoch":5,"lea')
    assert store.read() == QuorumState(4, -1, 1)
    store.write(QuorumState(5, 2, 1))   # and the next write replaces it
    assert store.read() == QuorumState(5, 2, 1)
    assert not (tmp_path / (QUORUM_STATE_FILE + ".tmp")).exists()


# ------------------------------------------------------------------------------ the log


def test_append_across_epochs_and_reopen_gives_the_same_raft_log(tmp_path: Path) -> None:
    d = tmp_path / METADATA_PARTITION_DIR
    mlog = MetadataLog.open(d)
    assert dump(mlog.load().log) == dump(RaftLog())
    es = entries([1, 1, 1, 2, 2, 4, 4, 4, 4], control_at=(0, 3, 5))
    mlog.append(es[:4])
    mlog.append(es[4:])
    assert mlog.core_log.flushed_offset == 9
    # One batch per entry, base offset and leader epoch from the entry.
    data = mlog.core_log.read(0, 1 << 20).data
    batches = [(b.base_offset, b.partition_leader_epoch, b.records_count, b.is_control)
               for b in scan_batches(bytes(data))]
    assert batches == [(e.offset, e.epoch, 1, e.control) for e in es]
    for crash in (False, True):
        mlog = reopen(d, mlog, crash=crash)
        loaded = mlog.load()
        assert loaded.snapshot is None
        assert dump(loaded.log) == dump(RaftLog(None, es))
        log = loaded.log
        assert log.end_offset_for_epoch(1) == OffsetAndEpoch(3, 1)
        assert log.end_offset_for_epoch(3) == OffsetAndEpoch(5, 2)
        assert log.end_offset_for_epoch(4) == OffsetAndEpoch(9, 4)
        assert [e.control for e in log.slice(0, 9)] == [e.control for e in es]
        assert not log.has_unpersisted
    mlog.close()


def test_append_must_continue_the_log(tmp_path: Path) -> None:
    mlog = MetadataLog.open(tmp_path)
    mlog.append(entries([1, 1]))
    with pytest.raises(ValueError):
        mlog.append(entries([1], start=5))
    mlog.close()


def test_truncate_then_reopen(tmp_path: Path) -> None:
    mlog = MetadataLog.open(tmp_path)
    mlog.append(entries([1, 1, 2, 2, 2]))
    mlog.truncate_to(3)           # inside the epoch-2 batch: the batch is split
    mlog.append(entries([3, 3], start=3))
    expected = entries([1, 1, 2]) + entries([3, 3], start=3)
    assert dump(mlog.load().log) == dump(RaftLog(None, expected))
    mlog = reopen(tmp_path, mlog, crash=True)
    log = mlog.load().log
    assert dump(log) == dump(RaftLog(None, expected))
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(3, 2)
    mlog.close()


def test_torn_tail_is_cut_at_open(tmp_path: Path) -> None:
    mlog = MetadataLog.open(tmp_path)
    es = entries([1, 1, 2])
    mlog.append(es)
    seg = mlog.core_log.segments[-1].path
    mlog.core_log._abandon()
    whole = seg.read_bytes()
    with open(seg, "ab") as f:
        f.write(whole[:40])       # half a batch header: a torn append
    mlog = MetadataLog.open(tmp_path)
    assert dump(mlog.load().log) == dump(RaftLog(None, es))
    assert seg.read_bytes() == whole
    mlog.append(entries([2], start=3))
    mlog.close()


def test_torn_last_batch_is_dropped_whole(tmp_path: Path) -> None:
    mlog = MetadataLog.open(tmp_path)
    es = entries([1, 1]) + entries([2, 2, 2], start=2)
    mlog.append(es[:4])
    size = mlog.core_log.segments[-1].size_bytes
    mlog.append(es[4:])
    seg = mlog.core_log.segments[-1].path
    mlog.core_log._abandon()
    with open(seg, "r+b") as f:
        f.truncate(seg.stat().st_size - 5)   # the last batch lost its end
    mlog = MetadataLog.open(tmp_path)
    assert dump(mlog.load().log) == dump(RaftLog(None, es[:4]))
    assert seg.stat().st_size == size
    mlog.close()


def test_truncation_inside_an_epoch_only_cuts_the_file(tmp_path: Path) -> None:
    """A DivergingEpoch may end anywhere in a run of one epoch. With one entry per batch the
    truncation is a cut at a batch boundary: nothing durable below the offset is rewritten, so
    a crash during it cannot lose entries."""
    mlog = MetadataLog.open(tmp_path)
    es = entries([3, 3, 3, 3, 3, 3])
    mlog.append(es)
    seg = mlog.core_log.segments[-1].path
    before = seg.read_bytes()
    mlog.truncate_to(4)
    mlog.core_log._abandon()   # a crash right after the truncation
    after = seg.read_bytes()
    assert before.startswith(after) and len(after) < len(before)
    mlog = MetadataLog.open(tmp_path)
    assert dump(mlog.load().log) == dump(RaftLog(None, es[:4]))
    mlog.close()


def test_epoch_going_back_in_the_file_is_an_error(tmp_path: Path) -> None:
    mlog = MetadataLog.open(tmp_path)
    # The log itself does not know epochs; write a bad history below Raft's checks.
    mlog.append(entries([3, 3]))
    mlog.append(entries([2], start=2))
    mlog = reopen(tmp_path, mlog)
    with pytest.raises(StorageCorrupt, match=r"00000000000000000000\.log.*epoch 2.*epoch 3"):
        mlog.load()
    mlog.close()


# ------------------------------------------------------------------------------ snapshots


def test_snapshot_file_names_follow_kafka() -> None:
    sid = SnapshotId(42, 3)
    assert snapshot_file_name(sid) == "00000000000000000042-0000000003.checkpoint"
    assert parse_snapshot_file_name(snapshot_file_name(sid)) == sid
    assert parse_snapshot_file_name("00000000000000000042-0000000003.checkpoint.part") is None


def test_snapshot_write_list_latest_and_cleanup(tmp_path: Path) -> None:
    mlog = MetadataLog.open(tmp_path)
    for sid in (SnapshotId(5, 1), SnapshotId(2, 1), SnapshotId(9, 2)):
        mlog.write_snapshot(Snapshot(sid, b"state@%d" % sid.end_offset))
    (tmp_path / "00000000000000000012-0000000002.checkpoint.part").write_bytes(b"torn")
    assert mlog.snapshots() == [SnapshotId(2, 1), SnapshotId(5, 1), SnapshotId(9, 2)]
    assert mlog.latest_snapshot() == SnapshotId(9, 2)
    assert mlog.read_snapshot(SnapshotId(5, 1)) == b"state@5"
    assert mlog.delete_old_snapshots(keep=2) == [SnapshotId(2, 1)]
    assert mlog.snapshots() == [SnapshotId(5, 1), SnapshotId(9, 2)]
    mlog = reopen(tmp_path, mlog)   # open clears partial snapshot files
    assert not list(tmp_path.glob("*.part"))
    assert mlog.snapshots() == [SnapshotId(5, 1), SnapshotId(9, 2)]
    mlog.close()


def test_log_start_advance_survives_reopen(tmp_path: Path) -> None:
    mlog = MetadataLog.open(tmp_path, _small_segments())
    es = entries([1] * 10 + [2] * 10 + [3] * 5)
    for i in range(0, 25, 5):
        mlog.append(es[i:i + 5])
    assert len(mlog.core_log.segments) > 2
    with pytest.raises(ValueError, match="no snapshot"):
        mlog.advance_log_start(12)
    mlog.write_snapshot(Snapshot(SnapshotId(5, 1), b"s5"))
    mlog.write_snapshot(Snapshot(SnapshotId(10, 1), b"s10"))
    mlog.write_snapshot(Snapshot(SnapshotId(12, 2), b"s12"))
    mlog.advance_log_start(12)
    assert mlog.log_start_offset == 12
    assert mlog.snapshots() == [SnapshotId(10, 1), SnapshotId(12, 2)]
    assert all(s.next_offset > 12 for s in mlog.core_log.segments)   # data below went
    expected = RaftLog(SnapshotId(12, 2), es[12:])
    for crash in (False, True):
        mlog = reopen(tmp_path, mlog, crash=crash)
        loaded = mlog.load()
        assert loaded.snapshot == Snapshot(SnapshotId(12, 2), b"s12")
        assert dump(loaded.log) == dump(expected)
        assert loaded.log.epoch_of(11) == 2
        assert loaded.log.end_offset_for_epoch(1) == OffsetAndEpoch(-1, -1)
        assert loaded.log.end_offset_for_epoch(2) == OffsetAndEpoch(20, 2)
    mlog.close()


def test_snapshot_written_without_advance_moves_the_start_at_load(tmp_path: Path) -> None:
    mlog = MetadataLog.open(tmp_path)
    es = entries([1, 1, 2, 2, 2])
    mlog.append(es)
    mlog.write_snapshot(Snapshot(SnapshotId(3, 2), b"s3"))   # crash before advance
    mlog = reopen(tmp_path, mlog, crash=True)
    loaded = mlog.load()
    assert dump(loaded.log) == dump(RaftLog(SnapshotId(3, 2), es[3:]))
    assert mlog.log_start_offset == 3
    mlog.close()


def test_install_snapshot_replaces_the_log(tmp_path: Path) -> None:
    mlog = MetadataLog.open(tmp_path)
    mlog.append(entries([1, 1, 1]))
    mlog.install_snapshot(Snapshot(SnapshotId(20, 4), b"leader state"))
    mlog.append(entries([4, 5], start=20))
    mlog = reopen(tmp_path, mlog, crash=True)
    loaded = mlog.load()
    assert loaded.snapshot == Snapshot(SnapshotId(20, 4), b"leader state")
    assert dump(loaded.log) == dump(RaftLog(SnapshotId(20, 4), entries([4, 5], start=20)))
    mlog.close()


@pytest.mark.parametrize("old_epochs, snapshot_id", [
    ([1, 1, 1], SnapshotId(20, 4)),     # snapshot beyond the log end
    ([1, 1, 3, 3], SnapshotId(3, 2)),   # the entry below the snapshot end disagrees
    ([1, 1, 1, 1], SnapshotId(2, 2)),   # the log's last epoch is older than the snapshot
])
def test_install_interrupted_before_the_log_was_replaced(tmp_path: Path, old_epochs: list[int],
                                                         snapshot_id: SnapshotId) -> None:
    mlog = MetadataLog.open(tmp_path)
    mlog.append(entries(old_epochs))
    mlog.write_snapshot(Snapshot(snapshot_id, b"x"))   # crash before truncate_fully
    mlog = reopen(tmp_path, mlog, crash=True)
    loaded = mlog.load()
    assert dump(loaded.log) == dump(RaftLog(snapshot_id))
    assert (mlog.log_start_offset, mlog.log_end_offset) == (snapshot_id.end_offset,) * 2
    mlog.close()


def test_log_start_without_snapshot_is_an_error(tmp_path: Path) -> None:
    mlog = MetadataLog.open(tmp_path)
    mlog.append(entries([1, 1, 1]))
    mlog.core_log.delete_records(2)
    with pytest.raises(StorageCorrupt, match="no snapshot"):
        mlog.load()
    mlog.close()


# ------------------------------------------------------------------------ the whole Ready


def test_raft_storage_persists_a_ready_and_loads_it_back(tmp_path: Path) -> None:
    from core.raft.messages import LeaderIdAndEpoch
    from core.raft.ready import Ready
    import inspect

    storage = RaftStorage.open(tmp_path, voters=[1, 2, 3])
    assert (tmp_path / METADATA_PARTITION_DIR).is_dir()
    fields = inspect.signature(LeaderIdAndEpoch).parameters
    leader = LeaderIdAndEpoch(*([-1, 0][:len(fields)]))

    def ready(**kw) -> Ready:
        base = dict(quorum_state=None, snapshot=None, truncate_to=None, entries=(),
                    log_start_offset=None, messages=(), committed_entries=(),
                    high_watermark=0, leader=leader)
        base.update(kw)
        return Ready(**base)

    storage.persist(ready(quorum_state=QuorumState(1, -1, 1), entries=tuple(entries([1, 1]))))
    storage.persist(ready(quorum_state=QuorumState(2, 2, -1), truncate_to=1,
                          entries=tuple(entries([2, 2], start=1))))
    storage.log.write_snapshot(Snapshot(SnapshotId(2, 2), b"app"))
    storage.persist(ready(log_start_offset=2))
    storage.close()
    storage = RaftStorage.open(tmp_path)
    state, loaded = storage.load()
    assert state == QuorumState(2, 2, -1)
    assert json.loads((tmp_path / METADATA_PARTITION_DIR / QUORUM_STATE_FILE).read_text())[
        "currentVoters"] == [{"voterId": 1}, {"voterId": 2}, {"voterId": 3}]
    assert dump(loaded.log) == dump(RaftLog(SnapshotId(2, 2), entries([2], start=2)))
    assert loaded.snapshot == Snapshot(SnapshotId(2, 2), b"app")
    storage.close()


def _small_segments():
    from core.raft.storage import metadata_log_config
    config = metadata_log_config()
    config.segment_bytes = 200
    return config
