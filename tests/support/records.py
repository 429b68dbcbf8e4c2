"""Record batches for tests of the log and the broker."""
from __future__ import annotations

from core.protocol.records import build_batch


def batch(n: int = 1, size: int = 20, ts: int = 1_000, tag: int = 0) -> bytes:
    return build_batch([(b"k%d" % i, bytes([tag % 256]) * size, [], ts) for i in range(n)])
