"""ReplicaFetcher: this broker's fetches from one leader broker (Kakfa's ReplicaFetcherThread).

Every follower replica whose leader is that broker asks for a fetch (SendFetch) when it wants
one. The fetcher keeps those partitions in one fetch session (KIP-227) with the leader: the
first Fetch names them all, and each later one names only the partitions whose fetch position
changed (and forgets the ones that left), so an idle partition costs nothing per round. The
leader holds the request up to replica.fetch.wait.max.ms for new data and answers only for the
partitions with something new; the fetcher hands each its part and goes again at once. A
partition's fetch stays outstanding until an answer names it, so each has at most one fetch in
flight, and asks again only after its answer was applied.

A session error (the leader restarted, or lost the session) sends everything again in a full
request, at once; a failed request fails every outstanding fetch (each backs off
replica.fetch.backoff.ms), and the next request is full.

Fetched batches are checked (framing and CRC) before the replica sees them: a corrupt answer is
a failed fetch, retried after replica.fetch.backoff.ms, never appended. SendListOffsets (the
leader's log start and end after OFFSET_OUT_OF_RANGE) is two ListOffsets requests on the same
connection.
"""
from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import anyio

from core.client.connection import BrokerConnection
from core.client.errors import KafkaError
from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.protocol.records import InvalidBatch, scan_batches

from core.client.fetch_session import SESSION_ERRORS, FetchSessionHandler

from . import (DivergingEpoch, FetchedBatch, FetchResponse, LeaderOffsets, SendFetch,
                          SendListOffsets)

if TYPE_CHECKING:
    from ..partition import Partition

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
        # (topic, index) -> (partition, SendFetch): every fetch outstanding at this leader
        self._outstanding: dict[tuple[str, int], tuple[Partition, SendFetch]] = {}
        # session key -> the SendFetch whose parameters the leader's session holds
        self._sent: dict[tuple, SendFetch] = {}
        self._listings: dict[tuple[str, int], tuple[Partition, SendListOffsets]] = {}
        self._held: dict[tuple[str, int], tuple[Partition, SendFetch]] = {}   # throttled for now
        # keyed by (topic, topic id, index); the params are the fetch's epochs and offsets
        self._session: FetchSessionHandler[tuple[str, bytes, int], tuple[int, int, int, int]] = \
            FetchSessionHandler()
        self._names: dict[bytes, str] = {}           # topic id -> name, to read v13+ answers
        self._name_refs: dict[bytes, int] = {}       # topic id -> partitions in _keys under it
        self._keys: dict[tuple[str, int], tuple] = {}   # (topic, index) -> its session key
        self._wake = asyncio.Event()
        self._conn: BrokerConnection | None = None
        self._conn_address: tuple[str, int] | None = None
        # Per partition: did our last fetch reach the leader's high watermark? (unknown: no)
        self._caught_up: dict[tuple[str, int], bool] = {}

    def _session_key(self, partition) -> tuple:
        """The partition's key in the session, as it was when the partition joined it: a
        partition leaving because its topic was deleted must be forgotten under the topic id
        the leader knows it by, which the broker no longer has."""
        key = (partition.topic, partition.index)
        topic = self.manager.broker.topics.get(partition.topic)
        if topic is None:
            known = self._keys.get(key)
            if known is not None:
                return known
        topic_id = topic.topic_id if topic is not None else bytes(16)
        skey = (partition.topic, topic_id, partition.index)
        old = self._keys.get(key)
        if old != skey:
            if old is not None and old not in self._session:
                self._unname(old[1])
            self._keys[key] = skey
            self._names[topic_id] = partition.topic
            self._name_refs[topic_id] = self._name_refs.get(topic_id, 0) + 1
        return skey

    def _unname(self, topic_id: bytes) -> None:
        """One partition fewer knows this topic id; the last one takes the name with it, so
        topics created and deleted for months leave nothing behind."""
        left = self._name_refs.get(topic_id, 0) - 1
        if left > 0:
            self._name_refs[topic_id] = left
        else:
            self._name_refs.pop(topic_id, None)
            self._names.pop(topic_id, None)

    def add(self, partition, action) -> None:
        key = (partition.topic, partition.index)
        skey = self._session_key(partition)
        if isinstance(action, SendFetch):
            self._outstanding[key] = (partition, action)
            f = action.fetch
            params = (f.current_leader_epoch, f.fetch_offset, f.last_fetched_epoch, f.log_start_offset)
            self._session.want(skey, params)
            if self._session.holds(skey, params):
                self._sent[skey] = action   # the leader already fetches exactly this for it
        else:
            self._listings[key] = (partition, action)
            self._forget(key, skey)
        self._wake.set()

    def remove(self, partition) -> None:
        """The partition no longer fetches from this leader."""
        key = (partition.topic, partition.index)
        self._listings.pop(key, None)
        self._held.pop(key, None)
        self._caught_up.pop(key, None)
        self._forget(key, self._session_key(partition))

    def _forget(self, key, skey) -> None:
        self._outstanding.pop(key, None)
        self._sent.pop(skey, None)
        self._session.drop(skey)
        if skey not in self._session and self._keys.get(key) == skey:
            del self._keys[key]
            self._unname(skey[1])

    async def run(self) -> None:
        backoff = self.config["replica.fetch.backoff.ms"] / 1000
        try:
            while True:
                if not self._outstanding and not self._listings and not self._held:
                    self._wake = asyncio.Event()
                    await self._wake.wait()
                listings, self._listings = self._listings, {}
                self._hold_throttled()
                if not self._outstanding and not listings:
                    await anyio.sleep(THROTTLE_PAUSE_S)
                    continue
                try:
                    conn = await self._connection()
                    for partition, action in listings.values():
                        answer = await self._list_offsets(conn, partition, action)
                        await self.manager.leader_offsets_answered(partition, action.request_id, answer)
                    listings = {}
                    if self._outstanding:
                        await self._fetch(conn)
                except (KafkaError, OSError) as exc:
                    log.info("broker %d: fetch from broker %d failed: %s", self.manager.node_id,
                             self.leader_id, exc)
                    await self._drop_connection()
                    self._session.handle_failure()
                    failed: list[tuple[Partition, SendFetch | SendListOffsets]] = [
                        *self._outstanding.values(), *listings.values()]
                    for partition, _ in list(self._outstanding.values()):
                        self._forget((partition.topic, partition.index), self._session_key(partition))
                    for partition, failed_action in failed:
                        await self.manager.fetch_failed(partition, failed_action.request_id)
                    await anyio.sleep(backoff)
        finally:
            with anyio.CancelScope(shield=True):
                await self._drop_connection()

    def _hold_throttled(self) -> None:
        """KIP-73: while the follower throttle is exceeded, the throttled partitions leave the
        session (they stay pending, and come back once it is not)."""
        quota = self.manager.follower_quota
        if not quota.exceeded():
            for key, (partition, action) in list(self._held.items()):
                del self._held[key]
                self.add(partition, action)
            return
        for key, (p, action) in list(self._outstanding.items()):
            if self.manager.is_follower_throttle_target(p, self._caught_up.get(key, False)):
                self._forget(key, self._session_key(p))
                self._held[key] = (p, action)

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
            local_address=self.config["client.local.address"],
            ssl_context=self.config.client_tls(self.config.inter_broker_listener_name),
            sasl=self.config.client_sasl(self.config.inter_broker_listener_name))
        await conn.connect()
        self._conn, self._conn_address = conn, address
        return conn

    async def _drop_connection(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.close()

    def _request(self, plan, version: int):
        R = m.FetchRequest
        me = self.manager.node_id
        epoch = self.manager.link.lifecycle.broker_epoch
        max_partition = self.config["replica.fetch.max.bytes"]
        by_id = version >= 13
        topics: dict[tuple, list] = {}
        for (name, topic_id, index), (leader_epoch, offset, last_epoch, start) in plan.partitions.items():
            topics.setdefault((name, topic_id), []).append(R.FetchPartition(
                partition=index, current_leader_epoch=leader_epoch, fetch_offset=offset,
                last_fetched_epoch=last_epoch, log_start_offset=start, partition_max_bytes=max_partition))
        forgotten: dict[tuple, list[int]] = {}
        for name, topic_id, index in plan.forgotten:
            forgotten.setdefault((name, topic_id), []).append(index)
        return R(replica_id=me, replica_state=R.ReplicaState(replica_id=me, replica_epoch=epoch),
                 max_wait_ms=self.config["replica.fetch.wait.max.ms"],
                 min_bytes=self.config["replica.fetch.min.bytes"],
                 max_bytes=self.config["replica.fetch.response.max.bytes"],
                 isolation_level=0, session_id=plan.session_id, session_epoch=plan.epoch,
                 topics=[R.FetchTopic(topic="" if by_id else name, topic_id=topic_id, partitions=parts)
                         for (name, topic_id), parts in topics.items()],
                 forgotten_topics_data=[R.ForgottenTopic(topic="" if by_id else name, topic_id=topic_id,
                                                         partitions=parts)
                                        for (name, topic_id), parts in forgotten.items()],
                 rack_id="")

    async def _fetch(self, conn: BrokerConnection) -> None:
        version = min(FETCH_VERSION, conn.version_for(m.ApiKey.FETCH))
        plan = self._session.build(sessions=version >= 7)
        for skey in plan.partitions:
            entry = self._outstanding.get(skey[::2])
            if entry is not None:
                self._sent[skey] = entry[1]
        response = await conn.send(self._request(plan, version), m.ApiKey.FETCH, version=version)
        if not self._session.handle_response(plan, response.error_code, response.session_id):
            code = ErrorCode(response.error_code)
            if code in SESSION_ERRORS:
                log.info("broker %d: fetch session with broker %d: %s; starting a new one",
                         self.manager.node_id, self.leader_id, code.name)
                return   # the next round sends everything again
            raise KafkaError(code, "fetch refused")
        answered = []
        for t in response.responses:
            name = self._names.get(t.topic_id) if version >= 13 else t.topic
            if name is None:
                continue   # a topic id we never asked for: nothing of it was sent
            for pd in t.partitions:
                skey = (name, t.topic_id if version >= 13 else self._topic_id(name), pd.partition_index)
                action = self._sent.pop(skey, None)
                if action is None:
                    continue
                key = (name, pd.partition_index)
                entry = self._outstanding.get(key)
                if entry is None:
                    continue
                partition = entry[0]
                if entry[1] is action:
                    del self._outstanding[key]   # answered; asks again once applied
                answered.append((key, skey))
                parsed = self._parse(partition, pd)
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
        for key, skey in answered:
            if key not in self._outstanding:
                self._session.drop(skey)   # not fetching it now (backing off, fenced, listing)

    def _topic_id(self, name: str) -> bytes:
        topic = self.manager.broker.topics.get(name)
        return topic.topic_id if topic is not None else bytes(16)

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
            version = min(LIST_OFFSETS_VERSION, conn.version_for(m.ApiKey.LIST_OFFSETS))
            response = await conn.send(request, m.ApiKey.LIST_OFFSETS, version=version)
            pr = response.topics[0].partitions[0]
            if pr.error_code:
                return LeaderOffsets(ErrorCode(pr.error_code))
            found[timestamp] = pr.offset
        return LeaderOffsets(ErrorCode.NONE, found[EARLIEST], found[LATEST])
