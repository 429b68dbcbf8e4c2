"""regions/wan.py's WanPipe: the pure scheduling model behind the WAN proxies.

Each case feeds (now, nbytes) chunks to a fresh pipe and lists the arrival times it must
answer, to within a nanosecond of floating-point error.
"""
from __future__ import annotations

import random

import pytest

from regions.wan import MIN_QUEUED_BYTES, UNLIMITED_QUEUED_BYTES, WanPipe

MBIT = 1_000_000

CASES = {
    # name: (latency_s, bandwidth_bps, [(now, nbytes), ...], [arrival, ...])
    "unlimited bandwidth: only propagation":
        (0.04, None, [(0.0, 10), (0.5, 1 << 20), (0.5, 1 << 20), (3.0, 0)], [0.04, 0.54, 0.54, 3.04]),
    "no latency, no limit: arrives when sent":
        (0.0, None, [(1.0, 100), (2.0, 100)], [1.0, 2.0]),
    "back-to-back chunks queue behind each other":
        (0.0, 1 * MBIT, [(0.0, 125_000), (0.0, 125_000)], [1.0, 2.0]),
    "serialization plus propagation":
        (0.04, 1 * MBIT, [(0.0, 125_000), (0.0, 125_000)], [1.04, 2.04]),
    "a chunk handed over mid-transmission waits for the serializer":
        (0.04, 1 * MBIT, [(0.0, 125_000), (0.5, 125_000)], [1.04, 2.04]),
    "an idle gap resets the serializer":
        (0.04, 1 * MBIT, [(0.0, 125_000), (5.0, 125_000)], [1.04, 6.04]),
    "a zero-byte chunk (EOF) arrives after the data before it":
        (0.04, 1 * MBIT, [(0.0, 125_000), (0.0, 0)], [1.04, 1.04]),
    "100 Mbit/s, 40 ms: one 64 KiB chunk":
        (0.04, 100 * MBIT, [(10.0, 65_536)], [10.0 + 0.04 + 65_536 * 8 / (100 * MBIT)]),
}


@pytest.mark.parametrize("name", CASES)
def test_arrival_times(name):
    latency_s, bandwidth_bps, chunks, expected = CASES[name]
    pipe = WanPipe(latency_s, bandwidth_bps)
    arrivals = [pipe.schedule(now, nbytes) for now, nbytes in chunks]
    assert arrivals == pytest.approx(expected, abs=1e-9)


def test_free_at_follows_the_serializer():
    pipe = WanPipe(0.04, 1 * MBIT)
    pipe.schedule(0.0, 125_000)
    assert pipe.free_at == pytest.approx(1.0)
    pipe.schedule(7.0, 125_000)            # idle since 1.0
    assert pipe.free_at == pytest.approx(8.0)


@pytest.mark.parametrize("bandwidth_bps", [None, 1 * MBIT, 100 * MBIT])
@pytest.mark.parametrize("seed", range(5))
def test_arrivals_never_decrease(seed, bandwidth_bps):
    rng = random.Random(seed)
    pipe = WanPipe(rng.uniform(0, 0.1), bandwidth_bps)
    now, previous = 0.0, float("-inf")
    for _ in range(500):
        now += rng.choice([0.0, 0.0, rng.uniform(0, 0.05), rng.uniform(0, 2)])
        arrival = pipe.schedule(now, rng.choice([0, 1, 65_536, rng.randrange(1, 200_000)]))
        assert arrival >= previous
        assert arrival >= now + pipe.latency_s
        previous = arrival


def test_shared_pipe_total_time_is_the_sum_of_the_senders_bytes():
    # Two senders interleaving on one pipe finish no sooner than one sender of all the bytes.
    pipe = WanPipe(0.0, 8 * MBIT)
    last = 0.0
    for _ in range(16):
        for _sender in ("a", "b"):
            last = pipe.schedule(0.0, 65_536)
    assert last == pytest.approx(2 * 16 * 65_536 * 8 / (8 * MBIT))


@pytest.mark.parametrize("kwargs, field", [
    ({"latency_s": -0.001}, "latency_s"),
    ({"latency_s": float("nan")}, "latency_s"),
    ({"latency_s": float("inf")}, "latency_s"),
    ({"latency_s": "40ms"}, "latency_s"),
    ({"latency_s": 0.04, "bandwidth_bps": 0}, "bandwidth_bps"),
    ({"latency_s": 0.04, "bandwidth_bps": -1}, "bandwidth_bps"),
    ({"latency_s": 0.04, "bandwidth_bps": float("inf")}, "bandwidth_bps"),
])
def test_bad_parameters_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        WanPipe(**kwargs)


def test_negative_size_is_refused():
    with pytest.raises(ValueError, match="nbytes"):
        WanPipe(0.0).schedule(0.0, -1)


@pytest.mark.parametrize("latency_s, bandwidth_bps, limit", [
    (0.04, None, UNLIMITED_QUEUED_BYTES),
    (0.0, 1 * MBIT, MIN_QUEUED_BYTES),
    (0.04, 100 * MBIT, MIN_QUEUED_BYTES + 500_000),   # bandwidth-delay product: 500 kB in flight
])
def test_queue_limit_covers_the_bytes_in_flight(latency_s, bandwidth_bps, limit):
    assert WanPipe(latency_s, bandwidth_bps).queue_limit() == limit
