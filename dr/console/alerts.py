"""Alert rules in Prometheus' rule-file format (compose/alerts.yml), evaluated by the console
when no Prometheus is configured. No I/O: the caller evaluates at each interval.

Theory of operation
-------------------
Each rule's expression (promql.py) is evaluated at each interval; every series it returns
is an alert of that rule, with the rule's labels over the series' own. An alert is *pending*
from the first evaluation that returns it and *firing* once it has been returned for the
rule's `for` (at once without one); an evaluation that no longer returns it resolves it,
and its `for` starts again. Annotations are rendered with the alert's labels and value, in
the forms the shipped rules use: `{{ $labels.name }}`, `{{ $value }}` and
`{{ $value | humanizeDuration }}`. These are Prometheus' rules, so the shipped promtool
tests (tests/compose/alerts_test.yml) are run against this module too.

A rule whose expression the console does not understand is kept with its error, so the page
can say that it is not evaluated rather than show it as quiet.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from .promql import PromQLError, evaluate, parse
from .series import Labels, SeriesStore

_DURATION = re.compile(r"^(\d+)(ms|s|m|h|d)$")
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_s(text: str) -> float:
    """A Prometheus duration of one unit (30s, 5m, 1h); ValueError for anything else."""
    m = _DURATION.match(str(text).strip())
    if m is None:
        raise ValueError(f"{text!r} is not a duration such as 30s or 5m")
    return int(m.group(1)) * _UNIT_S[m.group(2)]


@dataclass
class Rule:
    name: str
    group: str
    expr: str
    for_s: float
    labels: dict[str, str]
    annotations: dict[str, str]
    tree: Any = None
    error: str | None = None        # why the console cannot evaluate it


@dataclass
class Alert:
    rule: str
    labels: dict[str, str]
    value: float
    active_since: float
    state: str = "pending"          # or "firing"
    annotations: dict[str, str] = field(default_factory=dict)


def load_rules(text: str) -> list[Rule]:
    """The alerting rules of a rule file (recording rules are not the console's); ValueError
    naming the rule for a malformed one."""
    rules = []
    for group in (yaml.safe_load(text) or {}).get("groups", []):
        for raw in group.get("rules", []):
            if "alert" not in raw:
                continue
            name = raw["alert"]
            try:
                rule = Rule(name, group.get("name", ""), raw["expr"], duration_s(raw.get("for", "0s")),
                            {k: str(v) for k, v in (raw.get("labels") or {}).items()},
                            {k: str(v) for k, v in (raw.get("annotations") or {}).items()})
            except (KeyError, ValueError) as exc:
                raise ValueError(f"alert rule {name}: {exc}") from None
            try:
                rule.tree = parse(rule.expr)
            except PromQLError as exc:
                rule.error = str(exc)
            rules.append(rule)
    return rules


class RuleEvaluator:
    def __init__(self, rules: list[Rule]):
        self.rules = rules
        self.active: dict[tuple[str, Labels], Alert] = {}

    def evaluate(self, store: SeriesStore, at: float) -> list[Alert]:
        """Evaluate every rule at `at`; the alerts active after it, pending and firing."""
        for rule in self.rules:
            if rule.tree is None:
                continue
            try:
                result = evaluate(rule.tree, store, at)
            except PromQLError as exc:
                rule.error = str(exc)
                continue
            vector = result if isinstance(result, dict) else {(): result}
            seen = set()
            for series_labels, value in vector.items():
                labels = {**dict(series_labels), **rule.labels, "alertname": rule.name}
                key = (rule.name, tuple(sorted(labels.items())))
                seen.add(key)
                alert = self.active.get(key)
                if alert is None:
                    alert = self.active[key] = Alert(rule.name, labels, value, at)
                alert.value = value
                if at - alert.active_since >= rule.for_s:
                    alert.state = "firing"
                alert.annotations = {k: render(v, labels, value) for k, v in rule.annotations.items()}
            for key in [k for k in self.active if k[0] == rule.name and k not in seen]:
                del self.active[key]
        return sorted(self.active.values(), key=lambda a: (a.rule, sorted(a.labels.items())))

    def firing(self) -> list[Alert]:
        return [a for a in self.active.values() if a.state == "firing"]


_TEMPLATE = re.compile(r"\{\{\s*\$(labels\.(\w+)|value)\s*(?:\|\s*(\w+)\s*)?\}\}")


def render(template: str, labels: dict[str, str], value: float) -> str:
    def one(m: re.Match) -> str:
        if m.group(2) is not None:
            return labels.get(m.group(2), "")
        if m.group(3) == "humanizeDuration":
            return humanize_duration(value)
        if m.group(3) is None:
            return _number(value)
        return m.group(0)       # a function the console does not render: shown as written
    return _TEMPLATE.sub(one, template)


def _number(value: float) -> str:
    """As Go's strconv.FormatFloat(v, 'g', -1, 64), which Prometheus prints $value with."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    text = repr(float(value))
    if text.endswith(".0"):
        text = text[:-2]
    return text


def humanize_duration(seconds: float) -> str:
    """Prometheus' humanizeDuration: 90 -> 1m 30s, 0.25 -> 250ms, 3725 -> 1h 2m 5s."""
    if math.isnan(seconds) or math.isinf(seconds):
        return _number(seconds)
    if seconds == 0:
        return "0s"
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    if seconds < 1:
        for unit, scale in (("ms", 1e3), ("us", 1e6), ("ns", 1e9)):
            if seconds * scale >= 1 or unit == "ns":
                return f"{sign}{_significant(seconds * scale)}{unit}"
    days, rest = divmod(int(seconds), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    fraction = seconds - int(seconds)
    parts = []
    if days:
        parts.append(f"{days}d")
    if hours:
        parts.append(f"{hours}h")
    if minutes:
        parts.append(f"{minutes}m")
    if days or hours or minutes:
        parts.append(f"{secs}s")
    else:
        parts.append(f"{_significant(secs + fraction)}s")
    return sign + " ".join(parts)


def _significant(value: float) -> str:
    return f"{value:.4g}"
