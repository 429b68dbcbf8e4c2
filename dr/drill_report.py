"""A drill's report and its judgement, from what the canary clients saw and what the logs hold
(no I/O): the counts a canary drill must find at 0, the full drill's stranded-record
accounting (dr/drill.py says what each mode measures and why), and the report in Markdown
and JSON.
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import asdict, dataclass, field

from core.protocol.dr import STRANDED_SUFFIX

from .canary import CANARY_TOPIC


@dataclass
class PhaseFigures:
    name: str                       # failover, failback
    source: str
    target: str
    started: float = 0.0            # when its first step began (wall clock)
    failover_id: int = 0
    rpo_records: int = 0
    rpo_seconds: float = 0.0
    duration_s: float = 0.0         # the failover's steps, end to end
    rto_promoted_s: float = 0.0     # until the promoted side took writes (the failover's figure)
    rto_writes_s: float | None = None   # until the canary producer's first write there was acknowledged
    rto_reads_s: float | None = None    # until the canary consumer read there again


@dataclass
class DrillReport:
    pair: str
    region: str
    mode: str                       # canary (full: the whole region, killed)
    run_id: str
    started_at: float
    finished_at: float = 0.0
    rate: float = 0.0
    phases: list[PhaseFigures] = field(default_factory=list)
    acknowledged: int = 0
    in_log: int = 0
    consumed: int = 0
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0
    skipped: int = 0
    reread: int = 0
    stranded: int = 0               # full: acknowledged by the region, never in its partner's log
    kept: int = 0                   # full: in <canary>.stranded (stranded, or sent again unanswered)
    stranded_counted: int | None = None     # full: what the failback counted for the canary
    error: str | None = None
    problems: list[str] = field(default_factory=list)   # one line each: why the drill failed
    samples: dict[str, list[int]] = field(default_factory=dict)     # a few numbers of each kind

    @property
    def passed(self) -> bool:
        return self.error is None and not self.problems

    def to_dict(self) -> dict:
        return {**asdict(self), "passed": self.passed}

    def markdown(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.started_at))
        lines = [f"# DR drill of {self.region} ({self.pair}), {when}", "",
                 f"**{'PASSED' if self.passed else 'FAILED'}**" + (f": {self.error}" if self.error else ""), "",
                 f"Mode: {self.mode}; canary traffic at {self.rate:g} records/s; run {self.run_id}; "
                 f"{self.finished_at - self.started_at:.1f} s in all.", "",
                 "| phase | from | to | RPO records | RPO s | steps s | writes accepted after s "
                 "| canary writes after s | canary reads after s |",
                 "|---|---|---|---|---|---|---|---|---|"]
        for p in self.phases:
            lines.append(f"| {p.name} (#{p.failover_id}) | {p.source} | {p.target} | {p.rpo_records} | "
                         f"{p.rpo_seconds:.1f} | {p.duration_s:.2f} | {p.rto_promoted_s:.2f} | "
                         f"{_s(p.rto_writes_s)} | {_s(p.rto_reads_s)} |")
        lines += ["", "| records | count |", "|---|---|",
                  f"| acknowledged | {self.acknowledged} |", f"| in the log | {self.in_log} |",
                  f"| consumed | {self.consumed} |", f"| lost | {self.lost} |",
                  f"| duplicated | {self.duplicated} |", f"| reordered partitions | {self.reordered} |",
                  f"| skipped by the group | {self.skipped} |", f"| re-read by the group | {self.reread} |"]
        if self.mode == "full":
            lines += [f"| stranded: acknowledged by {self.region}, never copied | {self.stranded} |",
                      f"| kept in {CANARY_TOPIC}{STRANDED_SUFFIX} (stranded, or sent again unanswered) "
                      f"| {self.kept} |",
                      f"| only in {self.region}, as the failback counted them | {_n(self.stranded_counted)} |"]
        lines += [""] + [f"- {problem}" for problem in self.problems] + ([""] if self.problems else [])
        return "\n".join(lines)


def _n(value: int | None) -> str:
    return "-" if value is None else str(value)


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def tally(report: DrillReport, acked: set[int], log: list[tuple[int, int]], consumed: list[int]) -> None:
    """A canary drill's counts, from the numbers acknowledged, the log's (partition, number) in
    log order, and the numbers the consumer received in order; each count that is not 0 is a
    problem."""
    _count(report, acked, log, consumed)
    report.problems += [f"{n} {what}" for n, what in (
        (report.lost, "acknowledged records lost"), (report.duplicated, "records duplicated"),
        (report.reordered, "partitions reordered"), (report.skipped, "records skipped by the group"),
        (report.reread, "records re-read by the group")) if n]


def tally_full(report: DrillReport, acked: set[int], log: list[tuple[int, int]], consumed: list[int], *,
               before_kill: set[int], on_partner: list[int], kept: list[int], sent_again: set[int],
               counted: int | None) -> None:
    """A full drill's counts and problems (the module's docstring): `log` is the region's log
    after the failback, `before_kill` what it acknowledged before it came back, `on_partner`
    the numbers in the partner's log (each as often as it is there), `kept` those in
    `<canary>.stranded`, `sent_again` the numbers sent again after a send that got no answer,
    and `counted` the canary's stranded records as the failback counted them."""
    _count(report, acked, log, consumed)
    # A record sent again after the kill is in the log twice: once where the killed region
    # wrote it unanswered, once where the link back brought its resend; order is judged on
    # the first.
    report.reordered = _reordered(log, repeats_allowed=sent_again)
    stranded = before_kill - set(on_partner)
    report.stranded, report.kept, report.stranded_counted = len(stranded), len(kept), counted
    in_log = Counter(seq for _, seq in log)
    problems = report.problems
    if report.lost:
        problems.append(f"{report.lost} acknowledged records are not in the region's log after the failback")
    if report.reordered:
        problems.append(f"{report.reordered} partitions reordered")
    if missing := stranded - set(kept):
        problems.append(f"{len(missing)} stranded records are not kept in {CANARY_TOPIC}{STRANDED_SUFFIX}")
    if extra := set(kept) - stranded - sent_again:
        problems.append(f"{len(extra)} records kept as stranded that the region never acknowledged or that its "
                        f"partner has")
    if (n := sum(c - 1 for c in Counter(kept).values())):
        problems.append(f"{n} stranded records kept twice")
    if counted is not None and counted != len(kept):
        problems.append(f"the failback counted {counted} stranded canary records; {len(kept)} are kept")
    if (n := sum(in_log[seq] - 1 for seq in in_log if in_log[seq] > 1 and seq not in sent_again)):
        problems.append(f"{n} records duplicated that were sent once")
    partner = Counter(on_partner)
    if (n := sum(partner[seq] - 1 for seq in partner if partner[seq] > 1 and seq not in sent_again)):
        problems.append(f"{n} records duplicated in the partner's log that were sent once")
    if unexplained := set(in_log) - set(consumed) - stranded - set(kept):
        problems.append(f"{len(unexplained)} records skipped by the group that were not stranded")
    if missing or extra:
        report.samples["stranded-mismatch"] = sorted(missing | extra)[:10]


def _reordered(log: list[tuple[int, int]], repeats_allowed: set[int] = frozenset()) -> int:
    """How many partitions hold numbers out of order (later copies of `repeats_allowed` left out)."""
    by_partition: dict[int, list[int]] = {}
    seen: set[int] = set()
    for partition, seq in log:
        if seq in seen and seq in repeats_allowed:
            continue
        seen.add(seq)
        by_partition.setdefault(partition, []).append(seq)
    return sum(1 for seqs in by_partition.values() if seqs != sorted(seqs))


def _count(report: DrillReport, acked: set[int], log: list[tuple[int, int]], consumed: list[int]) -> None:
    in_log = Counter(seq for _, seq in log)
    delivered = Counter(consumed)
    report.acknowledged, report.in_log, report.consumed = len(acked), len(in_log), len(consumed)
    lost = acked - set(in_log)
    duplicated = [seq for seq, n in in_log.items() if n > 1]
    skipped = set(in_log) - set(delivered)
    reread = [seq for seq, n in delivered.items() if n > 1]
    report.lost = len(lost)
    report.duplicated = sum(in_log[seq] - 1 for seq in duplicated)
    report.reordered = _reordered(log)
    report.skipped = len(skipped)
    report.reread = sum(delivered[seq] - 1 for seq in reread)
    report.samples = {name: sorted(found)[:10] for name, found in (
        ("lost", lost), ("duplicated", duplicated), ("skipped", skipped), ("reread", reread)) if found}
