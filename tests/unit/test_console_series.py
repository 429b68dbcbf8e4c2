"""dr/console/series.py: the console's bounded in-memory history of the platform's metrics and
the PromQL functions it charts with (rate, histogram quantiles, sums), by table and by a
hypothesis property, against the module's worked example and Prometheus' rules."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dr.console.series import Ring, SeriesStore, histogram_quantile, sum_by


def scrape(**counters: float) -> str:
    """Prometheus text: one counter family `req` with an `api` label per keyword."""
    lines = ["# HELP req_total Requests", "# TYPE req_total counter"]
    lines += [f'req_total{{api="{api}"}} {value}' for api, value in counters.items()]
    return "\n".join(lines) + "\n"


def histogram(name: str, buckets: dict[str, float], **labels: str) -> str:
    lbl = ",".join(f'{k}="{v}"' for k, v in labels.items())
    lines = [f"# HELP {name} Latency", f"# TYPE {name} histogram"]
    lines += [f'{name}_bucket{{{lbl}{"," if lbl else ""}le="{le}"}} {n}' for le, n in buckets.items()]
    lines += [f"{name}_count{{{lbl}}} {buckets['+Inf']}", f"{name}_sum{{{lbl}}} 1.0"]
    return "\n".join(lines) + "\n"


def test_a_counter_that_restarts_counts_from_zero_again():
    # The module's worked example: 10, 20, 5, 15 every 5 s is an increase of 25 over 15 s.
    store = SeriesStore({"req"}, interval_s=5)
    for at, value in ((0, 10), (5, 20), (10, 5), (15, 15)):
        store.ingest(at, scrape(produce=value), {"node": "1"})
    [series] = store.rate("req_total", {"api": "produce"}, at=[15], lookback_s=60)
    assert series.points == [(15, pytest.approx(25 / 15))]
    assert series.label("node") == "1"          # the target's labels are the series' too


@pytest.mark.parametrize("q, expected", [
    (0.99, 0.5),                 # the 99th of 100: the top of the 0.5 bucket
    (0.5, 0.1 / 90 * 50),        # inside the first bucket, from 0
    (0.9, 0.1),                  # exactly the first bucket's count
    (1.0, 0.5),                  # in +Inf: the highest finite bound, as Prometheus answers
    (0.0, 0.0),
])
def test_histogram_quantile_follows_prometheus(q, expected):
    assert histogram_quantile(q, [(0.1, 90), (0.5, 99), (math.inf, 100)]) == pytest.approx(expected)


@pytest.mark.parametrize("buckets", [
    [],                                   # nothing
    [(0.1, 0), (math.inf, 0)],            # no observations
    [(0.1, 5), (0.5, 9)],                 # no +Inf bucket: not a histogram
    [(0.1, None), (math.inf, 4)],         # a bucket without a rate (too few samples)
])
def test_histogram_quantile_of_nothing_is_none(buckets):
    assert histogram_quantile(0.5, buckets) is None


def test_a_histograms_quantile_over_time_from_its_buckets_rates():
    store = SeriesStore({"lat"}, interval_s=5)
    store.ingest(0, histogram("lat", {"0.1": 0, "0.5": 0, "+Inf": 0}, api="fetch"))
    store.ingest(10, histogram("lat", {"0.1": 90, "0.5": 99, "+Inf": 100}, api="fetch"))
    [p99] = store.quantile(0.99, "lat", at=[10], lookback_s=30)
    assert p99.points == [(10, pytest.approx(0.5))] and p99.labels == (("api", "fetch"),)
    with pytest.raises(ValueError, match="outside 0..1"):
        store.quantile(1.5, "lat", at=[10], lookback_s=30)


def test_only_kept_families_are_kept_and_sums_group_by_labels():
    store = SeriesStore({"req"}, interval_s=5)
    text = scrape(produce=0, fetch=0) + "# TYPE other gauge\nother 3\n"
    assert store.ingest(0, text, {"node": "1"}) == 2
    store.ingest(0, scrape(produce=0, fetch=0), {"node": "2"})
    store.ingest(10, scrape(produce=100, fetch=10), {"node": "1"})
    store.ingest(10, scrape(produce=50, fetch=10), {"node": "2"})
    assert not store.points("other")
    by_api = sum_by(store.rate("req_total", at=[10], lookback_s=30), by=["api"])
    assert [(s.labels, s.points) for s in by_api] == [
        ((("api", "fetch"),), [(10, 2.0)]), ((("api", "produce"),), [(10, 15.0)])]


def test_a_series_not_scraped_for_a_window_is_dropped():
    store = SeriesStore({"req"}, window_s=60, interval_s=5)
    store.ingest(0, scrape(produce=1), {"node": "gone"})
    store.ingest(30, scrape(produce=1), {"node": "here"})
    assert len(store.rings) == 2
    store.ingest(61, scrape(produce=2), {"node": "here"})
    assert [s.label("node") for s in store.points("req_total")] == ["here"]


def test_a_malformed_scrape_keeps_nothing():
    store = SeriesStore({"req"})
    with pytest.raises(ValueError):
        store.ingest(0, scrape(produce=1) + 'req_total{api="x" 1\n')
    assert not store.rings


@settings(max_examples=200, deadline=None)
@given(capacity=st.integers(1, 50), times=st.lists(st.floats(0, 1e6, allow_nan=False), max_size=200))
def test_a_ring_holds_its_newest_samples_in_order_and_never_more(capacity, times):
    ring = Ring(capacity)
    kept: list[float] = []
    for t in times:
        ring.append(t, t * 2)
        if not kept or t > kept[-1]:
            kept.append(t)
    assert ring.samples() == [(t, t * 2) for t in kept[-capacity:]]
    assert ring.nbytes() == 16 * capacity


@settings(max_examples=100, deadline=None)
@given(slope=st.floats(0.01, 1e6), interval=st.integers(1, 30), n=st.integers(2, 100))
def test_the_rate_of_a_steady_counter_is_its_slope(slope, interval, n):
    store = SeriesStore({"req"}, window_s=interval * n * 2, interval_s=interval)
    for i in range(n):
        store.ingest(i * interval, scrape(produce=slope * i * interval))
    [series] = store.rate("req_total", at=[(n - 1) * interval], lookback_s=interval * n)
    assert series.points[0][1] == pytest.approx(slope, rel=1e-6)


def test_series_a_scrape_no_longer_carries_and_a_failed_targets_series_go_stale_at_once():
    from dr.console.promql import evaluate, parse
    gauges = lambda **v: "# TYPE req_total counter\n" + "".join(   # noqa: E731
        f'req_total{{api="{k}"}} {n}\n' for k, n in v.items())
    store = SeriesStore({"req"}, interval_s=5)
    node1, node2 = {"instance": "a"}, {"instance": "b"}
    store.ingest(0, gauges(produce=1, fetch=2), node1)
    store.ingest(0, gauges(produce=3), node2)
    query = parse("req_total")
    assert len(evaluate(query, store, 1)) == 3
    store.ingest(5, gauges(produce=4), node1)           # fetch is gone from node a
    store.mark_target_stale(5, node2)                   # node b did not answer
    assert evaluate(query, store, 6) == {(("api", "produce"), ("instance", "a")): 4.0}
    # Without the markers the 5-minute lookback would still answer for both for minutes; the
    # rate of the live series is unaffected, and a target that answers again comes back.
    [rate] = store.rate("req_total", node1 | {"api": "produce"}, at=[5], lookback_s=60)
    assert rate.points == [(5, pytest.approx(0.6))]
    store.ingest(10, gauges(produce=9), node2)
    assert len(evaluate(query, store, 11)) == 2
