"""dr/autofailover.py: when the daemon fails a pair over by itself (no I/O): only on evidence
from the controller and from the surviving region, each for the whole period."""
from __future__ import annotations

import pytest

from dr.autofailover import OutageClock, judge

AFTER = 30.0


# Each row: seconds the active cluster has not answered the controller (None: it answers),
# whether the partner answers, seconds since the partner last heard from it (None: it cannot
# say), what else is under way -> act?, and a word of the reason.
@pytest.mark.parametrize("unreachable_for, partner_up, heard_ago, busy, act, why", [
    (None, True, 100.0, None, False, "answers"),
    (29.0, True, 100.0, None, False, "29s of 30s"),                   # not for the whole period yet
    (30.0, True, 30.0, None, True, "unheard by the partner for 30s"),
    (300.0, True, 5.0, None, False, "heard from the active cluster 5s ago"),   # cut off from us only
    (300.0, True, None, None, False, "cannot say"),                   # no heartbeats copied: no witness
    (300.0, False, None, None, False, "partner does not answer"),     # nowhere to fail over to
    (300.0, True, 300.0, "failover #4 is half done", False, "half done"),
    (45.0, True, 31.0, None, True, "unreachable from the controller for 45s"),
])
def test_the_daemon_acts_only_on_both_views_for_the_whole_period(unreachable_for, partner_up, heard_ago, busy,
                                                                  act, why):
    verdict = judge(unreachable_for=unreachable_for, partner_reachable=partner_up, heard_ago=heard_ago,
                    after_s=AFTER, busy=busy)
    assert verdict.act is act and why in verdict.reason, verdict


def test_the_outage_is_timed_from_the_first_failed_poll_and_one_answer_resets_it():
    clock = OutageClock()
    assert clock.observe("eu-1", True, 100.0) is None
    assert clock.observe("eu-1", False, 105.0) == 0.0
    assert clock.observe("eu-1", False, 140.0) == 35.0
    assert clock.observe("us-1", False, 140.0) == 0.0          # each cluster its own
    assert clock.observe("eu-1", True, 141.0) is None
    assert clock.observe("eu-1", False, 150.0) == 0.0          # a new run
