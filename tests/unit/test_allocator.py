"""The node's malloc tuning: megabyte buffers freed and allocated again reuse their pages."""
import subprocess
import sys

PROBE = r"""
import os, resource, sys
if sys.argv[1] == "tuned":
    from core.node.allocator import keep_freed_memory
    assert keep_freed_memory()
def churn():
    # Each round holds a few megabyte buffers at once, as a request does (the frame, the
    # segment reads, the response), then frees them all.
    for _ in range(50):
        blocks = [os.urandom(1) * (1 << 20) for _ in range(4)]
        del blocks
churn()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
churn()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True)
    return int(out.stdout)


def test_megabyte_buffers_reuse_their_pages_once_tuned():
    # 50 rounds of 4 MiB are 51,200 pages: untuned, glibc trims the freed top of the heap
    # (more than its threshold of twice the largest block) after each round, and every page
    # faults again in the next; tuned, the heap keeps them.
    untuned, tuned = faults("plain"), faults("tuned")
    assert untuned > 20_000, untuned
    assert tuned < 2_000, tuned
