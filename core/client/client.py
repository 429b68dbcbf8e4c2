"""KafkaClient: bootstrap, metadata, one connection per broker, and retries.

Theory of operation
-------------------
`start()` connects to the first bootstrap address that answers and reads Metadata. From then
on brokers are addressed by node id: `send(node_id, request)` opens (once, even when many
tasks ask at the same time) and reuses one pipelined connection per broker. A connection
that dies is dropped from the map when it closes, and the next send reconnects, after
`reconnect_backoff_ms` if the last attempt to that broker failed.

Metadata is refreshed on demand: `ensure_topics()` refreshes when a topic is missing or
leaderless, when someone flagged the view stale (`request_metadata_update()`, called after
NOT_LEADER_OR_FOLLOWER and similar) or when it is older than `metadata_max_age_ms`.
Refreshes are single-flight: callers that queue behind a refresh which covered their topics
reuse its result. A refresh asks the least-loaded connected broker, then the others, then
the bootstrap addresses again, so a client survives the loss of the broker it started from.

`call(op)` runs an operation, retrying errors Kafka marks retriable (with exponential backoff
from `retry_backoff_ms`, and a metadata refresh in between) until `default_api_timeout_ms`.
Only operations that are safe to repeat should go through it; the producer has its own
retry logic because it owns record ordering and delivery deadlines.

Background tasks. The client's own (connects, closing connections it dropped) and each of its
Consumers' groups (consumer.py) run in one anyio task group (tasks.py), entered by `start()`
(or `async with`) and exited by `close()`: nothing the client started outlives it. anyio's
rule for task groups applies: `close()` runs in the task that called `start()`, after that
task left every cancel scope it entered in between; `async with KafkaClient(...)` is the
simple way to get that right.
"""
from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Any, Awaitable, Callable, Coroutine, Iterable, TypeVar

import anyio

from core.protocol import messages as m

from .cluster import ClusterView
from .connection import API_KEY_OF, DEFAULT_MAX_RESPONSE_SIZE, BrokerConnection
from .security import PLAINTEXT, ClientSecurity
from .errors import ClientClosedError, KafkaConnectionError, KafkaError
from .tasks import BackgroundTasks

log = logging.getLogger(__name__)

__all__ = ["KafkaClient", "parse_bootstrap"]

T = TypeVar("T")
METADATA = m.ApiKey.METADATA


def parse_bootstrap(servers: str | Iterable[str]) -> list[tuple[str, int]]:
    """ "h1:9092,h2:9093" or ["h1:9092", "[::1]:9094"] -> [(host, port), ...]."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        if "://" in item:  # tolerate "PLAINTEXT://host:port"
            item = item.split("://", 1)[1]
        if item.startswith("["):
            host, _, rest = item[1:].partition("]")
            port = int(rest[1:]) if rest.startswith(":") else 9092
        elif item.count(":") == 1:
            host, port_text = item.split(":")
            port = int(port_text)
        else:
            host, port = item, 9092
        out.append((host, port))
    if not out:
        raise ValueError(f"no bootstrap servers in {servers!r}")
    return out


class _Connect:
    """One connect to a broker, shared by every caller that needs it meanwhile."""

    __slots__ = ("done", "conn", "error")

    def __init__(self):
        self.done = anyio.Event()
        self.conn: BrokerConnection | None = None
        self.error: BaseException | None = None


class KafkaClient:
    def __init__(self, bootstrap_servers: str | list[str], *, client_id: str = "seaway",
                 request_timeout_ms: int = 30000, metadata_max_age_ms: int = 300000,
                 retry_backoff_ms: int = 100, retry_backoff_max_ms: int = 1000,
                 reconnect_backoff_ms: int = 50, connect_timeout_ms: int = 10000,
                 default_api_timeout_ms: int = 60000,
                 max_response_size: int = DEFAULT_MAX_RESPONSE_SIZE,
                 allow_auto_create_topics: bool = True, security: ClientSecurity = PLAINTEXT):
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.security = security   # TLS and SASL to every broker (core/client/security.py)
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.metadata_max_age_ms = metadata_max_age_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms
        self.reconnect_backoff_ms = reconnect_backoff_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.default_api_timeout_ms = default_api_timeout_ms
        self.max_response_size = max_response_size
        self.allow_auto_create_topics = allow_auto_create_topics
        self.cluster = ClusterView()
        self._conns: dict[int, BrokerConnection] = {}
        self._dedicated: set[BrokerConnection] = set()
        self._connecting: dict[int, _Connect] = {}
        self._last_connect_failure: dict[int, float] = {}
        self.last_metadata_error: str | None = None
        self._tracked_topics: set[str] = set()
        self._metadata_lock = asyncio.Lock()
        self._metadata_stale = False
        self._last_refresh: tuple[float, frozenset[str] | None] = (0.0, frozenset())  # (done at, topics)
        self._started = False
        self._closed = False
        self._tasks = BackgroundTasks(f"KafkaClient({client_id})")

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> "KafkaClient":
        """Enter the client's task group and read Metadata; close() in the same task (see
        the module's notes). A start that fails leaves no task behind and may be retried."""
        if self._closed:
            raise ClientClosedError("KafkaClient was closed")
        if not self._started:
            if not self._tasks.running:
                await self._tasks.open()
            try:
                # Brokers that are still starting refuse connections: keep trying the bootstrap
                # list for up to connect_timeout_ms before giving up.
                await self.call(lambda: self.refresh_metadata([]), timeout_ms=self.connect_timeout_ms,
                                refresh=False)
            except BaseException:
                await self._tasks.close()
                self._tasks = BackgroundTasks(self._tasks.owner)
                raise
            self._started = True
        return self

    async def close(self) -> None:
        """Stop the background tasks (connects, consumers' fetches and heartbeats) and close
        every connection, each given up to a second to go, even if the caller is cancelled."""
        self._closed = True
        try:
            await self._tasks.close()
        finally:
            conns = list(self._conns.values()) + list(self._dedicated)
            self._conns.clear()
            self._dedicated.clear()
            with anyio.CancelScope(shield=True):
                await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)

    async def __aenter__(self) -> "KafkaClient":
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    async def start_background(self, serve: Callable[..., Coroutine[Any, Any, None]], *, name: str) -> None:
        """Run `serve(task_status=...)` in the client's task group, returning once it called
        task_status.started(): a Consumer runs its own task group there. It is cancelled when
        the client closes, if it has not returned by then."""
        if self._closed:
            raise ClientClosedError("KafkaClient was closed")
        if not self._tasks.running:
            raise ClientClosedError("KafkaClient is not started: `async with KafkaClient(...)` "
                                    "or `await client.start()` first")
        await self._tasks.start(serve, name=name)

    # ------------------------------------------------------------------ connections

    async def connection(self, node_id: int | None) -> BrokerConnection:
        """The live connection to `node_id`, opening it if needed. A node not in the cluster
        metadata (None: no node known, as controller_node() may say) raises
        KafkaConnectionError."""
        if self._closed:
            raise ClientClosedError("KafkaClient was closed")
        if node_id is None:   # as a node the metadata does not list
            self.request_metadata_update()
            raise KafkaConnectionError(f"node {node_id} is not in the cluster metadata")
        conn = self._conns.get(node_id)
        if conn is not None and not conn.closed:
            return conn
        attempt = self._connecting.get(node_id)
        if attempt is None:
            broker = self.cluster.brokers.get(node_id)
            if broker is None:
                self.request_metadata_update()
                raise KafkaConnectionError(f"node {node_id} is not in the cluster metadata")
            attempt = self._connecting[node_id] = _Connect()
            if self._tasks.running:
                # In the client's task group: one caller giving up must not abort the
                # connect others wait for.
                self._tasks.start_soon(self._connect, node_id, broker.host, broker.port, attempt,
                                       name=f"connect to node {node_id}")
            else:   # a client used without start(): connect in the caller's task
                await self._connect(node_id, broker.host, broker.port, attempt)
        await attempt.done.wait()
        if attempt.error is not None:
            raise attempt.error
        assert attempt.conn is not None   # a connect that did not fail has its connection
        return attempt.conn

    async def _connect(self, node_id: int, host: str, port: int, attempt: _Connect) -> None:
        try:
            attempt.conn = await self._open(node_id, host, port)
        except Exception as exc:
            attempt.error = exc
        except BaseException:   # cancelled: by close(), or the caller that connected gave up
            attempt.error = (ClientClosedError("KafkaClient was closed") if self._closed else
                             KafkaConnectionError(f"connecting to node {node_id} was abandoned"))
            raise
        finally:
            if self._connecting.get(node_id) is attempt:
                del self._connecting[node_id]
            attempt.done.set()

    async def _open(self, node_id: int, host: str, port: int) -> BrokerConnection:
        failed_at = self._last_connect_failure.get(node_id)
        if failed_at is not None:
            wait = failed_at + self.reconnect_backoff_ms / 1000 - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
        conn = self._new_connection(host, port, node_id)
        try:
            await conn.connect()
        except KafkaError:
            self._last_connect_failure[node_id] = time.monotonic()
            self.request_metadata_update()  # the broker may have moved or gone
            raise
        self._last_connect_failure.pop(node_id, None)
        if self._closed:
            await conn.close()
            raise ClientClosedError("KafkaClient was closed")
        self._conns[node_id] = conn
        return conn

    async def dedicated_connection(self, host: str, port: int, node_id: int = -1) -> BrokerConnection:
        """A connection of the caller's own to host:port, outside the one-per-node map.

        For a group coordinator: a JoinGroup is held there for a whole rebalance and a broker
        answers one connection's requests in order, so sharing the node's connection would
        stall fetches behind it. The caller closes it; close() closes it too.
        """
        if self._closed:
            raise ClientClosedError("KafkaClient was closed")
        conn = self._new_connection(host, port, node_id)
        conn.on_close = self._dedicated.discard
        await conn.connect()
        if self._closed:
            await conn.close()
            raise ClientClosedError("KafkaClient was closed")
        if not conn.closed:
            self._dedicated.add(conn)
        return conn

    def _new_connection(self, host: str, port: int, node_id: int) -> BrokerConnection:
        return BrokerConnection(host, port, node_id=node_id, client_id=self.client_id,
                                request_timeout_ms=self.request_timeout_ms,
                                connect_timeout_ms=self.connect_timeout_ms,
                                max_response_size=self.max_response_size,
                                on_close=self._on_connection_closed, ssl_context=self.security.ssl_context,
                                sasl=self.security.sasl)

    def _on_connection_closed(self, conn: BrokerConnection) -> None:
        if self._conns.get(conn.node_id) is conn:
            del self._conns[conn.node_id]

    async def send(self, node_id: int, request, api_key: int | None = None, *,
                   version: int | None = None, max_version: int | None = None,
                   timeout_ms: float | None = None, expect_response: bool = True) -> Any:
        """Send `request` to broker `node_id` and return its decoded response.

        The version is the highest both sides speak (capped at `max_version`) unless
        `version` is given. Raises KafkaConnectionError / RequestTimedOutError (both retriable)
        on transport failures; error codes inside the response are the caller's to read.
        """
        conn = await self.connection(node_id)
        if version is None and max_version is not None:
            version = conn.version_for(api_key if api_key is not None else API_KEY_OF[type(request)],
                                       max_version)
        return await conn.send(request, api_key=api_key, version=version, timeout_ms=timeout_ms,
                               expect_response=expect_response)

    def least_loaded_node(self) -> int | None:
        """A connected broker with the fewest requests in flight, else a random known one."""
        live = [(c.in_flight, nid) for nid, c in self._conns.items() if not c.closed
                and nid in self.cluster.brokers]
        if live:
            return min(live)[1]
        nodes = list(self.cluster.brokers)
        return random.choice(nodes) if nodes else None

    async def any_node(self) -> int:
        """The least-loaded broker, refreshing metadata first if none is known yet."""
        node = self.least_loaded_node()
        if node is None:
            await self.refresh_metadata([])
            node = self.least_loaded_node()
            if node is None:
                raise KafkaConnectionError("no brokers known")
        return node

    async def send_any(self, request, **kwargs) -> Any:
        """Send to the least-loaded broker (for requests any broker can answer)."""
        return await self.send(await self.any_node(), request, **kwargs)

    def controller_node(self) -> int | None:
        cid = self.cluster.controller_id
        return cid if cid in self.cluster.brokers else self.least_loaded_node()

    async def send_controller(self, request, **kwargs) -> Any:
        """Send to the controller named in Metadata (in KRaft, a broker that forwards)."""
        node = self.controller_node()
        if node is None:
            raise KafkaConnectionError("no controller known")
        return await self.send(node, request, **kwargs)

    # ------------------------------------------------------------------ metadata

    def request_metadata_update(self) -> None:
        """Flag the view stale: the next ensure_topics() refreshes."""
        self._metadata_stale = True

    @property
    def metadata_stale(self) -> bool:
        return self._metadata_stale

    def untrack_topics(self, topics: Iterable[str]) -> None:
        """Stop asking for `topics` (after deleting them: with auto-creation on, asking
        for a deleted topic would create it again)."""
        for t in topics:
            self._tracked_topics.discard(t)
            self.cluster.topics.pop(t, None)

    def tracked_topics(self) -> set[str]:
        """Topics someone asked about through ensure_topics; refreshes cover them."""
        return set(self._tracked_topics)

    def leader_for(self, topic: str, partition: int) -> int | None:
        return self.cluster.leader_for(topic, partition)

    async def ensure_topics(self, topics: Iterable[str]) -> ClusterView:
        """Make sure the view covers `topics` with leaders, refreshing if needed.

        The topics are tracked from then on: later refreshes include them. A topic that does
        not exist stays absent (or carries its error) after the refresh; callers decide
        whether to wait for it.
        """
        topics = set(topics)
        new = topics - self._tracked_topics
        self._tracked_topics |= topics
        needs = (bool(new) or self._metadata_stale
                 or self.cluster.age_ms() > self.metadata_max_age_ms
                 or any(not self._topic_ready(t) for t in topics))
        if needs:
            await self.refresh_metadata(self._tracked_topics)
        return self.cluster

    def _topic_ready(self, topic: str) -> bool:
        info = self.cluster.topics.get(topic)
        return info is not None and not info.error and bool(info.partitions) and not info.leaderless

    async def refresh_metadata(self, topics: Iterable[str] | None = None) -> ClusterView:
        """Fetch Metadata for `topics` (None: every topic; []: brokers only) and apply it."""
        wanted = None if topics is None else frozenset(topics)
        asked_at = time.monotonic()
        async with self._metadata_lock:
            done_at, covered = self._last_refresh
            if done_at > asked_at and (covered is None or (wanted is not None and wanted <= covered)):
                return self.cluster  # a refresh that started after we asked covered us
            # Only a refresh that covers every tracked topic answers "the view is stale".
            covers_all = wanted is None or self._tracked_topics <= wanted
            stale_before = self._metadata_stale
            if covers_all:
                self._metadata_stale = False
            try:
                response = await self._metadata_request(wanted)
            except BaseException:
                self._metadata_stale = self._metadata_stale or stale_before
                raise
            # Merge rather than replace when asking for a subset, so that topics tracked by
            # someone else stay known.
            self.cluster.apply(response, all_topics=wanted is None)
            self._last_refresh = (time.monotonic(), wanted)
            self._forget_departed_brokers()
            return self.cluster

    def _forget_departed_brokers(self) -> None:
        for node_id, conn in list(self._conns.items()):
            if node_id not in self.cluster.brokers:
                self._conns.pop(node_id, None)
                self._close_soon(conn)

    def _close_soon(self, conn: BrokerConnection) -> None:
        """Close a connection we no longer use: in the background, as close() waits for the
        transport (up to a second); without a task group, at once."""
        if self._tasks.running:
            self._tasks.start_soon(conn.close, name=f"close {conn}")
        else:
            conn.close_nowait()

    def _metadata_body(self, version: int, topics: frozenset[str] | None):
        request_topics: list[m.MetadataRequest.MetadataRequestTopic] | None
        if topics is None:
            request_topics = [] if version == 0 else None
        else:
            if not topics and version == 0:
                topics = frozenset()  # v0 cannot ask for "no topics"; all is the closest
            request_topics = [m.MetadataRequest.MetadataRequestTopic(name=t) for t in sorted(topics)]
        return m.MetadataRequest(topics=request_topics,
                                 allow_auto_topic_creation=self.allow_auto_create_topics)

    async def _metadata_request(self, topics: frozenset[str] | None):
        errors: list[str] = []
        tried: set[int] = set()
        # Known brokers first: connected ones by load, then the rest in random order.
        candidates = sorted(self._conns, key=lambda n: self._conns[n].in_flight)
        others = [n for n in self.cluster.brokers if n not in candidates]
        random.shuffle(others)
        for node_id in candidates + others:
            if node_id in tried or node_id not in self.cluster.brokers:
                continue
            tried.add(node_id)
            try:
                conn = await self.connection(node_id)
                version = conn.version_for(METADATA)
                return await conn.send(self._metadata_body(version, topics), api_key=METADATA,
                                       version=version)
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                errors.append(str(exc))
        for host, port in self.bootstrap:
            conn = self._new_connection(host, port, -1)
            conn.on_close = None
            try:
                await conn.connect()
                version = conn.version_for(METADATA)
                response = await conn.send(self._metadata_body(version, topics), api_key=METADATA,
                                           version=version)
            except KafkaError as exc:
                await conn.close()
                if not exc.retriable:
                    raise
                errors.append(str(exc))
                continue
            self._adopt_bootstrap_connection(conn, response)
            return response
        # Kept for a caller whose own deadline ends the retries: what the brokers last said.
        self.last_metadata_error = "; ".join(errors)
        raise KafkaConnectionError("metadata unavailable from every broker: " + self.last_metadata_error)

    def _adopt_bootstrap_connection(self, conn: BrokerConnection, response) -> None:
        """Keep the bootstrap connection as its broker's node connection if it is one."""
        for b in response.brokers:
            if (b.host, b.port) == (conn.host, conn.port) and b.node_id not in self._conns \
                    and not self._closed:
                conn.node_id = b.node_id
                conn.on_close = self._on_connection_closed
                self._conns[b.node_id] = conn
                return
        self._close_soon(conn)

    # ------------------------------------------------------------------ retries

    def backoff_ms(self, attempt: int) -> float:
        """Exponential backoff with jitter, as Kafka's clients do (KIP-580)."""
        base = min(self.retry_backoff_ms * (2 ** attempt), self.retry_backoff_max_ms)
        return base * random.uniform(0.8, 1.2)

    async def call(self, op: Callable[[], Awaitable[T]], *, timeout_ms: float | None = None,
                   refresh: bool = True) -> T:
        """`await op()`, retrying retriable KafkaErrors until `timeout_ms`
        (default_api_timeout_ms), with backoff and (if `refresh`) a metadata refresh
        between attempts."""
        budget = self.default_api_timeout_ms if timeout_ms is None else timeout_ms
        deadline = time.monotonic() + budget / 1000
        attempt = 0
        while True:
            try:
                return await op()
            except KafkaError as exc:
                if not exc.retriable or self._closed:
                    raise
                delay = self.backoff_ms(attempt) / 1000
                if time.monotonic() + delay >= deadline:
                    raise
                log.debug("retrying after %s (attempt %d)", exc, attempt + 1)
                attempt += 1
                await asyncio.sleep(delay)
                self.request_metadata_update()
                if not refresh:
                    continue
                try:
                    await self.refresh_metadata(self.tracked_topics())
                except KafkaError as refresh_exc:
                    if not refresh_exc.retriable:
                        raise
