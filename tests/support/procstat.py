"""What a process has used, read from /proc: for benchmarks that report a process's CPU and
memory beside their figures."""
from __future__ import annotations

import os
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time the process has used so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS     # utime, stime


def rss_bytes(pid: int) -> int:
    """The process's resident memory now (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def touch_memory(nbytes: int) -> float:
    """Write one byte in every page of `nbytes` of fresh memory, then free it; returns seconds.

    On a virtual machine the first touch of a guest page is slow: the host backs it then.
    The page cache a broker writes into is such memory until the machine has used it once,
    so on a fresh machine a write() costs about four times what it costs later (2 GiB of new
    file: 2.6 s of CPU, then 0.6 s), and a benchmark's first runs measure the host. Touching
    most of the free memory once beforehand takes that out of the figures.
    """
    import mmap
    import time
    start = time.perf_counter()
    page = mmap.PAGESIZE
    with mmap.mmap(-1, nbytes) as m:
        for off in range(0, nbytes, page):
            m[off] = 1
    return time.perf_counter() - start


def available_memory_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0
