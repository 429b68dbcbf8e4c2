"""Where the console's numbers come from: a Prometheus (compose configures one), or the
console's own scrapes (`regions up` has no Prometheus). Both answer the same three questions
in the same PromQL (charts.py), so the pages cannot tell them apart:

    instants(queries)     each query's vector now (the overview);
    chart(chart, grid)    each of a chart's queries over the last hour, on the chart's grid;
    alerts()              the shipped rules' alerts, pending and firing.

LocalSource scrapes every target at each `tick` into a raw history of ten minutes (what rates
and the rules' lookbacks need), evaluates every chart query on it at once and keeps the
results an hour (the recording rules that make an hour of charts cheap to draw: no chart is
ever computed from raw samples at view time), and evaluates the alert rules. Only the
families some query names are kept.

PrometheusSource asks Prometheus' HTTP API (/api/v1/query, /query_range, /alerts); its tick
does nothing, since Prometheus scrapes and evaluates by itself.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

import anyio

from .alerts import Rule, RuleEvaluator
from .charts import CHARTS, STATUS, Chart, Grid
from .promql import Aggregate, Binary, Call, PromQLError, Selector, evaluate, parse
from .scrape import ScrapeError, Target, fetch, scrape
from .series import Labels, SeriesStore

Vector = dict[Labels, float]
RAW_WINDOW_S = 600.0
_SUFFIXES = ("_total", "_bucket", "_count", "_sum", "_created")


class SourceError(Exception):
    """The source could not answer (Prometheus unreachable, a query refused): said on the page."""


def selector_names(tree: Any) -> set[str]:
    """The metric names an expression selects."""
    if isinstance(tree, Selector):
        return {tree.name}
    if isinstance(tree, Call):
        return set().union(*(selector_names(a) for a in tree.args))
    if isinstance(tree, Aggregate):
        return selector_names(tree.arg)
    if isinstance(tree, Binary):
        return selector_names(tree.left) | selector_names(tree.right)
    return set()


def families(names: Iterable[str]) -> set[str]:
    """Metric families whose samples carry these names (a counter's family has no _total)."""
    out = set()
    for name in names:
        out.add(name)
        for suffix in _SUFFIXES:
            if name.endswith(suffix):
                out.add(name[: -len(suffix)])
    return out


def _alert_dict(name: str, state: str, labels: dict[str, str], annotations: dict[str, str], since: float | None,
                value: float | None) -> dict:
    return {"name": name, "state": state, "severity": labels.get("severity", ""), "since": since,
            "labels": {k: v for k, v in labels.items() if k not in ("alertname", "severity")},
            "summary": annotations.get("summary", ""), "description": annotations.get("description", ""),
            "value": value}


class LocalSource:
    mode = "local"

    def __init__(self, targets: list[Target], rules: list[Rule], *, interval_s: float = 5.0,
                 own: Callable[[], list[tuple[str, dict[str, str]]]] = lambda: [], timeout_s: float = 2.0):
        self.targets = targets
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.own = own      # (exposition text, target labels) of the serving process's own metrics
        self.rules = rules
        self.evaluator = RuleEvaluator(rules)
        self.trees = {(chart.id, i): parse(q.expr) for chart in CHARTS for i, q in enumerate(chart.queries)}
        self.status_trees: dict[str, Any] = {expr: parse(expr) for expr in STATUS.values()}
        names = set().union(*(selector_names(t) for t in self.trees.values()),
                            *(selector_names(t) for t in self.status_trees.values()),
                            *(selector_names(r.tree) for r in rules if r.tree is not None))
        self.raw = SeriesStore(families(names) - {"up"}, window_s=RAW_WINDOW_S, interval_s=interval_s)
        self.recorded = SeriesStore((), window_s=3600.0, interval_s=interval_s)
        self.last_scrape: dict[str, str | None] = {}
        self.alerts_now: list[dict] = []
        self.last_tick_s = 0.0

    async def tick(self, now: float | None = None) -> None:
        now = time.time() if now is None else now
        self.last_scrape = await scrape(self.targets, self.raw, at=now, timeout_s=self.timeout_s)
        started = time.process_time()
        for text, labels in self.own():
            self.raw.ingest(now, text, labels)
        for (chart_id, i), tree in self.trees.items():
            try:
                result = evaluate(tree, self.raw, now)
            except PromQLError:
                continue
            vector = result if isinstance(result, dict) else {(): result}
            for labels, value in vector.items():
                self.recorded.record(now, f"{chart_id}/{i}", dict(labels), value)
        self.recorded.expire(now)
        self.alerts_now = [_alert_dict(a.rule, a.state, a.labels, a.annotations, a.active_since,
                                       a.value) for a in self.evaluator.evaluate(self.raw, now)]
        self.last_tick_s = time.process_time() - started

    async def instants(self, queries: dict[str, str], now: float | None = None) -> dict[str, Vector]:
        now = time.time() if now is None else now
        out = {}
        for name, expr in queries.items():
            tree = self.status_trees.get(expr)
            if tree is None:
                tree = self.status_trees[expr] = parse(expr)
            result = evaluate(tree, self.raw, now)
            out[name] = result if isinstance(result, dict) else {(): result}
        return out

    async def chart(self, chart: Chart, grid: Grid) -> list[list[tuple[dict[str, str], list[float | None]]]]:
        """Per query of the chart: (labels, values on the grid) per series."""
        out = []
        for query_id in chart.query_ids():
            series = self.recorded.points(query_id, since=grid.start - grid.step)
            out.append([(dict(s.labels), grid.align(s.points)) for s in series])
        return out

    async def alerts(self) -> list[dict]:
        return list(self.alerts_now)

    def rule_errors(self) -> list[dict]:
        return [{"rule": r.name, "error": r.error} for r in self.rules if r.error]

    def stats(self) -> dict:
        """What the console itself costs and sees, for the overview."""
        return {"memory_bytes": self.raw.nbytes() + self.recorded.nbytes(),
                "series": len(self.raw.rings) + len(self.recorded.rings),
                "scrape_errors": {url: e for url, e in self.last_scrape.items() if e},
                "refresh_cpu_s": self.last_tick_s}


class PrometheusSource:
    mode = "prometheus"

    def __init__(self, url: str, *, timeout_s: float = 5.0):
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    async def tick(self, now: float | None = None) -> None:
        return None

    async def _get(self, path: str, params: dict[str, Any]) -> Any:
        url = f"{self.url}{path}?{urlencode(params)}"
        try:
            body = await fetch(url, timeout_s=self.timeout_s)
        except ScrapeError as exc:
            raise SourceError(f"Prometheus: {exc}") from None
        try:
            doc = json.loads(body)
        except ValueError:
            raise SourceError(f"Prometheus at {self.url} answered something that is not JSON") from None
        if doc.get("status") != "success":
            raise SourceError(f"Prometheus: {doc.get('error') or doc}")
        return doc["data"]

    @staticmethod
    def _labels(metric: dict[str, str]) -> Labels:
        return tuple(sorted((k, v) for k, v in metric.items() if k != "__name__"))

    async def instants(self, queries: dict[str, str], now: float | None = None) -> dict[str, Vector]:
        now = time.time() if now is None else now
        out: dict[str, Vector] = {}

        async def one(name: str, expr: str) -> None:
            data = await self._get("/api/v1/query", {"query": expr, "time": f"{now:.3f}"})
            if data.get("resultType") == "scalar":
                out[name] = {(): float(data["result"][1])}
                return
            out[name] = {self._labels(r["metric"]): float(r["value"][1]) for r in data.get("result", [])}

        async with anyio.create_task_group() as tg:
            for name, expr in queries.items():
                tg.start_soon(one, name, expr)
        return out

    async def chart(self, chart: Chart, grid: Grid) -> list[list[tuple[dict[str, str], list[float | None]]]]:
        results: list[list] = [[] for _ in chart.queries]

        async def one(i: int, expr: str) -> None:
            data = await self._get("/api/v1/query_range", {"query": expr, "start": f"{grid.start:.3f}",
                                                           "end": f"{grid.times[-1]:.3f}", "step": f"{grid.step:g}"})
            for r in data.get("result", []):
                points = [(float(t), float(v)) for t, v in r.get("values", [])]
                results[i].append((dict(self._labels(r["metric"])), grid.align(points)))

        async with anyio.create_task_group() as tg:
            for i, q in enumerate(chart.queries):
                tg.start_soon(one, i, q.expr)
        return results

    async def alerts(self) -> list[dict]:
        data = await self._get("/api/v1/alerts", {})
        out = []
        for a in data.get("alerts", []):
            labels = a.get("labels", {})
            try:
                since = datetime.fromisoformat(a["activeAt"].replace("Z", "+00:00")).timestamp()
            except (KeyError, ValueError, TypeError):
                since = None
            try:
                value = float(a.get("value"))
            except (TypeError, ValueError):
                value = None
            out.append(_alert_dict(labels.get("alertname", "?"), a.get("state", "firing"), labels,
                                   a.get("annotations", {}), since, value))
        return out

    def rule_errors(self) -> list[dict]:
        return []

    def stats(self) -> dict:
        return {"memory_bytes": 0, "series": None, "scrape_errors": {}, "refresh_cpu_s": None}
