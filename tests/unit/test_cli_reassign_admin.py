"""The Admin calls behind `seaway leaders elect` and `seaway reassign` (core/client/replica_admin.py):
the requests they build, how answers map to per-partition results, and what is retried.

A real KafkaClient whose connections are replaced by a scripted fake: every request the admin
sends is recorded, and the test decides each answer.
"""
from __future__ import annotations

import pytest

from core.client import Admin, KafkaClient
from core.client.errors import UnsupportedVersionError
from core.client.replica_admin import ElectionType, PartitionReassignment
from core.protocol import messages as m
from core.protocol.errors import ErrorCode as E
from core.protocol.errors import KafkaError

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


class FakeConn:
    def __init__(self, versions, answers):
        self.versions = versions
        self.answers = list(answers)
        self.sent: list[tuple[int, int, object]] = []

    def version_for(self, api_key, max_version=None):
        if api_key not in self.versions:
            raise UnsupportedVersionError(f"fake does not support key {api_key}")
        return self.versions[api_key]

    async def send(self, request, api_key=None, *, version=None, timeout_ms=None, expect_response=True):
        version = self.version_for(api_key) if version is None else version   # as the real send
        self.sent.append((api_key, version, request))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer(request) if callable(answer) else answer


class FakeClient(KafkaClient):
    def __init__(self, conn):
        super().__init__("127.0.0.1:1", retry_backoff_ms=1, retry_backoff_max_ms=2, default_api_timeout_ms=2000)
        self._started = True
        self.conn = conn

    async def connection(self, node_id):
        assert node_id == 7, "controller-bound requests go to the controller Metadata named"
        return self.conn

    def controller_node(self):
        return 7

    async def refresh_metadata(self, topics=None):
        return None


def admin(answers, versions=None):
    conn = FakeConn(versions or {43: 2, 45: 0, 46: 0}, answers)
    return Admin(FakeClient(conn), timeout_ms=2000), conn


EL = m.ElectLeadersResponse


def election_answer(results, error=0):
    """{topic: [(partition, code)]} -> an ElectLeaders answer."""
    return EL(throttle_time_ms=0, error_code=error, replica_election_results=[
        EL.ReplicaElectionResult(topic=t, partition_result=[
            EL.PartitionResult(partition_id=p, error_code=c, error_message=None if not c else "why")
            for p, c in parts]) for t, parts in results.items()])


# ---------------------------------------------------------------------------------- elect_leaders

async def test_elect_leaders_groups_partitions_by_topic_and_maps_each_result():
    a, conn = admin([election_answer({"t": [(0, 0), (1, E.ELECTION_NOT_NEEDED)],
                                      "u": [(3, E.PREFERRED_LEADER_NOT_AVAILABLE)]})])
    got = await a.elect_leaders("preferred", [("t", 0), ("u", 3), ("t", 1)])
    [(key, version, req)] = conn.sent
    assert (key, version, req.election_type) == (43, 2, 0)
    assert [(tp.topic, list(tp.partitions)) for tp in req.topic_partitions] == [("t", [0, 1]), ("u", [3])]
    assert got[("t", 0)] is None
    assert isinstance(got[("t", 1)], KafkaError) and got[("t", 1)].code == E.ELECTION_NOT_NEEDED
    assert got[("u", 3)].code == E.PREFERRED_LEADER_NOT_AVAILABLE    # an answer: sent once, not retried


async def test_elect_leaders_for_every_partition_sends_null_and_keeps_what_is_listed():
    a, conn = admin([election_answer({"t": [(2, 0)], "u": []})])
    got = await a.elect_leaders(ElectionType.UNCLEAN, None)
    assert conn.sent[0][2].topic_partitions is None and conn.sent[0][2].election_type == 1
    assert got == {("t", 2): None}


async def test_elect_leaders_retries_only_what_failed_for_a_passing_reason():
    a, conn = admin([
        election_answer({"t": [(0, E.NOT_CONTROLLER), (1, E.ELIGIBLE_LEADERS_NOT_AVAILABLE)]}),
        lambda req: election_answer({"t": [(p, 0) for tp in req.topic_partitions for p in tp.partitions]}),
    ])
    got = await a.elect_leaders("unclean", [("t", 0), ("t", 1)])
    assert [list(r.topic_partitions[0].partitions) for _, _, r in conn.sent] == [[0, 1], [0]]
    assert got[("t", 0)] is None and got[("t", 1)].code == E.ELIGIBLE_LEADERS_NOT_AVAILABLE


async def test_elect_leaders_top_level_errors():
    a, conn = admin([election_answer({}, error=E.NOT_CONTROLLER), election_answer({"t": [(0, 0)]})])
    assert await a.elect_leaders("preferred", [("t", 0)]) == {("t", 0): None}
    assert len(conn.sent) == 2
    a, conn = admin([election_answer({"t": [(0, E.CLUSTER_AUTHORIZATION_FAILED)]},
                                     error=E.CLUSTER_AUTHORIZATION_FAILED)])
    with pytest.raises(KafkaError) as err:
        await a.elect_leaders("preferred", [("t", 0)])
    assert err.value.code == E.CLUSTER_AUTHORIZATION_FAILED


async def test_elect_leaders_v0_has_no_unclean_elections():
    a, conn = admin([], versions={43: 0})
    with pytest.raises(KafkaError) as err:
        await a.elect_leaders("unclean", [("t", 0)])
    assert err.value.code == E.UNSUPPORTED_VERSION and conn.sent == []
    with pytest.raises(ValueError, match="unknown election type"):
        await a.elect_leaders("dirty", [("t", 0)])


async def test_a_missing_partition_result_is_an_error_not_a_success():
    a, _ = admin([election_answer({"t": [(0, 0)]})])
    got = await a.elect_leaders("preferred", [("t", 0), ("t", 1)])
    assert got[("t", 0)] is None and got[("t", 1)].code == E.UNKNOWN_SERVER_ERROR


# ---------------------------------------------------------------------------------- reassignments

AR = m.AlterPartitionReassignmentsResponse


def alter_answer(results, error=0):
    return AR(throttle_time_ms=0, error_code=error, error_message=None, responses=[
        AR.ReassignableTopicResponse(name=t, partitions=[
            AR.ReassignablePartitionResponse(partition_index=p, error_code=c, error_message=None)
            for p, c in parts]) for t, parts in results.items()])


async def test_alter_partition_reassignments_sends_targets_and_cancels():
    a, conn = admin([alter_answer({"t": [(0, 0), (1, E.NO_REASSIGNMENT_IN_PROGRESS)],
                                   "u": [(0, E.INVALID_REPLICA_ASSIGNMENT)]})])
    got = await a.alter_partition_reassignments({("t", 0): [3, 4], ("t", 1): None, ("u", 0): [9]})
    [(key, _, req)] = conn.sent
    assert key == 45
    assert [(t.name, [(p.partition_index, p.replicas) for p in t.partitions]) for t in req.topics] == \
        [("t", [(0, [3, 4]), (1, None)]), ("u", [(0, [9])])]
    assert got[("t", 0)] is None
    assert got[("t", 1)].code == E.NO_REASSIGNMENT_IN_PROGRESS
    assert got[("u", 0)].code == E.INVALID_REPLICA_ASSIGNMENT


async def test_alter_partition_reassignments_retries_a_moved_controller():
    a, conn = admin([alter_answer({}, error=E.NOT_CONTROLLER), alter_answer({"t": [(0, 0)]})])
    assert await a.alter_partition_reassignments({("t", 0): [1]}) == {("t", 0): None}
    assert len(conn.sent) == 2


LR = m.ListPartitionReassignmentsResponse


async def test_list_partition_reassignments():
    answer = LR(throttle_time_ms=0, error_code=0, error_message=None, topics=[
        LR.OngoingTopicReassignment(name="t", partitions=[LR.OngoingPartitionReassignment(
            partition_index=1, replicas=[3, 4, 1, 2], adding_replicas=[3, 4], removing_replicas=[1, 2])])])
    a, conn = admin([answer, answer])
    assert await a.list_partition_reassignments() == {
        ("t", 1): PartitionReassignment([3, 4, 1, 2], [3, 4], [1, 2])}
    assert conn.sent[0][2].topics is None
    await a.list_partition_reassignments([("t", 1), ("u", 0), ("t", 0)])
    assert [(t.name, list(t.partition_indexes)) for t in conn.sent[1][2].topics] == [("t", [1, 0]), ("u", [0])]


async def test_list_partition_reassignments_errors():
    a, _ = admin([LR(throttle_time_ms=0, error_code=E.CLUSTER_AUTHORIZATION_FAILED, error_message="no", topics=[])])
    with pytest.raises(KafkaError) as err:
        await a.list_partition_reassignments()
    assert err.value.code == E.CLUSTER_AUTHORIZATION_FAILED
    a, _ = admin([], versions={43: 2})
    with pytest.raises(KafkaError) as err:
        await a.list_partition_reassignments()
    assert err.value.code == E.UNSUPPORTED_VERSION


# ---------------------------------------------------------------------------------- broker configs

IR = m.IncrementalAlterConfigsResponse


async def test_broker_configs_go_to_that_broker_and_the_default_to_any():
    """execute --throttle sets the rates per broker; verify deletes them."""
    from core.client import ConfigResource

    sent = []

    class Routed(FakeClient):
        async def connection(self, node_id):
            conn = FakeConn({44: 1}, [lambda req: IR(throttle_time_ms=0, responses=[
                IR.AlterConfigsResourceResponse(error_code=0, error_message=None, resource_type=r.resource_type,
                                                resource_name=r.resource_name) for r in req.resources])])
            sent.append((node_id, conn))
            return conn

        def least_loaded_node(self):
            return 5

    a = Admin(Routed(None), timeout_ms=2000)
    got = await a.incremental_alter_configs({
        ConfigResource.broker(101): {"leader.replication.throttled.rate": "1000"},
        ConfigResource.broker(102): {"leader.replication.throttled.rate": None},
        ConfigResource.broker(): {"follower.replication.throttled.rate": "5"}})
    assert set(got.values()) == {None}
    by_node = {node: conn.sent[0][2].resources for node, conn in sent}
    assert sorted(by_node) == [5, 101, 102]
    assert [(r.resource_type, r.resource_name, [(c.name, c.config_operation, c.value) for c in r.configs])
            for r in by_node[101]] == [(4, "101", [("leader.replication.throttled.rate", 0, "1000")])]
    assert [(c.name, c.config_operation, c.value) for c in by_node[102][0].configs] == \
        [("leader.replication.throttled.rate", 1, None)]
    assert by_node[5][0].resource_name == ""
