"""AlterPartition (56) against the QuorumController (Kafka's ReplicationControlManager.
alterPartition / validateAlterPartitionData), and the ISR and leadership changes the controller
makes on its own around it: fencing, controlled shutdown, unfencing, unclean and preferred
elections."""
from __future__ import annotations


import anyio
import pytest
from anyio import wait_all_tasks_blocked

from core.config import BrokerConfig
from core.controller import ControllerConfig, QuorumController
from core.controller.election import RECOVERED, RECOVERING
from core.node.controller_runner import ControllerRunner
from core.node.loader import MetadataLoader
from core.protocol import messages as m
from core.protocol.errors import ErrorCode as E
from core.raft.entries import Entry, OffsetAndEpoch
from core.raft.errors import NotLeaderError
from core.raft.messages import LeaderIdAndEpoch

from tests.support.controller_harness import (CLUSTER, Clock, Harness, alter, call, create_request,
                                              heartbeat, new_topic, only, registration)

R = m.AlterPartitionRequest
TIMEOUT = ControllerConfig().broker_session_timeout_ms
UNCLEAN = {"unclean.leader.election.enable": "true"}


def three_replicas(h: Harness, **kw) -> None:
    """Brokers 1-4; t-0 on [1, 2, 3], led by 1, ISR [1, 2, 3], epochs 0/0."""
    h.add_brokers({1: None, 2: None, 3: None, 4: None})
    h.create_topic("t", 1, 3, assignments={0: [1, 2, 3]}, **kw)


def shrink(h: Harness, isr, **kw):
    records, answer = call(h, 56, alter(h, isr, **kw), kw.get("version", 3))
    assert only(answer).error_code == 0, answer
    return records, answer


def recovering(h: Harness) -> None:
    """t-0 led by 2 after an unclean election: ISR [2], RECOVERING."""
    three_replicas(h, configs=UNCLEAN)
    shrink(h, [1])
    h.heartbeat(1, fence=True)
    p = h.partition("t")
    assert (p.leader, p.isr, p.leader_recovery_state) == (2, (2,), RECOVERING)


# --------------------------------------------------------------------------- errors

def fence(b):
    return lambda h: h.heartbeat(b, fence=True)


def shut_down(b):
    def go(h):
        # It must lead something to stay in controlled shutdown rather than stop at once.
        h.create_topic(f"led-by-{b}", 1, 1, assignments={0: [b]})
        h.heartbeat(b, shut_down=True)
        assert h.image.brokers[b].in_controlled_shutdown and not h.image.brokers[b].fenced
    return go


def unregister(b):
    return lambda h: call(h, 64, m.UnregisterBrokerRequest(broker_id=b), 0)


def fenced_but_in_isr(b):
    def go(h):
        h.heartbeat(b, fence=True)
        # A log that still lists it (no record of this controller does that).
        h.inject(m.PartitionChangeRecord(topic_id=h.image.topic("t").id, partition_id=0,
                                         isr=[1, 2, 3]))
    return go


def bump_leader_epoch(h):
    h.inject(m.PartitionChangeRecord(topic_id=h.image.topic("t").id, partition_id=0, leader=1))


def bump_partition_epoch(h):
    h.inject(m.PartitionChangeRecord(topic_id=h.image.topic("t").id, partition_id=0,
                                     isr=[1, 2, 3]))


# (name, setup(h), alter() keyword arguments, version, error). Each is checked with the same
# request otherwise valid, so the error is the one the named condition causes.
PARTITION_ERRORS = [
    ("unknown partition", None, dict(partition=5), 3, E.UNKNOWN_TOPIC_OR_PARTITION),
    ("leader epoch newer than ours", None, dict(leader_epoch=1), 3, E.NOT_CONTROLLER),
    ("partition epoch newer than ours", None, dict(partition_epoch=1), 3, E.NOT_CONTROLLER),
    ("newer partition epoch wins over an older leader epoch",
     bump_leader_epoch, dict(leader_epoch=0, partition_epoch=9), 3, E.NOT_CONTROLLER),
    ("older leader epoch", bump_leader_epoch, dict(leader_epoch=0), 3, E.FENCED_LEADER_EPOCH),
    ("older leader epoch wins over not being the leader",
     bump_leader_epoch, dict(leader_epoch=0, broker=2), 3, E.FENCED_LEADER_EPOCH),
    ("requester is not the leader", None, dict(broker=2), 3, E.INVALID_REQUEST),
    ("not being the leader wins over an older partition epoch",
     bump_partition_epoch, dict(broker=2, partition_epoch=0), 3, E.INVALID_REQUEST),
    ("older partition epoch", bump_partition_epoch, dict(partition_epoch=0), 3,
     E.INVALID_UPDATE_VERSION),
    ("older partition epoch wins over a bad ISR",
     bump_partition_epoch, dict(partition_epoch=0, isr=[2, 3]), 3, E.INVALID_UPDATE_VERSION),
    ("ISR names a broker twice", None, dict(isr=[1, 2, 2]), 3, E.INVALID_REQUEST),
    ("ISR names a broker that is not a replica", None, dict(isr=[1, 4]), 3, E.INVALID_REQUEST),
    ("ISR names a negative id", None, dict(isr=[1, -1]), 3, E.INVALID_REQUEST),
    ("ISR without the leader", None, dict(isr=[2, 3]), 3, E.INVALID_REQUEST),
    ("empty ISR", None, dict(isr=[]), 3, E.INVALID_REQUEST),
    ("RECOVERED cannot become RECOVERING", None, dict(isr=[1], lrs=RECOVERING), 3,
     E.INVALID_REQUEST),
    ("RECOVERING with more than one ISR member", None, dict(isr=[1, 2], lrs=RECOVERING), 1,
     E.INVALID_REQUEST),
    ("unknown leader recovery state", None, dict(lrs=5), 2, E.INVALID_REQUEST),
    ("a bad ISR wins over an ineligible member", fence(3), dict(isr=[1, 3, 3]), 3,
     E.INVALID_REQUEST),
    ("fenced member, v3", fence(3), dict(isr=[1, 2, 3]), 3, E.INELIGIBLE_REPLICA),
    ("fenced member, v2", fence(3), dict(isr=[1, 2, 3]), 2, E.INELIGIBLE_REPLICA),
    ("fenced member, v1", fence(3), dict(isr=[1, 2, 3]), 1, E.OPERATION_NOT_ATTEMPTED),
    ("fenced member, v0", fence(3), dict(isr=[1, 2, 3]), 0, E.OPERATION_NOT_ATTEMPTED),
    ("member in controlled shutdown", shut_down(3), dict(isr=[1, 2, 3]), 3,
     E.INELIGIBLE_REPLICA),
    ("unregistered member", unregister(3), dict(isr=[1, 2, 3]), 2, E.INELIGIBLE_REPLICA),
    ("every member is checked, not only added ones", fenced_but_in_isr(3), dict(isr=[1, 3]), 3,
     E.INELIGIBLE_REPLICA),
    ("v2 carries no member epochs to check", None, dict(isr=[1, 2], member_epochs={2: 12345}),
     2, None),
    ("v3 member epoch -1 is not checked", None, dict(isr=[1, 2], member_epochs={2: -1}), 3,
     None),
    ("member broker epoch mismatch, v3", None, dict(isr=[1, 2], member_epochs={2: 12345}), 3,
     E.INELIGIBLE_REPLICA),
    ("leader's own broker epoch mismatch, v3", None, dict(isr=[1, 2], member_epochs={1: 3}), 3,
     E.INELIGIBLE_REPLICA),
]


@pytest.mark.parametrize("setup, kw, version, code", [c[1:] for c in PARTITION_ERRORS],
                         ids=[c[0] for c in PARTITION_ERRORS])
def test_partition_errors(setup, kw, version, code):
    h = Harness()
    three_replicas(h)
    if setup is not None:
        setup(h)
    kw = dict(kw)
    isr = kw.pop("isr", [1, 2])
    before = h.image
    records, answer = call(h, 56, alter(h, isr, version=version, **kw), version)
    assert answer.error_code == 0
    p = only(answer)
    assert p.partition_index == kw.get("partition", 0)
    if code is None:      # the contrast: the same request is accepted
        assert p.error_code == 0 and len(records) == 1
        return
    assert (p.error_code, p.leader_id, p.isr, p.partition_epoch) == (code, 0, [], 0)
    assert records == [] and h.image == before


@pytest.mark.parametrize("version, code", [(0, E.UNKNOWN_TOPIC_OR_PARTITION),
                                           (1, E.UNKNOWN_TOPIC_OR_PARTITION),
                                           (2, E.UNKNOWN_TOPIC_ID), (3, E.UNKNOWN_TOPIC_ID)])
def test_unknown_topics_fail_each_partition_listed(version, code):
    h = Harness()
    three_replicas(h)
    request = alter(h, [1, 2], version=version)
    request.topics[0].topic_name = "nope"
    request.topics[0].topic_id = bytes([9] * 16)
    request.topics[0].partitions.append(R.PartitionData(partition_index=3, leader_epoch=0,
                                                        partition_epoch=0, new_isr=[1]))
    records, answer = call(h, 56, request, version)
    [t] = answer.topics
    assert [(p.partition_index, p.error_code) for p in t.partitions] == [(0, code), (3, code)]
    assert (t.topic_name, t.topic_id) == (("nope", bytes(16)) if version < 2
                                          else ("", bytes([9] * 16)))
    assert records == []


def test_v2_names_topics_by_id_only():
    h = Harness()
    three_replicas(h)
    request = alter(h, [1, 2], version=2)
    request.topics[0].topic_id = bytes(16)       # the name alone is not enough from v2 on
    _, answer = call(h, 56, request, 2)
    assert only(answer).error_code == E.UNKNOWN_TOPIC_ID


@pytest.mark.parametrize("version", [0, 3])
@pytest.mark.parametrize("who, epoch", [(9, 1), (1, 12345)], ids=["unregistered", "stale"])
def test_the_requester_must_be_registered_with_its_epoch(version, who, epoch):
    h = Harness()
    three_replicas(h)
    records, answer = call(h, 56, alter(h, [1, 2], broker=who, broker_epoch=epoch,
                                        version=version), version)
    assert (answer.error_code, answer.topics, records) == (E.STALE_BROKER_EPOCH, [], [])


def test_a_standby_controller_answers_not_controller():
    ctl = QuorumController(1, CLUSTER, clock=Clock())
    result = ctl.handle(56, R(broker_id=1, broker_epoch=1, topics=[
        R.TopicData(topic_name="t", partitions=[R.PartitionData(partition_index=0)])]), 1)
    assert (result.records, result.response.error_code, result.response.topics) == \
        ([], E.NOT_CONTROLLER, [])


# --------------------------------------------------------------------------- changes


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_an_isr_shrink_bumps_the_partition_epoch_not_the_leader_epoch(version):
    h = Harness()
    three_replicas(h)
    records, answer = call(h, 56, alter(h, [1, 3], version=version), version)
    [record] = records
    assert (record.isr, record.leader, record.leader_recovery_state) == ([1, 3], -2, -1)
    [t] = answer.topics
    assert (t.topic_name, t.topic_id) == (("t", bytes(16)) if version < 2
                                          else ("", h.image.topic("t").id))
    p = only(answer)
    assert (p.error_code, p.leader_id, p.leader_epoch, p.isr, p.partition_epoch,
            p.leader_recovery_state) == (0, 1, 0, [1, 3], 1, RECOVERED)
    # The answer is the committed registration.
    c = h.ctl.committed_image.partition("t", 0)
    assert (c.leader, c.leader_epoch, c.isr, c.partition_epoch) == (1, 0, (1, 3), 1)


def test_an_isr_expansion_with_member_epochs():
    h = Harness()
    three_replicas(h)
    shrink(h, [1])
    records, answer = call(h, 56, alter(h, [1, 2, 3]), 3)
    assert records[0].isr == [1, 2, 3]
    p = only(answer)
    assert (p.isr, p.leader_epoch, p.partition_epoch) == ([1, 2, 3], 0, 2)


def test_a_request_that_changes_nothing_writes_nothing_and_answers_the_registration():
    h = Harness()
    three_replicas(h)
    shrink(h, [1, 2])
    records, answer = call(h, 56, alter(h, [1, 2]), 3)
    assert records == []
    p = only(answer)
    assert (p.error_code, p.leader_id, p.leader_epoch, p.isr, p.partition_epoch) == \
        (0, 1, 0, [1, 2], 1)


def test_isr_order_is_the_leaders():
    h = Harness()
    three_replicas(h)
    records, answer = call(h, 56, alter(h, [1, 3, 2]), 3)
    assert records[0].isr == [1, 3, 2] and only(answer).isr == [1, 3, 2]


def test_a_no_op_after_an_uncommitted_change_waits_for_it():
    """The driver sends an answer without records only once nothing this controller proposed
    is uncommitted: the ISR in the answer must be one the log cannot lose."""
    h = Harness()
    three_replicas(h)
    records, _ = call(h, 56, alter(h, [1, 2]), 3, commit=False)
    assert records and h.ctl.has_uncommitted
    again, answer = call(h, 56, alter(h, [1, 2]), 3, commit=False)
    assert again == [] and only(answer).isr == [1, 2]
    assert h.ctl.has_uncommitted          # so the driver waits before sending it
    h.commit()
    assert not h.ctl.has_uncommitted


def test_each_partition_succeeds_or_fails_on_its_own():
    h = Harness()
    three_replicas(h)
    h.create_topic("u", 2, 2, assignments={0: [1, 2], 1: [2, 1]})
    u = h.image.topic("u")
    request = R(broker_id=1, broker_epoch=h.epochs[1], topics=[R.TopicData(
        topic_id=u.id, partitions=[
            R.PartitionData(partition_index=1, leader_epoch=0, partition_epoch=0,
                            new_isr_with_epochs=[R.BrokerState(broker_id=2, broker_epoch=-1)]),
            R.PartitionData(partition_index=0, leader_epoch=0, partition_epoch=0,
                            new_isr_with_epochs=[R.BrokerState(broker_id=1, broker_epoch=-1)])])])
    records, answer = call(h, 56, request, 3)
    assert [(p.partition_index, p.error_code) for p in answer.topics[0].partitions] == \
        [(1, E.INVALID_REQUEST), (0, 0)]
    assert [(r.partition_id, r.isr) for r in records] == [(0, [1])]


def test_a_partition_named_twice_sees_its_first_change():
    h = Harness()
    three_replicas(h)
    request = alter(h, [1, 2])
    request.topics[0].partitions.append(alter(h, [1, 3]).topics[0].partitions[0])
    records, answer = call(h, 56, request, 3)
    assert [p.error_code for p in answer.topics[0].partitions] == [0, E.INVALID_UPDATE_VERSION]
    assert len(records) == 1 and h.partition("t").isr == (1, 2)


# --------------------------------------------------------------------------- recovery (KIP-704)


def test_a_recovering_leader_alone_in_the_isr_marks_itself_recovered():
    h = Harness()
    recovering(h)
    p = h.partition("t")
    records, answer = call(h, 56, alter(h, [2], lrs=RECOVERED), 1)
    [record] = records
    assert (record.isr, record.leader, record.leader_recovery_state) == (None, -2, RECOVERED)
    a = only(answer)
    assert (a.leader_id, a.leader_epoch, a.isr, a.leader_recovery_state, a.partition_epoch) == \
        (2, p.leader_epoch, [2], RECOVERED, p.partition_epoch + 1)


def test_a_recovering_leader_may_stay_recovering_alone():
    h = Harness()
    recovering(h)
    records, answer = call(h, 56, alter(h, [2], lrs=RECOVERING), 2)
    assert records == [] and only(answer).leader_recovery_state == RECOVERING


def test_recovered_and_expanded_in_one_request():
    h = Harness()
    recovering(h)
    records, answer = call(h, 56, alter(h, [2, 3], lrs=RECOVERED), 3)
    assert (records[0].isr, records[0].leader_recovery_state) == ([2, 3], RECOVERED)
    assert only(answer).isr == [2, 3]


def test_v0_has_no_recovery_state_so_it_says_recovered():
    h = Harness()
    recovering(h)
    records, answer = call(h, 56, alter(h, [2], version=0), 0)
    assert records[0].leader_recovery_state == RECOVERED
    assert h.partition("t").leader_recovery_state == RECOVERED


def test_a_recovering_leader_cannot_expand_the_isr_while_recovering():
    h = Harness()
    recovering(h)
    records, answer = call(h, 56, alter(h, [2, 3], lrs=RECOVERING), 3)
    assert (only(answer).error_code, records) == (E.INVALID_REQUEST, [])


# --------------------------------------------------------------------------- the controller's own
# ISR and leadership changes: what an AlterPartition-driven ISR meets


def test_session_expiry_takes_a_follower_out_of_the_isr_without_a_leader_epoch_bump():
    h = Harness()
    three_replicas(h)
    h.clock.advance(TIMEOUT + 1)
    for b in (1, 2, 4):
        h.heartbeat(b)
    h.tick()
    assert h.image.brokers[3].fenced
    p = h.partition("t")
    assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (1, (1, 2), 0, 1)
    # The leader's next AlterPartition must carry the new partition epoch.
    _, answer = call(h, 56, alter(h, [1], partition_epoch=0), 3)
    assert only(answer).error_code == E.INVALID_UPDATE_VERSION


def test_session_expiry_of_the_leader_elects_from_the_isr_only():
    h = Harness()
    three_replicas(h)
    shrink(h, [1, 3])
    h.clock.advance(TIMEOUT + 1)
    for b in (2, 3, 4):
        h.heartbeat(b)
    h.tick()
    p = h.partition("t")
    # 2 comes first in replica order but is out of sync.
    assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (3, (3,), 1, 2)


def test_the_last_isr_member_stays_and_the_partition_waits_for_it():
    h = Harness()
    three_replicas(h)
    shrink(h, [1])
    h.heartbeat(1, fence=True)
    p = h.partition("t")
    assert (p.leader, p.isr, p.elr) == (-1, (1,), ())
    h.clock.advance(ControllerConfig().unclean_leader_election_interval_ms)
    for b in (2, 3, 4):
        h.heartbeat(b)
    h.tick()
    assert h.partition("t").leader == -1          # unclean elections are off
    h.heartbeat(1)                                # unfenced: it leads again
    p = h.partition("t")
    assert (p.leader, p.isr, p.leader_recovery_state) == (1, (1,), RECOVERED)


def test_controlled_shutdown_takes_the_broker_out_of_every_isr_and_leadership():
    h = Harness()
    three_replicas(h)
    h.create_topic("u", 1, 2, assignments={0: [2, 1]})
    h.heartbeat(1, shut_down=True)
    assert h.image.brokers[1].in_controlled_shutdown
    t, u = h.partition("t"), h.partition("u")
    assert (t.leader, t.isr, t.leader_epoch) == (2, (2, 3), 1)
    assert (u.leader, u.isr, u.leader_epoch) == (2, (2,), 0)
    # The new leader cannot take it back while it shuts down.
    _, answer = call(h, 56, alter(h, [2, 3, 1]), 3)
    assert only(answer).error_code == E.INELIGIBLE_REPLICA


def test_unclean_election_when_the_topic_allows_it_and_recovery_afterwards():
    h = Harness()
    recovering(h)
    assert h.partition("t").leader_epoch == 1
    # Back in the ISR only through the recovered leader.
    h.heartbeat(1)
    assert h.partition("t").isr == (2,)
    shrink(h, [2], lrs=RECOVERED)
    shrink(h, [2, 1])
    p = h.partition("t")
    assert (p.leader, p.isr, p.leader_recovery_state) == (2, (2, 1), RECOVERED)


def test_unclean_elections_run_every_interval_once_enabled():
    h = Harness()
    three_replicas(h)
    shrink(h, [1])
    h.heartbeat(1, fence=True)
    C = m.IncrementalAlterConfigsRequest
    call(h, 44, C(resources=[C.AlterConfigsResource(
        resource_type=2, resource_name="t", configs=[C.AlterableConfig(
            name="unclean.leader.election.enable", config_operation=0, value="true")])]), 1)
    assert h.partition("t").leader == -1
    interval = ControllerConfig().unclean_leader_election_interval_ms
    assert h.ctl.next_deadline_ms() <= h.clock.now + interval
    h.clock.advance(interval)
    for b in (2, 3, 4):
        h.heartbeat(b)
    h.tick()
    p = h.partition("t")
    assert (p.leader, p.isr, p.leader_recovery_state) == (2, (2,), RECOVERING)


def test_unfencing_a_leaderless_partitions_isr_member_makes_it_leader():
    h = Harness()
    three_replicas(h)
    shrink(h, [1, 2])
    h.heartbeat(2, fence=True)
    h.heartbeat(1, fence=True)
    assert (h.partition("t").leader, h.partition("t").isr) == (-1, (1,))
    h.heartbeat(2)                                # not in the ISR: stays leaderless
    assert h.partition("t").leader == -1
    h.heartbeat(1)
    # Epoch 1: leaderless after 1 was fenced (2 leaving the ISR bumped no leader epoch).
    assert (h.partition("t").leader, h.partition("t").leader_epoch) == (1, 2)


def test_auto_rebalance_hands_leadership_back_once_the_preferred_replica_is_in_sync():
    h = Harness()
    three_replicas(h)
    h.heartbeat(1, fence=True)
    h.heartbeat(1)
    assert (h.partition("t").leader, h.partition("t").isr) == (2, (2, 3))
    interval = ControllerConfig().leader_imbalance_check_interval_ms
    h.clock.advance(interval)
    for b in (1, 2, 3, 4):
        h.heartbeat(b)
    assert h.tick() == []                         # 1 is not in sync yet
    shrink(h, [2, 3, 1])                          # its leader says it caught up
    h.clock.advance(interval)
    for b in (1, 2, 3, 4):
        h.heartbeat(b)
    [record] = h.tick()
    assert record.leader == 1
    p = h.partition("t")
    assert (p.leader, p.isr) == (1, (2, 3, 1))


# --------------------------------------------------------------------------- the driver


class FakeRaft:
    """The ControllerRunner's Raft driver, leading epoch 1: proposals wait in `proposed` until
    commit() hands them to the loader; elect(epoch) moves leadership away."""

    def __init__(self, loader):
        self.loader = loader
        self.leader = LeaderIdAndEpoch(1, 1)
        self.end = 0
        self.proposed: list[Entry] = []
        self._append([b""], control=True)       # the LeaderChange that opens epoch 1
        self.commit()

    def _append(self, payloads, control: bool = False):
        for payload in payloads:
            self.proposed.append(Entry(self.end, 1, payload, control))
            self.end += 1
        return OffsetAndEpoch(self.end, 1)

    async def log_end_offset(self) -> int:
        return self.end

    async def propose(self, payloads):
        if self.leader.leader_id != 1:
            raise NotLeaderError("not the leader")
        return self._append(payloads)

    def commit(self) -> None:
        entries, self.proposed = self.proposed, []
        self.loader.handle_commit(entries, self.end)

    def elect(self, leader: int, epoch: int) -> None:
        self.leader = LeaderIdAndEpoch(leader, epoch)
        self.loader.handle_leader_change(self.leader)


def runner_on_fake_raft(tmp_path):
    config = BrokerConfig({"process.roles": "controller", "node.id": "1",
                           "controller.quorum.voters": "1@127.0.0.1:9093",
                           "listeners": "CONTROLLER://127.0.0.1:9093",
                           "controller.listener.names": "CONTROLLER",
                           "log.dirs": str(tmp_path)}, warn_unknown=False)
    loader = MetadataLoader(keep_image=False)
    raft = FakeRaft(loader)
    return ControllerRunner(config, cluster_id=CLUSTER, driver=raft, loader=loader), raft


async def ask(tg, runner, raft, api_key: int, request, version: int, *, commit: bool = True):
    """Start a request; with `commit`, commit what it proposed and return its answer, else
    return a function that says whether it has been answered yet (and with what)."""
    answers = []

    async def send():
        answers.append(await runner.handle(api_key, version, request))
    tg.start_soon(send)
    await wait_all_tasks_blocked()
    if not commit:
        return lambda: answers[0] if answers else None
    raft.commit()
    await wait_all_tasks_blocked()
    return answers[0]


def test_the_runner_answers_a_no_op_only_once_the_change_before_it_committed(tmp_path):
    runner, raft = runner_on_fake_raft(tmp_path)
    h = Harness(activate=False)       # builds the requests; the runner's controller answers

    async def main():
        async with anyio.create_task_group() as tg:
            await runner._activate()
            raft.commit()
            for b in (1, 2, 3):
                answer = await ask(tg, runner, raft, 62, registration(b), 4)
                h.epochs[b] = answer.broker_epoch
            for b in (1, 2, 3):
                await ask(tg, runner, raft, 63, heartbeat(b, h.epochs[b], raft.end - 1), 1)
            await ask(tg, runner, raft, 19, create_request(
                new_topic("t", assignments={0: [1, 2, 3]})), 7)
            h.ctl = runner.controller
            first = await ask(tg, runner, raft, 56, alter(h, [1, 2]), 3, commit=False)
            # The same ISR at the partition epoch the pending change gave: nothing to write,
            # but the answer must wait until that change is in the log.
            again = await ask(tg, runner, raft, 56, alter(h, [1, 2]), 3, commit=False)
            assert first() is None and again() is None
            raft.commit()
            await wait_all_tasks_blocked()
            assert only(first()).error_code == 0
            assert (only(again()).error_code, only(again()).isr) == (0, [1, 2])
            # With nothing pending, a no-op is answered at once.
            at_once = await ask(tg, runner, raft, 56, alter(h, [1, 2]), 3, commit=False)
            assert only(at_once()).partition_epoch == 1

            # A no-op behind a write that never commits: NOT_CONTROLLER, as for the write.
            lost = await ask(tg, runner, raft, 56, alter(h, [1]), 3, commit=False)
            behind = await ask(tg, runner, raft, 56, alter(h, [1]), 3, commit=False)
            assert behind() is None
            raft.elect(2, 2)
            await wait_all_tasks_blocked()
            assert (lost().error_code, behind().error_code) == (E.NOT_CONTROLLER,) * 2
            assert behind().topics == []
            tg.cancel_scope.cancel()
    anyio.run(main)
