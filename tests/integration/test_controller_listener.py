"""Bad and misdirected input on a controller listener of a real controller process.

A controller listener serves the quorum's RPCs and the controller APIs only. Each bad request
gets the answer Kafka's controller gives (an error code, or the connection closed for an API
this listener does not serve), and the controller keeps serving afterwards.
"""
from __future__ import annotations

import anyio
import pytest

from core.client.connection import BrokerConnection
from core.client.errors import KafkaConnectionError
from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.raft import wire
from core.raft.messages import FetchRequest, VoteRequest
from tests.support.cluster import KRaftCluster


@pytest.fixture(scope="module")
def controller(tmp_path_factory):
    with KRaftCluster(tmp_path_factory.mktemp("controller"), controllers=1) as cluster:
        cluster.wait_for_leader()
        yield cluster


def call(cluster, fn):
    async def run():
        conn = await BrokerConnection("127.0.0.1", cluster.controller_ports[1]).connect()
        try:
            return await fn(conn)
        finally:
            await conn.close()
    return anyio.run(run)


def test_api_versions_lists_the_controller_apis_only(controller):
    async def versions(conn):
        return conn.api_versions
    apis = call(controller, versions)
    # SaslHandshake (17) and SaslAuthenticate (36) too, as Kafka's controller listener lists
    # them (their JSON names the controller among their listeners); the controller also takes
    # the forwarded SCRAM and ACL changes (51, 30, 31).
    assert {52, 53, 54, 55, 59, 1, 62, 63, 64, 67, 19, 20, 33, 37, 43, 44, 45, 46, 56, 60, 18, 17, 36, 51,
            30, 31} == set(apis)
    assert apis[1] == (12, 17)        # Fetch here is KRaft's: v12+ (LastFetchedEpoch, DivergingEpoch)
    assert 0 not in apis and 3 not in apis   # no Produce, no Metadata on a controller listener


def test_a_client_api_closes_the_connection_and_the_controller_keeps_serving(controller):
    async def produce(conn):
        return await conn.send(m.MetadataRequest(topics=None, allow_auto_topic_creation=False), 3, version=12)
    with pytest.raises(KafkaConnectionError):
        call(controller, produce)
    assert controller.describe() is not None


def test_a_vote_from_another_cluster_is_inconsistent_cluster_id(controller):
    async def vote(conn):
        key, obj = wire.to_wire(VoteRequest(cluster_id="AAAAAAAAAAAAAAAAAAAAAA", candidate_epoch=99,
                                            candidate_id=7, last_offset_epoch=99, last_offset=1000), 1)
        return await conn.send(obj, key, version=1)
    answer = call(controller, vote)
    assert answer.error_code == ErrorCode.INCONSISTENT_CLUSTER_ID
    # ...and it did not disturb the quorum: same leader, epoch not bumped to 99.
    d = controller.describe()
    assert d.leader_id == 1 and d.leader_epoch < 99


def test_a_fetch_for_another_partition_is_refused_as_kafka_refuses_it(controller):
    async def fetch(conn):
        key, obj = wire.to_wire(FetchRequest(cluster_id=None, replica_id=5, max_wait_ms=0, max_bytes=1024,
                                             current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=0,
                                             partition_max_bytes=1024), 13)
        obj.topics[0].topic_id = bytes(16)   # not __cluster_metadata's id
        return await conn.send(obj, key, version=13)
    answer = call(controller, fetch)
    assert answer.error_code == ErrorCode.INVALID_REQUEST


def test_registration_with_the_wrong_cluster_id_is_refused(controller):
    async def register(conn):
        R = m.BrokerRegistrationRequest
        return await conn.send(R(broker_id=50, cluster_id="AAAAAAAAAAAAAAAAAAAAAA", incarnation_id=bytes(range(16)),
                                 listeners=[], features=[], rack=None, log_dirs=[]), 62)
    assert call(controller, register).error_code == ErrorCode.INCONSISTENT_CLUSTER_ID


def test_describe_cluster_for_brokers_on_a_controller_listener_is_mismatched(controller):
    async def describe(conn):
        return await conn.send(m.DescribeClusterRequest(include_cluster_authorized_operations=False,
                                                        endpoint_type=1), 60, version=1)
    answer = call(controller, describe)
    assert answer.error_code == ErrorCode.MISMATCHED_ENDPOINT_TYPE


def test_an_admin_request_needs_a_broker_to_place_replicas(controller):
    # With no broker registered there is nowhere to put a partition: Kafka's message.
    from tests.support.cluster import create_topics_request

    async def create(conn):
        return await conn.send(create_topics_request(["t"]), 19)
    answer = call(controller, create)
    assert answer.topics[0].error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert "fenced" in answer.topics[0].error_message or "brokers" in answer.topics[0].error_message
