"""What the console charts and asks: every chart of every page, and the instant queries the
platform overview is built from, as PromQL. No I/O.

The same expressions serve both sources (source.py). With a Prometheus configured (compose)
a chart is a range query over the last hour; without one (`regions up`) the console evaluates
each chart's queries at every scrape over its own raw history (promql.py) and keeps the
results, a recording rule per query, for an hour. So a chart means the same thing either way,
and the PromQL here is the one subset promql.py understands (the unit tests parse all of it).

Series are put on one time grid per chart (`align`): uPlot draws columns of one x array, and
Prometheus' range answers are on a grid already. A step with no sample is None: a gap in the
line, never an invented zero.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

WINDOW_S = 3600.0       # how far back every chart looks
STEP_S = 15.0           # one point per step: 240 points an hour
RATE = "1m"             # the lookback of the charts' rates (four scrapes at 5 s)


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str             # a label template: "{api}", "node {node}" ({node}: the node id of `instance`)


@dataclass(frozen=True)
class Chart:
    id: str
    page: str
    title: str
    unit: str               # s, B, B/s, /s, records, count: how the page formats the axis
    queries: tuple[Query, ...]
    per_cluster: bool = False       # the cluster page shows the series of one cluster
    note: str = ""

    def query_ids(self) -> list[str]:
        return [f"{self.id}/{i}" for i in range(len(self.queries))]


def _q(expr: str, legend: str) -> Query:
    return Query(" ".join(expr.split()), legend)


CHARTS: tuple[Chart, ...] = (
    # ---------------------------------------------------------------- one cluster
    Chart("requests", "cluster", "Requests by API", "/s",
          (_q(f"sum by (region, cluster, api) (rate(seaway_requests_total[{RATE}]))", "{api}"),), per_cluster=True),
    Chart("latency_p99", "cluster", "p99 request latency by API", "s",
          (_q(f"histogram_quantile(0.99, sum by (region, cluster, api, le) "
              f"(rate(seaway_request_duration_seconds_bucket[{RATE}])))", "{api}"),), per_cluster=True,
          note="Fetch includes the time a long poll waits for data (fetch.max.wait.ms)"),
    Chart("bytes_in", "cluster", "Bytes in by broker", "B/s",
          (_q(f"sum by (region, cluster, instance) (rate(seaway_bytes_in_total[{RATE}]))", "node {node}"),),
          per_cluster=True),
    Chart("bytes_out", "cluster", "Bytes out by broker", "B/s",
          (_q(f"sum by (region, cluster, instance) (rate(seaway_bytes_out_total[{RATE}]))", "node {node}"),),
          per_cluster=True),
    Chart("isr", "cluster", "ISR shrinks and expands", "/s",
          (_q(f"sum by (region, cluster) (rate(seaway_isr_shrinks_total[{RATE}]))", "shrinks"),
           _q(f"sum by (region, cluster) (rate(seaway_isr_expands_total[{RATE}]))", "expands")), per_cluster=True),
    Chart("leaders", "cluster", "Leaders per broker", "count",
          (_q('max by (region, cluster, instance) (seaway_leader_partitions{job="seaway-nodes"})', "node {node}"),),
          per_cluster=True, note="even across brokers when leadership is balanced"),
    Chart("replicas", "cluster", "Replicas per broker", "count",
          (_q('max by (region, cluster, instance) (seaway_replica_partitions{job="seaway-nodes"})', "node {node}"),),
          per_cluster=True),
    # ---------------------------------------------------------------- between regions
    Chart("link_lag_records", "replication", "Link lag (records not yet copied)", "records",
          (_q("sum by (link) (seaway_mirror_lag_records)", "{link}"),)),
    Chart("link_lag_seconds", "replication", "Link lag (seconds) against the RPO target", "s",
          (_q("max by (link) (seaway_mirror_lag_seconds)", "{link}"),
           _q("max by (link) (seaway_mirror_rpo_target_seconds)", "RPO target {link}"))),
    Chart("link_throughput", "replication", "Link throughput", "B/s",
          (_q(f"sum by (link) (rate(seaway_mirror_bytes_total[{RATE}]))", "{link}"),)),
    Chart("link_records", "replication", "Records copied", "/s",
          (_q(f"sum by (link) (rate(seaway_mirror_records_total[{RATE}]))", "{link}"),)),
    Chart("checkpoint_age", "replication", "Checkpoint age", "s",
          (_q("max by (link) (seaway_mirror_checkpoint_age_seconds)", "{link}"),),
          note="seconds since the last complete pass of group offset checkpoints"),
    Chart("link_errors", "replication", "Link errors", "/s",
          (_q(f"sum by (link) (rate(seaway_mirror_errors_total[{RATE}]))", "{link}"),)),
    Chart("rpo_at_risk", "replication", "RPO at risk now (records a failover would lose)", "records",
          (_q("sum by (pair) (seaway_dr_rpo_at_risk_records)", "{pair}"),)),
    # ---------------------------------------------------------------- growth
    Chart("disk_broker", "growth", "Disk used by broker", "B",
          (_q('sum by (region, cluster, instance) (seaway_partition_size_bytes{job="seaway-nodes"})',
              "{cluster} node {node}"),)),
    Chart("disk_topic", "growth", "Disk used by topic (all replicas)", "B",
          (_q('sum by (region, cluster, topic) (seaway_partition_size_bytes{job="seaway-nodes"})',
              "{cluster} {topic}"),)),
    Chart("growth_bytes_in", "growth", "Bytes in by broker", "B/s",
          (_q(f"sum by (region, cluster, instance) (rate(seaway_bytes_in_total[{RATE}]))", "{cluster} node {node}"),)),
    Chart("growth_bytes_out", "growth", "Bytes out by broker", "B/s",
          (_q(f"sum by (region, cluster, instance) (rate(seaway_bytes_out_total[{RATE}]))",
              "{cluster} node {node}"),)),
    Chart("wan", "growth", "WAN use by link against its capacity", "B/s",
          (_q(f"sum by (link) (rate(seaway_mirror_bytes_total[{RATE}]))", "{link}"),),
          note="the mirror's bytes over each link; the dashed line is the WAN's bandwidth"),
)

PAGES = ("cluster", "replication", "growth")

# The overview's instant queries: name -> PromQL. Node gauges are per instance; the page
# joins them on `instance` (and `seaway_node_info` names the node behind each).
STATUS: dict[str, str] = {
    "up": 'up{job="seaway-nodes"}',
    "info": 'seaway_node_info{job="seaway-nodes"}',
    "leader": 'seaway_controller_leader{job="seaway-nodes"}',
    "epoch": 'seaway_controller_epoch{job="seaway-nodes"}',
    "active": 'seaway_active_controller{job="seaway-nodes"}',
    "fenced": 'seaway_fenced_brokers{job="seaway-nodes"}',
    "unfenced": 'seaway_active_brokers{job="seaway-nodes"}',
    "offline": 'seaway_offline_partitions{job="seaway-nodes"}',
    "under_replicated": 'seaway_under_replicated_partitions{job="seaway-nodes"}',
    "under_min_isr": 'seaway_under_min_isr_partitions{job="seaway-nodes"}',
    "at_min_isr": 'seaway_at_min_isr_partitions{job="seaway-nodes"}',
    "leaders": 'seaway_leader_partitions{job="seaway-nodes"}',
    "replicas": 'seaway_replica_partitions{job="seaway-nodes"}',
    "applied": 'seaway_metadata_applied_offset{job="seaway-nodes"}',
    "disk_used": 'sum by (instance) (seaway_partition_size_bytes{job="seaway-nodes"})',
    "disk_free": 'min by (instance) (seaway_log_dir_free_bytes{job="seaway-nodes"})',
    "disk_total": 'max by (instance) (seaway_log_dir_total_bytes{job="seaway-nodes"})',
    "mirror_up": 'up{job="seaway-mirror"}',
    "link_lag_records": "sum by (link) (seaway_mirror_lag_records)",
    "link_lag_seconds": "max by (link) (seaway_mirror_lag_seconds)",
    "link_rpo_target": "max by (link) (seaway_mirror_rpo_target_seconds)",
    "link_checkpoint_age": "max by (link) (seaway_mirror_checkpoint_age_seconds)",
    "link_bytes": f"sum by (link) (rate(seaway_mirror_bytes_total[{RATE}]))",
    "link_errors": "sum by (link) (rate(seaway_mirror_errors_total[5m]))",
}


def charts_of(page: str) -> list[Chart]:
    return [c for c in CHARTS if c.page == page]


@dataclass
class Grid:
    start: float
    step: float
    size: int
    times: list[float] = field(init=False)

    def __post_init__(self):
        self.times = [self.start + i * self.step for i in range(self.size)]

    @classmethod
    def ending(cls, end: float, window_s: float = WINDOW_S, step_s: float = STEP_S) -> "Grid":
        last = math.ceil(end / step_s) * step_s      # the step that holds `end`'s sample
        size = int(window_s // step_s) + 1
        return cls(last - (size - 1) * step_s, step_s, size)

    def align(self, points: list[tuple[float, float | None]]) -> list[float | None]:
        """Each step's value: the latest sample in (t - step, t]; None where there is none or
        it is not a number (a stale marker, a quantile of nothing)."""
        values: list[float | None] = [None] * self.size
        for t, v in points:
            i = math.ceil((t - self.start) / self.step - 1e-9)
            if 0 <= i < self.size and v is not None and math.isfinite(v):
                values[i] = v
        return values


def legend(template: str, labels: dict[str, str], nodes: dict[str, str]) -> str:
    """A series' name in its chart: the template's {label}s filled in; {node} is the node id of
    the series' instance (the instance itself where the id is not known)."""
    values = dict(labels)
    values["node"] = nodes.get(labels.get("instance", ""), labels.get("instance", "?"))
    out = template
    for key, value in values.items():
        out = out.replace("{" + key + "}", value)
    return out
