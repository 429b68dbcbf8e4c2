"""`dr drill REGION`: a failover and a failback of a DR pair under live synthetic traffic,
measured as the clients saw them, with a report kept in the history.

Theory of operation
-------------------
A drill must be safe beside production traffic, so by default it moves one topic only: the
canary, `seaway-canary` (3 partitions, made in REGION's cluster if it is not there, and
mirrored like any DR topic). The failover and the failback are the real ones (dr/failover.py:
the same steps, epochs and history) restricted to that topic, and their decision is kept under
the key `<pair>.canary` (its own file in `active/` and its own record in `__seaway_dr`), which
no application follows. Only the canary group's offsets are moved.

The canary clients follow that decision exactly as the README's recipe says applications do:

* the producer (idempotent, acks=all) writes numbered records at a steady rate, a small batch
  at a time, waiting for each batch's acknowledgements before the next, so a partition's
  records are acknowledged in order. A batch the old side refuses (the fence) waits for the
  decision to name the other cluster and is sent there, before any newer record;
* the consumer (group `seaway-canary`) commits as it goes; when the decision names another
  cluster it commits and leaves, and joins there once the decision says `serving`.

After the failback the producer stops, the consumer reads to the end, and the drill reads the
whole canary topic (this drill's records) on the active side. From what was acknowledged,
what is in the log and what the consumer received, it counts:

    lost        acknowledged, not in the log
    duplicated  in the log more than once
    reordered   a partition whose log holds this drill's numbers out of order
    skipped     in the log, never delivered to the consumer
    re-read     delivered more than once

and, per phase (failover, failback), the RPO (the failover's own figure), the RTO until the
promoted side took a canary write, and until the consumer read there again. A drill passes
when every count is 0. `--full` drills the whole region on a local platform (it really kills
it); that mode lives in dr/cli.py, around the same measuring.
"""
from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import anyio

from core.client import Admin, Consumer, KafkaClient, NewTopic, Producer
from core.client.errors import KafkaError
from core.protocol.errors import ErrorCode

from .config import DrConfig, PairConfig
from .decision import SERVING, Decision, read_file, write_files
from .failover import Failover
from .history import History
from .observe import PairClients, client_for, observe
from .plan import PairView, Plan, PlanError, plan_failover, plan_to_dict
from .stranded import read_range

CANARY_TOPIC = "seaway-canary"
CANARY_GROUP = "seaway-canary"
CANARY_PARTITIONS = 3
TICK_S = 0.05
REPLICA_TIMEOUT_S = 60.0        # for the link to make the canary's replica
SWITCH_TIMEOUT_S = 120.0        # a refused batch waits this long for a decision to follow

Report = Callable[[str], None]


class DrillError(Exception):
    """One line: why the drill could not run or did not finish."""


def canary_key(pair_name: str) -> str:
    return f"{pair_name}.canary"


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
    error: str | None = None
    samples: dict[str, list[int]] = field(default_factory=dict)     # a few numbers of each kind

    @property
    def passed(self) -> bool:
        return self.error is None and not (self.lost or self.duplicated or self.reordered
                                           or self.skipped or self.reread)

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
                  f"| skipped by the group | {self.skipped} |", f"| re-read by the group | {self.reread} |", ""]
        return "\n".join(lines)


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


class CanaryTraffic:
    """The canary producer and consumer, following the canary decision file."""

    def __init__(self, pair_config: PairConfig, state_dir: Path, run_id: str, rate: float, timeout_s: float):
        self.pair_config = pair_config
        self.state_dir = state_dir
        self.key = canary_key(pair_config.pair.name)
        self.run_id = run_id
        self.rate = rate
        self.timeout_s = timeout_s
        self.next_seq = 0
        self.acked: dict[int, tuple[str, float]] = {}          # seq -> (cluster, when)
        self.consumed: list[tuple[int, str, float]] = []       # (seq, cluster, when)
        self.producing = True
        self.produced = False       # the producer has stopped: every record it sent is acknowledged
        self.consuming = True
        self.error: str | None = None

    def active(self) -> Decision | None:
        return read_file(self.state_dir, self.key)

    def first_ack_on(self, cluster: str, after: float) -> float | None:
        return min((t for c, t in self.acked.values() if c == cluster and t >= after), default=None)

    def first_read_on(self, cluster: str, after: float) -> float | None:
        return min((t for _, c, t in self.consumed if c == cluster and t >= after), default=None)

    async def produce(self) -> None:
        queue: list[int] = []
        while self.producing or queue:
            decision = self.active()
            if decision is None:
                raise DrillError(f"no canary decision in {self.state_dir / 'active'}")
            cluster = decision.active_cluster
            async with client_for(self.pair_config.access(cluster), self.timeout_s, client_id="seaway-dr-canary") as client:
                async with Producer(client, acks=-1, enable_idempotence=True, linger_ms=1) as producer:
                    while self.producing or queue:
                        if self.producing:
                            due = int(self.rate * TICK_S) or 1
                            queue.extend(range(self.next_seq, self.next_seq + due))
                            self.next_seq += due
                        refused = await self._send(producer, cluster, queue)
                        if refused:
                            queue = refused
                            break           # to the cluster the decision names next
                        queue = []
                        await anyio.sleep(TICK_S)
            if queue:
                await self._until_decision_leaves(cluster)
        self.produced = True

    async def _send(self, producer: Producer, cluster: str, seqs: list[int]) -> list[int]:
        sent = []
        for seq in seqs:
            sent.append((seq, await producer.send(CANARY_TOPIC, value=f"{self.run_id}:{seq}".encode(),
                                                  key=str(seq).encode(), partition=seq % CANARY_PARTITIONS)))
        refused = []
        for seq, delivery in sent:
            try:
                await delivery
            except KafkaError:
                refused.append(seq)
                continue
            self.acked[seq] = (cluster, time.time())
        return refused

    async def _until_decision_leaves(self, cluster: str) -> None:
        with anyio.fail_after(SWITCH_TIMEOUT_S):
            while (d := self.active()) is None or d.active_cluster == cluster:
                await anyio.sleep(TICK_S)

    async def consume(self) -> None:
        while self.consuming:
            decision = self.active()
            if decision is None or decision.phase != SERVING:
                await anyio.sleep(TICK_S)
                continue
            cluster = decision.active_cluster
            async with client_for(self.pair_config.access(cluster), self.timeout_s, client_id="seaway-dr-canary") as client:
                consumer = Consumer(client, group_id=CANARY_GROUP, auto_commit=False,
                                    session_timeout_ms=10000, heartbeat_interval_ms=1000)
                try:
                    consumer.subscribe([CANARY_TOPIC])
                    last_commit = time.monotonic()
                    while self.consuming:
                        for record in await consumer.poll(timeout_ms=100):
                            run, _, seq = (record.value or b"").decode().partition(":")
                            if run == self.run_id:
                                self.consumed.append((int(seq), cluster, time.time()))
                        now = self.active()
                        moved = now is not None and now.active_cluster != cluster
                        if moved or time.monotonic() - last_commit > 0.5:
                            await consumer.commit()
                            last_commit = time.monotonic()
                        if moved:
                            break
                finally:
                    await consumer.close()


class Drill:
    def __init__(self, config: DrConfig, pair_config: PairConfig, history: History, *, controller: str,
                 report: Report, rate: float = 200.0, hold_s: float = 2.0, timeout_s: float = 5.0):
        self.config = config
        self.pair_config = pair_config
        self.history = history
        self.controller = controller
        self.report = report
        self.rate = rate
        self.hold_s = hold_s
        self.timeout_s = timeout_s
        self.state_dir = Path(config.state_dir)

    async def run(self, region: str) -> DrillReport:
        pair = self.pair_config.pair
        source = pair.cluster_in(region)
        if source is None:
            raise DrillError(f"REGION: {region} is not in DR pair {pair.name}")
        target = pair.partner(source)
        run_id = f"{int(time.time() * 1000):x}"
        report = DrillReport(pair.name, region, "canary", run_id, time.time(), rate=self.rate)
        drill_id = self.history.drill_started(pair=pair.name, region=region, mode="canary", run_id=run_id)
        try:
            await self._prepare(source, target)
            traffic = CanaryTraffic(self.pair_config, self.state_dir, run_id, self.rate, self.timeout_s)
            async with anyio.create_task_group() as tg:
                tg.start_soon(_guarded, traffic, traffic.produce)
                tg.start_soon(_guarded, traffic, traffic.consume)
                await self._until(lambda: traffic.consumed or traffic.error, "the canary consumer reads", 30)
                for name, (frm, to) in (("failover", (source, target)), ("failback", (target, source))):
                    report.phases.append(await self._phase(name, frm, to, traffic, drill_id))
                    await self._until(lambda to=to: traffic.first_read_on(to, report.phases[-1].started) is not None
                                      or traffic.error, f"the canary consumer reads on {to}", 60)
                    _reads(report.phases[-1], traffic)
                    await anyio.sleep(self.hold_s)
                traffic.producing = False
                try:
                    # Only once the producer has stopped: its last batch may be acknowledged
                    # after the consumer has read everything before it.
                    await self._until(lambda: (traffic.produced and not _unread(traffic)) or traffic.error,
                                      "the canary consumer reads every acknowledged record", 60)
                except DrillError as exc:
                    report.error = str(exc)     # and the counts below say what it missed
                traffic.consuming = False
            if traffic.error:
                raise DrillError(traffic.error)
            await self._verify(report, traffic, source)
        except (DrillError, PlanError, KafkaError, OSError, TimeoutError) as exc:
            report.error = str(exc) or type(exc).__name__
        except Exception as exc:  # noqa: BLE001 — the report says what failed, one line
            report.error = f"{type(exc).__name__}: {exc}"
        report.finished_at = time.time()
        self._keep(drill_id, report)
        return report

    async def _until(self, predicate, what: str, timeout: float) -> None:
        deadline = anyio.current_time() + timeout
        while not predicate():
            if anyio.current_time() > deadline:
                raise DrillError(f"timed out after {timeout:g}s waiting until {what}")
            await anyio.sleep(TICK_S)

    async def _prepare(self, source: str, target: str) -> None:
        """The canary exists, is active on `source` and has its replica on `target`; the
        canary decision names `source`, serving."""
        async with PairClients(self.pair_config, timeout_s=self.timeout_s) as clients:
            if source not in clients.clients:
                raise DrillError(f"{source} does not answer: {clients.unreachable.get(source)}")
            admin = Admin(clients.clients[source])
            if CANARY_TOPIC not in await admin.list_topics():
                error = (await admin.create_topics([NewTopic(CANARY_TOPIC, CANARY_PARTITIONS)]))[CANARY_TOPIC]
                if error is not None and error.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                    raise DrillError(f"{source}: cannot create {CANARY_TOPIC}: {error}")
            deadline = anyio.current_time() + REPLICA_TIMEOUT_S
            while True:
                view = await observe(clients)
                roles = view.roles()
                if roles.get(CANARY_TOPIC) == source and CANARY_TOPIC in view.clusters[target].topics:
                    break
                if CANARY_TOPIC not in roles:
                    raise DrillError(f"{CANARY_TOPIC} is not a DR topic of {self.pair_config.pair.name}: add it to "
                                     f"the pair's topics")
                if roles.get(CANARY_TOPIC) == target:
                    raise DrillError(f"the canary is active in {self.pair_config.pair.region_of(target)} (a drill that "
                                     f"stopped half way?): run dr drill "
                                     f"{self.pair_config.pair.region_of(target)} to bring it back")
                if anyio.current_time() > deadline:
                    raise DrillError(f"the link has not made {CANARY_TOPIC}'s replica on {target} within "
                                     f"{REPLICA_TIMEOUT_S:g}s; is the mirror running?")
                await anyio.sleep(0.5)
        pair = self.pair_config.pair
        current = read_file(self.state_dir, canary_key(pair.name))
        if current is None or current.active_cluster != source or current.phase != SERVING:
            access = self.pair_config.access(source)
            write_files(self.state_dir, Decision(canary_key(pair.name), 0, pair.region_of(source), source,
                                                 access.bootstrap, SERVING, time.time(), self.controller))

    async def _phase(self, name: str, source: str, target: str, traffic: CanaryTraffic,
                     drill_id: int) -> PhaseFigures:
        pair = self.pair_config.pair
        figures = PhaseFigures(name, source, target)
        async with PairClients(self.pair_config, timeout_s=self.timeout_s) as clients:
            view: PairView = await observe(clients)
            plan: Plan = plan_failover(view, pair.region_of(source), only={CANARY_TOPIC},
                                       decision_key=canary_key(pair.name), groups=[CANARY_GROUP])
            if not plan.ready:
                raise DrillError(f"{name}: " + "; ".join(f"{c.name}: {c.detail}" for c in plan.failed_checks()))
            self.report(f"{name}: {pair.region_of(source)} -> {pair.region_of(target)} (canary only)")
            failover = Failover(self.config, clients, self.history, controller=self.controller,
                                report=lambda _step, line: self.report("  " + line))
            started = figures.started = time.time()
            outcome = await failover.run(plan, context_extra={"plan": plan_to_dict(plan), "drill": drill_id})
        figures.failover_id = outcome.failover_id
        figures.rpo_records, figures.rpo_seconds = outcome.rpo_records, outcome.rpo_seconds
        figures.duration_s, figures.rto_promoted_s = outcome.duration_s, outcome.rto_writes_s
        with anyio.fail_after(SWITCH_TIMEOUT_S):
            while traffic.first_ack_on(target, started) is None and not traffic.error:
                await anyio.sleep(TICK_S)
        first = traffic.first_ack_on(target, started)
        figures.rto_writes_s = None if first is None else first - started
        return figures

    async def _verify(self, report: DrillReport, traffic: CanaryTraffic, active: str) -> None:
        async with PairClients(self.pair_config, timeout_s=self.timeout_s) as clients:
            if active not in clients.clients:
                raise DrillError(f"{active} does not answer: {clients.unreachable.get(active)}")
            log = await _read_run(clients.clients[active], traffic.run_id)
        tally(report, set(traffic.acked), log, [seq for seq, _, _ in traffic.consumed])

    def _keep(self, drill_id: int, report: DrillReport) -> None:
        folder = self.state_dir / "drills"
        folder.mkdir(parents=True, exist_ok=True)
        base = folder / f"drill-{drill_id}"
        base.with_suffix(".json").write_text(json.dumps(report.to_dict(), indent=2) + "\n")
        base.with_suffix(".md").write_text(report.markdown())
        failover = next((p for p in report.phases if p.name == "failover"), None)
        self.history.drill_finished(drill_id, state="passed" if report.passed else "failed",
                                    report=str(base.with_suffix(".md")), summary=report.to_dict(),
                                    rpo_records=failover.rpo_records if failover else None,
                                    rto_writes_s=failover.rto_writes_s if failover else None,
                                    rto_reads_s=failover.rto_reads_s if failover else None,
                                    error=report.error)


def tally(report: DrillReport, acked: set[int], log: list[tuple[int, int]], consumed: list[int]) -> None:
    """The drill's counts, from the numbers acknowledged, the log's (partition, number) in log
    order, and the numbers the consumer received in order."""
    in_log = Counter(seq for _, seq in log)
    delivered = Counter(consumed)
    report.acknowledged, report.in_log, report.consumed = len(acked), len(in_log), len(consumed)
    lost = acked - set(in_log)
    duplicated = [seq for seq, n in in_log.items() if n > 1]
    skipped = set(in_log) - set(delivered)
    reread = [seq for seq, n in delivered.items() if n > 1]
    report.lost = len(lost)
    report.duplicated = sum(in_log[seq] - 1 for seq in duplicated)
    by_partition: dict[int, list[int]] = {}
    for partition, seq in log:
        by_partition.setdefault(partition, []).append(seq)
    report.reordered = sum(1 for seqs in by_partition.values() if seqs != sorted(seqs))
    report.skipped = len(skipped)
    report.reread = sum(delivered[seq] - 1 for seq in reread)
    report.samples = {name: sorted(found)[:10] for name, found in (
        ("lost", lost), ("duplicated", duplicated), ("skipped", skipped), ("reread", reread)) if found}


async def _guarded(traffic: CanaryTraffic, fn) -> None:
    try:
        await fn()
    except (KafkaError, OSError, TimeoutError, DrillError) as exc:
        traffic.error = f"canary: {exc}"
        traffic.producing = traffic.consuming = False


def _unread(traffic: CanaryTraffic) -> set[int]:
    return set(traffic.acked) - {seq for seq, _, _ in traffic.consumed}


def _reads(figures: PhaseFigures, traffic: CanaryTraffic) -> None:
    first = traffic.first_read_on(figures.target, figures.started)
    figures.rto_reads_s = None if first is None else first - figures.started


async def _read_run(client: KafkaClient, run_id: str) -> list[tuple[int, int]]:
    """(partition, seq) of this drill's records in the canary topic, in log order."""
    tps = [(CANARY_TOPIC, p) for p in range(CANARY_PARTITIONS)]
    ends = await Admin(client).list_offsets({tp: "latest" for tp in tps})
    out: list[tuple[int, int]] = []
    for tp in tps:
        end = ends[tp]
        if isinstance(end, KafkaError):
            raise end
        # From 0: below the log start the consumer resets to it.
        async for record in read_range(client, *tp, 0, end.offset):
            run, _, seq = (record.value or b"").decode().partition(":")
            if run == run_id:
                out.append((record.partition, int(seq)))
    return out
