"""The console's own history of the platform's metrics, for a platform with no Prometheus
(`regions up`): the last hour of each series the console charts, in memory, bounded. No I/O:
the caller scrapes and hands the text in.

Theory of operation
-------------------
A scrape of one target's /metrics (the Prometheus text format) is `ingest`ed with the time it
was taken and the target's own labels (`cluster`, `node`). Only the families the console
charts are kept (`keep`): a node exports hundreds of series and the console draws a few dozen
kinds. Each series, a sample name with its labels, is a ring of (time, value) of fixed
capacity, window / interval points, so memory is bounded by the number of series, never by
time. A series not scraped for a whole window is dropped (a node removed, a topic deleted):
label churn cannot grow the store either.

Staleness, as Prometheus has it: a series that a target's scrape no longer carries, or all of a
target's series when its scrape fails, get a stale marker (a NaN sample) at that scrape's time.
A selector ignores a series whose latest sample is the marker, so a node killed a second ago
stops reporting its gauges at once instead of for the 5 minutes of lookback.

Queries are the few PromQL functions the console needs, evaluated at steps over the window:
- `points`: the raw samples of the matching series;
- `rate`: a counter's per-second increase over a lookback, resets handled as Prometheus
  handles them (a value below the previous one counts from 0 again). Unlike Prometheus it does
  not extrapolate to the lookback's edges: the console's charts are of trends, and a rate from
  the samples actually seen never invents traffic;
- `quantile`: a histogram's q-quantile from its `_bucket` counters' rates, interpolated
  linearly inside the bucket that holds the rank, as histogram_quantile does;
- `sum_by`: a sum of series that agree on the given labels.

Worked example: a counter scraped every 5 s as 10, 20, 5, 15 (the process restarted after 20)
increased by 10 + 5 + 10 = 25 over 15 s: rate 1.67/s. A histogram whose buckets rose by
le=0.1: 90, le=0.5: 99, le=+Inf: 100 in the lookback has its p99 at the 99th of 100
observations, the top of the 0.5 bucket: 0.5; its p50 at 0.1 / 90 * 50 = 0.056.
"""
from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

Labels = tuple[tuple[str, str], ...]
STALE = math.nan        # Prometheus' stale marker is a NaN too (a particular one; any NaN here)


class Ring:
    """The last `capacity` (time, value) samples of one series, oldest first."""
    __slots__ = ("times", "values", "start", "size")

    def __init__(self, capacity: int):
        self.times = array("d", bytes(8 * capacity))
        self.values = array("d", bytes(8 * capacity))
        self.start = 0
        self.size = 0

    def append(self, at: float, value: float) -> None:
        capacity = len(self.times)
        if self.size and at <= self.last_time():
            return          # a scrape taken no later than the last one adds nothing
        end = (self.start + self.size) % capacity
        self.times[end], self.values[end] = at, value
        if self.size < capacity:
            self.size += 1
        else:
            self.start = (self.start + 1) % capacity

    def last_time(self) -> float:
        return self.times[(self.start + self.size - 1) % len(self.times)]

    def samples(self, since: float = -math.inf, until: float = math.inf) -> list[tuple[float, float]]:
        capacity = len(self.times)
        out = []
        for i in range(self.size):
            k = (self.start + i) % capacity
            if since <= self.times[k] <= until:
                out.append((self.times[k], self.values[k]))
        return out

    def nbytes(self) -> int:
        return self.times.itemsize * (len(self.times) + len(self.values))


@dataclass(frozen=True)
class Series:
    name: str
    labels: Labels
    points: list[tuple[float, float | None]]

    def label(self, key: str) -> str | None:
        return dict(self.labels).get(key)


class SeriesStore:
    def __init__(self, keep: Iterable[str], *, window_s: float = 3600, interval_s: float = 5):
        if window_s <= 0 or interval_s <= 0:
            raise ValueError("window_s and interval_s must be positive")
        self.keep = frozenset(keep)
        self.window_s = window_s
        self.capacity = int(math.ceil(window_s / interval_s)) + 1
        self.rings: dict[tuple[str, Labels], Ring] = {}
        self.by_name: dict[str, dict[Labels, Ring]] = {}
        self.by_target: dict[Labels, set[tuple[str, Labels]]] = {}   # a target's series at its last scrape

    # -------------------------------------------------------------- ingesting

    def ingest(self, at: float, text: str, target: Mapping[str, str] | None = None) -> int:
        """Keep one scrape's samples of the kept families, taken at `at`, with the target's
        labels added (they win over the sample's own, as Prometheus' honor_labels=false
        does). Returns how many samples were kept; a malformed scrape raises ValueError and
        keeps nothing of it."""
        extra = dict(target or {})
        taken = []
        for family in text_string_to_metric_families(text):
            if family.name not in self.keep:
                continue
            for sample in family.samples:
                labels = tuple(sorted({**sample.labels, **extra}.items()))
                taken.append(((sample.name, labels), float(sample.value)))
        for (name, labels), value in taken:
            self._record(at, name, labels, value)
        target_key = tuple(sorted(extra.items()))
        now_seen = {key for key, _ in taken}
        self._mark_stale(at, self.by_target.get(target_key, set()) - now_seen)
        self.by_target[target_key] = now_seen
        self.expire(at)
        return len(taken)

    def mark_target_stale(self, at: float, target: Mapping[str, str] | None) -> None:
        """A failed scrape: every series the target carried ends now."""
        self._mark_stale(at, self.by_target.pop(tuple(sorted((target or {}).items())), set()))

    def _mark_stale(self, at: float, keys: Iterable[tuple[str, Labels]]) -> None:
        for key in keys:
            ring = self.rings.get(key)
            if ring is not None:
                ring.append(at, STALE)

    def record(self, at: float, name: str, labels: Mapping[str, str], value: float) -> None:
        """One sample the console makes itself (a scrape's `up`: 1 answered, 0 not)."""
        self._record(at, name, tuple(sorted(labels.items())), value)

    def _record(self, at: float, name: str, labels: Labels, value: float) -> None:
        ring = self.rings.get((name, labels))
        if ring is None:
            ring = self.rings[(name, labels)] = Ring(self.capacity)
            self.by_name.setdefault(name, {})[labels] = ring
        ring.append(at, value)

    def expire(self, now: float) -> None:
        """Drop the series not scraped or recorded for a whole window."""
        gone = [key for key, ring in self.rings.items() if ring.last_time() < now - self.window_s]
        for name, labels in gone:
            del self.rings[(name, labels)]
            named = self.by_name[name]
            del named[labels]
            if not named:
                del self.by_name[name]

    def nbytes(self) -> int:
        """The samples' memory (the rings' arrays; keys and objects come on top)."""
        return sum(ring.nbytes() for ring in self.rings.values())

    # -------------------------------------------------------------- queries

    def _matching(self, name: str, match: Mapping[str, str] | None) -> list[tuple[Labels, Ring]]:
        wanted = set((match or {}).items())
        return [(labels, ring) for labels, ring in sorted(self.by_name.get(name, {}).items())
                if wanted <= set(labels)]

    def points(self, name: str, match: Mapping[str, str] | None = None, *, since: float = -math.inf
               ) -> list[Series]:
        return [Series(name, labels, list(ring.samples(since))) for labels, ring in self._matching(name, match)]

    def rate(self, name: str, match: Mapping[str, str] | None = None, *, at: Iterable[float],
             lookback_s: float) -> list[Series]:
        """Per-second increase of each matching counter at each time in `at`, from its
        samples in (t - lookback_s, t]; None where fewer than two samples fall there."""
        steps = list(at)
        out = []
        for labels, ring in self._matching(name, match):
            samples = ring.samples()
            out.append(Series(name, labels, [(t, _rate([s for s in samples if t - lookback_s < s[0] <= t]))
                                             for t in steps]))
        return out

    def quantile(self, q: float, name: str, match: Mapping[str, str] | None = None, *, at: Iterable[float],
                 lookback_s: float) -> list[Series]:
        """The q-quantile of histogram `name` (its `name_bucket` series), one series per
        label set other than `le`, at each time in `at`."""
        if not 0 <= q <= 1:
            raise ValueError(f"quantile {q} is outside 0..1")
        steps = list(at)
        groups: dict[Labels, list[tuple[float, list[tuple[float, float | None]]]]] = {}
        for series in self.rate(f"{name}_bucket", match, at=steps, lookback_s=lookback_s):
            le = series.label("le")
            if le is None:
                continue
            rest = tuple(kv for kv in series.labels if kv[0] != "le")
            groups.setdefault(rest, []).append((float(le), series.points))
        out = []
        for labels, buckets in sorted(groups.items()):
            buckets.sort(key=lambda b: b[0])
            points = []
            for i, t in enumerate(steps):
                counts = [(le, points_[i][1]) for le, points_ in buckets]
                points.append((t, histogram_quantile(q, counts)))
            out.append(Series(name, labels, points))
        return out


def sum_by(series: list[Series], by: Iterable[str]) -> list[Series]:
    """Series that agree on the `by` labels, summed step by step (None where all are None;
    the steps must be the same, as one query's are)."""
    keys = tuple(by)
    groups: dict[Labels, list[Series]] = {}
    for s in series:
        group = tuple((k, v) for k, v in s.labels if k in keys)
        groups.setdefault(group, []).append(s)
    out = []
    for labels, members in sorted(groups.items()):
        points = []
        for i, (t, _) in enumerate(members[0].points):
            values = [m.points[i][1] for m in members if m.points[i][1] is not None]
            points.append((t, sum(values) if values else None))
        out.append(Series(members[0].name, labels, points))
    return out


def _rate(samples: list[tuple[float, float]]) -> float | None:
    samples = [s for s in samples if s[1] == s[1]]      # stale markers (NaN) count nothing
    if len(samples) < 2:
        return None
    increase = 0.0
    for (_, before), (_, after) in zip(samples, samples[1:]):
        increase += after - before if after >= before else after
    return increase / (samples[-1][0] - samples[0][0])


def histogram_quantile(q: float, buckets: list[tuple[float, float | None]]) -> float | None:
    """The q-quantile of cumulative bucket counts [(upper bound, count)], sorted by bound
    and ending with +Inf; None where there is nothing to rank (no observations, or a bucket
    with no count)."""
    if not buckets or buckets[-1][0] != math.inf or any(c is None for _, c in buckets):
        return None
    total = buckets[-1][1]
    assert total is not None
    if total <= 0:
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for upper, count in buckets:
        assert count is not None
        if count >= rank:
            if upper == math.inf:
                return lower            # the highest finite bound, as Prometheus answers
            if count == below:
                return upper
            return lower + (upper - lower) * (rank - below) / (count - below)
        lower, below = upper, count
    return lower
