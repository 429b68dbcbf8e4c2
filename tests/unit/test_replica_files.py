"""leader-epoch-checkpoint and replication-offset-checkpoint (core/broker/replication/files.py)."""
from __future__ import annotations

import pytest

from core.broker.replication import files as rf
from core.broker.replication import EpochEntry


def test_leader_epochs_round_trip_in_kafkas_format(tmp_path):
    entries = [EpochEntry(0, 0), EpochEntry(3, 120), EpochEntry(7, 5000)]
    rf.write_leader_epochs(tmp_path, entries)
    assert (tmp_path / rf.LEADER_EPOCH_FILE).read_text() == "0\n3\n0 0\n3 120\n7 5000\n"
    assert rf.read_leader_epochs(tmp_path) == entries


def test_high_watermarks_round_trip_per_log_dir(tmp_path):
    marks = {("orders", 0): 10, ("orders", 1): 0, ("a.b-c", 12): 99}
    rf.write_high_watermarks(tmp_path, marks)
    assert rf.read_high_watermarks(tmp_path) == marks
    assert (tmp_path / rf.HIGH_WATERMARK_FILE).read_text().splitlines()[:2] == ["0", "3"]


@pytest.mark.parametrize("text", [
    "",                         # empty
    "1\n1\n0 0\n",              # unknown version
    "0\n2\n0 0\n",              # count does not match the entries
    "0\n1\n0\n",                # an entry with one field
    "0\nx\n",                   # count not a number
    "0\n1\nzero 0\n",           # epoch not a number
    b"\xff\xfe".decode("latin-1"),
])
def test_a_damaged_epoch_checkpoint_reads_as_missing(tmp_path, text):
    (tmp_path / rf.LEADER_EPOCH_FILE).write_text(text)
    assert rf.read_leader_epochs(tmp_path) is None


def test_missing_files(tmp_path):
    assert rf.read_leader_epochs(tmp_path) is None
    assert rf.read_high_watermarks(tmp_path) == {}


def test_a_damaged_high_watermark_file_reads_as_empty(tmp_path):
    (tmp_path / rf.HIGH_WATERMARK_FILE).write_text("0\n1\norders x 5\n")
    assert rf.read_high_watermarks(tmp_path) == {}


def test_a_log_without_an_epoch_checkpoint_gets_its_epochs_from_the_batches(tmp_path):
    """A log written before replication kept epochs (or whose checkpoint was lost): the cache
    is rebuilt from the batches' partitionLeaderEpoch; the high watermark comes from the log
    dir's checkpoint, clamped to the log."""
    from core.broker.partition import Partition
    from core.broker.replication.manager import recover_replica_log
    from core.log import Log, LogConfig
    from core.protocol.records import build_batch

    plog = Log.open(tmp_path / "t-0", LogConfig())
    try:
        for epoch, count in [(-1, 2), (0, 3), (0, 1), (4, 2), (2, 1)]:
            data = build_batch([(None, b"v", None, 1000)] * count, partition_leader_epoch=epoch)
            plog.append(data)
        p = Partition("t", 0, plog)
        rlog = recover_replica_log(p, {("t", 0): 100})
        # No epoch before offset 2; a lower epoch after a higher one is not an entry.
        assert [(e.epoch, e.start_offset) for e in rlog.epochs.entries] == [(0, 2), (4, 6)]
        assert (rlog.start_offset, rlog.end_offset, rlog.high_watermark) == (0, 9, 9)
        rf.write_leader_epochs(plog.directory, [EpochEntry(1, 0)])
        assert [(e.epoch, e.start_offset) for e in recover_replica_log(p, {}).epochs.entries] == [(1, 0)]
        assert recover_replica_log(p, {}).high_watermark == 0
    finally:
        plog.close()
