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


def _read_all(ctx, req) -> tuple[object, int, bool]:
    """One pass over the request; returns (response, bytes of records, any error)."""
    b = ctx.broker
    by_id = ctx.api_version >= 13
    # fetch.max.bytes caps what one response may hold, whatever the client asks for.
    cap = b.config["fetch.max.bytes"]
    budget = min(req.max_bytes, cap) if req.max_bytes > 0 else cap
    used = 0
    first_data = True
    any_error = False
    responses = []
    for ft in req.topics:
        topic = b.topics_by_id.get(ft.topic_id) if by_id else b.topics.get(ft.topic)
        name = topic.name if topic else ft.topic
        parts = []
        for fp in ft.partitions:
            if topic is None:
                code = ErrorCode.UNKNOWN_TOPIC_ID if by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                parts.append(_partition_error(fp.partition, code))
                any_error = True
                continue
            if not ctx.authorize(Operation.READ, ResourceType.TOPIC, name):
                parts.append(_partition_error(fp.partition, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                any_error = True
                continue
            p = topic.partition(fp.partition)
            if p is None:
                parts.append(_partition_error(fp.partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                any_error = True
                continue
            hw, start = p.high_watermark, p.log_start_offset
            code = p.check_leader_epoch(fp.current_leader_epoch)
            if code:
                parts.append(_partition_error(fp.partition, code, hw, hw, start))
                any_error = True
                continue
            limit = min(fp.partition_max_bytes, budget - used)
            data = b""
            if limit > 0 or first_data:
                try:
                    result = p.read(fp.fetch_offset, max(limit, 0), min_one_batch=first_data)
                except OffsetOutOfRange:
                    parts.append(_partition_error(fp.partition, ErrorCode.OFFSET_OUT_OF_RANGE, hw, hw, start))
                    any_error = True
                    continue
                except OSError:
                    parts.append(_partition_error(fp.partition, ErrorCode.KAFKA_STORAGE_ERROR))
                    any_error = True
                    continue
                data = result.data
            if len(data):
                first_data = False
                used += len(data)
            parts.append(PD(partition_index=fp.partition, error_code=0, high_watermark=hw,
                            last_stable_offset=hw, log_start_offset=start, aborted_transactions=[],
                            preferred_read_replica=-1, records=data))
        responses.append(R.FetchableTopicResponse(topic=name, topic_id=ft.topic_id if by_id else bytes(16),
                                                  partitions=parts))
    return R(throttle_time_ms=0, error_code=0, session_id=0, responses=responses), used, any_error


def _count(metrics, response) -> None:
    for t in response.responses:
        served = sum(len(p.records) for p in t.partitions if p.records)
        if served:
            metrics.bytes_out.labels(t.topic).inc(served)
        for p in t.partitions:
            if p.error_code:
                metrics.partition_errors.labels("Fetch", ErrorCode(p.error_code).name).inc()


def _partitions_of(ctx, req):
    b = ctx.broker
    by_id = ctx.api_version >= 13
    for ft in req.topics:
        topic = b.topics_by_id.get(ft.topic_id) if by_id else b.topics.get(ft.topic)
        if topic is None:
            continue
        for fp in ft.partitions:
            p = topic.partition(fp.partition)
            if p is not None:
                yield p


async def handle(ctx, req):
    if req.session_id != 0 or req.session_epoch not in (-1, 0):
        return R(throttle_time_ms=0, error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND, session_id=0, responses=[])
    deadline = time.monotonic() + max(req.max_wait_ms, 0) / 1000
    while True:
        response, size, any_error = _read_all(ctx, req)
        remaining = deadline - time.monotonic()
        if size >= req.min_bytes or any_error or remaining <= 0 or not req.topics or ctx.broker.draining:
            _count(ctx.broker.metrics, response)
            return response
        event = anyio.Event()
        partitions = list(_partitions_of(ctx, req))
        for p in partitions:
            p.add_waiter(event)
        try:
            with anyio.move_on_after(remaining):
                await event.wait()
        finally:
            for p in partitions:
                p.remove_waiter(event)


HANDLES = {1: handle}
