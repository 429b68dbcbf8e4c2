"""The client's cluster view (pure data) and bootstrap parsing."""
from __future__ import annotations

import pytest

from core.client.client import parse_bootstrap
from core.client.cluster import ClusterView
from core.protocol import messages as m

R = m.MetadataResponse


def response(topics: dict[str, dict[int, int]], *, error_topics=(), controller=1):
    return R(brokers=[R.MetadataResponseBroker(node_id=n, host=f"b{n}", port=9092, rack="r")
                      for n in (1, 2)],
             cluster_id="c", controller_id=controller,
             topics=[R.MetadataResponseTopic(name=t, topic_id=bytes([i + 1]) * 16, partitions=[
                         R.MetadataResponsePartition(partition_index=p, leader_id=ldr, leader_epoch=3,
                                                     replica_nodes=[1, 2], isr_nodes=[1])
                         for p, ldr in parts.items()])
                     for i, (t, parts) in enumerate(topics.items())]
             + [R.MetadataResponseTopic(name=t, error_code=3) for t in error_topics])


def test_parse_bootstrap():
    assert parse_bootstrap("a:1, b:2") == [("a", 1), ("b", 2)]
    assert parse_bootstrap(["[::1]:9094", "PLAINTEXT://h:7", "plain"]) == [("::1", 9094), ("h", 7), ("plain", 9092)]
    with pytest.raises(ValueError):
        parse_bootstrap(" , ")


def test_apply_and_queries():
    view = ClusterView()
    assert view.age_ms() == float("inf")
    view.apply(response({"a": {0: 1, 1: -1}, "b": {0: 2}}, error_topics=["gone"]), all_topics=True)
    assert view.controller_id == 1 and view.brokers[2].host == "b2" and view.brokers[1].rack == "r"
    assert view.partitions_for("a") == [0, 1]
    assert view.available_partitions("a") == [0]
    assert view.leader_for("a", 0) == 1 and view.leader_for("a", 1) is None
    assert view.leader_epoch("a", 0) == 3 and view.leader_epoch("zz", 0) == -1
    assert view.topic_id("b") == b"\x02" * 16 and view.topic_names_by_id[b"\x01" * 16] == "a"
    assert view.partitions_for("gone") is None and view.topic_error("gone") == 3
    assert view.age_ms() < 1000


def test_subset_refresh_merges_full_refresh_replaces():
    view = ClusterView()
    view.apply(response({"a": {0: 1}, "b": {0: 2}}), all_topics=True)
    view.apply(response({"a": {0: 2}}), all_topics=False)
    assert view.leader_for("a", 0) == 2 and view.leader_for("b", 0) == 2  # b kept
    view.apply(response({"a": {0: 1}}), all_topics=True)
    assert view.topic("b") is None and view.topic_id("b") is None
