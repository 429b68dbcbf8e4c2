"""MetadataSync reconciles only what a new image changed (core/broker/metadata_sync.py): a
topic created in a big cluster costs that topic's work, a change of the brokers reaches every
partition, a topic whose partitions failed to open is tried again."""
from __future__ import annotations

from types import SimpleNamespace

import anyio

import core.protocol.messages as m
from core.broker.metadata_sync import MetadataSync
from core.broker.metrics import BrokerMetrics
from core.controller import MetadataImage
from tests.support.metadata_records import cfg, part, reg, topic

ME = 1


class FakeReplicas:
    def __init__(self):
        self.applied: list[tuple[str, int]] = []

    def broker_epoch(self, image) -> int:
        return 10

    def attach(self, p, topic, replica_log) -> None:
        p.replica = object()

    async def apply_metadata(self, p, reg, brokers, broker_epoch) -> None:
        self.applied.append((p.topic, p.index))

    def topic_configs_changed(self, topic) -> None:
        pass

    async def stop_replica(self, p, delete: bool) -> None:
        pass


class FakePartition:
    def __init__(self, topic: str, index: int):
        self.topic, self.index, self.replica = topic, index, None

    def update_config(self, lc) -> None:
        pass

    def wake_waiters(self) -> None:
        pass

    async def retire(self, suffix: str) -> str:
        return f"/nonexistent/{self.topic}-{self.index}{suffix}"


class FakeBroker:
    def __init__(self):
        self.node_id = ME
        self.topics, self.topics_by_id = {}, {}
        self.config = SimpleNamespace(topic_defaults=dict, log_dirs=[])
        self.kraft = SimpleNamespace(replicas=FakeReplicas())
        self.groups = SimpleNamespace(on_metadata=self._noop, on_topic_deleted=self._noop)
        self.transactions = SimpleNamespace(on_metadata=self._noop)
        self.fail_open: set[str] = set()
        self.metrics = BrokerMetrics()

    async def _noop(self, what) -> None:
        pass

    def _log_config(self, configs):
        return None


def sync_of(broker) -> MetadataSync:
    sync = MetadataSync(broker, SimpleNamespace(loader=SimpleNamespace(publishers=[])))
    sync._swept = True     # no directories to sweep here

    def open_replicas(name, indexes, lc, marks):
        if name in broker.fail_open:
            raise OSError("disk full")
        return [(FakePartition(name, i), None) for i in indexes]
    sync._open_replicas = open_replicas
    return sync


def tid(n: int) -> bytes:
    return bytes([n]) * 16


def test_only_the_topics_a_new_image_changed_are_reconciled():
    broker = FakeBroker()
    sync = sync_of(broker)
    applied = broker.kraft.replicas.applied
    records = [reg(1), reg(2), reg(3)]
    for n in range(1, 51):
        records += [topic(f"t{n}", tid(n)), part(0, tid(n)), part(1, tid(n))]
    image = MetadataImage.empty().apply_all(records)

    async def main():
        nonlocal image
        await sync.reconcile(image)                   # the first image: everything
        assert len(applied) == 100
        applied.clear()
        image = image.apply_all([topic("new", tid(99)), part(0, tid(99))])
        await sync.reconcile(image)                   # one topic created: that topic only
        assert applied == [("new", 0)]
        applied.clear()
        image = image.apply_all([m.PartitionChangeRecord(partition_id=1, topic_id=tid(7), leader=2)])
        await sync.reconcile(image)                   # a leader moved: that topic only
        assert sorted(applied) == [("t7", 0), ("t7", 1)]
        applied.clear()
        image = image.apply_all([cfg(2, "t9", "retention.ms", "1000")])
        await sync.reconcile(image)                   # a topic's config changed: that topic
        assert sorted(applied) == [("t9", 0), ("t9", 1)]
        assert broker.topics["t9"].configs.overrides == {"retention.ms": 1000}
        applied.clear()
        image = image.apply_all([m.RemoveTopicRecord(topic_id=tid(3))])
        assert "t3" in broker.topics
        broker.metrics.bytes_in.labels("t3").inc(100)
        broker.metrics.bytes_in.labels("t4").inc(100)
        await sync.reconcile(image)                   # a deletion is seen, nothing else applied
        assert "t3" not in broker.topics and applied == []
        series = {s.labels["topic"] for metric in broker.metrics.bytes_in.collect() for s in metric.samples}
        assert series == {"t4"}                       # the deleted topic's series went with it
        image = image.apply_all([m.UnfenceBrokerRecord(id=2, epoch=10)])
        await sync.reconcile(image)                   # the brokers changed: every partition
        assert len(applied) == 2 * 49 + 1
    anyio.run(main)


def test_a_topic_whose_partitions_failed_to_open_is_tried_again():
    broker = FakeBroker()
    sync = sync_of(broker)
    broker.fail_open.add("sick")
    image = MetadataImage.empty().apply_all([reg(1), topic("sick", tid(5)), part(0, tid(5))])

    async def main():
        await sync.reconcile(image)
        assert broker.topics["sick"].partitions == [None]
        broker.fail_open.clear()
        later = image.apply_all([topic("other", tid(6)), part(0, tid(6))])
        await sync.reconcile(later)
        assert broker.topics["sick"].partitions[0] is not None
    anyio.run(main)
