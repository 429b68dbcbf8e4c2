"""`dr`: the DR controller's commands.

    dr status [-o json]                              every DR pair: active region, roles, lag,
                                                     readiness (exit 0: ready to fail over)
    dr plan failover REGION [--to REGION] [--force]  the steps, checks, expected RPO and RTO;
                                                     changes nothing (exit 0: it could run)
    dr failover REGION [--to REGION] [--force]       carry the plan out, step by step
    dr plan failback REGION [--republish-stranded]   what bringing REGION back would do
    dr failback REGION [--republish-stranded]        bring REGION back and make it active again:
                                                     its stranded records are counted and kept
                                                     (or re-published), then a planned failover
    dr history [-o json]                             failovers and their measured figures

Which clusters: `--platform` (the default; the platform `regions up` runs, in
$SEAWAY_STATE_DIR or ~/.seaway/platform, or --state-dir) or `--config dr.yaml` (dr/config.py).
Errors are one line, exit status 2 for bad input and 1 for a refusal or a failed step.
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path

import anyio

from .config import DrConfig, DrConfigError, PairConfig, load_config, platform_config
from .failover import Failover, FailoverError
from .history import History, HistoryError
from .observe import PairClients, observe
from .plan import (PairView, PartitionLag, Plan, PlanError, count, find_pair, plan_failback, plan_failover,
                   plan_from_dict, plan_to_dict)


class CliError(Exception):
    def __init__(self, message: str, status: int = 2):
        super().__init__(message)
        self.status = status


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dr", description="Seaway's DR controller: status, plans, failovers.")
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


async def _view(clients: PairClients, history: History) -> PairView:
    """The pair as it is now; where the active side cannot be asked for its lag, the last lag
    seen (for an unplanned failover's expected loss). Every lag seen is kept."""
    view = await observe(clients)
    pair = clients.config.pair
    if view.lag_known:
        history.observed(pair.name, view.active(),
                         {f"{t}/{p}": [v.records, v.seconds] for (t, p), v in view.lag.items()})
        return view
    last = history.last_observation(pair.name)
    if last is None or not last["active"] or view.clusters[last["active"]].reachable:
        return view         # only an active side that stopped answering is judged by what it last showed
    lag = {}
    for key, (records, seconds) in last["lag"].items():
        topic, _, partition = key.rpartition("/")
        lag[(topic, int(partition))] = PartitionLag(records, seconds + (time.time() - last["at"]))
    return PairView(view.pair, view.clusters, lag)


# ---------------------------------------------------------------------------- plan / failover

async def _plan(config: DrConfig, args) -> int:
    pair_config = _pair_for(config, args)
    history = History(Path(config.state_dir))
    async with PairClients(pair_config, timeout_s=args.timeout) as clients:
        view = await _view(clients, history)
        if args.action == "failover":
            plan = plan_failover(view, args.region, force=args.force)
        else:
            settle = _failback_plan(view, history, args)
            if settle is None:
                print(f"no stranded records to settle: the failback is a planned failover of "
                      f"{_partner_region_of(pair_config, args.region)} back to {args.region}")
            plan = settle or plan_failover(view, _partner_region_of(pair_config, args.region))
    print(render_plan(plan))
    return 0 if plan.ready else 1


def _failback_plan(view: PairView, history: History, args) -> Plan | None:
    pair = view.pair
    returning = pair.cluster_in(args.region)
    unplanned = history.last_unplanned(pair.name, returning) if returning else None
    promotion = unplanned["context"].get("target_ends") if unplanned else None
    return plan_failback(view, args.region, republish=args.republish_stranded, promotion=promotion)


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
    lines += [f"  {'ok  ' if c.ok else 'FAIL'}  {c.name:<{width}}  {c.detail}" for c in plan.checks]
    lines.append("steps:")
    width = max(len(s.name) for s in plan.steps)
    lines += [f"  {i}. {s.name:<{width}}  {s.summary}" for i, s in enumerate(plan.steps, 1)]
    if plan.kind == "failback":
        lines.append(f"then: a planned failover of {pair.region_of(plan.target)} back to {pair.region_of(plan.source)} "
                     f"(RPO 0)")
    else:
        lines.append(f"expected: RPO {plan.rpo_records} records ({plan.rpo_seconds:.1f} s), "
                     f"RTO about {plan.rto_seconds:.1f} s")
    return "\n".join(lines)


async def _failover(config: DrConfig, args) -> int:
    pair_config = _pair_for(config, args)
    state_dir = Path(config.state_dir)
    history = History(state_dir)
    with _controller_lock(state_dir):
        async with PairClients(pair_config, timeout_s=args.timeout) as clients:
            running = _running(history, pair_config, args)
            if running is not None:
                plan = plan_from_dict(running["context"]["plan"])
            else:
                plan = _ready(plan_failover(await _view(clients, history), args.region, force=args.force))
            await _carry_out(config, clients, history, plan, running)
    return 0


async def _failback(config: DrConfig, args) -> int:
    """Settle the returning region's stranded records (a failback row), then fail back to it
    (a planned failover row). Either may be resumed by running the command again."""
    pair_config = _pair_for(config, args)
    pair = pair_config.pair
    state_dir = Path(config.state_dir)
    history = History(state_dir)
    with _controller_lock(state_dir):
        async with PairClients(pair_config, timeout_s=args.timeout) as clients:
            running = _running(history, pair_config, args)
            if running is not None and running["kind"] == "failback":
                await _carry_out(config, clients, history, plan_from_dict(running["context"]["plan"]), running)
                running = None
            elif running is None:
                view = await _view(clients, history)
                settle = _failback_plan(view, history, args)
                if settle is not None:
                    unplanned = history.last_unplanned(pair.name, settle.source)
                    assert unplanned is not None        # the plan's promotion check needs it
                    await _carry_out(config, clients, history, _ready(settle), None, extra={
                        "promotion": unplanned["context"]["target_ends"], "promotion_failover": unplanned["id"]})
            if running is None:
                back = _ready(plan_failover(await _view(clients, history), _partner_region_of(pair_config, args.region)))
            else:
                back = plan_from_dict(running["context"]["plan"])
            await _carry_out(config, clients, history, back, running)
    return 0


def _partner_region_of(pair_config: PairConfig, region: str) -> str:
    pair = pair_config.pair
    cluster = pair.cluster_in(region)
    assert cluster is not None
    return pair.region_of(pair.partner(cluster))


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
    print(f"failover #{outcome.failover_id} done in {outcome.duration_s:.2f}s: {pair.region_of(plan.target)} "
          f"is active; writes accepted after {outcome.rto_writes_s:.2f}s; RPO {outcome.rpo_records} records "
          f"({outcome.rpo_seconds:.1f} s{' expected' if plan.kind == 'unplanned' else ''})")
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
    pairs = []
    ready = bool(config.pairs)
    for pair_config in config.pairs:
        async with PairClients(pair_config, timeout_s=args.timeout) as clients:
            view = await _view(clients, history)
        active = view.active()
        # Ready: every region that is active for some topic could fail over now.
        plans = []
        for cluster in (view.pair.first, view.pair.second):
            if view.active_for(cluster):
                try:
                    plans.append(plan_failover(view, view.pair.region_of(cluster)))
                except PlanError:
                    pass
        checks = [c for plan in plans for c in plan.checks]
        pair_ready = bool(plans) and all(plan.ready for plan in plans) and not view.unsettled()
        ready = ready and pair_ready
        last = next((f for f in history.failovers() if f["pair"] == view.pair.name), None)
        pairs.append({
            "pair": view.pair.name,
            "active_region": view.pair.region_of(active) if active else None,
            "active_cluster": active,
            "active_for": {view.pair.region_of(c): len(view.active_for(c)) for c in (view.pair.first, view.pair.second)},
            "unsettled": view.unsettled(),
            "clusters": {name: {"region": view.pair.region_of(name), "reachable": c.reachable, "epoch": c.epoch,
                                "error": c.error,
                                "topics": {t: {"partitions": n, "replica_of": r} for t, (n, r) in sorted(c.topics.items())}}
                         for name, c in view.clusters.items()},
            "lag": [{"topic": t, "partition": p, "records": v.records, "seconds": round(v.seconds, 3)}
                    for (t, p), v in sorted(view.lag.items())],
            "rpo_at_risk": {"records": sum(v.records for v in view.lag.values()),
                            "seconds": round(max((v.seconds for v in view.lag.values()), default=0.0), 3)},
            "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in checks],
            "ready": pair_ready,
            "last_failover": None if last is None else {k: last[k] for k in (
                "id", "kind", "state", "source", "target", "started_at", "rto_writes_s", "rpo_records")},
        })
    if args.output == "json":
        print(json.dumps({"pairs": pairs, "ready": ready}, indent=2))
    else:
        print(render_status(pairs))
    return 0 if ready else 1


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
        risk = p["rpo_at_risk"]
        lines.append(f"  RPO at risk: {risk['records']} records, {risk['seconds']:.1f} s")
        for lag in p["lag"][:10]:
            lines.append(f"    {lag['topic']}-{lag['partition']}: {lag['records']} records, {lag['seconds']:.1f} s behind")
        for c in p["checks"]:
            lines.append(f"  {'ok  ' if c['ok'] else 'FAIL'}  {c['name']}: {c['detail']}")
        last = p["last_failover"]
        if last:
            lines.append(f"  last failover: #{last['id']} {last['kind']} {last['source']} -> {last['target']}, "
                         f"{last['state']}")
    return "\n".join(lines)


async def _history(config: DrConfig, args) -> int:
    history = History(Path(config.state_dir))
    rows = history.failovers()
    if args.output == "json":
        for row in rows:
            row["steps"] = history.steps(row["id"])
        print(json.dumps(rows, indent=2, default=str))
        return 0
    if not rows:
        print("no failovers yet")
        return 0
    for row in rows:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(row["started_at"]))
        figures = "" if row["rto_writes_s"] is None else \
            f", writes after {row['rto_writes_s']:.2f}s, RPO {row['rpo_records']} records"
        print(f"#{row['id']} {when} {row['kind']} {row['source']} -> {row['target']} (epoch {row['epoch']}): "
              f"{row['state']}{figures}" + (f" ({row['error']})" if row["error"] else ""))
    return 0


_COMMANDS = {"status": _status, "plan": _plan, "failover": _failover, "failback": _failback, "history": _history}


if __name__ == "__main__":
    sys.exit(main())
