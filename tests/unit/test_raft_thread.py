"""RaftThread's contract (core/raft/thread.py): which thread runs what, in which order, and
how events cross from the raft thread to the main loop."""
from __future__ import annotations

import threading

import anyio
import pytest
from anyio.lowlevel import checkpoint

from core.raft.driver import RaftDriver
from core.raft.thread import RaftThread, ThreadSafeEvent


class Recorder:
    """A RaftListener that notes the thread and the order of each commit it hears of."""

    def __init__(self, name: str, journal: list):
        self.name = name
        self.journal = journal
        self.threads: set[int] = set()
        self.committed: list[int] = []

    def handle_snapshot(self, snapshot) -> None:
        self.threads.add(threading.get_ident())

    def handle_commit(self, entries, high_watermark: int) -> None:
        self.threads.add(threading.get_ident())
        self.committed.extend(e.offset for e in entries)
        self.journal.extend((self.name, e.offset) for e in entries)

    def handle_leader_change(self, leader) -> None:
        self.threads.add(threading.get_ident())


def single_voter(tmp_path, listener) -> RaftThread:
    return RaftThread(RaftDriver(1, {1: ("127.0.0.1", 1)}, tmp_path, cluster_id="c" * 22, listener=listener))


async def until(predicate, timeout: float = 10.0) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.01)


def test_local_listeners_hear_each_commit_on_the_raft_thread_before_the_main_loop(tmp_path):
    journal: list = []
    main_listener, local = Recorder("main", journal), Recorder("local", journal)
    raft = single_voter(tmp_path, main_listener)
    raft.add_local_listener(local)

    async def main():
        async with anyio.create_task_group() as tg:
            await tg.start(raft.run)
            await until(lambda: raft.leader.leader_id == 1)
            end = await raft.propose([b"a", b"b"])
            await until(lambda: end.offset - 1 in main_listener.committed)
            ran_on = await raft.call(_thread_id)
            tg.cancel_scope.cancel()
        return ran_on

    ran_on = anyio.run(main)
    here = threading.get_ident()
    assert main_listener.threads == {here}
    assert local.threads == {ran_on} and ran_on != here
    assert local.committed == main_listener.committed
    # Each entry reached the local listener first.
    for offset in main_listener.committed:
        assert journal.index(("local", offset)) < journal.index(("main", offset))


async def _thread_id() -> int:
    await checkpoint()
    return threading.get_ident()


def test_a_service_that_fails_on_the_raft_thread_ends_run(tmp_path):
    raft = single_voter(tmp_path, Recorder("main", []))

    async def broken_service():
        await anyio.sleep(0.05)
        raise RuntimeError("the controller broke")

    async def main():
        async with anyio.create_task_group() as tg:
            await tg.start(raft.run)
            raft.start_soon(broken_service)
            await anyio.sleep_forever()

    with pytest.raises(ExceptionGroup) as caught:
        anyio.run(main)
    assert caught.group_contains(RuntimeError, match="the controller broke", depth=None)


def test_a_thread_safe_event_set_on_another_thread_wakes_a_waiter():
    event = ThreadSafeEvent()

    async def main():
        threading.Timer(0.1, event.set).start()
        with anyio.fail_after(5):
            await event.wait()
        assert event.is_set()
        with anyio.fail_after(1):
            await event.wait()        # once set, it stays set
    anyio.run(main)


def test_a_cancelled_wait_leaves_no_waiter_behind():
    event = ThreadSafeEvent()

    async def main():
        with anyio.move_on_after(0.05):
            await event.wait()
        assert event._waiters == []
        event.set()        # nothing left to wake; must not raise
    anyio.run(main)
    assert event.is_set()
