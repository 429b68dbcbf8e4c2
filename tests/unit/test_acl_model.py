"""The authorizer's decisions (core/security/acls.py) against a reference model written from
Kafka's documentation of StandardAuthorizer, over random ACL sets, and a table of the rules
with the examples an operator reads in Kafka's docs."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.security.acls import AclBinding, AclFilter, AclSet, PatternType, Permission
from core.security.authorizer import Operation, ResourceType

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
Op = Operation


def acl(name, op, permission=ALLOW, principal="User:alice", host="*", pattern=LIT, rtype=T):
    return AclBinding(rtype, name, pattern, principal, host, op, permission)


def reference(acls, super_users, allow_if_none, principal, host, op, rtype, name) -> bool:
    """Kafka's documented rules, applied by brute force over every ACL."""
    if principal in super_users:
        return True
    on_resource = [a for a in acls if a.resource_type == rtype and (
        (a.pattern == LIT and a.name in (name, "*")) or (a.pattern == PRE and name.startswith(a.name)))]
    if not on_resource:
        return allow_if_none
    mine = [a for a in on_resource if a.principal in (principal, "User:*") and a.host in (host, "*")]
    if any(a.permission == DENY and a.operation in (op, Op.ALL) for a in mine):
        return False
    implied = {Op.DESCRIBE: {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE},
               Op.DESCRIBE_CONFIGS: {Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS}}.get(op, {op})
    return any(a.permission == ALLOW and (a.operation == Op.ALL or a.operation in implied) for a in mine)


NAMES = ["a", "ab", "abc", "b", "ba", "*", ""]
PRINCIPALS = ["User:alice", "User:bob", "User:*"]
HOSTS = ["10.0.0.1", "10.0.0.2", "*"]
OPS = [Op.ALL, Op.READ, Op.WRITE, Op.CREATE, Op.DELETE, Op.ALTER, Op.DESCRIBE, Op.CLUSTER_ACTION,
       Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE]
bindings = st.builds(AclBinding, st.sampled_from([T, G, C]), st.sampled_from(NAMES), st.sampled_from([LIT, PRE]),
                     st.sampled_from(PRINCIPALS), st.sampled_from(HOSTS), st.sampled_from(OPS),
                     st.sampled_from([ALLOW, DENY]))


@settings(max_examples=3000, deadline=None)
@given(acls=st.lists(bindings, max_size=12), supers=st.sets(st.sampled_from(["User:alice", "User:bob"]), max_size=1),
       allow_if_none=st.booleans(), principal=st.sampled_from(["User:alice", "User:bob", "User:carol"]),
       host=st.sampled_from(["10.0.0.1", "10.0.0.2"]), op=st.sampled_from(OPS[1:]),
       rtype=st.sampled_from([T, G, C]), name=st.sampled_from(["a", "ab", "abc", "abd", "b", "ba", "c"]))
def test_the_authorizer_agrees_with_the_reference_model(acls, supers, allow_if_none, principal, host, op, rtype, name):
    got = AclSet.of(acls, super_users=supers, allow_if_no_acl=allow_if_none).authorize(principal, host, op, rtype, name)
    assert got == reference(acls, supers, allow_if_none, principal, host, op, rtype, name)


RULES = [
    # case, acls, (principal, host, op, type, name), allowed
    ("no ACL on the resource: denied by default", [acl("other", Op.READ)], ("User:alice", "1.1.1.1", Op.READ, T, "t"), False),
    ("literal allow", [acl("t", Op.READ)], ("User:alice", "1.1.1.1", Op.READ, T, "t"), True),
    ("literal is not a prefix", [acl("t", Op.READ)], ("User:alice", "1.1.1.1", Op.READ, T, "tt"), False),
    ("prefixed allow", [acl("orders-", Op.WRITE, pattern=PRE)], ("User:alice", "1.1.1.1", Op.WRITE, T, "orders-eu"), True),
    ("prefixed does not match a shorter name", [acl("orders-", Op.WRITE, pattern=PRE)],
     ("User:alice", "1.1.1.1", Op.WRITE, T, "orders"), False),
    ("wildcard resource", [acl("*", Op.READ)], ("User:alice", "1.1.1.1", Op.READ, T, "anything"), True),
    ("wildcard principal", [acl("t", Op.READ, principal="User:*")], ("User:zoe", "1.1.1.1", Op.READ, T, "t"), True),
    ("other principal: denied, the resource has ACLs", [acl("t", Op.READ)], ("User:bob", "1.1.1.1", Op.READ, T, "t"), False),
    ("host must match", [acl("t", Op.READ, host="2.2.2.2")], ("User:alice", "1.1.1.1", Op.READ, T, "t"), False),
    ("deny wins over allow", [acl("t", Op.READ), acl("t", Op.READ, DENY)], ("User:alice", "1.1.1.1", Op.READ, T, "t"), False),
    ("deny through a prefix wins over a literal allow", [acl("t", Op.ALL), acl("", Op.ALL, DENY, pattern=PRE)],
     ("User:alice", "1.1.1.1", Op.WRITE, T, "t"), False),
    ("deny ALL denies everything", [acl("t", Op.DESCRIBE), acl("t", Op.ALL, DENY)], ("User:alice", "1.1.1.1", Op.DESCRIBE, T, "t"), False),
    ("read implies describe", [acl("t", Op.READ)], ("User:alice", "1.1.1.1", Op.DESCRIBE, T, "t"), True),
    ("describe does not imply read", [acl("t", Op.DESCRIBE)], ("User:alice", "1.1.1.1", Op.READ, T, "t"), False),
    ("alter_configs implies describe_configs", [acl("t", Op.ALTER_CONFIGS)],
     ("User:alice", "1.1.1.1", Op.DESCRIBE_CONFIGS, T, "t"), True),
    ("a deny of READ does not deny DESCRIBE", [acl("t", Op.DESCRIBE), acl("t", Op.READ, DENY)],
     ("User:alice", "1.1.1.1", Op.DESCRIBE, T, "t"), True),
    ("types do not mix", [acl("t", Op.READ, rtype=G)], ("User:alice", "1.1.1.1", Op.READ, T, "t"), False),
    ("cluster action", [acl("kafka-cluster", Op.CLUSTER_ACTION, rtype=C)],
     ("User:alice", "1.1.1.1", Op.CLUSTER_ACTION, C, "kafka-cluster"), True),
]


@pytest.mark.parametrize("case,acls,request_,allowed", RULES, ids=[r[0] for r in RULES])
def test_kafkas_rules(case, acls, request_, allowed):
    assert AclSet.of(acls).authorize(*request_) is allowed
    assert reference(acls, set(), False, *request_) is allowed


def test_super_users_and_allow_everyone_if_no_acl_found():
    acls = [acl("t", Op.READ, DENY, principal="User:root")]
    assert AclSet.of(acls, super_users=["User:root"]).authorize("User:root", "h", Op.READ, T, "t")
    assert not AclSet.of([], allow_if_no_acl=False).authorize("User:x", "h", Op.READ, T, "free")
    assert AclSet.of([], allow_if_no_acl=True).authorize("User:x", "h", Op.READ, T, "free")
    # allow.everyone.if.no.acl.found only applies where no ACL matches the resource at all.
    assert not AclSet.of([acl("t", Op.WRITE)], allow_if_no_acl=True).authorize("User:bob", "h", Op.READ, T, "t")


# --- filters (DescribeAcls, DeleteAcls) ---------------------------------------------------------


FILTER_BINDINGS = [acl("orders", Op.READ), acl("orders-", Op.WRITE, pattern=PRE), acl("*", Op.DESCRIBE),
                   acl("orders", Op.READ, DENY, principal="User:bob", host="10.0.0.1"), acl("g", Op.READ, rtype=G)]


def selected(resource_type=1, name=None, pattern=1, principal=None, host=None, operation=1, permission=1):
    f = AclFilter(resource_type, name, pattern, principal, host, operation, permission)
    return [i for i, b in enumerate(FILTER_BINDINGS) if f.matches(b)]


@pytest.mark.parametrize("kwargs,expected", [
    ({}, [0, 1, 2, 3, 4]),                                             # everything
    ({"resource_type": int(T)}, [0, 1, 2, 3]),
    ({"name": "orders", "pattern": int(LIT)}, [0, 3]),                 # exact literal
    ({"name": "orders-", "pattern": int(PRE)}, [1]),                   # exact prefixed
    ({"name": "orders", "pattern": 1}, [0, 3]),                        # ANY: this name, any type
    ({"name": "orders-eu", "pattern": 2, "resource_type": int(T)}, [1, 2]),   # MATCH: what applies
    ({"name": "orders", "pattern": 2, "resource_type": int(T)}, [0, 2, 3]),
    ({"principal": "User:bob"}, [3]),
    ({"host": "10.0.0.1"}, [3]),
    ({"operation": int(Op.WRITE)}, [1]),
    ({"permission": int(DENY)}, [3]),
])
def test_filters_select_as_kafkas_binding_filters_do(kwargs, expected):
    assert selected(**kwargs) == expected


# KIP-679's "may WRITE some topic" (Kafka's Authorizer.authorizeByResourceType), by example.
BY_TYPE_CASES = [
    ("no ACLs", [], False, False),
    ("no ACLs, allow.everyone.if.no.acl.found", [], True, True),
    ("a literal ALLOW", [acl("t", Op.WRITE)], False, True),
    ("ALL implies it", [acl("t", Op.ALL)], False, True),
    ("READ does not", [acl("t", Op.READ)], False, False),
    ("the same literal denied", [acl("t", Op.WRITE), acl("t", Op.WRITE, DENY)], False, False),
    ("a prefix denies the literal", [acl("tx", Op.WRITE), acl("t", Op.WRITE, DENY, pattern=PRE)], False, False),
    ("a longer prefix does not deny", [acl("t", Op.WRITE, pattern=PRE), acl("tx", Op.WRITE, DENY, pattern=PRE)],
     False, True),
    ("a wildcard DENY wins", [acl("t", Op.WRITE), acl("*", Op.WRITE, DENY)], False, False),
    ("a wildcard ALLOW", [acl("*", Op.WRITE)], False, True),
    ("another principal's ALLOW", [acl("t", Op.WRITE, principal="User:bob")], False, False),
    ("User:* counts", [acl("t", Op.WRITE, principal="User:*")], False, True),
    ("another host's ALLOW", [acl("t", Op.WRITE, host="10.0.0.9")], False, False),
    ("a group ACL is another type", [acl("t", Op.WRITE, rtype=G)], False, False),
]


@pytest.mark.parametrize("case,acls,allow_if_none,expected", BY_TYPE_CASES, ids=[c[0] for c in BY_TYPE_CASES])
def test_authorize_by_resource_type_follows_kafka(case, acls, allow_if_none, expected):
    s = AclSet.of(acls, allow_if_no_acl=allow_if_none)
    assert s.authorize_by_resource_type("User:alice", "10.0.0.1", Op.WRITE, T) is expected
    assert AclSet.of(acls, super_users={"User:alice"}).authorize_by_resource_type("User:alice", "10.0.0.1",
                                                                                  Op.WRITE, T)
