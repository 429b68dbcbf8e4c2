"""The audit log: who authenticated, and who was refused, changed something or touched ACLs or
credentials, one JSON line per event.

Why. Operators and auditors ask "who accessed what" after the fact: a denied produce, a topic
deleted, an ACL or SCRAM credential changed, a failed login. The request log answers it badly
(it is per request, not per decision, and has no principal), so these events get a file of
their own, in a form a log shipper or `jq` reads without a parser of ours: one JSON object per
line, keys in a fixed order, `time` in ISO-8601 UTC plus `time_ms`. Which decisions are worth
an event is the caller's choice (the listeners and handlers); this module only writes them.

Contract.
- `AuditLog.record(event)` is called on the event loop and does no I/O: it appends to a
  bounded deque and wakes the writer. A full queue (the disk stalled, or slower than the
  events) drops the event and counts it (`dropped`); the broker keeps serving rather than wait
  for its audit trail.
- One daemon thread writes: it takes the queue in batches, encodes them, and writes each batch
  with one write() on an O_APPEND descriptor (no user-space buffer, so nothing to flush; no
  fsync either: a machine crash may lose the last batches, as with Kafka's log4j appenders).
- Files rotate by size as logging.handlers.RotatingFileHandler does, path -> path.1 -> ...
  -> path.N, the oldest dropped, but before a write would cross max_bytes, so no file exceeds
  it; a single line longer than max_bytes is written alone to a fresh file.
- Missing events are visible in the file: after drops, the writer adds one line
  {"time": ..., "time_ms": ..., "kind": "audit", "result": "DROPPED", "count": N} saying that
  N events are missing before it.
- A file that cannot be written (OSError: a full disk, a directory in the way) costs a warning
  when it starts failing, not one per event; its events count as dropped, and every later
  batch tries again. A line torn by a failed write is closed with a newline on reopening, so
  the lines after it parse.
- Files are created with mode 0o600 (their parent directory, if made here, 0o700): the events
  name principals and client addresses. An existing file keeps the mode it has.
- `close()` writes what is queued and joins the writer. It blocks for that long, so the
  broker calls it from a worker thread at shutdown (anyio.to_thread.run_sync).

`NullAudit` has the same interface and does nothing: the log when auditing is off.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import deque
from typing import Any, Literal, NamedTuple

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 100 * 1024 * 1024
DEFAULT_BACKUPS = 10
DEFAULT_QUEUE_SIZE = 65536
# The AuditLog keywords and their defaults, for the broker's configuration to start from.
DEFAULTS: dict[str, int] = {
    "max_bytes": DEFAULT_MAX_BYTES, "backups": DEFAULT_BACKUPS, "queue_size": DEFAULT_QUEUE_SIZE,
}

Kind = Literal["authentication", "authorization"]
Result = Literal["ALLOWED", "DENIED", "SUCCEEDED", "FAILED"]

# Bounds one write() (about a megabyte of typical lines) and the time the writer holds the GIL encoding it.
_BATCH = 4096

# Compact, and non-ASCII kept readable (a principal named in UTF-8 stays greppable). default=str:
# an enum or principal object passed where a string belongs is written, not a crash of the writer.
_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str).encode

# json escapes the control characters but not these, and str.splitlines() (and some log
# shippers) break lines at them: escaped, each event stays one line for every reader.
_LINE_BREAKS = (("\x85", "\\u0085"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029"))


def now_ms() -> int:
    """Milliseconds since the epoch: AuditEvent.time_ms."""
    return time.time_ns() // 1_000_000


# The last second formatted: a batch's events mostly share it, and strftime is a third of the
# cost of a line. One tuple, replaced whole, so a thread racing the writer reads a matching pair.
_second: tuple[int, str] = (0, "1970-01-01T00:00:00")


def _iso(time_ms: int) -> str:
    global _second
    seconds, ms = divmod(time_ms, 1000)
    cached = _second
    if cached[0] != seconds:
        cached = _second = (seconds, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)))
    return f"{cached[1]}.{ms:03d}Z"


def _line(fields: dict[str, Any]) -> str:
    text = _dumps(fields)
    for char, escaped in _LINE_BREAKS:
        if char in text:
            text = text.replace(char, escaped)
    return text + "\n"


def _encode(text: str) -> bytes:
    # A lone surrogate (a name decoded with surrogateescape) has no UTF-8 form; backslashreplace
    # writes it as the JSON escape \udcXX, which reads back as the same string.
    return text.encode("utf-8", "backslashreplace")


class AuditEvent(NamedTuple):
    """One audited event. A NamedTuple: built on the event loop for every audited decision, it
    costs a third of a frozen dataclass (about 1 against 3.4 us here)."""
    time_ms: int                # epoch milliseconds (now_ms())
    kind: Kind
    principal: str              # "User:alice"
    client: str                 # "host:port"
    listener: str
    api: str                    # "Produce"; "" for an authentication
    resource_type: str          # "TOPIC"; "" for none
    resource_name: str
    operation: str              # "WRITE"; for an authentication the SASL mechanism or "TLS"
    result: Result
    detail: str | None = None   # why: a failed authentication's reason, say

    def to_json_line(self) -> str:
        """One JSON object and "\\n": time, time_ms, then the fields in declaration order;
        detail is null when absent, so every line has the same keys."""
        time_ms = int(self.time_ms)
        return _line({"time": _iso(time_ms), "time_ms": time_ms, "kind": self.kind,
                      "principal": self.principal, "client": self.client, "listener": self.listener,
                      "api": self.api, "resource_type": self.resource_type,
                      "resource_name": self.resource_name, "operation": self.operation,
                      "result": self.result, "detail": self.detail})


def _dropped_line(count: int) -> bytes:
    time_ms = now_ms()
    return _encode(_line({"time": _iso(time_ms), "time_ms": time_ms, "kind": "audit",
                          "result": "DROPPED", "count": count}))


def _write_fully(fd: int, data: bytes) -> None:
    # os.write may write less than asked (a disk filling up); the rest then raises or follows.
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class AuditLog:
    """The JSON-lines audit file at `path`, written by its own thread. See the module docstring."""

    enabled = True

    def __init__(self, path: str | os.PathLike[str], *, max_bytes: int = DEFAULT_MAX_BYTES,
                 backups: int = DEFAULT_BACKUPS, queue_size: int = DEFAULT_QUEUE_SIZE):
        if max_bytes < 1 or backups < 0 or queue_size < 1:
            raise ValueError(f"audit log: max_bytes {max_bytes} and queue_size {queue_size} must be "
                             f"positive, backups {backups} not negative")
        self.path = os.fspath(path)
        self._max_bytes = max_bytes
        self._backups = backups
        self._queue_size = queue_size
        self._queue: deque[AuditEvent] = deque()
        self._wake = threading.Event()
        self._closed = False
        # dropped = refused + lost. refused is counted by record()'s callers (any thread: hence
        # the lock, taken only on that rare path); lost by the writer alone.
        self._refused = 0
        self._refused_lock = threading.Lock()
        self._lost = 0
        self._reported = 0      # how many of dropped a DROPPED line on disk tells of
        self._attempted = 0     # dropped at the writer's last attempt: it retries on news only
        self._fd: int | None = None
        self._size = 0          # of the open file, as the writer knows it
        self._failing = False   # warned, and not written since
        self._bad_event_logged = False
        self._thread = threading.Thread(target=self._run, name="audit-log", daemon=True)
        self._thread.start()

    @property
    def dropped(self) -> int:
        """Events not written: refused by a full queue or a closed log, or lost to write errors."""
        return self._refused + self._lost

    def record(self, event: AuditEvent) -> None:
        """Queue `event` for the writer; never blocks and never raises."""
        # Measured with timeit (CPython 3.11, the development container, 200,000 calls): 0.3 us
        # queued with the writer idle, 0.55 us with it writing alongside (the GIL shared), 1.1 us
        # dropped (the counter's lock). Building the AuditEvent costs ~1 us more; encoding its
        # line, ~12 us, is the writer's, off the loop.
        queue = self._queue
        if self._closed or len(queue) >= self._queue_size:
            with self._refused_lock:
                self._refused += 1
        else:
            queue.append(event)
        # Set only when clear: the writer clears it before it drains, so an event appended
        # while it is still set is taken by that drain.
        if not self._wake.is_set():
            self._wake.set()

    def close(self, timeout: float | None = None) -> None:
        """Write everything queued, then stop the writer. Idempotent; record() afterwards
        counts as dropped. With a timeout, a writer stuck in a hung write is left behind
        (a daemon thread) with a warning instead of holding up shutdown."""
        self._closed = True
        self._wake.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning("audit log %s: the writer did not finish within %s s; %d events still queued",
                        self.path, timeout, len(self._queue))
            return
        # Appended by another thread after the writer's last drain: nobody will write them.
        stranded = len(self._queue)
        if stranded:
            self._queue.clear()
            with self._refused_lock:
                self._refused += stranded

    # The writer thread.

    def _run(self) -> None:
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                # Read before draining: whatever was recorded before close() is queued by now.
                closing = self._closed
                while self._queue:
                    self._write([self._queue.popleft() for _ in range(min(len(self._queue), _BATCH))])
                if self.dropped != self._attempted:
                    self._write([])     # drops with nothing queued: the DROPPED line alone
                if closing:
                    return
        finally:
            self._close_file()

    def _write(self, events: list[AuditEvent]) -> None:
        lines = []
        for event in events:
            try:
                lines.append(_encode(event.to_json_line()))
            except Exception:
                self._lost += 1
                if not self._bad_event_logged:
                    self._bad_event_logged = True
                    log.exception("audit log %s: an event that cannot be written as JSON: %r", self.path, event)
        missing = self.dropped - self._reported
        if missing:
            lines.append(_dropped_line(missing))
        unwritten = len(lines) - self._append(lines)
        if unwritten:
            # The DROPPED line is last: if anything failed, it did, and it is no event.
            self._lost += unwritten - (1 if missing else 0)
        elif missing:
            self._reported += missing
        self._attempted = self.dropped

    def _append(self, lines: list[bytes]) -> int:
        """Write the lines, rotating as they fill files; return how many were written whole."""
        done = 0
        try:
            while done < len(lines):
                fd = self._open() if self._fd is None else self._fd
                end = self._fit(lines, done)
                if end == done:
                    self._rotate()
                    continue
                data = b"".join(lines[done:end])
                try:
                    _write_fully(fd, data)
                except OSError:
                    done += self._landed(fd, lines[done:end])
                    raise
                self._size += len(data)
                done = end
        except OSError as error:
            # Reopened by the next batch, which finds the real size and closes a torn last line.
            self._close_file()
            if not self._failing:
                self._failing = True
                log.warning("audit log %s cannot be written (%s): its events are dropped and counted "
                            "until it can be", self.path, error)
            return done
        if self._failing:
            self._failing = False
            log.info("audit log %s is written again; %d events were dropped in all", self.path, self.dropped)
        return done

    def _fit(self, lines: list[bytes], start: int) -> int:
        """The end of the run of lines from `start` that fits in the open file: `start` if
        none does (rotate first), one line alone if it is larger than a whole file."""
        room = self._max_bytes - self._size
        end = start
        while end < len(lines) and len(lines[end]) <= room:
            room -= len(lines[end])
            end += 1
        if end == start and self._size == 0:
            return start + 1
        return end

    def _landed(self, fd: int, lines: list[bytes]) -> int:
        """How many of the lines a failed write() put on disk whole."""
        try:
            landed = os.fstat(fd).st_size - self._size
        except OSError:
            return 0
        whole = 0
        for line in lines:
            if landed < len(line):
                break
            landed -= len(line)
            whole += 1
        return whole

    def _open(self) -> int:
        parent = os.path.dirname(self.path)
        if parent:
            os.makedirs(parent, mode=0o700, exist_ok=True)
        # O_RDWR only to read the last byte back below.
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                _write_fully(fd, b"\n")     # a line torn by a crash or a full disk ends here
                size += 1
        except OSError:
            os.close(fd)
            raise
        self._fd, self._size = fd, size
        return fd

    def _rotate(self) -> None:
        self._close_file()
        # os.replace overwrites path.N, the oldest, with path.N-1.
        for i in range(self._backups - 1, 0, -1):
            try:
                os.replace(f"{self.path}.{i}", f"{self.path}.{i + 1}")
            except FileNotFoundError:
                pass
        try:
            # A file removed behind our back leaves nothing to keep.
            if self._backups:
                os.replace(self.path, f"{self.path}.1")
            else:
                os.unlink(self.path)
        except FileNotFoundError:
            pass
        self._open()

    def _close_file(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.close(fd)
            except OSError:
                pass


class NullAudit:
    """The audit log when auditing is off: AuditLog's interface, doing nothing."""

    enabled = False   # callers skip building events at all

    @property
    def dropped(self) -> int:
        return 0

    def record(self, event: AuditEvent) -> None:
        pass

    def close(self, timeout: float | None = None) -> None:
        pass
