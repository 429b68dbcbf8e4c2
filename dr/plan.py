"""Turning `dr failover REGION` into an ordered plan, from what was observed of the clusters,
with no I/O: `dr plan` prints the plan, `dr failover` carries it out.

Theory of operation
-------------------
A DR pair is an identity mirror link of the topology, run both ways. Which cluster is active
is not stored anywhere but in the topics themselves (core/protocol/dr.py): the active copy of
each DR topic is writable and its partner is a replica of it. So the observation of both
clusters (PairView) says everything a plan needs: which side is active, whether a failover
is half done (roles that agree with neither side), what the link has yet to copy.

A *planned* failover (the active cluster answers) loses nothing:

    take-epoch      the next DR epoch, on both clusters (a compare-and-set: one controller wins)
    fence           the active copies become (fenced): applications' writes stop
    drain           the link copies what is left, until the replicas hold every record
    record-syncs    where each promoted copy stands, for the link back (offset syncs)
    promote         the replicas become writable
    switch-clients  the decision record (active region, bootstrap; phase switching) on both
                    clusters and in the state directory: producers move
    sync-groups     once the groups have left the old side, their committed offsets,
                    translated exactly, into the promoted cluster; the decision becomes
                    serving: consumers move, and resume where they committed
    reverse         the old active copies become replicas of the new: the link back runs

An *unplanned* one (the active cluster does not answer, `--force`) promotes at once and
loses what the link had not copied; the plan says how much that was when last observed:

    take-epoch      on the surviving cluster only
    seal            the replicas become (fenced): a mirror still copying is refused, and the
                    end offsets settle, so the next step's are exact
    record-syncs    where each promoted copy stands, so that failback finds what was stranded
    promote, switch-clients

Failback (`dr failback REGION`, plan_failback) brings a region back after an unplanned
failover. The returning cluster's copies are writable (nobody could tell it otherwise) and
hold records it acknowledged that never reached its partner: *stranded* records. Nothing is
truncated; they are found from where the promoted copies stood (record-syncs) and the
link's offset syncs, then kept or re-published:

    take-epoch      on both clusters
    fence           the returning copies become (fenced): writes that still reach it stop
    find-stranded   per partition, the first record its partner never had, and how many
                    follow it (the exact RPO of the unplanned failover, now known)
    keep-stranded   copy them into `<topic>.stranded` on the returning cluster
      (or republish-stranded: onto the active copies, each with a header naming its origin)
    seed-syncs      the link back starts at the promotion point, writing after the stranded
                    records (which stay where they are in the returning cluster's log)
    reverse         the returning copies become replicas: the link back catches them up

and then a planned failover back to the returning region, with RPO 0.

Every step is safe to run again, so a controller that dies midway and starts again redoes
the step it was in; the epoch makes a stale controller's steps fail instead.

Checks that fail stop a failover before it changes anything: the target must answer, every
DR topic must exist on both sides with the same partitions, the roles must say which side is
active (else a failover is in progress), and an active side that does not answer needs
`--force`. Advisory checks (WARN) stop nothing but make `dr status` say the pair is not
ready: topic configs that drifted apart, and groups whose checkpoints on the target do not
follow their commits (dr/groups.py).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Literal

from core.protocol.dr import FENCED, STRANDED_SUFFIX

from .access import Access, access_gaps
from .groups import GroupsView, describe, group_syncs

# A rough cost of one step (a request or two to each cluster and their commit), for the
# expected RTO; drills measure the real one.
STEP_S = 0.1


class PlanError(Exception):
    """One line: the command cannot be planned as asked (bad region, nothing to fail over)."""


@dataclass(frozen=True)
class DrPair:
    """A DR pair of the topology: the identity link's source (the usual primary) and target."""
    first: str          # cluster names
    second: str
    first_region: str
    second_region: str

    @property
    def name(self) -> str:
        return f"{self.first}~{self.second}"

    def cluster_in(self, region: str) -> str | None:
        return {self.first_region: self.first, self.second_region: self.second}.get(region)

    def partner(self, cluster: str) -> str:
        return self.second if cluster == self.first else self.first

    def region_of(self, cluster: str) -> str:
        return self.first_region if cluster == self.first else self.second_region

    def partner_region(self, region: str) -> str:
        return self.second_region if region == self.first_region else self.first_region


@dataclass(frozen=True)
class ClusterView:
    """One cluster as observed: whether it answered, its DR epoch, and its DR topics
    (name -> (partitions, seaway.replica.of))."""
    name: str
    reachable: bool
    epoch: int = 0
    topics: dict[str, tuple[int, str]] = field(default_factory=dict)
    error: str | None = None      # why it did not answer
    # Per DR topic, the configs a link copies (set on the topic, not the DR roles).
    configs: dict[str, dict[str, str]] = field(default_factory=dict)
    # Its SCRAM users and ACL bindings (dr/access.py); None: not read.
    access: Access | None = None


@dataclass(frozen=True)
class PartitionLag:
    records: int                  # not yet copied to the replica
    seconds: float                # age of the oldest record not yet copied (0: none)
    # The log bytes of those records (dr/observe.py backlog_bytes says how they are counted);
    # None: not measured. Estimated: extrapolated from the part of the backlog read.
    bytes: int | None = None
    bytes_estimated: bool = False


@dataclass(frozen=True)
class PairView:
    pair: DrPair
    clusters: dict[str, ClusterView]
    # (topic, partition) -> lag of the link out of the active cluster, as last observed.
    lag: dict[tuple[str, int], PartitionLag] = field(default_factory=dict)
    lag_known: bool = False       # lag was read just now (else it is empty, or an older reading)
    # active cluster -> its groups' commits and the standby's checkpoints (dr/groups.py); a
    # cluster missing here was not asked (unreachable, or no topic active there).
    groups: dict[str, GroupsView] = field(default_factory=dict)
    lag_seen_at: float | None = None    # when `lag` was read (wall clock); None: never

    def roles(self) -> dict[str, str | None]:
        """topic -> the cluster active for it: its copy there is writable and the partner's is
        a replica of it (or not made yet, or not visible); None when the two copies say
        neither (fenced, both writable, both replicas: a failover half done)."""
        first, second = self.clusters[self.pair.first], self.clusters[self.pair.second]
        out: dict[str, str | None] = {}
        for topic in sorted(set(first.topics) | set(second.topics)):
            out[topic] = None
            for own, other in ((first, second), (second, first)):
                own_role = own.topics[topic][1] if topic in own.topics else None
                other_role = other.topics[topic][1] if topic in other.topics else None
                if own.reachable and own_role == "" and other_role in (None, own.name):
                    out[topic] = own.name
                elif not own.reachable and other_role == own.name:
                    out[topic] = own.name        # only the partner's replica speaks for it
        return out

    def active_for(self, cluster: str) -> list[str]:
        return [t for t, active in self.roles().items() if active == cluster]

    def unsettled(self) -> list[str]:
        return [t for t, active in self.roles().items() if active is None]

    def active(self) -> str | None:
        """The cluster active for every DR topic; None if there are none, if they are split
        between the clusters, or if any is half way through a failover."""
        actives = set(self.roles().values())
        return actives.pop() if len(actives) == 1 and None not in actives else None


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    # A failed blocking check stops a failover; an advisory one (configs that drifted apart)
    # only makes `dr status` say the pair is not ready.
    blocking: bool = True


@dataclass(frozen=True)
class Step:
    name: str
    summary: str


@dataclass(frozen=True)
class Plan:
    pair: DrPair
    kind: Literal["planned", "unplanned", "failback"]
    source: str            # the cluster failing over (active now); failback: the returning one
    target: str            # the cluster being promoted; failback: the active one, which stays
    epoch: int             # the DR epoch the failover takes
    checks: list[Check]
    steps: list[Step]
    rpo_records: int
    rpo_seconds: float
    rto_seconds: float
    topics: dict[str, int] = field(default_factory=dict)    # the DR topics it moves: partitions
    # A drill moves only its canary topic: its decision is kept under a key of its own (never
    # the pair's, which applications follow) and only its group's offsets move.
    decision_key: str = ""          # "": the pair's name
    groups: list[str] | None = None     # None: every group
    # An unplanned failover's expected RPO is the lag last seen: when (wall clock; None: never,
    # so the RPO is not known until failback counts the stranded records).
    rpo_seen_at: float | None = None

    @property
    def key(self) -> str:
        return self.decision_key or self.pair.name

    @property
    def ready(self) -> bool:
        """Nothing stops it (advisory checks may still have failed)."""
        return all(c.ok for c in self.checks if c.blocking)

    def failed_checks(self) -> list[Check]:
        return [c for c in self.checks if not c.ok and c.blocking]


def find_pair(pairs: list[DrPair], regions: list[str], region: str, to_region: str | None) -> DrPair:
    """The DR pair that `dr failover REGION [--to REGION]` names; PlanError otherwise."""
    for name, what in ((region, "REGION"), (to_region, "--to")):
        if name is not None and name not in regions:
            raise PlanError(f"{what}: no region named {name!r} (regions: {', '.join(regions)})")
    candidates = [p for p in pairs if p.cluster_in(region) is not None]
    if not candidates:
        raise PlanError(f"REGION: {region} is in no DR pair (a mirror link with policy identity)")
    if to_region is not None:
        candidates = [p for p in candidates if p.cluster_in(to_region) is not None and to_region != region]
        if not candidates:
            raise PlanError(f"--to: no DR pair joins {region} and {to_region}")
    if len(candidates) > 1:
        raise PlanError(f"REGION: {region} is in {len(candidates)} DR pairs; name the other region with --to")
    return candidates[0]


def plan_failover(view: PairView, region: str, *, force: bool = False, only: set[str] | None = None,
                  decision_key: str = "", groups: list[str] | None = None, now: float | None = None) -> Plan:
    """The plan for failing `region`'s cluster of the pair over to its partner (`only`: just
    these DR topics, as a drill does). PlanError if there is nothing to fail over; a Plan whose
    checks say why it cannot run yet otherwise. `now`: the wall clock the checkpoints' ages
    are measured against (default: now)."""
    pair = view.pair
    source = pair.cluster_in(region)
    if source is None:
        raise PlanError(f"REGION: {region} is not in DR pair {pair.name}")
    if only is not None:
        view = PairView(pair, {name: ClusterView(c.name, c.reachable, c.epoch,
                                                 {t: v for t, v in c.topics.items() if t in only}, c.error,
                                                 {t: v for t, v in c.configs.items() if t in only})
                               for name, c in view.clusters.items()},
                        {tp: lag for tp, lag in view.lag.items() if tp[0] in only}, view.lag_known, view.groups,
                        view.lag_seen_at)
    target = pair.partner(source)
    src, tgt = view.clusters[source], view.clusters[target]
    moving = view.active_for(source)
    if not moving and view.active_for(target) and not view.unsettled():
        raise PlanError(f"REGION: {pair.region_of(target)} is already the active region of "
                        f"{pair.name}: nothing to fail over")
    checks = [Check("target-reachable", tgt.reachable,
                    f"{target} answers" if tgt.reachable else f"{target} does not answer: {tgt.error}")]
    planned = src.reachable
    if not planned:
        checks.append(Check("force", force, f"{source} does not answer ({src.error}): an unplanned "
                            f"failover loses what was not copied" + ("" if force else "; add --force")))
    checks.append(_roles_check(view, source, moving))
    if tgt.reachable:
        checks.append(_topics_check(src, tgt, moving) if planned else _replicas_check(source, tgt, moving))
        if planned:
            checks.append(_configs_check(src, tgt, moving))
            if src.access is not None and tgt.access is not None:
                checks.append(_access_check(src, tgt, moving))
            if source in view.groups:
                checks.append(groups_check(view.groups[source], set(moving), groups,
                                           now=time.time() if now is None else now))
    epoch = max(c.epoch for c in view.clusters.values() if c.reachable) + 1 if any(
        c.reachable for c in view.clusters.values()) else 1
    lagging = sum(v.records for v in view.lag.values())
    oldest = max((v.seconds for v in view.lag.values()), default=0.0)
    topics = count(len(moving), "DR topic")
    if planned:
        steps = [
            Step("take-epoch", f"take DR epoch {epoch} on {source} and {target}"),
            Step("fence", f"make {source}'s {topics} {FENCED}: applications' writes stop"),
            Step("drain", f"wait until {target} has every record of them ({lagging} records behind now); "
                          f"a transaction left open on them past transactions_grace_s is aborted"),
            Step("record-syncs", f"record where {target}'s copies stand, for the link back"),
            Step("promote", f"make {target}'s {topics} writable"),
            Step("switch-clients", f"record {pair.region_of(target)} as active (switching) on both clusters "
                                   f"and in the state directory: producers move"),
            Step("sync-groups", f"once the groups have left {source}, commit their translated offsets into "
                                f"{target}, then record it as serving: consumers move"),
            Step("reverse", f"make {source}'s DR topics replicas of {target}: the link back starts"),
        ]
        rpo_records, rpo_seconds, rto = 0, 0.0, STEP_S * len(steps) + oldest
    else:
        steps = [
            Step("take-epoch", f"take DR epoch {epoch} on {target}"),
            Step("seal", f"make {target}'s replicas {FENCED}: the link's last writes land or are refused"),
            Step("record-syncs", f"abort what the link left open of source transactions it had not copied "
                                 f"whole; record where {target}'s copies stand, for failback"),
            Step("promote", f"make {target}'s {topics} writable"),
            Step("restore-groups", f"commit each group's last checkpoint on {target} into its idle group there "
                                   f"(only forward): consumers resume where the mirror last saw them"),
            Step("switch-clients", f"record {pair.region_of(target)} as active on {target} and in the state directory"),
        ]
        rpo_records, rpo_seconds, rto = lagging, oldest, STEP_S * len(steps)
    copies = src.topics if planned else tgt.topics
    moved = {t: copies[t][0] for t in moving if t in copies}
    return Plan(pair, "planned" if planned else "unplanned", source, target, epoch, checks, steps,
                rpo_records, rpo_seconds, rto, moved, decision_key, groups, view.lag_seen_at)


def returning_topics(view: PairView, returning: str) -> list[str]:
    """The DR topics left writable on both sides by an unplanned failover away from
    `returning` (or fenced on it by a failback that stopped): they need their stranded records
    found before the link can run back."""
    back, active = view.clusters[returning], view.clusters[view.pair.partner(returning)]
    return sorted(t for t in view.unsettled() if t in back.topics and t in active.topics
                  and back.topics[t][1] in ("", FENCED) and active.topics[t][1] == "")


def plan_failback(view: PairView, region: str, *, republish: bool,
                  promotion: dict[str, list[int]] | None) -> Plan | None:
    """The plan that settles the stranded records of `region`'s cluster after an unplanned
    failover away from it (`promotion`: where the promoted copies stood, per topic and
    partition, from that failover's record-syncs step). None when there is nothing to settle:
    the failback is then only the planned failover back. PlanError if there is nothing to
    fail back."""
    pair = view.pair
    returning = pair.cluster_in(region)
    if returning is None:
        raise PlanError(f"REGION: {region} is not in DR pair {pair.name}")
    active = pair.partner(returning)
    back, act = view.clusters[returning], view.clusters[active]
    topics = returning_topics(view, returning) if back.reachable and act.reachable else []
    if back.reachable and act.reachable and not topics:
        if view.active_for(returning) and not view.active_for(active) and not view.unsettled():
            raise PlanError(f"REGION: {region} is already the active region of {pair.name}: nothing to fail back")
        return None
    checks = [
        Check("returning-reachable", back.reachable,
              f"{returning} answers" if back.reachable else f"{returning} does not answer ({back.error}): "
                                                             f"failback needs it back"),
        Check("active-reachable", act.reachable,
              f"{active} answers" if act.reachable else f"{active} does not answer: {act.error}"),
    ]
    if back.reachable and act.reachable:
        others = sorted(set(view.unsettled()) - set(topics))
        checks.append(Check("roles", not others,
                            f"{count(len(topics), 'DR topic')} writable on both clusters" if not others else
                            f"{count(len(others), 'DR topic')} half way through a failover (dr status lists "
                            f"them): {', '.join(others[:5])}"))
        unknown = sorted(t for t in topics if promotion is None or t not in promotion
                         or len(promotion[t]) != back.topics[t][0])
        checks.append(Check("promotion", not unknown,
                            "the history has where every promoted copy stood" if not unknown else
                            f"the history has no promotion point for {', '.join(unknown[:5])}: run dr from the "
                            f"state directory of the unplanned failover away from {region}"))
    epoch = max((c.epoch for c in view.clusters.values() if c.reachable), default=0) + 1
    names = ", ".join(t + STRANDED_SUFFIX for t in topics[:3]) + (", ..." if len(topics) > 3 else "")
    stranded = f"{names} on {returning}" if not republish else \
        f"the active copies on {active}, each with the header seaway.stranded.origin"
    steps = [
        Step("take-epoch", f"take DR epoch {epoch} on {returning} and {active}"),
        Step("fence", f"make {returning}'s {count(len(topics), 'DR topic')} {FENCED}: writes that still reach it stop"),
        Step("find-stranded", f"count and list, per partition, the records {returning} acknowledged that "
                              f"never reached {active}"),
        Step("republish-stranded" if republish else "keep-stranded", f"copy them into {stranded}"),
        Step("seed-syncs", f"the link back starts where {active}'s copies stood at promotion"),
        Step("reverse", f"make {returning}'s DR topics replicas of {active}: the link back catches them up"),
    ]
    moved = {t: back.topics[t][0] for t in topics}
    return Plan(pair, "failback", returning, active, epoch, checks, steps, 0, 0.0, STEP_S * len(steps), moved)


def count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _roles_check(view: PairView, source: str, moving: list[str]) -> Check:
    unsettled = view.unsettled()
    if unsettled:
        both = [t for t in unsettled if all(t in c.topics and c.topics[t][1] == "" for c in view.clusters.values())]
        hint = "; writable on both clusters: after an unplanned failover, dr failback REGION brings the " \
               "region that came back in" if both else ""
        return Check("roles", False, f"{count(len(unsettled), 'DR topic')} half way through a failover "
                     f"(dr status lists them): {', '.join(unsettled[:5])}{hint}")
    if not moving:
        return Check("roles", False, f"{source} is active for no DR topic")
    return Check("roles", True, f"{source} is active for {count(len(moving), 'DR topic')}; "
                 f"their copies on its partner are replicas of it")


def _topics_check(src: ClusterView, tgt: ClusterView, moving: list[str]) -> Check:
    missing = sorted(t for t in moving if t not in tgt.topics)
    if missing:
        return Check("topics", False, f"{count(len(missing), 'DR topic')} without a copy on {tgt.name} yet: "
                     f"{', '.join(missing[:5])}")
    differ = sorted(t for t in moving if tgt.topics[t][0] != src.topics[t][0])
    if differ:
        return Check("topics", False, f"partition counts differ on {tgt.name}: {', '.join(differ[:5])}")
    return Check("topics", True, f"{count(len(moving), 'DR topic')} on both clusters, same partitions")


def _access_check(src: ClusterView, tgt: ClusterView, moving: list[str]) -> Check:
    """The applications could log in to the target and do there what they do here
    (dr/access.py). Advisory."""
    assert src.access is not None and tgt.access is not None
    try:
        gaps = access_gaps(src.access, tgt.access, moving)
    except ValueError as exc:
        return Check("access", False, f"cannot compare logins and ACLs: {exc}", blocking=False)
    if gaps:
        return Check("access", False, f"{tgt.name} lacks {len(gaps)} of {src.name}'s logins and ACLs: "
                     f"{'; '.join(gaps[:3])}" + ("; ..." if len(gaps) > 3 else ""), blocking=False)
    if not (src.access.acls or src.access.users):
        return Check("access", True, f"no ACLs or SCRAM users on {src.name} (security off)", blocking=False)
    return Check("access", True, f"{tgt.name} has {src.name}'s SCRAM users and the ACLs of what moves",
                 blocking=False)


def _configs_check(src: ClusterView, tgt: ClusterView, moving: list[str]) -> Check:
    """The copies' topic configs agree (the link copies them when it makes a replica, not
    after): a promoted copy with another retention or cleanup policy behaves differently."""
    drifted = []
    for topic in moving:
        ours, theirs = src.configs.get(topic, {}), tgt.configs.get(topic, {})
        differ = sorted(k for k in set(ours) | set(theirs) if ours.get(k) != theirs.get(k))
        if differ and topic in tgt.topics:
            drifted.append(f"{topic} ({', '.join(f'{k}: {ours.get(k)} here, {theirs.get(k)} there' for k in differ[:2])})")
    if drifted:
        return Check("configs", False, f"{count(len(drifted), 'DR topic')} configured differently on {tgt.name}: "
                     f"{'; '.join(drifted[:3])}", blocking=False)
    return Check("configs", True, f"topic configs agree on {src.name} and {tgt.name}", blocking=False)


def groups_check(seen: GroupsView, topics: set[str], groups: list[str] | None, *, now: float) -> Check:
    """Every group committed on the active cluster has an up-to-date checkpoint on the
    standby (dr/groups.py says precisely what that means). Advisory: a planned failover
    writes the groups' final offsets itself; an unplanned one is where it would have mattered."""
    if seen.error is not None:
        return Check("groups", False, f"the groups and checkpoints could not be read: {seen.error}", blocking=False)
    syncs = group_syncs(seen, now, topics=topics, groups=groups)
    if not syncs:
        return Check("groups", True, f"no group has committed offsets for the DR topics on {seen.active}",
                     blocking=False)
    if all(s.synced for s in syncs):
        return Check("groups", True, f"{count(len(syncs), 'group')} synced: {seen.standby}'s checkpoints follow "
                     f"their commits on {seen.active}", blocking=False)
    unsynced = sum(1 for s in syncs if not s.synced)
    return Check("groups", False, f"{unsynced} of {count(len(syncs), 'group')} not synced to {seen.standby} "
                 f"(an unplanned failover would resume them elsewhere): {describe(syncs)}", blocking=False)


def _replicas_check(source: str, tgt: ClusterView, moving: list[str]) -> Check:
    if not moving:
        return Check("topics", False, f"{tgt.name} has no replicas of {source} to promote")
    return Check("topics", True, f"{count(len(moving), 'replica')} of {source} on {tgt.name}")


def plan_to_dict(plan: Plan) -> dict:
    return asdict(plan)


def plan_from_dict(data: dict) -> Plan:
    """A plan kept in the history (plan_to_dict), to finish it."""
    return Plan(**{**data, "pair": DrPair(**data["pair"]),
                   "checks": [Check(**c) for c in data["checks"]],
                   "steps": [Step(**s) for s in data["steps"]]})
