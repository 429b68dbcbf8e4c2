"""A consumer group's committed offsets: OffsetCommit and OffsetFetch through the coordinator.

Both retry what Kafka's clients retry (the coordinator moved or is loading, a transactional
commit is still pending, the connection died) until their time budget runs out, looking the
coordinator up again in between. What the coordinator refuses for good comes back as an
exception carrying the broker's error code: CommitFailedError for commits. A refusal that
says our generation is over (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID) or that the group is
rebalancing also makes the member rejoin on the next poll (group_state.on_commit_error).
"""
from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Iterable, Mapping

from core.protocol import messages as m
from core.protocol.errors import ErrorCode, KafkaError

from .group_state import Step

if TYPE_CHECKING:
    from .group import GroupMembership

__all__ = ["CommitFailedError", "commit_offsets", "fetch_committed", "by_topic"]

OFFSET_COMMIT, OFFSET_FETCH = m.ApiKey.OFFSET_COMMIT, m.ApiKey.OFFSET_FETCH
TopicPartition = tuple[str, int]
_COORDINATOR_MOVED = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE})
_COORDINATOR_ERRORS = _COORDINATOR_MOVED | {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}


class CommitFailedError(KafkaError):
    """An OffsetCommit the coordinator refused (or that timed out); `.code` says why."""


def by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for t, p in sorted(partitions):
        out.setdefault(t, []).append(p)
    return out


def _name(code: int) -> str:
    return ErrorCode(code).name if code in ErrorCode._value2member_map_ else f"error {code}"


async def commit_offsets(g: "GroupMembership", offsets: Mapping[TopicPartition, int], budget_ms: float) -> None:
    pending = {(t, int(p)): int(o) for (t, p), o in offsets.items()}
    deadline = time.monotonic() + budget_ms / 1000
    attempt = 0
    while pending:
        generation, member_id, instance_id = g.core.commit_identity(g.subscribed)
        try:
            conn = await g.coordinator(deadline)
            failed = await _send_commit(conn, g.group_id, pending, generation, member_id, instance_id)
        except KafkaError as exc:
            if not exc.retriable or time.monotonic() >= deadline:
                raise
            await g.forget_coordinator(f"OffsetCommit failed: {exc}")
            failed = {tp: ErrorCode.NETWORK_EXCEPTION for tp in pending}
        else:
            g.committed_ok({tp: o for tp, o in pending.items() if tp not in failed})
            pending = {tp: pending[tp] for tp in failed}
            if not pending:
                return
            code = next(iter(failed.values()))
            step = g.core.on_commit_error(code, generation, member_id)
            if step in (Step.FAIL, Step.FATAL):
                if g.core.rejoin_needed:
                    g.target.wake()
                raise CommitFailedError(code, f"OffsetCommit of {len(pending)} partitions of group "
                                              f"{g.group_id!r} (generation {generation})")
            if step is Step.REDISCOVER:
                await g.forget_coordinator(f"OffsetCommit answered {_name(code)}")
        delay = g.client.backoff_ms(attempt) / 1000
        attempt += 1
        if time.monotonic() + delay >= deadline:
            raise CommitFailedError(ErrorCode.REQUEST_TIMED_OUT,
                                    f"OffsetCommit of group {g.group_id!r} did not succeed within "
                                    f"{budget_ms:.0f} ms (last error {_name(next(iter(failed.values())))})")
        await asyncio.sleep(delay)


async def _send_commit(conn, group_id: str, offsets: dict[TopicPartition, int], generation: int,
                       member_id: str, instance_id: str | None) -> dict[TopicPartition, int]:
    """Send one OffsetCommit; return the partitions that failed, with their codes."""
    R = m.OffsetCommitRequest
    request = R(group_id=group_id, generation_id_or_member_epoch=generation, member_id=member_id,
                group_instance_id=instance_id, retention_time_ms=-1,
                topics=[R.OffsetCommitRequestTopic(name=t, partitions=[
                    R.OffsetCommitRequestPartition(partition_index=p, committed_offset=offsets[(t, p)],
                                                   committed_leader_epoch=-1, committed_metadata="")
                    for p in ps]) for t, ps in by_topic(offsets).items()])
    resp = await conn.send(request, version=conn.version_for(OFFSET_COMMIT))
    failed = {}
    answered = set()
    for t in resp.topics:
        for p in t.partitions:
            answered.add((t.name, p.partition_index))
            if p.error_code:
                failed[(t.name, p.partition_index)] = p.error_code
    for tp in offsets:
        if tp not in answered:
            failed[tp] = ErrorCode.UNKNOWN_SERVER_ERROR
    return failed


async def fetch_committed(g: "GroupMembership", partitions: Iterable[TopicPartition],
                          budget_ms: float) -> dict[TopicPartition, int | None]:
    """OffsetFetch with require_stable, so that transactional commits still in flight are
    waited out rather than skipped."""
    wanted = {(t, int(p)) for t, p in partitions}
    out: dict[TopicPartition, int | None] = {}
    deadline = time.monotonic() + budget_ms / 1000
    attempt = 0
    while wanted:
        try:
            conn = await g.coordinator(deadline)
            code, got = await _send_offset_fetch(conn, g.group_id, wanted)
        except KafkaError as exc:
            if not exc.retriable or time.monotonic() >= deadline:
                raise
            await g.forget_coordinator(f"OffsetFetch failed: {exc}")
            code, got = ErrorCode.NETWORK_EXCEPTION, {}
        if not code:  # v0-1 report coordinator errors per partition
            code = next((c for _, c in got.values() if c in _COORDINATOR_ERRORS), 0)
        if code in _COORDINATOR_MOVED:
            await g.forget_coordinator(f"OffsetFetch answered {_name(code)}")
            got = {}
        elif code and code not in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NETWORK_EXCEPTION):
            raise KafkaError(code, f"OffsetFetch of group {g.group_id!r}")
        for tp, (offset, pcode) in got.items():
            if tp not in wanted or pcode in _COORDINATOR_ERRORS or pcode == ErrorCode.UNSTABLE_OFFSET_COMMIT:
                continue
            if pcode and pcode != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise KafkaError(pcode, f"OffsetFetch of {tp[0]}-{tp[1]} in group {g.group_id!r}")
            out[tp] = offset if offset >= 0 and not pcode else None
            wanted.discard(tp)
        if not wanted:
            break
        delay = g.client.backoff_ms(attempt) / 1000
        attempt += 1
        if time.monotonic() + delay >= deadline:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT,
                             f"OffsetFetch of group {g.group_id!r} did not succeed within {budget_ms:.0f} ms")
        await asyncio.sleep(delay)
    return out


async def _send_offset_fetch(conn, group_id: str, wanted: set[TopicPartition]
                             ) -> tuple[int, dict[TopicPartition, tuple[int, int]]]:
    """Send one OffsetFetch; return (group error code, {tp: (offset, partition error code)})."""
    version = conn.version_for(OFFSET_FETCH)
    R = m.OffsetFetchRequest
    topics = by_topic(wanted)
    if version >= 8:
        request = R(require_stable=True, groups=[R.OffsetFetchRequestGroup(
            group_id=group_id, member_id=None, member_epoch=-1,
            topics=[R.OffsetFetchRequestTopics(name=t, partition_indexes=ps) for t, ps in topics.items()])])
    else:
        request = R(group_id=group_id, require_stable=True,
                    topics=[R.OffsetFetchRequestTopic(name=t, partition_indexes=ps) for t, ps in topics.items()])
    resp = await conn.send(request, version=version)
    if version >= 8:
        group = next((grp for grp in resp.groups if grp.group_id == group_id), None)
        if group is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, {}
        code, answered = group.error_code, group.topics
    else:
        code, answered = (resp.error_code if version >= 2 else 0), resp.topics
    return code, {(t.name, p.partition_index): (p.committed_offset, p.error_code)
                  for t in answered or [] for p in t.partitions}
