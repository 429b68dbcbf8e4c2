"""Whether the pair's consumer groups could resume on the standby cluster: the *groups synced*
readiness check of `dr status`, and the checkpoint age it reports (no I/O: dr/observe.py reads
the active cluster's committed offsets and the standby's checkpoints).

Where a group stands on the standby
-----------------------------------
The mirror link out of the active cluster writes MM2 checkpoints to
`<active>.checkpoints.internal` on the standby (mirror/checkpoints.py): group G committed
upstream offset u on a partition, and resumes at downstream offset d there. It writes one on
each pass (every `checkpoint_interval_s`) in which a group's translation changed, and none
while the group stands still, or while its commit is beyond what the link has copied (the
translation would be a guess). The newest checkpoint of (G, topic, partition) is what the
standby knows of G there: MM2 tooling, or the mirror's `sync_group_offsets`, turns it into G's
offset on the standby. A planned failover does not need it (its sync-groups step translates
the commits the old side holds at that moment), an unplanned one has nothing else.

Synced, precisely
-----------------
For each group with a committed offset c on the active cluster for a partition of a DR topic
active there (less MM2's default exclusions: console-consumer-*, connect-*, __*), take the
standby's newest checkpoint of it, (u, d) written at time t:

* *synced* when u == c: the standby knows exactly where the group stands;
* *in flight* when u != c but t is at most GRACE_S old: the group moved since the mirror's
  last pass, which will write the new translation at its next (a consuming group's newest
  checkpoint is always about one interval old and one interval behind); counted as synced;
* *stale* when u != c and t is older than GRACE_S: the checkpoints stopped following the
  group (mirror stopped, the link far behind the group, a rewind it has not written). An
  unplanned failover now resumes it at d: it re-reads c - u records (or, u > c, skips them);
* *missing* when there is no checkpoint: an unplanned failover now leaves the group
  without a position on the standby (it starts at auto.offset.reset);
* *ahead of the link* when c is beyond what the link has copied of the partition (the
  latest offset sync's run end, as the lag is measured): a caught-up group under steady
  traffic across a WAN is there most of the time (it commits what it read before the link's
  copy is acknowledged). The mirror checkpoints it at the end of what it copied, with c as
  the upstream offset (mirror/checkpoints.py), so it is judged like any other; `ahead` lists
  these partitions, and what the group would lose there is the RPO at risk, reported beside.

Known limits: a checkpoint's age, not the commit's, decides "in flight", so a group that moves
after standing still longer than GRACE_S shows stale until the mirror's next pass. After a
planned failover, a group that had not read up to the promotion point has no checkpoint on
the old side (the link back starts there) and shows missing until it reads past it, although
the old side still holds its commit from before the failover.

A group is synced when every partition it committed is. The check is advisory (WARN): it
makes `dr status` not ready, exit 1, but never stops a `dr failover`, which, planned, writes
the groups' final offsets itself, and, unplanned, could not make checkpoints appear anyway.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

# How old a checkpoint behind its group's commit may be before it counts as stale: six of the
# mirror's default 5-second checkpoint intervals (a pass that finds the commit still ahead of
# the link's copy writes nothing, and the next one catches up).
GRACE_S = 30.0

# The mirror's exclusions (mirror/checkpoints.py DEFAULT_GROUPS_EXCLUDE): no checkpoints are
# written for these groups, so none are asked for.
EXCLUDED_GROUPS = re.compile(r"console-consumer-.*|connect-.*|__.*")

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class CheckpointSeen:
    """The standby's newest checkpoint of one group's partition."""
    upstream: int         # the commit on the active cluster it translates
    downstream: int       # where the group resumes on the standby
    at: float             # when the mirror wrote it (the record's timestamp, seconds)


@dataclass(frozen=True)
class GroupsView:
    """The groups of the link out of `active`, as read: their commits on `active` (DR topics
    active there only) and the standby's checkpoints of them; `error` when they could not be
    read (then both may be partial)."""
    active: str
    standby: str
    commits: dict[str, dict[TopicPartition, int]] = field(default_factory=dict)
    checkpoints: dict[tuple[str, str, int], CheckpointSeen] = field(default_factory=dict)
    newest_at: float | None = None      # the newest checkpoint record of the topic, any group
    error: str | None = None
    # How far the link has copied each partition (where the lag was read; a partition missing
    # here counts as copied past every commit).
    copied: dict[TopicPartition, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Behind:
    topic: str
    partition: int
    commit: int
    checkpoint: int
    age_s: float


@dataclass(frozen=True)
class GroupSync:
    group: str
    standby: str
    partitions: int                  # committed on the active cluster
    missing: list[TopicPartition]    # no checkpoint at all
    stale: list[Behind]              # a checkpoint elsewhere than the commit, older than GRACE_S
    age_s: float | None              # the group's newest checkpoint's age (None: it has none)
    ahead: list[TopicPartition] = field(default_factory=list)   # committed beyond the link's copy

    @property
    def synced(self) -> bool:
        return not self.missing and not self.stale


def group_syncs(view: GroupsView, now: float, *, topics: set[str] | None = None,
                groups: list[str] | None = None, grace_s: float = GRACE_S) -> list[GroupSync]:
    """Each group of `view` (only these `topics` and `groups` when given), judged as the
    module docstring says, at wall-clock time `now`."""
    out = []
    for group, committed in sorted(view.commits.items()):
        if EXCLUDED_GROUPS.fullmatch(group) or (groups is not None and group not in groups):
            continue
        parts = sorted(tp for tp, offset in committed.items()
                       if offset >= 0 and (topics is None or tp[0] in topics))
        if not parts:
            continue
        missing, stale, ahead, newest = [], [], [], None
        for tp in parts:
            seen = view.checkpoints.get((group, *tp))
            age = None if seen is None else max(0.0, now - seen.at)
            if age is not None:
                newest = age if newest is None else min(newest, age)
            if tp in view.copied and committed[tp] > view.copied[tp]:
                ahead.append(tp)        # checkpointed at the copy's end (mirror/checkpoints.py)
            if seen is None:
                missing.append(tp)
            elif age is not None and seen.upstream != committed[tp] and age > grace_s:
                stale.append(Behind(tp[0], tp[1], committed[tp], seen.upstream, age))
        out.append(GroupSync(group, view.standby, len(parts), missing, stale, newest, ahead))
    return out


def checkpoint_age(views: list[GroupsView], now: float) -> float | None:
    """Seconds since the newest checkpoint any of the pair's standbys holds (None: none yet).
    It grows while every group stands still: read it with the groups check."""
    newest = [v.newest_at for v in views if v.newest_at is not None]
    return max(0.0, now - max(newest)) if newest else None


def describe(syncs: list[GroupSync], limit: int = 3) -> str:
    """What is wrong with the groups that are not synced, in one line."""
    parts = []
    for s in [s for s in syncs if not s.synced][:limit]:
        if s.missing:
            names = ", ".join(f"{t}-{p}" for t, p in s.missing[:3]) + (", ..." if len(s.missing) > 3 else "")
            if len(s.missing) == s.partitions:
                parts.append(f"{s.group} has no checkpoint on {s.standby}")
            else:
                parts.append(f"{s.group} has no checkpoint on {s.standby} for {names}")
        else:
            b = max(s.stale, key=lambda b: b.age_s)
            way = f"{b.commit - b.checkpoint} behind" if b.checkpoint < b.commit else \
                f"{b.checkpoint - b.commit} ahead (a failover would skip them)"
            parts.append(f"{s.group}'s checkpoint of {b.topic}-{b.partition} on {s.standby} is at {b.checkpoint}, "
                         f"its commit at {b.commit} ({way}), written {b.age_s:.0f}s ago")
    more = sum(1 for s in syncs if not s.synced) - len(parts)
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")
