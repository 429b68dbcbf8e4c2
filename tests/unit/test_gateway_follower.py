"""The gateway's view of the DR controller (core/gateway/follower.py): from the records each
cluster keeps, the best decision wins, and a gateway that hears from no cluster says so."""
from __future__ import annotations

import time

import pytest

from core.gateway.follower import DecisionFollower
from core.protocol.dr import DRAINING, SERVING, SWITCHING, Decision

PAIR = "eu-1~us-1"


def record(active: str, epoch: int, phase: str) -> bytes:
    return Decision(PAIR, epoch, "r", active, "h:1", phase, 0.0, "test").encode()[1]


def follower() -> tuple[DecisionFollower, list[Decision]]:
    seen: list[Decision] = []
    return DecisionFollower(PAIR, {"eu-1": "a:1", "us-1": "b:1"}, seen.append), seen


@pytest.mark.parametrize("reads, best", [
    # (cluster, active, epoch, phase) in the order the gateway reads them
    ([("eu-1", "us-1", 1, DRAINING), ("eu-1", "us-1", 1, SWITCHING), ("eu-1", "us-1", 1, SERVING)], (1, SERVING)),
    # A cluster that was away has an older record: the other cluster's newer one stands.
    ([("us-1", "us-1", 3, SERVING), ("eu-1", "eu-1", 2, SERVING)], (3, SERVING)),
    # Read out of order across clusters: serving is not undone by the same epoch's switching.
    ([("us-1", "us-1", 4, SERVING), ("eu-1", "us-1", 4, SWITCHING)], (4, SERVING)),
    ([("eu-1", "eu-1", 5, DRAINING), ("us-1", "eu-1", 5, SERVING)], (5, SERVING)),
])
def test_the_highest_epoch_and_phase_wins_whatever_order_the_clusters_answer_in(reads, best):
    f, seen = follower()
    for cluster, active, epoch, phase in reads:
        f._consider(f.sources[cluster], record(active, epoch, phase))
    assert (f.best.epoch, f.best.phase) == best
    assert [(d.epoch, d.phase) for d in seen][-1] == best


def test_a_record_of_another_shape_is_ignored():
    f, seen = follower()
    f._consider(f.sources["eu-1"], b"{not json")
    f._consider(f.sources["eu-1"], b'{"pair": "eu-1~us-1"}')
    assert f.best is None and seen == []


def test_a_gateway_that_hears_from_no_cluster_says_it_serves_a_stale_decision():
    f, _ = follower()
    f.stale_after_s = 5
    assert f.stale and f.seconds_since_answer() == float("inf")
    f.sources["us-1"].answered_at = time.monotonic()
    assert not f.stale
    f.sources["us-1"].answered_at = time.monotonic() - 6
    assert f.stale and 5 < f.seconds_since_answer() < 7
