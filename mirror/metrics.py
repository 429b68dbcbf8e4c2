"""Prometheus metrics of a mirror process, read from the links' copiers when scraped (the copy
path only appends a latency sample per acknowledged batch).

Per link, topic and partition: lag in records (the source's last stable offset minus what
the target has acknowledged) and in seconds, records and bytes copied. Per link: replication
latency, checkpoint age, errors, records deleted upstream before they were copied, the link's
RPO target, its topic config syncs (mirror/topicconfigs.py), and whether it is degraded.

Lag in seconds is what a failover would lose, in time: how long the partition has been
behind, counted from when the mirror first saw a record on the source that the target had not
acknowledged (the fetch answers' high watermark past the mirrored offset), 0 once caught up;
and at least how long the source has been silent once it stops answering for
SOURCE_SILENCE_S (a cut WAN shows as growing lag, not as a mirror that is caught up). It used
to be the age of the last mirrored batch, which made a partition idle for an hour show an
hour of lag for its first new record.

Replication latency is the target's acknowledgement minus the newest record timestamp of each
batch (for CreateTime topics the producer's clock stands in for the source append), over the
batches acknowledged in the last LATENCY_WINDOW_S: an idle link reports no quantiles rather
than old ones (heartbeats, one a second, keep a live link's samples current).

A link is degraded, with the reason, while its source has not answered for SOURCE_SILENCE_S
or a partition has been failing (every retry an error) for as long.
"""
from __future__ import annotations

import time

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily

from core.metrics_http import serve_http


# A copier long-polls the source (0.5 s) and is answered within a request timeout; silence past
# this long means the source cannot be reached, and counts as lag in seconds.
SOURCE_SILENCE_S = 10.0
LATENCY_WINDOW_S = 60.0


class MirrorMetrics:
    def __init__(self, links, registry: CollectorRegistry | None = None):
        self.links = links
        self.registry = registry or CollectorRegistry()
        self.registry.register(_LinkCollector(links))

    def serve(self, port: int, host: str = "127.0.0.1") -> int:
        """/metrics and /health (every link running) in a daemon thread; returns the bound port."""
        return serve_http(self.registry, port, host, self.health)

    def health(self) -> tuple[bool, str]:
        stopping = [link.name for link in self.links if link.stopping]
        if stopping:
            return False, "stopping: " + ", ".join(stopping)
        return True, "healthy: " + ", ".join(f"{link.name} copying {len(link.copiers)} partitions"
                                             for link in self.links)


def partition_rows(link) -> list[dict]:
    """One row per mirrored partition: what `mirror status` shows and the gauges expose."""
    rows = []
    now_ms = time.time() * 1000
    for (topic, partition), copier in sorted(link.copiers.items()):
        s = copier.stats
        lag = s.lag
        lag_s = 0.0
        if lag > 0 and s.behind_since_ms >= 0:
            lag_s = max(0.0, (now_ms - s.behind_since_ms) / 1000)
        if s.last_source_answer_ms >= 0:
            # A source that stopped answering (a cut WAN, a region down) hides what it has been
            # written since: the copy is at least as stale as the last answer, lag or not.
            silent_s = (now_ms - s.last_source_answer_ms) / 1000
            if silent_s > SOURCE_SILENCE_S:
                lag_s = max(lag_s, silent_s)
        rows.append({"link": link.name, "topic": topic, "partition": partition,
                     "target_topic": copier.target_topic, "position": s.position,
                     "source_end": s.source_end, "lag_records": lag, "lag_seconds": round(lag_s, 3),
                     "records": s.records, "bytes": s.bytes, "errors": s.errors,
                     "lost_to_retention": s.lost_to_retention, "inexact_batches": s.inexact_batches})
    return rows


def recent_latencies(link, now: float | None = None) -> list[int]:
    since = (time.time() if now is None else now) - LATENCY_WINDOW_S
    return [ms for c in link.copiers.values() for at, ms in c.stats.latencies_ms if at >= since]


def link_state(link, now_ms: float | None = None) -> tuple[bool, str]:
    """(degraded, why): the source silent, or partitions failing, for SOURCE_SILENCE_S."""
    now_ms = time.time() * 1000 if now_ms is None else now_ms
    threshold_ms = SOURCE_SILENCE_S * 1000
    answers = [c.stats.last_source_answer_ms for c in link.copiers.values() if c.stats.last_source_answer_ms >= 0]
    if answers and now_ms - max(answers) > threshold_ms:
        return True, f"the source has not answered for {(now_ms - max(answers)) / 1000:.0f} s"
    failing = [c.stats for c in link.copiers.values()
               if c.stats.failing_since_ms >= 0 and now_ms - c.stats.failing_since_ms > threshold_ms]
    if failing:
        oldest = min(failing, key=lambda st: st.failing_since_ms)
        return True, (f"{len(failing)} partition(s) failing for {(now_ms - oldest.failing_since_ms) / 1000:.0f} s: "
                      f"{oldest.last_error}")
    return False, "copying"


def latency_quantiles(link) -> dict[str, float | None]:
    samples = sorted(recent_latencies(link))
    if not samples:
        return {"p50_ms": None, "p99_ms": None, "samples": 0}
    pick = lambda q: samples[min(len(samples) - 1, int(q * len(samples)))]   # noqa: E731
    return {"p50_ms": pick(0.50), "p99_ms": pick(0.99), "samples": len(samples)}


class _LinkCollector:
    def __init__(self, links):
        self.links = links

    def collect(self):
        labels = ["link", "topic", "partition"]
        lag = GaugeMetricFamily("seaway_mirror_lag_records", "Records on the source not yet mirrored "
                                "(MM2: record-age / replication lag)", labels=labels)
        lag_s = GaugeMetricFamily("seaway_mirror_lag_seconds", "How long the partition has been behind "
                                  "(since a record the target has not acknowledged was seen on the "
                                  "source), or the source's silence past 10 s; 0 when caught up",
                                  labels=labels)
        records = CounterMetricFamily("seaway_mirror_records", "Records mirrored (MM2: record-count)",
                                      labels=labels)
        size = CounterMetricFamily("seaway_mirror_bytes", "Batch bytes mirrored (MM2: byte-count)",
                                   labels=labels)
        latency = SummaryMetricFamily("seaway_mirror_replication_latency_ms", "Target acknowledgement "
                                      "minus the batch's newest record timestamp, batches of the last "
                                      f"{LATENCY_WINDOW_S:g} s (MM2: replication-latency-ms)", labels=["link"])
        p = {q: GaugeMetricFamily(f"seaway_mirror_replication_latency_{q}_ms",
                                  f"Replication latency {q} over recent batches", labels=["link"])
             for q in ("p50", "p99")}
        errors = CounterMetricFamily("seaway_mirror_errors", "Failed fetches, produces and bookkeeping",
                                     labels=["link"])
        partition_errors = CounterMetricFamily("seaway_mirror_partition_errors", "Failed fetches and "
                                               "produces of a partition, each retried", labels=labels)
        lost = CounterMetricFamily("seaway_mirror_lost_to_retention", "Source records deleted before "
                                   "they were mirrored", labels=["link"])
        inexact = CounterMetricFamily("seaway_mirror_inexact_batches", "Batches forwarded with fewer "
                                      "records than offsets (compacted): a group that stopped inside "
                                      "one translates to its start and re-reads", labels=["link"])
        age = GaugeMetricFamily("seaway_mirror_checkpoint_age_seconds", "Seconds since the last "
                                "complete checkpoint pass (-1 before the first)", labels=["link"])
        rpo = GaugeMetricFamily("seaway_mirror_rpo_target_seconds", "The recovery-point target the "
                                "link serves (the topology's dr.rpo_target_s)", labels=["link"])
        syncs = CounterMetricFamily("seaway_mirror_topic_config_syncs", "Target topics whose configs "
                                    "were brought in line with the source's (applied), or could not be "
                                    "at a sync (failed: refused, or a side unreadable; each retried)",
                                    labels=["link", "result"])
        unsynced = GaugeMetricFamily("seaway_mirror_topic_configs_unsynced", "Copied topics whose configs "
                                     "could not be synced at the last attempt (the mirror's log says why)",
                                     labels=["link"])
        degraded = GaugeMetricFamily("seaway_mirror_link_degraded", "1 while the link's source has not "
                                     f"answered, or a partition has been failing, for {SOURCE_SILENCE_S:g} s "
                                     "(`mirror status` gives the reason)", labels=["link"])
        state = GaugeMetricFamily("seaway_mirror_link_state_info", "The link's state (copying or degraded) "
                                  "and, when degraded, why", labels=["link", "state", "reason"])
        for link in list(self.links):
            rows = partition_rows(link)
            for r in rows:
                key = [link.name, r["topic"], str(r["partition"])]
                lag.add_metric(key, r["lag_records"])
                lag_s.add_metric(key, r["lag_seconds"])
                records.add_metric(key, r["records"])
                size.add_metric(key, r["bytes"])
                partition_errors.add_metric(key, r["errors"])
            samples = recent_latencies(link)
            latency.add_metric([link.name], len(samples), float(sum(samples)))
            is_degraded, why = link_state(link)
            degraded.add_metric([link.name], 1 if is_degraded else 0)
            state.add_metric([link.name, "degraded" if is_degraded else "copying", why if is_degraded else ""], 1)
            q = latency_quantiles(link)
            for name in ("p50", "p99"):
                if q[f"{name}_ms"] is not None:
                    p[name].add_metric([link.name], q[f"{name}_ms"])
            errors.add_metric([link.name], sum(r["errors"] for r in rows) + link.checkpoints.errors)
            lost.add_metric([link.name], sum(r["lost_to_retention"] for r in rows))
            inexact.add_metric([link.name], sum(r["inexact_batches"] for r in rows))
            last = link.checkpoints.last_run
            age.add_metric([link.name], -1 if last is None else max(0.0, time.time() - last))
            if link.config.rpo_target_s is not None:
                rpo.add_metric([link.name], link.config.rpo_target_s)
            syncs.add_metric([link.name, "applied"], link.topic_configs.applied)
            syncs.add_metric([link.name, "failed"], link.topic_configs.failed)
            unsynced.add_metric([link.name], link.topic_configs.unsynced)
        yield from (lag, lag_s, records, size, partition_errors, latency, p["p50"], p["p99"], errors, lost,
                    inexact, age, rpo, syncs, unsynced, degraded, state)
