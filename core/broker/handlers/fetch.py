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
"""
from __future__ import annotations

import logging
import time

import anyio

from core.log import OffsetOutOfRange
from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.security.authorizer import Operation, ResourceType

log = logging.getLogger(__name__)
R = m.FetchResponse
PD = R.PartitionData


def _partition_error(index: int, code: ErrorCode, hw: int = -1, lso: int = -1, start: int = -1) -> PD:
    return PD(partition_index=index, error_code=code, high_watermark=hw, last_stable_offset=lso,
              log_start_offset=start, records=b"", aborted_transactions=None if code else [])


class _Read:
    """What one partition of the request has gathered so far. A long poll that wakes up reads
    on from `next_offset`, so data already gathered is never read twice."""

    __slots__ = ("index", "topic", "partition", "max_bytes", "chunks", "size", "next_offset", "error")

    def __init__(self, index: int, topic, partition, max_bytes: int, fetch_offset: int, error: ErrorCode):
        self.index = index
        self.topic = topic
        self.partition = partition
        self.max_bytes = max_bytes
        self.chunks: list = []
        self.size = 0
        self.next_offset = fetch_offset
        self.error = error


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
        for ft in req.topics:
            topic = b.topics_by_id.get(ft.topic_id) if self.by_id else b.topics.get(ft.topic)
            name = topic.name if topic else ft.topic
            reads = []
            for fp in ft.partitions:
                p, missing = b.leader_partition(topic, fp.partition)
                if topic is None:
                    error = ErrorCode.UNKNOWN_TOPIC_ID if self.by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                elif not ctx.authorize(Operation.READ, ResourceType.TOPIC, name):
                    error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                elif p is None:
                    error = missing
                else:
                    error = p.check_leader_epoch(fp.current_leader_epoch)
                reads.append(_Read(fp.partition, topic, p, fp.partition_max_bytes, fp.fetch_offset, error))
                self.any_error |= bool(error)
            self.topics.append((ft, name, reads))

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
                if r.chunks and r.next_offset >= p.high_watermark:
                    continue
                first_data = self.used == 0
                limit = min(r.max_bytes - r.size, self.budget - self.used)
                if limit <= 0 and not first_data:
                    continue
                try:
                    result = p.read(r.next_offset, max(limit, 0), min_one_batch=first_data)
                except OffsetOutOfRange:
                    r.error = ErrorCode.OFFSET_OUT_OF_RANGE
                except OSError:
                    r.error = ErrorCode.KAFKA_STORAGE_ERROR
                else:
                    if len(result.data):
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
                if r.error:
                    keep = r.error in (ErrorCode.OFFSET_OUT_OF_RANGE, ErrorCode.FENCED_LEADER_EPOCH,
                                       ErrorCode.UNKNOWN_LEADER_EPOCH)
                    parts.append(_partition_error(r.index, r.error, *((hw, hw, start) if keep else ())))
                    continue
                parts.append(PD(partition_index=r.index, error_code=0, high_watermark=hw, last_stable_offset=hw,
                                log_start_offset=start, aborted_transactions=[], preferred_read_replica=-1,
                                records=r.chunks if r.chunks else b""))
            responses.append(R.FetchableTopicResponse(topic=name, topic_id=ft.topic_id if self.by_id else bytes(16),
                                                      partitions=parts))
        return R(throttle_time_ms=0, error_code=0, session_id=0, responses=responses)


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


HANDLES = {1: handle}
