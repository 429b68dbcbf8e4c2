"""mirror/checkpoints.py: which checkpoint a group's commit gets (no I/O): translated where the
link's syncs cover it, and at the end of what the link has copied where the group is ahead of
the link, which under steady traffic is where a caught-up group always is."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from core.client import OffsetAndMetadata
from mirror.checkpoints import CheckpointEmitter
from mirror.policy import IdentityReplicationPolicy
from mirror.records import OffsetSync
from mirror.translation import OffsetSyncStore


def emitter() -> CheckpointEmitter:
    store = OffsetSyncStore()
    # Upstream [10, 15) copied whole to [100, 105), then [20, 25) to [105, 110): copied to 25.
    store.observe(OffsetSync("orders", 0, 10, 100, 5))
    store.observe(OffsetSync("orders", 0, 20, 105, 5))
    link = SimpleNamespace(store=store, copiers={("orders", 0): None}, policy=IdentityReplicationPolicy(),
                           config=SimpleNamespace(source_alias="eu-1"))
    return CheckpointEmitter(link)


# Each row: the group's commit, the source partition's end (None: unknown) -> its checkpoint's
# downstream offset (None: no checkpoint).
@pytest.mark.parametrize("committed, end, downstream", [
    (12, 40, 102),      # inside a run: exact
    (17, 40, 105),      # in the hole between runs: where the next run starts
    (25, 40, 110),      # at the end of what was copied: exact
    (31, 40, 110),      # ahead of the link: the end of what was copied (25 -> 110)
    (40, 40, 110),      # caught up with the source, ahead of the link
    (41, 40, None),     # beyond the source's end: another incarnation of the topic
    (31, None, None),   # the source's end unknown: no guess
    (5, 40, None),      # below the earliest sync: the link started after it
])
def test_a_commit_gets_the_checkpoint_it_can_be_sure_of(committed, end, downstream):
    ends = None if end is None else {("orders", 0): end}
    found = emitter().checkpoints({"billing": {("orders", 0): OffsetAndMetadata(committed, "m")}}, ends)
    assert [(c.group, c.topic, c.partition, c.upstream_offset, c.downstream_offset, c.metadata)
            for c in found] == ([] if downstream is None else [("billing", "orders", 0, committed, downstream, "m")])


def test_topics_the_link_does_not_copy_and_groups_without_commits_get_none():
    found = emitter().checkpoints({"billing": {("payments", 0): OffsetAndMetadata(3, "")},
                                   "idle": {("orders", 0): None}, "gone": KeyError("x")},
                                  {("payments", 0): 10, ("orders", 0): 40})
    assert found == []
