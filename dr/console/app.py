"""The console: the web page `dr serve` serves on / and its JSON API under /api/v1/console.

Theory of operation
-------------------
Two sides, as in the rest of `dr serve`. The refresh loop runs on the event loop: every
`interval_s` it has the source (source.py) scrape or ask Prometheus, builds the overview
(view.py), takes the alerts, and computes the charts of each page someone looked at in the
last minute; then it publishes all of it as one dict, replaced whole. The HTTP handlers run on
the server's threads and only read what was published, so a page view never waits for a
cluster and never races the loop. A chart page asked for before the loop computed it wakes
the loop and waits for it (at most PAGE_WAIT_S).

Nobody watching costs little: with Prometheus the loop asks nothing until a page is viewed;
without it, it must scrape (the hour of history is the point) but computes no chart.

    GET  /console/                      the page (static files under /console/static/)
    GET  /api/v1/console/session        who is logged in, whether they may act (401: nobody)
    POST /api/v1/console/login          {"user", "password"}: a session cookie (security on)
    POST /api/v1/console/logout
    GET  /api/v1/console/overview       regions, clusters, nodes, links, DR pairs, alert counts
    GET  /api/v1/console/charts/PAGE    cluster (?cluster=NAME), replication, growth
    GET  /api/v1/console/alerts         pending and firing, and rules not evaluated
    GET  /api/v1/console/dr             pairs, history, drills, recent actions, the audit log
    GET  /api/v1/console/drills/ID      a drill's report (JSON, with its Markdown)
    POST /api/v1/console/plan           {"action": failover|failback|drill, "region", "force"}
    POST /api/v1/console/actions        the same and "confirm": the region's name, typed
    GET  /api/v1/console/actions/ID     an action's state and its lines (?since=N: the new ones)

Errors are JSON {"error": "..."} with 400 (the field named), 401, 403, 404, 409 or 503.
"""
from __future__ import annotations

import json
import logging
import math
import re
import threading
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel

from core.metrics_http import Request, Response

from ..config import DrConfig
from .actions import KINDS, Actions, Audit, Busy
from .alerts import Rule, load_rules
from .auth import ACTION_HEADER, COOKIE, MAX_NAME, SESSION_S, LoginRefused, LoginUnavailable, Session, Sessions, \
    check_login, secured
from .charts import PAGES, STATUS, Grid, charts_of, legend
from .scrape import Target, targets_from_platform
from .source import LocalSource, PrometheusSource, SourceError
from .view import links_view, platform_view

log = logging.getLogger("seaway.dr.console")

API = "/api/v1/console"
PAGE_WAIT_S = 10.0
WATCHED_S = 60.0            # a page viewed this recently is kept computed
TREND_MIN_S = 600.0         # history a days-until-full projection needs
REPO = Path(__file__).resolve().parents[2]
SHIPPED_RULES = REPO / "compose" / "alerts.yml"
STATIC_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                ".css": "text/css; charset=utf-8", ".png": "image/png", ".svg": "image/svg+xml",
                ".txt": "text/plain; charset=utf-8", "": "text/plain; charset=utf-8"}


def _json(status: int, body: Any, headers: list[tuple[str, str]] | None = None) -> Response:
    return Response(status, "application/json", json.dumps(body, default=str, allow_nan=False).encode() + b"\n",
                    [("Cache-Control", "no-store"), *(headers or [])])


def _error(status: int, message: str) -> Response:
    return _json(status, {"error": message})


def _clean(value: Any) -> Any:
    """JSON has no NaN or infinity: None instead (an empty point, an unknown value)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def load_alert_rules(path: str | None) -> tuple[list[Rule], str | None]:
    rules_path = Path(path) if path else SHIPPED_RULES
    try:
        return load_rules(rules_path.read_text()), None
    except OSError as exc:
        return [], f"no alert rules: cannot read {rules_path} ({exc.strerror or exc}); set console.alert_rules"
    except ValueError as exc:
        return [], f"no alert rules: {rules_path}: {exc}"


class Console:
    def __init__(self, config: DrConfig, *, dr_snapshot: Callable[[], dict], history: Callable[[], dict],
                 own_metrics: Callable[[], str], actions: Actions, interval_s: float = 5.0):
        self.config = config
        self.settings = config.console
        self.state_dir = Path(config.state_dir)
        self.dr_snapshot = dr_snapshot
        self.history = history
        self.interval_s = interval_s
        self.actions = actions
        self.audit = Audit(self.state_dir)
        self.sides = [side for p in config.pairs for side in (p.first, p.second)]
        self.secured = any(secured(side) for side in self.sides)
        self.sessions = Sessions(self.settings.operators)
        self.rules, self.rules_error = load_alert_rules(self.settings.alert_rules)
        self.source: LocalSource | PrometheusSource
        if self.settings.prometheus_url:
            self.source = PrometheusSource(self.settings.prometheus_url)
        else:
            self.source = LocalSource(self.targets(), self.rules, interval_s=interval_s,
                                      own=lambda: [(own_metrics(), {"job": "seaway-dr", "instance": "dr"})])
        self.known_nodes: dict[str, dict[str, str]] = {}
        self.published: dict[str, Any] = {"overview": None, "pages": {}, "alerts": [], "error": "starting"}
        self.wanted: dict[str, float] = {}          # page -> last asked for
        self.viewed_at = 0.0
        self._computed = threading.Condition()
        self._token: Any = None
        self._wake: anyio.Event | None = None
        self._static = resources.files("dr.console") / "static"

    def targets(self) -> list[Target]:
        targets = [Target(t.url, dict(t.labels)) for t in self.settings.targets]
        if self.config.platform_dir:
            try:
                platform = json.loads((Path(self.config.platform_dir) / "platform.json").read_text())
                targets += targets_from_platform(platform)
            except (OSError, ValueError) as exc:
                log.warning("console: cannot read the platform's endpoints: %s", exc)
        elif not targets:
            targets += [Target(g.metrics, {"job": "seaway-gateway", "instance": g.metrics.split("/")[2],
                                            "region": g.region}) for p in self.config.pairs for g in p.gateways]
        return targets

    # ------------------------------------------------------------------ the refresh loop

    async def run(self, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:
        self._token = anyio.lowlevel.current_token()
        self._wake = anyio.Event()
        task_status.started()
        next_tick = 0.0
        while True:
            now = time.time()
            ticked = now >= next_tick
            if ticked:
                next_tick = now + self.interval_s
            await self.refresh(now, tick=ticked)
            with anyio.move_on_after(max(0.0, next_tick - time.time())):
                await self._wake.wait()
            self._wake = anyio.Event()

    async def refresh(self, now: float | None = None, *, tick: bool = True) -> None:
        now = time.time() if now is None else now
        watched = now - self.viewed_at < WATCHED_S
        published = dict(self.published)
        try:
            if tick:
                await self.source.tick(now)
            if tick and (watched or isinstance(self.source, LocalSource) or published["overview"] is None):
                instants = await self.source.instants(STATUS, now)
                for labels, _ in instants.get("info", {}).items():
                    d = dict(labels)
                    if "instance" in d:
                        self.known_nodes[d["instance"]] = {k: d.get(k, "") for k in ("node_id", "roles", "rack")}
                # JSON has no NaN: cleaned once here, so that requests only serialize.
                published["overview"] = _clean(self._overview(instants, now))
                published["alerts"] = _clean(await self.source.alerts())
            pages = dict(published["pages"])
            for page in [p for p, at in self.wanted.items() if now - at < WATCHED_S]:
                if tick or page not in pages:
                    pages[page] = await self._page(page, now)
            published["pages"] = pages
            published["error"] = None
        except SourceError as exc:
            published["error"] = str(exc)
            log.warning("console: %s", exc)
        except Exception as exc:  # noqa: BLE001 — the console must outlive any one bad refresh
            published["error"] = f"{type(exc).__name__}: {exc}"
            log.exception("console: refresh failed")
        published["updated_at"] = now
        with self._computed:
            self.published = published
            self._computed.notify_all()

    def _overview(self, instants: dict, now: float) -> dict:
        view = platform_view(instants, self.known_nodes, list(self.config.regions))
        snapshot = self.dr_snapshot()
        pairs = []
        for st in snapshot.get("pairs", []):
            unreachable = [name for name, c in st["clusters"].items() if not c["reachable"]]
            why_none = None
            if st["active_region"]:
                health = "ok" if st["ready"] else "warn"
            elif unreachable:
                health, why_none = "bad", f"{', '.join(unreachable)} unreachable"
            elif not any(c["topics"] for c in st["clusters"].values()):
                health, why_none = "warn", "no DR topics yet (topics made in either region become DR topics)"
            else:
                health, why_none = "bad", "the pair's topics are active in both regions (a failover half done?)"
            pairs.append({"pair": st["pair"], "active_region": st["active_region"], "why_none": why_none,
                          "active_cluster": st["active_cluster"], "ready": st["ready"],
                          "rpo_records": st["rpo_at_risk"]["records"], "rpo_seconds": st["rpo_at_risk"]["seconds"],
                          "health": health})
        return {"platform": view, "links": links_view(instants, self.config.rpo_target_s), "pairs": pairs,
                "mode": self.source.mode, "at": now,
                "console": self.source.stats()}

    async def _page(self, page: str, now: float) -> dict:
        grid = Grid.ending(now)
        nodes = {instance: info.get("node_id", "") or instance for instance, info in self.known_nodes.items()}
        charts = []
        for chart in charts_of(page):
            results = await self.source.chart(chart, grid)
            series = []
            for query, found in zip(chart.queries, results):
                for labels, values in sorted(found, key=lambda f: sorted(f[0].items())):
                    if all(v is None for v in values):
                        continue
                    series.append({"name": legend(query.legend, labels, nodes), "labels": labels,
                                   "values": values})
            thresholds = []
            if chart.id == "wan":
                thresholds = [{"name": f"capacity {link}", "value": mbit * 1e6 / 8}
                              for link, mbit in sorted(self.settings.link_capacity_mbit.items())]
            charts.append({"id": chart.id, "title": chart.title, "unit": chart.unit, "note": chart.note,
                           "per_cluster": chart.per_cluster, "series": series,
                           "thresholds": thresholds})
        out: dict[str, Any] = {"page": page, "t": grid.times, "step": grid.step, "charts": charts, "at": now}
        if page == "growth":
            out["capacity"] = capacity_table(charts, self.published.get("overview"), grid)
        return out

    # ------------------------------------------------------------------ HTTP (server threads)

    def route(self, request: Request) -> Response | None:
        path = request.path
        if path in ("/", "/console") and request.method == "GET":
            return Response(303, "text/plain", b"see /console/\n", [("Location", "/console/")])
        if path.startswith("/console/"):
            return self._static_file(path.removeprefix("/console/") or "index.html")
        if not (path == API or path.startswith(API + "/")):
            return None
        rest = path[len(API):].strip("/")
        if rest == "login":
            return self._login(request) if request.method == "POST" else _error(405, "POST a login")
        session = self._session(request)
        if session is None and rest == "session" and request.method == "GET":
            # Asked first by the page: "log in" is its answer, not an error.
            return _json(200, {"user": None, "login_required": True, "security": True})
        if session is None:
            return _error(401, "log in first: POST /api/v1/console/login with the platform's user and password")
        if request.method == "POST":
            if ACTION_HEADER not in request.headers:
                return _error(403, f"a request that changes something needs the header {ACTION_HEADER}")
            return self._post(rest, request, session)
        if request.method != "GET":
            return _error(405, f"{request.method} is not served here")
        self.viewed_at = time.time()
        return self._get(rest, request, session)

    def _session(self, request: Request) -> Session | None:
        if not self.secured:
            return Session("anonymous", math.inf, True)
        return self.sessions.get(request.cookie(COOKIE))

    def _get(self, rest: str, request: Request, session: Session) -> Response:
        published = self.published
        if rest == "session":
            return _json(200, {"user": session.user, "may_act": session.may_act, "security": self.secured,
                               "mode": self.source.mode, "interval_s": self.interval_s,
                               "prometheus_url": self.settings.prometheus_url})
        if rest == "overview":
            if published["overview"] is None:
                return _error(503, f"no data yet: {published['error']}")
            return _json(200, {**published["overview"], "error": published["error"],
                               "alerts": _alert_counts(published["alerts"])})
        if rest.startswith("charts/"):
            page = rest.removeprefix("charts/")
            if page not in PAGES:
                return _error(404, f"no chart page {page!r}: one of {', '.join(PAGES)}")
            return self._charts(page, request.query.get("cluster"))
        if rest == "alerts":
            rule_errors = self.source.rule_errors() + ([{"rule": "*", "error": self.rules_error}]
                                                       if self.rules_error and self.source.mode == "local" else [])
            return _json(200, {"alerts": published["alerts"], "rule_errors": rule_errors,
                               "evaluated_by": "prometheus" if self.source.mode == "prometheus" else "console",
                               "rules": len(self.rules), "error": published["error"]})
        if rest == "dr":
            return _json(200, _clean(self._dr()))
        match = re.fullmatch(r"drills/(\d{1,12})", rest)
        if match:
            base = self.state_dir / "drills" / f"drill-{match.group(1)}"
            try:
                report = json.loads(base.with_suffix(".json").read_text())
            except (OSError, ValueError):
                return _error(404, f"no report for drill {match.group(1)}")
            try:
                markdown = base.with_suffix(".md").read_text()
            except OSError:
                markdown = None
            return _json(200, _clean({"report": report, "markdown": markdown}))
        match = re.fullmatch(r"actions/(\d{1,12})", rest)
        if match:
            action = self.actions.get(int(match.group(1)))
            if action is None:
                return _error(404, f"no action {match.group(1)} (the console keeps its last few)")
            try:
                since = max(0, int(request.query.get("since", "0")))
            except ValueError:
                return _error(400, "since: not a number")
            return _json(200, action.to_dict(since))
        return _error(404, f"no such resource: {API}/{rest}")

    def _charts(self, page: str, cluster: str | None) -> Response:
        self.wanted[page] = time.time()
        deadline = time.monotonic() + PAGE_WAIT_S
        with self._computed:
            while page not in self.published["pages"]:
                if self._token is not None and self._wake is not None:
                    try:
                        anyio.from_thread.run_sync(self._wake.set, token=self._token)
                    except (RuntimeError, TypeError):   # the loop has ended; the next tick computes it
                        pass
                left = deadline - time.monotonic()
                if left <= 0:
                    return _error(503, f"the {page} charts are not computed yet: {self.published['error'] or 'wait'}")
                self._computed.wait(min(left, 1.0))
            data = self.published["pages"][page]
        if cluster is not None:
            data = {**data, "charts": [
                {**c, "series": [s for s in c["series"] if s["labels"].get("cluster") == cluster]}
                if c["per_cluster"] else c for c in data["charts"]]}
        return _json(200, data)

    def _dr(self) -> dict:
        snapshot = self.dr_snapshot()
        try:
            history = self.history()
        except Exception as exc:  # noqa: BLE001 — the page shows the pairs and says why not the history
            history = {"error": str(exc), "failovers": [], "drills": []}
        return {"pairs": snapshot.get("pairs", []), "polled_at": snapshot.get("polled_at"),
                "next_drill": snapshot.get("next_drill"), "history": history,
                "actions": [a.to_dict() for a in self.actions.recent()], "audit": self.audit.tail(30),
                "rpo_target_s": self.config.rpo_target_s, "rto_target_s": self.config.rto_target_s}

    def _static_file(self, name: str) -> Response:
        if name.startswith("static/"):
            name = name.removeprefix("static/")
        if not re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*(/[A-Za-z0-9_-][A-Za-z0-9_.-]*)?", name):
            return Response(404, "text/plain; charset=utf-8", b"not found\n")
        resource = self._static.joinpath(*name.split("/"))
        try:
            body = resource.read_bytes()
        except (OSError, FileNotFoundError):
            return Response(404, "text/plain; charset=utf-8", b"not found\n")
        suffix = Path(name).suffix
        cache = "no-cache" if suffix == ".html" else "max-age=3600"
        return Response(200, STATIC_TYPES.get(suffix, "application/octet-stream"), body,
                        [("Cache-Control", cache), ("X-Content-Type-Options", "nosniff"),
                         ("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'; "
                                                     "img-src 'self' data:; frame-ancestors 'none'")])

    # ------------------------------------------------------------------ logins and actions

    def _login(self, request: Request) -> Response:
        body = _body(request)
        if isinstance(body, Response):
            return body
        user, password = body.get("user"), body.get("password")
        if not isinstance(user, str) or not user or len(user) > MAX_NAME:
            return _error(400, "user: a user name is required")
        if not isinstance(password, str) or len(password) > 1024:
            return _error(400, "password: a string is required")
        if not self.secured:
            return _json(200, {"user": "anonymous", "may_act": True, "security": False})
        try:
            super_users = anyio.run(lambda: check_login(self.sides, user, password))
        except LoginRefused as exc:
            self.audit.write(user, request.remote, "login", "refused")
            return _error(401, str(exc))
        except LoginUnavailable as exc:
            return _error(503, str(exc))
        token, session = self.sessions.open(user, super_users)
        self.audit.write(user, request.remote, "login", "ok", may_act=session.may_act)
        cookie = f"{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/; Max-Age={int(SESSION_S)}"
        return _json(200, {"user": user, "may_act": session.may_act, "security": True}, [("Set-Cookie", cookie)])

    def _post(self, rest: str, request: Request, session: Session) -> Response:
        if rest == "logout":
            self.sessions.close(request.cookie(COOKIE))
            return _json(200, {"logged_out": True}, [("Set-Cookie", f"{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; "
                                                                    "Max-Age=0")])
        if rest not in ("plan", "actions"):
            return _error(404, f"no such action: {API}/{rest}")
        body = _body(request)
        if isinstance(body, Response):
            return body
        kind, region, force = body.get("action"), body.get("region"), body.get("force", False)
        if kind not in KINDS:
            return _error(400, f"action: one of {', '.join(KINDS)}")
        if region not in self.config.regions:
            return _error(400, f"region: {region!r} is not a region of the platform "
                               f"({', '.join(self.config.regions)})")
        if not isinstance(force, bool):
            return _error(400, "force: true or false")
        what = f"{kind} {region}" + (" --force" if force else "")
        if not session.may_act:
            self.audit.write(session.user, request.remote, what, "forbidden")
            return _error(403, f"User:{session.user} may not start a {kind}: it takes a super user of the clusters "
                               f"or a principal in the DR configuration's console.operators")
        if rest == "plan":
            ready, text = self.actions.plan(kind, region, force)
            return _json(200, {"ready": ready, "plan": text, "confirm": region})
        if body.get("confirm") != region:
            return _error(400, f"confirm: type the region's name ({region}) to start the {kind}")
        try:
            action = self.actions.start(kind, region, force, session.user, on_end=lambda a: self.audit.write(
                a.user, request.remote, what, a.state, action=a.id, exit_code=a.exit_code))
        except Busy as exc:
            return _error(409, str(exc))
        self.audit.write(session.user, request.remote, what, "started", action=action.id)
        return _json(202, action.to_dict())


def _body(request: Request) -> dict | Response:
    if "json" not in request.headers.get("content-type", ""):
        return _error(415, "send JSON (Content-Type: application/json)")
    try:
        body = json.loads(request.body or b"{}")
    except ValueError:
        return _error(400, "the body is not JSON")
    if not isinstance(body, dict):
        return _error(400, "the body is a JSON object")
    return body


def _alert_counts(alerts: list[dict]) -> dict:
    return {"firing": sum(1 for a in alerts if a["state"] == "firing"),
            "pending": sum(1 for a in alerts if a["state"] == "pending")}


def capacity_table(charts: list[dict], overview: dict | None, grid: Grid) -> list[dict]:
    """Per broker: disk used now, its growth per day over the charted hour (a least-squares
    slope), the free space, and the days until full at that rate (None when not growing)."""
    disk = next((c for c in charts if c["id"] == "disk_broker"), None)
    nodes = {}
    if overview:
        for region in overview["platform"]["regions"]:
            for cluster in region["clusters"]:
                for n in cluster["nodes"]:
                    nodes[n["instance"]] = n
    out = []
    for s in disk["series"] if disk else []:
        points = [(t, v) for t, v in zip(grid.times, s["values"]) if v is not None]
        if not points:
            continue
        slope = _slope(points)
        node = nodes.get(s["labels"].get("instance", ""), {})
        free = node.get("disk_free")
        span_s = points[-1][0] - points[0][0]
        # A few minutes of history is too little to project months from: the projection waits
        # for TREND_MIN_S of it (the growth so far is still shown).
        per_day = slope * 86400 if slope is not None else None
        days = free / per_day if free is not None and per_day and per_day > 0 and span_s >= TREND_MIN_S else None
        out.append({"cluster": s["labels"].get("cluster"), "instance": s["labels"].get("instance"),
                    "node": s["name"], "used_bytes": points[-1][1], "growth_bytes_per_day": per_day,
                    "free_bytes": free, "total_bytes": node.get("disk_total"), "days_until_full": days,
                    "trend_s": span_s})
    return out


def _slope(points: list[tuple[float, float]]) -> float | None:
    if len(points) < 2:
        return None
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    if var == 0:
        return None
    return sum((t - mt) * (v - mv) for t, v in points) / var
