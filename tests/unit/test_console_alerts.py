"""dr/console/alerts.py: the shipped alert rules evaluated by the console, held to the same
promtool unit tests as Prometheus (tests/compose/alerts_test.yml, which
tests/compose/test_alert_rules.py runs through promtool): each test group's input series go
into the console's history and each expected alert must fire, with its labels and rendered
annotations, at the time promtool expects and not otherwise."""
from __future__ import annotations

import re

import pytest
import yaml

from dr.console.alerts import RuleEvaluator, duration_s, humanize_duration, load_rules, render
from dr.console.promql import Selector, parse
from dr.console.series import SeriesStore
from tests.support.node import REPO

ALERTS = REPO / "compose" / "alerts.yml"
PROMTOOL_TESTS = yaml.safe_load((REPO / "tests" / "compose" / "alerts_test.yml").read_text())


def expand(values: str) -> list[float | None]:
    """promtool's expanding notation: 'a', 'a+bxn' and 'a-bxn' (n+1 values), 'axn' (a, n+1
    times), '_' (no sample), '_xn'."""
    out: list[float | None] = []
    for item in values.split():
        m = re.fullmatch(r"(_|-?[\d.eE+]+?)(?:([+-][\d.]+)?x(\d+))?", item)
        assert m, f"cannot expand {item!r}"
        start, step, times = m.group(1), m.group(2), m.group(3)
        if times is None:
            out.append(None if start == "_" else float(start))
            continue
        for i in range(int(times) + 1):
            out.append(None if start == "_" else float(start) + i * float(step or 0))
    return out


def test_expanding_notation_as_promtool_documents_it():
    assert expand("-2+4x3") == [-2, 2, 6, 10]
    assert expand("1-2x4") == [1, -1, -3, -5, -7]
    assert expand("0 1x2 _ 5") == [0, 1, 1, 1, None, 5]


@pytest.mark.parametrize("group", PROMTOOL_TESTS["tests"], ids=[t["name"][:60] for t in PROMTOOL_TESTS["tests"]])
def test_the_console_passes_the_shipped_promtool_tests(group):
    interval = duration_s(group.get("interval", PROMTOOL_TESTS["evaluation_interval"]))
    every = duration_s(PROMTOOL_TESTS["evaluation_interval"])
    store = SeriesStore(set(), window_s=24 * 3600, interval_s=interval)
    for series in group["input_series"]:
        selector = parse(series["series"])
        assert isinstance(selector, Selector)
        labels = {label: value for label, _, value in selector.matchers}
        for i, value in enumerate(expand(series["values"])):
            if value is not None:
                store.record(i * interval, selector.name, labels, value)
    rules = load_rules(ALERTS.read_text())
    assert not [r.error for r in rules if r.error]
    evaluator = RuleEvaluator(rules)
    cases = sorted(group["alert_rule_test"], key=lambda c: duration_s(c["eval_time"]))
    t = 0.0
    for case in cases:
        until = duration_s(case["eval_time"])
        while t <= until + 1e-9:
            evaluator.evaluate(store, t)
            t += every
        got = sorted((sorted((k, v) for k, v in a.labels.items() if k != "alertname"), sorted(a.annotations.items()))
                     for a in evaluator.firing() if a.rule == case["alertname"])
        expected = sorted((sorted((k, str(v)) for k, v in (e.get("exp_labels") or {}).items()),
                           sorted((k, str(v)) for k, v in (e.get("exp_annotations") or {}).items()))
                          for e in case.get("exp_alerts") or [])
        # promtool compares annotations only where a test gives them.
        if expected and not any(annotations for _, annotations in expected):
            got = [(labels, []) for labels, _ in got]
        assert got == expected, f"{case['alertname']} at {case['eval_time']}"


@pytest.mark.parametrize("seconds, text", [
    (90, "1m 30s"), (3725, "1h 2m 5s"), (0.25, "250ms"), (0, "0s"), (42.5, "42.5s"), (90061, "1d 1h 1m 1s"),
])
def test_humanize_duration_as_prometheus_prints_it(seconds, text):
    assert humanize_duration(seconds) == text


def test_annotations_render_the_forms_the_rules_use():
    assert render("{{ $labels.link }} is {{ $value | humanizeDuration }} behind ({{ $value }} s)",
                  {"link": "a->b"}, 90.0) == "a->b is 1m 30s behind (90 s)"
    assert render("{{ $value | humanize }}", {}, 1.0) == "{{ $value | humanize }}"     # not rendered: as written


def test_a_rule_the_console_cannot_evaluate_says_so_and_a_malformed_one_is_refused():
    text = """groups:
  - name: g
    rules:
      - alert: Irate
        expr: irate(x[5m]) > 1
      - record: recorded
        expr: sum(x)
"""
    [rule] = load_rules(text)
    assert rule.error == "the function irate() is not supported"
    with pytest.raises(ValueError, match="alert rule Late: 'soon' is not a duration"):
        load_rules("groups: [{name: g, rules: [{alert: Late, expr: x > 1, for: soon}]}]")
