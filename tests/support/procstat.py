"""What a process has used, read from /proc: for benchmarks that report a process's CPU and
memory beside their figures."""
from __future__ import annotations

import os
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_user_system(pid: int) -> tuple[float, float]:
    """User and system CPU time the process has used so far, every thread (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICKS, int(fields[12]) / TICKS     # utime, stime


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time the process has used so far (/proc/PID/stat)."""
    return sum(cpu_user_system(pid))


def rss_bytes(pid: int) -> int:
    """The process's resident memory now (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def prefault(gib: float, chunk_mib: int = 128) -> str:
    """Touch and release `gib` GiB of anonymous memory; return what it cost.

    On this VM the first touch of a guest page the VM has never used costs ~5x a reused one
    (~250 vs ~1,300 MiB/s). A broker that stores data (tansu in RAM, Seaway in the page
    cache) pays that cost per byte produced until the VM has touched enough memory, which
    caps both at a few hundred MB/s and makes results depend on the VM's history.
    Touching memory up front and releasing it lets both brokers reuse warm pages.
    """
    import mmap
    import time

    chunks, slow, t0 = [], 0, time.perf_counter()
    try:
        for _ in range(int(gib * 1024 / chunk_mib)):
            m = mmap.mmap(-1, chunk_mib << 20)
            t = time.perf_counter()
            for off in range(0, chunk_mib << 20, mmap.PAGESIZE):
                m[off] = 1
            slow += (chunk_mib / (time.perf_counter() - t)) < 600  # MiB/s; warm pages run ~1,300
            chunks.append(m)
    except (OSError, MemoryError) as exc:
        return f"stopped after {len(chunks) * chunk_mib} MiB: {exc}"
    finally:
        for m in chunks:
            m.close()
    seconds = time.perf_counter() - t0
    return (f"{gib:g} GiB touched and released in {seconds:.1f} s "
            f"({slow} of {len(chunks)} chunks of {chunk_mib} MiB were cold)")

