"""dr/stranded.py: where a returning region's stranded records begin, from the promoted copy's
end at promotion and the link's offset syncs (no I/O)."""
from __future__ import annotations

import pytest

from dr.stranded import Boundary, origin, origin_offset, stranded_boundary
from mirror.translation import Sync


# Each row: the partition's syncs, the promoted copy's end T, the log start -> the boundary.
@pytest.mark.parametrize("syncs, promoted_end, log_start, boundary", [
    # One run [0, 100) copied whole; T at its end: the first stranded record is upstream 100.
    ([Sync(0, 0, 100)], 100, 0, Boundary(100, 0, True)),
    # The region died after the mirror wrote 3 more records but before their sync: count 3.
    ([Sync(0, 0, 100)], 103, 0, Boundary(100, 3, True)),
    # T inside a run (a sync written, a later batch's never acknowledged): count from the cut.
    ([Sync(0, 0, 100)], 40, 0, Boundary(0, 40, True)),
    # A hole upstream (compaction) between runs: [0,10) -> [0,10), [20,25) -> [10,15).
    ([Sync(0, 0, 10), Sync(20, 10, 5)], 15, 0, Boundary(25, 0, True)),
    # T where the first run ends: upstream [10, 20) is the hole (the later cut at the same
    # downstream offset says so), so the first stranded record is upstream 20.
    ([Sync(0, 0, 10), Sync(20, 10, 5)], 10, 0, Boundary(20, 0, True)),
    # A rebuilt batch (extent 0) ends at the next cut, which is the end edge.
    ([Sync(0, 0, 0), Sync(7, 5, 0)], 5, 0, Boundary(7, 0, True)),
    # The link resumed after a failover back: its seed sync, then a run after it.
    ([Sync(60, 90, 0), Sync(60, 90, 30)], 120, 0, Boundary(90, 0, True)),
    # Nothing ever copied, nothing promoted: every record is stranded, and that is proven.
    ([], 0, 0, Boundary(0, 0, True)),
    # Records on the replica but no sync says of what: all of it counts, unproven.
    ([], 50, 5, Boundary(5, 0, False)),
    # The log start moved past the cut (retention): start there, never before it.
    ([Sync(0, 0, 100)], 100, 150, Boundary(150, 0, True)),
])
def test_the_stranded_boundary(syncs, promoted_end, log_start, boundary):
    assert stranded_boundary(syncs, promoted_end, log_start) == boundary


def test_the_origin_header_names_cluster_topic_partition_and_offset():
    headers = [("trace", b"x"), ("seaway.stranded.origin", origin("eu-1", "orders", 2, 41))]
    assert origin_offset(headers, "eu-1", "orders", 2) == 41
    assert origin_offset(headers, "eu-1", "orders", 1) is None        # another partition's
    assert origin_offset(headers, "eu-1", "order", 2) is None
    assert origin_offset([("seaway.stranded.origin", b"eu-1:orders:2:x")], "eu-1", "orders", 2) is None
