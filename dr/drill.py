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
promoted side took a canary write, and until the consumer read there again. A canary drill
passes when every count is 0.

The full drill (`--full`, a local platform only)
------------------------------------------------
It drills the region as an outage would hit it: the platform's supervisor kills every node of
REGION (kill -9), the whole pair fails over unplanned (`--force`), REGION is started again and
failed back (its stranded records kept in `<topic>.stranded`), and the canary clients follow
the pair's own decision, as applications do. Its clock starts at the kill.

An unplanned failover loses what the link had not copied, so the counts are judged by what
that loss explains, and the loss itself is checked against what the failback found:

    stranded    acknowledged by REGION before the kill, never in the partner's log: exactly
                the records kept in `seaway-canary.stranded` (plus any the producer sent
                again, below), and as many as the failback counted for the canary
    lost        acknowledged, not in REGION's log after the failback (it is never truncated,
                and the reverse link brought back what the partner took meanwhile): must be 0
    duplicated  only records whose first send got no answer (the kill) and were sent again
    skipped     only stranded records: the group resumed on the partner past them
    re-read     reported, not judged: the group resumes from the last checkpoint the mirror
                wrote before the kill, so it reads again what it had read since
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

import anyio

from core.client import Admin, NewTopic
from core.client.errors import KafkaError
from core.protocol.dr import STRANDED_SUFFIX
from core.protocol.errors import ErrorCode
from regions.control import send_command

from .canary import (CANARY_GROUP, CANARY_PARTITIONS, CANARY_TOPIC, SWITCH_TIMEOUT_S, TICK_S, CanaryTraffic, DrillError,
                     canary_key, read_run)
from .config import DrConfig, PairConfig
from .decision import SERVING, Decision, read_file, write_files
from .drill_report import DrillReport, PhaseFigures, tally, tally_full
from .failover import Failover, FailoverError, Outcome
from .history import History
from .observe import PairClients, observe
from .plan import PairView, Plan, PlanError, plan_failback, plan_failover, plan_to_dict
from .status import pair_status, view_of

REPLICA_TIMEOUT_S = 60.0        # for the link to make the canary's replica
RETURN_TIMEOUT_S = 180.0        # a full drill's region: until it answers again after its start
READY_TIMEOUT_S = 90.0          # a full drill: for dr status to call the pair ready, canary running

Report = Callable[[str], None]


class Drill:
    def __init__(self, config: DrConfig, pair_config: PairConfig, history: History, *, controller: str,
                 report: Report, rate: float = 200.0, hold_s: float = 2.0, timeout_s: float = 5.0,
                 full: bool = False):
        self.config = config
        self.pair_config = pair_config
        self.history = history
        self.controller = controller
        self.report = report
        self.rate = rate
        self.hold_s = hold_s
        self.timeout_s = timeout_s
        self.full = full
        self.state_dir = Path(config.state_dir)
        self.killed: str | None = None      # the region a full drill killed and has not started again
        self.stranded_counted: int | None = None
        if full and config.platform_dir is None:
            raise ValueError("a full drill needs the local platform's supervisor (DrConfig.platform_dir)")

    @property
    def key(self) -> str:
        """The decision the canary clients follow: in a full drill, the pair's own."""
        pair = self.pair_config.pair
        return pair.name if self.full else canary_key(pair.name)

    async def run(self, region: str) -> DrillReport:
        pair = self.pair_config.pair
        source = pair.cluster_in(region)
        if source is None:
            raise DrillError(f"REGION: {region} is not in DR pair {pair.name}")
        target = pair.partner(source)
        run_id = f"{int(time.time() * 1000):x}"
        mode = "full" if self.full else "canary"
        report = DrillReport(pair.name, region, mode, run_id, time.time(), rate=self.rate)
        drill_id = self.history.drill_started(pair=pair.name, region=region, mode=mode, run_id=run_id)
        try:
            await self._prepare(source, target)
            traffic = CanaryTraffic(self.pair_config, self.state_dir, run_id, self.rate, self.timeout_s, self.key)
            async with anyio.create_task_group() as tg:
                tg.start_soon(_guarded, traffic, traffic.produce)
                tg.start_soon(_guarded, traffic, traffic.consume)
                await self._until(lambda: traffic.consumed or traffic.error, "the canary consumer reads", 30)
                for name, (frm, to) in (("failover", (source, target)), ("failback", (target, source))):
                    if not self.full:
                        phase = await self._phase(name, frm, to, traffic, drill_id)
                    elif name == "failover":
                        phase = await self._outage(frm, to, traffic, drill_id)
                    else:
                        phase = await self._return(frm, to, traffic, drill_id)
                    report.phases.append(phase)
                    await self._until(lambda: traffic.first_read_on(to, report.phases[-1].started) is not None
                                      or traffic.error, f"the canary consumer reads on {to}", 60)
                    _reads(report.phases[-1], traffic)
                    await anyio.sleep(self.hold_s)
                traffic.producing = False
                try:
                    # Only once the producer has stopped: its last batch may be acknowledged
                    # after the consumer has read everything before it.
                    await self._until(lambda: (traffic.produced and not _unread(traffic, report)) or traffic.error,
                                      "the canary consumer reads every acknowledged record", 60)
                except DrillError as exc:
                    report.error = str(exc)     # and the counts below say what it missed
                traffic.consuming = False
            if traffic.error:
                raise DrillError(traffic.error)
            if self.full:
                await self._verify_full(report, traffic, source, target)
            else:
                await self._verify(report, traffic, source)
        except (DrillError, PlanError, FailoverError, KafkaError, OSError, TimeoutError) as exc:
            report.error = report.error or str(exc) or type(exc).__name__
        except Exception as exc:  # noqa: BLE001 — the report says what failed, one line
            report.error = report.error or _one_line(exc)
        finally:
            if self.killed is not None:
                await self._restart_after_failure(report)
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
        decision the canary follows names `source`, serving (a full drill: the whole pair is
        active on `source`)."""
        pair = self.pair_config.pair
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
                    raise DrillError(f"{CANARY_TOPIC} is not a DR topic of {pair.name}: add it to the pair's topics")
                if roles.get(CANARY_TOPIC) == target:
                    raise DrillError(f"the canary is active in {pair.region_of(target)} (a drill that "
                                     f"stopped half way?): run dr drill {pair.region_of(target)} to bring it back")
                if anyio.current_time() > deadline:
                    raise DrillError(f"the link has not made {CANARY_TOPIC}'s replica on {target} within "
                                     f"{REPLICA_TIMEOUT_S:g}s; is the mirror running?")
                await anyio.sleep(0.5)
            if self.full and (view.active() != source or view.unsettled()):
                raise DrillError(f"{pair.name} is not wholly active in {pair.region_of(source)} (dr status): "
                                 f"a full drill fails over the whole pair from there")
        current = read_file(self.state_dir, self.key)
        if current is not None and current.phase == SERVING and current.active_cluster == source:
            return
        if self.full and current is not None:
            raise DrillError(f"the decision for {pair.name} names {current.active_cluster} ({current.phase}), "
                             f"not {source}: finish that failover first")
        access = self.pair_config.access(source)
        write_files(self.state_dir, Decision(self.key, 0, pair.region_of(source), source,
                                             access.bootstrap, SERVING, time.time(), self.controller))

    async def _carry(self, clients: PairClients, plan: Plan, drill_id: int, **extra) -> tuple[Failover, Outcome]:
        failover = Failover(self.config, clients, self.history, controller=self.controller,
                            report=lambda _step, line: self.report("  " + line))
        outcome = await failover.run(plan, context_extra={"plan": plan_to_dict(plan), "drill": drill_id, **extra})
        return failover, outcome

    async def _phase(self, name: str, source: str, target: str, traffic: CanaryTraffic,
                     drill_id: int) -> PhaseFigures:
        pair = self.pair_config.pair
        figures = PhaseFigures(name, source, target)
        async with PairClients(self.pair_config, timeout_s=self.timeout_s) as clients:
            view: PairView = await observe(clients)
            plan = _ready(name, plan_failover(view, pair.region_of(source), only={CANARY_TOPIC},
                                              decision_key=canary_key(pair.name), groups=[CANARY_GROUP]))
            self.report(f"{name}: {pair.region_of(source)} -> {pair.region_of(target)} (canary only)")
            figures.started = time.time()
            _figures(figures, (await self._carry(clients, plan, drill_id))[1])
        await self._first_write(figures, traffic)
        return figures

    async def _outage(self, source: str, target: str, traffic: CanaryTraffic, drill_id: int) -> PhaseFigures:
        """Kill the region, then an unplanned failover of the whole pair; timed from the kill."""
        pair = self.pair_config.pair
        region = pair.region_of(source)
        figures = PhaseFigures("failover", source, target)
        await self._until_ready()
        self.report(f"failover: killing {region} (regions stop {region} --kill), then an unplanned failover "
                    f"to {pair.region_of(target)}")
        figures.started = time.time()
        self.killed = region
        await self._platform({"cmd": "stop", "target": region, "kill": True})
        async with PairClients(self.pair_config, timeout_s=self.timeout_s) as clients:
            history_view = await view_of(clients, self.history)
            plan = _ready("failover", plan_failover(history_view, region, force=True))
            if plan.kind != "unplanned":
                raise DrillError(f"{source} still answers after the kill: not an outage")
            begun = time.time()
            _figures(figures, (await self._carry(clients, plan, drill_id))[1])
        figures.rto_promoted_s += begun - figures.started     # from the kill
        await self._first_write(figures, traffic)
        return figures

    async def _return(self, active: str, returning: str, traffic: CanaryTraffic, drill_id: int) -> PhaseFigures:
        """Start the region again, settle its stranded records (kept) and fail back; timed from
        the start of the failback, once the region answers."""
        pair = self.pair_config.pair
        region = pair.region_of(returning)
        figures = PhaseFigures("failback", active, returning)
        self.report(f"failback: starting {region} (regions start {region})")
        await self._platform({"cmd": "start", "target": region})
        self.killed = None
        unplanned = self.history.last_unplanned(pair.name, returning)
        if unplanned is None:
            raise DrillError(f"the history has no unplanned failover away from {returning}")
        promotion = unplanned["context"].get("target_ends")
        deadline = anyio.current_time() + RETURN_TIMEOUT_S
        while True:
            async with PairClients(self.pair_config, timeout_s=self.timeout_s) as clients:
                view = await view_of(clients, self.history)
                if view.clusters[returning].reachable:
                    settle = plan_failback(view, region, republish=False, promotion=promotion)
                    if settle is None or settle.ready:
                        break
                    why = "; ".join(f"{c.name}: {c.detail}" for c in settle.failed_checks())
                else:
                    why = f"{returning} does not answer: {view.clusters[returning].error}"
            if anyio.current_time() > deadline:
                raise DrillError(f"failback: {region} is not ready {RETURN_TIMEOUT_S:g}s after its start: {why}")
            await anyio.sleep(1.0)
        self.report(f"failback: {region} answers; settling its stranded records, then failing back")
        figures.started = time.time()
        async with PairClients(self.pair_config, timeout_s=self.timeout_s) as clients:
            if settle is not None:
                settled, _ = await self._carry(clients, settle, drill_id, promotion=promotion,
                                               promotion_failover=unplanned["id"])
                self.stranded_counted = sum(n for key, (_, _, n) in settled.context["stranded"].items()
                                            if key.rpartition("/")[0] == CANARY_TOPIC)
            else:
                self.stranded_counted = 0
            back = _ready("failback", plan_failover(await view_of(clients, self.history), pair.region_of(active)))
            begun = time.time()
            _figures(figures, (await self._carry(clients, back, drill_id, after_outage=True))[1])
        # Both parts, the settling and the failover back, are the failback's.
        figures.rto_promoted_s += begun - figures.started
        figures.duration_s = time.time() - figures.started
        await self._first_write(figures, traffic)
        return figures

    async def _until_ready(self) -> None:
        """Kill nothing until `dr status` calls the pair ready with the canary running: the
        canary group's position is on the partner (an unplanned failover resumes it from
        there) and every check passes, so the drill measures an outage of a ready pair."""
        deadline = anyio.current_time() + READY_TIMEOUT_S
        while True:
            status = await pair_status(self.pair_config, self.history, timeout_s=self.timeout_s)
            canary = [g for g in status["checkpoints"]["groups"] if g["group"] == CANARY_GROUP]
            if status["ready"] and canary and canary[0]["synced"]:
                return
            if anyio.current_time() > deadline:
                failed = "; ".join(f"{c['name']}: {c['detail']}" for c in status["checks"] if not c["ok"])
                raise DrillError(f"not ready to kill anything {READY_TIMEOUT_S:g}s into the drill (dr status): "
                                 f"{failed or 'the canary group has no checkpoint on the partner yet'}")
            await anyio.sleep(1.0)

    async def _platform(self, request: dict) -> None:
        assert self.config.platform_dir is not None
        try:
            reply = await send_command(Path(self.config.platform_dir), request, 120.0)
        except TimeoutError:
            reply = {"error": "the supervisor did not answer within 120s"}
        if reply is None:
            raise DrillError(f"no platform supervisor answers in {self.config.platform_dir} (regions up)")
        if not reply.get("ok"):
            raise DrillError(f"regions {request['cmd']} {request['target']}: {reply.get('error')}")

    async def _restart_after_failure(self, report: DrillReport) -> None:
        """A full drill that failed with its region killed starts it again, and says so: the
        pair is left failed over, for `dr failback`."""
        region, self.killed = self.killed, None
        try:
            await self._platform({"cmd": "start", "target": region})
            note = f"{region} was started again; run dr failback {region} once dr status shows it"
        except DrillError as exc:
            note = f"{region} could not be started again ({exc}): regions start {region}"
        report.error = f"{report.error or 'stopped'}; {note}"

    async def _first_write(self, figures: PhaseFigures, traffic: CanaryTraffic) -> None:
        with anyio.fail_after(SWITCH_TIMEOUT_S):
            while traffic.first_ack_on(figures.target, figures.started) is None and not traffic.error:
                await anyio.sleep(TICK_S)
        first = traffic.first_ack_on(figures.target, figures.started)
        figures.rto_writes_s = None if first is None else first - figures.started

    async def _verify(self, report: DrillReport, traffic: CanaryTraffic, active: str) -> None:
        async with PairClients(self.pair_config, timeout_s=self.timeout_s) as clients:
            if active not in clients.clients:
                raise DrillError(f"{active} does not answer: {clients.unreachable.get(active)}")
            log = await read_run(clients.clients[active], traffic.run_id)
        tally(report, set(traffic.acked), log, [seq for seq, _, _ in traffic.consumed])

    async def _verify_full(self, report: DrillReport, traffic: CanaryTraffic, region: str, partner: str) -> None:
        async with PairClients(self.pair_config, timeout_s=self.timeout_s) as clients:
            for cluster in (region, partner):
                if cluster not in clients.clients:
                    raise DrillError(f"{cluster} does not answer: {clients.unreachable.get(cluster)}")
            log = await read_run(clients.clients[region], traffic.run_id)
            on_partner = [seq for _, seq in await read_run(clients.clients[partner], traffic.run_id)]
            kept = [seq for _, seq in await read_run(clients.clients[region], traffic.run_id,
                                                      CANARY_TOPIC + STRANDED_SUFFIX)]
        # Acknowledged by the region before it came back: an acknowledgement may arrive while
        # the kill is under way, after the drill's clock started it.
        back_at = report.phases[1].started
        before_kill = {seq for seq, (cluster, when) in traffic.acked.items() if cluster == region and when < back_at}
        tally_full(report, set(traffic.acked), log, [seq for seq, _, _ in traffic.consumed],
                   before_kill=before_kill, on_partner=on_partner, kept=kept, sent_again=traffic.sent_again,
                   counted=self.stranded_counted)

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


def _one_line(exc: BaseException) -> str:
    """The first failure inside task groups, as one line."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return str(exc) if isinstance(exc, (DrillError, KafkaError)) else f"{type(exc).__name__}: {exc}"


def _ready(name: str, plan: Plan) -> Plan:
    if not plan.ready:
        raise DrillError(f"{name}: " + "; ".join(f"{c.name}: {c.detail}" for c in plan.failed_checks()))
    return plan


def _figures(figures: PhaseFigures, outcome) -> None:
    figures.failover_id = outcome.failover_id
    figures.rpo_records, figures.rpo_seconds = outcome.rpo_records, outcome.rpo_seconds
    figures.duration_s, figures.rto_promoted_s = outcome.duration_s, outcome.rto_writes_s


async def _guarded(traffic: CanaryTraffic, fn) -> None:
    try:
        await fn()
    except (KafkaError, OSError, TimeoutError, DrillError) as exc:
        traffic.error = f"canary: {exc}"
        traffic.producing = traffic.consuming = False


def _unread(traffic: CanaryTraffic, report: DrillReport) -> set[int]:
    """Acknowledged and not yet read. In a full drill, of what was acknowledged after the kill
    only: what the killed region took and never mirrored, the group may rightly never read."""
    since = report.phases[0].started if report.mode == "full" else 0.0
    return {seq for seq, (_, when) in traffic.acked.items() if when >= since} - \
        {seq for seq, _, _ in traffic.consumed}


def _reads(figures: PhaseFigures, traffic: CanaryTraffic) -> None:
    first = traffic.first_read_on(figures.target, figures.started)
    figures.rto_reads_s = None if first is None else first - figures.started
