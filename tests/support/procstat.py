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
