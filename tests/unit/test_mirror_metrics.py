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

NOW_MS = time.time() * 1000


def link_with(stats: CopierStats, rpo_target_s=None):
    copier = SimpleNamespace(stats=stats, target_topic="src.orders")
    return SimpleNamespace(name="src->tgt", copiers={("orders", 0): copier}, stopping=False,
                           config=SimpleNamespace(rpo_target_s=rpo_target_s),
                           checkpoints=SimpleNamespace(errors=0, last_run=None))


@pytest.mark.parametrize("what, stats, low, high", [
    ("caught up, source answering", dict(position=10, source_end=10, last_batch_timestamp_ms=NOW_MS - 60_000,
                                         last_source_answer_ms=NOW_MS - 500), 0, 0),
    ("behind: the last copied batch's age", dict(position=5, source_end=10, last_batch_timestamp_ms=NOW_MS - 7_000,
                                                 last_source_answer_ms=NOW_MS - 500), 6.5, 8),
    ("caught up, source silent past the threshold", dict(position=10, source_end=10,
                                                         last_batch_timestamp_ms=NOW_MS - 1_000,
                                                         last_source_answer_ms=NOW_MS - 95_000), 94, 97),
    ("caught up, silent but within the threshold", dict(position=10, source_end=10,
                                                        last_source_answer_ms=NOW_MS - (SOURCE_SILENCE_S - 3) * 1000), 0, 0),
    ("behind and silent: the larger of the two", dict(position=5, source_end=10, last_batch_timestamp_ms=NOW_MS - 200_000,
                                                      last_source_answer_ms=NOW_MS - 30_000), 199, 202),
    ("never fetched yet", dict(position=-1, source_end=-1), 0, 0),
])
def test_lag_seconds(what, stats, low, high):
    [row] = partition_rows(link_with(CopierStats(**stats)))
    assert low <= row["lag_seconds"] <= high, what


def test_the_rpo_target_and_health_are_served():
    link = link_with(CopierStats(position=10, source_end=10, last_source_answer_ms=NOW_MS), rpo_target_s=60.0)
    metrics = MirrorMetrics([link], CollectorRegistry())
    text = generate_latest(metrics.registry).decode()
    assert 'seaway_mirror_rpo_target_seconds{link="src->tgt"} 60.0' in text
    assert metrics.health() == (True, "healthy: src->tgt copying 1 partitions")
    link.stopping = True
    assert metrics.health() == (False, "stopping: src->tgt")
