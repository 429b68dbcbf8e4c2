"""Partition assignors of the classic consumer group protocol, by their Kafka names.

The group leader runs the assignor the coordinator picked (JoinGroup's protocol name) over
every member's subscription. The names are Kafka's ("range", "roundrobin",
"cooperative-sticky") and the results match what the Java client computes for the same input,
so a group can mix our consumers with Java, librdkafka and kafka-python ones.

Assignors are pure functions of their input: `assign(partitions_per_topic, members)` with
`partitions_per_topic` = {topic: partition count} for the topics that exist, and `members` =
{member id: Member}. They return {member id: {topic: [partitions]}} with an entry for every
member (possibly empty).

Member order. Java sorts members for range and roundrobin by group.instance.id when both
have one, static members before dynamic ones, then by member id. Static members keep their
instance id across restarts while their member id changes, so this order keeps their
partitions in place.

cooperative-sticky (KIP-429). Members report the partitions they own (subscription v1+) and
the generation they owned them in (v2+, or in user data for v0/v1 as Java's
CooperativeStickyAssignor writes it). The assignor keeps valid ownership, hands out what is
free to the least loaded members, then moves partitions from the most to the least loaded
until every member is within one partition of the others it could share with. A partition
that ends up with a member other than one that claims it is withheld this generation: its
owner sees it missing from its assignment, revokes it and rejoins, and the next generation
gives it to its new member. So no partition ever has two owners at once.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Iterable

from core.protocol.consumer_protocol import Subscription

__all__ = ["Member", "Assignor", "RangeAssignor", "RoundRobinAssignor", "CooperativeStickyAssignor",
           "ASSIGNORS", "EAGER", "COOPERATIVE", "get_assignor", "rebalance_protocol"]

EAGER, COOPERATIVE = "eager", "cooperative"
Assignment = dict[str, dict[str, list[int]]]
TopicPartition = tuple[str, int]


@dataclass
class Member:
    member_id: str
    topics: list[str]
    group_instance_id: str | None = None
    owned: dict[str, list[int]] = field(default_factory=dict)
    generation: int = -1
    rack_id: str | None = None

    @classmethod
    def from_subscription(cls, member_id: str, group_instance_id: str | None,
                          sub: Subscription) -> "Member":
        generation = sub.generation_id
        if generation < 0 and sub.user_data is not None and len(sub.user_data) == 4:
            # v0/v1 subscriptions from Java's CooperativeStickyAssignor carry it here
            (generation,) = struct.unpack(">i", sub.user_data)
        return cls(member_id, list(sub.topics), group_instance_id,
                   {t: list(ps) for t, ps in sub.owned_partitions.items()}, generation, sub.rack_id)


def _member_key(m: Member):
    # Java's MemberInfo.compareTo: static members first, by instance id; then by member id.
    if m.group_instance_id is not None:
        return (0, m.group_instance_id, m.member_id)
    return (1, m.member_id, "")


class Assignor:
    name = ""
    protocols: tuple[str, ...] = (EAGER,)

    def user_data(self, generation: int) -> bytes | None:
        """The subscription's user data this assignor wants members to send."""
        return None

    def assign(self, partitions_per_topic: dict[str, int], members: dict[str, Member]) -> Assignment:
        raise NotImplementedError


class RangeAssignor(Assignor):
    """Per topic, the subscribed members in order each take a contiguous range; the first
    `partitions % members` take one more (Java's RangeAssignor)."""
    name = "range"

    def assign(self, partitions_per_topic, members):
        out: Assignment = {mid: {} for mid in members}
        ordered = sorted(members.values(), key=_member_key)
        for topic in sorted(partitions_per_topic):
            count = partitions_per_topic[topic]
            subscribed = [m for m in ordered if topic in m.topics]
            if not subscribed or count <= 0:
                continue
            per, extra = divmod(count, len(subscribed))
            for i, m in enumerate(subscribed):
                start = per * i + min(i, extra)
                length = per + (1 if i < extra else 0)
                if length:
                    out[m.member_id][topic] = list(range(start, start + length))
        return out


class RoundRobinAssignor(Assignor):
    """Every partition of every subscribed topic (topics in name order) goes to the next member
    in a circle that subscribes to its topic (Java's RoundRobinAssignor)."""
    name = "roundrobin"

    def assign(self, partitions_per_topic, members):
        out: Assignment = {mid: {} for mid in members}
        ordered = sorted(members.values(), key=_member_key)
        if not ordered:
            return out
        topics = sorted({t for m in ordered for t in m.topics if t in partitions_per_topic})
        i = 0
        for topic in topics:
            for p in range(partitions_per_topic[topic]):
                for _ in range(len(ordered)):
                    m = ordered[i % len(ordered)]
                    i += 1
                    if topic in m.topics:
                        out[m.member_id].setdefault(topic, []).append(p)
                        break
        return out


class CooperativeStickyAssignor(Assignor):
    name = "cooperative-sticky"
    protocols = (EAGER, COOPERATIVE)

    def user_data(self, generation: int) -> bytes | None:
        # Java writes the generation here too, for leaders that read v0/v1 subscriptions
        return struct.pack(">i", generation)

    def assign(self, partitions_per_topic, members):
        ids = sorted(members)
        eligible = {mid: {t for t in members[mid].topics if partitions_per_topic.get(t, 0) > 0}
                    for mid in ids}
        owned = _valid_ownership(partitions_per_topic, members, eligible)
        plan: dict[str, list[TopicPartition]] = {mid: sorted(owned[mid]) for mid in ids}
        taken = {tp for tps in plan.values() for tp in tps}
        kept = {tp: mid for mid, tps in plan.items() for tp in tps}
        # Hand out free partitions one by one to the least loaded member that can take them.
        for topic in sorted({t for e in eligible.values() for t in e}):
            for p in range(partitions_per_topic[topic]):
                if (topic, p) in taken:
                    continue
                takers = [mid for mid in ids if topic in eligible[mid]]
                best = min(takers, key=lambda mid: (len(plan[mid]), mid))
                plan[best].append((topic, p))
        _balance(plan, eligible, kept, ids)
        # Partitions that change hands are withheld until their claimants have revoked them.
        claims: dict[TopicPartition, set[str]] = {}
        for mid, m in members.items():
            for t, ps in m.owned.items():
                for p in ps:
                    claims.setdefault((t, p), set()).add(mid)
        out: Assignment = {mid: {} for mid in ids}
        for mid in ids:
            for t, p in sorted(plan[mid]):
                if claims.get((t, p), {mid}) - {mid}:
                    continue
                out[mid].setdefault(t, []).append(p)
        return out


def _valid_ownership(partitions_per_topic, members, eligible) -> dict[str, set[TopicPartition]]:
    """Claims a member may keep: the partition exists, the member still subscribes to its
    topic, the claim is from the newest generation any member reports, and no other member
    of that generation claims it too (then neither keeps it, as in Java)."""
    newest = max((m.generation for m in members.values()), default=-1)
    owners: dict[TopicPartition, list[str]] = {}
    for mid, m in members.items():
        if m.generation != newest:
            continue
        for t, ps in m.owned.items():
            if t not in eligible[mid]:
                continue
            for p in ps:
                if 0 <= p < partitions_per_topic[t]:
                    owners.setdefault((t, p), []).append(mid)
    out: dict[str, set[TopicPartition]] = {mid: set() for mid in members}
    for tp, mids in owners.items():
        if len(mids) == 1:
            out[mids[0]].add(tp)
    return out


def _balance(plan: dict[str, list[TopicPartition]], eligible: dict[str, set[str]],
             kept: dict[TopicPartition, str], ids: list[str]) -> None:
    """Move partitions from the most to the least loaded member that can take them until no
    move makes two members' counts closer. Each move lowers the sum of squared counts, so this
    ends; with equal subscriptions it ends with counts within one of each other, after the
    fewest moves. Partitions a member did not already own move first (no revocation)."""
    while True:
        by_load = sorted(ids, key=lambda mid: (-len(plan[mid]), mid))
        moved = False
        for giver in by_load:
            held = {t for t, _ in plan[giver]}
            for taker in reversed(by_load):
                if len(plan[taker]) + 1 >= len(plan[giver]):
                    break
                if held.isdisjoint(eligible[taker]):
                    continue
                movable = [tp for tp in plan[giver] if tp[0] in eligible[taker]]
                # fresh partitions first, then the highest partitions of the giver
                tp = max(movable, key=lambda tp: (kept.get(tp) != giver, tp))
                plan[giver].remove(tp)
                plan[taker].append(tp)
                moved = True
                break
            if moved:
                break
        if not moved:
            return


ASSIGNORS: dict[str, type[Assignor]] = {
    a.name: a for a in (RangeAssignor, RoundRobinAssignor, CooperativeStickyAssignor)}


def get_assignor(name_or_assignor: str | Assignor) -> Assignor:
    if isinstance(name_or_assignor, Assignor):
        return name_or_assignor
    try:
        return ASSIGNORS[name_or_assignor]()
    except KeyError:
        raise ValueError(f"unknown assignor {name_or_assignor!r}; known: {sorted(ASSIGNORS)}") from None


def rebalance_protocol(assignors: Iterable[Assignor]) -> str:
    """Java's rule: the most advanced protocol every configured assignor supports. With the
    default ["range", "cooperative-sticky"] that is eager, as in Java 3.x."""
    common = set.intersection(*(set(a.protocols) for a in assignors))
    if not common:
        raise ValueError("the assignors share no rebalance protocol")
    return COOPERATIVE if COOPERATIVE in common else EAGER
