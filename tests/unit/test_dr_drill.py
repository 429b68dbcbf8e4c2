"""dr/drill.py: what a drill counts from what was acknowledged, what the log holds and what the
consumer received (no I/O), and how its report reads."""
from __future__ import annotations

import pytest

from dr.drill_report import DrillReport, PhaseFigures, tally, tally_full


def report() -> DrillReport:
    return DrillReport("eu-1~us-1", "eu-west", "canary", "r1", 1000.0, finished_at=1012.5, rate=100)


# Each row: acknowledged, the log (partition, number) in order, consumed -> the counts.
@pytest.mark.parametrize("acked, log, consumed, counts", [
    # Everything once, in order: a clean drill.
    ({0, 1, 2, 3}, [(0, 0), (1, 1), (0, 2), (1, 3)], [0, 1, 2, 3], (0, 0, 0, 0, 0)),
    # An acknowledged record missing from the log is lost (and so never consumed: not a skip).
    ({0, 1, 2}, [(0, 0), (0, 2)], [0, 2], (1, 0, 0, 0, 0)),
    # A record written twice (a resend after an unclear answer) is duplicated.
    ({0, 1}, [(0, 0), (0, 1), (0, 1)], [0, 1, 1], (0, 1, 0, 0, 1)),
    # A partition whose numbers go back is reordered; the other partition is fine.
    ({0, 1, 2, 3}, [(0, 2), (0, 0), (1, 1), (1, 3)], [2, 0, 1, 3], (0, 0, 1, 0, 0)),
    # In the log, never delivered: the group skipped it. Delivered twice: re-read.
    ({0, 1, 2}, [(0, 0), (0, 1), (0, 2)], [0, 2, 2], (0, 0, 0, 1, 1)),
    # Records in the log that were never acknowledged (refused, then sent again) are not lost.
    ({1}, [(0, 0), (0, 1)], [0, 1], (0, 0, 0, 0, 0)),
])
def test_the_drill_counts(acked, log, consumed, counts):
    r = report()
    tally(r, acked, log, consumed)
    assert (r.lost, r.duplicated, r.reordered, r.skipped, r.reread) == counts
    assert r.passed is (counts == (0, 0, 0, 0, 0))


def test_the_report_reads_as_markdown_with_every_figure():
    r = report()
    r.phases = [PhaseFigures("failover", "eu-1", "us-1", started=1001.0, failover_id=3, duration_s=0.61,
                             rto_promoted_s=0.3, rto_writes_s=0.42, rto_reads_s=1.7),
                PhaseFigures("failback", "us-1", "eu-1", started=1005.0, failover_id=4, duration_s=0.5,
                             rto_promoted_s=0.25, rto_writes_s=None, rto_reads_s=None)]
    tally(r, {0, 1}, [(0, 0), (0, 1)], [0, 1])
    text = r.markdown()
    assert text.startswith("# DR drill of eu-west (eu-1~us-1), 1970-01-01 00:16:40 UTC")
    assert "**PASSED**" in text and "12.5 s in all" in text
    assert "| failover (#3) | eu-1 | us-1 | 0 | 0.0 | 0.61 | 0.30 | 0.42 | 1.70 |" in text
    assert "| failback (#4) | us-1 | eu-1 | 0 | 0.0 | 0.50 | 0.25 | - | - |" in text
    r.error = "timed out after 60s waiting until the canary consumer reads on us-1"
    assert not r.passed and "**FAILED**: timed out" in r.markdown()
    assert r.to_dict()["passed"] is False


def full_report() -> DrillReport:
    return DrillReport("eu-1~us-1", "eu-west", "full", "r1", 1000.0)


# A full drill of eu-1: numbers 0-5 acknowledged by eu-1 before the kill, 6-9 by us-1 after it;
# us-1 got 0-3 through the link (4 and 5 stranded); eu-1's log after the failback holds its own
# 0-5 and the link back's 6-9. Each row changes one thing -> the problems found (substrings).
BASE = dict(acked=set(range(10)), log=[(0, n) for n in range(10)], consumed=[0, 1, 2, 3, 2, 3, 6, 7, 8, 9],
            before_kill=set(range(6)), on_partner=[0, 1, 2, 3, 6, 7, 8, 9], kept=[4, 5], sent_again=set(),
            counted=2)


@pytest.mark.parametrize("change, problems", [
    # Stranded records kept and counted, skipped by the group (it resumed on us-1 past them),
    # re-read where the checkpoint was behind: an outage's cost, not a failure.
    ({}, []),
    # One stranded record not kept: the failback lost it.
    ({"kept": [4], "counted": 1}, ["1 stranded records are not kept"]),
    # The failback counted more than it kept.
    ({"counted": 3}, ["the failback counted 3 stranded canary records; 2 are kept"]),
    # Kept as stranded although us-1 has it (a copy the failback should have seen).
    ({"kept": [3, 4, 5], "counted": 3}, ["1 records kept as stranded that the region never acknowledged"]),
    # ... unless it was sent again after the kill cut its answer off: then it is both.
    ({"kept": [4, 5, 6], "counted": 3, "sent_again": {6}}, []),
    # eu-1's log lost an acknowledged record.
    ({"log": [(0, n) for n in range(10) if n != 7]}, ["1 acknowledged records are not in the region's log"]),
    # A record twice in eu-1's log, sent once; a resend's duplicate is the outage's cost.
    ({"log": [(0, n) for n in [*range(10), 9]]}, ["1 records duplicated that were sent once"]),
    ({"log": [(0, n) for n in [*range(10), 9]], "sent_again": {9}}, []),
    # Written by eu-1 unanswered (kept as stranded), sent again to us-1, brought back by the
    # link: twice in eu-1's log, out of order the second time, and all of it explained.
    ({"log": [(0, n) for n in [0, 1, 2, 3, 4, 5, 6, 7, 6, 7, 8, 9]], "kept": [4, 5, 6, 7], "counted": 4,
      "sent_again": {6, 7}, "consumed": [0, 1, 2, 3, 6, 7, 8, 9]}, []),
    ({"log": [(0, n) for n in [0, 1, 2, 3, 4, 5, 7, 6, 8, 9]]}, ["1 partitions reordered"]),
    # us-1's log holds a record twice (a link that copied again what it had copied).
    ({"on_partner": [0, 1, 2, 3, 2, 3, 6, 7, 8, 9]}, ["2 records duplicated in the partner's log"]),
    # The group skipped a record that was not stranded.
    ({"consumed": [0, 1, 2, 3, 6, 8, 9]}, ["1 records skipped by the group that were not stranded"]),
])
def test_a_full_drill_judges_what_the_outage_explains(change, problems):
    args = {**BASE, **change}
    r = full_report()
    tally_full(r, args.pop("acked"), args.pop("log"), args.pop("consumed"), **args)
    assert len(r.problems) == len(problems) and all(want in got for want, got in zip(problems, r.problems)), \
        r.problems
    assert r.passed is (not problems)
    if not change:
        assert (r.stranded, r.stranded_counted, r.skipped, r.reread) == (2, 2, 2, 2)
        assert "| kept in seaway-canary.stranded (stranded, or sent again unanswered) | 2 |" in r.markdown()
