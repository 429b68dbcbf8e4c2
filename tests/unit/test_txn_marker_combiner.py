"""The coordinator's requests to another broker are combined (core/broker/transactions/markers.py
`_Combiner`): one in flight per broker, and what is asked meanwhile goes in the next request,
all together; each ask gets its own answer, or the failure answer when its request failed or
its sender was cancelled."""
from __future__ import annotations

from collections import defaultdict

import anyio
import pytest

from core.broker.transactions.markers import _Combiner


class FakeBroker:
    """Request k (counted over all brokers) waits until the test opens gate k, then answers
    each of its asks with (item, k), or raises for a request in `fail_on`."""

    def __init__(self, fail_on: frozenset[int] = frozenset()):
        self.requests: list[tuple[int, list]] = []
        self.gates: defaultdict[int, anyio.Event] = defaultdict(anyio.Event)
        self.fail_on = fail_on

    async def send(self, node_id, batch):
        k = len(self.requests)
        self.requests.append((node_id, [a.item for a in batch]))
        await self.gates[k].wait()
        if k in self.fail_on:
            raise OSError("connection lost")
        for a in batch:
            a.answer = (a.item, k)


def failed(item):
    return ("failed", item)


def run(test) -> None:
    """An ask left waiting for good fails the test instead of hanging it."""
    async def bounded():
        with anyio.fail_after(5):
            await test()
    anyio.run(bounded)


def test_asks_made_while_a_request_is_in_flight_go_together_in_the_next():
    async def test():
        broker = FakeBroker()
        combiner = _Combiner(broker.send, failed)
        answers = {}

        async def ask(node, item):
            answers[item] = await combiner.ask(node, item)
        async with anyio.create_task_group() as tg:
            tg.start_soon(ask, 1, "a")
            await anyio.sleep(0.01)             # "a" is in flight
            for item in "bcd":
                tg.start_soon(ask, 1, item)
            tg.start_soon(ask, 2, "x")          # another broker: its own request, at once
            await anyio.sleep(0.01)
            assert broker.requests == [(1, ["a"]), (2, ["x"])]
            for k in range(3):
                broker.gates[k].set()
        assert broker.requests == [(1, ["a"]), (2, ["x"]), (1, ["b", "c", "d"])]
        assert answers == {"a": ("a", 0), "x": ("x", 1), "b": ("b", 2), "c": ("c", 2), "d": ("d", 2)}
    run(test)


def test_a_failed_request_answers_each_of_its_asks_as_failed_and_the_next_goes_on():
    async def test():
        broker = FakeBroker(fail_on=frozenset({1}))
        combiner = _Combiner(broker.send, failed)
        answers = {}

        async def ask(item):
            try:
                answers[item] = await combiner.ask(1, item)
            except OSError:
                answers[item] = "raised"
        async with anyio.create_task_group() as tg:
            tg.start_soon(ask, "x")
            await anyio.sleep(0.01)
            tg.start_soon(ask, "a")             # sends "a" and "b" in request 1, which fails
            await anyio.sleep(0.01)
            tg.start_soon(ask, "b")
            await anyio.sleep(0.01)
            for k in range(2):
                broker.gates[k].set()
        # The sender sees the error; the other ask of its request is answered as failed.
        assert answers == {"x": ("x", 0), "a": "raised", "b": ("failed", "b")}
        broker.gates[2].set()
        assert await combiner.ask(1, "c") == ("c", 2)
    run(test)


def test_a_sender_cancelled_in_flight_leaves_no_ask_waiting():
    """The sender of "a" and "b" is cancelled while their request is in flight (its
    coordinator stopped, say): "b" is answered as failed (its caller retries) rather than
    left waiting for good, and the next ask goes on."""
    async def test():
        broker = FakeBroker()
        combiner = _Combiner(broker.send, failed)
        answers = {}

        async def ask(item):
            answers[item] = await combiner.ask(1, item)
        async with anyio.create_task_group() as tg:
            tg.start_soon(ask, "x")
            await anyio.sleep(0.01)             # "x" in flight: "a" and "b" queue behind it
            with anyio.CancelScope() as sender:
                async with anyio.create_task_group() as inner:
                    inner.start_soon(ask, "a")
                    await anyio.sleep(0.01)
                    tg.start_soon(ask, "b")
                    await anyio.sleep(0.01)
                    broker.gates[0].set()       # "x" answered: "a" sends "a" and "b" together
                    await anyio.sleep(0.01)
                    assert broker.requests == [(1, ["x"]), (1, ["a", "b"])]
                    sender.cancel()
        assert answers == {"x": ("x", 0), "b": ("failed", "b")}
        broker.gates[2].set()
        assert await combiner.ask(1, "c") == ("c", 2)
    run(test)


@pytest.mark.parametrize("asks", [1, 2, 7])
def test_every_ask_is_answered_once_whatever_the_interleaving(asks):
    async def test():
        broker = FakeBroker()
        for k in range(asks):
            broker.gates[k].set()
        combiner = _Combiner(broker.send, failed)
        answers = {}

        async def ask(item):
            answers[item] = await combiner.ask(1, item)
        async with anyio.create_task_group() as tg:
            for item in range(asks):
                tg.start_soon(ask, item)
        assert sorted(answers) == list(range(asks))
        sent = [item for _, items in broker.requests for item in items]
        assert sorted(sent) == list(range(asks))
        assert all(answers[item][0] == item for item in answers)
    run(test)


def test_a_combined_request_is_handled_side_by_side_and_answered_in_its_order():
    """The leader's side (core/broker/handlers/txn_common.py): a transaction that waits (for
    its ISR, for its coordinator) does not hold up the others of the request, and the answer
    lists them in the request's order."""
    from core.broker.handlers.txn_common import side_by_side

    async def test():
        finished = []

        async def handle(item):
            await anyio.sleep(item)
            finished.append(item)
            return item * 10
        assert await side_by_side([0.3, 0.0, 0.1], handle) == [3.0, 0.0, 1.0]
        assert finished == [0.0, 0.1, 0.3]
        assert await side_by_side([0.0], handle) == [0.0]
    run(test)
