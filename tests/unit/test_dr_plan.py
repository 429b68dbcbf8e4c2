"""dr/plan.py: which cluster is active, what `dr failover` would do, and the one-line refusals,
from observed views of a pair's two clusters (no I/O)."""
from __future__ import annotations

import pytest

from core.protocol.dr import FENCED
from dr.plan import (ClusterView, DrPair, PairView, PartitionLag, PlanError, find_pair, plan_failback,
                     plan_failover)

PAIR = DrPair("eu-west-1", "us-east-1", "eu-west", "us-east")
EU, US = PAIR.first, PAIR.second
DOWN = ClusterView(EU, reachable=False, error="connection refused")


def cluster(name: str, role: str, epoch: int = 0, topics=("orders", "payments"), partitions=3) -> ClusterView:
    return ClusterView(name, True, epoch, {t: (partitions, role) for t in topics})


def view(eu: ClusterView, us: ClusterView, lag=None) -> PairView:
    return PairView(PAIR, {EU: eu, US: us}, lag or {})


NORMAL = view(cluster(EU, ""), cluster(US, EU))


# Each row: the two clusters as observed -> the active cluster.
@pytest.mark.parametrize("eu, us, active", [
    (cluster(EU, ""), cluster(US, EU), EU),                       # eu-west serves
    (cluster(EU, US), cluster(US, ""), US),                       # after a failover
    (cluster(EU, FENCED), cluster(US, EU), None),                 # fenced, draining
    (cluster(EU, FENCED), cluster(US, ""), None),                 # promoted, not reversed
    (cluster(EU, ""), cluster(US, ""), None),                     # split brain
    (DOWN, cluster(US, EU), EU),                                  # eu-west lost: still active
    (DOWN, cluster(US, ""), US),                                  # eu-west lost, us-east promoted
    (cluster(EU, ""), cluster(US, EU, topics=("orders",)), EU),   # a topic the link has yet to create
    (cluster(EU, "", topics=()), cluster(US, EU, topics=()), None),   # no DR topics at all
])
def test_the_active_cluster_is_read_off_the_topics_roles(eu, us, active):
    assert view(eu, us).active() == active


def test_a_planned_failover_fences_drains_promotes_and_reverses_with_rpo_0():
    lag = {("orders", 0): PartitionLag(40, 1.5), ("orders", 1): PartitionLag(2, 0.2)}
    plan = plan_failover(view(cluster(EU, "", epoch=3), cluster(US, EU, epoch=5), lag), "eu-west")
    assert (plan.kind, plan.source, plan.target, plan.epoch) == ("planned", EU, US, 6)
    assert [s.name for s in plan.steps] == ["take-epoch", "fence", "drain", "record-syncs", "promote",
                                            "switch-clients", "sync-groups", "reverse"]
    assert plan.topics == {"orders": 3, "payments": 3}
    assert "42 records behind" in plan.steps[2].summary
    assert plan.ready, plan.failed_checks()
    assert (plan.rpo_records, plan.rpo_seconds) == (0, 0.0)
    assert plan.rto_seconds >= 1.5          # at least the drain of the oldest backlog


def test_an_unplanned_failover_needs_force_and_expects_to_lose_the_lag():
    lag = {("orders", 0): PartitionLag(40, 1.5), ("payments", 2): PartitionLag(7, 3.0)}
    plan = plan_failover(view(DOWN, cluster(US, EU, epoch=2), lag), "eu-west")
    assert plan.kind == "unplanned" and not plan.ready
    assert [c.name for c in plan.failed_checks()] == ["force"]
    assert "add --force" in plan.failed_checks()[0].detail
    plan = plan_failover(view(DOWN, cluster(US, EU, epoch=2), lag), "eu-west", force=True)
    assert plan.ready and plan.epoch == 3
    assert [s.name for s in plan.steps] == ["take-epoch", "seal", "record-syncs", "promote", "restore-groups",
                                            "switch-clients"]
    assert (plan.rpo_records, plan.rpo_seconds) == (47, 3.0)


@pytest.mark.parametrize("eu, us, failing, words", [
    (cluster(EU, ""), ClusterView(US, False, error="timed out"), "target-reachable", "timed out"),
    (cluster(EU, FENCED), cluster(US, EU), "roles", "2 DR topics half way through a failover"),
    (cluster(EU, ""), cluster(US, EU, topics=("orders",)), "topics", "without a copy on us-east-1 yet: payments"),
    (cluster(EU, ""), cluster(US, EU, partitions=6), "topics", "partition counts differ"),
])
def test_checks_that_stop_a_failover_before_it_changes_anything(eu, us, failing, words):
    plan = plan_failover(view(eu, us), "eu-west")
    assert not plan.ready
    assert failing in [c.name for c in plan.failed_checks()]
    assert any(words in c.detail for c in plan.failed_checks()), plan.failed_checks()


def test_topics_active_on_either_side_move_with_their_region():
    """A topic made in us-east is active there (the link back made eu-west's copy a replica):
    `dr failover eu-west` moves eu-west's topics only, and the pair has no single active region."""
    eu = ClusterView(EU, True, 0, {"orders": (3, ""), "invoices": (2, US)})
    us = ClusterView(US, True, 0, {"orders": (3, EU), "invoices": (2, "")})
    v = view(eu, us)
    assert v.roles() == {"invoices": US, "orders": EU} and v.active() is None
    plan = plan_failover(v, "eu-west")
    assert plan.ready and plan.topics == {"orders": 3}
    assert plan_failover(v, "us-east").topics == {"invoices": 2}


def test_failing_over_the_region_that_is_already_standby_is_refused():
    with pytest.raises(PlanError, match="us-east is already the active region of eu-west-1~us-east-1"):
        plan_failover(view(cluster(EU, US), cluster(US, "")), "eu-west")
    # ... and going back is a plan like any other.
    assert plan_failover(view(cluster(EU, US), cluster(US, "")), "us-east").target == EU


REGIONS = ["eu-west", "us-east", "ap-south"]


@pytest.mark.parametrize("region, to, words", [
    ("mars", None, "REGION: no region named 'mars' (regions: eu-west, us-east, ap-south)"),
    ("eu-west", "mars", "--to: no region named 'mars'"),
    ("ap-south", None, "REGION: ap-south is in no DR pair"),
    ("eu-west", "ap-south", "--to: no DR pair joins eu-west and ap-south"),
    ("eu-west", "eu-west", "--to: no DR pair joins eu-west and eu-west"),
])
def test_bad_regions_get_one_line(region, to, words):
    with pytest.raises(PlanError) as raised:
        find_pair([PAIR], REGIONS, region, to)
    assert str(raised.value) == words or str(raised.value).startswith(words)
    assert "\n" not in str(raised.value)


def test_the_pair_is_found_from_either_region():
    assert find_pair([PAIR], REGIONS, "eu-west", None) is PAIR
    assert find_pair([PAIR], REGIONS, "us-east", "eu-west") is PAIR


PROMOTED = {"orders": [10, 10, 10], "payments": [5, 5, 5]}


def test_failback_after_an_unplanned_failover_fences_finds_keeps_seeds_and_reverses():
    back = view(cluster(EU, "", epoch=1), cluster(US, "", epoch=2))     # both writable
    plan = plan_failback(back, "eu-west", republish=False, promotion=PROMOTED)
    assert plan is not None and plan.ready
    assert (plan.kind, plan.source, plan.target, plan.epoch) == ("failback", EU, US, 3)
    assert [s.name for s in plan.steps] == ["take-epoch", "fence", "find-stranded", "keep-stranded",
                                            "seed-syncs", "reverse"]
    assert "orders.stranded, payments.stranded on eu-west-1" in plan.steps[3].summary
    assert plan.topics == {"orders": 3, "payments": 3}
    again = plan_failback(back, "eu-west", republish=True, promotion=PROMOTED)
    assert again is not None and again.steps[3].name == "republish-stranded"


# Each row: the pair as observed, the promotion points the history has -> the failed checks.
@pytest.mark.parametrize("eu, us, promotion, failed", [
    (DOWN, cluster(US, ""), PROMOTED, ["returning-reachable"]),
    (cluster(EU, ""), cluster(US, ""), None, ["promotion"]),                   # another state dir
    (cluster(EU, ""), cluster(US, ""), {"orders": [1, 1]}, ["promotion"]),     # partitions differ
    (cluster(EU, FENCED), cluster(US, ""), PROMOTED, []),                      # a failback that stopped
])
def test_failback_checks(eu, us, promotion, failed):
    plan = plan_failback(view(eu, us), "eu-west", republish=False, promotion=promotion)
    assert plan is not None and [c.name for c in plan.failed_checks()] == failed


def test_failback_with_nothing_stranded_is_the_planned_failover_back():
    # After a planned failover the old side is already a replica: nothing to settle.
    assert plan_failback(view(cluster(EU, US), cluster(US, "")), "eu-west", republish=False, promotion=None) is None
    with pytest.raises(PlanError, match="eu-west is already the active region"):
        plan_failback(NORMAL, "eu-west", republish=False, promotion=None)


def test_a_failover_of_a_pair_writable_on_both_sides_points_at_failback():
    plan = plan_failover(view(cluster(EU, ""), cluster(US, "")), "eu-west")
    [roles] = plan.failed_checks()
    assert "dr failback REGION" in roles.detail


def test_configs_that_drifted_apart_warn_but_do_not_stop_a_failover():
    eu = ClusterView(EU, True, 0, {"orders": (3, "")}, configs={"orders": {"retention.ms": "86400000"}})
    us = ClusterView(US, True, 0, {"orders": (3, EU)}, configs={"orders": {}})
    plan = plan_failover(view(eu, us), "eu-west")
    [configs] = [c for c in plan.checks if c.name == "configs"]
    assert not configs.ok and not configs.blocking
    assert "orders (retention.ms: 86400000 here, None there)" in configs.detail
    assert plan.ready and plan.failed_checks() == []
    same = ClusterView(US, True, 0, {"orders": (3, EU)}, configs={"orders": {"retention.ms": "86400000"}})
    assert [c.ok for c in plan_failover(view(eu, same), "eu-west").checks if c.name == "configs"] == [True]


def test_logins_and_acls_the_target_lacks_warn_but_do_not_stop_a_failover():
    from core.client.acl_admin import AclBinding, AclOperation, AclPermission, PatternType, ResourceType
    from dr.access import Access
    read = AclBinding(ResourceType.TOPIC, "orders", PatternType.LITERAL, "User:alice", "*", AclOperation.READ,
                      AclPermission.ALLOW)
    eu = ClusterView(EU, True, 0, {"orders": (3, "")}, access=Access(frozenset({read}), {"alice": frozenset({"S"})}))
    us = ClusterView(US, True, 0, {"orders": (3, EU)}, access=Access(frozenset(), {}))
    plan = plan_failover(view(eu, us), "eu-west")
    [access] = [c for c in plan.checks if c.name == "access"]
    assert not access.ok and not access.blocking and plan.ready
    assert access.detail == (f"{US} lacks 2 of {EU}'s logins and ACLs: user alice has no S credentials; "
                             f"no ACL User:alice ALLOW READ on topic orders")
    same = ClusterView(US, True, 0, {"orders": (3, EU)}, access=eu.access)
    assert [c.ok for c in plan_failover(view(eu, same), "eu-west").checks if c.name == "access"] == [True]
    # Not read (an older view, or a drill's canary-only view): no check rather than a guess.
    assert "access" not in [c.name for c in plan_failover(NORMAL, "eu-west").checks]
