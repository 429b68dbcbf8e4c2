"""Fetch (key 1), v4-17.

Data is served as file bytes: whole batches read from the log, never decoded. Limits follow
KIP-74: `partition_max_bytes` caps each partition and `max_bytes` the response, except that
the first batch of the first partition with data is returned whole even when it is larger,
so a consumer can always make progress.

Long poll: if fewer than `min_bytes` are ready, the request waits up to `max_wait_ms` for an
append to any of its partitions, then reads again. Errors answer at once.

Fetch sessions (KIP-227): we never create one (session id 0), which tells clients to keep
sending full requests; a request naming a session we do not have gets
FETCH_SESSION_ID_NOT_FOUND. v13+ names topics by id.

KIP-392: with replica.selector.class=RackAwareReplicaSelector a leader answers a consumer (v11+,
with client.rack) with a preferred read replica in the client's rack and no records
(replica_selector.py); a follower serves v11+ consumer fetches up to its own high watermark.

A follower's fetch (replica id >= 0: ReplicaState from v15, ReplicaId before) needs
CLUSTER_ACTION on the cluster. Each partition goes to its replica (on_follower_fetch), which
records the follower's position (ISR, high watermark) and says what to send: records from the
fetch offset up to the log end (not the high watermark), a DivergingEpoch to truncate to, or an
error. A follower fetch that waited is answered again without counting it twice.
"""
from __future__ import annotations

import logging
import time

import anyio

from core.log import OffsetOutOfRange
from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.security.authorizer import Operation, ResourceType

from ..replica_selector import preferred_read_replica
from ..replication import FollowerFetch

log = logging.getLogger(__name__)
R = m.FetchResponse
PD = R.PartitionData


def _partition_error(index: int, code: ErrorCode, hw: int = -1, lso: int = -1, start: int = -1) -> PD:
    return PD(partition_index=index, error_code=code, high_watermark=hw, last_stable_offset=lso,
              log_start_offset=start, records=b"", aborted_transactions=None if code else [])


class _Read:
    """What one partition of the request has gathered so far. A long poll that wakes up reads
    on from `next_offset`, so data already gathered is never read twice."""

    __slots__ = ("index", "topic", "partition", "max_bytes", "chunks", "size", "next_offset", "error",
                 "follower", "answer", "preferred")

    def __init__(self, index: int, topic, partition, max_bytes: int, fetch_offset: int, error: ErrorCode):
        self.index = index
        self.topic = topic
        self.partition = partition
        self.max_bytes = max_bytes
        self.chunks: list = []
        self.size = 0
        self.next_offset = fetch_offset
        self.error = error
        self.follower: FollowerFetch | None = None   # a follower's fetch: what it sent
        self.answer = None                           # and its replica's latest FetchAnswer
        self.preferred: int | None = None            # KIP-392: read from this broker instead


class _PendingFetch:
    def __init__(self, ctx, req):
        b = ctx.broker
        self.by_id = ctx.api_version >= 13
        # fetch.max.bytes caps what one response may hold, whatever the client asks for.
        cap = b.config["fetch.max.bytes"]
        self.budget = min(req.max_bytes, cap) if req.max_bytes > 0 else cap
        self.used = 0
        self.any_error = False
        self.topics: list[tuple[object, str, list[_Read]]] = []
        replica_id, broker_epoch = _replica(ctx, req)
        self.from_follower = replica_id >= 0
        selector = b.config["replica.selector.class"] if b.kraft is not None else None
        client_rack = req.rack_id if ctx.api_version >= 11 else None
        cluster_error = ErrorCode.NONE
        if self.from_follower and not ctx.authorize(Operation.CLUSTER_ACTION, ResourceType.CLUSTER, "kafka-cluster"):
            cluster_error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        for ft in req.topics:
            topic = b.topics_by_id.get(ft.topic_id) if self.by_id else b.topics.get(ft.topic)
            name = topic.name if topic else ft.topic
            reads = []
            for fp in ft.partitions:
                p, missing = b.leader_partition(topic, fp.partition)
                if topic is None:
                    error = ErrorCode.UNKNOWN_TOPIC_ID if self.by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                elif self.from_follower:
                    error = cluster_error
                    p = topic.partition(fp.partition)
                    if not error and (p is None or p.replica is None):
                        error = ErrorCode.NOT_LEADER_OR_FOLLOWER
                elif not ctx.authorize(Operation.READ, ResourceType.TOPIC, name):
                    error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                elif p is None:
                    # KIP-392: from v11 a consumer may read from a follower (up to its high
                    # watermark), as a leader's preferred read replica sends it to.
                    p = _local_follower(topic, fp.partition) if ctx.api_version >= 11 else None
                    error = missing if p is None else p.check_leader_epoch(fp.current_leader_epoch)
                else:
                    error = p.check_leader_epoch(fp.current_leader_epoch)
                r = _Read(fp.partition, topic, p, fp.partition_max_bytes, fp.fetch_offset, error)
                if not error and not self.from_follower and selector and p.is_leader:
                    r.preferred = preferred_read_replica(selector, client_rack, p, fp.fetch_offset,
                                                         b.kraft.quorum.loader.image, ctx.listener.name)
                    self.any_error |= r.preferred is not None   # answer at once, without records
                if self.from_follower and not error:
                    r.follower = FollowerFetch(replica_id, broker_epoch, fp.current_leader_epoch,
                                               fp.fetch_offset, fp.last_fetched_epoch, fp.log_start_offset)
                    r.answer = p.replicas.answer_follower_fetch(p, r.follower)
                    if r.answer.error:
                        r.error = r.answer.error
                    elif r.answer.diverging_epoch is not None:
                        self.any_error = True   # answer at once: the follower must truncate
                    else:
                        r.next_offset = r.answer.read_offset
                reads.append(r)
                self.any_error |= bool(r.error)
            self.topics.append((ft, name, reads))

    def answer_again(self) -> None:
        """After a wait: each follower partition without data asks its replica again (without
        counting the fetch twice), so it reads what arrived and carries the latest high
        watermark."""
        for _, _, reads in self.topics:
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
        return [r.partition for _, _, reads in self.topics for r in reads if r.partition is not None and not r.error]

    def gather(self, broker) -> None:
        """Read what has arrived since the last pass, within the limits (KIP-74)."""
        for _, name, reads in self.topics:
            for r in reads:
                if r.error:
                    continue
                p = r.partition
                if broker.topics.get(name) is not r.topic:  # deleted while we waited
                    r.error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    self.any_error = True
                    continue
                if r.preferred is not None:
                    continue
                throttled = False
                if r.follower is not None:
                    if r.chunks or r.answer.diverging_epoch is not None:
                        continue
                    if r.answer.read_offset is None or r.next_offset >= p.log.log_end_offset:
                        continue
                    throttled = p.replicas.is_leader_throttle_target(p, r.follower.replica_id)
                    if throttled and p.replicas.leader_quota.exceeded():
                        continue   # KIP-73: no records while the leader throttle is exceeded
                elif r.chunks and r.next_offset >= p.high_watermark:
                    continue
                first_data = self.used == 0
                limit = min(r.max_bytes - r.size, self.budget - self.used)
                if limit <= 0 and not first_data:
                    continue
                try:
                    result = p.read(r.next_offset, max(limit, 0), min_one_batch=first_data,
                                    committed=r.follower is None)
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

    def response(self):
        responses = []
        for ft, name, reads in self.topics:
            parts = []
            for r in reads:
                p = r.partition
                hw = p.high_watermark if p is not None else -1
                start = p.log_start_offset if p is not None else -1
                if r.follower is not None and not r.error:
                    parts.append(_follower_data(r))
                    continue
                if r.error:
                    keep = r.error in (ErrorCode.OFFSET_OUT_OF_RANGE, ErrorCode.FENCED_LEADER_EPOCH,
                                       ErrorCode.UNKNOWN_LEADER_EPOCH)
                    parts.append(_partition_error(r.index, r.error, *((hw, hw, start) if keep else ())))
                    continue
                parts.append(PD(partition_index=r.index, error_code=0, high_watermark=hw, last_stable_offset=hw,
                                log_start_offset=start, aborted_transactions=[],
                                preferred_read_replica=-1 if r.preferred is None else r.preferred,
                                records=r.chunks if r.chunks else b""))
            responses.append(R.FetchableTopicResponse(topic=name, topic_id=ft.topic_id if self.by_id else bytes(16),
                                                      partitions=parts))
        return R(throttle_time_ms=0, error_code=0, session_id=0, responses=responses)


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


async def handle(ctx, req):
    if req.session_id != 0 or req.session_epoch not in (-1, 0):
        return R(throttle_time_ms=0, error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND, session_id=0, responses=[])
    deadline = time.monotonic() + max(req.max_wait_ms, 0) / 1000
    pending = _PendingFetch(ctx, req)
    while True:
        pending.gather(ctx.broker)
        remaining = deadline - time.monotonic()
        if (pending.used >= req.min_bytes or pending.any_error or remaining <= 0 or not req.topics
                or ctx.broker.draining):
            response = pending.response()
            _count(ctx.broker.metrics, response)
            return response
        event = anyio.Event()
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
            pending.answer_again()


HANDLES = {1: handle}
