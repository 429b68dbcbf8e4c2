"""Review findings on the group driver, each reproduced against a real node (in process, on
disk).

Races are made deterministic by holding the writer task back: the node runs it, so a test
holds it at a gate (`held_writer`) in front of its next batch; actions then wait in the
pipeline exactly as they do behind a slow append, and the test opens the gate when it wants
the queued writes to happen.
"""
from __future__ import annotations

from contextlib import contextmanager

import anyio
import pytest
from anyio.lowlevel import checkpoint

from core.broker.groups.events import JoinGroup, SyncGroup
from core.broker.groups.state import GroupState
from core.broker.groups.storage import CommittedOffset
from core.protocol.consumer_protocol import Subscription, encode_subscription
from core.protocol.errors import ErrorCode as E
from tests.support.group_node import MINUTE, Clock, create_topic, group_node
from tests.support.inprocess import delete_topic

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]


async def settle() -> None:
    for _ in range(20):
        await checkpoint()


@contextmanager
def held_writer(groups):
    """Hold the node's group writer back: it takes no batch until `release()` is called (or
    the block ends). Call with the pipeline idle, so that nothing is being written meanwhile."""
    assert not groups._pipeline
    gate = anyio.Event()
    real = groups._execute

    async def gated(batch):
        await gate.wait()
        await real(batch)

    groups._execute = gated
    try:
        yield gate.set
    finally:
        gate.set()
        del groups._execute   # the class's method again


async def test_expiry_keeps_a_group_whose_first_commit_is_still_being_written(tmp_path, anyio_backend):
    """A simple consumer's first commit creates the group at once but its offsets reach the store
    only after the append; expiry in between saw an Empty group with no offsets, removed it and
    tombstoned (at write time) the offsets the client had just been told were committed. Kafka
    counts pending commits in hasOffsets."""
    clock = Clock()
    async with group_node(tmp_path, clock) as node:   # __consumer_offsets exists
        groups = node.broker.groups
        await create_topic(node, "t", 2)
        codes = []
        with held_writer(groups) as release:
            async with anyio.create_task_group() as tg:
                async def commit():
                    codes.append(await groups.commit_offsets(
                        "simple", -1, "", None, {("t", 0): CommittedOffset(5, commit_timestamp_ms=clock.now)}))
                tg.start_soon(commit)
                await settle()                     # the commit waits in the pipeline
                tg.start_soon(groups.expire_offsets)
                await settle()
                release()
                while not codes:
                    await anyio.sleep(0.01)
                await groups._write_and_wait([])
                tg.cancel_scope.cancel()
        assert codes == [E.NONE]
        assert groups.fetch_offsets("simple", None) == {("t", 0): CommittedOffset(5, commit_timestamp_ms=clock.now)}
        assert groups.group_state("simple") is GroupState.EMPTY
    async with group_node(tmp_path, clock) as node:
        assert set(node.broker.groups.fetch_offsets("simple", None)) == {("t", 0)}


async def test_expiry_does_not_tombstone_a_newer_commit_of_the_same_partition(tmp_path, anyio_backend):
    """An old offset is judged expired while a fresh commit of the same partition is queued
    ahead of the tombstone: the tombstone must not delete the fresh commit (Kafka skips
    partitions with a pending commit)."""
    clock = Clock()
    async with group_node(tmp_path, clock) as node:
        groups = node.broker.groups
        await create_topic(node, "t", 2)
        assert await groups.commit_offsets("simple", -1, "", None, {
            ("t", 0): CommittedOffset(1, commit_timestamp_ms=clock.now)}) == E.NONE
        clock.now += 11 * MINUTE               # the committed offset is past retention
        codes = []
        with held_writer(groups) as release:
            async with anyio.create_task_group() as tg:
                async def commit():
                    codes.append(await groups.commit_offsets("simple", -1, "", None, {
                        ("t", 0): CommittedOffset(2, commit_timestamp_ms=clock.now)}))
                tg.start_soon(commit)
                await settle()
                tg.start_soon(groups.expire_offsets)
                await settle()
                release()
                while not codes:
                    await anyio.sleep(0.01)
                await groups._write_and_wait([])
                tg.cancel_scope.cancel()
        assert codes == [E.NONE]
        assert groups.fetch_offsets("simple", [("t", 0)])[("t", 0)].offset == 2
    async with group_node(tmp_path, clock) as node:
        got = node.broker.groups.fetch_offsets("simple", [("t", 0)])[("t", 0)]
        assert got is not None and got.offset == 2


async def test_deleting_a_topic_removes_offsets_whose_commit_was_still_being_written(tmp_path, anyio_backend):
    """The tombstones for a deleted topic were computed from the store when the topic went,
    missing a commit accepted just before and still in the pipeline: the offset outlived its
    topic and would apply to a topic created again under the same name."""
    clock = Clock()
    async with group_node(tmp_path, clock) as node:   # __consumer_offsets exists
        groups = node.broker.groups
        await create_topic(node, "a", 2)
        codes = []
        with held_writer(groups) as release:
            async with anyio.create_task_group() as tg:
                async def commit():
                    codes.append(await groups.commit_offsets("g", -1, "", None, {("a", 0): CommittedOffset(7)}))
                tg.start_soon(commit)
                await settle()
                await delete_topic(node, "a")   # through the controller; the broker has removed it
                release()
                while not codes:
                    await anyio.sleep(0.01)
                await groups._write_and_wait([])
                tg.cancel_scope.cancel()
        assert codes == [E.NONE]
        assert groups.fetch_offsets("g", None) == {}
    async with group_node(tmp_path, clock) as node:
        assert node.broker.groups.fetch_offsets("g", None) == {}


async def _stable_consumer_group(groups, clock, topics):
    meta = encode_subscription(Subscription(topics))
    join = await groups.request(JoinGroup(groups.new_request_id(), clock.now, "g", "", "consumer",
                                          (("range", meta),), 600_000, 600_000,
                                          require_known_member_id=False))
    assert join.error == E.NONE
    sync = await groups.request(SyncGroup(groups.new_request_id(), clock.now, "g", join.generation_id,
                                          join.member_id, ((join.member_id, b""),)))
    assert sync.error == E.NONE
    return join


async def test_explicit_retention_never_expires_a_subscribed_topic_of_a_live_group(tmp_path, anyio_backend):
    """OffsetCommit v2-4 retention: Kafka (OffsetMetadataManager.cleanupExpiredOffsets) skips the
    topics a live consumer group subscribes to whatever their expire timestamp; the store
    expired them, so a consumer that is still reading lost its position."""
    clock = Clock()
    async with group_node(tmp_path, clock, group_max_session_timeout_ms=1_800_000) as node:
        groups = node.broker.groups
        await create_topic(node, "t", 2)
        join = await _stable_consumer_group(groups, clock, ["t"])
        assert await groups.commit_offsets("g", join.generation_id, join.member_id, None, {
            ("t", 0): CommittedOffset(3, commit_timestamp_ms=clock.now, expire_timestamp_ms=clock.now + 1000)}) == E.NONE
        clock.now += 2000
        assert await groups.expire_offsets() == 0
        assert groups.fetch_offsets("g", [("t", 0)])[("t", 0)].offset == 3


async def test_a_live_group_in_a_rebalance_keeps_its_offsets(tmp_path, anyio_backend):
    """Kafka expires the offsets of a live consumer group only while it is Stable (its
    subscriptions are settled); a rebalancing group keeps everything."""
    clock = Clock()
    async with group_node(tmp_path, clock, group_max_session_timeout_ms=1_800_000) as node:
        groups = node.broker.groups
        await create_topic(node, "t", 2)
        await create_topic(node, "old", 2)
        async with anyio.create_task_group() as tg:
            join = await _stable_consumer_group(groups, clock, ["t"])
            assert await groups.commit_offsets("g", join.generation_id, join.member_id, None, {
                ("old", 0): CommittedOffset(3, commit_timestamp_ms=clock.now)}) == E.NONE
            # a second member joins: the group rebalances (the first member has not rejoined)
            meta = encode_subscription(Subscription(["t"]))
            tg.start_soon(groups.request, JoinGroup(groups.new_request_id(), clock.now, "g", "", "consumer",
                                                    (("range", meta),), 600_000, 600_000,
                                                    require_known_member_id=False))
            await settle()
            assert groups.group_state("g") is GroupState.PREPARING_REBALANCE
            clock.now += 11 * MINUTE
            assert await groups.expire_offsets() == 0
            assert groups.fetch_offsets("g", [("old", 0)])[("old", 0)] is not None
            tg.cancel_scope.cancel()


async def test_an_unexpected_write_error_fails_the_request_not_the_node(tmp_path, anyio_backend):
    """Any exception other than KafkaError escaped the writer task and took the whole
    task group (the node) down, leaving every queued request unanswered. Here: metadata that
    offset.metadata.max.bytes allows but the record format's int16 string cannot carry."""
    clock = Clock()
    async with group_node(tmp_path, clock, offset_metadata_max_bytes=100_000) as node:
        groups = node.broker.groups
        await create_topic(node, "t", 2)
        code = await groups.commit_offsets("g", -1, "", None, {("t", 0): CommittedOffset(1, metadata="x" * 40_000)})
        assert code == E.UNKNOWN_SERVER_ERROR
        assert groups.fetch_offsets("g", [("t", 0)])[("t", 0)] is None
        # the writer is still there
        assert await groups.commit_offsets("g", -1, "", None, {("t", 0): CommittedOffset(2)}) == E.NONE


async def test_load_reads_past_a_batch_whose_last_records_were_compacted_away(tmp_path, anyio_backend):
    """Compaction keeps a batch's lastOffsetDelta when it drops the batch's last records; the
    loader moved on from the last *record* it saw, so its next read returned that same batch,
    it saw no progress and stopped: every later record of the partition (here a whole
    segment) was not loaded, and a restart lost committed offsets."""
    from core.broker.groups.storage import TOPIC, partition_for
    clock = Clock()
    # segments too small for the cleaner to merge the two below into one; the node's own
    # cleaner (first pass after log.cleaner.backoff.ms) must not compact before the test does
    extra = dict(offsets_topic_segment_bytes=1024, log_cleaner_backoff_ms=3_600_000)
    big = "m" * 600
    async with group_node(tmp_path, clock, **extra) as node:
        broker, groups = node.broker, node.broker.groups
        await create_topic(node, "t", 2)
        assert await groups.commit_offsets("g", -1, "", None, {
            ("t", 0): CommittedOffset(1, metadata=big), ("t", 1): CommittedOffset(1)}) == E.NONE   # offsets 0, 1
        p = broker.topics[TOPIC].partition(partition_for("g", 4))
        p.log.roll()
        assert await groups.commit_offsets("g", -1, "", None, {("t", 1): CommittedOffset(2, metadata=big)}) == E.NONE
        p.log.roll()
        result = await p.compact(clock.now, 1 << 20)
        assert result.records_removed == 1      # (t, 1) at offset 1, superseded by offset 2
    async with group_node(tmp_path, clock, **extra) as node:
        assert {tp: c.offset for tp, c in node.broker.groups.fetch_offsets("g", None).items()} == {
            ("t", 0): 1, ("t", 1): 2}


async def test_expiry_keeps_an_empty_group_while_a_new_member_is_between_its_two_joins(tmp_path, anyio_backend):
    """KIP-394: the first JoinGroup creates the Empty group and hands out a member id; expiry
    running before the second join removed the group (no offsets), and the second join got
    UNKNOWN_MEMBER_ID (this made test_groups_protocol's 300 ms expiry tests flaky)."""
    clock = Clock()
    meta = encode_subscription(Subscription(["t"]))
    async with group_node(tmp_path, clock) as node:
        groups = node.broker.groups
        first = await groups.request(JoinGroup(groups.new_request_id(), clock.now, "g", "", "consumer",
                                               (("range", meta),), 10_000, 10_000))
        assert first.error == E.MEMBER_ID_REQUIRED
        await groups.expire_offsets()
        second = await groups.request(JoinGroup(groups.new_request_id(), clock.now, "g", first.member_id,
                                                "consumer", (("range", meta),), 10_000, 10_000))
        assert second.error == E.NONE and second.member_id == first.member_id
