"""Consumer: group membership or manual assignment, positions, fetching, decoding records.

    consumer = Consumer(client, group_id="billing", on_assign=print)
    consumer.subscribe(["orders"])          # partitions come from the group (group.py)
    records = await consumer.poll(timeout_ms=1000)
    await consumer.commit()                 # positions; or commit({("orders", 0): 42})
    await consumer.close()                  # commits (auto_commit), revokes, leaves the group

Groups. With a group_id, subscribe() makes the consumer a member of a consumer group
(group.py: coordinator, join/sync, heartbeats, assignors, commits). poll() drives it: a
rebalance replaces the assignment below, new partitions start at the group's committed offset
(else at auto_offset_reset), and on_revoke / on_assign / on_lost are called with the partitions
that go or come. assign() keeps working as before; with a group_id such a consumer commits as
Kafka's "simple consumer" (generation -1). What a commit sends is the position of the next
record poll() has not yet returned, so records already fetched but not returned are not
skipped after a restart.

Theory of operation
-------------------
Each assigned partition has a position (the next offset to return) or a pending reset
("earliest", "latest"), resolved with ListOffsets before fetching. `poll()` returns records
already fetched if there are any; otherwise it makes sure every leader with fetchable
partitions has one Fetch in flight (one request per broker, for all its partitions) and
waits for the first answer or the timeout. Fetches keep running in the background, so
the next poll usually finds data waiting. Each broker's fetches run in a fetch session
(KIP-227, fetch_session.py): after the first, a Fetch names only the partitions whose position
moved and forgets those no longer fetched from that broker, and the answer holds only the
partitions with something new.

A fetch answer is kept raw (the records field is a zero-copy slice of the response frame)
and decoded when drained. It is used only if the partition's position still equals the
offset it was fetched for: a seek in between makes it stale, and it is dropped.

Decoding, batch by batch: brokers return whole batches, so the first batch may start before
the position (records below it are skipped) and the last one may be cut short by the size
limit (`iter_batch_headers` stops before it; it is fetched again next time). Control batches
(transaction markers) are skipped; with read_committed, batches of aborted transactions are
skipped using the response's aborted-transaction list, as the Java consumer does. After
each batch the position moves to the batch's end, which also steps over compaction gaps.

Errors: OFFSET_OUT_OF_RANGE resets the position by `auto_offset_reset` ("none" raises it
from poll); leader and topic errors flag metadata stale and back the partition off for
`retry_backoff_ms`; anything else is raised from poll.

Tasks. Fetches, and the group's rebalances, heartbeats and auto-commits, run in the consumer's
own anyio task group (tasks.py). It runs inside a task of the KafkaClient's task group, started
by the first poll() (or start(), or `async with`), so that poll() may be called from any task
and inside any timeout, and close() from any task; close() ends it, and so does closing the
client. An exception a task raises by mistake is raised from the next poll().
"""
from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from core.protocol import messages as m
from core.protocol.errors import DecodeError, ErrorCode, KafkaError
from core.protocol.records import ControlRecord, decode_batch, iter_batch_headers

from .client import KafkaClient
from .errors import ClientClosedError
from .fetch_session import SESSION_ERRORS, FetchSessionHandler
from .group import GroupMembership, GroupMetadata, RebalanceListener
from .offsets import EARLIEST, LATEST, OffsetAndTimestamp, list_offsets, timestamp_spec
from .tasks import BackgroundTasks

log = logging.getLogger(__name__)

__all__ = ["Consumer", "ConsumerRecord", "RebalanceListener", "read_to_end"]

FETCH = m.ApiKey.FETCH
TopicPartition = tuple[str, int]

READ_UNCOMMITTED, READ_COMMITTED = 0, 1

_REFRESH_ERRORS = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.REPLICA_NOT_AVAILABLE,
    ErrorCode.INCONSISTENT_TOPIC_ID, ErrorCode.OFFSET_NOT_AVAILABLE,
})


@dataclass(slots=True)
class ConsumerRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


@dataclass(slots=True)
class _PartitionState:
    position: int | None = None
    reset: int | None = EARLIEST     # a pending ListOffsets timestamp, when position is None
    high_watermark: int = -1
    log_start_offset: int = -1
    retry_at: float = 0.0            # backed off after an error until then
    error: KafkaError | None = None  # raised by the next poll


@dataclass(slots=True)
class _CompletedFetch:
    tp: TopicPartition
    fetch_offset: int
    records: memoryview
    aborted: list                     # heap of (first_offset, producer_id), read_committed only
    aborted_producers: set = field(default_factory=set)
    pos: int = 0                      # how far into `records` we have decoded
    pending: deque = field(default_factory=deque)  # decoded but not yet returned


class Consumer:
    def __init__(self, client: KafkaClient, *, group_id: str | None = None,
                 group_instance_id: str | None = None, auto_commit: bool = True,
                 auto_commit_interval_ms: int = 5000, session_timeout_ms: int = 45000,
                 heartbeat_interval_ms: int = 3000, max_poll_interval_ms: int = 300000,
                 rebalance_timeout_ms: int | None = None,
                 assignors: Sequence[str] = ("range", "cooperative-sticky"),
                 on_assign: RebalanceListener | None = None, on_revoke: RebalanceListener | None = None,
                 on_lost: RebalanceListener | None = None,
                 fetch_min_bytes: int = 1, fetch_max_wait_ms: int = 500,
                 fetch_max_bytes: int = 50 * 1024 * 1024, max_partition_fetch_bytes: int = 1024 * 1024,
                 isolation_level: str = "read_uncommitted", auto_offset_reset: str = "earliest",
                 max_poll_records: int | None = None, check_crcs: bool = True):
        """`rebalance_timeout_ms` defaults to `max_poll_interval_ms`, as in Java. `on_lost`
        (partitions taken away without a revocation: our generation was reset) defaults to
        `on_revoke`. Without a group_id, subscribe() and commit() are refused."""
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise ValueError(f"auto_offset_reset must be earliest, latest or none, not {auto_offset_reset!r}")
        if isolation_level not in ("read_uncommitted", "read_committed"):
            raise ValueError(f"unknown isolation_level {isolation_level!r}")
        self.client = client
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.isolation = READ_COMMITTED if isolation_level == "read_committed" else READ_UNCOMMITTED
        self.auto_offset_reset = auto_offset_reset
        self.max_poll_records = max_poll_records
        self.check_crcs = check_crcs
        self._states: dict[TopicPartition, _PartitionState] = {}
        self._completed: deque[_CompletedFetch] = deque()
        self._fetching: set[int] = set()                      # nodes with a Fetch in flight
        self._sessions: dict[int, FetchSessionHandler] = {}   # node -> its fetch session
        self._node_retry_at: dict[int, float] = {}
        self._fetch_event = asyncio.Event()
        self._iter_buffer: deque[ConsumerRecord] = deque()
        self._closed = False
        self._manual = False
        self._tasks = BackgroundTasks(f"Consumer({group_id})" if group_id else "Consumer",
                                      on_error=self._background_failed)
        self._tasks_starting = asyncio.Lock()
        self._background_error: BaseException | None = None
        self._group: GroupMembership | None = None
        if group_id is not None:
            self._group = GroupMembership(
                client, group_id, self, group_instance_id=group_instance_id,
                session_timeout_ms=session_timeout_ms, heartbeat_interval_ms=heartbeat_interval_ms,
                rebalance_timeout_ms=max_poll_interval_ms if rebalance_timeout_ms is None else rebalance_timeout_ms,
                assignors=assignors, auto_commit=auto_commit, auto_commit_interval_ms=auto_commit_interval_ms)
            self._group.set_listeners(on_assign, on_revoke, on_lost)
        elif group_instance_id is not None or on_assign or on_revoke or on_lost:
            raise ValueError("group_instance_id and rebalance listeners need a group_id")

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> "Consumer":
        """Start the client (if it is not) and the consumer's task group; poll() does the
        same when it comes first."""
        await self.client.start()
        await self.background()
        return self

    async def close(self) -> None:
        """Leave the group (after an auto-commit and the revocation listener) and stop fetching."""
        if self._closed:
            return
        try:
            if self._group is not None:
                await self._group.close()
        finally:
            await self._stop_fetching()

    async def _stop_fetching(self) -> None:
        self._closed = True
        await self._tasks.close()    # fetches in flight are cancelled
        self._fetching.clear()
        self._completed.clear()

    async def background(self) -> BackgroundTasks:
        """The consumer's running task group, started in the client's if it is not yet."""
        if not self._tasks.running:
            if self._closed:
                raise ClientClosedError("consumer is closed")
            async with self._tasks_starting:
                if not self._tasks.running:
                    await self.client.start_background(self._tasks.serve, name=f"{self._tasks.owner} tasks")
        return self._tasks

    def _background_failed(self, exc: BaseException) -> None:
        if self._background_error is None:
            self._background_error = exc
        self._fetch_event.set()

    async def __aenter__(self) -> "Consumer":
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # ------------------------------------------------------------------ assignment & positions

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Replace the assignment. Kept partitions keep their positions; new ones start
        from auto_offset_reset (or from a seek)."""
        new = {(t, int(p)) for t, p in partitions}
        if self._group is not None and self._group.subscribed:
            raise RuntimeError("assign() is not allowed while subscribed; unsubscribe() first")
        self._manual = bool(new)
        self._set_states(new)

    def _set_states(self, new: set[TopicPartition]) -> None:
        default_reset = None if self.auto_offset_reset == "none" else timestamp_spec(self.auto_offset_reset)
        self._states = {tp: self._states.get(tp) or _PartitionState(reset=default_reset) for tp in new}
        self._completed = deque(c for c in self._completed if c.tp in new)

    def assignment(self) -> set[TopicPartition]:
        return set(self._states)

    # ------------------------------------------------------------------ groups

    def subscribe(self, topics: Iterable[str], *, on_assign: RebalanceListener | None = None,
                  on_revoke: RebalanceListener | None = None, on_lost: RebalanceListener | None = None) -> None:
        """Join the consumer group for `topics` (replacing an earlier subscription); the next
        poll() joins. Listeners given here replace the constructor's."""
        if isinstance(topics, str):
            topics = [topics]
        topics = set(topics)
        group = self._require_group("subscribe()")
        if self._manual:
            raise RuntimeError("subscribe() is not allowed after assign(); assign([]) first")
        if not topics:
            raise ValueError("subscribe() needs at least one topic; use unsubscribe() to leave")
        group.set_listeners(on_assign, on_revoke, on_lost)
        group.subscribe(topics)

    def subscription(self) -> set[str]:
        return set(self._group.subscription) if self._group is not None else set()

    async def unsubscribe(self) -> None:
        """Revoke every partition (auto-committing first) and leave the group."""
        if self._group is not None and self._group.subscribed:
            await self._group.unsubscribe()

    def group_metadata(self) -> GroupMetadata:
        """The group, generation and member id this consumer has now (generation -1 and
        member id "" when not in a generation)."""
        return self._require_group("group_metadata()").metadata()

    async def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Commit `offsets`, or the positions of every assigned partition (the next record
        poll() would return). Raises CommitFailedError (a KafkaError) with the broker's code;
        REBALANCE_IN_PROGRESS also makes the next poll() rejoin."""
        group = self._require_group("commit()")
        if offsets is None:
            offsets = self.consumed_positions()
        await group.commit(offsets)

    async def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The group's committed offsets (None where nothing is committed)."""
        return await self._require_group("committed()").fetch_committed(partitions)

    def _require_group(self, what: str) -> GroupMembership:
        if self._group is None:
            raise KafkaError(ErrorCode.INVALID_GROUP_ID, f"{what} needs a consumer with a group_id")
        return self._group

    # RebalanceTarget: what group.py calls back

    def owned_partitions(self) -> set[TopicPartition]:
        return set(self._states)

    def consumed_positions(self, partitions: set[TopicPartition] | None = None) -> dict[TopicPartition, int]:
        """Positions to commit: decoding runs ahead of what poll() has returned (records wait
        in fetched batches and in the iterator's buffer), so the first such record counts."""
        out = {tp: st.position for tp, st in self._states.items()
               if st.position is not None and (partitions is None or tp in partitions)}
        for cf in self._completed:
            if cf.pending and cf.tp in out:
                out[cf.tp] = min(out[cf.tp], cf.pending[0].offset)
        for r in self._iter_buffer:
            tp = (r.topic, r.partition)
            if tp in out and r.offset < out[tp]:
                out[tp] = r.offset
        return out

    def drop_partitions(self, partitions: set[TopicPartition]) -> None:
        for tp in partitions:
            if self._states.pop(tp, None) is not None:
                self._drop_buffered(tp)

    def set_assignment(self, assigned: set[TopicPartition], committed: dict[TopicPartition, int | None]) -> None:
        """Partitions new to us start at their committed offsets, else at auto_offset_reset."""
        self._set_states(assigned)
        for tp, offset in committed.items():
            if offset is not None and tp in self._states:
                st = self._states[tp]
                st.position, st.reset = offset, None

    def wake(self) -> None:
        self._fetch_event.set()

    # ------------------------------------------------------------------ positions

    def _state(self, topic: str, partition: int) -> _PartitionState:
        try:
            return self._states[(topic, partition)]
        except KeyError:
            raise ValueError(f"{topic}-{partition} is not assigned") from None

    def seek(self, topic: str, partition: int, offset: int) -> None:
        st = self._state(topic, partition)
        st.position, st.reset, st.error = int(offset), None, None
        self._drop_buffered((topic, partition))

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self._seek_reset(partitions, EARLIEST)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        self._seek_reset(partitions, LATEST)

    def _seek_reset(self, partitions, spec: int) -> None:
        for tp in partitions or list(self._states):
            st = self._state(*tp)
            st.position, st.reset, st.error = None, spec, None
            self._drop_buffered(tp)

    def _drop_buffered(self, tp: TopicPartition) -> None:
        self._completed = deque(c for c in self._completed if c.tp != tp)
        self._iter_buffer = deque(r for r in self._iter_buffer if (r.topic, r.partition) != tp)

    async def position(self, topic: str, partition: int) -> int:
        """The offset of the next record poll will return (resolving a pending reset)."""
        st = self._state(topic, partition)
        deadline = time.monotonic() + self.client.default_api_timeout_ms / 1000
        while st.position is None:
            st.retry_at = 0.0
            await self._reset_positions(max(deadline - time.monotonic(), 0) * 1000)
            if st.error is not None:
                error, st.error = st.error, None
                raise error
            if st.position is None:
                if time.monotonic() >= deadline:
                    raise KafkaError(ErrorCode.REQUEST_TIMED_OUT,
                                     f"no offset for {topic}-{partition} within default_api_timeout_ms")
                await asyncio.sleep(self.client.retry_backoff_ms / 1000)
        return st.position

    def highwater(self, topic: str, partition: int) -> int:
        """The high watermark seen in the last fetch of the partition (-1 before one)."""
        return self._state(topic, partition).high_watermark

    async def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return await self._offsets(partitions, EARLIEST)

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return await self._offsets(partitions, LATEST)

    async def offsets_for_times(self, timestamps: dict[TopicPartition, int]
                                ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        res = await list_offsets(self.client, timestamps, isolation_level=self.isolation)
        out = {}
        for tp, r in res.items():
            if isinstance(r, KafkaError):
                raise r
            out[tp] = None if r.offset < 0 else r
        return out

    async def _offsets(self, partitions, spec) -> dict[TopicPartition, int]:
        res = await list_offsets(self.client, {tp: spec for tp in partitions}, isolation_level=self.isolation)
        out = {}
        for tp, r in res.items():
            if isinstance(r, KafkaError):
                raise r
            out[tp] = r.offset
        return out

    async def _reset_positions(self, timeout_ms: float | None = None) -> None:
        """Resolve pending resets with ListOffsets. Retriable failures leave the position
        unresolved (tried again after retry_backoff_ms); others are raised by poll."""
        now = time.monotonic()
        need = {}
        for tp, st in self._states.items():
            if st.position is not None or st.error is not None or st.retry_at > now:
                continue
            if st.reset is None:
                st.error = KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                                      f"no position for {tp[0]}-{tp[1]} and auto_offset_reset='none'")
                continue
            need[tp] = st.reset
        if not need:
            return
        res = await list_offsets(self.client, need, isolation_level=self.isolation, timeout_ms=timeout_ms)
        for tp, r in res.items():
            state = self._states.get(tp)
            if state is None or state.position is not None or state.reset != need[tp]:
                continue  # reassigned or sought meanwhile
            if isinstance(r, KafkaError):
                if r.retriable:
                    state.retry_at = time.monotonic() + self.client.retry_backoff_ms / 1000
                else:
                    state.error = r
            else:
                state.position, state.reset = r.offset, None

    # ------------------------------------------------------------------ polling

    async def poll(self, timeout_ms: float = 0, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records from the assigned partitions: returns as soon as some are available,
        or [] after `timeout_ms`."""
        if self._closed:
            raise ClientClosedError("consumer is closed")
        max_records = max_records or self.max_poll_records
        deadline = time.monotonic() + timeout_ms / 1000
        group = self._group
        if group is not None:
            group.polled()
        while True:
            tasks = await self.background()    # ClientClosedError once the client is closed
            if self._background_error is not None:
                error, self._background_error = self._background_error, None
                raise error
            if group is not None:
                await group.poll(deadline)
            self._raise_partition_errors()
            if any(st.position is None and st.error is None for st in self._states.values()):
                await self._reset_positions(max(deadline - time.monotonic(), 0) * 1000)
                self._raise_partition_errors()
            records = self._drain(max_records)
            if records:
                return records
            await self._maybe_refresh_metadata()
            self._fetch_event.clear()
            next_retry = self._send_fetches(tasks)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            if next_retry is not None:
                remaining = min(remaining, max(next_retry - time.monotonic(), 0.001))
            if group is not None:
                remaining = min(remaining, max(group.time_to_next_poll(), 0.001))
            try:
                async with asyncio.timeout(remaining):
                    await self._fetch_event.wait()
            except TimeoutError:
                pass

    def __aiter__(self) -> "Consumer":
        return self

    async def __anext__(self) -> ConsumerRecord:
        while not self._iter_buffer:
            if self._closed:
                raise StopAsyncIteration
            self._iter_buffer.extend(await self.poll(timeout_ms=self.fetch_max_wait_ms + 1000))
        return self._iter_buffer.popleft()

    def _raise_partition_errors(self) -> None:
        for st in self._states.values():
            if st.error is not None:
                error, st.error = st.error, None
                raise error

    async def _maybe_refresh_metadata(self) -> None:
        topics = {tp[0] for tp in self._states}
        if topics:
            try:
                await self.client.ensure_topics(topics)
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                log.debug("metadata refresh failed: %s", exc)

    # ------------------------------------------------------------------ fetching

    def _send_fetches(self, tasks: BackgroundTasks) -> float | None:
        """Start a Fetch to every leader that has none in flight; return the earliest time
        a backed-off partition or node becomes fetchable again (None if none is waiting)."""
        now = time.monotonic()
        buffered = {c.tp for c in self._completed}
        by_node: dict[int, list[TopicPartition]] = {}
        next_retry = None
        for tp, st in self._states.items():
            if st.error is not None or tp in buffered:
                continue
            if st.retry_at > now:  # backed off (a fetch error, or a reset that must be retried)
                next_retry = st.retry_at if next_retry is None else min(next_retry, st.retry_at)
                continue
            if st.position is None:
                continue
            leader = self.client.leader_for(*tp)
            if leader is None:
                self.client.request_metadata_update()
                st.retry_at = now + self.client.retry_backoff_ms / 1000
                continue
            by_node.setdefault(leader, []).append(tp)
        for node, tps in by_node.items():
            if node in self._fetching:
                continue
            retry_at = self._node_retry_at.get(node, 0.0)
            if retry_at > now:
                next_retry = retry_at if next_retry is None else min(next_retry, retry_at)
                continue
            self._fetching.add(node)
            tasks.start_soon(self._fetch_from, node, tps)
        return next_retry

    async def _fetch_from(self, node: int, tps: list[TopicPartition]) -> None:
        try:
            await self._fetch(node, tps)
        except Exception as exc:
            log.debug("fetch from node %d failed: %s", node, exc)
            self._node_retry_at[node] = time.monotonic() + self.client.retry_backoff_ms / 1000
            if isinstance(exc, KafkaError) and exc.retriable:
                self.client.request_metadata_update()
            else:  # surface it from the next poll through the first partition of that node
                for tp, st in self._states.items():
                    if self.client.leader_for(*tp) == node and st.error is None:
                        st.error = exc if isinstance(exc, KafkaError) else KafkaError(
                            ErrorCode.UNKNOWN_SERVER_ERROR, f"fetch failed: {exc!r}")
                        break
        finally:
            self._fetching.discard(node)
            self._fetch_event.set()

    async def _fetch(self, node: int, tps: list[TopicPartition]) -> None:
        conn = await self.client.connection(node)
        cluster = self.client.cluster
        version = conn.version_for(FETCH)
        if version >= 13 and any(cluster.topic_id(t) is None for t, _ in tps):
            version = conn.version_for(FETCH, 12)  # KIP-516 ids unknown: fetch by name
        use_ids = version >= 13
        R = m.FetchRequest
        session = self._sessions.setdefault(node, FetchSessionHandler())
        offsets: dict[TopicPartition, int] = {}
        for tp in tps:
            # Chosen before this task ran and before the connection was ready: a rebalance,
            # a seek or an error may have taken the partition away since.
            st = self._states.get(tp)
            if st is None or st.position is None or st.error is not None:
                continue
            offsets[tp] = st.position
            session.want(tp, (cluster.leader_epoch(*tp), st.position, self.max_partition_fetch_bytes))
        for tp in [tp for tp in session.wanted() if tp not in offsets]:
            session.drop(tp)   # buffered, backed off, unassigned or led elsewhere: not this round
        plan = session.build(sessions=version >= 7)
        topics: dict[str, list] = {}
        for (name, index), (leader_epoch, position, max_bytes) in plan.partitions.items():
            topics.setdefault(name, []).append(R.FetchPartition(
                partition=index, current_leader_epoch=leader_epoch, fetch_offset=position,
                last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=max_bytes))
        forgotten: dict[str, list[int]] = {}
        for name, index in plan.forgotten:
            forgotten.setdefault(name, []).append(index)
        names_by_id = {}

        def topic(name: str):
            if use_ids:
                tid = cluster.topic_id(name) or bytes(16)
                names_by_id[tid] = name
                return {"topic_id": tid}
            return {"topic": name}

        request = R(replica_id=-1, max_wait_ms=self.fetch_max_wait_ms, min_bytes=self.fetch_min_bytes,
                    max_bytes=self.fetch_max_bytes, isolation_level=self.isolation,
                    session_id=plan.session_id, session_epoch=plan.epoch,
                    topics=[R.FetchTopic(partitions=parts, **topic(name)) for name, parts in topics.items()],
                    forgotten_topics_data=[R.ForgottenTopic(partitions=parts, **topic(name))
                                           for name, parts in forgotten.items()],
                    rack_id="")
        if use_ids:
            for name, _ in offsets:
                topic_id = cluster.topic_id(name)
                assert topic_id is not None   # use_ids only when every topic id is known
                names_by_id.setdefault(topic_id, name)
        try:
            response = await conn.send(request, api_key=FETCH, version=version,
                                       timeout_ms=self.client.request_timeout_ms + self.fetch_max_wait_ms)
        except BaseException:
            session.handle_failure()
            raise
        if not session.handle_response(plan, response.error_code, response.session_id):
            if response.error_code in SESSION_ERRORS:
                log.debug("fetch session with node %d: error %d; starting a new one", node, response.error_code)
                return   # the next fetch sends every partition again
            raise KafkaError(response.error_code, f"fetch from node {node}")
        for t in response.responses:
            name = names_by_id.get(t.topic_id) if use_ids else t.topic
            if name is None:
                continue
            for p in t.partitions:
                self._handle_partition(node, (name, p.partition_index), p, offsets)

    def _handle_partition(self, node: int, tp: TopicPartition, p, offsets: dict) -> None:
        st = self._states.get(tp)
        fetch_offset = offsets.get(tp)
        if st is None or fetch_offset is None or st.position != fetch_offset:
            return  # unassigned or sought while the fetch was in flight
        code = p.error_code
        if code == ErrorCode.NONE:
            st.high_watermark = p.high_watermark
            st.log_start_offset = p.log_start_offset
            records = p.records
            if records is not None and len(records):
                aborted = []
                if self.isolation == READ_COMMITTED and p.aborted_transactions:
                    aborted = [(a.first_offset, a.producer_id) for a in p.aborted_transactions]
                    heapq.heapify(aborted)
                self._completed.append(_CompletedFetch(tp, fetch_offset, memoryview(records), aborted))
            return
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            if self.auto_offset_reset == "none":
                st.error = KafkaError(code, f"offset {fetch_offset} is out of range for {tp[0]}-{tp[1]} "
                                            f"(log start {p.log_start_offset}, high watermark {p.high_watermark})")
            else:
                log.info("offset %d out of range for %s-%d; resetting to %s", fetch_offset, tp[0], tp[1],
                         self.auto_offset_reset)
                st.position, st.reset = None, timestamp_spec(self.auto_offset_reset)
            return
        known = code in ErrorCode._value2member_map_
        if code in _REFRESH_ERRORS or (known and ErrorCode(code).retriable):
            self.client.request_metadata_update()
            st.retry_at = time.monotonic() + self.client.retry_backoff_ms / 1000
            return
        st.error = KafkaError(code, f"fetch {tp[0]}-{tp[1]} at offset {fetch_offset} from node {node}")

    # ------------------------------------------------------------------ decoding

    def _drain(self, max_records: int | None) -> list[ConsumerRecord]:
        out: list[ConsumerRecord] = []
        while self._completed and (max_records is None or len(out) < max_records):
            cf = self._completed[0]
            st = self._states.get(cf.tp)
            if st is None or st.position is None or (st.position != cf.fetch_offset and cf.pos == 0):
                self._completed.popleft()  # stale: sought or unassigned since
                continue
            while cf.pending and (max_records is None or len(out) < max_records):
                out.append(cf.pending.popleft())
            if cf.pending:
                break
            if not self._decode_next_batch(cf, st):
                self._completed.popleft()
        return out

    def _decode_next_batch(self, cf: _CompletedFetch, st: _PartitionState) -> bool:
        """Decode the next batch of `cf` into cf.pending; False when none is left."""
        assert st.position is not None   # a fetched partition has its position
        topic, partition = cf.tp
        for info in iter_batch_headers(cf.records, cf.pos):
            cf.pos = info.position + info.size
            if info.next_offset <= st.position:
                continue  # wholly before the position (brokers return whole batches)
            if self.isolation == READ_COMMITTED and info.producer_id >= 0:
                while cf.aborted and cf.aborted[0][0] <= info.last_offset:
                    cf.aborted_producers.add(heapq.heappop(cf.aborted)[1])
                if info.is_control:
                    if self._is_abort_marker(cf, info):
                        cf.aborted_producers.discard(info.producer_id)
                elif info.is_transactional and info.producer_id in cf.aborted_producers:
                    st.position = info.next_offset
                    continue
            if info.is_control:
                st.position = info.next_offset
                continue
            try:
                decoded = decode_batch(cf.records, info, verify_crc=self.check_crcs)
            except DecodeError as exc:
                st.error = KafkaError(ErrorCode.CORRUPT_MESSAGE,
                                      f"{topic}-{partition} batch at offset {info.base_offset}: {exc}")
                return False
            position = st.position
            for r in decoded:
                if r.offset >= position and not isinstance(r, ControlRecord):
                    cf.pending.append(ConsumerRecord(topic, partition, r.offset, r.timestamp,
                                                     r.timestamp_type, r.key, r.value, r.headers))
            st.position = info.next_offset
            if cf.pending:
                return True
        if cf.pos == 0 and len(cf.records):
            self._check_oversized(cf, st)
        return False

    def _is_abort_marker(self, cf: _CompletedFetch, info) -> bool:
        try:
            recs = decode_batch(cf.records, info, verify_crc=False)
        except DecodeError:
            return False
        return bool(recs) and isinstance(recs[0], ControlRecord) and recs[0].type == 0

    def _check_oversized(self, cf: _CompletedFetch, st: _PartitionState) -> None:
        """Data came back but not one whole batch: the batch is bigger than we allowed."""
        st.error = KafkaError(
            ErrorCode.MESSAGE_TOO_LARGE,
            f"{cf.tp[0]}-{cf.tp[1]} at offset {cf.fetch_offset}: the broker returned "
            f"{len(cf.records)} bytes without a complete batch; raise max_partition_fetch_bytes")


async def read_to_end(client, topic: str, partition: int = 0, *,
                      isolation_level: str = "read_committed") -> list[ConsumerRecord]:
    """Every record of one partition, from its log start to the end it has when asked: how
    the mirror and the DR controller read their small bookkeeping topics (offset syncs,
    checkpoints, transaction decisions)."""
    consumer = Consumer(client, isolation_level=isolation_level)
    tp = (topic, partition)
    out: list[ConsumerRecord] = []
    try:
        await consumer.start()
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        position = (await consumer.beginning_offsets([tp]))[tp]
        while position < end:
            for record in await consumer.poll(timeout_ms=1000):
                position = record.offset + 1
                out.append(record)
    finally:
        await consumer.close()
    return out
