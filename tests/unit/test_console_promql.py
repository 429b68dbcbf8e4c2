"""dr/console/promql.py: the PromQL of the platform's alert rules, evaluated over the console's
own history. Every rule in compose/alerts.yml parses; each construct they use is checked by a
table against what Prometheus answers; what is not understood is refused by name."""
from __future__ import annotations

import pytest
import yaml

from dr.console.promql import PromQLError, evaluate, parse
from dr.console.series import SeriesStore
from tests.support.node import REPO

RULES = [rule for group in yaml.safe_load((REPO / "compose" / "alerts.yml").read_text())["groups"]
         for rule in group["rules"]]


@pytest.mark.parametrize("rule", RULES, ids=[r["alert"] for r in RULES])
def test_every_shipped_alert_rule_is_understood(rule):
    assert parse(rule["expr"]) is not None


def gauge(name: str, value: float, **labels: str) -> str:
    lbl = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"# TYPE {name} gauge\n{name}{{{lbl}}} {value}\n"


@pytest.fixture
def platform() -> SeriesStore:
    """Two clusters of two nodes, at t=100: eu-1 has an offline partition on node 2 and no
    active controller; us-1's node 2 does not answer scrapes."""
    store = SeriesStore({"seaway_offline_partitions", "seaway_active_controller", "seaway_mirror_lag_seconds",
                         "seaway_mirror_rpo_target_seconds", "seaway_request_duration_seconds"})
    for cluster, region in (("eu-1", "eu"), ("us-1", "us")):
        for node in ("1", "2"):
            target = {"cluster": cluster, "region": region, "node": node}
            up = not (cluster == "us-1" and node == "2")
            store.record(100, "up", {**target, "job": "seaway-nodes"}, 1.0 if up else 0.0)
            if up:
                text = gauge("seaway_offline_partitions", 1 if (cluster, node) == ("eu-1", "2") else 0) + \
                    gauge("seaway_active_controller", 1 if (cluster, node) == ("us-1", "1") else 0)
                store.ingest(100, text, target)
    store.ingest(100, gauge("seaway_mirror_lag_seconds", 90, link="eu-1->us-1")
                 + gauge("seaway_mirror_lag_seconds", 5, link="us-1->eu-1")
                 + gauge("seaway_mirror_rpo_target_seconds", 60, link="eu-1->us-1")
                 + gauge("seaway_mirror_rpo_target_seconds", 60, link="us-1->eu-1"))
    return store


def labels_of(vector) -> list[dict]:
    return sorted((dict(k) for k in vector), key=lambda d: sorted(d.items()))


@pytest.mark.parametrize("expr, expected", [
    ('up{job="seaway-nodes"} == 0', [{"cluster": "us-1", "job": "seaway-nodes", "node": "2", "region": "us"}]),
    ("max by (region, cluster) (seaway_offline_partitions) > 0", [{"cluster": "eu-1", "region": "eu"}]),
    ("sum by (cluster) (seaway_active_controller) == 0", [{"cluster": "eu-1"}]),
    # A cluster none of whose nodes answers still gets its zero from `up`, through `or`.
    ('(sum by (region, cluster) (seaway_active_controller) or sum by (region, cluster) '
     '(up{job="seaway-nodes"}) * 0) == 0', [{"cluster": "eu-1", "region": "eu"}]),
    ("max by (link) (seaway_mirror_lag_seconds) > on (link) max by (link) (seaway_mirror_rpo_target_seconds)",
     [{"link": "eu-1->us-1"}]),
    ('seaway_offline_partitions{cluster=~"us-.*"} > 0', []),
    ('count(up{node!="1"})', [{}]),
])
def test_rule_constructs_answer_as_prometheus_does(platform, expr, expected):
    assert labels_of(evaluate(parse(expr), platform, 100)) == expected


def test_or_keeps_the_left_sides_values_and_adds_only_the_missing_series(platform):
    vector = evaluate(parse('sum by (cluster) (seaway_active_controller) or sum by (cluster) (up) * 0 + 7'),
                      platform, 100)
    assert {dict(k)["cluster"]: v for k, v in vector.items()} == {"eu-1": 0.0, "us-1": 1.0}


def test_a_latency_quantile_from_bucket_rates_excluding_long_polls():
    store = SeriesStore({"seaway_request_duration_seconds"})

    def scrape(n: float) -> str:
        lines = ["# TYPE seaway_request_duration_seconds histogram"]
        for api, slow in (("Produce", n), ("Fetch", n)):
            for le, count in (("0.1", 90 * n), ("2.0", 90 * n + 9 * slow), ("+Inf", 100 * n)):
                lines.append(f'seaway_request_duration_seconds_bucket{{api="{api}",le="{le}"}} {count}')
            lines.append(f'seaway_request_duration_seconds_count{{api="{api}"}} {100 * n}')
            lines.append(f'seaway_request_duration_seconds_sum{{api="{api}"}} 1')
        return "\n".join(lines) + "\n"
    for t in range(0, 301, 15):
        store.ingest(t, scrape(t / 15), {"cluster": "eu-1"})
    expr = ('histogram_quantile(0.99, sum by (cluster, api, le) ('
            'rate(seaway_request_duration_seconds_bucket{api!~"Fetch|JoinGroup|SyncGroup"}[5m]))) > 1')
    vector = evaluate(parse(expr), store, 300)
    assert {dict(k)["api"]: v for k, v in vector.items()} == {"Produce": pytest.approx(2.0)}


@pytest.mark.parametrize("expr, says", [
    ("irate(x[5m])", "irate() is not supported"),
    ("x > bool 1", "`bool` comparisons are not supported"),
    ("rate(x)", "rate() takes a range selector"),
    ('x{a~"b"}', "cannot read"),
    ("sum by (a) (x", "expected )"),
    ("x y", "unexpected y"),
    ("x[5m]", "a range selector"),
])
def test_what_is_not_understood_is_refused_by_name(platform, expr, says):
    with pytest.raises(PromQLError, match=says.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        evaluate(parse(expr), platform, 100)
