"""Stranded records: what a region acknowledged but never mirrored before an unplanned failover
away from it, found exactly when it comes back, and kept rather than truncated.

Theory of operation
-------------------
At promotion the failover recorded T, the end offset of each promoted copy (the replica was
sealed first, so no mirrored write landed after T was read). Every record of the returning
cluster's partition that has a copy below T reached the partner; every later one is stranded.
The link's offset syncs (mirror/translation.py) say where that boundary lies upstream:

* a sync (u, d, x) is a cut at (u, d), and for x > 0 also at (u + x, d + x), the end of its
  run: copies of upstream records at or above the cut lie at or above it downstream (P1, P3);
* take the cut (u, d) with the greatest d <= T (of those, the greatest u: by P2 the upstream
  offsets between two cuts at one downstream offset hold no record). Downstream [d, T) holds T - d copies, and they
  are copies of the first T - d records at or after u, because the mirror copies a partition
  in order and a promoted replica was written only by the mirror. So the first stranded
  record is the (T - d + 1)-th record at or after u (`skip` records are passed over).

Counting records rather than offsets keeps this exact where upstream offsets have holes
(compaction, transaction markers): downstream offsets are dense, upstream ones need not be.
Normally the last sync ends exactly at T and nothing is read to find the boundary; when the
region died between the mirror's write and its sync, the few records in between are counted.

With no cut at or below T (the link never recorded a sync) nothing proves any record was
copied: every record from the log start counts as stranded. That can only over-count, and
the stranded records are kept, not truncated, so nothing is lost either way.

The returning cluster must have settled first. A cluster killed whole comes back with each
leader's high watermark where its last checkpoint left it, below records it had acknowledged,
until the followers fetch again; an end read then (and the offset syncs read up to it) would
miss records, and they would be neither counted nor kept. So the ends are read only once every
partition's high watermark has reached its leader's log end (OffsetForLeaderEpoch at the
current leader epoch): what the cluster holds is then all readable.

Copying them (to `<topic>.stranded` on the returning cluster, or onto the active copies)
carries a header naming each record's origin. A failback that dies midway and runs again
first reads what it already wrote since it began (the destination's end offset then is kept
in the history) and goes on after the last origin it finds, so no stranded record is copied
twice.
"""
from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass

import anyio

from core.client import Admin, Consumer, KafkaClient, Producer
from core.client.errors import KafkaError
from core.protocol import messages as m
from core.protocol.dr import STRANDED_ORIGIN_HEADER
from mirror.translation import Sync

from .observe import partitions_by_leader

READ_IDLE_S = 10.0       # a range that yields nothing this long is cut short (an error)
CATCH_UP_TIMEOUT_S = 120.0   # a restarted cluster: for its high watermarks to reach its log ends


@dataclass(frozen=True)
class Boundary:
    """Where to look for the first stranded record: `skip` records at or after `upstream`."""
    upstream: int
    skip: int
    proven: bool        # False: no sync proves anything was copied (from the log start)


def stranded_boundary(syncs: Iterable[Sync], promoted_end: int, log_start: int) -> Boundary:
    cuts = []
    for s in syncs:
        cuts.append((s.downstream, s.upstream))
        if s.extent:
            cuts.append((s.downstream + s.extent, s.upstream + s.extent))
    below = [c for c in cuts if c[0] <= promoted_end]
    if not below:
        return Boundary(log_start, 0, proven=promoted_end == 0)
    downstream, upstream = max(below)
    return Boundary(max(upstream, log_start), promoted_end - downstream, proven=True)


def origin(cluster: str, topic: str, partition: int, offset: int) -> bytes:
    return f"{cluster}:{topic}:{partition}:{offset}".encode()


def origin_offset(headers, cluster: str, topic: str, partition: int) -> int | None:
    """The origin offset of a copied stranded record, if it came from this partition."""
    prefix = f"{cluster}:{topic}:{partition}:".encode()
    for name, value in headers:
        if name == STRANDED_ORIGIN_HEADER and value is not None and value.startswith(prefix):
            try:
                return int(value[len(prefix):])
            except ValueError:
                return None
    return None


async def read_range(client: KafkaClient, topic: str, partition: int, start: int, end: int) -> AsyncIterator:
    """The records of [start, end) of one partition, in order."""
    if start >= end:
        return
    consumer = Consumer(client)
    try:
        await consumer.start()
        consumer.assign([(topic, partition)])
        consumer.seek(topic, partition, start)
        while True:
            with anyio.fail_after(READ_IDLE_S):
                records = await consumer.poll(timeout_ms=500)
                while not records and await consumer.position(topic, partition) < end:
                    records = await consumer.poll(timeout_ms=500)
            for record in records:
                if record.offset >= end:
                    return
                yield record
            if await consumer.position(topic, partition) >= end:
                return
    finally:
        await consumer.close()


async def stranded_range(client: KafkaClient, topic: str, partition: int, boundary: Boundary,
                         end: int) -> tuple[int, int]:
    """The offset of the first stranded record (`end` when there is none) and how many there
    are before `end`, in one read from the boundary."""
    first, passed, stranded = end, 0, 0
    async for record in read_range(client, topic, partition, boundary.upstream, end):
        if passed < boundary.skip:
            passed += 1
            continue
        if not stranded:
            first = record.offset
        stranded += 1
    return first, stranded


async def copy_stranded(source: KafkaClient, cluster: str, topic: str, partition: int, start: int, end: int,
                        dest: KafkaClient, dest_topic: str, dest_from: int) -> int:
    """Copy the stranded records [start, end) to `dest_topic`'s same partition, each with its
    origin header, skipping those already copied there at or after `dest_from`; returns how
    many were copied now."""
    dest_end = (await _ends(dest, dest_topic, partition))
    done = start - 1
    async for record in read_range(dest, dest_topic, partition, dest_from, dest_end):
        found = origin_offset(record.headers, cluster, topic, partition)
        if found is not None:
            done = max(done, found)
    sent = []
    async with Producer(dest, acks=-1, enable_idempotence=True) as producer:
        async for record in read_range(source, topic, partition, max(start, done + 1), end):
            headers = [*record.headers, (STRANDED_ORIGIN_HEADER, origin(cluster, topic, partition, record.offset))]
            sent.append(await producer.send(dest_topic, value=record.value, key=record.key, headers=headers,
                                            partition=partition, timestamp_ms=record.timestamp))
        await producer.flush()
        for delivery in sent:
            await delivery          # raises the broker's error for a record it refused
    return len(sent)


async def _ends(client: KafkaClient, topic: str, partition: int) -> int:
    found = (await Admin(client).list_offsets({(topic, partition): "latest"}))[(topic, partition)]
    if isinstance(found, Exception):
        raise found
    return found.offset


class NotCaughtUp(Exception):
    """One line: the partitions whose high watermark has not reached their leader's log end."""


async def caught_up_ends(client: KafkaClient, tps: list[tuple[str, int]], *,
                         timeout_s: float = CATCH_UP_TIMEOUT_S) -> dict[tuple[str, int], int]:
    """The end offset of each partition once its high watermark equals its leader's log end,
    for all of them at once (the module's docstring); NotCaughtUp after `timeout_s`."""
    deadline = anyio.current_time() + timeout_s
    behind: dict[tuple[str, int], str] = {}
    while True:
        ends = await Admin(client).list_offsets({tp: "latest" for tp in tps})
        logs = await leader_log_ends(client, tps)
        behind = {}
        for tp in tps:
            end, log_end = ends.get(tp), logs.get(tp)
            if isinstance(end, Exception) or end is None or log_end is None:
                behind[tp] = f"no answer ({end})" if isinstance(end, Exception) else "no leader"
            elif end.offset != log_end:
                behind[tp] = f"high watermark {end.offset}, log end {log_end}"
        if not behind:
            return {tp: ends[tp].offset for tp in tps}
        if anyio.current_time() > deadline:
            worst = ", ".join(f"{t}-{p}: {why}" for (t, p), why in sorted(behind.items())[:3])
            raise NotCaughtUp(f"{len(behind)} partitions not caught up after {timeout_s:g}s ({worst})")
        await anyio.sleep(0.5)


async def leader_log_ends(client: KafkaClient, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """Each partition's log end on its leader: OffsetForLeaderEpoch asked at the leader's
    current epoch answers where that epoch, the newest, ends. A partition without a leader, or
    whose leader did not answer, is left out."""
    await client.refresh_metadata({t for t, _ in tps})
    by_leader = partitions_by_leader(client, tps)
    R = m.OffsetForLeaderEpochRequest
    out: dict[tuple[str, int], int] = {}
    for node, owned in by_leader.items():
        topics: dict[str, list] = {}
        for topic, partition in owned:
            epoch = client.cluster.leader_epoch(topic, partition)
            topics.setdefault(topic, []).append(R.OffsetForLeaderPartition(
                partition=partition, current_leader_epoch=epoch, leader_epoch=epoch))
        request = R(replica_id=-1, topics=[R.OffsetForLeaderTopic(topic=t, partitions=ps) for t, ps in topics.items()])
        try:
            response = await client.send(node, request)
        except KafkaError:
            continue
        for t in response.topics:
            for p in t.partitions:
                if p.error_code == 0 and p.end_offset >= 0:
                    out[(t.topic, p.partition)] = p.end_offset
    return out
