"""Partition.write_producer_snapshot writes without the partition's lock (appends go on
meanwhile) and publishes only if the log was not cut in between (core/broker/partition.py)."""
from __future__ import annotations

import anyio

import core.broker.partition as partition_module
from core.broker.partition import Partition
from core.broker.producer_snapshots import list_snapshots
from core.log import Log, LogConfig
from tests.support.records import batch


def partition_with_records(tmp_path, count: int = 3) -> Partition:
    log = Log.open(tmp_path / "t-0", LogConfig())
    for _ in range(count):
        log.append(batch())
    return Partition("t", 0, log)


def snapshots(p: Partition) -> list[int]:
    return [offset for offset, _ in list_snapshots(p.log.directory)]


def test_appends_are_not_held_while_the_snapshot_is_written(tmp_path, monkeypatch):
    p = partition_with_records(tmp_path)
    held_during_write = []
    real = partition_module.write_unpublished

    def slow_write(tmp, data):
        held_during_write.append(p.lock.locked())
        real(tmp, data)
    monkeypatch.setattr(partition_module, "write_unpublished", slow_write)
    anyio.run(p.write_producer_snapshot)
    assert held_during_write == [False]
    assert snapshots(p) == [3] and p.snapshot_offset == 3
    assert not [f for f in p.log.directory.iterdir() if f.name.endswith(".tmp")]


def test_a_snapshot_begun_before_a_truncation_is_thrown_away(tmp_path, monkeypatch):
    p = partition_with_records(tmp_path, count=5)
    real = partition_module.write_unpublished

    def write_while_the_log_is_cut(tmp, data):
        real(tmp, data)
        p.log.truncate_to(2)     # a follower's truncation, while the file was being written
        p.truncated()
    monkeypatch.setattr(partition_module, "write_unpublished", write_while_the_log_is_cut)
    anyio.run(p.write_producer_snapshot)
    assert snapshots(p) == [] and p.snapshot_offset == -1
    assert not [f for f in p.log.directory.iterdir() if f.name.endswith(".tmp")]
