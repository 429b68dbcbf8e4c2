"""Whether the standby would let the applications in: the `access` readiness check of a failover
(no I/O: dr/observe.py reads each cluster's ACL bindings and SCRAM users).

What must match
---------------
After a failover the applications log in to the promoted cluster as themselves and do there
what they did on the old one, so the promoted cluster needs their logins and their ACLs:

* SCRAM users: every user with credentials on the active cluster has credentials on the
  standby for the same mechanisms (the salted secrets differ by construction and cannot be
  read; iterations may differ; only presence per mechanism is compared);
* ACL bindings on what moves: topic bindings whose pattern selects a DR topic of the pair
  (a literal name of one, `*`, or a prefix of one), and every group and transactional-id
  binding (groups and producers move with their applications). Cluster bindings and those on
  topics no failover moves (the mirror's offset syncs and checkpoints, `__seaway_dr`) are
  each cluster's own, and differ by design.

Compared both ways: what the active cluster has and the standby lacks fails this failover;
what the standby has alone fails the failover back. Advisory (WARN), like drifted configs: it
makes `dr status` not ready, and `dr failover` still runs. On clusters without ACLs or SASL
both sides are empty and the check passes, saying so; a side whose ACLs or users cannot be
read (not authorized) is reported, not guessed.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from core.client.acl_admin import AclBinding, PatternType, ResourceType

MOVING_RESOURCES = (ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID)


@dataclass(frozen=True)
class Access:
    """One cluster's logins and ACLs, as read; None where they could not be read (and why)."""
    acls: frozenset[AclBinding] | None = None
    users: dict[str, frozenset[str]] | None = None      # user -> its SCRAM mechanisms
    error: str | None = None


def moves(binding: AclBinding, topics: Iterable[str]) -> bool:
    """Does this binding govern something a failover moves?"""
    if binding.resource_type in MOVING_RESOURCES:
        return True
    if binding.resource_type != ResourceType.TOPIC:
        return False
    if binding.pattern_type == PatternType.LITERAL:
        return binding.name == "*" or binding.name in topics
    if binding.pattern_type == PatternType.PREFIXED:
        return any(t.startswith(binding.name) for t in topics)
    return False


def describe_binding(b: AclBinding) -> str:
    pattern = "" if b.pattern_type == PatternType.LITERAL else f" ({b.pattern_type.name.lower()})"
    return (f"{b.principal} {b.permission.name} {b.operation.name} on {b.resource_type.name.lower()} "
            f"{b.name}{pattern}")


def access_gaps(active: Access, standby: Access, topics: Iterable[str]) -> list[str]:
    """What the standby lacks that the active cluster has, one phrase each, in a stable order
    ([] when nothing); raises ValueError when either side could not be read."""
    for side in (active, standby):
        if side.acls is None or side.users is None:
            raise ValueError(side.error or "not read")
    names = set(topics)
    gaps = []
    for user, mechanisms in sorted(active.users.items()):
        missing = mechanisms - standby.users.get(user, frozenset())
        if missing:
            gaps.append(f"user {user} has no {'/'.join(sorted(missing))} credentials")
    wanted = {b for b in active.acls if moves(b, names)}
    for b in sorted(wanted - standby.acls, key=describe_binding):
        gaps.append(f"no ACL {describe_binding(b)}")
    return gaps
