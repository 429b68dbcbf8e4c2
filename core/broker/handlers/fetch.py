"""Fetch (key 1), v4-17.

Data is served as file bytes: whole batches read from the log, never decoded. Limits follow
KIP-74: `partition_max_bytes` caps each partition and `max_bytes` the response, except that
the first batch of the first partition with data is returned whole even when it is larger,
so a consumer can always make progress.

Long poll: if fewer than `min_bytes` are ready, the request waits up to `max_wait_ms` for an
append to any of its partitions, then reads again. Errors answer at once.

Fetch sessions (KIP-227, v7+; fetch_session.py has the rules): a full request with epoch 0
opens a session when the cache has room. An incremental request is served from the session:
only the partitions it names or that changed since the last round (its dirty set) are looked
at, a long poll waits on the session as a whole, and the answer names only the partitions with
something new. v13+ names topics by id.

KIP-392: with replica.selector.class=RackAwareReplicaSelector a leader answers a consumer (v11+,
with client.rack) with a preferred read replica in the client's rack and no records
(replication/selector.py); a follower serves v11+ consumer fetches up to its own high watermark.

A follower's fetch (replica id >= 0: ReplicaState from v15, ReplicaId before) needs
CLUSTER_ACTION on the cluster. Each partition goes to its replica (on_follower_fetch), which
records the follower's position (ISR, high watermark) and says what to send: records from the
fetch offset up to the log end (not the high watermark), a DivergingEpoch to truncate to, or an
error. A follower fetch that waited is answered again without counting it twice.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Hashable

import anyio

from core.log import OffsetOutOfRange
from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.security.authorizer import CLUSTER_NAME, Operation, ResourceType

from ..fetch_session import (FINAL_EPOCH, INITIAL_EPOCH, NO_SESSION, CachedPartition, FetchSession,
                             next_epoch)
from ..replication.selector import preferred_read_replica
from ..replication import FetchAnswer, FollowerFetch

log = logging.getLogger(__name__)
R = m.FetchResponse
PD = R.PartitionData


def _partition_error(index: int, code: ErrorCode, hw: int = -1, lso: int = -1, start: int = -1) -> PD:
    return PD(partition_index=index, error_code=code, high_watermark=hw, last_stable_offset=lso,
              log_start_offset=start, records=b"", aborted_transactions=None if code else [])


class _Read:
    """What one partition of the request has gathered so far. A long poll that wakes up reads
    on from `next_offset`, so data already gathered is never read twice."""

    __slots__ = ("key", "index", "topic", "partition", "max_bytes", "chunks", "size", "next_offset", "error",
                 "follower", "answer", "preferred", "entry", "params", "fetch_offset")

    def __init__(self, key, index: int, topic, partition, max_bytes: int, fetch_offset: int, error: ErrorCode):
        self.key = key                               # (topic id or name, index), as the request names it
        self.index = index
        self.topic = topic
        self.partition = partition
        self.max_bytes = max_bytes
        self.chunks: list = []
        self.size = 0
        self.next_offset = fetch_offset
        self.fetch_offset = fetch_offset
        self.error = error
        self.follower: FollowerFetch | None = None   # a follower's fetch: what it sent
        self.answer: FetchAnswer | None = None       # and its replica's latest FetchAnswer
        self.preferred: int | None = None            # KIP-392: read from this broker instead
        self.entry: CachedPartition | None = None    # its fetch session's entry, if any
        self.params: tuple = ()                      # what the fetcher asked, for a new session


class _PendingFetch:
    def __init__(self, ctx, req):
        b = ctx.broker
        self.ctx = ctx
        self.by_id = ctx.api_version >= 13
        # fetch.max.bytes caps what one response may hold, whatever the client asks for.
        cap = b.config["fetch.max.bytes"]
        self.budget = min(req.max_bytes, cap) if req.max_bytes > 0 else cap
        self.used = 0
        self.any_error = False
        # topic key -> (topic id, topic name, reads), in the order the topics were first read
        self.groups: dict[Hashable, tuple[bytes, str, list[_Read]]] = {}
        self.reads: dict[tuple, _Read] = {}
        self.replica_id, self.broker_epoch = _replica(ctx, req)
        self.from_follower = self.replica_id >= 0
        # read_committed (isolation level 1): records only below the last stable offset, and
        # the aborted transactions among them, so that the consumer can skip those
        self.read_committed = req.isolation_level == 1 and not self.from_follower
        self.selector = b.config["replica.selector.class"]
        self.client_rack = req.rack_id if ctx.api_version >= 11 else None
        self.cluster_error = ErrorCode.NONE
        if self.from_follower and not ctx.authorize(Operation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
            self.cluster_error = ErrorCode.TOPIC_AUTHORIZATION_FAILED

    def open_request(self, req) -> None:
        """A full request: every partition it names."""
        for ft in req.topics:
            topic_key = ft.topic_id if self.by_id else ft.topic
            for fp in ft.partitions:
                self.open(topic_key, fp.partition, fp.fetch_offset, fp.partition_max_bytes,
                          fp.current_leader_epoch, fp.last_fetched_epoch, fp.log_start_offset)

    def open(self, topic_key, index: int, fetch_offset: int, max_bytes: int, current_leader_epoch: int,
             last_fetched_epoch: int, log_start_offset: int, *, update_fetch_state: bool = True) -> _Read:
        b = self.ctx.broker
        ctx = self.ctx
        topic = b.topics_by_id.get(topic_key) if self.by_id else b.topics.get(topic_key)
        name = topic.name if topic else ("" if self.by_id else topic_key)
        p, missing = b.leader_partition(topic, index)
        # Kafka's order: a follower without CLUSTER_ACTION learns nothing, and a consumer
        # learns whether a topic it names exists only if it may read it (CVE-2018-1288).
        if self.from_follower and self.cluster_error:
            error = self.cluster_error
        elif topic is None and self.by_id:
            error = ErrorCode.UNKNOWN_TOPIC_ID
        elif not self.from_follower and not ctx.authorize(Operation.READ, ResourceType.TOPIC, name):
            error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif topic is None:
            error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        elif self.from_follower:
            error = ErrorCode.NONE
            p = topic.partition(index)
            if p is None or p.replica is None:
                error = ErrorCode.NOT_LEADER_OR_FOLLOWER
        elif p is None:
            # KIP-392: from v11 a consumer may read from a follower (up to its high
            # watermark), as a leader's preferred read replica sends it to.
            p = _local_follower(topic, index) if ctx.api_version >= 11 else None
            error = missing if p is None else p.check_leader_epoch(current_leader_epoch)
        else:
            error = p.check_leader_epoch(current_leader_epoch)
        key = (topic_key, index)
        r = _Read(key, index, topic, p, max_bytes, fetch_offset, error)
        r.params = (fetch_offset, max_bytes, current_leader_epoch, last_fetched_epoch, log_start_offset)
        if not error and not self.from_follower and self.selector and p.is_leader:
            r.preferred = preferred_read_replica(self.selector, self.client_rack, p, fetch_offset,
                                                 b.kraft.image, ctx.listener.name)
            self.any_error |= r.preferred is not None   # answer at once, without records
        if self.from_follower and not error:
            r.follower = FollowerFetch(self.replica_id, self.broker_epoch, current_leader_epoch,
                                       fetch_offset, last_fetched_epoch, log_start_offset)
            r.answer = answer = p.replicas.answer_follower_fetch(
                p, r.follower, update_fetch_state=update_fetch_state)
            if answer.error:
                r.error = answer.error
            elif answer.diverging_epoch is not None:
                self.any_error = True   # answer at once: the follower must truncate
            else:
                r.next_offset = answer.read_offset
        self.any_error |= bool(r.error)
        group = self.groups.get(topic_key)
        if group is None:
            topic_id = topic_key if self.by_id else bytes(16)
            group = self.groups[topic_key] = (topic_id, name, [])
        group[2].append(r)
        self.reads[key] = r
        return r

    def open_entry(self, key, entry: CachedPartition, named: bool) -> _Read:
        r = self.open(key[0], key[1], entry.fetch_offset, entry.partition_max_bytes, entry.current_leader_epoch,
                      entry.last_fetched_epoch, entry.log_start_offset, update_fetch_state=named)
        r.entry = entry
        return r

    def answer_again(self, reads) -> None:
        """After a wait: each follower partition without data asks its replica again (without
        counting the fetch twice), so it reads what arrived and carries the latest high
        watermark."""
        for r in reads:
            if r.follower is None or r.error or r.chunks:
                continue
            p = r.partition
            if p.replica is None:
                r.error = ErrorCode.NOT_LEADER_OR_FOLLOWER
                self.any_error = True
                continue
            r.answer = p.replicas.answer_follower_fetch(p, r.follower, update_fetch_state=False)
            if r.answer.error:
                r.error = r.answer.error
                self.any_error = True
            elif r.answer.read_offset is not None:
                r.next_offset = r.answer.read_offset

    def partitions(self):
        return [r.partition for r in self.reads.values() if r.partition is not None and not r.error]

    def gather(self, broker) -> None:
        """Read what has arrived since the last pass, within the limits (KIP-74)."""
        for r in self.reads.values():
            if r.error:
                continue
            p = r.partition
            if broker.topics.get(r.topic.name) is not r.topic:  # deleted while we waited
                r.error = ErrorCode.UNKNOWN_TOPIC_ID if self.by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                self.any_error = True
                continue
            if r.preferred is not None:
                continue
            throttled = False
            if r.follower is not None:
                answer = r.answer
                assert answer is not None   # every follower's read has its answer
                if r.chunks or answer.diverging_epoch is not None:
                    continue
                if answer.read_offset is None or r.next_offset >= p.log.log_end_offset:
                    continue
                throttled = p.replicas.is_leader_throttle_target(p, r.follower.replica_id)
                if throttled and p.replicas.leader_quota.exceeded():
                    continue   # KIP-73: no records while the leader throttle is exceeded
            elif r.chunks and r.next_offset >= (p.last_stable_offset if self.read_committed else p.high_watermark):
                continue
            first_data = self.used == 0
            limit = min(r.max_bytes - r.size, self.budget - self.used)
            if limit <= 0 and not first_data:
                continue
            try:
                result = p.read(r.next_offset, max(limit, 0), min_one_batch=first_data,
                                committed=r.follower is None, stable=self.read_committed)
            except OffsetOutOfRange:
                r.error = ErrorCode.OFFSET_OUT_OF_RANGE
            except OSError:
                r.error = ErrorCode.KAFKA_STORAGE_ERROR
            else:
                if len(result.data):
                    if throttled:
                        p.replicas.leader_quota.record(len(result.data))
                    r.chunks.append(result.data)
                    r.size += len(result.data)
                    self.used += len(result.data)
                    r.next_offset = result.next_offset
                continue
            self.any_error = True

    def response(self, session: FetchSession | None = None, incremental: bool = False, session_id: int = 0):
        """The answer. With a session, each partition answered records what the fetcher was
        told; an incremental answer leaves out the partitions with nothing new."""
        responses = []
        for topic_key, (topic_id, name, reads) in self.groups.items():
            parts = []
            for r in reads:
                pd = _partition_data(r, self.read_committed)
                entry = r.entry
                if entry is not None:
                    assert session is not None   # entries come from the session
                    if _follower_unsettled(r):
                        session.recheck[r.key] = None
                    if incremental and not (r.chunks or r.error or r.preferred is not None
                                            or pd.high_watermark != entry.sent_high_watermark
                                            or pd.log_start_offset != entry.sent_log_start_offset
                                            or (r.answer is not None and r.answer.diverging_epoch is not None)):
                        continue
                    entry.sent_high_watermark = pd.high_watermark
                    entry.sent_log_start_offset = pd.log_start_offset
                    if r.chunks or r.error:
                        # The fetcher may not move on: look again next round (Kafka answers
                        # from the remembered position until the fetcher names a new one).
                        session.dirty[r.key] = None
                parts.append(pd)
            if parts:
                responses.append(R.FetchableTopicResponse(topic=name, topic_id=topic_id, partitions=parts))
        return R(throttle_time_ms=0, error_code=0, session_id=session_id, responses=responses)


def _follower_unsettled(r: _Read) -> bool:
    """A follower's partition whose fetch must count on every request until the leader knows
    the follower has all of the log and is in the ISR (what every Kafka fetch does for every
    partition of its session): it may be outside the ISR, or its position unknown (a new
    leader, an answer that was an error), and it names nothing new to say so."""
    if r.follower is None or r.error:
        return False
    replica = r.partition.replica
    if replica is None or replica.leader is None:
        return False
    progress = replica.leader.remotes.get(r.follower.replica_id)
    return (r.follower.replica_id not in replica.isr or progress is None
            or progress.log_end_offset != replica.log_end_offset)


def _partition_data(r: _Read, read_committed: bool = False) -> PD:
    p = r.partition
    if r.follower is not None and not r.error:
        return _follower_data(r)
    hw = p.high_watermark if p is not None else -1
    lso = p.last_stable_offset if p is not None else -1
    start = p.log_start_offset if p is not None else -1
    if r.error:
        keep = r.error in (ErrorCode.OFFSET_OUT_OF_RANGE, ErrorCode.FENCED_LEADER_EPOCH,
                           ErrorCode.UNKNOWN_LEADER_EPOCH)
        return _partition_error(r.index, r.error, *((hw, lso, start) if keep else ()))
    aborted = None   # Kafka sends null to read_uncommitted consumers
    if read_committed:
        aborted = [R.AbortedTransaction(producer_id=t.producer_id, first_offset=t.first_offset)
                   for t in p.aborted_transactions(r.fetch_offset, r.next_offset)] if r.chunks else []
    return PD(partition_index=r.index, error_code=0, high_watermark=hw, last_stable_offset=lso,
              log_start_offset=start, aborted_transactions=aborted,
              preferred_read_replica=-1 if r.preferred is None else r.preferred,
              records=r.chunks if r.chunks else b"")


def _local_follower(topic, index: int):
    """This broker's follower replica of the partition, if it has one."""
    p = topic.partition(index)
    if p is None or p.replica is None or p.is_leader or p.replica.role.value != "follower":
        return None
    return p


def _replica(ctx, req) -> tuple[int, int]:
    """(replica id, broker epoch) of a follower's fetch; replica id -1 for a consumer."""
    if ctx.api_version >= 15:
        state = req.replica_state
        return (state.replica_id, state.replica_epoch) if state is not None else (-1, -1)
    return req.replica_id, -1


def _follower_data(r: _Read) -> PD:
    answer = r.answer
    assert answer is not None   # a follower's read has its answer
    pd = PD(partition_index=r.index, error_code=0, high_watermark=answer.high_watermark,
            last_stable_offset=answer.high_watermark, log_start_offset=answer.log_start_offset,
            aborted_transactions=[], preferred_read_replica=-1, records=r.chunks if r.chunks else b"")
    if answer.diverging_epoch is not None:
        pd.diverging_epoch = R.EpochEndOffset(epoch=answer.diverging_epoch.epoch,
                                              end_offset=answer.diverging_epoch.end_offset)
    return pd


def _count(metrics, response) -> None:
    for t in response.responses:
        served = sum(sum(map(len, p.records)) if isinstance(p.records, list) else len(p.records)
                     for p in t.partitions if p.records)
        if served:
            metrics.bytes_out.labels(t.topic).inc(served)
        for p in t.partitions:
            if p.error_code:
                metrics.partition_errors.labels("Fetch", ErrorCode(p.error_code).name).inc()


def _session_error(code: ErrorCode):
    return R(throttle_time_ms=0, error_code=code, session_id=NO_SESSION, responses=[])


def _close(session: FetchSession | None) -> None:
    if session is not None:
        _close_entries(session, session.partitions.values())


def _watch(session: FetchSession, reads) -> None:
    """Register the session with each partition it reads, so their changes mark it dirty."""
    for r in reads:
        entry, p = r.entry, r.partition
        if entry is None or p is None or entry.watched is p:
            continue
        if entry.watched is not None:
            entry.watched.unwatch(session)
        p.watch(session, r.key)
        entry.watched = p


def _open_session(cache, pending: _PendingFetch, now_ms: int) -> FetchSession | None:
    """A full request with epoch 0: remember its partitions as a new session, if the cache
    lets us."""
    session, evicted = cache.maybe_create(pending.from_follower, pending.by_id, len(pending.reads), now_ms)
    _close(evicted)
    for stale in cache.expired:
        _close(stale)
    if session is None:
        return None
    for r in pending.reads.values():
        r.entry = session.partitions[r.key] = CachedPartition(*r.params)
    return session


def _named_entries(req, by_id: bool) -> dict:
    named = {}
    for ft in req.topics:
        topic_key = ft.topic_id if by_id else ft.topic
        for fp in ft.partitions:
            named[(topic_key, fp.partition)] = CachedPartition(
                fp.fetch_offset, fp.partition_max_bytes, fp.current_leader_epoch, fp.last_fetched_epoch,
                fp.log_start_offset)
    return named


def _forgotten(req, by_id: bool) -> list:
    return [((ft.topic_id if by_id else ft.topic), index)
            for ft in req.forgotten_topics_data or () for index in ft.partitions]


async def handle(ctx, req):
    b = ctx.broker
    cache = b.fetch_sessions
    now_ms = time.monotonic_ns() // 1_000_000
    session = None
    opening = False
    if ctx.api_version >= 7:
        session_id, epoch = req.session_id, req.session_epoch
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != NO_SESSION:
                _close(cache.remove(session_id))
            opening = epoch == INITIAL_EPOCH
        else:
            session = cache.get(session_id)
            if session is None:
                return _session_error(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
            if session.epoch != epoch:
                return _session_error(ErrorCode.INVALID_FETCH_SESSION_EPOCH)
            if session.by_id != (ctx.api_version >= 13):
                return _session_error(ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
            session.epoch = next_epoch(epoch)
            session.last_used_ms = now_ms
    pending = _PendingFetch(ctx, req)
    if session is not None:
        return await _incremental(ctx, req, pending, session)
    pending.open_request(req)
    await _long_poll(ctx, req, pending)
    session = _open_session(cache, pending, now_ms) if opening else None
    response = pending.response(session, incremental=False, session_id=session.id if session else NO_SESSION)
    if session is not None:
        _watch(session, pending.reads.values())
    _count(b.metrics, response)
    return response


async def _long_poll(ctx, req, pending: _PendingFetch) -> None:
    """A full request: gather, and wait on every partition it names until min_bytes arrive,
    an error shows, or max_wait_ms passes."""
    deadline = time.monotonic() + max(req.max_wait_ms, 0) / 1000
    while True:
        pending.gather(ctx.broker)
        remaining = deadline - time.monotonic()
        if (pending.used >= req.min_bytes or pending.any_error or remaining <= 0 or not req.topics
                or ctx.broker.draining):
            return
        event = asyncio.Event()
        partitions = pending.partitions()
        for p in partitions:
            p.add_waiter(event)
        try:
            with anyio.move_on_after(remaining):
                await event.wait()
        finally:
            for p in partitions:
                p.remove_waiter(event)
        if pending.from_follower:
            pending.answer_again(pending.reads.values())


async def _incremental(ctx, req, pending: _PendingFetch, session: FetchSession):
    """An incremental request: take what it names and forgets, then look only at the
    session's dirty partitions; a long poll waits on the session as a whole."""
    named = _named_entries(req, pending.by_id)
    _close_entries(session, session.update(named, _forgotten(req, pending.by_id)))
    deadline = time.monotonic() + max(req.max_wait_ms, 0) / 1000
    event = asyncio.Event()
    session.add_waker(event.set)
    counted = dict.fromkeys(session.take_recheck())
    counted.update(named)
    first = list(counted)
    try:
        while True:
            fresh = []
            keys, first = [*first, *session.take_dirty()], []
            for key in keys:
                entry = session.partitions.get(key)
                if entry is None:
                    continue
                r = pending.reads.get(key)
                if r is None:
                    fresh.append(pending.open_entry(key, entry, named=key in counted))
                elif r.follower is not None:
                    pending.answer_again((r,))
            _watch(session, fresh)
            pending.gather(ctx.broker)
            remaining = deadline - time.monotonic()
            if (pending.used >= req.min_bytes or pending.any_error or remaining <= 0
                    or ctx.broker.draining or session.closed):
                break
            if not session.dirty:
                event = _rearm(session, event)
                with anyio.move_on_after(remaining):
                    await event.wait()
    finally:
        session.remove_waker(event.set)
    response = pending.response(session, incremental=True, session_id=session.id)
    _count(ctx.broker.metrics, response)
    return response


def _rearm(session: FetchSession, event: asyncio.Event) -> asyncio.Event:
    if not event.is_set():
        return event
    session.remove_waker(event.set)
    event = asyncio.Event()
    session.add_waker(event.set)
    return event


def _close_entries(session: FetchSession, gone) -> None:
    for entry in gone:
        if entry.watched is not None:
            entry.watched.unwatch(session)
            entry.watched = None


HANDLES = {m.ApiKey.FETCH: handle}
