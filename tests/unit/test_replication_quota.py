"""The replication throttle's rate measure (core/broker/replication/quota.py)."""
from __future__ import annotations

import pytest

from core.broker.replication.quota import UNLIMITED, WINDOW_MS, WINDOWS, ReplicationQuota


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def quota(limit: int = 100_000):
    clock = Clock()
    return ReplicationQuota(lambda: limit, clock), clock


@pytest.mark.parametrize("steps, exceeded", [
    # (ms to wait, bytes to record) ...; then: is the limit of 100 kB/s exceeded?
    ([(0, 100_000)], False),                      # exactly the limit over the first window
    ([(0, 100_001)], True),
    ([(0, 150_000), (500, 0)], True),             # the first window counts as a whole second
    ([(0, 150_000), (1500, 0)], False),           # 150 kB over 1.5 s
    ([(0, 50_000), (900, 60_000)], True),         # 110 kB within one second
    ([(0, 50_000), (1100, 60_000)], False),       # 110 kB over 1.1 s
    # Idle time earns no burst: readings alone start no sample.
    ([(0, 0), (5000, 150_000)], True),
    # Samples older than the window span are forgotten.
    ([(0, 10_000_000), (WINDOW_MS * WINDOWS + 1, 50_000)], False),
])
def test_rate_against_the_limit(steps, exceeded):
    q, clock = quota()
    for wait, nbytes in steps:
        clock.now += wait
        q.exceeded()   # readings in between must not change the measure
        if nbytes:
            q.record(nbytes)
    assert q.exceeded() is exceeded


def test_no_limit_is_never_exceeded():
    q, _ = quota(UNLIMITED)
    q.record(10**12)
    assert not q.exceeded()
