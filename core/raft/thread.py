"""RaftThread: a RaftDriver on an event loop of its own, in its own thread.

Why. A node's data plane (produce, fetch, replication, groups) shares the process's event loop.
A loop turn that takes long (a large fetch answered, thousands of partitions applied from a new
metadata image, a slow disk call made without a thread) delays every timer on that loop. The
quorum's timers are the ones that must not slip: a follower that does not hear from its leader
within controller.quorum.fetch.timeout.ms starts an election, and a leader that cannot answer
its voters within the election timeout loses them. So the Raft driver gets a loop of its own:
its heartbeats, fetches, votes and fsyncs run whatever the data plane is doing. CPython's GIL
hands the interpreter to a waiting thread at least every sys.getswitchinterval() (5 ms), so a
busy data plane costs the quorum milliseconds, never seconds.

Contract. The wrapper offers the driver's interface to the node's main loop and keeps every
call on the right side:

    main loop                         raft thread
    run()                  ------->   RaftDriver.run() (open, the Ready loop)
    handle_request/propose/
    resign_and_flush/create_snapshot/
    log_end_offset         ------->   the same coroutine, awaited there, result sent back
    listener callbacks     <-------   handle_snapshot/handle_commit/handle_leader_change,
                                      queued to the main loop in the order the driver made them
    leader, high_watermark            plain attribute reads (one reference, written by the thread)

The listener (the MetadataLoader, the controller) therefore keeps living on the main loop and
sees the same calls in the same order as with an in-loop driver; it only sees them a loop turn
later. Cancelling run() stops the thread's loop (the driver's own shutdown runs there) and
joins it. An exception that ends the driver ends run() with it, so the node stops, as before.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any, Callable, Sequence

import anyio

from .driver import RaftDriver
from .entries import Entry
from .messages import LeaderIdAndEpoch
from .ready import Snapshot

log = logging.getLogger(__name__)


class _ToLoop:
    """A RaftListener that runs the real listener's calls on another loop, in order."""

    def __init__(self, listener, loop: asyncio.AbstractEventLoop):
        self._listener = listener
        self._loop = loop

    def handle_snapshot(self, snapshot: Snapshot) -> None:
        self._loop.call_soon_threadsafe(self._listener.handle_snapshot, snapshot)

    def handle_commit(self, entries: Sequence[Entry], high_watermark: int) -> None:
        self._loop.call_soon_threadsafe(self._listener.handle_commit, list(entries), high_watermark)

    def handle_leader_change(self, leader: LeaderIdAndEpoch) -> None:
        self._loop.call_soon_threadsafe(self._listener.handle_leader_change, leader)


class RaftThread:
    def __init__(self, driver: RaftDriver, *, name: str | None = None):
        self.driver = driver
        self.listener = driver.listener
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
    def node(self):
        return self.driver.node

    async def run(self, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:
        main = asyncio.get_running_loop()
        self.driver.listener = _ToLoop(self.listener, main)
        started: asyncio.Future = main.create_future()
        ended: asyncio.Future = main.create_future()

        def settle(future: asyncio.Future, exc: BaseException | None) -> None:
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

    async def _serve(self, main: asyncio.AbstractEventLoop, started: asyncio.Future, settle) -> None:
        async with anyio.create_task_group() as tg:
            self._stop = tg.cancel_scope.cancel
            await tg.start(self.driver.run)
            main.call_soon_threadsafe(settle, started, None)

    async def _in_thread(self, fn, *args) -> Any:
        loop = self._loop
        if loop is None or loop.is_closed():
            from .driver import NotRunning
            raise NotRunning("the raft thread is not running")
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(fn(*args), loop))

    async def handle_request(self, data):
        return await self._in_thread(self.driver.handle_request, data)

    async def propose(self, payloads: Sequence[bytes]):
        return await self._in_thread(self.driver.propose, payloads)

    async def resign(self) -> None:
        return await self._in_thread(self.driver.resign)

    async def resign_and_flush(self, timeout_s: float) -> None:
        if self._loop is None or self._loop.is_closed():
            return
        return await self._in_thread(self.driver.resign_and_flush, timeout_s)

    async def create_snapshot(self, end_offset: int, data: bytes):
        return await self._in_thread(self.driver.create_snapshot, end_offset, data)

    async def log_end_offset(self) -> int:
        return await self._in_thread(self.driver.log_end_offset)
