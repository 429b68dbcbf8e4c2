"""core/gateway/endpoints.py: what a client learns of brokers through the gateway (no I/O):
slots for ids, the gateway's addresses for hosts, in every response that names brokers, and
the API versions it may use. Each case also goes through the real codec and back."""
from __future__ import annotations

import pytest

from core.gateway.endpoints import (GATEWAY_MAX_VERSIONS, Address, SlotMap, advertised_versions, pair_cluster_id,
                                    rewrite_describe_cluster, rewrite_find_coordinator, rewrite_metadata)
from core.protocol import messages as m
from core.protocol.api_keys import ApiKey

GATEWAY = [Address("gw.example", 9092), Address("gw.example", 9093), Address("gw.example", 9094)]
MR = m.MetadataResponse


def roundtrip(api_key: int, version: int, resp):
    """Encode and decode as the wire would: the rewritten response is one the client can read."""
    codec = m.API[api_key].response
    return codec.decode(version, codec.encode(version, resp))


# Each row: the active cluster's broker ids -> slot of each id (-1: none).
@pytest.mark.parametrize("brokers, expected", [
    ([1, 2, 3], {1: 0, 2: 1, 3: 2, -1: -1, 7: -1}),          # us-east-1 and eu-west-1 alike
    ([101, 5, 42], {5: 0, 42: 1, 101: 2}),                    # in id order, whatever the ids
    ([1, 2, 3, 4], {1: 0, 2: 1, 3: 2, 4: -1}),                # more brokers than slots: the last unserved
    ([9], {9: 0}),                                            # fewer: slots 1 and 2 forward nowhere
])
def test_slots_are_the_active_clusters_brokers_in_id_order(brokers, expected):
    slots = SlotMap(GATEWAY, brokers)
    assert {b: slots.slot(b) for b in expected} == expected
    assert [slots.broker(s) for s in range(3)] == (sorted(brokers) + [None, None, None])[:3]


def test_metadata_names_only_slots_and_the_gateways_addresses():
    resp = MR(brokers=[MR.MetadataResponseBroker(node_id=i, host=f"us{i}.internal", port=29092 + i, rack=f"zone-{i}")
                       for i in (3, 1, 2, 4)],
              cluster_id="us-east-1", controller_id=2,
              topics=[MR.MetadataResponseTopic(error_code=0, name="orders", partitions=[
                  MR.MetadataResponsePartition(error_code=0, partition_index=0, leader_id=3, leader_epoch=7,
                                               replica_nodes=[3, 1, 4], isr_nodes=[3, 1], offline_replicas=[4]),
                  MR.MetadataResponsePartition(error_code=5, partition_index=1, leader_id=-1, leader_epoch=7,
                                               replica_nodes=[2], isr_nodes=[], offline_replicas=[2]),
                  MR.MetadataResponsePartition(error_code=0, partition_index=2, leader_id=4, leader_epoch=1,
                                               replica_nodes=[4, 1], isr_nodes=[4, 1], offline_replicas=[])])])
    out = roundtrip(ApiKey.METADATA, 12, rewrite_metadata(resp, SlotMap(GATEWAY, [1, 2, 3, 4])))
    assert [(b.node_id, b.host, b.port, b.rack) for b in out.brokers] == [
        (0, "gw.example", 9092, "zone-1"), (1, "gw.example", 9093, "zone-2"), (2, "gw.example", 9094, "zone-3")]
    assert out.controller_id == 1 and out.cluster_id == "us-east-1"
    p0, p1, p2 = out.topics[0].partitions
    assert (p0.leader_id, p0.leader_epoch, p0.replica_nodes, p0.isr_nodes, p0.offline_replicas) == (2, 7, [2, 0], [2, 0], [])
    assert (p1.error_code, p1.leader_id, p1.replica_nodes, p1.offline_replicas) == (5, -1, [1], [1])
    # Led by the broker no slot holds: no leader the client could reach; it asks again.
    assert (p2.leader_id, p2.replica_nodes) == (-1, [0])


@pytest.mark.parametrize("version", [3, 4])
def test_find_coordinator_answers_with_a_slot_old_and_new_style(version):
    FR = m.FindCoordinatorResponse
    if version < 4:
        resp = FR(error_code=0, node_id=3, host="us3.internal", port=29095)
    else:
        resp = FR(coordinators=[FR.Coordinator(key="billing", node_id=3, host="us3.internal", port=29095, error_code=0),
                                FR.Coordinator(key="audit", node_id=-1, host="", port=-1, error_code=15)])
    out = roundtrip(ApiKey.FIND_COORDINATOR, version, rewrite_find_coordinator(resp, SlotMap(GATEWAY, [1, 2, 3])))
    if version < 4:
        assert (out.node_id, out.host, out.port) == (2, "gw.example", 9094)
    else:
        assert [(c.key, c.node_id, c.host, c.port, c.error_code) for c in out.coordinators] == [
            ("billing", 2, "gw.example", 9094, 0), ("audit", -1, "", -1, 15)]


def test_describe_cluster_names_only_slots():
    DR = m.DescribeClusterResponse
    resp = DR(cluster_id="eu-west-1", controller_id=1, brokers=[
        DR.DescribeClusterBroker(broker_id=i, host=f"eu{i}", port=19092 + i, rack=None) for i in (2, 1, 3)])
    out = roundtrip(ApiKey.DESCRIBE_CLUSTER, 1, rewrite_describe_cluster(resp, SlotMap(GATEWAY, [1, 2, 3])))
    assert [(b.broker_id, b.port) for b in out.brokers] == [(0, 9092), (1, 9093), (2, 9094)]
    assert out.controller_id == 0


def test_clients_see_the_pairs_cluster_id_whichever_cluster_is_active():
    pair_id = pair_cluster_id("eu-west-1~us-east-1")
    assert len(pair_id) == 22 and pair_id == pair_cluster_id("eu-west-1~us-east-1")    # every gateway's
    assert pair_id != pair_cluster_id("orders-eu~orders-us")
    for cluster in ("eu-west-1-id", "us-east-1-id"):
        slots = SlotMap(GATEWAY, [1, 2, 3], pair_id)
        meta = roundtrip(ApiKey.METADATA, 12, rewrite_metadata(
            MR(brokers=[], cluster_id=cluster, controller_id=1, topics=[]), slots))
        assert meta.cluster_id == pair_id
        # Metadata v0-1 carry no cluster id: none is invented.
        assert rewrite_metadata(MR(brokers=[], cluster_id=None, controller_id=1, topics=[]), slots).cluster_id is None
        DR = m.DescribeClusterResponse
        described = roundtrip(ApiKey.DESCRIBE_CLUSTER, 1, rewrite_describe_cluster(
            DR(cluster_id=cluster, controller_id=1, brokers=[]), slots))
        assert described.cluster_id == pair_id


@pytest.mark.parametrize("cluster, gateway, expected", [
    # Both sides' ranges meet; Produce and Fetch are capped below the versions that name leaders.
    ({0: (3, 11), 1: (4, 17), 3: (0, 12)}, {0: (3, 11), 1: (4, 17), 3: (0, 12)},
     {0: (3, GATEWAY_MAX_VERSIONS[0]), 1: (4, GATEWAY_MAX_VERSIONS[1]), 3: (0, 12)}),
    ({3: (0, 9)}, {3: (1, 12)}, {3: (1, 9)}),                 # the intersection
    ({3: (0, 12), 60: (0, 1)}, {3: (0, 12)}, {3: (0, 12)}),   # an API only the cluster has: not offered
    ({3: (10, 12)}, {3: (0, 9)}, {}),                         # no version in common: not offered
])
def test_the_client_is_offered_what_both_speak(cluster, gateway, expected):
    assert advertised_versions(cluster, gateway) == expected


def test_a_gateway_without_addresses_is_refused():
    with pytest.raises(ValueError, match="at least one address"):
        SlotMap([], [1, 2, 3])
