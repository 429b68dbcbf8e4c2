"""AllocateProducerIds (67): producer id blocks from the active controller (KIP-730), checked
against Kafka's ProducerIdControlManager and ClusterControlManager.checkBrokerEpoch."""
from __future__ import annotations

import pytest

from core.controller import MetadataImage, QuorumController
from core.controller import producer_ids
from core.controller.common import Working
from core.protocol import messages as m
from core.protocol.errors import ErrorCode as E, KafkaError

from tests.support import controller_harness as harness
from tests.support.controller_harness import CLUSTER, Clock, Harness, new_topic

BLOCK = producer_ids.PRODUCER_ID_BLOCK_SIZE
LONG_MAX = 2**63 - 1
BASE = producer_ids.producer_id_base(CLUSTER)
producer_id_base = producer_ids.producer_id_base
API = m.API[67]


def request(broker_id: int, epoch: int):
    return m.AllocateProducerIdsRequest(broker_id=broker_id, broker_epoch=epoch)


def allocate(h: Harness, broker_id: int, *, epoch: int | None = None, commit: bool = True):
    epoch = h.epochs[broker_id] if epoch is None else epoch
    return h.call("allocate_producer_ids", request(broker_id, epoch), 0, commit=commit)


def granted(result) -> range:
    r = result.response
    assert r.error_code == 0, r
    return range(r.producer_id_start, r.producer_id_start + r.producer_id_len)


def refused(result, code: E) -> None:
    r = result.response
    assert result.records == []
    assert (r.error_code, r.producer_id_start, r.producer_id_len) == (code, 0, 0)


def set_next(h: Harness, next_id: int) -> None:
    h.inject(m.ProducerIdsRecord(broker_id=1, broker_epoch=h.epochs.get(1, 0),
                                 next_producer_id=next_id))


# --------------------------------------------------------------------------- blocks


def test_the_first_block_starts_at_the_clusters_base_and_writes_one_record():
    h = Harness()
    h.register(1)        # still fenced: Kafka hands fenced brokers blocks too
    result = allocate(h, 1)
    assert granted(result) == range(BASE, BASE + BLOCK)
    assert result.records == [m.ProducerIdsRecord(broker_id=1, broker_epoch=h.epochs[1],
                                                  next_producer_id=BASE + BLOCK)]
    assert h.log[-1].message == result.records[0]
    assert h.ctl.committed_image.next_producer_id == BASE + BLOCK


@pytest.mark.parametrize("cluster", ["q1w2e3r4t5y6u7i8o9p0aa", "MkU3OEVBNTcwNTJENDM2Qk", "eu-west-1", "us-east-1"])
def test_each_cluster_has_a_range_of_its_own_that_a_lifetime_of_blocks_stays_inside(cluster):
    base = producer_id_base(cluster)
    assert base % 2**32 == 0 and 0 < base + 2**32 <= LONG_MAX
    others = {producer_id_base(c) for c in ["q1w2e3r4t5y6u7i8o9p0aa", "MkU3OEVBNTcwNTJENDM2Qk", "eu-west-1",
                                            "us-east-1"] if c != cluster}
    assert base not in others       # a DR pair's two clusters allocate from different ranges


@pytest.mark.parametrize("brokers, commit_each", [
    ([1], True),
    ([1, 2, 3], True),
    ([1, 2, 1, 3, 3, 2, 1], True),
    ([1, 2, 1, 3, 3, 2, 1], False),     # every request sees the uncommitted blocks before it
    ([2] * 10, False),
])
def test_sequential_blocks_never_overlap_and_replay_into_the_image(brokers, commit_each):
    h = Harness()
    h.add_brokers({1: None, 2: None, 3: None})
    start = h.image.next_producer_id or BASE
    blocks = [granted(allocate(h, b, commit=commit_each)) for b in brokers]
    h.commit()
    assert [b.start for b in blocks] == [start + i * BLOCK for i in range(len(brokers))]
    assert all(len(b) == BLOCK for b in blocks)
    ids = [i for b in blocks for i in b]
    assert len(ids) == len(set(ids))
    records = [r.message for r in h.log if isinstance(r.message, m.ProducerIdsRecord)]
    assert [(r.broker_id, r.next_producer_id) for r in records] == \
        [(b, blk.stop) for b, blk in zip(brokers, blocks)]
    replayed = MetadataImage.empty().apply_all(h.log)
    assert replayed.next_producer_id == h.ctl.committed_image.next_producer_id == blocks[-1].stop


def test_blocks_continue_from_a_snapshot_and_from_records_with_gaps():
    h = Harness()
    h.register(1)
    set_next(h, 42)      # Kafka: gaps in the id range are fine
    assert granted(allocate(h, 1)).start == 42
    image = h.ctl.committed_image
    ctl = QuorumController(7, CLUSTER, clock=Clock())
    ctl.load_snapshot(image, h.end_offset - 1)
    ctl.activate(h.end_offset)
    result = ctl.allocate_producer_ids(request(1, h.epochs[1]), 0)
    assert result.response.producer_id_start == 42 + BLOCK
    assert result.records[0].next_producer_id == 42 + 2 * BLOCK


def test_handle_dispatches_67():
    h = Harness()
    h.register(1)
    result = h.ctl.handle(67, request(1, h.epochs[1]), 0)
    assert result.response.producer_id_start == BASE and len(result.records) == 1


# --------------------------------------------------------------------------- errors


def _unregister(h: Harness) -> int:
    epoch = h.epochs[1]
    h.call("unregister_broker", m.UnregisterBrokerRequest(broker_id=1), 0)
    return epoch


def _controlled_shutdown(h: Harness) -> None:
    h.create(new_topic("t", assignments={0: [1]}))
    assert h.heartbeat(1, shut_down=True).response.should_shut_down is False
    assert h.image.brokers[1].in_controlled_shutdown


def _new_incarnation(h: Harness) -> int:
    old = h.epochs[1]
    h.heartbeat(1, fence=True)
    h.register(1, generation=1)
    assert h.epochs[1] != old
    return old


@pytest.mark.parametrize("setup, broker_id, epoch, code", [
    # checkBrokerEpoch: no registration, or a registration with another epoch
    (lambda h: 0, 9, lambda h, e: 0, E.STALE_BROKER_EPOCH),
    (lambda h: 0, 1, lambda h, e: h.epochs[1] + 1, E.STALE_BROKER_EPOCH),
    (lambda h: 0, 1, lambda h, e: h.epochs[1] - 1, E.STALE_BROKER_EPOCH),
    (lambda h: 0, 1, lambda h, e: -1, E.STALE_BROKER_EPOCH),
    (_unregister, 1, lambda h, old: old, E.STALE_BROKER_EPOCH),
    (_new_incarnation, 1, lambda h, old: old, E.STALE_BROKER_EPOCH),
    # fencing is not checked: a fenced broker and one in controlled shutdown get blocks
    (lambda h: h.heartbeat(1, fence=True), 1, lambda h, e: h.epochs[1], E.NONE),
    (_controlled_shutdown, 1, lambda h, e: h.epochs[1], E.NONE),
    (_new_incarnation, 1, lambda h, old: h.epochs[1], E.NONE),
], ids=["unknown-broker", "epoch-ahead", "epoch-behind", "no-epoch", "unregistered",
        "old-incarnation", "fenced", "shutting-down", "new-incarnation"])
def test_broker_epoch_checks(setup, broker_id, epoch, code):
    h = Harness()
    h.add_brokers({1: None, 2: None})
    assert granted(allocate(h, 2)).start == BASE
    state = setup(h)
    before = h.image
    result = allocate(h, broker_id, epoch=epoch(h, state))
    if code == E.NONE:
        assert granted(result).start == BASE + BLOCK
        assert h.image.next_producer_id == BASE + 2 * BLOCK
    else:
        refused(result, code)
        assert h.image == before


@pytest.mark.parametrize("next_id, ok", [
    (LONG_MAX - BLOCK - 1, True),
    (LONG_MAX - BLOCK, True),           # the last block ends exactly at Long.MAX_VALUE
    (LONG_MAX - BLOCK + 1, False),
    (LONG_MAX - 1, False),
    (LONG_MAX, False),
])
def test_the_last_block_may_end_at_long_max_and_no_later(next_id, ok):
    h = Harness()
    h.register(1)
    set_next(h, next_id)
    result = allocate(h, 1)
    if ok:
        assert granted(result) == range(next_id, next_id + BLOCK)
        assert h.ctl.committed_image.next_producer_id == next_id + BLOCK <= LONG_MAX
    else:
        refused(result, E.UNKNOWN_SERVER_ERROR)
        assert h.image.next_producer_id == next_id


def test_exhaustion_says_why():
    image = MetadataImage.empty().apply_all([
        m.RegisterBrokerRecord(broker_id=1, incarnation_id=harness.incarnation(1), broker_epoch=5,
                               end_points=[], features=[], rack=None, fenced=True),
        m.ProducerIdsRecord(broker_id=1, broker_epoch=5, next_producer_id=LONG_MAX - 1)])
    w = Working(image)
    with pytest.raises(KafkaError) as info:
        producer_ids.allocate_producer_ids(w, request(1, 5))
    assert info.value.code == E.UNKNOWN_SERVER_ERROR
    assert "Exhausted all producerIds" in info.value.message
    assert w.records == []


# --------------------------------------------------------------------------- leadership


def test_a_standby_answers_not_controller():
    ctl = QuorumController(1, CLUSTER, clock=Clock())
    result = ctl.allocate_producer_ids(request(1, 1), 0)
    refused(result, E.NOT_CONTROLLER)
    API.response.encode(0, result.response)


@pytest.mark.parametrize("kept", [False, True], ids=["truncated", "committed-by-new-leader"])
def test_deactivation_drops_an_uncommitted_block_but_never_reuses_committed_ids(kept):
    h = Harness()
    h.add_brokers({1: None, 2: None})
    first = granted(allocate(h, 1))
    second = granted(allocate(h, 2, commit=False))
    assert h.ctl.committed_image.next_producer_id == first.stop
    assert h.image.next_producer_id == second.stop
    h.ctl.deactivate()
    assert h.ctl.pending_image.next_producer_id == first.stop
    refused(allocate(h, 1, commit=False), E.NOT_CONTROLLER)
    if kept:
        h.commit()       # the record made it into the log after all: a standby replays it
    else:
        del h.log[h.replayed:]
    h.append(h.ctl.activate(h.end_offset))
    h.commit()
    third = granted(allocate(h, 1))
    assert third.start == (second.stop if kept else first.stop)
    assert not set(third) & set(first)
    assert MetadataImage.empty().apply_all(h.log).next_producer_id == third.stop


# --------------------------------------------------------------------------- wire


@pytest.mark.parametrize("version", range(API.min_version, API.max_version + 1))
@pytest.mark.parametrize("response", [
    m.AllocateProducerIdsResponse(throttle_time_ms=0, error_code=0, producer_id_start=LONG_MAX - BLOCK,
                                  producer_id_len=BLOCK),
    producer_ids.error_response(E.STALE_BROKER_EPOCH),
    QuorumController._error_response(67, None, 0, E.NOT_CONTROLLER, "not me"),
], ids=["granted", "stale", "not-controller"])
def test_responses_encode_at_every_version(version, response):
    assert API.response.decode(version, API.response.encode(version, response)) == response


@pytest.mark.parametrize("version", range(API.min_version, API.max_version + 1))
def test_controller_responses_round_trip_at_every_version(version):
    h = Harness()
    h.register(1)
    for req in (request(1, h.epochs[1]), request(1, 12345), request(8, 0)):
        response = h.ctl.allocate_producer_ids(req, version).response
        assert API.response.decode(version, API.response.encode(version, response)) == response
        assert API.request.decode(version, API.request.encode(version, req)) == req
