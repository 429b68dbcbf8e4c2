"""dr/console/view.py: the platform at a glance, from the overview's instant vectors, by table:
each row is what the nodes report and the health and words the console must show for it."""
from __future__ import annotations

import pytest

from dr.console.view import QUORUM_LAG_WARN, links_view, platform_view

NODES = ("a:1", "a:2", "a:3")


def vector(values: dict[str, float], **extra: str) -> dict:
    return {tuple(sorted({"instance": inst, "region": "eu", "cluster": "eu-1", **extra}.items())): v
            for inst, v in values.items()}


def healthy(**overrides) -> dict:
    """A 3-node cluster, every node up, node 3 the active controller, and `overrides` per gauge."""
    base = {
        "up": {n: 1 for n in NODES},
        "leader": {n: 3 for n in NODES}, "epoch": {n: 7 for n in NODES},
        "active": {"a:1": 0, "a:2": 0, "a:3": 1},
        "fenced": {n: 0 for n in NODES}, "unfenced": {n: 3 for n in NODES},
        "offline": {n: 0 for n in NODES}, "under_replicated": {n: 0 for n in NODES},
        "under_min_isr": {n: 0 for n in NODES}, "at_min_isr": {n: 0 for n in NODES},
        "leaders": {"a:1": 2, "a:2": 2, "a:3": 2}, "replicas": {n: 6 for n in NODES},
        "applied": {n: 500 for n in NODES},
    }
    for name, values in overrides.items():
        base[name] = {**base.get(name, {}), **values}
    # A node that is down has only `up` (its other series are stale): drop them, as scraping does.
    down = [n for n, v in base["up"].items() if v == 0]
    return {name: vector({n: v for n, v in values.items() if name == "up" or n not in down})
            for name, values in base.items()}


KNOWN = {f"a:{i}": {"node_id": str(i), "roles": "broker,controller", "rack": f"z{i}"} for i in (1, 2, 3)}


@pytest.mark.parametrize("overrides, health, words", [
    ({}, "ok", []),
    ({"up": {"a:2": 0}}, "bad", ["node 2 is down"]),
    ({"offline": {"a:3": 4}}, "bad", ["4 partitions offline"]),
    ({"under_min_isr": {"a:1": 1}}, "bad", ["1 partition under min ISR (acks=all refused)"]),
    ({"under_replicated": {"a:1": 2, "a:2": 1}}, "warn", ["3 partitions under-replicated"]),
    ({"at_min_isr": {"a:1": 1}}, "warn", ["1 partition at min ISR"]),
    ({"fenced": {"a:3": 1}}, "warn", ["1 fenced broker"]),
    ({"active": {"a:3": 0}}, "bad", ["no active controller"]),
    ({"active": {"a:1": 1}}, "bad", ["2 active controllers"]),
    ({"applied": {"a:1": 500 - QUORUM_LAG_WARN - 1}}, "warn", [f"metadata quorum lag {QUORUM_LAG_WARN + 1} records"]),
    ({"applied": {"a:1": 500 - QUORUM_LAG_WARN}}, "ok", []),
])
def test_a_clusters_health_and_its_words(overrides, health, words):
    view = platform_view(healthy(**overrides), KNOWN, ["eu"])
    [region] = view["regions"]
    [cluster] = region["clusters"]
    assert (cluster["health"], cluster["problems"]) == (health, words)
    assert region["health"] == view["health"] == health


def test_a_dead_node_is_red_by_its_id_and_counts_nothing_it_said_before():
    view = platform_view(healthy(up={"a:2": 0}, under_replicated={"a:1": 3}), KNOWN, ["eu"])
    cluster = view["regions"][0]["clusters"][0]
    node2 = next(n for n in cluster["nodes"] if n["node_id"] == "2")
    assert (node2["up"], node2["health"], node2["problems"]) == (False, "bad", ["down: does not answer"])
    assert node2["leaders"] is None
    assert cluster["partitions"]["leaders"] == 4            # nodes 1 and 3 only
    assert cluster["controller"] == {"leader": 3, "epoch": 7}
    assert [n["node_id"] for n in cluster["nodes"]] == ["1", "2", "3"]


def test_a_node_never_described_is_shown_by_its_instance_and_regions_keep_the_topologys_order():
    view = platform_view(healthy(), {}, ["us", "eu"])
    assert [r["name"] for r in view["regions"]] == ["us", "eu"]
    assert view["regions"][0]["health"] == "bad"             # us: nothing answers there
    assert view["regions"][0]["problems"] == ["no cluster answers (or none is known)"]
    assert [n["instance"] for n in view["regions"][1]["clusters"][0]["nodes"]] == list(NODES)


def test_quorum_lag_is_each_nodes_distance_from_the_highest_applied_offset():
    view = platform_view(healthy(applied={"a:1": 400, "a:2": 480}), KNOWN)
    nodes = view["regions"][0]["clusters"][0]["nodes"]
    assert [n["metadata_lag"] for n in nodes] == [100, 20, 0]


@pytest.mark.parametrize("lag_s, errors, age, health", [
    (5, 0, 10, "ok"), (31, 0, 10, "warn"), (61, 0, 10, "bad"), (5, 0.5, 10, "warn"), (5, 0, 90, "warn"),
])
def test_a_links_health_against_its_rpo_target(lag_s, errors, age, health):
    key = (("link", "eu->us"),)
    view = links_view({"link_lag_records": {key: 10}, "link_lag_seconds": {key: lag_s},
                       "link_rpo_target": {key: 60}, "link_errors": {key: errors},
                       "link_checkpoint_age": {key: age}})
    assert view[0]["health"] == health
    assert (view[0]["lag_records"], view[0]["rpo_target_s"]) == (10, 60)
