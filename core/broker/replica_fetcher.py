"""ReplicaFetcher: this broker's fetches from one leader broker (Kafka's ReplicaFetcherThread).

Every follower replica whose leader is that broker asks for a fetch (SendFetch) when it wants
one; the fetcher sends all the partitions that asked in one Fetch request (replica id and
broker epoch set, topic ids, no fetch session), waits for the answer (the leader holds it up to
replica.fetch.wait.max.ms for new data), hands each partition its part, and goes again. Each
partition has at most one fetch in flight, so a partition asks again only after its answer was
applied; the request therefore always names exactly the partitions that are ready.

Fetched batches are checked (framing and CRC) before the replica sees them: a corrupt answer is
a failed fetch, retried after replica.fetch.backoff.ms, never appended. SendListOffsets (the
leader's log start and end after OFFSET_OUT_OF_RANGE) is two ListOffsets requests on the same
connection.
"""
from __future__ import annotations

import logging

import anyio

from core.client.connection import BrokerConnection
from core.client.errors import KafkaError
from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.protocol.records import InvalidBatch, scan_batches

from .replication import (DivergingEpoch, FetchedBatch, FetchResponse, LeaderOffsets, SendFetch,
                          SendListOffsets)

log = logging.getLogger(__name__)

FETCH_VERSION = 17
LIST_OFFSETS_VERSION = 7
EARLIEST, LATEST = -2, -1
THROTTLE_PAUSE_S = 0.1


class FetchedData:
    """The records of one partition's answer, sliced for AppendAsFollower."""

    def __init__(self, data, batches):
        self.data = data
        self.batches = batches

    def slice(self, base_offset: int, end_offset: int):
        chosen = [b for b in self.batches if b.base_offset >= base_offset and b.last_offset < end_offset]
        if not chosen:
            raise ValueError(f"no fetched batches in [{base_offset}, {end_offset})")
        start = chosen[0].position
        stop = chosen[-1].position + chosen[-1].size
        if start == 0 and stop == len(self.data):
            return self.data, chosen
        return memoryview(self.data)[start:stop], [b._replace(position=b.position - start) for b in chosen]


class ReplicaFetcher:
    def __init__(self, manager, leader_id: int):
        self.manager = manager
        self.leader_id = leader_id
        self.config = manager.config
        self._fetches: dict[tuple[str, int], tuple[object, SendFetch]] = {}
        self._listings: dict[tuple[str, int], tuple[object, SendListOffsets]] = {}
        self._wake = anyio.Event()
        self._conn: BrokerConnection | None = None
        self._conn_address: tuple[str, int] | None = None
        # Per partition: did our last fetch reach the leader's high watermark? (unknown: no)
        self._caught_up: dict[tuple[str, int], bool] = {}

    def add(self, partition, action) -> None:
        key = (partition.topic, partition.index)
        if isinstance(action, SendFetch):
            self._fetches[key] = (partition, action)
        else:
            self._listings[key] = (partition, action)
        self._wake.set()

    async def run(self) -> None:
        backoff = self.config["replica.fetch.backoff.ms"] / 1000
        try:
            while True:
                if not self._fetches and not self._listings:
                    self._wake = anyio.Event()
                    await self._wake.wait()
                fetches, self._fetches = self._fetches, {}
                listings, self._listings = self._listings, {}
                held = self._hold_throttled(fetches)
                if held and not fetches and not listings:
                    self._fetches.update(held)
                    await anyio.sleep(THROTTLE_PAUSE_S)
                    continue
                try:
                    conn = await self._connection()
                    for partition, action in listings.values():
                        answer = await self._list_offsets(conn, partition, action)
                        await self.manager.leader_offsets_answered(partition, action.request_id, answer)
                    listings = {}
                    if fetches:
                        await self._fetch(conn, fetches)
                    for key, entry in held.items():
                        self._fetches.setdefault(key, entry)
                except (KafkaError, OSError) as exc:
                    log.info("broker %d: fetch from broker %d failed: %s", self.manager.node_id,
                             self.leader_id, exc)
                    await self._drop_connection()
                    for partition, action in [*fetches.values(), *listings.values(), *held.values()]:
                        await self.manager.fetch_failed(partition, action.request_id)
                    await anyio.sleep(backoff)
        finally:
            with anyio.CancelScope(shield=True):
                await self._drop_connection()

    def _hold_throttled(self, fetches: dict) -> dict:
        """KIP-73: while the follower throttle is exceeded, take the throttled partitions out
        of this round (they stay pending for a later one)."""
        quota = self.manager.follower_quota
        targets = [k for k, (p, _) in fetches.items()
                   if self.manager.is_follower_throttle_target(p, self._caught_up.get(k, False))]
        if not targets or not quota.exceeded():
            return {}
        return {k: fetches.pop(k) for k in targets}

    async def _connection(self) -> BrokerConnection:
        address = self.manager.leader_endpoint(self.leader_id)
        if address is None:
            raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"broker {self.leader_id} has no "
                             f"{self.config.inter_broker_listener_name} endpoint")
        if self._conn is not None and not self._conn.closed and self._conn_address == address:
            return self._conn
        await self._drop_connection()
        conn = BrokerConnection(
            *address, node_id=self.leader_id,
            client_id=f"broker-{self.manager.node_id}-fetcher",
            request_timeout_ms=self.config["replica.socket.timeout.ms"] + self.config["replica.fetch.wait.max.ms"],
            connect_timeout_ms=self.config["replica.socket.timeout.ms"],
            local_address=self.config["client.local.address"])
        await conn.connect()
        self._conn, self._conn_address = conn, address
        return conn

    async def _drop_connection(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.close()

    async def _fetch(self, conn: BrokerConnection, fetches) -> None:
        R = m.FetchRequest
        me = self.manager.node_id
        epoch = self.manager.link.lifecycle.broker_epoch
        max_partition = self.config["replica.fetch.max.bytes"]
        topics: dict[str, list] = {}
        ids: dict[str, bytes] = {}
        for (name, index), (partition, action) in fetches.items():
            topic = self.manager.broker.topics.get(name)
            if topic is None:
                continue
            ids[name] = topic.topic_id
            f = action.fetch
            topics.setdefault(name, []).append(R.FetchPartition(
                partition=index, current_leader_epoch=f.current_leader_epoch,
                fetch_offset=f.fetch_offset, last_fetched_epoch=f.last_fetched_epoch,
                log_start_offset=f.log_start_offset, partition_max_bytes=max_partition))
        request = R(replica_id=me, replica_state=R.ReplicaState(replica_id=me, replica_epoch=epoch),
                    max_wait_ms=self.config["replica.fetch.wait.max.ms"],
                    min_bytes=self.config["replica.fetch.min.bytes"],
                    max_bytes=self.config["replica.fetch.response.max.bytes"],
                    isolation_level=0, session_id=0, session_epoch=-1,
                    topics=[R.FetchTopic(topic=name, topic_id=ids[name], partitions=parts)
                            for name, parts in topics.items()],
                    forgotten_topics_data=[], rack_id="")
        version = min(FETCH_VERSION, conn.version_for(1))
        response = await conn.send(request, 1, version=version)
        if response.error_code:
            raise KafkaError(ErrorCode(response.error_code), "fetch refused")
        names = {t.topic_id: t.name for t in self.manager.broker.topics.values()}
        answered = set()
        for t in response.responses:
            name = names.get(t.topic_id) if version >= 13 else t.topic
            for pd in t.partitions:
                entry = fetches.get((name, pd.partition_index))
                if entry is None:
                    continue
                answered.add((name, pd.partition_index))
                partition, action = entry
                parsed = self._parse(partition, pd)
                key = (name, pd.partition_index)
                if parsed is not None and parsed[1].data and \
                        self.manager.is_follower_throttle_target(partition, self._caught_up.get(key, False)):
                    self.manager.follower_quota.record(len(parsed[1].data))
                if parsed is None:
                    await self.manager.fetch_failed(partition, action.request_id)
                else:
                    answer, data = parsed
                    await self.manager.fetch_answered(partition, action.request_id, answer, data)
                    if answer.error == ErrorCode.NONE and answer.high_watermark >= 0:
                        self._caught_up[key] = partition.log.log_end_offset >= answer.high_watermark
        for key, (partition, action) in fetches.items():
            if key not in answered:
                await self.manager.fetch_failed(partition, action.request_id)

    def _parse(self, partition, pd):
        error = ErrorCode(pd.error_code)
        diverging = None
        div = getattr(pd, "diverging_epoch", None)
        if div is not None and div.epoch >= 0 and div.end_offset >= 0:
            diverging = DivergingEpoch(div.epoch, div.end_offset)
        records = pd.records
        if isinstance(records, list):
            records = b"".join(records)
        batches = []
        data = b""
        if error == ErrorCode.NONE and records:
            data = records
            try:
                batches = scan_batches(data, verify_crc=True)
            except InvalidBatch as exc:
                log.error("%r: the leader sent a batch we cannot take: %s", partition, exc)
                return None
        answer = FetchResponse(error, pd.high_watermark, pd.log_start_offset,
                               tuple(FetchedBatch(b.base_offset, b.last_offset, b.partition_leader_epoch)
                                     for b in batches), diverging)
        return answer, FetchedData(data, batches)

    async def _list_offsets(self, conn: BrokerConnection, partition, action: SendListOffsets) -> LeaderOffsets:
        R = m.ListOffsetsRequest
        found = {}
        for timestamp in (EARLIEST, LATEST):
            request = R(replica_id=self.manager.node_id, isolation_level=0, topics=[R.ListOffsetsTopic(
                name=partition.topic, partitions=[R.ListOffsetsPartition(
                    partition_index=partition.index, current_leader_epoch=action.current_leader_epoch,
                    timestamp=timestamp)])], timeout_ms=0)
            version = min(LIST_OFFSETS_VERSION, conn.version_for(2))
            response = await conn.send(request, 2, version=version)
            pr = response.topics[0].partitions[0]
            if pr.error_code:
                return LeaderOffsets(ErrorCode(pr.error_code))
            found[timestamp] = pr.offset
        return LeaderOffsets(ErrorCode.NONE, found[EARLIEST], found[LATEST])
