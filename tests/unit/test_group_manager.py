"""The group driver against a real on-disk broker, in process, with a controlled clock:
offsets are in __consumer_offsets before a commit returns, survive a reopen, expire by the
retention rules, and deleted groups stay deleted."""
from __future__ import annotations

import anyio
import pytest

from core.broker.groups.events import DeleteGroups, Heartbeat, JoinGroup, SyncGroup
from core.broker.groups.state import GroupState
from core.broker.groups.storage import TOPIC, CommittedOffset, partition_for
from core.protocol.consumer_protocol import Subscription, encode_subscription
from core.protocol.errors import ErrorCode as E
from tests.support.group_broker import MINUTE, Clock, create_topic, make_broker, run

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]


async def test_commits_survive_reopen_and_land_in_the_groups_partition(tmp_path, anyio_backend):
    clock = Clock()
    broker = make_broker(tmp_path, clock)

    async def body(groups):
        await create_topic(broker)
        code = await groups.commit_offsets("g", -1, "", None, {
            ("t", 0): CommittedOffset(5, 1, "meta", clock.now), ("t", 1): CommittedOffset(9, -1, "", clock.now)})
        assert code == E.NONE
        # the records went to the group's own partition only
        topic = broker.topics[TOPIC]
        ends = [p.log.log_end_offset for p in topic.partitions]
        home = partition_for("g", 4)
        assert ends[home] == 2 and sum(ends) == 2
        assert groups.fetch_offsets("g", [("t", 0), ("t", 1), ("t", 2)]) == {
            ("t", 0): CommittedOffset(5, 1, "meta", clock.now), ("t", 1): CommittedOffset(9, -1, "", clock.now),
            ("t", 2): None}

    await run(broker, body)
    broker.close()
    reopened = make_broker(tmp_path, clock)
    try:
        assert reopened.groups.fetch_offsets("g", None) == {
            ("t", 0): CommittedOffset(5, 1, "meta", clock.now), ("t", 1): CommittedOffset(9, -1, "", clock.now)}
        assert reopened.groups.group_state("g") is GroupState.EMPTY
    finally:
        reopened.close()


async def test_a_later_commit_wins_after_reopen(tmp_path, anyio_backend):
    clock = Clock()
    broker = make_broker(tmp_path, clock)

    async def body(groups):
        await create_topic(broker)
        for offset in (1, 2, 3):
            assert await groups.commit_offsets("g", -1, "", None, {("t", 0): CommittedOffset(offset)}) == E.NONE

    await run(broker, body)
    broker.close()
    reopened = make_broker(tmp_path, clock)
    try:
        assert reopened.groups.fetch_offsets("g", [("t", 0)])[("t", 0)].offset == 3
    finally:
        reopened.close()


async def test_expiry_removes_offsets_then_the_empty_group_and_stays_removed(tmp_path, anyio_backend):
    clock = Clock()
    broker = make_broker(tmp_path, clock)

    async def body(groups):
        await create_topic(broker)
        await groups.commit_offsets("simple", -1, "", None, {("t", 0): CommittedOffset(1, commit_timestamp_ms=clock.now)})
        clock.now += 5 * MINUTE
        await groups.commit_offsets("simple", -1, "", None, {("t", 1): CommittedOffset(2, commit_timestamp_ms=clock.now)})
        clock.now += 5 * MINUTE      # t-0 is 10 minutes old, t-1 only 5
        assert await groups.expire_offsets() == 1
        assert set(groups.fetch_offsets("simple", None)) == {("t", 1)}
        assert groups.group_state("simple") is GroupState.EMPTY
        clock.now += 5 * MINUTE
        assert await groups.expire_offsets() == 1
        assert groups.fetch_offsets("simple", None) == {}
        assert groups.group_state("simple") is None    # the group went with its last offset

    await run(broker, body)
    broker.close()
    reopened = make_broker(tmp_path, clock)
    try:
        assert reopened.groups.fetch_offsets("simple", None) == {}
        assert reopened.groups.group_state("simple") is None
    finally:
        reopened.close()


async def test_managed_group_offsets_expire_from_when_it_became_empty(tmp_path, anyio_backend):
    clock = Clock()
    broker = make_broker(tmp_path, clock)
    meta = encode_subscription(Subscription(["t"]))

    async def body(groups):
        await create_topic(broker)
        join = await groups.request(JoinGroup(groups.new_request_id(), clock.now, "g", "", "consumer",
                                              (("range", meta),), 10_000, 10_000,
                                              require_known_member_id=False))
        assert join.error == E.NONE
        sync = await groups.request(SyncGroup(groups.new_request_id(), clock.now, "g", join.generation_id,
                                              join.member_id, ((join.member_id, b""),)))
        assert sync.error == E.NONE
        assert await groups.commit_offsets("g", join.generation_id, join.member_id, None,
                                           {("t", 0): CommittedOffset(7, commit_timestamp_ms=clock.now)}) == E.NONE
        clock.now += 60 * MINUTE     # live and subscribed: nothing expires however old
        beat = await groups.request(Heartbeat(groups.new_request_id(), clock.now, "g",
                                              join.generation_id, join.member_id))
        assert beat.error == E.NONE
        assert await groups.expire_offsets() == 0
        # the member's session runs out: the group empties now
        clock.now += 11_000
        groups.submit(groups.coordinator.tick(clock.now))
        assert groups.group_state("g") is GroupState.EMPTY
        clock.now += 10 * MINUTE - 1
        assert await groups.expire_offsets() == 0
        clock.now += 1
        assert await groups.expire_offsets() == 1
        assert groups.group_state("g") is None

    await run(broker, body)
    broker.close()


async def test_deleted_group_and_its_offsets_stay_deleted_after_reopen(tmp_path, anyio_backend):
    clock = Clock()
    broker = make_broker(tmp_path, clock)

    async def body(groups):
        await create_topic(broker)
        await groups.commit_offsets("g", -1, "", None, {("t", 0): CommittedOffset(4)})
        result = await groups.request(DeleteGroups(groups.new_request_id(), clock.now, ("g", "nope")))
        assert dict(result.results) == {"g": E.NONE, "nope": E.GROUP_ID_NOT_FOUND}
        assert groups.fetch_offsets("g", None) == {}

    await run(broker, body)
    broker.close()
    reopened = make_broker(tmp_path, clock)
    try:
        assert reopened.groups.fetch_offsets("g", None) == {}
        assert reopened.groups.group_state("g") is None
    finally:
        reopened.close()


async def test_deleting_a_topic_deletes_its_committed_offsets(tmp_path, anyio_backend):
    clock = Clock()
    broker = make_broker(tmp_path, clock)

    async def body(groups):
        await create_topic(broker, "a")
        await create_topic(broker, "b")
        await groups.commit_offsets("g", -1, "", None, {("a", 0): CommittedOffset(1), ("b", 0): CommittedOffset(2)})
        await broker.delete_topic("a")
        await groups._write_and_wait([])   # the tombstones are queued behind the deletion
        assert set(groups.fetch_offsets("g", None)) == {("b", 0)}

    await run(broker, body)
    broker.close()
    reopened = make_broker(tmp_path, clock)
    try:
        assert set(reopened.groups.fetch_offsets("g", None)) == {("b", 0)}
    finally:
        reopened.close()


async def test_an_unreadable_record_is_skipped_not_fatal(tmp_path, anyio_backend):
    clock = Clock()
    broker = make_broker(tmp_path, clock)

    async def body(groups):
        await create_topic(broker)
        await groups.commit_offsets("g", -1, "", None, {("t", 0): CommittedOffset(4)})
        # a garbage value under a valid key, written past the coordinator (as a bad tool might)
        from core.broker.groups import storage
        from core.protocol.records import build_batch, scan_batches
        p = broker.topics[TOPIC].partition(partition_for("g", 4))
        data = bytearray(build_batch([(storage.offset_key("g", "t", 1), b"\x00\x03junk", None, clock.now)]))
        await p.append(data, scan_batches(data), clock.now)

    await run(broker, body)
    broker.close()
    reopened = make_broker(tmp_path, clock)
    try:
        assert set(reopened.groups.fetch_offsets("g", None)) == {("t", 0)}
    finally:
        reopened.close()
