"""`dr serve`: the DR controller as a daemon. It polls every pair's health and lag, exports them
as Prometheus metrics, serves the decisions and the history as JSON for switching clients and
the console, and runs the drills of `drill_schedule`.

    GET /metrics                      Prometheus (the seaway_dr_* series below)
    GET /health                       200 once a poll has succeeded lately, else 503 and why
    GET /api/v1/status                every pair, as `dr status -o json` prints it
    GET /api/v1/decisions             every decision in the state directory, by key
    GET /api/v1/decisions/<key>       one (a pair's name, or <pair>.canary): 404 if none yet
    GET /api/v1/history               failovers and drills, as `dr history -o json`
    GET /api/v1/drills/<id>           one drill's report (JSON); /api/v1/drills/<id>.md in Markdown
    GET /console/, /api/v1/console/*  the console (dr/console/app.py), unless console.enabled is false

The HTTP server runs on a thread of its own (core/metrics_http.py). Its handlers read only
what the poll loop published (a dict replaced whole) and the state directory, and open the
history database per request (SQLite connections stay on their thread).

Drills: `drill_schedule` is cron, five fields (`0 3 * * 0`: Sundays at 03:00), or six with
seconds first (`*/30 * * * * *`, for tests). Each run drills the region active for the pair
(none is skipped and logged); a drill never overlaps a failover: both take the controller lock,
and a drill that finds it taken is skipped.

Automatic failover, with `auto_failover_after_s` set (off by default): the poll that finds the
active cluster unreachable from here, and unheard by its partner, for that long fails it over
unplanned (dr/autofailover.py says when exactly, and why both).
"""
from __future__ import annotations

import json
import logging
import re
import time
from pathlib import Path
from typing import Any, Callable

import anyio
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from core.client.errors import KafkaError
from core.metrics_http import Request, Response, serve_http

from .config import DrConfig, PairConfig
from .console.actions import Actions
from .console.app import Console
from .decision import Decision
from .drill import Drill
from .drill_report import DrillReport
from .autofailover import OutageClock, heard_ago, judge
from .failover import Failover, FailoverError
from .history import History, HistoryError
from .observe import PairClients
from .plan import PlanError, plan_failover, plan_to_dict
from .schedule import drill_trigger
from .status import pair_status, view_of

log = logging.getLogger("seaway.dr.serve")

DEFAULT_LISTEN = "127.0.0.1:9780"
API = "/api/v1"


class DrMetrics:
    def __init__(self):
        self.registry = CollectorRegistry()
        r = self.registry
        self.active = Gauge("seaway_dr_active_region", "1 for the region active for every DR topic of the pair",
                            ["pair", "region"], registry=r)
        self.ready = Gauge("seaway_dr_ready", "1 when the pair could fail over now (dr status exit 0)",
                           ["pair"], registry=r)
        self.reachable = Gauge("seaway_dr_cluster_reachable", "1 when the cluster answered the last poll",
                               ["pair", "cluster"], registry=r)
        self.epoch = Gauge("seaway_dr_epoch", "the cluster's DR epoch", ["pair", "cluster"], registry=r)
        self.rpo_records = Gauge("seaway_dr_rpo_at_risk_records",
                                 "records the link out of the active side has yet to copy (lost if it failed now)",
                                 ["pair", "topic"], registry=r)
        self.rpo_seconds = Gauge("seaway_dr_rpo_at_risk_seconds",
                                 "age of the oldest record not yet copied, per topic", ["pair", "topic"], registry=r)
        self.rpo_bytes = Gauge("seaway_dr_rpo_at_risk_bytes",
                               "log bytes the link out of the active side has yet to copy (estimated above 256 KiB "
                               "a partition)", ["pair", "topic"], registry=r)
        self.checkpoint_age = Gauge("seaway_dr_checkpoint_age_seconds",
                                    "age of the newest group checkpoint on the standby (grows while no group moves; "
                                    "absent before the first)", ["pair"], registry=r)
        self.groups_unsynced = Gauge("seaway_dr_groups_unsynced",
                                     "groups whose checkpoints on the standby do not follow their commits",
                                     ["pair"], registry=r)
        self.failovers = Gauge("seaway_dr_failovers", "failovers in the history, by kind and state",
                               ["pair", "kind", "state"], registry=r)
        self.drill_passed = Gauge("seaway_dr_last_drill_passed", "1 if the last drill passed", ["pair"], registry=r)
        self.drill_rpo = Gauge("seaway_dr_last_drill_rpo_records", "the last drill's failover RPO", ["pair"],
                               registry=r)
        self.drill_rto = Gauge("seaway_dr_last_drill_rto_seconds",
                               "the last drill's failover RTO as the canary clients saw it",
                               ["pair", "measure"], registry=r)
        self.drill_time = Gauge("seaway_dr_last_drill_timestamp_seconds", "when the last drill started",
                                ["pair"], registry=r)
        self.unreachable_for = Gauge("seaway_dr_active_unreachable_seconds",
                                     "how long the active cluster has not answered the controller's polls (0: it "
                                     "answers)", ["pair"], registry=r)
        self.auto_failovers = Counter("seaway_dr_auto_failovers", "automatic failovers, by outcome (done, failed, "
                                      "skipped: the lock was held)", ["pair", "outcome"], registry=r)
        self.polls = Counter("seaway_dr_polls", "polls of the pairs, by outcome", ["outcome"], registry=r)
        self.drills = Counter("seaway_dr_scheduled_drills", "scheduled drills, by outcome", ["outcome"],
                              registry=r)

    def update(self, statuses: list[dict], history: History) -> None:
        for gauge in (self.active, self.ready, self.reachable, self.epoch, self.rpo_records, self.rpo_seconds,
                      self.rpo_bytes, self.checkpoint_age, self.groups_unsynced, self.failovers, self.drill_passed,
                      self.drill_rpo, self.drill_rto, self.drill_time):
            gauge.clear()       # a topic deleted or a pair removed leaves no stale series
        for st in statuses:
            pair = st["pair"]
            for name, cluster in st["clusters"].items():
                self.active.labels(pair, cluster["region"]).set(1 if st["active_cluster"] == name else 0)
                self.reachable.labels(pair, name).set(1 if cluster["reachable"] else 0)
                self.epoch.labels(pair, name).set(cluster["epoch"])
            self.ready.labels(pair).set(1 if st["ready"] else 0)
            by_topic: dict[str, list[float]] = {}
            for lag in st["lag"]:
                records, seconds, size = by_topic.setdefault(lag["topic"], [0, 0.0, 0])
                by_topic[lag["topic"]] = [records + lag["records"], max(seconds, lag["seconds"]),
                                          size + (lag["bytes"] or 0)]
            topics = {t for c in st["clusters"].values() for t in c["topics"]}
            for topic in topics:
                records, seconds, size = by_topic.get(topic, [0, 0.0, 0])
                self.rpo_records.labels(pair, topic).set(records)
                self.rpo_seconds.labels(pair, topic).set(seconds)
                self.rpo_bytes.labels(pair, topic).set(size)
            checkpoints = st["checkpoints"]
            if checkpoints["age_seconds"] is not None:
                self.checkpoint_age.labels(pair).set(checkpoints["age_seconds"])
            self.groups_unsynced.labels(pair).set(sum(1 for g in checkpoints["groups"] if not g["synced"]))
            drill = st.get("last_drill")
            if drill:
                self.drill_passed.labels(pair).set(1 if drill["state"] == "passed" else 0)
                self.drill_time.labels(pair).set(drill["started_at"])
                if drill["rpo_records"] is not None:
                    self.drill_rpo.labels(pair).set(drill["rpo_records"])
                for measure in ("writes", "reads"):
                    if drill[f"rto_{measure}_s"] is not None:
                        self.drill_rto.labels(pair, measure).set(drill[f"rto_{measure}_s"])
        counts: dict[tuple[str, str, str], int] = {}
        for row in history.failovers(limit=10_000):
            key = (row["pair"], row["kind"], row["state"])
            counts[key] = counts.get(key, 0) + 1
        for (pair, kind, state), n in counts.items():
            self.failovers.labels(pair, kind, state).set(n)


class DrServer:
    def __init__(self, config: DrConfig, *, host: str, port: int, poll_s: float = 5.0, timeout_s: float = 5.0,
                 controller: str, lock: Callable[[], Any], drill_rate: float = 200.0, drill_hold_s: float = 2.0,
                 dr_argv: list[str]):
        self.config = config
        self.state_dir = Path(config.state_dir)
        self.host, self.port = host, port
        self.poll_s = poll_s
        self.timeout_s = timeout_s
        self.controller = controller
        self.lock = lock        # a context manager factory: the controller lock, or an error if held
        self.drill_rate, self.drill_hold_s = drill_rate, drill_hold_s
        self.metrics = DrMetrics()
        self.snapshot: dict = {"pairs": [], "ready": False, "polled_at": None}
        self.last_poll_ok: float | None = None
        self.last_poll_error = "no poll yet"
        self.trigger = drill_trigger(config.drill_schedule) if config.drill_schedule else None
        self.outages = OutageClock()
        self.verdicts: dict[str, str] = {}      # pair -> the last automatic-failover verdict logged
        self.console: Console | None = None
        # dr_argv: the arguments that select this configuration (`--config F` or `--platform
        # --state-dir D`, and the timeout), which the console's actions hand a child `dr`.
        if config.console.enabled:
            self.console = Console(config, dr_snapshot=lambda: self.snapshot, history=self._history,
                                   own_metrics=lambda: generate_latest(self.metrics.registry).decode(),
                                   actions=Actions(dr_argv))

    def _history(self) -> dict:
        history = History(self.state_dir)
        return {"failovers": history.failovers(), "drills": history.drills()}

    async def run(self, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:
        self.port = serve_http(self.metrics.registry, self.port, self.host, health=self._health,
                               routes=self._route)
        scheduler = None
        if self.trigger is not None:
            from apscheduler.schedulers.asyncio import AsyncIOScheduler
            scheduler = AsyncIOScheduler(timezone="UTC")
            for pair_config in self.config.pairs:
                scheduler.add_job(self._scheduled_drill, self.trigger, args=[pair_config],
                                  id=f"drill {pair_config.pair.name}", max_instances=1, coalesce=True,
                                  misfire_grace_time=60)
            scheduler.start()
        try:
            async with anyio.create_task_group() as tg:
                if self.console is not None:
                    await tg.start(self.console.run)
                task_status.started(self.port)
                while True:
                    await self.poll()
                    await anyio.sleep(self.poll_s)
        finally:
            if scheduler is not None:
                scheduler.shutdown(wait=False)

    def next_drill(self) -> str | None:
        if self.trigger is None:
            return None
        from datetime import datetime, timezone
        fire = self.trigger.get_next_fire_time(None, datetime.now(timezone.utc))
        return fire.isoformat() if fire else None

    async def poll(self) -> None:
        try:
            history = History(self.state_dir)
            statuses = [await pair_status(p, history, timeout_s=self.timeout_s) for p in self.config.pairs]
            self.metrics.update(statuses, history)
        except (HistoryError, OSError) as exc:
            self.last_poll_error = str(exc)
            self.metrics.polls.labels("failed").inc()
            log.warning("poll failed: %s", exc)
            return
        self.snapshot = {"pairs": statuses, "ready": bool(statuses) and all(s["ready"] for s in statuses),
                         "polled_at": time.time(), "next_drill": self.next_drill()}
        self.last_poll_ok = time.monotonic()
        self.metrics.polls.labels("ok").inc()
        for status in statuses:
            await self._watch_outage(status, history)

    async def _watch_outage(self, status: dict, history: History) -> None:
        """Time the active cluster's outage; with auto_failover_after_s, fail it over when
        dr/autofailover.py's judge says so."""
        name, active = status["pair"], status["active_cluster"]
        if active is None:
            return
        now = time.time()
        unreachable_for = self.outages.observe(active, status["clusters"][active]["reachable"], now)
        self.metrics.unreachable_for.labels(name).set(unreachable_for or 0)
        after = self.config.auto_failover_after_s
        if after is None or unreachable_for is None:
            self.verdicts.pop(name, None)
            return
        pair_config = next(p for p in self.config.pairs if p.pair.name == name)
        partner = pair_config.pair.partner(active)
        heard = None
        if unreachable_for >= after and status["clusters"][partner]["reachable"]:
            try:
                async with PairClients(pair_config, timeout_s=self.timeout_s) as clients:
                    if partner in clients.clients:
                        heard = await heard_ago(clients.clients[partner], active, now)
            except (KafkaError, OSError, TimeoutError) as exc:
                log.warning("%s: cannot read %s's heartbeats on %s: %s", name, active, partner, exc)
        running = history.running(name)
        verdict = judge(unreachable_for=unreachable_for, partner_reachable=status["clusters"][partner]["reachable"],
                        heard_ago=heard, after_s=after,
                        busy=f"failover #{running['id']} is half done" if running else None)
        if self.verdicts.get(name) != verdict.reason:
            log.warning("%s: automatic failover %s: %s", name, "now" if verdict.act else "not yet", verdict.reason)
            self.verdicts[name] = verdict.reason
        if verdict.act:
            await self._fail_over(pair_config, active, verdict, unreachable_for, heard)

    async def _fail_over(self, pair_config: PairConfig, active: str, verdict, unreachable_for: float,
                         heard: float | None) -> None:
        """`dr failover REGION --force`, marked automatic, with the evidence in its context."""
        name, region = pair_config.pair.name, pair_config.pair.region_of(active)
        try:
            with self.lock():
                history = History(self.state_dir)
                async with PairClients(pair_config, timeout_s=self.timeout_s) as clients:
                    plan = plan_failover(await view_of(clients, history), region, force=True)
                    if plan.kind != "unplanned" or not plan.ready:
                        why = "; ".join(f"{c.name}: {c.detail}" for c in plan.failed_checks()) or \
                            f"{active} answers again"
                        log.warning("%s: automatic failover of %s not started: %s", name, region, why)
                        self.metrics.auto_failovers.labels(name, "skipped").inc()
                        return
                    failover = Failover(self.config, clients, history, controller=self.controller,
                                        report=lambda _step, line: log.warning("%s: auto failover: %s", name, line))
                    outcome = await failover.run(plan, context_extra={"plan": plan_to_dict(plan), "automatic": {
                        "reason": verdict.reason, "unreachable_for_s": round(unreachable_for, 1),
                        "partner_heard_ago_s": None if heard is None else round(heard, 1)}})
        except (FailoverError, PlanError, KafkaError, OSError) as exc:
            log.error("%s: automatic failover of %s failed: %s", name, region, exc)
            self.metrics.auto_failovers.labels(name, "failed").inc()
            return
        except Exception as exc:  # noqa: BLE001 — the lock held (a person's failover, a drill): not now
            log.warning("%s: automatic failover of %s not started: %s", name, region, exc)
            self.metrics.auto_failovers.labels(name, "skipped").inc()
            return
        self.metrics.auto_failovers.labels(name, "done").inc()
        log.warning("%s: automatic failover #%d done: %s active, RPO %d records expected", name,
                    outcome.failover_id, pair_config.pair.region_of(plan.target), outcome.rpo_records)

    async def _scheduled_drill(self, pair_config: PairConfig) -> DrillReport | None:
        """Drill the region active for the pair now; skipped (and logged) when none is, or
        when a failover holds the controller lock."""
        status = next((s for s in self.snapshot["pairs"] if s["pair"] == pair_config.pair.name), None)
        region = status["active_region"] if status else None
        if region is None:
            log.warning("scheduled drill of %s skipped: no region is active for the whole pair", pair_config.pair.name)
            self.metrics.drills.labels("skipped").inc()
            return None
        try:
            with self.lock():
                history = History(self.state_dir)
                if history.running(pair_config.pair.name) is not None:
                    raise RuntimeError("a failover is half done")
                drill = Drill(self.config, pair_config, history, controller=self.controller,
                              report=lambda line: log.info("drill: %s", line), rate=self.drill_rate,
                              hold_s=self.drill_hold_s, timeout_s=self.timeout_s)
                report = await drill.run(region)
        except Exception as exc:  # noqa: BLE001 — a scheduled job must not take the daemon down
            log.warning("scheduled drill of %s skipped: %s", pair_config.pair.name, exc)
            self.metrics.drills.labels("skipped").inc()
            return None
        self.metrics.drills.labels("passed" if report.passed else "failed").inc()
        log.info("scheduled drill of %s in %s: %s", pair_config.pair.name, region,
                 "passed" if report.passed else f"FAILED {report.error or ''}")
        await self.poll()
        return report

    # ------------------------------------------------------------------ HTTP (on the server's thread)

    def _health(self) -> tuple[bool, str]:
        if self.last_poll_ok is None:
            return False, f"not polled yet: {self.last_poll_error}"
        age = time.monotonic() - self.last_poll_ok
        if age > max(3 * self.poll_s, 30):
            return False, f"last successful poll {age:.0f}s ago: {self.last_poll_error}"
        return True, "ok"

    def _route(self, request: Request) -> Response | tuple[int, str, bytes] | None:
        """The answer to an API or console request; None for anything else (/metrics)."""
        if self.console is not None:
            answer = self.console.route(request)
            if answer is not None:
                return answer
        path = request.path
        if not path.startswith(API + "/"):
            return None
        rest = path[len(API) + 1:]
        if rest == "status":
            return _json(200, self.snapshot)
        if rest == "decisions":
            return _json(200, {d.pair: d.__dict__ for d in self._decisions()})
        if rest.startswith("decisions/"):
            key = rest.removeprefix("decisions/")
            found = next((d for d in self._decisions() if d.pair == key), None)
            return _json(200, found.__dict__) if found else _json(404, {"error": f"no decision for {key!r} yet"})
        if rest == "history":
            try:
                history = History(self.state_dir)
                return _json(200, {"failovers": history.failovers(), "drills": history.drills()})
            except HistoryError as exc:
                return _json(503, {"error": str(exc)})
        match = re.fullmatch(r"drills/(\d+)(\.md|\.json)?", rest)
        if match:
            path_ = self.state_dir / "drills" / f"drill-{match.group(1)}{match.group(2) or '.json'}"
            try:
                body = path_.read_bytes()
            except OSError:
                return _json(404, {"error": f"no report for drill {match.group(1)}"})
            return 200, "text/markdown; charset=utf-8" if match.group(2) == ".md" else "application/json", body
        return _json(404, {"error": f"no such resource: {path}"})

    def _decisions(self) -> list[Decision]:
        out = []
        for path in sorted((self.state_dir / "active").glob("*.json")):
            try:
                out.append(Decision.decode(path.read_bytes()))
            except (OSError, ValueError, KeyError, TypeError):
                continue
        return out


def _json(status: int, body: Any) -> tuple[int, str, bytes]:
    return status, "application/json", json.dumps(body, indent=2, default=str).encode() + b"\n"


def parse_listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--listen: {value!r} is not HOST:PORT")
    return host or "127.0.0.1", int(port)
