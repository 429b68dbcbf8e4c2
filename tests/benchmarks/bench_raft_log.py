#!/usr/bin/env python
"""Hand-run benchmark: what the in-memory Raft log costs per metadata record.

    python tests/benchmarks/bench_raft_log.py [--entries 100000] [--payload 81]

Appends --entries entries of --payload bytes (a TopicRecord's size, about) in chunks of 100,
as a follower appends what a fetch brought, then reads them all back in 64 KiB fetches.
Prints the memory the log holds (tracemalloc, after a collection) per entry, and both times.
Every node holds the metadata records since its last snapshot this way.
"""
from __future__ import annotations

import argparse
import gc
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from core.raft.entries import Entry  # noqa: E402
from core.raft.log import RaftLog  # noqa: E402

CHUNK = 100


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--payload", type=int, default=81)
    args = ap.parse_args()
    gc.collect()
    tracemalloc.start()   # before the entries are made: a log may keep them, or only their bytes
    chunks = [[Entry(c * CHUNK + i, 7, bytes(args.payload - 1) + bytes([i]))
               for i in range(CHUNK)] for c in range(args.entries // CHUNK)]
    start = time.perf_counter()
    log = RaftLog()
    for chunk in chunks:
        log.append(chunk)
    appended = time.perf_counter() - start
    del chunks
    gc.collect()
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    start = time.perf_counter()
    offset = 0
    while offset < log.end_offset:
        offset += len(log.read(offset, 64 * 1024))
    read = time.perf_counter() - start
    n = log.end_offset
    print(f"{n} entries of {args.payload} B: {held / 1e6:.1f} MB held, {held / n:.0f} B per entry; "
          f"append {appended * 1000:.0f} ms, read back {read * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
