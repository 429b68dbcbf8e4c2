"""`dr`: the DR controller's commands.

    dr status [-o json]                              every DR pair: active region, roles, lag,
                                                     readiness (exit 0: ready to fail over), and
                                                     what its gateways serve
    dr plan failover REGION [--to REGION] [--force]  the steps, checks, expected RPO and RTO;
                                                     changes nothing (exit 0: it could run)
    dr failover REGION [--to REGION] [--force]       carry the plan out, step by step
    dr plan failback REGION [--republish-stranded]   what bringing REGION back would do
    dr failback REGION [--republish-stranded]        bring REGION back and make it active again:
                                                     its stranded records are counted and kept
                                                     (or re-published), then a planned failover
    dr drill REGION [--rate N] [--hold S] [--full]   fail REGION's canary topic over and back under
                                                     live canary traffic; a report in Markdown and
                                                     JSON, kept with the history (exit 0: passed).
                                                     --full (a local platform): kill REGION, fail the
                                                     whole pair over unplanned, start it, fail back
    dr serve [--listen HOST:PORT]                    the daemon: polls, metrics, JSON API, drills on
                                                     drill_schedule (dr/serve.py)
    dr history [-o json]                             failovers, drills and their measured figures

Which clusters: `--platform` (the default; the platform `regions up` runs, in
$SEAWAY_STATE_DIR or ~/.seaway/platform, or --state-dir) or `--config dr.yaml` (dr/config.py).
Errors are one line, exit status 2 for bad input and 1 for a refusal or a failed step.
"""
from __future__ import annotations

import argparse
from contextlib import asynccontextmanager
import fcntl
import json
import logging
import os
import socket
import sys
import time
from pathlib import Path

import anyio

from core.arguments import OneLineParser

from .config import DrConfig, DrConfigError, PairConfig, load_config, platform_config
from .drill import Drill
from .gateway_probe import describe as describe_gateway
from .schedule import ScheduleError
from .serve import DEFAULT_LISTEN, DrServer, parse_listen
from .status import pair_status, view_of
from .failover import Failover, FailoverError
from .history import History, HistoryError
from .observe import PairClients
from .plan import (PairView, Plan, PlanError, count, find_pair, plan_failback, plan_failover,
                   plan_from_dict, plan_to_dict)


class CliError(Exception):
    def __init__(self, message: str, status: int = 2):
        super().__init__(message)
        self.status = status


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="dr", description="Seaway's DR controller: status, plans, failovers.")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--platform", action="store_true", help="the platform `regions up` runs (the default)")
    where.add_argument("--config", type=Path, help="a DR configuration file (see the README)")
    parser.add_argument("--state-dir", type=Path,
                        help="the platform's state directory ($SEAWAY_STATE_DIR, default ~/.seaway/platform)")
    parser.add_argument("--timeout", type=float, default=5.0,
                        help="seconds a cluster has to answer before it counts as unreachable (default 5)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    status = sub.add_parser("status", help="every DR pair: active region, roles, lag, readiness")
    status.add_argument("-o", "--output", choices=("table", "json"), default="table")
    plan = sub.add_parser("plan", help="what a failover or failback would do; changes nothing")
    plan.add_argument("action", choices=("failover", "failback"))
    failover = sub.add_parser("failover", help="fail REGION over to its DR partner")
    failback = sub.add_parser("failback", help="bring REGION back after a failover and make it active again")
    for p in (plan, failover, failback):
        p.add_argument("region", metavar="REGION")
        p.add_argument("--to", metavar="REGION", help="REGION's DR partner (when REGION is in several pairs)")
    for p in (plan, failover):
        p.add_argument("--force", action="store_true",
                       help="fail over although REGION does not answer (unplanned: loses what was not copied)")
    for p in (plan, failback):
        p.add_argument("--republish-stranded", action="store_true",
                       help="re-publish REGION's stranded records on the active side (default: keep them "
                            "in <topic>.stranded on REGION)")
    drill = sub.add_parser("drill", help="a failover and failback of REGION's canary topic under live traffic, "
                                         "measured; the report goes to the history")
    drill.add_argument("region", metavar="REGION")
    drill.add_argument("--to", metavar="REGION", help="REGION's DR partner (when REGION is in several pairs)")
    drill.add_argument("--rate", type=float, default=200.0, help="canary records per second (default 200)")
    drill.add_argument("--hold", type=float, default=2.0,
                       help="seconds of traffic on each side between the moves (default 2)")
    drill.add_argument("--full", action="store_true",
                       help="a local platform only: kill REGION (regions stop --kill), fail the whole pair over "
                            "unplanned, start REGION again and fail back, its stranded records kept")
    serve = sub.add_parser("serve", help="the DR daemon: health and lag polled, Prometheus metrics, the JSON "
                                         "API, scheduled drills")
    serve.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                       help=f"where to serve /metrics, /health and /api/v1 (default {DEFAULT_LISTEN}; port 0: any)")
    serve.add_argument("--poll-interval", type=float, default=5.0, metavar="S",
                       help="seconds between polls of the pairs (default 5)")
    history = sub.add_parser("history", help="failovers and their measured figures")
    history.add_argument("-o", "--output", choices=("table", "json"), default="table")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        config = load_config(args.config) if args.config else platform_config(args.state_dir)
        return anyio.run(_COMMANDS[args.command], config, args)
    except (CliError, DrConfigError, HistoryError, PlanError) as exc:
        print(f"dr {args.command}: {exc}", file=sys.stderr)
        return exc.status if isinstance(exc, CliError) else 2 if not isinstance(exc, HistoryError) else 1
    except FailoverError as exc:
        print(f"dr {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _controller_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _pair_for(config: DrConfig, args) -> PairConfig:
    pair = find_pair([p.pair for p in config.pairs], config.regions, args.region, args.to)
    return config.pair_config(pair)


# ---------------------------------------------------------------------------- plan / failover

async def _plan(config: DrConfig, args) -> int:
    pair_config = _pair_for(config, args)
    history = History(Path(config.state_dir))
    async with PairClients(pair_config, timeout_s=args.timeout) as clients:
        view = await view_of(clients, history)
        if args.action == "failover":
            plan = plan_failover(view, args.region, force=args.force)
        else:
            settle, _ = _failback_plan(view, history, args)
            if settle is None:
                print(f"no stranded records to settle: the failback is a planned failover of "
                      f"{pair_config.pair.partner_region(args.region)} back to {args.region}")
            plan = settle or plan_failover(view, pair_config.pair.partner_region(args.region))
    print(render_plan(plan))
    return 0 if plan.ready else 1


def _failback_plan(view: PairView, history: History, args) -> tuple[Plan | None, dict | None]:
    """The plan that settles REGION's stranded records (None: nothing to settle), and the
    unplanned failover away from it that the history has (where its copies stood)."""
    pair = view.pair
    returning = pair.cluster_in(args.region)
    unplanned = history.last_unplanned(pair.name, returning) if returning else None
    promotion = unplanned["context"].get("target_ends") if unplanned else None
    return plan_failback(view, args.region, republish=args.republish_stranded, promotion=promotion), unplanned


def render_plan(plan: Plan) -> str:
    pair = plan.pair
    if plan.kind == "failback":
        head = (f"DR pair {pair.name}: failback of {pair.region_of(plan.source)} ({plan.source}), "
                f"{pair.region_of(plan.target)} ({plan.target}) active meanwhile, DR epoch {plan.epoch}")
    else:
        head = (f"DR pair {pair.name}: {plan.kind} failover of {pair.region_of(plan.source)} ({plan.source}) "
                f"to {pair.region_of(plan.target)} ({plan.target}), DR epoch {plan.epoch}")
    lines = [head, "checks:"]
    width = max(len(c.name) for c in plan.checks)
    lines += [f"  {_mark(c.ok, c.blocking)}  {c.name:<{width}}  {c.detail}" for c in plan.checks]
    lines.append("steps:")
    width = max(len(s.name) for s in plan.steps)
    lines += [f"  {i}. {s.name:<{width}}  {s.summary}" for i, s in enumerate(plan.steps, 1)]
    if plan.kind == "failback":
        lines.append(f"then: a planned failover of {pair.region_of(plan.target)} back to {pair.region_of(plan.source)} "
                     f"(RPO 0)")
    else:
        lines.append(f"expected: {_expected_rpo(plan)}, RTO about {plan.rto_seconds:.1f} s")
    return "\n".join(lines)


def _expected_rpo(plan) -> str:
    """A planned failover loses nothing; an unplanned one what its source's link last showed
    behind, which may be old or never seen."""
    rpo = f"RPO {plan.rpo_records} records ({plan.rpo_seconds:.1f} s)"
    if plan.kind != "unplanned":
        return rpo
    if plan.rpo_seen_at is None:
        return (f"RPO unknown ({plan.source}'s link lag was never seen: `dr status` and `dr serve` record it; "
                f"`dr failback` counts the stranded records exactly)")
    age = time.time() - plan.rpo_seen_at
    return rpo if age < 10 else f"{rpo}, as the link's lag was last seen {age:.0f} s ago"



@asynccontextmanager
async def _in_control(config: DrConfig, args):
    """The controller lock, the pair's clients and the history, and the row this command
    resumes (or None): what `dr failover` and `dr failback` start from."""
    pair_config = _pair_for(config, args)
    state_dir = Path(config.state_dir)
    history = History(state_dir)
    with _controller_lock(state_dir):
        async with PairClients(pair_config, timeout_s=args.timeout) as clients:
            yield pair_config, clients, history, _running(history, pair_config, args)


async def _failover(config: DrConfig, args) -> int:
    async with _in_control(config, args) as (_, clients, history, running):
        if running is not None:
            plan = plan_from_dict(running["context"]["plan"])
        else:
            plan = _ready(plan_failover(await view_of(clients, history), args.region, force=args.force))
        await _carry_out(config, clients, history, plan, running)
    return 0


async def _failback(config: DrConfig, args) -> int:
    """Settle the returning region's stranded records (a failback row), then fail back to it
    (a planned failover row). Either may be resumed by running the command again."""
    async with _in_control(config, args) as (pair_config, clients, history, running):
        returning = pair_config.pair.cluster_in(args.region)
        # After an outage of REGION (an unplanned failover away from it that this failback
        # settles), its groups' members died with it: the move back removes them (sync-groups).
        after_outage = (running is not None and running["kind"] == "failback") or \
            (returning is not None and history.last_unplanned(pair_config.pair.name, returning) is not None)
        if running is not None and running["kind"] == "failback":
            await _carry_out(config, clients, history, plan_from_dict(running["context"]["plan"]), running)
            running = None
        elif running is None:
            view = await view_of(clients, history)
            settle, unplanned = _failback_plan(view, history, args)
            if settle is not None:
                assert unplanned is not None        # the plan's promotion check needs it
                await _carry_out(config, clients, history, _ready(settle), None, extra={
                    "promotion": unplanned["context"]["target_ends"], "promotion_failover": unplanned["id"]})
        if running is None:
            back = _ready(plan_failover(await view_of(clients, history),
                                        pair_config.pair.partner_region(args.region)))
        else:
            back = plan_from_dict(running["context"]["plan"])
        await _carry_out(config, clients, history, back, running, extra={"after_outage": after_outage})
    return 0


def _running(history: History, pair_config: PairConfig, args) -> dict | None:
    """The pair's failover or failback that a controller left half done, if this command
    finishes it (`dr failback X` also finishes a planned failover to X); CliError otherwise."""
    running = history.running(pair_config.pair.name)
    if running is None:
        return None
    plan = plan_from_dict(running["context"]["plan"])
    pair = plan.pair
    what = "failback" if plan.kind == "failback" else "failover"
    if args.command == "failover":
        mine = what == "failover" and pair.region_of(plan.source) == args.region
    else:
        mine = (what == "failback" and pair.region_of(plan.source) == args.region) or \
            (plan.kind == "planned" and pair.region_of(plan.target) == args.region)
    stopped = (running["context"]["done"] or ["nothing"])[-1]
    if not mine:
        raise CliError(f"a {what} of {pair.name} from {pair.region_of(plan.source)} is in progress "
                       f"(#{running['id']}, stopped after {stopped}); run dr {what} "
                       f"{pair.region_of(plan.source)} to finish it", status=1)
    print(f"resuming {what} #{running['id']} of {pair.name} (epoch {plan.epoch}) after "
          f"{(running['context']['done'] or ['its start'])[-1]}", flush=True)
    return running


def _ready(plan: Plan) -> Plan:
    if not plan.ready:
        failed = "; ".join(f"{c.name}: {c.detail}" for c in plan.failed_checks())
        raise CliError(f"not started, nothing changed: {failed}", status=1)
    print(render_plan(plan), flush=True)
    return plan


async def _carry_out(config: DrConfig, clients: PairClients, history: History, plan: Plan,
                     running: dict | None, *, extra: dict | None = None) -> None:
    failover = Failover(config, clients, history, controller=_controller_id(),
                        report=lambda _step, line: print(line, flush=True))
    if running is None:
        outcome = await failover.run(plan, context_extra={"plan": plan_to_dict(plan), **(extra or {})})
    else:
        outcome = await failover.run(plan, resume=running)
    pair = plan.pair
    if plan.kind == "failback":
        stranded = failover.context.get("stranded_records", 0)
        print(f"failback #{outcome.failover_id} settled {pair.region_of(plan.source)} in {outcome.duration_s:.2f}s: "
              f"{count(stranded, 'stranded record')} (the unplanned failover's exact RPO); the link back runs")
        return
    rpo = f"RPO {outcome.rpo_records} records ({outcome.rpo_seconds:.1f} s)"
    if plan.kind == "unplanned":
        rpo = (f"RPO {outcome.rpo_records} records ({outcome.rpo_seconds:.1f} s expected)"
               if plan.rpo_seen_at is not None else "RPO unknown until `dr failback` counts the stranded records")
    print(f"failover #{outcome.failover_id} done in {outcome.duration_s:.2f}s: {pair.region_of(plan.target)} "
          f"is active; writes accepted after {outcome.rto_writes_s:.2f}s; {rpo}")
    print(f"clients: bootstrap.servers is in {outcome.properties_file}")


class _controller_lock:
    """One failover at a time per state directory: a second `dr failover` is refused while
    the first runs (the history says where a dead one stopped)."""

    def __init__(self, state_dir: Path):
        self.path = state_dir / "controller.lock"

    def __enter__(self):
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.file = open(self.path, "a+")
        except OSError as exc:
            raise CliError(f"cannot open {self.path}: {exc.strerror or exc}", status=1) from None
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.file.close()
            raise CliError(f"a failover is in progress: another dr holds {self.path}", status=1) from None
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.file, fcntl.LOCK_UN)
        self.file.close()


# ---------------------------------------------------------------------------- status / history

async def _status(config: DrConfig, args) -> int:
    history = History(Path(config.state_dir))
    pairs = [await pair_status(pair_config, history, timeout_s=args.timeout) for pair_config in config.pairs]
    ready = bool(pairs) and all(p["ready"] for p in pairs)
    if args.output == "json":
        print(json.dumps({"pairs": pairs, "ready": ready}, indent=2))
    else:
        print(render_status(pairs))
    return 0 if ready else 1


def _mark(ok: bool, blocking: bool) -> str:
    return "ok  " if ok else "FAIL" if blocking else "WARN"


def render_status(pairs: list[dict]) -> str:
    if not pairs:
        return "no DR pairs (a DR pair is a mirror link with policy identity in the topology)"
    lines = []
    for p in pairs:
        split = ", ".join(f"{region} for {n}" for region, n in p["active_for"].items() if n)
        if p["active_region"]:
            active = p["active_region"]
        elif p["unsettled"]:
            active = f"none: {len(p['unsettled'])} topics half way through a failover"
        elif split:
            active = f"split by topic: {split}"
        else:
            active = "none: no DR topics yet (topics made in either region become DR topics)"
        lines.append(f"DR pair {p['pair']}: active {active}; {'READY' if p['ready'] else 'NOT READY'} to fail over")
        for name, c in p["clusters"].items():
            state = f"epoch {c['epoch']}, {len(c['topics'])} DR topics" if c["reachable"] else f"unreachable: {c['error']}"
            lines.append(f"  {name} ({c['region']}): {state}")
        for gateway in p.get("gateways") or []:
            lines.append(f"  {describe_gateway(gateway, p.get('active_cluster'))}")
        risk = p["rpo_at_risk"]
        lines.append(f"  RPO at risk: {risk['records']} records, {_bytes(risk['bytes'], risk['bytes_estimated'])}, "
                     f"{risk['seconds']:.1f} s")
        for lag in p["lag"][:10]:
            lines.append(f"    {lag['topic']}-{lag['partition']}: {lag['records']} records, "
                         f"{_bytes(lag['bytes'], lag['bytes_estimated'])}, {lag['seconds']:.1f} s behind")
        cps = p["checkpoints"]
        unsynced = [g for g in cps["groups"] if not g["synced"]]
        lines.append("  checkpoints: " + ("none yet" if cps["age_seconds"] is None else
                                            f"newest {cps['age_seconds']:.1f} s old")
                     + f"; {len(cps['groups']) - len(unsynced)} of {len(cps['groups'])} groups synced")
        for c in p["checks"]:
            lines.append(f"  {_mark(c['ok'], c['blocking'])}  {c['name']}: {c['detail']}")
        last = p["last_failover"]
        if last:
            lines.append(f"  last failover: #{last['id']} {last['kind']} {last['source']} -> {last['target']}, "
                         f"{last['state']}")
        drill = p.get("last_drill")
        if drill:
            lines.append(f"  last drill: {drill['id']} of {drill['region']} ({drill['mode']}), {drill['state']}"
                         + ("" if drill["rto_writes_s"] is None else
                            f": RPO {drill['rpo_records']} records, canary writes after {drill['rto_writes_s']:.2f}s"))
    return "\n".join(lines)


def _bytes(n: int | None, estimated: bool) -> str:
    if n is None:
        return "? bytes"
    return f"{'~' if estimated else ''}{n} bytes"


async def _history(config: DrConfig, args) -> int:
    history = History(Path(config.state_dir))
    rows = history.failovers()
    drills = history.drills()
    if args.output == "json":
        for row in rows:
            row["steps"] = history.steps(row["id"])
        print(json.dumps({"failovers": rows, "drills": drills}, indent=2, default=str))
        return 0
    if not rows and not drills:
        print("no failovers or drills yet")
        return 0
    for row in rows:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(row["started_at"]))
        figures = ""
        if row["kind"] == "failback":
            stranded = row["context"].get("stranded_records")
            figures = "" if stranded is None else f", {count(stranded, 'stranded record')}"
        elif row["rto_writes_s"] is not None:
            exact = " (exact, counted at failback)" if row.get("rpo_exact") else \
                " (expected)" if row["kind"] == "unplanned" else ""
            figures = f", writes after {row['rto_writes_s']:.2f}s, RPO {row['rpo_records']} records{exact}"
        drill = f" [drill {row['context']['drill']}]" if row["context"].get("drill") else \
            " [automatic]" if row["context"].get("automatic") else ""
        print(f"#{row['id']} {when} {row['kind']} {row['source']} -> {row['target']} (epoch {row['epoch']}): "
              f"{row['state']}{figures}{drill}" + (f" ({row['error']})" if row["error"] else ""))
    for d in drills:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(d["started_at"]))
        figures = "" if d["rto_writes_s"] is None else \
            f", RPO {d['rpo_records']} records, canary writes after {d['rto_writes_s']:.2f}s" + \
            ("" if d["rto_reads_s"] is None else f", reads after {d['rto_reads_s']:.2f}s")
        print(f"drill {d['id']} {when} {d['region']} ({d['mode']}): {d['state']}{figures}"
              + (f" ({d['error']})" if d["error"] else "") + (f"; report {d['report']}" if d["report"] else ""))
    return 0


async def _drill(config: DrConfig, args) -> int:
    if args.rate <= 0 or args.rate > 100_000:
        raise CliError(f"--rate: {args.rate:g} is not between 0 and 100000 records per second")
    if args.hold < 0:
        raise CliError(f"--hold: {args.hold:g} is negative")
    if args.full and config.platform_dir is None:
        raise CliError("--full: only on a local platform (dr --platform), whose supervisor the drill asks to kill "
                       "the region and start it again")
    pair_config = _pair_for(config, args)
    state_dir = Path(config.state_dir)
    history = History(state_dir)
    with _controller_lock(state_dir):
        if history.running(pair_config.pair.name) is not None:
            raise CliError(f"a failover of {pair_config.pair.name} is half done (dr history): finish it first", status=1)
        drill = Drill(config, pair_config, history, controller=_controller_id(),
                      report=lambda line: print(line, flush=True), rate=args.rate, hold_s=args.hold,
                      timeout_s=args.timeout, full=args.full)
        report = await drill.run(args.region)
    summary = report.to_dict()
    for phase in report.phases:
        print(f"{phase.name}: RPO {phase.rpo_records} records; writes accepted after {phase.rto_promoted_s:.2f}s; "
              f"canary writes after {_seconds(phase.rto_writes_s)}, reads after {_seconds(phase.rto_reads_s)}")
    print(f"drill {'PASSED' if report.passed else 'FAILED'}" + (f": {report.error}" if report.error else "") +
          f": {summary['acknowledged']} acknowledged, {report.lost} lost, {report.duplicated} duplicated, "
          f"{report.reordered} partitions reordered, {report.skipped} skipped, {report.reread} re-read"
          + (f"; {report.stranded} stranded, {report.kept} kept in seaway-canary.stranded (the failback counted "
             f"{report.stranded_counted})" if args.full else ""))
    for problem in report.problems:
        print(f"  {problem}")
    newest = history.drills(limit=1)[0]
    print(f"report: {newest['report']} and {Path(newest['report']).with_suffix('.json')}")
    return 0 if report.passed else 1


async def _serve(config: DrConfig, args) -> int:
    try:
        host, port = parse_listen(args.listen)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if not 0.1 <= args.poll_interval <= 3600:
        raise CliError(f"--poll-interval: {args.poll_interval:g} is not between 0.1 and 3600 seconds")
    try:
        where = ["--config", str(Path(args.config).resolve())] if args.config else \
            ["--platform", "--state-dir", str(config.platform_dir)]
        server = DrServer(config, host=host, port=port, poll_s=args.poll_interval, timeout_s=args.timeout,
                          controller=_controller_id(), lock=lambda: _controller_lock(Path(config.state_dir)),
                          dr_argv=[*where, "--timeout", f"{args.timeout:g}"])
    except ScheduleError as exc:
        raise CliError(str(exc)) from None
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    async with anyio.create_task_group() as tg:
        try:
            bound = await tg.start(server.run)
        except OSError as exc:
            raise CliError(f"--listen: cannot listen on {args.listen}: {exc.strerror or exc}", status=1) from None
        print(f"dr serve: http://{host}:{bound}/ (/metrics, /health, /api/v1/status, /api/v1/decisions, "
              f"/api/v1/history); {len(config.pairs)} DR pairs, state in {config.state_dir}", flush=True)
        print(f"dr serve: drills: {config.drill_schedule or 'none scheduled (drill_schedule in the topology)'}"
              + (f", next at {server.next_drill()}" if config.drill_schedule else ""), flush=True)
        if server.console is not None:
            source = config.console.prometheus_url or "its own scrapes (the last hour, in memory)"
            print(f"dr serve: console at http://{host}:{bound}/console/ (charts from {source}"
                  + ("; log in as a user of the platform" if server.console.secured else "") + ")", flush=True)
    return 0


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"


_COMMANDS = {"status": _status, "plan": _plan, "failover": _failover, "failback": _failback, "drill": _drill,
             "serve": _serve, "history": _history}


if __name__ == "__main__":
    sys.exit(main())
