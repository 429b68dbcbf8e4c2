"""Consumer group membership (the classic protocol) and committed offsets.

Theory of operation
-------------------
`GroupMembership` does the I/O for one consumer; the decisions live in group_state.MemberCore
(pure) and the partition math in assignors.py (pure).

Coordinator. FindCoordinator (v4+ batched keys when the broker speaks it, else one key) names
the broker that coordinates the group. We open a connection of our own to it: a JoinGroup is
parked at the coordinator for a whole rebalance, and a broker answers a connection's requests
in order, so sharing the node's connection would stall our fetches behind it (Java keeps a
separate coordinator connection for the same reason). NOT_COORDINATOR,
COORDINATOR_NOT_AVAILABLE, a dead connection or a session that expired without a heartbeat
answer drop that connection; the next request looks the coordinator up again, with backoff.

Rebalances start only in poll(), as in Java, and then run in one background task (in the
consumer's task group, as every task here): prepare
(eager: commit and revoke everything; cooperative: only what left the subscription; after a
reset: everything, as lost), JoinGroup (a second one with the id MEMBER_ID_REQUIRED gave us),
SyncGroup (the leader runs the assignor the coordinator chose over the members' subscriptions),
then apply: fetch the committed offsets of added partitions, call the listeners (an exception
from one is raised from the next poll, after the step completed, as in Java). A rebalance that
fails is raised from the poll() that sees it end. poll() waits for that task only while we own
nothing, so a cooperative member keeps consuming its other
partitions meanwhile. Under the cooperative protocol a member whose assignment lost partitions
revokes them and joins again at once, which lets the next generation give them away.

Heartbeats run in their own task from JoinGroup's answer on, every heartbeat_interval_ms. The
task also leaves the group when poll() has not been called for max_poll_interval_ms (Java's
poll timeout); static members never send LeaveGroup (KIP-345), not even on close. A member
that leaves while its JoinGroup is parked drops that connection first: its LeaveGroup would
otherwise wait behind the join.

Commits carry the generation and member id of a stable generation, or -1 and "" for a consumer
that assign()ed its partitions. Auto-commit runs from poll() every auto_commit_interval_ms, before
partitions are revoked, and on close.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import time
from dataclasses import dataclass
from typing import Awaitable, Callable, Iterable, Mapping, Protocol, Sequence

import anyio

from core.protocol import messages as m
from core.protocol.consumer_protocol import (ASSIGNMENT_VERSION, PROTOCOL_TYPE, Assignment,
                                             Subscription, decode_assignment, decode_subscription,
                                             encode_assignment, encode_subscription)
from core.protocol.errors import DecodeError, ErrorCode, KafkaError

from .assignors import COOPERATIVE, EAGER, Assignor, Member, get_assignor, rebalance_protocol
from .client import KafkaClient
from .connection import BrokerConnection
from .errors import ClientClosedError, UnsupportedVersionError
from .group_offsets import CommitFailedError, by_topic, commit_offsets, fetch_committed
from .group_state import NO_GENERATION, MemberCore, MemberState, Step
from .tasks import BackgroundTasks, Job

log = logging.getLogger(__name__)

__all__ = ["GroupMembership", "GroupMetadata", "CommitFailedError", "RebalanceTarget", "RebalanceListener"]

FIND_COORDINATOR, JOIN_GROUP, LEAVE_GROUP, SYNC_GROUP = (m.ApiKey.FIND_COORDINATOR, m.ApiKey.JOIN_GROUP,
                                                        m.ApiKey.LEAVE_GROUP, m.ApiKey.SYNC_GROUP)
GROUP_KEY_TYPE = 0
JOIN_TIMEOUT_LAPSE_MS = 5000     # Java's margin over the rebalance timeout for JoinGroup
METADATA_CHECK_MS = 1000         # how often poll() looks for new partitions of watched topics

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class GroupMetadata:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None


#: on_assign / on_revoke / on_lost: called with a set of partitions, sync or async.
RebalanceListener = Callable[[set[TopicPartition]], Awaitable[None] | None]


class RebalanceTarget(Protocol):
    """What the membership needs from its consumer."""

    def owned_partitions(self) -> set[TopicPartition]: ...
    def consumed_positions(self, partitions: set[TopicPartition] | None = None) -> dict[TopicPartition, int]: ...
    def drop_partitions(self, partitions: set[TopicPartition]) -> None: ...
    def set_assignment(self, assigned: set[TopicPartition], committed: dict[TopicPartition, int | None]) -> None: ...
    def wake(self) -> None: ...
    async def background(self) -> BackgroundTasks: ...   # where the membership's tasks run


def _now_ms() -> float:
    return time.monotonic() * 1000


class GroupMembership:
    def __init__(self, client: KafkaClient, group_id: str, target: RebalanceTarget, *,
                 group_instance_id: str | None = None, session_timeout_ms: int = 45000,
                 heartbeat_interval_ms: int = 3000, rebalance_timeout_ms: int = 300000,
                 assignors: Sequence[str | Assignor] = ("range", "cooperative-sticky"),
                 auto_commit: bool = True, auto_commit_interval_ms: int = 5000):
        if not group_id:
            raise ValueError("group_id must be a non-empty string")
        self.client = client
        self.group_id = group_id
        self.target = target
        self.core = MemberCore(group_id, group_instance_id=group_instance_id,
                               session_timeout_ms=session_timeout_ms,
                               rebalance_timeout_ms=rebalance_timeout_ms,
                               heartbeat_interval_ms=heartbeat_interval_ms,
                               retry_backoff_ms=client.retry_backoff_ms)
        self.assignors = [get_assignor(a) for a in assignors]
        if not self.assignors:
            raise ValueError("at least one assignor is needed")
        self.protocol = rebalance_protocol(self.assignors)
        self.auto_commit = auto_commit
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self.subscription: frozenset[str] = frozenset()
        self._conn: BrokerConnection | None = None
        self._coordinator_lock = asyncio.Lock()
        self._rebalance_job: Job | None = None
        self._rebalance_error: Exception | None = None
        self._heartbeat_job: Job | None = None
        self._commit_job: Job | None = None
        self._heartbeat_wake = asyncio.Event()
        self._next_auto_commit = _now_ms() + auto_commit_interval_ms
        self._last_committed: dict[TopicPartition, int] = {}
        self._watched: dict[str, int] = {}       # topic -> partition count the last assignment saw
        self._round_counts: dict[str, int] | None = None
        self._next_metadata_check = 0.0
        self._closed = False
        self._on_assign: RebalanceListener | None = None
        self._on_revoke: RebalanceListener | None = None
        self._on_lost: RebalanceListener | None = None
        self._listener_error: Exception | None = None

    # ------------------------------------------------------------------ state

    def metadata(self) -> GroupMetadata:
        c = self.core
        return GroupMetadata(self.group_id, c.generation, c.member_id, c.group_instance_id)

    def set_listeners(self, on_assign: RebalanceListener | None, on_revoke: RebalanceListener | None,
                      on_lost: RebalanceListener | None) -> None:
        """Replace the listeners given (None keeps the current one)."""
        self._on_assign = on_assign or self._on_assign
        self._on_revoke = on_revoke or self._on_revoke
        self._on_lost = on_lost or self._on_lost

    async def _call_listener(self, listener: RebalanceListener | None, partitions: set[TopicPartition]) -> None:
        # Java completes the rebalance step and then throws the listener's exception from poll()
        if listener is None:
            return
        try:
            result = listener(set(partitions))
            if inspect.isawaitable(result):
                await result
        except Exception as exc:
            log.exception("group %s: rebalance listener %r failed", self.group_id, listener)
            if self._listener_error is None:
                self._listener_error = exc

    @property
    def subscribed(self) -> bool:
        return bool(self.subscription)

    def subscribe(self, topics: Iterable[str]) -> None:
        topics = frozenset(topics)
        if topics != self.subscription and self.core.state is not MemberState.UNJOINED:
            self.core.request_rejoin("the subscription changed")
        self.subscription = topics
        self.target.wake()

    # ------------------------------------------------------------------ poll

    async def poll(self, deadline: float) -> None:
        """Called by every iteration of Consumer.poll: raise what went wrong, start a
        rebalance if one is needed (waiting for it while we own nothing), auto-commit."""
        error = self.core.take_error() or self._listener_error
        self._listener_error = None
        if error is not None:
            raise error
        if self.subscribed:
            await self._start_heartbeats()
            await self._check_metadata()
            job = self._rebalance_job
            if job is None and self.core.rejoin_needed:
                job = self._rebalance_job = (await self.target.background()).start_job(
                    self._rebalance, name=f"group {self.group_id} rebalance")
            if job is not None:
                remaining = deadline - time.monotonic()
                if remaining > 0 and not job.done and not self.target.owned_partitions():
                    with anyio.move_on_after(remaining):
                        await job.wait()
                if job.done:
                    self._rebalance_job = None
                    error, self._rebalance_error = self._rebalance_error, None
                    if error is not None:
                        raise error
        await self._maybe_auto_commit()

    def polled(self) -> None:
        self.core.polled(_now_ms())

    def time_to_next_poll(self) -> float:
        """Seconds until poll() has group work to do (auto-commit, a metadata check)."""
        now = _now_ms()
        due = [self._next_auto_commit] if self.auto_commit else []
        if self.subscribed and self.core.state is MemberState.STABLE:
            due.append(self._next_metadata_check)
        return max(min(due, default=now + 60_000) - now, 0) / 1000

    async def _check_metadata(self) -> None:
        """Rejoin when a watched topic gained partitions or appeared (Java does the same
        through its metadata snapshot), so new partitions get owners."""
        now = _now_ms()
        if now < self._next_metadata_check or self.core.state is not MemberState.STABLE:
            return
        self._next_metadata_check = now + METADATA_CHECK_MS
        watched = set(self._watched) | set(self.subscription)
        try:
            await self.client.ensure_topics(watched)
        except KafkaError as exc:
            if not exc.retriable:
                raise
            return
        counts = self._partition_counts(watched)
        if any(counts.get(t, 0) != self._watched.get(t, 0) for t in watched):
            log.info("group %s: partitions of %s changed; rejoining", self.group_id, sorted(watched))
            self.core.request_rejoin("the subscribed topics' partitions changed")

    def _partition_counts(self, topics: Iterable[str]) -> dict[str, int]:
        out = {}
        for t in topics:
            parts = self.client.cluster.partitions_for(t)
            if parts:
                out[t] = len(parts)
        return out

    # ------------------------------------------------------------------ coordinator

    async def coordinator(self, deadline: float | None = None) -> BrokerConnection:
        """The connection to the group's coordinator, looking it up (with backoff, until
        `deadline` in monotonic seconds) when we have none."""
        async with self._coordinator_lock:
            attempt = 0
            while True:
                conn = self._conn
                if conn is not None and not conn.closed:
                    return conn
                if self._closed:
                    raise ClientClosedError("consumer is closed")
                try:
                    node_id, host, port = await self._find_coordinator()
                    self._conn = await self.client.dedicated_connection(host, port, node_id)
                    # a fresh coordinator gets a whole session before we give up on it
                    self.core.session_deadline = _now_ms() + self.core.session_timeout_ms
                    log.debug("group %s: coordinator is node %d at %s:%d", self.group_id, node_id, host, port)
                    return self._conn
                except KafkaError as exc:
                    if not exc.retriable:
                        raise
                    delay = self.client.backoff_ms(attempt) / 1000
                    attempt += 1
                    if deadline is not None and time.monotonic() + delay >= deadline:
                        raise
                    log.debug("group %s: coordinator lookup failed (%s); retrying", self.group_id, exc)
                    await asyncio.sleep(delay)

    async def _find_coordinator(self) -> tuple[int, str, int]:
        node = await self.client.any_node()
        conn = await self.client.connection(node)
        version = conn.version_for(FIND_COORDINATOR)
        # both shapes filled in: the version decides which one goes on the wire
        request = m.FindCoordinatorRequest(key=self.group_id, key_type=GROUP_KEY_TYPE,
                                           coordinator_keys=[self.group_id])
        resp = await conn.send(request, version=version)
        if version >= 4:
            entry = next((c for c in resp.coordinators or [] if c.key == self.group_id), None)
            if entry is None:
                raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                 f"FindCoordinator answer from node {node} lacks group {self.group_id!r}")
            code, message, found = entry.error_code, entry.error_message, (entry.node_id, entry.host, entry.port)
        else:
            code, message, found = resp.error_code, resp.error_message, (resp.node_id, resp.host, resp.port)
        if code:
            raise KafkaError(code, f"FindCoordinator for group {self.group_id!r}: {message or ''}".rstrip(": "))
        return found

    async def forget_coordinator(self, reason: str) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.closed:
            log.info("group %s: dropping coordinator %s: %s", self.group_id, conn, reason)
            await conn.close()

    # ------------------------------------------------------------------ rebalance

    async def _rebalance(self) -> None:
        try:
            while self.subscribed and self.core.rejoin_needed and not self._closed:
                await self._prepare_join()
                assignment = await self._join_and_sync()
                if assignment is not None:
                    await self._complete(assignment)
        except Exception as exc:     # raised from poll()
            self._rebalance_error = exc
        finally:
            self.target.wake()

    async def _revoke(self, partitions: set[TopicPartition], lost: bool) -> None:
        if not partitions:
            return
        if not lost and self.auto_commit:
            await self._commit_quietly(self.target.consumed_positions(partitions))
        # the listener runs while the partitions are still ours, so that it can commit them
        await self._call_listener((self._on_lost or self._on_revoke) if lost else self._on_revoke, partitions)
        self.target.drop_partitions(partitions)

    async def _prepare_join(self) -> None:
        owned = self.target.owned_partitions()
        if self.core.generation == NO_GENERATION:
            await self._revoke(owned, lost=True)  # our generation is gone: others may own them
        elif self.protocol == EAGER:
            await self._revoke(owned, lost=False)
        else:
            await self._revoke({tp for tp in owned if tp[0] not in self.subscription}, lost=False)

    async def _join_and_sync(self) -> Assignment | None:
        """One join round; None when the round must start over from _prepare_join."""
        attempt = 0
        while not self._closed:
            if self.core.fatal is not None:
                raise self.core.fatal
            assignment = None
            try:
                conn = await self.coordinator()
                step = await self._join(conn)
                if step is Step.SYNC:
                    step, assignment = await self._sync(conn)
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                self.core.join_interrupted(f"no answer from the coordinator: {exc}")
                step = Step.REDISCOVER
            if step is Step.OK:
                return assignment
            if step in (Step.FAIL, Step.FATAL):
                error = self.core.take_error()
                assert error is not None   # FAIL and FATAL come with their error
                raise error
            if step is Step.REJOIN:
                if self.core.generation == NO_GENERATION and self.target.owned_partitions():
                    return None  # reset while owning partitions: they are lost now
                continue
            if step is Step.REDISCOVER:
                await self.forget_coordinator("it answered it is not (or no longer) the coordinator")
            await asyncio.sleep(self.client.backoff_ms(attempt) / 1000)
            attempt += 1
        raise ClientClosedError("consumer is closed")

    def _subscription_blob(self, assignor: Assignor) -> bytes:
        core = self.core
        return encode_subscription(Subscription(
            topics=sorted(self.subscription), user_data=assignor.user_data(core.generation),
            owned_partitions=by_topic(self.target.owned_partitions()), generation_id=core.generation))

    async def _join(self, conn: BrokerConnection) -> Step:
        core = self.core
        version = conn.version_for(JOIN_GROUP)
        if core.is_static and version < 5:
            raise UnsupportedVersionError(f"group.instance.id needs JoinGroup v5+; {conn} speaks v{version}")
        R = m.JoinGroupRequest
        request = R(group_id=self.group_id, session_timeout_ms=core.session_timeout_ms,
                    rebalance_timeout_ms=core.rebalance_timeout_ms, member_id=core.member_id,
                    group_instance_id=core.group_instance_id, protocol_type=PROTOCOL_TYPE,
                    protocols=[R.JoinGroupRequestProtocol(name=a.name, metadata=self._subscription_blob(a))
                               for a in self.assignors],
                    reason=core.rejoin_reason)
        log.debug("group %s: joining (%s)", self.group_id, core.rejoin_reason)
        core.join_sent()
        timeout = max(self.client.request_timeout_ms, core.rebalance_timeout_ms + JOIN_TIMEOUT_LAPSE_MS)
        resp = await conn.send(request, version=version, timeout_ms=timeout)
        step = core.on_join_response(resp, version)
        if step is Step.SYNC:
            core.joined_at(_now_ms())
            self._heartbeat_wake.set()
        return step

    async def _sync(self, conn: BrokerConnection) -> tuple[Step, Assignment | None]:
        core = self.core
        version = conn.version_for(SYNC_GROUP)
        assignments = []
        self._round_counts = None
        if core.is_leader and not core.skip_assignment:
            assignments = await self._lead()
        R = m.SyncGroupRequest
        request = R(group_id=self.group_id, generation_id=core.generation, member_id=core.member_id,
                    group_instance_id=core.group_instance_id, protocol_type=PROTOCOL_TYPE,
                    protocol_name=core.protocol_name,
                    assignments=[R.SyncGroupRequestAssignment(member_id=mid, assignment=blob)
                                 for mid, blob in assignments])
        resp = await conn.send(request, version=version)
        step = core.on_sync_response(resp, version)
        if step is not Step.OK:
            return step, None
        try:
            return Step.OK, decode_assignment(resp.assignment or b"")
        except DecodeError as exc:
            return core.bad_assignment(f"the leader's assignment does not decode: {exc}"), None

    async def _lead(self) -> list[tuple[str, bytes]]:
        """Run the chosen assignor over every member's subscription."""
        core = self.core
        assignor = next((a for a in self.assignors if a.name == core.protocol_name), None)
        if assignor is None:
            raise KafkaError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                             f"the coordinator chose assignor {core.protocol_name!r}, which we did not offer")
        members, versions = self._group_members()
        counts = await self._fresh_counts({t for mem in members.values() for t in mem.topics})
        self._round_counts = counts  # the leader watches every topic of the group
        result = assignor.assign(counts, members)
        log.info("group %s: generation %d, %s assignment for %d members", self.group_id, core.generation,
                 assignor.name, len(members))
        return [(mid, encode_assignment(Assignment(result.get(mid, {}),
                                                   version=min(versions[mid], ASSIGNMENT_VERSION))))
                for mid in members]

    def _group_members(self) -> tuple[dict[str, Member], dict[str, int]]:
        """The JoinGroup members (leader only), and their subscription versions."""
        members: dict[str, Member] = {}
        versions: dict[str, int] = {}
        for mem in self.core.members:
            try:
                sub = decode_subscription(mem.metadata)
            except DecodeError as exc:
                log.warning("group %s: member %s sent a subscription we cannot read (%s); it gets nothing",
                            self.group_id, mem.member_id, exc)
                sub = Subscription(topics=[], version=0)
            members[mem.member_id] = Member.from_subscription(mem.member_id, mem.group_instance_id, sub)
            versions[mem.member_id] = sub.version
        return members, versions

    async def _fresh_counts(self, topics: set[str]) -> dict[str, int]:
        try:
            await self.client.ensure_topics(topics)
        except KafkaError as exc:
            if not exc.retriable:
                raise
            log.warning("group %s: metadata refresh failed (%s); using what we know", self.group_id, exc)
        return self._partition_counts(topics)

    async def _complete(self, assignment: Assignment) -> None:
        core = self.core
        assigned: set[TopicPartition] = set()
        for topic, parts in assignment.partitions.items():
            if topic in self.subscription:
                assigned.update((topic, p) for p in parts)
            else:
                core.request_rejoin("the assignment names topics we do not subscribe to")
        owned = self.target.owned_partitions()
        revoked, added = owned - assigned, assigned - owned
        if revoked:
            await self._revoke(revoked, lost=False)
            if self.protocol == COOPERATIVE:
                core.request_rejoin("revoked partitions; joining again so that they can move")
        try:
            committed = await self.fetch_committed(added) if added else {}
        except KafkaError:
            # the group thinks we own `added`; a new round sorts that out
            core.request_rejoin("could not read the committed offsets of our new partitions")
            raise
        if self._round_counts is None:
            topics = set(self.subscription)
            if core.is_leader:  # told to skip the assignment, it still watches the group's topics
                topics |= {t for mem in self._group_members()[0].values() for t in mem.topics}
            self._round_counts = await self._fresh_counts(topics)
        self._watched = self._round_counts
        log.info("group %s: generation %d member %s owns %d partitions (+%d -%d)", self.group_id,
                 core.generation, core.member_id, len(assigned), len(added), len(revoked))
        self.target.set_assignment(assigned, committed)
        await self._call_listener(self._on_assign, added)

    # ------------------------------------------------------------------ heartbeats

    async def _start_heartbeats(self) -> None:
        if self._heartbeat_job is None or self._heartbeat_job.done:
            self._heartbeat_job = (await self.target.background()).start_job(
                self._heartbeat_loop, name=f"group {self.group_id} heartbeats")

    async def _sleep(self, ms: float | None) -> None:
        self._heartbeat_wake.clear()
        try:
            async with asyncio.timeout(None if ms is None else ms / 1000):
                await self._heartbeat_wake.wait()
        except TimeoutError:
            pass

    async def _heartbeat_loop(self) -> None:
        core = self.core
        while not self._closed and not self.client.closed:
            now = _now_ms()
            wait = core.time_to_heartbeat(now)
            if wait is None:
                await self._sleep(None)
            elif core.poll_expired(now):
                log.warning("group %s: poll() not called for max_poll_interval_ms=%d; leaving the group",
                            self.group_id, core.rebalance_timeout_ms)
                await self.leave("consumer poll timeout has expired")
                self.target.wake()
            elif core.session_expired(now):
                await self.forget_coordinator("session timed out without a heartbeat answer")
                core.heartbeat_failed(now)
                try:
                    await self.coordinator()
                except KafkaError as exc:
                    log.warning("group %s: coordinator lookup failed: %s", self.group_id, exc)
            elif wait > 0:
                await self._sleep(min(wait, max(core.poll_deadline - now, 0)))
            else:
                await self._heartbeat_once(now)

    async def _heartbeat_once(self, now: float) -> None:
        core = self.core
        generation, member_id = core.generation, core.member_id
        core.heartbeat_sent(now)
        try:
            conn = await self.coordinator()
            resp = await conn.send(m.HeartbeatRequest(group_id=self.group_id, generation_id=generation,
                                                      member_id=member_id,
                                                      group_instance_id=core.group_instance_id))
        except KafkaError as exc:
            core.heartbeat_failed(_now_ms())
            if exc.retriable:
                await self.forget_coordinator(f"heartbeat failed: {exc}")
            else:
                log.warning("group %s: heartbeat failed: %s", self.group_id, exc)
            return
        step = core.on_heartbeat_response(resp.error_code, generation, member_id, _now_ms())
        if step is Step.REDISCOVER:
            await self.forget_coordinator(f"heartbeat answered {ErrorCode(resp.error_code).name}")
        elif step in (Step.REJOIN, Step.FAIL, Step.FATAL):
            self.target.wake()

    # ------------------------------------------------------------------ leaving

    async def leave(self, reason: str) -> None:
        member_id, joining = self.core.member_id, self.core.state is MemberState.JOINING
        if not self.core.leave(reason):
            return
        if joining:  # a LeaveGroup would queue behind our JoinGroup parked on that connection
            await self.forget_coordinator("leaving while our JoinGroup is parked")
        R = m.LeaveGroupRequest
        request = R(group_id=self.group_id, member_id=member_id,
                    members=[R.MemberIdentity(member_id=member_id, group_instance_id=None, reason=reason)])
        timeout_ms = min(self.client.request_timeout_ms, 5000)
        try:
            conn = await self.coordinator(deadline=time.monotonic() + timeout_ms / 1000)
            resp = await conn.send(request, version=conn.version_for(LEAVE_GROUP), timeout_ms=timeout_ms)
        except KafkaError as exc:
            log.info("group %s: LeaveGroup failed: %s", self.group_id, exc)
            return
        codes = [resp.error_code] + [mr.error_code for mr in resp.members or []]
        if any(codes):
            log.info("group %s: LeaveGroup answered %s", self.group_id,
                     [ErrorCode(c).name if c in ErrorCode._value2member_map_ else c for c in codes if c])

    async def unsubscribe(self) -> None:
        await self._stop_rebalance()
        owned = self.target.owned_partitions()
        await self._revoke(owned, lost=self._owned_are_lost())
        self.subscription = frozenset()
        await self.leave("the consumer unsubscribed")

    def _owned_are_lost(self) -> bool:
        # as Java's onLeavePrepare: without a stable generation they may be someone else's already
        return self.core.generation == NO_GENERATION or self.core.state is not MemberState.STABLE

    async def _stop_rebalance(self) -> None:
        job, self._rebalance_job = self._rebalance_job, None
        if job is not None:
            job.cancel()
            await job.wait()
            self._rebalance_error = None

    async def close(self) -> None:
        """Commit (auto-commit), revoke, leave, and drop the coordinator connection."""
        await self._stop_rebalance()
        commit_job, self._commit_job = self._commit_job, None
        if commit_job is not None:
            await commit_job.wait()
        try:
            if self.subscribed:
                await self._revoke(self.target.owned_partitions(), lost=self._owned_are_lost())
                await self.leave("the consumer is closing")
            elif self.auto_commit:
                await self._commit_quietly(self.target.consumed_positions())
        finally:
            self._closed = True
            self._heartbeat_wake.set()
            job, self._heartbeat_job = self._heartbeat_job, None
            if job is not None:
                job.cancel()
                await job.wait()
            await self.forget_coordinator("the consumer is closing")

    # ------------------------------------------------------------------ offsets

    async def _maybe_auto_commit(self) -> None:
        now = _now_ms()
        if not self.auto_commit or now < self._next_auto_commit:
            return
        self._next_auto_commit = now + self.auto_commit_interval_ms
        if self._commit_job is not None and not self._commit_job.done:
            return
        if self.subscribed and self.core.state is not MemberState.STABLE:
            return
        offsets = {tp: o for tp, o in self.target.consumed_positions().items()
                   if self._last_committed.get(tp) != o}
        if offsets:
            self._commit_job = (await self.target.background()).start_job(
                self._commit_quietly, offsets, name=f"group {self.group_id} auto-commit")

    async def _commit_quietly(self, offsets: dict[TopicPartition, int]) -> None:
        """Auto-commit: failures are logged, not raised (Java's auto-commit does the same)."""
        if not offsets:
            return
        try:
            await self.commit(offsets, timeout_ms=min(self.client.default_api_timeout_ms, 10000))
        except KafkaError as exc:
            log.warning("group %s: auto-commit of %d partitions failed: %s", self.group_id, len(offsets), exc)

    def committed_ok(self, offsets: dict[TopicPartition, int]) -> None:
        self._last_committed.update(offsets)

    async def commit(self, offsets: Mapping[TopicPartition, int], *, timeout_ms: float | None = None) -> None:
        """OffsetCommit `offsets`, retrying coordinator moves until the timeout. Refusals
        raise CommitFailedError with the broker's code."""
        budget = self.client.default_api_timeout_ms if timeout_ms is None else timeout_ms
        await commit_offsets(self, offsets, budget)

    async def fetch_committed(self, partitions: Iterable[TopicPartition], *,
                              timeout_ms: float | None = None) -> dict[TopicPartition, int | None]:
        """The group's committed offsets (None: nothing committed)."""
        budget = self.client.default_api_timeout_ms if timeout_ms is None else timeout_ms
        return await fetch_committed(self, partitions, budget)
