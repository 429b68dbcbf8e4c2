"""HeapFreezer (core/broker/heap_freezer.py): one freeze per burst of metadata changes, after
the burst, and a whole-heap collection when the burst removed something."""
from __future__ import annotations

import gc
import weakref

import anyio

from core.broker.heap_freezer import HeapFreezer


def test_a_burst_of_changes_freezes_once_after_it_ends():
    freezer = HeapFreezer(quiet_s=0.2)
    froze_at = []
    freezer.freeze = lambda: froze_at.append(anyio.current_time())

    async def main():
        async with anyio.create_task_group() as tg:
            tg.start_soon(freezer.run)
            start = anyio.current_time()
            for _ in range(5):                    # a burst: 0.5 s of changes
                freezer.note_change(removed=False)
                await anyio.sleep(0.1)
            await anyio.sleep(0.5)
            assert len(froze_at) == 1
            assert froze_at[0] - start >= 0.6     # after the last change plus the quiet time
            await anyio.sleep(0.5)
            assert len(froze_at) == 1             # nothing new: no more freezing
            tg.cancel_scope.cancel()
    anyio.run(main)


def test_freezing_after_removals_collects_what_was_frozen_before():
    class Cycle:
        pass
    try:
        freezer = HeapFreezer()
        a = Cycle()
        a.me = a                                  # garbage only the cycle collector can free
        alive = weakref.ref(a)
        freezer.note_change(removed=False)
        freezer.freeze()
        assert gc.get_freeze_count() > 0
        del a
        freezer.note_change(removed=False)
        freezer.freeze()                          # frozen garbage stays while nothing is removed
        assert alive() is not None
        freezer.note_change(removed=True)
        freezer.freeze()
        assert alive() is None
    finally:
        gc.unfreeze()


def test_an_hour_after_the_last_whole_walk_the_next_freeze_walks_everything(monkeypatch):
    import core.broker.heap_freezer as module

    class Cycle:
        pass
    try:
        freezer = HeapFreezer()
        a = Cycle()
        a.me = a
        alive = weakref.ref(a)
        freezer.freeze()
        del a
        monkeypatch.setattr(module, "WHOLE_HEAP_EVERY_S", 0.0)
        freezer.freeze()                          # no removal, but the hour is up
        assert alive() is None
    finally:
        gc.unfreeze()
