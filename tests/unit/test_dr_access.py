"""dr/access.py: what the standby must have for the applications to log in and do there what
they did on the active cluster (no I/O), and the advisory `access` check it feeds."""
from __future__ import annotations

import pytest

from core.client.acl_admin import AclBinding, AclOperation, AclPermission, PatternType, ResourceType
from dr.access import Access, access_gaps, moves

T, G, C, X = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
TOPICS = ["orders", "payments"]


def acl(kind, name, pattern=LIT, principal="User:alice", op=AclOperation.READ, perm=AclPermission.ALLOW):
    return AclBinding(kind, name, pattern, principal, "*", op, perm)


@pytest.mark.parametrize("binding, moving", [
    (acl(T, "orders"), True),                       # a DR topic by name
    (acl(T, "*"), True),                            # every topic
    (acl(T, "ord", PRE), True),                     # a prefix of a DR topic
    (acl(T, "audit", PRE), False),                  # a prefix of none
    (acl(T, "mm2-offset-syncs.us-1.internal"), False),  # the link's own: each cluster's
    (acl(T, "eu-1.checkpoints.internal"), False),
    (acl(G, "billing"), True),                      # groups move with their applications
    (acl(X, "orders-writer", PRE), True),           # so do transactional producers
    (acl(C, "kafka-cluster", op=AclOperation.DESCRIBE), False),
])
def test_which_bindings_move_with_a_failover(binding, moving):
    assert moves(binding, TOPICS) is moving


BOTH = {"admin": frozenset({"SCRAM_SHA_512"}), "alice": frozenset({"SCRAM_SHA_512", "SCRAM_SHA_256"})}


@pytest.mark.parametrize("active, standby, gaps", [
    # Security off: nothing on either side.
    (Access(frozenset(), {}), Access(frozenset(), {}), []),
    # The same users and the ACLs of what moves; the link's own ACLs differ by name: fine.
    (Access(frozenset({acl(T, "orders"), acl(T, "mm2-offset-syncs.us-1.internal")}), BOTH),
     Access(frozenset({acl(T, "orders"), acl(T, "mm2-offset-syncs.eu-1.internal")}), BOTH), []),
    # A user missing one mechanism, and a binding missing (the standby's extra ones do not
    # count this way round: they are the failback's).
    (Access(frozenset({acl(T, "orders"), acl(G, "billing")}), BOTH),
     Access(frozenset({acl(T, "orders"), acl(T, "payments", principal="User:bob")}),
            {"admin": frozenset({"SCRAM_SHA_512"}), "alice": frozenset({"SCRAM_SHA_512"})}),
     ["user alice has no SCRAM_SHA_256 credentials", "no ACL User:alice ALLOW READ on group billing"]),
    # A prefixed binding, and a DENY, are compared as they are.
    (Access(frozenset({acl(T, "pay", PRE, perm=AclPermission.DENY)}), {}), Access(frozenset(), {}),
     ["no ACL User:alice DENY READ on topic pay (prefixed)"]),
])
def test_what_the_standby_lacks(active, standby, gaps):
    assert access_gaps(active, standby, TOPICS) == gaps


def test_a_side_that_cannot_be_read_is_not_guessed():
    with pytest.raises(ValueError, match="not authorized"):
        access_gaps(Access(frozenset(), {}), Access(error="not authorized"), TOPICS)
