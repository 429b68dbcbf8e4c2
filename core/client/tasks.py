"""The background tasks of one client object (KafkaClient, Producer, Consumer), in one anyio
task group.

Theory of operation
-------------------
A `BackgroundTasks` owns one task group and every task started through it: none outlives the
object that owns it, and an exception one of them raises is never lost. It does not cancel the
other tasks or the caller (a task group would); it is logged with its traceback and handed to
the owner's `on_error`, which surfaces it on the owner's next call (the Producer fails its
records and every later send(), the Consumer raises it from the next poll()).

The group runs in one of two places:

- `open()` ... `close()` enter and exit it in the calling task, through an AsyncExitStack:
  what `async with owner:` (or `await owner.start()` ... `await owner.close()`) does for a
  KafkaClient or a Producer. anyio's rule for task groups applies: close() must run in the
  task that called open(), after that task has left every cancel scope it entered since
  (`with anyio.move_on_after(...)`, another task group); close() says so if it is not.
- `serve()` runs it inside a task of another object's group until `close()`, from any task:
  a Consumer's group runs in its KafkaClient's, so that poll() may first be called anywhere
  (inside a timeout, from a task of the caller's) and close() from anywhere else.

`close()` cancels what is still running and returns once all of it has finished.
A `Job` is a task the owner waits for or cancels on its own (a consumer group's rebalance).
"""
from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from typing import Any, Awaitable, Callable, Coroutine

import anyio
from anyio.abc import TaskGroup, TaskStatus

log = logging.getLogger(__name__)

__all__ = ["BackgroundTasks", "Job"]


class Job:
    """A handle on one background task: `done`, `await wait()`, `cancel()`."""

    __slots__ = ("name", "_scope", "_finished")

    def __init__(self, name: str):
        self.name = name
        self._scope = anyio.CancelScope()
        self._finished = anyio.Event()

    @property
    def done(self) -> bool:
        return self._finished.is_set()

    async def wait(self) -> None:
        await self._finished.wait()

    def cancel(self) -> None:
        self._scope.cancel()

    def __repr__(self) -> str:
        return f"Job({self.name!r}{', done' if self.done else ''})"


class BackgroundTasks:
    def __init__(self, owner: str, on_error: Callable[[BaseException], None] | None = None):
        self.owner = owner
        self._on_error = on_error
        self._tg: TaskGroup | None = None
        self._stack: AsyncExitStack | None = None    # open(): the group lives in the caller's task
        self._host: int | None = None
        self._stop: anyio.Event | None = None         # serve(): the group lives in a task of its own
        self._served: anyio.Event | None = None

    def __repr__(self) -> str:
        return f"BackgroundTasks({self.owner!r}{', running' if self.running else ''})"

    @property
    def running(self) -> bool:
        return self._tg is not None

    # ------------------------------------------------------------------ lifetime

    async def open(self) -> None:
        """Enter the task group in the calling task (see the module's notes)."""
        if self._tg is not None or self._served is not None:
            raise RuntimeError(f"{self.owner}: background tasks already started")
        stack = AsyncExitStack()
        self._tg = await stack.enter_async_context(anyio.create_task_group())
        self._stack = stack
        self._host = anyio.get_current_task().id

    async def serve(self, *, task_status: TaskStatus = anyio.TASK_STATUS_IGNORED) -> None:
        """Run the task group in this task until close() (or until this task is cancelled)."""
        if self._tg is not None or self._served is not None:
            raise RuntimeError(f"{self.owner}: background tasks already started")
        self._stop, self._served = anyio.Event(), anyio.Event()
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                task_status.started()
                await self._stop.wait()
                tg.cancel_scope.cancel()
        finally:
            self._tg = None
            self._served.set()

    async def close(self) -> None:
        """Cancel the tasks still running and wait until every one has finished."""
        if self._stack is not None:
            if anyio.get_current_task().id != self._host:
                raise RuntimeError(
                    f"{self.owner} must be closed in the task that started it (anyio runs its "
                    f"background tasks in a task group entered there); use `async with`")
            stack, self._stack, tg = self._stack, None, self._tg
            if tg is not None:
                tg.cancel_scope.cancel()
            try:
                await stack.aclose()
            finally:
                self._tg = None
        elif self._served is not None and self._stop is not None:
            self._stop.set()
            await self._served.wait()

    # ------------------------------------------------------------------ tasks

    def _group(self) -> TaskGroup:
        if self._tg is None:
            raise RuntimeError(f"{self.owner}: its background tasks are not running")
        return self._tg

    def start_soon(self, func: Callable[..., Awaitable[Any]], *args: Any, name: str | None = None) -> None:
        """Run `func(*args)` in the group; what it raises goes to on_error."""
        self._group().start_soon(self._guarded, func, args, None,
                                 name=name or getattr(func, "__qualname__", None))

    def start_job(self, func: Callable[..., Awaitable[Any]], *args: Any, name: str | None = None) -> Job:
        """As start_soon, with a handle to wait for the task or cancel it alone."""
        job = Job(name or str(getattr(func, "__qualname__", None) or repr(func)))
        self._group().start_soon(self._guarded, func, args, job, name=job.name)
        return job

    async def start(self, func: Callable[..., Coroutine[Any, Any, Any]], *args: Any, name: str | None = None) -> Any:
        """Run `func(*args, task_status=...)` in the group and return once it called
        task_status.started() (with what it passed). It must not raise after that."""
        return await self._group().start(func, *args, name=name)

    async def _guarded(self, func, args, job: Job | None) -> None:
        try:
            if job is None:
                await func(*args)
            else:
                with job._scope:
                    await func(*args)
        except Exception as exc:
            name = job.name if job is not None else getattr(func, "__qualname__", repr(func))
            log.error("%s: background task %s failed", self.owner, name, exc_info=exc)
            if self._on_error is not None:
                try:
                    self._on_error(exc)
                except Exception:   # noqa: BLE001 — reporting must not take the group down
                    log.exception("%s: on_error failed", self.owner)
        finally:
            if job is not None:
                job._finished.set()
