"""MetadataSync: a KRaft broker's local state, kept in step with the metadata image.

Kafka's BrokerMetadataPublisher in one loop. Whenever the loader applies committed records, the
loop takes the latest image and reconciles (under the broker's admin lock, file work in worker
threads):

* topics the image no longer has (or has under another id: deleted and created again) are
  removed here: partition directories moved aside and deleted, their group offsets dropped;
* every topic of the image is known to the broker (Topic), with its configs (the image's topic
  overrides over this node's defaults) applied to its logs; partitions hosted elsewhere are
  None in Topic.partitions, so requests for them get NOT_LEADER_OR_FOLLOWER;
* partitions whose replicas include this broker are opened (created if new), and each learns
  whether this broker leads it and in which leader epoch.

A reconcile looks only at what changed since the image it last reconciled: images share every
part a record did not touch (MetadataDelta), so a topic whose TopicImage and configs are the
same objects as before has nothing new, and creating one topic in a cluster of ten thousand
partitions costs one topic's work. A change to the brokers (registration, fencing, epochs)
reaches every partition's replica state, so it reconciles every topic, as does the first image.

The first reconcile of a bootstrapped image also sweeps partition directories of topics the
image does not hold (a topic deleted while this broker was down). The broker serves clients only once it has caught
up and been unfenced (core/node/server.py), so no client sees the empty image of a starting broker.

* each local partition gets its PartitionReplica (replication/manager.py) when opened, and every
  image's registration of it, with the brokers' epochs and fencing: it leads, follows (its
  fetcher pulls from the leader) or, when the image no longer places it here, it is closed and
  its directory deleted.
"""
from __future__ import annotations

import logging
import os
import shutil

import anyio

from core.config import ConfigError
from core.config.topic import TopicConfigs
from core.controller.controller import METADATA_VERSION
from core.controller.image import MetadataImage
from core.raft.storage import METADATA_PARTITION_DIR

from .broker import DELETE_SUFFIX, Topic, _PARTITION_DIR
from .heap_freezer import HeapFreezer
from .replication import files as replica_files
from .replication.manager import recover_replica_log
from .replication import BrokerInfo

log = logging.getLogger(__name__)
_EMPTY = MetadataImage.empty()


class MetadataSync:
    def __init__(self, broker, quorum):
        self.broker = broker
        self.quorum = quorum
        self.synced_offset = -1            # loader offset of the image last reconciled
        self._changed = anyio.Event()
        self._progress = anyio.Event()
        self._swept = False
        self._reconciled: MetadataImage | None = None   # the image the last reconcile applied
        self._unopened: set[bytes] = set()   # topic ids whose partitions failed to open: retried
        self.heap = HeapFreezer()   # its run() is started beside ours (core/node/server.py)
        quorum.loader.publishers.append(self._on_publish)

    @property
    def reconciled(self) -> MetadataImage:
        """The image the last finished reconcile applied (empty before the first)."""
        return self._reconciled if self._reconciled is not None else _EMPTY

    def _on_publish(self, before, after, next_offset: int) -> None:
        self._changed.set()

    async def run(self) -> None:
        loader = self.quorum.loader
        while True:
            await self._changed.wait()
            self._changed = anyio.Event()
            image, offset = loader.image, loader.next_offset
            async with self.broker.admin_lock:
                await self.reconcile(image)
            self.synced_offset = offset
            self._progress.set()
            self._progress = anyio.Event()

    async def wait_synced(self, predicate, timeout_s: float) -> bool:
        with anyio.move_on_after(timeout_s):
            while not predicate():
                await self._progress.wait()
            return True
        return predicate()

    # ------------------------------------------------------------------ reconcile

    @property
    def replicas(self):
        return self.broker.kraft.replicas

    def _read_high_watermarks(self) -> dict:
        """Every log dir's high-watermark checkpoint (worker thread): read once per reconcile,
        not once per topic, or a restart with N topics would read N checkpoints of N lines."""
        marks: dict = {}
        for d in self.broker.config.log_dirs:
            marks.update(replica_files.read_high_watermarks(d))
        return marks

    def _open_replicas(self, topic: str, indexes: list[int], lc, marks: dict):
        """Open the partitions and recover each one's replication state (worker thread)."""
        partitions = self.broker._open_partitions(topic, indexes, lc)
        return [(p, recover_replica_log(p, marks)) for p in partitions]

    async def reconcile(self, image: MetadataImage) -> None:
        broker = self.broker
        me = broker.node_id
        brokers = {b.id: BrokerInfo(b.epoch, b.fenced, b.in_controlled_shutdown)
                   for b in image.brokers.values()}
        broker_epoch = self.replicas.broker_epoch(image)
        before = self._reconciled
        added = removed = before is None
        for name, topic in list(broker.topics.items()):
            if image.topics.get(topic.topic_id) is None or image.topic_ids.get(name) != topic.topic_id:
                await self._remove(topic)
                removed = True
        defaults = broker.config.topic_defaults()
        every_topic = before is None or before.brokers is not image.brokers
        retry, self._unopened = self._unopened, set()
        marks = None
        for topic_id, timg in image.topics.items():
            if (not every_topic and before is not None   # every_topic when there is no `before`
                    and before.topics.get(topic_id) is timg and topic_id not in retry
                    and before.topic_config(timg.name) is image.topic_config(timg.name)
                    and topic_id in broker.topics_by_id):
                continue   # nothing about this topic changed
            try:
                overrides = TopicConfigs.validate(dict(image.topic_config(timg.name)))
            except ConfigError as exc:   # written by a newer controller: keep our defaults
                log.warning("topic %s: ignoring configs we cannot read: %s", timg.name, exc)
                overrides = {}
            topic = broker.topics_by_id.get(topic_id)
            if topic is None:
                added = True
                topic = Topic(timg.name, topic_id, [], TopicConfigs(overrides, defaults))
                broker.topics[timg.name] = topic
                broker.topics_by_id[topic_id] = topic
            elif topic.configs.overrides != overrides:
                topic.configs = TopicConfigs(overrides, defaults)
                lc = broker._log_config(topic.configs)
                for p in topic.partitions:
                    if p is not None:
                        p.update_config(lc)
                self.replicas.topic_configs_changed(topic)
            count = max(timg.partitions, default=-1) + 1
            if len(topic.partitions) < count:
                topic.partitions.extend([None] * (count - len(topic.partitions)))
            wanted = [i for i, reg in sorted(timg.partitions.items())
                      if me in reg.replicas and topic.partitions[i] is None]
            if wanted:
                lc = broker._log_config(topic.configs)
                try:
                    if marks is None:
                        marks = await anyio.to_thread.run_sync(self._read_high_watermarks)
                    opened = await anyio.to_thread.run_sync(self._open_replicas, timg.name, wanted, lc, marks)
                except OSError as exc:
                    log.error("topic %s: cannot open partitions %s: %s", timg.name, wanted, exc)
                    self._unopened.add(topic_id)
                    opened = []
                for p, replica_log in opened:
                    self.replicas.attach(p, topic, replica_log)
                    topic.partitions[p.index] = p
            for i, reg in timg.partitions.items():
                p = topic.partitions[i]
                if p is None:
                    continue
                if me not in reg.replicas:
                    await self._remove_partition(topic, p)
                    removed = True
                elif p.replica is not None:
                    await self.replicas.apply_metadata(p, reg, brokers, broker_epoch)
        self._reconciled = image
        if added or removed:
            self.heap.note_change(removed=removed)
        if not self._swept and METADATA_VERSION in image.features:
            # Only a bootstrapped image can say what does not belong: before its bootstrap
            # records (a one-node cluster's imported catalog among them) every topic is unknown.
            self._swept = True
            await anyio.to_thread.run_sync(self._sweep, image)
        await broker.groups.on_metadata(image)
        await broker.transactions.on_metadata(image)

    async def _remove(self, topic: Topic) -> None:
        broker = self.broker
        broker.topics.pop(topic.name, None)
        broker.topics_by_id.pop(topic.topic_id, None)
        local = [p for p in topic.partitions if p is not None]
        for p in local:
            await self.replicas.stop_replica(p, delete=True)
            p.wake_waiters()
        moved = [await p.retire(DELETE_SUFFIX) for p in local]

        def remove_moved() -> None:
            for d in moved:
                shutil.rmtree(d, ignore_errors=True)
        await anyio.to_thread.run_sync(remove_moved)
        log.info("removed topic %s", topic.name)
        broker.metrics.forget_topic(topic.name)
        await broker.groups.on_topic_deleted(topic.name)

    async def _remove_partition(self, topic: Topic, p) -> None:
        """The image moved this replica to other brokers (reassignment): stop and delete it."""
        topic.partitions[p.index] = None
        await self.replicas.stop_replica(p, delete=True)
        p.wake_waiters()
        moved = await p.retire(DELETE_SUFFIX)
        await anyio.to_thread.run_sync(lambda: shutil.rmtree(moved, ignore_errors=True))
        log.info("removed %r: no longer assigned to this broker", p)

    def _sweep(self, image: MetadataImage) -> None:
        """Partition directories the image does not place here: their topic was deleted (or
        moved away) while this broker was down."""
        me = self.broker.node_id
        keep = {f"{t.name}-{i}" for t in image.topics.values()
                for i, reg in t.partitions.items() if me in reg.replicas}
        for d in self.broker.config.log_dirs:
            if not d.exists():
                continue
            for entry in os.scandir(d):
                if not entry.is_dir():
                    continue
                if entry.name.endswith(DELETE_SUFFIX):
                    shutil.rmtree(entry.path, ignore_errors=True)
                elif (_PARTITION_DIR.match(entry.name) and entry.name not in keep
                      and entry.name != METADATA_PARTITION_DIR):
                    log.warning("removing %s: the metadata log does not place it on this broker", entry.path)
                    shutil.rmtree(entry.path, ignore_errors=True)
