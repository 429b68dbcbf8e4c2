"""Consumer-group checkpoints of a mirror link: where each source group would resume on the
target, written to `<source alias>.checkpoints.internal` on the target in MM2's format, and
optionally committed into the target's groups.

Every `interval_s` the emitter lists the source's consumer groups (less MM2's default
exclusions), fetches their committed offsets, and translates each offset of a mirrored
partition with the link's OffsetSyncStore (mirror/translation.py): exact anywhere inside a
batch copied whole (a sync's run), otherwise where the last run below ends (re-delivering at
most what lies between), and nothing when no sync covers the offset, never a guess. A checkpoint is written when its translation
changed. Names are the target's (`eu-west-1.orders`), as MM2 writes them.

A group ahead of the link (it committed c beyond what the link has copied, its latest run's
end m) is the usual case under steady traffic across a WAN: a caught-up consumer commits what
it read before the copies are acknowledged. Translation declines there, and a group that is
always ahead would never get a checkpoint: an unplanned failover would leave it no position on
the target at all. So the emitter checkpoints it at the translation of m, the target's end of
what the link has copied. That is conservative and exact in what matters: every copy below it
is of a record below m <= c, which the group has consumed, and nothing at or above it is (the
records in [m, c) are not on the target; they are what the link's lag would lose). The store
is the link's own, fed as the copiers write, so m is not behind the offset-syncs topic; and c
must not be beyond the source partition's end, or the commit belongs to a topic deleted and
made again, about which the syncs say nothing.

With `sync_group_offsets`, translated offsets are also committed to the target group of the
same name, but only while that group has no members there (a running consumer owns its
offsets) and only forward: an offset already ahead on the target is left alone.
"""
from __future__ import annotations

import logging
import re
import time

import anyio

from core.client import Admin, NewTopic
from core.client.errors import KafkaError

from .records import Checkpoint, encode_checkpoint

log = logging.getLogger("mirror.checkpoints")

# MM2's groups.exclude default: tools and Connect's own groups are not failed over.
DEFAULT_GROUPS_EXCLUDE = re.compile(r"console-consumer-.*|connect-.*|__.*")
IDLE_STATES = {"Empty", "Dead"}


class CheckpointEmitter:
    def __init__(self, link, *, interval_s: float = 5.0, sync_group_offsets: bool = False):
        self.link = link
        self.interval_s = interval_s
        self.sync_group_offsets = sync_group_offsets
        self.topic = link.policy.checkpoints_topic(link.config.source_alias)
        self.emitted: dict[tuple[str, str, int], tuple[int, int]] = {}
        self.last_run: float | None = None       # wall clock of the last complete pass
        self.errors = 0

    async def run(self) -> None:
        await self._ensure_topic()
        while True:
            try:
                await self.emit_once()
                self.last_run = time.time()
            except (KafkaError, OSError) as exc:
                self.errors += 1
                log.info("%s: checkpoints failed (%s); retrying", self.link.name, exc)
            await anyio.sleep(self.interval_s)

    async def _ensure_topic(self) -> None:
        admin = Admin(self.link.target)
        if self.topic in await admin.list_topics(internal=True):
            return
        result = await admin.create_topics([NewTopic(self.topic, 1, self.link.config.replication_factor,
                                                     {"cleanup.policy": "compact"})])
        error = result.get(self.topic)
        if isinstance(error, KafkaError) and error.code != 36:    # TOPIC_ALREADY_EXISTS
            raise error

    def checkpoints(self, offsets: dict[str, dict], upstream_ends: dict[tuple[str, int], int] | None = None
                    ) -> list[Checkpoint]:
        """The checkpoints for {group: {(topic, partition): OffsetAndMetadata}} (pure but
        for the link's sync store); `upstream_ends`, the source partitions' end offsets, lets a
        group ahead of the link be checkpointed (the module's docstring)."""
        out = []
        mirrored = {topic for topic, _ in self.link.copiers}
        for group, committed in sorted(offsets.items()):
            if not isinstance(committed, dict):
                continue
            for (topic, partition), om in sorted(committed.items()):
                if topic not in mirrored or om is None or isinstance(om, KafkaError):
                    continue
                downstream = self.link.store.translate(topic, partition, om.offset)
                if downstream is None and upstream_ends is not None:
                    downstream = self._ahead_of_link(topic, partition, om.offset, upstream_ends.get((topic, partition)))
                if downstream is None:
                    continue
                remote = self.link.policy.format_remote_topic(self.link.config.source_alias, topic)
                out.append(Checkpoint(group, remote, partition, om.offset, downstream, om.metadata or ""))
        return out

    def _ahead_of_link(self, topic: str, partition: int, committed: int, upstream_end: int | None) -> int | None:
        syncs = self.link.store.syncs(topic, partition)
        if not syncs or upstream_end is None or committed > upstream_end:
            return None
        copied_to = syncs[-1].upstream + syncs[-1].extent
        if committed < copied_to:
            return None         # below the earliest sync kept, or in a gap: translation's call
        return self.link.store.translate(topic, partition, copied_to)

    async def emit_once(self) -> list[Checkpoint]:
        source = Admin(self.link.source)
        groups = [g.group_id for g in await source.list_groups()
                  if not DEFAULT_GROUPS_EXCLUDE.fullmatch(g.group_id)]
        if not groups:
            return []
        offsets = await source.list_groups_offsets({g: None for g in groups})
        mirrored = {topic for topic, _ in self.link.copiers}
        committed = {tp for c in offsets.values() if isinstance(c, dict) for tp in c if tp[0] in mirrored}
        ends = await source.list_offsets({tp: "latest" for tp in committed}) if committed else {}
        upstream_ends = {tp: e.offset for tp, e in ends.items() if not isinstance(e, Exception)}
        fresh = []
        for cp in self.checkpoints(offsets, upstream_ends):
            key = (cp.group, cp.topic, cp.partition)
            if self.emitted.get(key) != (cp.upstream_offset, cp.downstream_offset):
                fresh.append(cp)
        producer = self.link.checkpoint_producer
        for cp in fresh:
            key, value = encode_checkpoint(cp)
            await producer.send(self.topic, value=value, key=key, partition=0)
        if fresh:
            await producer.flush()
            for cp in fresh:
                self.emitted[(cp.group, cp.topic, cp.partition)] = (cp.upstream_offset, cp.downstream_offset)
        if self.sync_group_offsets:
            await self._sync_groups(fresh or [])
        return fresh

    async def _sync_groups(self, fresh: list[Checkpoint]) -> None:
        by_group: dict[str, dict] = {}
        for cp in fresh:
            by_group.setdefault(cp.group, {})[(cp.topic, cp.partition)] = cp.downstream_offset
        if not by_group:
            return
        target = Admin(self.link.target)
        described = await target.describe_groups(list(by_group))
        for group, wanted in by_group.items():
            desc = described.get(group)
            if isinstance(desc, KafkaError) or (desc is not None and desc.state not in IDLE_STATES
                                                and desc.members):
                continue        # someone consumes there: their offsets are theirs
            current = await target.list_group_offsets(group, list(wanted))
            forward = {}
            for tp, offset in wanted.items():
                now = current.get(tp)
                if now is None or isinstance(now, KafkaError) or now.offset < offset:
                    forward[tp] = offset
            if forward:
                await target.alter_group_offsets(group, forward)
