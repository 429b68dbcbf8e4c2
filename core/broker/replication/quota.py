"""Replication throttles (KIP-73): bytes per second for replicas being moved or caught up.

Kafka's rules, both sides:

* which replicas: a topic's `leader.replication.throttled.replicas` / `follower.replication.
  throttled.replicas` name PARTITION:BROKER pairs (or *); a broker throttles a partition on the
  leader side when the leader list names it with this broker, on the follower side when the
  follower list does;
* how much: the broker's `leader.replication.throttled.rate` / `follower.replication.throttled.
  rate` in bytes/s (static, or a dynamic broker config for this broker id or the cluster-wide
  default), measured over a sliding window of 11 one-second samples;
* never an in-sync replica: a follower in the ISR is not slowed down;
* the leader answers a throttled follower fetch with no records while the rate is exceeded; the
  follower leaves throttled partitions out of its fetches while its rate is exceeded.
"""
from __future__ import annotations

from collections import deque
from typing import Callable

WINDOW_MS = 1000
WINDOWS = 11
UNLIMITED = 2**63 - 1


class ReplicationQuota:
    def __init__(self, limit: Callable[[], int], clock: Callable[[], int]):
        self._limit = limit
        self._clock = clock
        self._samples: deque[list[int]] = deque()   # [window start ms, bytes]

    def _purge(self, now: int) -> None:
        while self._samples and now - self._samples[0][0] >= WINDOW_MS * WINDOWS:
            self._samples.popleft()

    def record(self, nbytes: int) -> None:
        # Samples start when bytes arrive, never on a mere reading: an idle stretch must not
        # count as time that earns a burst.
        now = self._clock()
        self._purge(now)
        if not self._samples or now - self._samples[-1][0] >= WINDOW_MS:
            self._samples.append([now, 0])
        self._samples[-1][1] += nbytes

    def rate(self) -> float:
        """Bytes per second over the samples kept (at least one window's span)."""
        now = self._clock()
        self._purge(now)
        if not self._samples:
            return 0.0
        total = sum(b for _, b in self._samples)
        span = max(now - self._samples[0][0], WINDOW_MS)
        return total * 1000 / span

    def exceeded(self) -> bool:
        limit = self._limit()
        return limit < UNLIMITED and self.rate() > limit
