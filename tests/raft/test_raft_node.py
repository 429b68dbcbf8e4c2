"""RaftNode's edges: the driver contract, request validation and error codes, restarts."""
from __future__ import annotations

import dataclasses
import random

import pytest

from core.protocol.errors import ErrorCode
from core.raft.config import QuorumConfig
from core.raft.election import (binary_exponential_backoff_ms, random_election_timeout_ms,
                                strict_exponential_backoff_ms)
from core.raft.entries import Entry, SnapshotId
from core.raft.errors import NotLeaderError, RaftStateError
from core.raft.log import RaftLog
from core.raft.messages import (DescribeQuorumRequest, FetchRequest, FetchResponse,
                                FetchSnapshotRequest, FetchSnapshotResponse, RaftMessage,
                                VoteRequest, VoteResponse)
from core.raft.node import RaftNode
from core.raft.roles import Role
from core.raft.state import QuorumState

CLUSTER = "c1"


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def make_node(node_id=1, voters=(1,), **kwargs) -> tuple[RaftNode, Clock]:
    clock = Clock()
    node = RaftNode(node_id, voters, cluster_id=CLUSTER, clock=clock, rng=random.Random(7),
                    **kwargs)
    return node, clock


def drain(node: RaftNode) -> list[RaftMessage]:
    sent = []
    while node.has_ready():
        ready = node.ready()
        sent.extend(ready.messages)
        node.advance(ready)
    return sent


def single_voter_leader() -> tuple[RaftNode, Clock]:
    node, clock = make_node()
    clock.now = node.next_deadline_ms()
    node.tick()
    drain(node)
    assert node.role is Role.LEADER
    return node, clock


def ask(node: RaftNode, data, source: int = 9) -> object:
    node.step(RaftMessage(source, node.node_id, 42, data))
    replies = [m for m in drain(node) if m.correlation_id == 42 and m.destination_id == source]
    assert len(replies) == 1, replies
    return replies[0].data


def fetch(epoch: int, offset: int = 0, last_epoch: int = 0, **kwargs) -> FetchRequest:
    defaults = dict(cluster_id=CLUSTER, replica_id=9, max_wait_ms=0, max_bytes=1 << 20,
                    current_leader_epoch=epoch, fetch_offset=offset,
                    last_fetched_epoch=last_epoch, partition_max_bytes=1 << 20)
    defaults.update(kwargs)
    return FetchRequest(**defaults)


def test_a_single_voter_elects_itself_and_commits_after_flushing() -> None:
    node, _ = single_voter_leader()
    assert node.propose([b"a", b"b"]) == (3, 1)
    ready = node.ready()
    assert [e.payload for e in ready.entries] == [b"a", b"b"]
    assert ready.committed_entries == ()          # not flushed yet: not counted
    node.advance(ready)
    ready = node.ready()
    assert [e.offset for e in ready.committed_entries] == [1, 2]
    assert ready.high_watermark == 3
    node.advance(ready)


def test_the_driver_must_advance_before_using_the_node_again() -> None:
    node, _ = single_voter_leader()
    node.propose([b"a"])
    ready = node.ready()
    with pytest.raises(RaftStateError):
        node.propose([b"b"])
    with pytest.raises(RaftStateError):
        node.tick()
    with pytest.raises(RaftStateError):
        node.advance(dataclasses.replace(ready))   # an equal Ready, but not the one handed out
    node.advance(ready)


def test_propose_on_a_follower_names_the_leader() -> None:
    node, _ = make_node(2, (1, 2, 3), quorum_state=QuorumState(4, 1, 1))
    assert node.role is Role.FOLLOWER
    with pytest.raises(NotLeaderError) as raised:
        node.propose([b"x"])
    assert (raised.value.leader_id, raised.value.epoch) == (1, 4)


@pytest.mark.parametrize("request_fields, error", [
    (dict(last_offset=-1), ErrorCode.INVALID_REQUEST),
    (dict(last_offset_epoch=5, candidate_epoch=5), ErrorCode.INVALID_REQUEST),   # not a pre-vote
    (dict(candidate_epoch=1), ErrorCode.FENCED_LEADER_EPOCH),
    (dict(candidate_id=7), ErrorCode.INCONSISTENT_VOTER_SET),
])
def test_vote_request_validation(request_fields, error) -> None:
    node, _ = make_node(2, (1, 2, 3), quorum_state=QuorumState(3))
    fields = dict(cluster_id=CLUSTER, candidate_epoch=4, candidate_id=1, last_offset_epoch=0,
                  last_offset=0)
    fields.update(request_fields)
    response = ask(node, VoteRequest(**fields), source=1)
    assert isinstance(response, VoteResponse)
    assert (response.partition_error_code, response.vote_granted) == (error, False)
    assert response.leader_epoch == 3


def test_vote_requests_to_observers_and_other_clusters_are_refused() -> None:
    observer, _ = make_node(5, (1, 2, 3))
    vote = VoteRequest(cluster_id=CLUSTER, candidate_epoch=1, candidate_id=1,
                       last_offset_epoch=0, last_offset=0)
    assert ask(observer, vote, 1).partition_error_code == ErrorCode.INCONSISTENT_VOTER_SET
    voter, _ = make_node(2, (1, 2, 3))
    foreign = VoteRequest(cluster_id="other", candidate_epoch=1, candidate_id=1,
                          last_offset_epoch=0, last_offset=0)
    assert ask(voter, foreign, 1).error_code == ErrorCode.INCONSISTENT_CLUSTER_ID


def test_a_granted_vote_is_persisted_in_the_ready_that_answers() -> None:
    node, _ = make_node(2, (1, 2, 3))
    node.step(RaftMessage(1, 2, 5, VoteRequest(cluster_id=CLUSTER, candidate_epoch=1,
                                               candidate_id=1, last_offset_epoch=0,
                                               last_offset=0)))
    ready = node.ready()
    assert ready.quorum_state == QuorumState(1, -1, 1)
    assert ready.messages[0].data.vote_granted


@pytest.mark.parametrize("epoch, error", [
    (0, ErrorCode.FENCED_LEADER_EPOCH),
    (2, ErrorCode.UNKNOWN_LEADER_EPOCH),
])
def test_fetch_epoch_checks_at_the_leader(epoch, error) -> None:
    node, _ = single_voter_leader()
    response = ask(node, fetch(epoch))
    assert isinstance(response, FetchResponse)
    assert response.partition_error_code == error
    assert (response.current_leader.leader_id, response.current_leader.leader_epoch) == (1, 1)


def test_fetch_with_a_last_epoch_beyond_the_leader_epoch_is_invalid() -> None:
    node, _ = single_voter_leader()
    assert ask(node, fetch(1, offset=1, last_epoch=2)).partition_error_code == \
        ErrorCode.INVALID_REQUEST


def test_fetch_from_a_non_leader_names_the_leader() -> None:
    node, _ = make_node(2, (1, 2, 3), quorum_state=QuorumState(4, 1, 1))
    response = ask(node, fetch(4))
    assert response.partition_error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert (response.current_leader.leader_id, response.current_leader.leader_epoch) == (1, 4)


def test_fetch_snapshot_errors() -> None:
    node, _ = single_voter_leader()
    node.propose([b"abc"])
    drain(node)
    sid = node.snapshot_created(2, b"0123456789")
    drain(node)
    unknown = FetchSnapshotRequest(cluster_id=CLUSTER, replica_id=9, max_bytes=4,
                                   current_leader_epoch=1, snapshot_id=SnapshotId(1, 1),
                                   position=0)
    assert ask(node, unknown).partition_error_code == ErrorCode.SNAPSHOT_NOT_FOUND
    beyond = FetchSnapshotRequest(cluster_id=CLUSTER, replica_id=9, max_bytes=4,
                                  current_leader_epoch=1, snapshot_id=sid, position=11)
    assert ask(node, beyond).partition_error_code == ErrorCode.POSITION_OUT_OF_RANGE
    chunk = ask(node, FetchSnapshotRequest(cluster_id=CLUSTER, replica_id=9, max_bytes=4,
                                           current_leader_epoch=1, snapshot_id=sid,
                                           position=8))
    assert isinstance(chunk, FetchSnapshotResponse)
    assert (chunk.size, chunk.position, chunk.unaligned_records) == (10, 8, b"89")


def test_snapshots_only_cover_what_was_applied() -> None:
    node, _ = single_voter_leader()
    node.propose([b"a"])
    with pytest.raises(ValueError):
        node.snapshot_created(2, b"")     # appended, not yet committed nor applied
    drain(node)
    assert node.snapshot_created(2, b"state") == SnapshotId(2, 1)
    ready = node.ready()
    assert ready.log_start_offset == 2
    node.advance(ready)


def test_describe_quorum_on_a_non_leader() -> None:
    node, _ = make_node(2, (1, 2, 3), quorum_state=QuorumState(4, 1, 1))
    response = ask(node, DescribeQuorumRequest())
    assert response.partition_error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert response.leader_id == 1


def test_restart_trusts_the_log_about_epochs() -> None:
    # The quorum state file was not written before the crash, the log was.
    log = RaftLog(None, [Entry(0, 3, b"x")])
    node, _ = make_node(2, (1, 2, 3), quorum_state=QuorumState(1), log=log)
    assert (node.role, node.epoch) == (Role.UNATTACHED, 3)
    assert node.ready().quorum_state == QuorumState(3)


def test_restart_after_leading_resigns() -> None:
    node, _ = make_node(1, (1, 2, 3), quorum_state=QuorumState(2, 1, 1))
    assert node.role is Role.RESIGNED
    assert {m.destination_id for m in node.ready().messages} == {2, 3}


def test_timeouts_and_backoffs() -> None:
    config = QuorumConfig()
    rng = random.Random(1)
    timeouts = [random_election_timeout_ms(config, rng) for _ in range(200)]
    assert 1000 <= min(timeouts) and max(timeouts) < 2000
    assert all(binary_exponential_backoff_ms(config, rng, r) <= 1000 for r in range(1, 30))
    assert [strict_exponential_backoff_ms(config, p, 3) for p in (0, 1, 2)] == [0, 250, 500]
    assert strict_exponential_backoff_ms(config, -1, 3) == 1000


def test_quorum_config_from_kafka_properties() -> None:
    config = QuorumConfig.from_properties({"controller.quorum.fetch.timeout.ms": "3000",
                                           "controller.quorum.election.timeout.ms": 500,
                                           "node.id": "1"})
    assert (config.fetch_timeout_ms, config.election_timeout_ms) == (3000, 500)
    assert config.check_quorum_timeout_ms == 4500
    with pytest.raises(ValueError, match="controller.quorum.fetch.timeout.ms"):
        QuorumConfig.from_properties({"controller.quorum.fetch.timeout.ms": "0"})
    with pytest.raises(ValueError, match="must be an integer"):
        QuorumConfig.from_properties({"controller.quorum.retry.backoff.ms": "soon"})
