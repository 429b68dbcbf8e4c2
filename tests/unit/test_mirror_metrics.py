"""Lag in seconds is what a failover would lose, in time. Table: a copier's state, the lag the
metrics report. A source that stops answering (a cut WAN) must show growing lag even when the
mirror had caught up, or the RPO alert could never fire during the outage that matters most."""
from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from mirror.copier import CopierStats
from mirror.metrics import (SOURCE_SILENCE_S, MirrorMetrics, latency_quantiles, link_state, partition_rows,
                            recent_latencies)

def link_with(stats: CopierStats, rpo_target_s=None):
    copier = SimpleNamespace(stats=stats, target_topic="src.orders")
    return SimpleNamespace(name="src->tgt", copiers={("orders", 0): copier}, stopping=False,
                           config=SimpleNamespace(rpo_target_s=rpo_target_s),
                           checkpoints=SimpleNamespace(errors=0, last_run=None),
                           topic_configs=SimpleNamespace(applied=0, failed=0, unsynced=0))


# (what, mirrored offset, source end, behind since and last source answer in seconds ago
# (None: never), lag seconds low, high). The clock is read when the test runs, not collected.
CASES = [
    ("caught up, source answering", 10, 10, None, 0.5, 0, 0),
    ("behind: since the first unmirrored record was seen", 5, 10, 7, 0.5, 6.5, 8),
    ("behind for a moment after a long idle spell: not the idle spell", 5, 10, 0.2, 0.1, 0, 1),
    ("caught up, source silent past the threshold", 10, 10, None, 95, 94, 97),
    ("caught up, silent but within the threshold", 10, 10, None, SOURCE_SILENCE_S - 3, 0, 0),
    ("behind and silent: the larger of the two", 5, 10, 200, 30, 199, 202),
    ("never fetched yet", -1, -1, None, None, 0, 0),
]


@pytest.mark.parametrize("what, mirrored, end, behind_ago, answer_ago, low, high", CASES)
def test_lag_seconds(what, mirrored, end, behind_ago, answer_ago, low, high):
    now_ms = time.time() * 1000
    stats = CopierStats(position=mirrored, mirrored=mirrored, source_end=end,
                        last_batch_timestamp_ms=int(now_ms - 3_600_000))      # an hour-old last batch
    if behind_ago is not None:
        stats.behind_since_ms = int(now_ms - behind_ago * 1000)
    if answer_ago is not None:
        stats.last_source_answer_ms = int(now_ms - answer_ago * 1000)
    [row] = partition_rows(link_with(stats))
    assert low <= row["lag_seconds"] <= high, what


def test_the_lag_clock_starts_when_a_record_is_seen_unmirrored_and_stops_when_caught_up():
    stats = CopierStats(position=10, mirrored=10, source_end=10)
    stats.observe(1_000)
    assert stats.behind_since_ms == -1
    stats.source_end = 12                 # a fetch answer's high watermark moved on
    stats.observe(2_000)
    stats.position = 12                   # fetched and in flight: not mirrored yet
    stats.observe(3_000)
    assert stats.behind_since_ms == 2_000 and stats.lag == 2
    stats.mirrored = 12                   # the target acknowledged
    stats.observe(4_000)
    assert stats.behind_since_ms == -1 and stats.lag == 0


def test_replication_latency_counts_only_recent_batches_and_an_idle_link_reports_none():
    now = time.time()
    stats = CopierStats(position=10, mirrored=10, source_end=10)
    stats.latencies_ms.extend([(now - 3600, 5_000), (now - 3599, 5_100)])      # an old burst
    link = link_with(stats)
    assert latency_quantiles(link) == {"p50_ms": None, "p99_ms": None, "samples": 0}
    text = generate_latest(MirrorMetrics([link], CollectorRegistry()).registry).decode()
    assert "seaway_mirror_replication_latency_p50_ms{" not in text
    stats.latencies_ms.extend([(now - 1, 90), (now, 110)])
    assert latency_quantiles(link) == {"p50_ms": 110, "p99_ms": 110, "samples": 2}
    assert recent_latencies(link, now) == [90, 110]


@pytest.mark.parametrize("answer_ago, failing_ago, degraded, why", [
    (0.5, None, False, "copying"),
    (30, None, True, "the source has not answered for 30 s"),
    (0.5, 25, True, "1 partition(s) failing for 25 s: NOT_LEADER_OR_FOLLOWER: produce to src.orders-0"),
    (0.5, 3, False, "copying"),             # a failure retried for a moment is not yet degraded
])
def test_a_link_that_cannot_reach_a_side_is_degraded_with_the_reason(answer_ago, failing_ago, degraded, why):
    now_ms = time.time() * 1000
    stats = CopierStats(position=10, mirrored=10, source_end=10, last_source_answer_ms=int(now_ms - answer_ago * 1000))
    if failing_ago is not None:
        stats.failing_since_ms = int(now_ms - failing_ago * 1000)
        stats.last_error = "NOT_LEADER_OR_FOLLOWER: produce to src.orders-0"
    link = link_with(stats)
    assert link_state(link, now_ms) == (degraded, why)
    text = generate_latest(MirrorMetrics([link], CollectorRegistry()).registry).decode()
    assert f'seaway_mirror_link_degraded{{link="src->tgt"}} {1.0 if degraded else 0.0}' in text
    state = "degraded" if degraded else "copying"
    reason = why if degraded else ""
    assert f'seaway_mirror_link_state_info{{link="src->tgt",reason="{reason}",state="{state}"}} 1.0' in text


def test_the_rpo_target_and_health_are_served():
    link = link_with(CopierStats(position=10, source_end=10, last_source_answer_ms=int(time.time() * 1000)),
                     rpo_target_s=60.0)
    metrics = MirrorMetrics([link], CollectorRegistry())
    text = generate_latest(metrics.registry).decode()
    assert 'seaway_mirror_rpo_target_seconds{link="src->tgt"} 60.0' in text
    assert 'seaway_mirror_inexact_batches_total{link="src->tgt"} 0.0' in text
    link.copiers[("orders", 0)].stats.inexact_batches = 3
    assert 'seaway_mirror_inexact_batches_total{link="src->tgt"} 3.0' in generate_latest(metrics.registry).decode()
    assert metrics.health() == (True, "healthy: src->tgt copying 1 partitions")
    link.stopping = True
    assert metrics.health() == (False, "stopping: src->tgt")


def test_topic_config_syncs_are_served_by_result():
    link = link_with(CopierStats(position=10, source_end=10))
    metrics = MirrorMetrics([link], CollectorRegistry())
    link.topic_configs = SimpleNamespace(applied=4, failed=7, unsynced=2)
    text = generate_latest(metrics.registry).decode()
    assert 'seaway_mirror_topic_config_syncs_total{link="src->tgt",result="applied"} 4.0' in text
    assert 'seaway_mirror_topic_config_syncs_total{link="src->tgt",result="failed"} 7.0' in text
    assert 'seaway_mirror_topic_configs_unsynced{link="src->tgt"} 2.0' in text
