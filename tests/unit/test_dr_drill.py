"""dr/drill.py: what a drill counts from what was acknowledged, what the log holds and what the
consumer received (no I/O), and how its report reads."""
from __future__ import annotations

import pytest

from dr.drill import DrillReport, PhaseFigures, tally


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
