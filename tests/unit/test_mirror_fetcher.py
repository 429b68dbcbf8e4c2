"""mirror/fetcher.py against a scripted source broker: what each Fetch names, and where each
answer goes."""
from __future__ import annotations

from types import SimpleNamespace

import anyio
import pytest

from core.client.errors import KafkaConnectionError
from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.protocol.records import build_batch
from mirror.fetcher import HELD_WAIT_MS, Budget, SourceFetcher, SourceFetchers, next_position

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]
R = m.FetchResponse
SESSION = 77


class ScriptedBroker:
    """A connection whose Fetch answers come from `answer(request)`; every request is kept."""

    def __init__(self, answer):
        self.answer = answer
        self.requests: list = []
        self.closed = False
        self.opened = 0

    def version_for(self, api_key):
        return 12

    async def send(self, request, *, api_key, version, timeout_ms):
        self.requests.append(request)
        result = self.answer(request)
        if isinstance(result, BaseException):
            raise result
        await anyio.sleep(0.001 if result.responses else min(request.max_wait_ms, 50) / 1000)
        return result

    async def close(self):
        self.closed = True


def client_for(broker: ScriptedBroker):
    async def dedicated_connection(host, port, node_id):
        broker.opened += 1
        broker.closed = False
        return broker
    return SimpleNamespace(cluster=SimpleNamespace(brokers={1: SimpleNamespace(host="h", port=1)}),
                           dedicated_connection=dedicated_connection, request_timeout_ms=1000,
                           backoff_ms=lambda attempt: 10, request_metadata_update=lambda: None)


def named(request) -> dict[tuple[str, int], int]:
    return {(t.topic, p.partition): p.fetch_offset for t in request.topics for p in t.partitions}


def forgotten(request) -> set[tuple[str, int]]:
    return {(t.topic, p) for t in request.forgotten_topics_data for p in t.partitions}


def data(topic: str, partition: int, records: bytes = b"", hw: int = 10, error: int = 0):
    return R.FetchableTopicResponse(topic=topic, partitions=[R.PartitionData(
        partition_index=partition, error_code=error, high_watermark=hw, last_stable_offset=hw,
        log_start_offset=0, aborted_transactions=[], records=records)])


def batches(base: int, *counts: int) -> bytes:
    """Record batches of `counts` records each, back to back from offset `base`."""
    out = b""
    for n in counts:
        out += build_batch([(None, b"v", [], 1000)] * n, base_offset=base)
        base += n
    return out


def response(*topics, error: int = 0):
    return R(throttle_time_ms=0, error_code=error, session_id=SESSION, responses=list(topics))


async def running(fetcher: SourceFetcher, body):
    async with anyio.create_task_group() as tg:
        tg.start_soon(fetcher.run)
        with anyio.fail_after(10):
            await body()
        tg.cancel_scope.cancel()


def fetcher_of(broker: ScriptedBroker) -> SourceFetcher:
    return SourceFetcher(client_for(broker), 1, max_wait_ms=500, partition_max_bytes=1 << 20, max_bytes=8 << 20)


async def test_idle_partitions_share_one_request_and_then_name_nothing(anyio_backend):
    broker = ScriptedBroker(lambda req: response())
    fetcher = fetcher_of(broker)
    slots = [fetcher.slot(("t", p)) for p in range(3)]

    async def body():
        for i, slot in enumerate(slots):
            slot.ask(100 + i)
        assert await slots[0].take(0.3) is None          # nothing new: the long poll ends empty
    await running(fetcher, body)
    first, *later = broker.requests
    assert named(first) == {("t", 0): 100, ("t", 1): 101, ("t", 2): 102}
    assert (first.session_id, first.session_epoch) == (0, 0)
    assert later, "the fetcher keeps polling"
    for n, req in enumerate(later, start=1):
        assert (req.session_id, req.session_epoch, named(req), forgotten(req)) == (SESSION, n, {}, set())
        assert req.max_wait_ms == 500
    assert broker.opened == 1
    assert all(s.last_answer_ms > 0 for s in slots)


async def test_an_answer_goes_to_its_slot_and_the_next_request_fetches_ahead_from_after_it(anyio_backend):
    def answer(req):
        if named(req).get(("t", 0)) == 5:
            return response(data("t", 0, batches(5, 2, 2), hw=9))
        return response()
    broker = ScriptedBroker(answer)
    fetcher = fetcher_of(broker)
    a, b = fetcher.slot(("t", 0)), fetcher.slot(("t", 1))

    async def body():
        a.ask(5)
        b.ask(0)
        got = await a.take(2)
        assert (got.fetch_offset, got.next_position, got.error) == (5, 9, None)
        assert got.records == batches(5, 2, 2)
        assert a.source_end == 9
        a.ask(9)                                          # as the copier does once prepared: no change
        await anyio.sleep(0.2)
        assert a.generation == 1
    await running(fetcher, body)
    positions = [named(r).get(("t", 0)) for r in broker.requests]
    assert positions[:2] == [5, 9], "the next request fetches ahead, before the copier asks"


async def test_a_copier_that_asks_elsewhere_drops_what_was_fetched_ahead(anyio_backend):
    def answer(req):
        at = named(req).get(("t", 0))
        if at == 0:
            return response(data("t", 0, batches(0, 3)))
        if at in (1, 3):
            return response(data("t", 0, batches(at, 1)))
        return response()
    broker = ScriptedBroker(answer)
    fetcher = fetcher_of(broker)
    a = fetcher.slot(("t", 0))

    async def body():
        a.ask(0)
        assert (await a.take(2)).fetch_offset == 0
        await anyio.sleep(0.1)
        assert [x.fetch_offset for x in a.answers] == [3]  # fetched ahead at 3
        a.ask(1)                                          # the copier wants 1 after all (say, a rebuilt batch)
        assert not a.answers
        got = await a.take(2)
        assert got.fetch_offset == 1
    await running(fetcher, body)
    positions = [named(r).get(("t", 0)) for r in broker.requests]
    assert positions[:2] == [0, 3] and 1 in positions[2:]


async def test_a_slot_full_of_untaken_answers_is_left_out_and_polled_for_briefly(anyio_backend):
    def answer(req):
        at = named(req).get(("t", 0))
        return response(data("t", 0, batches(at, 1))) if at is not None else response()
    broker = ScriptedBroker(answer)
    fetcher = fetcher_of(broker)
    a, b = fetcher.slot(("t", 0)), fetcher.slot(("t", 1))

    async def body():
        a.ask(0)
        b.ask(0)
        await anyio.sleep(0.3)                            # nobody takes a's answers
        assert [x.fetch_offset for x in a.answers] == [0, 1]
        assert (await a.take(1)).fetch_offset == 0
        await anyio.sleep(0.2)
    await running(fetcher, body)
    third = broker.requests[2]
    assert ("t", 0) in forgotten(third) and third.max_wait_ms == HELD_WAIT_MS
    assert any(named(r).get(("t", 0)) == 2 for r in broker.requests[3:])


@pytest.mark.parametrize("records, lso, expected", [
    (batches(5, 2, 2), -1, 9),          # past the last batch
    (batches(5, 2, 2), 7, 7),           # the batch holding the last stable offset is not taken
    (batches(5, 2, 2), 5, None),        # nothing below it
    (batches(5, 2, 2)[:-3], -1, 7),     # a cut last batch is read again next time
    (batches(0, 3)[:20], -1, None),     # only a cut batch
    (batches(2, 3), -1, 5),
])
def test_where_the_copier_will_ask_next(records, lso, expected, anyio_backend):
    assert next_position(records, 5 if expected != 5 else 2, lso) == expected


async def test_an_answer_for_a_position_asked_again_meanwhile_is_dropped(anyio_backend):
    requests = []

    def answer(req):
        requests.append(named(req))
        return response(data("t", 0, b"old")) if named(req).get(("t", 0)) == 0 else response()
    broker = ScriptedBroker(answer)
    fetcher = fetcher_of(broker)
    a = fetcher.slot(("t", 0))

    async def body():
        a.ask(0)
        a.ask(50)                                         # before the fetcher ran: 0 is never asked
        got = await a.take(0.3)
        assert got is None
    await running(fetcher, body)
    assert requests[0] == {("t", 0): 50}


async def test_a_partition_error_goes_to_its_slot_alone_and_a_lost_connection_to_every_slot(anyio_backend):
    calls = {"n": 0}

    def answer(req):
        calls["n"] += 1
        if calls["n"] == 1:
            return response(data("t", 0, error=ErrorCode.NOT_LEADER_OR_FOLLOWER))
        if calls["n"] == 2:
            return KafkaConnectionError("connection reset")
        return response()
    broker = ScriptedBroker(answer)
    fetcher = fetcher_of(broker)
    a, b = fetcher.slot(("t", 0)), fetcher.slot(("t", 1))

    async def body():
        a.ask(0)
        b.ask(0)
        got = await a.take(2)
        assert got.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        got = await b.take(2)
        assert isinstance(got.error, KafkaConnectionError)
        b.ask(0)                                          # the copier's retry asks again
        await anyio.sleep(0.1)
    await running(fetcher, body)
    assert broker.opened == 2                             # a new connection after the lost one
    assert broker.requests[2].session_epoch == 0          # and a full request: the session starts over


async def test_a_released_partition_is_forgotten(anyio_backend):
    broker = ScriptedBroker(lambda req: response())
    fetcher = fetcher_of(broker)
    a, b = fetcher.slot(("t", 0)), fetcher.slot(("t", 1))

    async def body():
        a.ask(0)
        b.ask(0)
        await anyio.sleep(0.08)
        fetcher.release(("t", 1))
        await anyio.sleep(0.15)
    await running(fetcher, body)
    assert any(("t", 1) in forgotten(r) for r in broker.requests[1:])
    assert all(("t", 1) not in named(r) for r in broker.requests[1:])


async def test_a_stopping_copier_is_not_kept_waiting(anyio_backend):
    broker = ScriptedBroker(lambda req: response())
    fetcher = fetcher_of(broker)
    a = fetcher.slot(("t", 0))

    async def body():
        a.ask(0)
        a.interrupt()                                     # before the copier got to take()
        started = anyio.current_time()
        assert await a.take(5) is None
        assert anyio.current_time() - started < 0.5
    await running(fetcher, body)


async def test_a_topics_partitions_spread_over_the_lanes_each_with_a_connection_of_its_own(anyio_backend):
    brokers: list[ScriptedBroker] = []

    async def dedicated_connection(host, port, node_id):
        brokers.append(ScriptedBroker(lambda req: response()))
        return brokers[-1]
    client = SimpleNamespace(cluster=SimpleNamespace(brokers={1: SimpleNamespace(host="h", port=1)}),
                             dedicated_connection=dedicated_connection, request_timeout_ms=1000,
                             backoff_ms=lambda attempt: 10, request_metadata_update=lambda: None)
    fetchers = SourceFetchers(client, max_wait_ms=50, partition_max_bytes=1 << 20, max_bytes=8 << 20,
                              per_broker=3)
    async with anyio.create_task_group() as tg:
        await tg.start(fetchers.run)
        lanes = [fetchers.for_partition(1, ("t", p)) for p in range(6)]
        for p, lane in enumerate(lanes):
            lane.slot(("t", p)).ask(0)
        await anyio.sleep(0.2)
        tg.cancel_scope.cancel()
    assert len({id(f) for f in lanes[:3]}) == 3               # consecutive partitions: three lanes
    assert lanes[3:] == lanes[:3]                             # and a partition keeps its lane
    assert len(brokers) == 3 and len(fetchers.by_lane) == 3
    for broker in brokers:                                     # a lane's session holds its own partitions
        first = named(broker.requests[0])
        assert len(first) == 2 and all(fetchers.lane_of(key) == fetchers.lane_of(next(iter(first)))
                                       for key in first)


async def test_the_lanes_of_a_link_share_one_budget(anyio_backend):
    """Lane a's untaken answer spends the link's budget: lane b fetches nothing until a's
    copier takes it."""
    budget = Budget(limit=50)
    broker_a = ScriptedBroker(lambda req: response(data("t", 0, batches(named(req)[("t", 0)], 3)))
                              if ("t", 0) in named(req) else response())
    broker_b = ScriptedBroker(lambda req: response(data("t", 1, batches(named(req)[("t", 1)], 1)))
                              if ("t", 1) in named(req) else response())
    lane_a = SourceFetcher(client_for(broker_a), 1, max_wait_ms=500, partition_max_bytes=1 << 20,
                           max_bytes=50, budget=budget)
    lane_b = SourceFetcher(client_for(broker_b), 1, max_wait_ms=500, partition_max_bytes=1 << 20,
                           max_bytes=50, budget=budget, lane=1)
    a, b = lane_a.slot(("t", 0)), lane_b.slot(("t", 1))

    async def body():
        a.ask(0)
        while not a.answers:
            await anyio.sleep(0.01)
        assert budget.spent and budget.used == len(a.answers[0].records) > 50
        b.ask(0)
        await anyio.sleep(0.2)
        assert broker_b.requests == [] and not b.answers
        taken = await a.take(1)
        assert taken.fetch_offset == 0
        assert (await b.take(1)).fetch_offset == 0            # woken by a's take, in the other lane
    async with anyio.create_task_group() as tg:
        tg.start_soon(lane_a.run)
        tg.start_soon(lane_b.run)
        with anyio.fail_after(10):
            await body()
        tg.cancel_scope.cancel()
    lane_a.release(("t", 0))
    lane_b.release(("t", 1))
    assert budget.used == 0                                   # every byte put was given back
