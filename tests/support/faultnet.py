"""A TCP fault network for tests: per-link delay, drop, blackhole and cut between nodes.

    net = FaultNet()
    proxy_port = net.expose(node_id=1, upstream_port=real_port)   # advertise proxy_port
    # node 1 runs with client.local.address=FaultNet.address_of(1) == "127.0.1.1"
    net.delay(1, 2, 200)          # bytes 1->2 and 2->1 arrive 200 ms late
    net.blackhole(1, 2)           # a partition TCP does not notice
    net.isolate(3)                # node 3 from every other node (clients still reach it)
    net.partition([1], [2, 3])
    net.heal_all()
    net.close()

Who is who. This machine has no netem, so faults live in a proxy in front of every listener.
The proxy learns the destination from the listener a connection arrives on, and the source
from the connection's peer IP: every node binds its outbound sockets to 127.0.1.<node id>
(`client.local.address`); anything else (127.0.0.1) is a "client". All of 127/8 is loopback
on Linux, so those addresses need no setup.

Rules are per directed link (from, to) and apply to the bytes flowing that way, whichever
side opened the connection, as a network would. Faults:
- delay: every chunk is held `ms` (plus up to `jitter_ms`) before it is forwarded; order is kept.
- drop: with probability p a chunk is swallowed *and the connection is reset*. Discarding
  bytes from the middle of a TCP stream would not model packet loss (TCP retransmits lost
  packets, it never skips them); it would only desynchronise Kafka's framing. The visible
  effect of a lossy link on a TCP peer is stalls and resets, so that is what drop produces.
- blackhole: bytes are held, never forwarded, and the connection stays open: a partition the
  peers only notice by their own timeouts. FIN is held too. On heal the held bytes go through,
  as TCP's retransmissions would deliver them once the path is back. A new connection still
  completes its handshake (the proxy's kernel answers it), then its bytes are held: a connect
  does not time out as it would behind a real partition, the first request does.
- cut: existing connections between the two are reset and new ones are reset on arrival
  (a TCP connection needs both directions, so a cut either way kills it).

Its own asyncio loop runs in a daemon thread, so it works beside any client library in the
test process; every public method is thread-safe and returns once the rule is in force.
"""
from __future__ import annotations

import asyncio
import random
import socket
import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass, replace
from typing import Iterable

CLIENT = "client"
NODE_NET = "127.0.1."

_CHUNK = 1 << 16
_QUEUE_CHUNKS = 64          # per direction: past this the proxy stops reading (TCP back-pressure)
_EOF = None


@dataclass(frozen=True)
class Rule:
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    drop: float = 0.0          # probability that a chunk resets the connection
    blackhole: bool = False
    cut: bool = False

    def describe(self) -> str:
        parts = []
        if self.cut:
            parts.append("cut")
        if self.blackhole:
            parts.append("blackhole")
        if self.drop:
            parts.append(f"drop p={self.drop:g}")
        if self.delay_ms or self.jitter_ms:
            parts.append(f"delay {self.delay_ms:g}ms" + (f"+{self.jitter_ms:g}" if self.jitter_ms else ""))
        return ",".join(parts) or "healed"


HEALED = Rule()


class _Conn:
    """One proxied connection: the initiator's side and the upstream side."""

    def __init__(self, src, dst, client_w: asyncio.StreamWriter, upstream_w: asyncio.StreamWriter):
        self.src, self.dst = src, dst
        self.writers = (client_w, upstream_w)
        self.tasks: list[asyncio.Task] = []
        self.closed = False

    def between(self, a, b) -> bool:
        return {self.src, self.dst} == {a, b}

    def close(self, reset: bool) -> None:
        if self.closed:
            return
        self.closed = True
        for w in self.writers:
            _close_writer(w, reset)
        current = asyncio.current_task()
        for t in self.tasks:
            if t is not current:
                t.cancel()


def _close_writer(w: asyncio.StreamWriter, reset: bool) -> None:
    sock = w.get_extra_info("socket")
    if reset and sock is not None:
        try:   # SO_LINGER 0: close sends RST, as a reset path or a middlebox would
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    if reset:
        w.transport.abort()
    else:
        w.close()


def _client_id(data: bytes) -> str | None:
    """The client id in a request header (v1+: size, key, version, correlation id, then an
    int16-length string), if the chunk holds it."""
    if len(data) < 14:
        return None
    (length,) = struct.unpack_from(">h", data, 12)
    if length < 0 or len(data) < 14 + length:
        return None
    return data[14:14 + length].decode(errors="replace")


class FaultNet:
    def __init__(self, *, seed: int | None = None, connect_timeout: float = 5.0):
        self.rng = random.Random(seed)
        self.connect_timeout = connect_timeout
        self.nodes: set[int] = set()
        self.events: list[tuple[float, str]] = []     # (monotonic time, what was injected)
        self._counters: Counter = Counter()
        self._rules: dict[tuple, Rule] = {}
        self._conns: set[_Conn] = set()
        self._tasks: set[asyncio.Task] = set()
        self._servers: list[asyncio.AbstractServer] = []
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._changed: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="faultnet", daemon=True)
        self._thread.start()
        self._call(self._init_on_loop)

    async def _init_on_loop(self) -> None:
        self._changed = asyncio.Event()

    # ------------------------------------------------------------------ addresses

    @staticmethod
    def address_of(node_id: int) -> str:
        """The loopback IP node `node_id` binds its outbound connections to."""
        if not 1 <= node_id <= 254:
            raise ValueError(f"node id {node_id} does not fit 127.0.1.1-254")
        return f"{NODE_NET}{node_id}"

    @staticmethod
    def source_of(ip: str):
        if ip.startswith(NODE_NET):
            return int(ip[len(NODE_NET):])
        return CLIENT

    def expose(self, node_id: int, upstream_port: int, *, port: int = 0,
               upstream_host: str = "127.0.0.1") -> int:
        """Listen for connections to `node_id` and forward them to its real port; returns the
        proxy's port (the one to advertise)."""
        self.address_of(node_id)
        self.nodes.add(node_id)
        return self._call(self._listen, node_id, (upstream_host, upstream_port), port)

    async def _listen(self, node_id: int, upstream, port: int) -> int:
        server = await asyncio.start_server(
            lambda r, w: self._accept(r, w, node_id, upstream), "127.0.0.1", port,
            reuse_address=True, backlog=256)
        self._servers.append(server)
        return server.sockets[0].getsockname()[1]

    # ------------------------------------------------------------------ rules (thread-safe)

    def rule(self, frm, to) -> Rule:
        return self._rules.get((frm, to), HEALED)

    def set_rule(self, frm, to, rule: Rule, *, both: bool = True) -> None:
        """Replace the rule of link frm->to (and to->frm unless both=False)."""
        pairs = [(frm, to), (to, frm)] if both else [(frm, to)]
        self._note(f"{frm}{'<->' if both else '->'}{to}: {rule.describe()}")
        self._call(self._apply, pairs, rule)

    def _update(self, frm, to, both: bool, **changes) -> None:
        self.set_rule(frm, to, replace(self.rule(frm, to), **changes), both=both)

    def delay(self, frm, to, ms: float, *, jitter_ms: float = 0.0, both: bool = True) -> None:
        self._update(frm, to, both, delay_ms=ms, jitter_ms=jitter_ms)

    def drop(self, frm, to, probability: float = 1.0, *, both: bool = True) -> None:
        if not 0.0 <= probability <= 1.0:
            raise ValueError(f"drop probability {probability} is not in [0, 1]")
        self._update(frm, to, both, drop=probability)

    def blackhole(self, frm, to, *, both: bool = True) -> None:
        self._update(frm, to, both, blackhole=True)

    def cut(self, frm, to, *, both: bool = True) -> None:
        self._update(frm, to, both, cut=True)

    def heal(self, frm, to, *, both: bool = True) -> None:
        self.set_rule(frm, to, HEALED, both=both)

    def heal_all(self) -> None:
        self._note("heal all")
        self._call(self._apply, None, HEALED)

    def partition(self, group_a: Iterable, group_b: Iterable, *, mode: str = "blackhole") -> None:
        """No traffic between the groups (both ways); mode is "blackhole" or "cut"."""
        if mode not in ("blackhole", "cut"):
            raise ValueError(f"partition mode {mode!r} is not blackhole or cut")
        a, b = list(group_a), list(group_b)
        self._note(f"partition {a} | {b} ({mode})")
        pairs = [(x, y) for x in a for y in b] + [(y, x) for x in a for y in b]
        self._call(self._apply, pairs, Rule(blackhole=mode == "blackhole", cut=mode == "cut"))

    def isolate(self, node: int, *, clients: bool = False, mode: str = "blackhole") -> None:
        """Cut `node` off from every other node (and from clients if asked)."""
        others = [n for n in self.nodes if n != node] + ([CLIENT] if clients else [])
        self.partition([node], others, mode=mode)

    async def _apply(self, pairs, rule: Rule) -> None:
        if pairs is None:
            pairs = list(self._rules)
        for pair in pairs:
            if rule == HEALED:
                self._rules.pop(pair, None)
            else:
                self._rules[pair] = rule
        if rule.cut:
            for c in [c for c in self._conns if any(c.between(*p) for p in pairs)]:
                self._count("reset", c.src, c.dst)
                c.close(reset=True)
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()   # wake every held writer to look at the rules again

    # ------------------------------------------------------------------ figures

    def counters(self) -> Counter:
        """("connections"|"bytes"|"dropped"|"refused"|"reset", from, to) -> count."""
        with self._lock:
            return Counter(self._counters)

    def links_seen(self) -> set[tuple]:
        """(source, destination) of every connection accepted so far."""
        return {(k[1], k[2]) for k in self.counters() if k[0] == "connections"}

    def client_ids_seen(self) -> set[tuple]:
        """(source, destination, client id of the connection's first Kafka request): which
        part of a node opened each connection ("raft-2", "broker-2", ...)."""
        return {k[1:] for k in self.counters() if k[0] == "client_id"}

    def _count(self, what: str, frm, to, n: int = 1) -> None:
        with self._lock:
            self._counters[(what, frm, to)] += n

    def _note(self, text: str) -> None:
        with self._lock:
            self.events.append((time.monotonic(), text))

    # ------------------------------------------------------------------ proxying

    def _blocked(self, a, b) -> bool:
        return self.rule(a, b).cut or self.rule(b, a).cut

    async def _accept(self, reader, writer, dst: int, upstream) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)
        try:
            await self._proxy(reader, writer, dst, upstream)
        finally:
            self._tasks.discard(task)

    async def _proxy(self, reader, writer, dst: int, upstream) -> None:
        peer = writer.get_extra_info("peername")
        src = self.source_of(peer[0] if peer else "")
        if self._blocked(src, dst):
            self._count("refused", src, dst)
            _close_writer(writer, reset=True)
            return
        try:
            up_r, up_w = await asyncio.wait_for(asyncio.open_connection(*upstream), self.connect_timeout)
        except (OSError, asyncio.TimeoutError):
            self._count("refused", src, dst)   # the node is down: pass the refusal on
            _close_writer(writer, reset=True)
            return
        conn = _Conn(src, dst, writer, up_w)
        for w in (writer, up_w):
            sock = w.get_extra_info("socket")
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except (OSError, AttributeError):   # already reset by a peer
                conn.close(reset=True)
                return
        if self._blocked(src, dst):    # cut while we were connecting upstream
            conn.close(reset=True)
            return
        self._count("connections", src, dst)
        self._conns.add(conn)
        for frm, to, r, w in ((src, dst, reader, up_w), (dst, src, up_r, writer)):
            queue: asyncio.Queue = asyncio.Queue(_QUEUE_CHUNKS)
            conn.tasks.append(asyncio.create_task(self._read(conn, frm, to, r, queue)))
            conn.tasks.append(asyncio.create_task(self._write(conn, frm, to, w, queue)))
        try:
            done, _ = await asyncio.wait(conn.tasks, return_when=asyncio.FIRST_EXCEPTION)
            # A bug in a pump must not leave a half-dead connection that looks like a blackhole.
            broken = [t for t in done if not t.cancelled() and t.exception() is not None]
            conn.close(reset=bool(broken))
            await asyncio.gather(*conn.tasks, return_exceptions=True)
            if broken:
                raise broken[0].exception()
        finally:
            conn.close(reset=False)
            self._conns.discard(conn)

    async def _read(self, conn: _Conn, frm, to, reader: asyncio.StreamReader, queue) -> None:
        loop = asyncio.get_running_loop()
        first = frm == conn.src
        try:
            while True:
                data = await reader.read(_CHUNK)
                if first and data:
                    first = False
                    with self._lock:
                        self._counters[("client_id", frm, to, _client_id(data))] += 1
                rule = self.rule(frm, to)
                if rule.cut or self.rule(to, frm).cut:
                    conn.close(reset=True)
                    return
                if data and rule.drop and self.rng.random() < rule.drop:
                    self._count("dropped", frm, to)
                    conn.close(reset=True)
                    return
                delay = rule.delay_ms + (self.rng.random() * rule.jitter_ms if rule.jitter_ms else 0)
                await queue.put((loop.time() + delay / 1000, data or _EOF))
                if not data:
                    return
        except (OSError, ConnectionError):
            await queue.put((loop.time(), _EOF))

    async def _write(self, conn: _Conn, frm, to, writer: asyncio.StreamWriter, queue) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                due, data = await queue.get()
                if due > loop.time():
                    await asyncio.sleep(due - loop.time())
                while self.rule(frm, to).blackhole and not conn.closed:
                    changed = self._changed
                    await changed.wait()
                if self._blocked(frm, to):
                    conn.close(reset=True)
                    return
                if data is _EOF:
                    # Kafka peers never half-close: the other side's EOF ends the connection.
                    conn.close(reset=False)
                    return
                writer.write(data)
                await writer.drain()
                self._count("bytes", frm, to, len(data))
        except (OSError, ConnectionError):
            conn.close(reset=True)

    # ------------------------------------------------------------------ plumbing

    def _call(self, fn, *args):
        if threading.current_thread() is self._thread:
            raise RuntimeError("FaultNet methods are for other threads; its loop would deadlock")
        return asyncio.run_coroutine_threadsafe(fn(*args), self._loop).result(30)

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._call(self._shutdown)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _shutdown(self) -> None:
        for s in self._servers:
            s.close()
        for c in list(self._conns):
            c.close(reset=True)
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for s in self._servers:
            await s.wait_closed()

    def __enter__(self) -> "FaultNet":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
