"""ListOffsets (key 2), v1-10.

Timestamp -2 asks for the log start offset, -1 for the end: the high watermark, or for
isolation level 1 (read_committed) the last stable offset. -3 (v7+) asks for the record with the
largest timestamp. A real timestamp finds the first record whose timestamp is at or after it,
with that record's own timestamp; no match answers offset -1, and neither does a match at or
past the end the client may read to (Kafka's lastFetchableOffset).

The log's indexes find the candidate batch; that one batch is then decoded to pick the exact
record, as Kafka does. This is an admin lookup, never on the produce or fetch path.

A follower (replica id >= 0) asking for the latest offset gets the leader's log end, not the
high watermark: it is finding where its own log parts from the leader's.
"""
from __future__ import annotations

from core.protocol import messages as m
from core.protocol.errors import DecodeError, ErrorCode
from core.protocol.records import ATTR_LOG_APPEND_TIME, Record, decode_batch, iter_batch_headers
from core.security.authorizer import Operation, ResourceType

R = m.ListOffsetsResponse
PR = R.ListOffsetsPartitionResponse

EARLIEST, LATEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -2, -1, -3, -4, -5


def _first_record_at(p, batch_offset: int, wanted) -> tuple[int, int] | None:
    """Decode the batch holding `batch_offset`; the first record (at or after the log start)
    for which wanted(timestamp) holds, as (offset, timestamp)."""
    data = p.read(batch_offset, 1, min_one_batch=True).data
    for info in iter_batch_headers(data):
        if info.last_offset < batch_offset:
            continue
        if info.attributes & ATTR_LOG_APPEND_TIME:
            return (max(info.base_offset, p.log_start_offset), info.max_timestamp) if wanted(info.max_timestamp) else None
        try:
            records = decode_batch(data, info)
        except DecodeError:
            return None
        for r in records:
            if isinstance(r, Record) and r.offset >= p.log_start_offset and wanted(r.timestamp):
                return r.offset, r.timestamp
        return None
    return None


def _lookup(p, timestamp: int, read_committed: bool = False) -> tuple[int, int]:
    """(offset, timestamp). As Kafka, a read_committed client's end is the last stable offset,
    and a timestamp lookup never answers an offset at or past the end it may read to."""
    end = p.last_stable_offset if read_committed else p.high_watermark
    found = _lookup_any(p, timestamp, end)
    if timestamp >= 0 or timestamp == MAX_TIMESTAMP:
        if found[0] >= end:
            return -1, -1
    return found


def _lookup_any(p, timestamp: int, end: int) -> tuple[int, int]:
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return p.log_start_offset, -1
    if timestamp in (LATEST, LATEST_TIERED):
        return end, -1
    if timestamp == MAX_TIMESTAMP:
        max_ts, batch_offset = p.log.max_timestamp_and_offset()
        if batch_offset < 0:
            return -1, -1
        found = _first_record_at(p, batch_offset, lambda ts: ts == max_ts)
        return found if found else (batch_offset, max_ts)
    if timestamp < 0:
        raise ValueError
    candidate = p.log.offset_for_timestamp(timestamp)
    if candidate is None:
        return -1, -1
    batch_offset, batch_max_ts = candidate
    found = _first_record_at(p, batch_offset, lambda ts: ts >= timestamp)
    return found if found else (batch_offset, batch_max_ts)


async def handle(ctx, req):
    b = ctx.broker
    topics = []
    for t in req.topics:
        parts = []
        for tp in t.partitions:
            pr = PR(partition_index=tp.partition_index, error_code=0, timestamp=-1, offset=-1, leader_epoch=-1)
            p, missing = b.leader_partition(b.topics.get(t.name), tp.partition_index)
            if not ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, t.name):
                pr.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif p is None:
                pr.error_code = missing
            elif p.offline:
                pr.error_code = ErrorCode.KAFKA_STORAGE_ERROR
            elif epoch_error := p.check_leader_epoch(tp.current_leader_epoch):
                pr.error_code = epoch_error
            else:
                try:
                    if req.replica_id >= 0 and tp.timestamp == LATEST:
                        pr.offset, pr.timestamp = p.log.log_end_offset, -1
                    else:
                        pr.offset, pr.timestamp = _lookup(p, tp.timestamp, req.isolation_level == 1)
                    pr.leader_epoch = p.leader_epoch
                except ValueError:
                    pr.error_code = ErrorCode.INVALID_REQUEST
                except OSError:
                    pr.error_code = ErrorCode.KAFKA_STORAGE_ERROR
            parts.append(pr)
        topics.append(R.ListOffsetsTopicResponse(name=t.name, partitions=parts))
    return R(throttle_time_ms=0, topics=topics)


HANDLES = {m.ApiKey.LIST_OFFSETS: handle}
