"""Lag in seconds is what a failover would lose, in time. Table: a copier's state, the lag the
metrics report. A source that stops answering (a cut WAN) must show growing lag even when the
mirror had caught up, or the RPO alert could never fire during the outage that matters most."""
from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from mirror.copier import CopierStats
from mirror.metrics import SOURCE_SILENCE_S, MirrorMetrics, partition_rows

def link_with(stats: CopierStats, rpo_target_s=None):
    copier = SimpleNamespace(stats=stats, target_topic="src.orders")
    return SimpleNamespace(name="src->tgt", copiers={("orders", 0): copier}, stopping=False,
                           config=SimpleNamespace(rpo_target_s=rpo_target_s),
                           checkpoints=SimpleNamespace(errors=0, last_run=None),
                           topic_configs=SimpleNamespace(applied=0, failed=0, unsynced=0))


# (what, position, source end, last batch's timestamp and last source answer in seconds ago
# (None: never), lag seconds low, high). The clock is read when the test runs, not collected.
CASES = [
    ("caught up, source answering", 10, 10, 60, 0.5, 0, 0),
    ("behind: the last copied batch's age", 5, 10, 7, 0.5, 6.5, 8),
    ("caught up, source silent past the threshold", 10, 10, 1, 95, 94, 97),
    ("caught up, silent but within the threshold", 10, 10, None, SOURCE_SILENCE_S - 3, 0, 0),
    ("behind and silent: the larger of the two", 5, 10, 200, 30, 199, 202),
    ("never fetched yet", -1, -1, None, None, 0, 0),
]


@pytest.mark.parametrize("what, position, end, batch_ago, answer_ago, low, high", CASES)
def test_lag_seconds(what, position, end, batch_ago, answer_ago, low, high):
    now_ms = time.time() * 1000
    stats = CopierStats(position=position, source_end=end)
    if batch_ago is not None:
        stats.last_batch_timestamp_ms = int(now_ms - batch_ago * 1000)
    if answer_ago is not None:
        stats.last_source_answer_ms = int(now_ms - answer_ago * 1000)
    [row] = partition_rows(link_with(stats))
    assert low <= row["lag_seconds"] <= high, what


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
