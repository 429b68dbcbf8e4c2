"""ACLs and the decision Kafka's StandardAuthorizer makes from them, as a pure function.

Theory of operation
-------------------
An ACL binds a resource pattern to an access control entry:

    (resource type, name, pattern type)   (principal, host, operation, permission)
    (TOPIC, "orders-", PREFIXED)          ("User:alice", "*", WRITE, ALLOW)

A request by `principal` from `host` to do `operation` on the resource (type, name) is judged
by the ACLs that *match the resource*: of its type, and LITERAL with exactly that name, LITERAL
with the wildcard name "*", or PREFIXED with a prefix of the name. Then, in this order:

1. a super user (`super.users`) may do anything;
2. a matching DENY whose principal is the requester or `User:*`, whose host is the requester's
   or `*`, and whose operation is the one asked or ALL, denies;
3. a matching ALLOW (same principal and host rules) allows when its operation is the one
   asked, or ALL, or implies it: READ, WRITE, DELETE and ALTER imply DESCRIBE, and
   ALTER_CONFIGS implies DESCRIBE_CONFIGS (implication never applies to DENY);
4. when no ACL matches the resource at all, `allow.everyone.if.no.acl.found` decides (false by
   default);
5. otherwise the request is denied.

Worked example: with `(TOPIC, "orders-", PREFIXED, User:*, *, DESCRIBE, ALLOW)` and
`(TOPIC, "orders-eu", LITERAL, User:bob, *, ALL, DENY)`, User:alice may describe
"orders-eu" (rule 3), bob may not (rule 2), nobody may read "orders-eu" (rule 5: ACLs match
the resource, none allows READ), and anyone may read "payments" only if
allow.everyone.if.no.acl.found is true (rule 4).

`AclSet` indexes the bindings so a decision costs a few dict lookups plus one per prefix of
the name actually in use, however many ACLs there are (10,000 in the benchmark). The
reference model in tests/unit/test_acl_model.py is written from Kafka's documentation, loops
over every ACL, and must agree on every case the property test draws.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Iterable

from .authorizer import Operation, ResourceType

WILDCARD_RESOURCE = "*"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"


class PatternType(enum.IntEnum):
    # Kafka's PatternType codes (ANY and MATCH exist only in filters)
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Permission(enum.IntEnum):
    ANY = 1
    DENY = 2
    ALLOW = 3


# Kafka's AclOperation: ALLOW on any of these implies DESCRIBE (or DESCRIBE_CONFIGS).
_IMPLYING = {
    Operation.DESCRIBE: frozenset({Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER,
                                   Operation.DESCRIBE}),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.ALTER_CONFIGS, Operation.DESCRIBE_CONFIGS}),
}


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: ResourceType
    name: str
    pattern: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def applies_to(self, principal: str, host: str) -> bool:
        return (self.principal in (principal, WILDCARD_PRINCIPAL)
                and self.host in (host, WILDCARD_HOST))


def allows(binding: AclBinding, operation: Operation) -> bool:
    """Does this ALLOW binding grant `operation` (directly, through ALL, or by implication)?"""
    return (binding.operation in (operation, Operation.ALL)
            or binding.operation in _IMPLYING.get(operation, ()))


def denies(binding: AclBinding, operation: Operation) -> bool:
    return binding.operation in (operation, Operation.ALL)


@dataclass
class AclSet:
    """The ACLs of one metadata image, indexed for decisions."""
    bindings: tuple[AclBinding, ...] = ()
    super_users: frozenset[str] = frozenset()
    allow_if_no_acl: bool = False
    _literal: dict[tuple[ResourceType, str], list[AclBinding]] = field(init=False, default_factory=dict)
    _prefixed: dict[tuple[ResourceType, str], list[AclBinding]] = field(init=False, default_factory=dict)
    _prefix_lengths: dict[ResourceType, list[int]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        lengths: dict[ResourceType, set[int]] = {}
        for b in self.bindings:
            if b.pattern is PatternType.PREFIXED:
                self._prefixed.setdefault((b.resource_type, b.name), []).append(b)
                lengths.setdefault(b.resource_type, set()).add(len(b.name))
            else:
                self._literal.setdefault((b.resource_type, b.name), []).append(b)
        self._prefix_lengths = {t: sorted(ls) for t, ls in lengths.items()}

    @classmethod
    def of(cls, bindings: Iterable[AclBinding], *, super_users: Iterable[str] = (),
           allow_if_no_acl: bool = False) -> "AclSet":
        return cls(tuple(bindings), frozenset(super_users), allow_if_no_acl)

    def matching(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        """Every ACL that matches the resource (any principal, host, operation)."""
        found = list(self._literal.get((resource_type, name), ()))
        if name != WILDCARD_RESOURCE:
            found += self._literal.get((resource_type, WILDCARD_RESOURCE), ())
        for length in self._prefix_lengths.get(resource_type, ()):
            if length > len(name):
                break
            found += self._prefixed.get((resource_type, name[:length]), ())
        return found

    def authorize(self, principal: str, host: str, operation: Operation, resource_type: ResourceType,
                  name: str) -> bool:
        if principal in self.super_users:
            return True
        acls = self.matching(resource_type, name)
        if not acls:
            return self.allow_if_no_acl
        allowed = False
        for b in acls:
            if not b.applies_to(principal, host):
                continue
            if b.permission is Permission.DENY:
                if denies(b, operation):
                    return False
            elif not allowed and allows(b, operation):
                allowed = True
        return allowed


    def authorize_by_resource_type(self, principal: str, host: str, operation: Operation,
                                   resource_type: ResourceType) -> bool:
        """May the principal do `operation` on some resource of this type (KIP-679: WRITE on
        any topic lets a producer be idempotent)? Kafka's rule: a super user (or a principal
        allowed on an arbitrary name) may; a wildcard DENY forbids; else some ALLOW, literal
        or prefixed, that no DENY on the same literal name or on a prefix of it covers."""
        if self.authorize(principal, host, operation, resource_type, "hardcode"):
            return True
        denied_literal: set[str] = set()
        denied_prefixes: set[str] = set()
        allowed: list[AclBinding] = []
        for b in self.bindings:
            if b.resource_type != resource_type or not b.applies_to(principal, host) \
                    or b.operation not in (operation, Operation.ALL):
                continue
            if b.permission is Permission.DENY:
                if b.pattern is PatternType.LITERAL and b.name == WILDCARD_RESOURCE:
                    return False
                (denied_prefixes if b.pattern is PatternType.PREFIXED else denied_literal).add(b.name)
            elif b.pattern is PatternType.LITERAL and b.name == WILDCARD_RESOURCE:
                return True
            else:
                allowed.append(b)
        for b in allowed:
            if b.pattern is PatternType.LITERAL and b.name in denied_literal:
                continue
            if not any(b.name[:i] in denied_prefixes for i in range(1, len(b.name) + 1)):
                return True
        return False


# ------------------------------------------------------------------------------- filters

RESOURCE_TYPE_ANY = 1
OPERATION_ANY = 1


@dataclass(frozen=True, slots=True)
class AclFilter:
    """What DescribeAcls and DeleteAcls select (Kafka's AclBindingFilter). None matches any
    name, principal or host; ANY (1) matches any resource type, operation or permission. The
    pattern type selects as Kafka's does: ANY any binding with this exact name (or any name),
    LITERAL and PREFIXED bindings of that type with exactly this name, and MATCH every
    binding that would apply to a resource with this name (a literal of the name, the
    literal wildcard "*", and prefixes of the name)."""
    resource_type: int
    name: str | None
    pattern: int
    principal: str | None
    host: str | None
    operation: int
    permission: int

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != RESOURCE_TYPE_ANY and self.resource_type != b.resource_type:
            return False
        if self.principal is not None and self.principal != b.principal:
            return False
        if self.host is not None and self.host != b.host:
            return False
        if self.operation != OPERATION_ANY and self.operation != b.operation:
            return False
        if self.permission != Permission.ANY and self.permission != b.permission:
            return False
        return self._pattern_matches(b)

    def _pattern_matches(self, b: AclBinding) -> bool:
        if self.pattern == PatternType.MATCH:
            if self.name is None:
                return True
            if b.pattern is PatternType.LITERAL:
                return b.name in (self.name, WILDCARD_RESOURCE)
            return self.name.startswith(b.name)
        if self.pattern == PatternType.ANY:
            return self.name is None or self.name == b.name
        return self.pattern == b.pattern and (self.name is None or self.name == b.name)
