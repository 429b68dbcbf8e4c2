"""RaftDriver: a RaftNode on real sockets and a real disk.

Theory of operation
===================

The node (node.py) is pure; this is the one task that owns it. Everything that touches the
node runs in that task's loop, because the Ready contract forbids stepping or ticking a node
between ready() and advance(), and persisting a Ready awaits a worker thread:

    loop:
        drain Readies:  persist (worker thread, fsync)  ->  send requests / answer callers
                        -> hand the snapshot and committed entries to the listener -> advance
        wait for an inbox item or the node's next deadline
        step every inbox item (messages, and calls such as propose()), tick when due

Inbound requests (from the controller listener's handlers) enter through `handle_request`:
the driver gives each its own correlation id, steps it in, and the caller awaits the future
the node's answer resolves; a Fetch the leader parks is simply answered later.

Outbound requests leave through one connection per voter (core/client's BrokerConnection, so
the peer's ApiVersions picks the version, wire.py encodes it). A request that cannot be sent
or gets no answer comes back to the node as an error response of the matching type
(BROKER_NOT_AVAILABLE or REQUEST_TIMED_OUT), as Kafka's KafkaNetworkChannel does, so a
follower whose leader died retries after its backoff instead of waiting out the request
timeout. A peer that refused a connection is not dialled again for RECONNECT_BACKOFF_MS.

The listener (the metadata state machine) learns three things, always from the loop task and
in log order: `handle_snapshot` (replace your state with this), `handle_commit` (entries below
the high watermark, each once per process lifetime), `handle_leader_change`. After a restart
the node re-delivers everything above the latest snapshot: the listener rebuilds its state from
the snapshot and the log, as Kafka's controllers and brokers do.

A RaftStateError out of the node means our own invariants broke; the driver lets it end the
process rather than keep serving a quorum it may corrupt.
"""
from __future__ import annotations

import logging
import random
import ssl
import time
from pathlib import Path
from typing import Callable, Mapping, Protocol, Sequence, TypeVar

import anyio
from anyio.abc import TaskGroup, TaskStatus

from core.client.connection import BrokerConnection
from core.client.errors import KafkaError, RequestTimedOutError
from core.client.sasl import SaslCredentials
from core.protocol.errors import EncodeError, ErrorCode
from core.raft import wire
from core.raft.config import QuorumConfig
from core.raft.entries import NO_LEADER, Entry, OffsetAndEpoch, SnapshotId
from core.raft.messages import (REQUEST_TYPES, BeginQuorumEpochRequest, BeginQuorumEpochResponse,
                                DescribeQuorumRequest, DescribeQuorumResponse, EndQuorumEpochRequest,
                                EndQuorumEpochResponse, FetchRequest, FetchResponse,
                                FetchSnapshotRequest, FetchSnapshotResponse, LeaderIdAndEpoch,
                                RaftMessage, RaftRequest, RaftResponse, VoteRequest, VoteResponse)
from core.raft.node import RaftNode
from core.raft.ready import Ready, Snapshot
from core.raft.storage import RaftStorage

log = logging.getLogger(__name__)

T = TypeVar("T")

RESPONSE_OF: dict[type[RaftRequest], type[RaftResponse]] = {
    VoteRequest: VoteResponse,
    BeginQuorumEpochRequest: BeginQuorumEpochResponse,
    EndQuorumEpochRequest: EndQuorumEpochResponse,
    FetchRequest: FetchResponse,
    FetchSnapshotRequest: FetchSnapshotResponse,
    DescribeQuorumRequest: DescribeQuorumResponse,
}
RECONNECT_BACKOFF_MS = 200


class RaftListener(Protocol):
    def handle_snapshot(self, snapshot: Snapshot) -> None: ...
    def handle_commit(self, entries: Sequence[Entry], high_watermark: int) -> None: ...
    def handle_leader_change(self, leader: LeaderIdAndEpoch) -> None: ...


class NotRunning(Exception):
    """The driver has not started or has stopped: nothing can be asked of the node."""


def source_of(data: RaftRequest) -> int:
    """Who sent an inbound request, by the field Kafka's raft client reads it from."""
    if isinstance(data, VoteRequest):
        return data.candidate_id
    if isinstance(data, (BeginQuorumEpochRequest, EndQuorumEpochRequest)):
        return data.leader_id
    if isinstance(data, (FetchRequest, FetchSnapshotRequest)):
        return data.replica_id
    return -1   # DescribeQuorum: an admin client


def wall_clock_ms() -> Callable[[], int]:
    """Milliseconds that read like wall-clock time (DescribeQuorum reports them) but never go
    back, since the node's timers are deadlines on this clock."""
    wall0, mono0 = time.time_ns() // 1_000_000, time.monotonic_ns() // 1_000_000
    return lambda: wall0 + time.monotonic_ns() // 1_000_000 - mono0


class RaftDriver:
    def __init__(self, node_id: int, voters: Mapping[int, tuple[str, int]], metadata_log_dir: Path,
                 *, cluster_id: str, listener: RaftListener, config: QuorumConfig | None = None,
                 clock: Callable[[], int] | None = None, rng: random.Random | None = None,
                 client_id: str | None = None, ssl_context: ssl.SSLContext | None = None,
                 sasl: SaslCredentials | None = None):
        self.node_id = node_id
        # TLS to the other voters when the controller listener is SSL (the node's settings).
        self.ssl_context = ssl_context
        self.sasl = sasl   # and SASL, when it is a SASL listener
        self.voter_addresses = dict(voters)
        self.metadata_log_dir = Path(metadata_log_dir)
        self.cluster_id = cluster_id
        self.listener = listener
        self.config = config or QuorumConfig()
        self.clock = clock or wall_clock_ms()
        self.rng = rng or random.Random()
        self.client_id = client_id or f"raft-{node_id}"
        self.node: RaftNode | None = None
        self.storage: RaftStorage | None = None
        self.leader = LeaderIdAndEpoch(NO_LEADER, 0)
        self.high_watermark = 0
        # Inbound messages and calls (run with the node, between Readies), in arrival order.
        self._inbox: list[RaftMessage | Callable[[RaftNode], None]] = []
        self._wakeup = anyio.Event()
        # inbound correlation id -> answer callback (None: no answer, the driver stopped)
        self._waiting: dict[int, Callable[[RaftResponse | None], None]] = {}
        self._next_inbound_id = 0
        self._connections: dict[int, BrokerConnection] = {}
        self._connect_locks: dict[int, anyio.Lock] = {}
        self._refused_until: dict[int, float] = {}
        self._task_group: TaskGroup | None = None
        self._stopped = False
        self._sending = 0
        self._all_sent: anyio.Event | None = None    # set when _sending drops to 0 (resign_and_flush)

    # ------------------------------------------------------------------ lifecycle

    def open(self) -> None:
        """Load the durable state and build the node (blocking I/O: run in a worker thread)."""
        storage = RaftStorage.open(self.metadata_log_dir, cluster_id=self.cluster_id,
                                   voters=sorted(self.voter_addresses))
        try:
            state, loaded = storage.load()
            self.node = RaftNode(self.node_id, self.voter_addresses, cluster_id=self.cluster_id,
                                 clock=self.clock, rng=self.rng, config=self.config,
                                 quorum_state=state, log=loaded.log, snapshot=loaded.snapshot)
        except BaseException:
            storage.close()
            raise
        self.storage = storage
        if loaded.snapshot is not None:
            self.listener.handle_snapshot(loaded.snapshot)

    async def run(self, *, task_status: TaskStatus[RaftDriver] = anyio.TASK_STATUS_IGNORED) -> None:
        if self.node is None:
            await anyio.to_thread.run_sync(self.open)
        try:
            async with anyio.create_task_group() as tg:
                self._task_group = tg
                task_status.started(self)
                await self._loop()
        finally:
            self._stopped = True
            self._task_group = None
            for answer in list(self._waiting.values()):
                answer(None)
            self._waiting.clear()
            with anyio.CancelScope(shield=True):
                for conn in list(self._connections.values()):
                    await conn.close()
                self._connections.clear()
                if self.storage is not None:
                    await anyio.to_thread.run_sync(self.storage.close)

    # ------------------------------------------------------------------ calls into the loop

    async def _call(self, fn: Callable[[RaftNode], T]) -> T:
        """Run fn(node) inside the loop (between Readies) and return its result."""
        if self._stopped or self._task_group is None:
            raise NotRunning("the raft driver is not running")
        done = anyio.Event()
        result: list[T] = []
        error: list[Exception] = []

        def run(node: RaftNode) -> None:
            try:
                result.append(fn(node))
            except Exception as exc:   # delivered to the caller, not the loop
                error.append(exc)
            done.set()

        self._inbox.append(run)
        self._wakeup.set()
        await done.wait()
        if error:
            raise error[0]
        return result[0]

    async def propose(self, payloads: Sequence[bytes]) -> OffsetAndEpoch:
        """Append as the leader; raises NotLeaderError otherwise. Returns the offset after the
        last entry and the epoch: committed once the high watermark passes it in that epoch."""
        return await self._call(lambda node: node.propose(payloads))

    async def resign(self) -> None:
        await self._call(lambda node: node.resign())

    async def resign_and_flush(self, timeout_s: float) -> None:
        """Graceful shutdown: a leader resigns (EndQuorumEpoch names its successors) and the
        requests already handed to the network get up to `timeout_s` to leave."""
        if self._stopped or self._task_group is None:
            return
        with anyio.move_on_after(timeout_s):
            await self.resign()
            if self._sending:
                self._all_sent = anyio.Event()
                await self._all_sent.wait()

    async def create_snapshot(self, end_offset: int, data: bytes) -> SnapshotId:
        """The application's state up to `end_offset` (which it has applied): write it as a
        snapshot file, then let the node drop the log below it. The file is durable before
        the node learns of it, so the log start never passes a snapshot that is not on disk.
        Committed entries are never truncated, so nothing can move between the two steps."""
        snapshot_id = await self._call(
            lambda node: SnapshotId(end_offset, node.log.epoch_of(end_offset - 1) if end_offset else 0))
        assert self.storage is not None   # opened with the node, which _call found running
        await anyio.to_thread.run_sync(self.storage.log.write_snapshot, Snapshot(snapshot_id, data))
        return await self._call(lambda node: node.snapshot_created(end_offset, data))

    async def log_end_offset(self) -> int:
        return await self._call(lambda node: node.log.end_offset)

    async def handle_request(self, data: RaftRequest) -> RaftResponse:
        """An inbound Raft request from the network; returns the node's response data."""
        if self._stopped or self._task_group is None:
            return RESPONSE_OF[type(data)](error_code=ErrorCode.BROKER_NOT_AVAILABLE)
        correlation_id = self._next_inbound_id
        self._next_inbound_id = (correlation_id + 1) & 0x7FFFFFFF
        done = anyio.Event()
        answer: list[RaftResponse | None] = []

        def respond(response: RaftResponse | None) -> None:
            answer.append(response)
            done.set()

        self._waiting[correlation_id] = respond
        self._inbox.append(RaftMessage(source_of(data), self.node_id, correlation_id, data))
        self._wakeup.set()
        # The node answers every request (a parked Fetch within its max wait); the bound only
        # guards against a driver that stopped under us.
        max_wait_ms = data.max_wait_ms if isinstance(data, FetchRequest) else 0
        timeout = (max_wait_ms + self.config.request_timeout_ms) / 1000
        with anyio.move_on_after(timeout):
            await done.wait()
        self._waiting.pop(correlation_id, None)
        response = answer[0] if answer else None
        if response is None:
            return RESPONSE_OF[type(data)](error_code=ErrorCode.REQUEST_TIMED_OUT)
        return response

    # ------------------------------------------------------------------ the loop

    async def _loop(self) -> None:
        node = self.node
        assert node is not None   # run() opened it
        while True:
            await self._drain()
            deadline = node.next_deadline_ms()
            if not self._inbox:
                wait = None if deadline is None else max(0, deadline - self.clock()) / 1000
                with anyio.move_on_after(wait):
                    await self._wakeup.wait()
            self._wakeup = anyio.Event()
            items, self._inbox = self._inbox, []
            for item in items:
                if isinstance(item, RaftMessage):
                    node.step(item)
                else:
                    item(node)
                # Several steps may share one Ready: fewer fsyncs, same order.
            deadline = node.next_deadline_ms()
            if deadline is not None and self.clock() >= deadline:
                node.tick()

    async def _drain(self) -> None:
        node, storage = self.node, self.storage
        assert node is not None and storage is not None   # run() opened them
        while node.has_ready():
            ready = node.ready()
            if _needs_disk(ready):
                await anyio.to_thread.run_sync(storage.persist, ready)
            for message in ready.messages:
                self._dispatch(message)
            if ready.snapshot is not None:
                self.listener.handle_snapshot(ready.snapshot)
            self.high_watermark = ready.high_watermark
            if ready.committed_entries:
                self.listener.handle_commit(ready.committed_entries, ready.high_watermark)
            if ready.leader != self.leader:
                self.leader = ready.leader
                log.info("raft node %d: leader is now %s in epoch %d", self.node_id,
                         ready.leader.leader_id if ready.leader.leader_id != NO_LEADER else "unknown",
                         ready.leader.leader_epoch)
                self.listener.handle_leader_change(ready.leader)
            node.advance(ready)

    def _dispatch(self, message: RaftMessage) -> None:
        data = message.data
        if not isinstance(data, REQUEST_TYPES):   # the node's answer to an inbound request
            answer = self._waiting.pop(message.correlation_id, None)
            if answer is not None:
                answer(data)
            return
        assert self._task_group is not None   # the node runs inside run()'s task group
        self._task_group.start_soon(self._send, message, data)

    # ------------------------------------------------------------------ outbound

    async def _send(self, message: RaftMessage, data: RaftRequest) -> None:
        """Send `message`, whose data is the request `data`, and queue the answer."""
        destination = message.destination_id
        response: RaftRequest | RaftResponse
        self._sending += 1
        try:
            response = await self._roundtrip(destination, data)
        except RequestTimedOutError:
            response = RESPONSE_OF[type(data)](error_code=ErrorCode.REQUEST_TIMED_OUT)
        except (KafkaError, OSError, EncodeError, wire.NotExpressible) as exc:
            log.debug("raft node %d: %s to %d failed: %s", self.node_id, type(data).__name__,
                      destination, exc)
            response = RESPONSE_OF[type(data)](error_code=ErrorCode.BROKER_NOT_AVAILABLE)
        except wire.NotClusterMetadata as exc:
            response = RESPONSE_OF[type(data)](error_code=exc.code)
        except Exception as exc:   # a malformed answer must not take the node down
            log.warning("raft node %d: bad %s answer from %d: %s", self.node_id,
                        type(data).__name__, destination, exc)
            response = RESPONSE_OF[type(data)](error_code=ErrorCode.UNKNOWN_SERVER_ERROR)
        finally:
            self._sending -= 1
            if not self._sending and self._all_sent is not None:
                self._all_sent.set()
        if self._stopped:
            return
        self._inbox.append(RaftMessage(destination, self.node_id, message.correlation_id, response))
        self._wakeup.set()

    async def _roundtrip(self, destination: int, data: RaftRequest) -> RaftRequest | RaftResponse:
        conn = await self._connection(destination)
        api_key = type(data).api_key
        supported = wire.VERSIONS[api_key]
        version = conn.version_for(api_key, supported[-1])
        if version < supported[0]:
            raise wire.NotExpressible(f"voter {destination} offers {type(data).__name__} only "
                                      f"below v{supported[0]}")
        key, obj = wire.to_wire(data, version)
        answer = await conn.send(obj, key, version=version, timeout_ms=self.config.request_timeout_ms)
        return wire.from_wire(key, version, answer, is_request=False)

    async def _connection(self, destination: int) -> BrokerConnection:
        conn = self._connections.get(destination)
        if conn is not None and not conn.closed:
            return conn
        if destination not in self.voter_addresses:
            raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"no address for node {destination}")
        lock = self._connect_locks.setdefault(destination, anyio.Lock())
        async with lock:
            conn = self._connections.get(destination)
            if conn is not None and not conn.closed:
                return conn
            if time.monotonic() < self._refused_until.get(destination, 0):
                raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"node {destination} refused lately")
            host, port = self.voter_addresses[destination]
            conn = BrokerConnection(host, port, node_id=destination, client_id=self.client_id,
                                    request_timeout_ms=self.config.request_timeout_ms,
                                    connect_timeout_ms=self.config.request_timeout_ms,
                                    local_address=self.config.local_address,
                                    ssl_context=self.ssl_context, sasl=self.sasl)
            try:
                await conn.connect()
            except KafkaError:
                self._refused_until[destination] = time.monotonic() + RECONNECT_BACKOFF_MS / 1000
                raise
            self._connections[destination] = conn
            return conn


def _needs_disk(ready: Ready) -> bool:
    return (ready.snapshot is not None or ready.quorum_state is not None
            or ready.truncate_to is not None or bool(ready.entries)
            or ready.log_start_offset is not None)
