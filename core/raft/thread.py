"""RaftThread: the quorum's own event loop, in its own thread: the Raft driver and the
services that must keep the quorum's deadlines.

Why. A node's data plane (produce, fetch, replication, groups) shares the process's event loop.
A loop turn that takes long (a large fetch answered, thousands of partitions applied from a new
metadata image, a slow disk call made without a thread) delays every timer on that loop. The
quorum's timers are the ones that must not slip: a follower that does not hear from its leader
within controller.quorum.fetch.timeout.ms starts an election, a leader that cannot answer its
voters within the election timeout loses them, and a broker whose heartbeats stop for
broker.session.timeout.ms is fenced. So the Raft driver gets a loop of its own, and so does
what the controller and the broker's registration need to keep their deadlines: the
controller listeners, the ControllerRunner with its own MetadataLoader, and the broker's
heartbeats (core/node/server.py starts them here). CPython's GIL hands the interpreter to a
waiting thread at least every sys.getswitchinterval() (5 ms), so a busy data plane costs the
quorum milliseconds, never seconds.

Contract. The wrapper offers the driver's interface to the node's main loop and keeps every
call on the right side:

    main loop                         raft thread
    run()                  ------->   RaftDriver.run() (open, the Ready loop)
    handle_request/propose/
    resign_and_flush/create_snapshot/
    log_end_offset, call() ------->   the same coroutine, awaited there, result sent back
    start_soon(), call_soon() ---->   a task in the thread's task group / a callback on its loop
    listener callbacks     <-------   handle_snapshot/handle_commit/handle_leader_change,
                                      queued to the main loop in the order the driver made them
    leader, high_watermark            plain attribute reads (one reference, written by the thread)

The driver's listener (the main loop's MetadataLoader, which the broker publishes from) keeps
living on the main loop and sees the same calls in the same order as with an in-loop driver,
a loop turn later. Local listeners (add_local_listener: the controller's loader) are called on
the thread, directly, before the main loop hears of the same entries. Code on the thread uses
the RaftDriver itself (`.driver`), never this wrapper's hops. Cancelling run() stops the
thread's loop (the driver's and the services' own shutdown run there) and joins it. An
exception that ends the driver or a service ends run() with it, so the node stops, as before.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any, Callable, Coroutine, ParamSpec, Sequence, TypeVar, TypeVarTuple

import anyio
from anyio.abc import TaskGroup, TaskStatus

from .driver import NotRunning, RaftDriver, RaftListener
from .entries import Entry, OffsetAndEpoch, SnapshotId
from .messages import LeaderIdAndEpoch, RaftRequest, RaftResponse
from .node import RaftNode
from .ready import Snapshot

P = ParamSpec("P")
T = TypeVar("T")
Ts = TypeVarTuple("Ts")
# Settles a main-loop future from the raft thread: with the exception, or with None.
_Settle = Callable[["asyncio.Future[None]", "BaseException | None"], None]

log = logging.getLogger(__name__)


class _ToLoop:
    """A RaftListener that runs the real listener's calls on another loop, in order."""

    def __init__(self, listener: RaftListener, loop: asyncio.AbstractEventLoop):
        self._listener = listener
        self._loop = loop

    def handle_snapshot(self, snapshot: Snapshot) -> None:
        self._loop.call_soon_threadsafe(self._listener.handle_snapshot, snapshot)

    def handle_commit(self, entries: Sequence[Entry], high_watermark: int) -> None:
        self._loop.call_soon_threadsafe(self._listener.handle_commit, list(entries), high_watermark)

    def handle_leader_change(self, leader: LeaderIdAndEpoch) -> None:
        self._loop.call_soon_threadsafe(self._listener.handle_leader_change, leader)


class _Fanout:
    """A RaftListener that tells several listeners, in order."""

    def __init__(self, listeners: Sequence[RaftListener]):
        self._listeners = listeners

    def handle_snapshot(self, snapshot: Snapshot) -> None:
        for listener in self._listeners:
            listener.handle_snapshot(snapshot)

    def handle_commit(self, entries: Sequence[Entry], high_watermark: int) -> None:
        for listener in self._listeners:
            listener.handle_commit(entries, high_watermark)

    def handle_leader_change(self, leader: LeaderIdAndEpoch) -> None:
        for listener in self._listeners:
            listener.handle_leader_change(leader)


class RaftThread:
    def __init__(self, driver: RaftDriver, *, name: str | None = None):
        self.driver = driver
        self.listener = driver.listener
        self._local_listeners: list[RaftListener] = []
        self._task_group: TaskGroup | None = None
        self._name = name or f"raft-{driver.node_id}"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: Callable[[], None] | None = None

    # what the main loop reads
    @property
    def node_id(self) -> int:
        return self.driver.node_id

    @property
    def leader(self) -> LeaderIdAndEpoch:
        return self.driver.leader

    @property
    def high_watermark(self) -> int:
        return self.driver.high_watermark

    @property
    def node(self) -> RaftNode | None:
        return self.driver.node

    def add_local_listener(self, listener: RaftListener) -> None:
        """Call `listener` on the raft thread itself, ahead of the main loop's (before run())."""
        self._local_listeners.append(listener)

    async def run(self, *, task_status: TaskStatus[RaftThread] = anyio.TASK_STATUS_IGNORED) -> None:
        main = asyncio.get_running_loop()
        to_main = _ToLoop(self.listener, main)
        self.driver.listener = _Fanout([*self._local_listeners, to_main]) if self._local_listeners else to_main
        started: asyncio.Future[None] = main.create_future()
        ended: asyncio.Future[None] = main.create_future()

        def settle(future: asyncio.Future[None], exc: BaseException | None) -> None:
            if not future.done():
                future.set_exception(exc) if exc is not None else future.set_result(None)

        def thread_main() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._serve(main, started, settle))
            except BaseException as exc:   # noqa: BLE001 — handed to the main loop
                main.call_soon_threadsafe(settle, started, exc)
                main.call_soon_threadsafe(settle, ended, exc)
            else:
                main.call_soon_threadsafe(settle, ended, None)
            finally:
                loop.close()

        self._thread = threading.Thread(target=thread_main, name=self._name, daemon=True)
        self._thread.start()
        try:
            await started
            task_status.started(self)
            await ended
        finally:
            with anyio.CancelScope(shield=True):
                if self._stop is not None and self._loop is not None and not self._loop.is_closed():
                    try:
                        self._loop.call_soon_threadsafe(self._stop)
                    except RuntimeError:   # the loop closed meanwhile
                        pass
                await anyio.to_thread.run_sync(self._thread.join)
            if not ended.done():
                ended.cancel()

    async def _serve(self, main: asyncio.AbstractEventLoop, started: asyncio.Future[None],
                     settle: _Settle) -> None:
        async with anyio.create_task_group() as tg:
            self._stop = tg.cancel_scope.cancel
            self._task_group = tg
            await tg.start(self.driver.run)
            main.call_soon_threadsafe(settle, started, None)

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        loop = self._loop
        if loop is None or loop.is_closed():
            raise NotRunning("the raft thread is not running")
        return loop

    async def _in_thread(self, fn: Callable[P, Coroutine[Any, Any, T]], *args: P.args,
                         **kwargs: P.kwargs) -> T:
        loop = self._running_loop()
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(fn(*args, **kwargs), loop))

    async def call(self, fn: Callable[P, Coroutine[Any, Any, T]], *args: P.args,
                   **kwargs: P.kwargs) -> T:
        """Await the coroutine function `fn` on the raft thread (after run() has started)."""
        return await self._in_thread(fn, *args, **kwargs)

    def call_soon(self, fn: Callable[[*Ts], object], *args: *Ts) -> None:
        """Run the plain function `fn` on the raft thread's loop, from any thread."""
        self._running_loop().call_soon_threadsafe(fn, *args)

    def start_soon(self, fn: Callable[[*Ts], Coroutine[Any, Any, object]], *args: *Ts) -> None:
        """Start the coroutine function `fn` as a task of the raft thread (after run() has
        started); if it raises, the thread's task group, run() and the node stop with it."""
        if self._task_group is None:
            raise NotRunning("the raft thread is not running")
        self.call_soon(self._task_group.start_soon, fn, *args)

    async def handle_request(self, data: RaftRequest) -> RaftResponse:
        return await self._in_thread(self.driver.handle_request, data)

    async def propose(self, payloads: Sequence[bytes]) -> OffsetAndEpoch:
        return await self._in_thread(self.driver.propose, payloads)

    async def resign(self) -> None:
        return await self._in_thread(self.driver.resign)

    async def resign_and_flush(self, timeout_s: float) -> None:
        if self._loop is None or self._loop.is_closed():
            return
        return await self._in_thread(self.driver.resign_and_flush, timeout_s)

    async def create_snapshot(self, end_offset: int, data: bytes) -> SnapshotId:
        return await self._in_thread(self.driver.create_snapshot, end_offset, data)

    async def log_end_offset(self) -> int:
        return await self._in_thread(self.driver.log_end_offset)


class ThreadSafeEvent:
    """An event that any thread may set and a task on any event loop may wait for: how the
    services on the raft thread tell the main loop (a broker unfenced, a shutdown granted).
    anyio's Event belongs to the loop that first waits on it, so it cannot cross threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._set = False
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        with self._lock:
            if self._set:
                return
            self._set = True
            waiters, self._waiters = self._waiters, []
        for loop, future in waiters:
            try:
                loop.call_soon_threadsafe(_resolve, future)
            except RuntimeError:   # that loop has closed: nobody is waiting any more
                pass

    async def wait(self) -> None:
        if self._set:
            return
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self._lock:
            if self._set:
                return
            self._waiters.append((loop, future))
        try:
            await future
        finally:   # cancelled (the future with it), or woken: set() already emptied the list
            with self._lock:
                try:
                    self._waiters.remove((loop, future))
                except ValueError:
                    pass


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
