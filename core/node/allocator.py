"""Keep freed memory for reuse instead of handing it back to the kernel after every request.

Why. A node's produce and fetch paths hold buffers of about a megabyte each: a request frame
being assembled, a segment read, a response being written out. glibc gives such blocks back
to the kernel as soon as they are freed (above its mmap threshold, or by trimming the top of
the heap), so the next request's buffer is fresh memory again, and every 4 KiB page of it
costs a page fault and a page cleared by the kernel before the first byte is copied in.
`perf` of a leader at RF=3 put 7% of its time in those faults (tests/benchmarks/README.md).

How. Three mallopt settings, as a JVM keeps its heap: blocks up to 32 MiB (glibc's maximum
for this) come from the heap, whose free top is kept up to 256 MiB and grown 16 MiB at a
time. What it costs is resident memory a quiet node could have returned: at most the
threshold, and only what a busy moment actually used. Not glibc (musl, macOS): nothing to do.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

# glibc's malloc.h
M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 256 << 20
TOP_PAD = 16 << 20


def keep_freed_memory() -> bool:
    """Tune glibc's malloc for a node; False where there is no glibc (nothing changed)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = all(mallopt(param, value) == 1 for param, value in
             ((M_MMAP_THRESHOLD, MMAP_THRESHOLD), (M_TRIM_THRESHOLD, TRIM_THRESHOLD), (M_TOP_PAD, TOP_PAD)))
    if not ok:
        log.warning("malloc tuning refused by the C library; buffers are returned to the kernel after use")
    return ok
