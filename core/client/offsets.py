"""ListOffsets: offsets for timestamps, earliest and latest, shared by consumer and admin.

Each partition's question goes to its leader, one request per leader. Partition errors that
mean "ask again after a metadata refresh" (a moved leader, a topic still being created,
OFFSET_NOT_AVAILABLE during a leader change) are retried until the deadline; what is left
comes back as KafkaError values rather than raising, so one bad partition does not hide the
answers for the others.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Mapping

from core.protocol import messages as m
from core.protocol.errors import ErrorCode, KafkaError

from .client import KafkaClient

__all__ = ["EARLIEST", "LATEST", "MAX_TIMESTAMP", "OffsetAndTimestamp", "list_offsets", "timestamp_spec"]

LIST_OFFSETS = m.ApiKey.LIST_OFFSETS
LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3  # KIP-734, ListOffsets v7+

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class OffsetAndTimestamp:
    offset: int        # -1 if no record matches (a timestamp later than every record)
    timestamp: int     # -1 for earliest/latest
    leader_epoch: int = -1


def timestamp_spec(spec: str | int) -> int:
    """"earliest" | "latest" | "max_timestamp" | milliseconds -> the wire value."""
    if isinstance(spec, str):
        try:
            return {"earliest": EARLIEST, "beginning": EARLIEST, "latest": LATEST, "end": LATEST,
                    "max_timestamp": MAX_TIMESTAMP}[spec.lower()]
        except KeyError:
            raise ValueError(f"unknown offset spec {spec!r}") from None
    return int(spec)


async def list_offsets(client: KafkaClient, specs: Mapping[TopicPartition, str | int], *,
                       isolation_level: int = 0, timeout_ms: float | None = None
                       ) -> dict[TopicPartition, OffsetAndTimestamp | KafkaError]:
    wanted = {tp: timestamp_spec(s) for tp, s in specs.items()}
    results: dict[TopicPartition, OffsetAndTimestamp | KafkaError] = {}
    budget = client.default_api_timeout_ms if timeout_ms is None else timeout_ms
    deadline = time.monotonic() + budget / 1000
    attempt = 0
    while wanted:
        await client.ensure_topics({t for t, _ in wanted})
        by_leader: dict[int, dict[TopicPartition, int]] = {}
        retry: dict[TopicPartition, int] = {}
        last_error: dict[TopicPartition, KafkaError] = {}
        for tp, ts in wanted.items():
            leader = client.leader_for(*tp)
            if leader is None:
                code = client.cluster.topic_error(tp[0]) or ErrorCode.LEADER_NOT_AVAILABLE
                known = client.cluster.partitions_for(tp[0])
                if known is not None and tp[1] not in known:
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                retry[tp] = ts
                last_error[tp] = KafkaError(code, f"no leader for {tp[0]}-{tp[1]}")
            else:
                by_leader.setdefault(leader, {})[tp] = ts
        outcomes = await asyncio.gather(
            *(_ask_leader(client, node, parts, isolation_level, budget) for node, parts in by_leader.items()),
            return_exceptions=True)
        for (_node, parts), outcome in zip(by_leader.items(), outcomes):
            if isinstance(outcome, KafkaError) and outcome.retriable:
                for tp in parts:
                    retry[tp] = parts[tp]
                    last_error[tp] = outcome
                continue
            if isinstance(outcome, BaseException):
                raise outcome
            for tp, res in outcome.items():
                if isinstance(res, KafkaError) and res.retriable:
                    retry[tp] = parts[tp]
                    last_error[tp] = res
                else:
                    results[tp] = res
        if not retry:
            break
        delay = client.backoff_ms(attempt) / 1000
        if time.monotonic() + delay >= deadline:
            for tp in retry:
                results[tp] = last_error[tp]
            break
        client.request_metadata_update()
        await asyncio.sleep(delay)
        attempt += 1
        wanted = retry
    return results


async def _ask_leader(client: KafkaClient, node: int, parts: dict[TopicPartition, int],
                      isolation_level: int, timeout_ms: float):
    conn = await client.connection(node)
    needs_v7 = any(ts == MAX_TIMESTAMP for ts in parts.values())
    version = conn.version_for(LIST_OFFSETS)
    if needs_v7 and version < 7:
        return {tp: KafkaError(ErrorCode.UNSUPPORTED_VERSION,
                               f"max_timestamp needs ListOffsets v7; node {node} speaks v{version}")
                for tp in parts}
    R = m.ListOffsetsRequest
    topics: dict[str, list] = {}
    for (topic, partition), ts in parts.items():
        topics.setdefault(topic, []).append(R.ListOffsetsPartition(
            partition_index=partition, current_leader_epoch=-1, timestamp=ts))
    request = R(replica_id=-1, isolation_level=isolation_level,
                topics=[R.ListOffsetsTopic(name=t, partitions=p) for t, p in topics.items()],
                timeout_ms=int(min(timeout_ms, 2**31 - 1)))
    response = await conn.send(request, api_key=LIST_OFFSETS, version=version)
    out: dict[TopicPartition, OffsetAndTimestamp | KafkaError] = {}
    for t in response.topics:
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            if tp not in parts:
                continue
            if p.error_code:
                out[tp] = KafkaError(p.error_code, f"ListOffsets {t.name}-{p.partition_index}")
            else:
                out[tp] = OffsetAndTimestamp(p.offset, p.timestamp, p.leader_epoch)
    for tp in parts:
        out.setdefault(tp, KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                      f"ListOffsets response from node {node} lacks {tp[0]}-{tp[1]}"))
    return out
