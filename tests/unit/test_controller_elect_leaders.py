"""ElectLeaders (43): the controller side (Kafka's ReplicationControlManager.electLeaders) and
the broker side (core/broker/handlers/forwarded.py: authorization, forwarding, the one-node
answer)."""
from __future__ import annotations

from types import SimpleNamespace

import anyio
import pytest

from core.broker.context import RequestContext
from core.broker.handlers import forwarded
from core.controller import QuorumController, common
from core.controller.election import RECOVERED, RECOVERING
from core.protocol import messages as m
from core.protocol.errors import ErrorCode as E

from tests.support.controller_harness import CLUSTER, Clock, Harness, alter, call, only

Q = m.ElectLeadersRequest
PREFERRED, UNCLEAN = 0, 1


def elect(election_type: int | None, partitions: dict[str, list[int]] | None):
    return Q(election_type=election_type or 0, timeout_ms=1000,
             topic_partitions=None if partitions is None else
             [Q.TopicPartitions(topic=t, partitions=ps) for t, ps in partitions.items()])


def results(answer) -> dict[str, list[tuple[int, int]]]:
    return {r.topic: [(p.partition_id, p.error_code) for p in r.partition_result]
            for r in answer.replica_election_results}


def leaders(h: Harness, topic: str = "t") -> list[int]:
    return [p.leader for _, p in sorted(h.image.topic(topic).partitions.items())]


def moved_off_1(h: Harness, *, back_in_sync: bool = True) -> None:
    """t-0..2 on [1,2,3], [2,3,1], [3,1,2]. Broker 1 was fenced and came back, so t-0 is led
    by 2; with `back_in_sync`, t-0's and t-2's leaders have since added 1 back to their ISR (as
    AlterPartition would once it caught up)."""
    h.add_brokers({1: None, 2: None, 3: None})
    h.create_topic("t", 3, 3, assignments={0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]})
    h.heartbeat(1, fence=True)
    h.heartbeat(1)
    assert leaders(h) == [2, 2, 3]
    if back_in_sync:
        for p in (0, 1, 2):
            isr = list(h.partition("t", p).isr) + [1]
            assert only(call(h, 56, alter(h, isr, partition=p), 3)[1]).error_code == 0


def leaderless_with_isr_of_1(h: Harness, **kw) -> None:
    """u-0 on [1, 2], ISR [1], and 1 fenced: leaderless."""
    h.add_brokers({1: None, 2: None, 3: None})
    h.create_topic("u", 1, 2, assignments={0: [1, 2]}, **kw)
    assert only(call(h, 56, alter(h, [1], topic="u"), 3)[1]).error_code == 0
    h.heartbeat(1, fence=True)
    assert (h.partition("u").leader, h.partition("u").isr) == (-1, (1,))


# --------------------------------------------------------------------------- PREFERRED


@pytest.mark.parametrize("version", [0, 1, 2])
def test_preferred_election_moves_leadership_back(version):
    h = Harness()
    moved_off_1(h)
    before = h.partition("t", 0)
    records, answer = call(h, 43, elect(PREFERRED, {"t": [0, 1, 2]}), version)
    assert results(answer) == {"t": [(0, 0), (1, E.ELECTION_NOT_NEEDED),
                                     (2, E.ELECTION_NOT_NEEDED)]}
    msgs = [p.error_message for p in answer.replica_election_results[0].partition_result]
    assert msgs == [None] + ["Leader election not needed for topic partition."] * 2
    assert answer.error_code == 0
    [record] = records
    assert (record.partition_id, record.leader, record.isr) == (0, 1, None)
    after = h.ctl.committed_image.partition("t", 0)
    assert (after.leader, after.leader_epoch, after.isr) == \
        (1, before.leader_epoch + 1, before.isr)


def test_v0_elects_the_preferred_replica_whatever_the_request_object_says():
    h = Harness()
    moved_off_1(h)
    # As unclean, t-0 (which has a leader) would need no election.
    records, answer = call(h, 43, elect(UNCLEAN, {"t": [0]}), 0)
    assert results(answer) == {"t": [(0, 0)]} and leaders(h) == [1, 2, 3]


def test_all_partitions_lists_only_elections_that_happened_or_failed():
    h = Harness()
    moved_off_1(h)
    h.create_topic("balanced", 2, 1, assignments={0: [2], 1: [3]})
    h.create_topic("stuck", 1, 2, assignments={0: [1, 2]})
    # stuck-0 moved to 2 and 1 is not back in its ISR.
    h.heartbeat(1, fence=True)
    h.heartbeat(1)
    call(h, 56, alter(h, [2, 3, 1], partition=0), 3)    # t-0 in sync again
    records, answer = call(h, 43, elect(PREFERRED, None), 2)
    assert results(answer) == {"balanced": [], "stuck": [(0, E.PREFERRED_LEADER_NOT_AVAILABLE)],
                               "t": [(0, 0)]}
    assert [r.topic for r in answer.replica_election_results] == ["balanced", "stuck", "t"]
    assert len(records) == 1 and leaders(h) == [1, 2, 3]


def test_an_empty_partition_list_elects_nothing():
    h = Harness()
    moved_off_1(h)
    records, answer = call(h, 43, elect(PREFERRED, {}), 2)
    assert (records, answer.replica_election_results, answer.error_code) == ([], [], 0)


def preferred_not_in_sync(h):
    moved_off_1(h, back_in_sync=False)


def preferred_fenced(h):
    moved_off_1(h)
    h.heartbeat(1, fence=True)
    h.inject(m.PartitionChangeRecord(topic_id=h.image.topic("t").id, partition_id=0,
                                     isr=[2, 3, 1]))    # a log that keeps it in the ISR


def preferred_shutting_down(h):
    moved_off_1(h)
    # Leading something keeps it in controlled shutdown instead of stopping at once.
    h.create_topic("own", 1, 1, assignments={0: [1]})
    h.heartbeat(1, shut_down=True)
    assert h.image.brokers[1].in_controlled_shutdown
    h.inject(m.PartitionChangeRecord(topic_id=h.image.topic("t").id, partition_id=0,
                                     isr=[2, 3, 1]))


@pytest.mark.parametrize("setup", [preferred_not_in_sync, preferred_fenced,
                                   preferred_shutting_down])
def test_preferred_leader_not_available(setup):
    h = Harness()
    setup(h)
    before = h.image
    records, answer = call(h, 43, elect(PREFERRED, {"t": [0]}), 2)
    assert results(answer) == {"t": [(0, E.PREFERRED_LEADER_NOT_AVAILABLE)]}
    assert answer.replica_election_results[0].partition_result[0].error_message == \
        "The preferred leader was not available."
    assert records == [] and h.image == before


def test_preferred_election_of_a_leaderless_partition_falls_back_to_the_next_replica():
    """Kafka's PREFERRED election: the first replica if it can lead, else the current leader,
    else the next replica in the ISR that can lead."""
    h = Harness()
    moved_off_1(h, back_in_sync=False)
    h.heartbeat(1, fence=True)
    t = h.image.topic("t")
    h.inject(m.PartitionChangeRecord(topic_id=t.id, partition_id=0, leader=-1))
    records, answer = call(h, 43, elect(PREFERRED, {"t": [0]}), 2)
    assert results(answer) == {"t": [(0, 0)]} and h.partition("t", 0).leader == 2


# --------------------------------------------------------------------------- UNCLEAN


def test_unclean_election_elects_a_live_replica_outside_the_isr():
    h = Harness()
    leaderless_with_isr_of_1(h)     # the topic does not allow unclean elections itself
    records, answer = call(h, 43, elect(UNCLEAN, {"u": [0]}), 1)
    assert results(answer) == {"u": [(0, 0)]}
    [record] = records
    assert (record.leader, record.isr, record.leader_recovery_state) == (2, [2], RECOVERING)
    p = h.ctl.committed_image.partition("u", 0)
    assert (p.leader, p.isr, p.leader_recovery_state) == (2, (2,), RECOVERING)


def test_unclean_election_prefers_a_clean_leader():
    h = Harness()
    leaderless_with_isr_of_1(h)
    u = h.image.topic("u")
    h.inject(m.PartitionChangeRecord(topic_id=u.id, partition_id=0, isr=[1, 2]))
    records, answer = call(h, 43, elect(UNCLEAN, {"u": [0]}), 2)
    assert results(answer) == {"u": [(0, 0)]}
    p = h.partition("u")
    assert (p.leader, p.isr, p.leader_recovery_state) == (2, (1, 2), RECOVERED)


def test_unclean_election_not_needed_with_a_leader():
    h = Harness()
    moved_off_1(h)
    records, answer = call(h, 43, elect(UNCLEAN, {"t": [0, 1]}), 2)
    assert results(answer) == {"t": [(0, E.ELECTION_NOT_NEEDED), (1, E.ELECTION_NOT_NEEDED)]}
    assert records == []


def test_unclean_election_with_no_live_replica():
    h = Harness()
    leaderless_with_isr_of_1(h)
    h.heartbeat(2, fence=True)
    records, answer = call(h, 43, elect(UNCLEAN, {"u": [0]}), 2)
    assert results(answer) == {"u": [(0, E.ELIGIBLE_LEADERS_NOT_AVAILABLE)]}
    assert answer.replica_election_results[0].partition_result[0].error_message == \
        "Eligible topic partition leaders are not available."
    assert records == []


def test_unclean_for_all_partitions_elects_only_leaderless_ones():
    h = Harness()
    leaderless_with_isr_of_1(h)
    h.create_topic("t", 1, 1, assignments={0: [3]})
    records, answer = call(h, 43, elect(UNCLEAN, None), 2)
    assert results(answer) == {"t": [], "u": [(0, 0)]} and len(records) == 1


# --------------------------------------------------------------------------- request errors


def test_unknown_topics_and_partitions():
    h = Harness()
    moved_off_1(h)
    records, answer = call(h, 43, elect(PREFERRED, {"nope": [0], "t": [7, -1, 0]}), 2)
    assert results(answer) == {"nope": [(0, E.UNKNOWN_TOPIC_OR_PARTITION)],
                               "t": [(7, E.UNKNOWN_TOPIC_OR_PARTITION),
                                     (-1, E.UNKNOWN_TOPIC_OR_PARTITION), (0, 0)]}
    msgs = [p.error_message for r in answer.replica_election_results for p in r.partition_result]
    assert msgs[:2] == ["No such topic as nope", "No such partition as t-7"]
    assert len(records) == 1


def test_a_partition_named_twice_is_elected_once():
    h = Harness()
    moved_off_1(h)
    records, answer = call(h, 43, elect(PREFERRED, {"t": [0, 0]}), 2)
    assert results(answer) == {"t": [(0, 0), (0, E.ELECTION_NOT_NEEDED)]}
    assert len(records) == 1


@pytest.mark.parametrize("version, top", [(1, E.INVALID_REQUEST), (2, E.INVALID_REQUEST)])
def test_an_unknown_election_type_fails_the_whole_request(version, top):
    h = Harness()
    moved_off_1(h)
    before = h.image
    records, answer = call(h, 43, elect(2, {"t": [0, 1]}), version)
    assert answer.error_code == top
    assert results(answer) == {"t": [(0, E.INVALID_REQUEST), (1, E.INVALID_REQUEST)]}
    assert records == [] and h.image == before


@pytest.mark.parametrize("limit, code", [(2, 0), (1, E.POLICY_VIOLATION)])
def test_too_many_elections_fail_the_whole_request(monkeypatch, limit, code):
    h = Harness()
    moved_off_1(h)
    h.heartbeat(3, fence=True)                    # t-2 moves to 1
    h.heartbeat(3)
    call(h, 56, alter(h, list(h.partition("t", 2).isr) + [3], partition=2), 3)
    assert leaders(h) == [2, 2, 1]
    monkeypatch.setattr(common, "MAX_RECORDS_PER_USER_OP", limit)
    records, answer = call(h, 43, elect(PREFERRED, None), 2)
    assert answer.error_code == code
    if code:
        assert records == [] and answer.replica_election_results == []
    else:
        assert len(records) == 2 and leaders(h) == [1, 2, 3]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_a_standby_controller_answers_not_controller(version):
    ctl = QuorumController(1, CLUSTER, clock=Clock())
    api = m.API[43]
    for request, listed in ((elect(PREFERRED, {"t": [0, 1]}), [(0, E.NOT_CONTROLLER),
                                                              (1, E.NOT_CONTROLLER)]),
                            (elect(PREFERRED, None), None)):
        result = ctl.handle(43, request, version)
        answer = api.response.decode(version, api.response.encode(version, result.response))
        assert result.records == []
        assert answer.error_code == (E.NOT_CONTROLLER if version >= 1 else 0)
        assert results(answer) == ({"t": listed} if listed else {})


# --------------------------------------------------------------------------- the broker side


class Authorizer:
    def __init__(self, allow: bool):
        self.allow = allow
        self.asked = []

    def authorize(self, principal, operation, resource_type, name, host="*") -> bool:
        self.asked.append((operation.name, resource_type.name, name))
        return self.allow


class Channel:
    """A controller channel that answers from a QuorumController (as the runner would)."""

    def __init__(self, h: Harness):
        self.h = h
        self.sent = []

    async def send(self, api_key, request, version, timeout_s):
        self.sent.append((api_key, version, request.election_type))
        return call(self.h, api_key, request, version)[1]

    async def send_tracked(self, api_key, request, version, timeout_s):
        return await self.send(api_key, request, version, timeout_s), False   # answered at once


class Loader:
    """The broker's metadata loader: here, at once the controller's committed image."""

    next_offset = 0

    def __init__(self, h: Harness):
        self.h = h

    @property
    def image(self):
        return self.h.ctl.committed_image


class Sync:
    synced_offset = 0

    def __init__(self):
        self.shown = []

    async def wait_synced(self, predicate, timeout_s):
        self.shown.append(predicate())
        return self.shown[-1]


class KRaft:
    """The broker's link to the quorum; its reconciled image is the loader's, at once."""

    def __init__(self, h: Harness):
        self.channel, self.quorum, self.sync = Channel(h), SimpleNamespace(loader=Loader(h)), Sync()

    @property
    def image(self):
        return self.quorum.loader.image


def broker_ctx(version: int, *, allow: bool = True, topics=None, h: Harness | None = None):
    """A request context on a broker that holds `topics` (name -> partition count) and, with
    `h`, forwards to `h`'s controller (without, it has no controller to reach)."""
    kraft = None
    if h is not None:
        kraft = KRaft(h)
    broker = SimpleNamespace(kraft=kraft, topics={
        name: SimpleNamespace(partitions=[object()] * n) for name, n in (topics or {}).items()})
    return RequestContext(broker=broker, authorizer=Authorizer(allow), listener=None,
                          peer="test", api_key=43, api_version=version)


def handle(ctx, request, version):
    answer = anyio.run(forwarded.elect_leaders, ctx, request)
    api = m.API[43]
    return api.response.decode(version, api.response.encode(version, answer))


def one_node(h: Harness) -> None:
    """A one-node cluster: broker 1 holds t-0, t-1 and a-0, and leads them."""
    h.add_brokers({1: None})
    h.create_topic("t", 2, 1)
    h.create_topic("a", 1, 1)


@pytest.mark.parametrize("partitions, expect", [
    ({"t": [0, 1, 2], "u": [0]}, {"t": [(0, E.ELECTION_NOT_NEEDED), (1, E.ELECTION_NOT_NEEDED),
                                        (2, E.UNKNOWN_TOPIC_OR_PARTITION)],
                                  "u": [(0, E.UNKNOWN_TOPIC_OR_PARTITION)]}),
    (None, {"a": [], "t": []}),
])
@pytest.mark.parametrize("election_type", [PREFERRED, UNCLEAN])
def test_a_one_node_cluster_leads_everything_already(partitions, expect, election_type):
    h = Harness()
    one_node(h)
    ctx = broker_ctx(2, h=h)
    answer = handle(ctx, elect(election_type, partitions), 2)
    assert answer.error_code == 0 and results(answer) == expect
    assert ctx.authorizer.asked == [("ALTER", "CLUSTER", "kafka-cluster")]


def test_a_one_node_cluster_refuses_an_unknown_election_type():
    h = Harness()
    one_node(h)
    answer = handle(broker_ctx(1, h=h), elect(5, {"t": [0]}), 1)
    assert answer.error_code == E.INVALID_REQUEST
    assert results(answer) == {"t": [(0, E.INVALID_REQUEST)]}


@pytest.mark.parametrize("kraft", [False, True])
def test_elect_leaders_needs_alter_on_the_cluster(kraft):
    h = Harness()
    moved_off_1(h)
    ctx = broker_ctx(2, allow=False, topics={"t": 3}, h=h if kraft else None)
    answer = handle(ctx, elect(PREFERRED, {"t": [0, 1]}), 2)
    assert answer.error_code == E.CLUSTER_AUTHORIZATION_FAILED
    assert results(answer) == {"t": [(0, E.CLUSTER_AUTHORIZATION_FAILED),
                                     (1, E.CLUSTER_AUTHORIZATION_FAILED)]}
    assert leaders(h) == [2, 2, 3]
    if kraft:
        assert ctx.broker.kraft.channel.sent == []


@pytest.mark.parametrize("version", [0, 1, 2])
def test_a_kraft_broker_forwards_at_v2_with_v0_meaning_preferred(version):
    h = Harness()
    moved_off_1(h)
    ctx = broker_ctx(version, h=h)
    answer = handle(ctx, elect(UNCLEAN if version == 0 else PREFERRED, {"t": [0, 1]}), version)
    assert ctx.broker.kraft.channel.sent == [(43, 2, PREFERRED)]
    assert results(answer) == {"t": [(0, 0), (1, E.ELECTION_NOT_NEEDED)]}
    assert leaders(h) == [1, 2, 3]
    # It waited until its own image showed the new leader (here: at once).
    assert ctx.broker.kraft.sync.shown == [True]


def test_a_kraft_broker_waits_for_nothing_when_nothing_was_elected():
    h = Harness()
    moved_off_1(h)
    ctx = broker_ctx(2, h=h)
    answer = handle(ctx, elect(PREFERRED, {"t": [1, 9]}), 2)
    assert results(answer) == {"t": [(1, E.ELECTION_NOT_NEEDED), (9, E.UNKNOWN_TOPIC_OR_PARTITION)]}
    assert ctx.broker.kraft.sync.shown == []
