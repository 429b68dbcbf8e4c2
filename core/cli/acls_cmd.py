"""`seaway acls`: add, list and remove ACLs, as Kafka's kafka-acls does (with Kafka's option
names; the action is a subcommand, as elsewhere in `seaway`).

    seaway acls add --allow-principal User:alice --operation Read --topic orders
    seaway acls add --allow-principal User:alice --producer --topic orders- --resource-pattern-type prefixed
    seaway acls add --allow-principal User:bob --consumer --topic orders --group billing
    seaway acls list [--topic orders] [--principal User:alice] [--resource-pattern-type match]
    seaway acls remove --allow-principal User:alice --producer --topic orders- --resource-pattern-type prefixed

Each of --topic, --group and --transactional-id may be repeated, and --cluster names the
cluster; each resource gets one ACL per principal, host and operation: --allow-principal with
--allow-host (default "*") as ALLOW, --deny-principal with --deny-host as DENY, and --operation
(repeatable, Kafka's names in any case: All, Read, Write, Create, Delete, Alter, Describe,
ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite; default All). An operation a
resource type does not have (Read on the cluster) is refused, as kafka-acls refuses it.

--producer and --consumer choose the operations, as kafka-acls does: a producer gets Write,
Describe and Create on its topics, Write and Describe on its --transactional-id, and with
--idempotent IdempotentWrite on the cluster; a consumer Read and Describe on its topics and Read
on its --group (which it needs).

--resource-pattern-type is literal (default) or prefixed for add and remove; list takes also
any (its default: every pattern type, the name exactly) and match (every ACL that applies to a
resource of that name: its literal ACLs, the wildcard "*" and the prefixes of the name). remove
deletes the ACLs that match exactly what the flags describe and prints them; without a principal
it would delete every principal's ACLs on the resources, and asks for --force to do that.
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from .common import UsageError, admin_command
from .output import add_bootstrap_flag, emit_json, table

if TYPE_CHECKING:    # the client is imported when a command runs, so that `seaway --help` stays fast
    from core.client.acl_admin import AclBinding, AclBindingFilter, AclPermission

OPERATION_NAMES = ("All", "Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction",
                   "DescribeConfigs", "AlterConfigs", "IdempotentWrite")
SPECIFIC_PATTERNS = ("literal", "prefixed")
FILTER_PATTERNS = ("literal", "prefixed", "any", "match")
HEADERS = ["RESOURCE TYPE", "NAME", "PATTERN", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"]
_RESOURCE_FLAGS = {"TOPIC": ("--topic", "a topic"), "GROUP": ("--group", "a group"),
                   "CLUSTER": ("--cluster", "the cluster"), "TRANSACTIONAL_ID": ("--transactional-id",
                                                                                 "a transactional id")}


def register(sub) -> None:
    p = sub.add_parser("acls", help="ACLs (add, list, remove)",
                       description="Add, list and remove ACL bindings (like kafka-acls).")
    add_bootstrap_flag(p, cluster_flag=False)   # --cluster is the resource here, as in kafka-acls
    asub = p.add_subparsers(dest="action", metavar="ACTION")
    asub.required = True

    a = asub.add_parser("add", help="add ACLs", description="Add ACLs: one per resource, principal, host "
                                                            "and operation.")
    _resource_flags(a, SPECIFIC_PATTERNS, "literal")
    _entry_flags(a)
    admin_command(a, _add, _prepare_add, cluster_flag=False)

    ls = asub.add_parser("list", help="list ACLs", description="List ACLs, of some resources or principals.")
    _resource_flags(ls, FILTER_PATTERNS, "any")
    ls.add_argument("--principal", action="append", default=[], metavar="TYPE:NAME",
                    help="only this principal's ACLs (repeatable)")
    admin_command(ls, _list, _prepare_list, cluster_flag=False)

    r = asub.add_parser("remove", help="remove ACLs",
                        description="Remove the ACLs that match the flags exactly, and print them.")
    _resource_flags(r, FILTER_PATTERNS, "literal")
    _entry_flags(r)
    r.add_argument("--force", action="store_true",
                   help="needed to remove the ACLs of every principal (no --allow-principal or --deny-principal)")
    admin_command(r, _remove, _prepare_remove, cluster_flag=False)


def _resource_flags(parser, patterns, default) -> None:
    parser.add_argument("--topic", action="append", default=[], metavar="TOPIC",
                        help="a topic, a prefix of topic names, or * for every topic (repeatable)")
    parser.add_argument("--group", action="append", default=[], metavar="GROUP",
                        help="a consumer group, a prefix, or * (repeatable)")
    parser.add_argument("--transactional-id", action="append", default=[], metavar="ID",
                        help="a transactional id, a prefix, or * (repeatable)")
    parser.add_argument("--cluster", action="store_true", help="the cluster (kafka-cluster)")
    parser.add_argument("--resource-pattern-type", type=str.lower, choices=patterns, default=default,
                        help=f"how the names match resources: {', '.join(patterns)} (default {default})")


def _entry_flags(parser) -> None:
    parser.add_argument("--allow-principal", action="append", default=[], metavar="TYPE:NAME",
                        help="principal allowed, such as User:alice or User:* (repeatable)")
    parser.add_argument("--deny-principal", action="append", default=[], metavar="TYPE:NAME",
                        help="principal denied (repeatable; DENY wins over ALLOW)")
    parser.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                        help="host the allowed principals may come from (repeatable; default *)")
    parser.add_argument("--deny-host", action="append", default=[], metavar="HOST",
                        help="host the denied principals are denied from (repeatable; default *)")
    parser.add_argument("--operation", action="append", default=[], metavar="OPERATION",
                        help=f"operation (repeatable; default All): {', '.join(OPERATION_NAMES)}")
    parser.add_argument("--producer", action="store_true",
                        help="a producer's ACLs: Write, Describe, Create on the topics (and the transactional ids)")
    parser.add_argument("--consumer", action="store_true",
                        help="a consumer's ACLs: Read, Describe on the topics, Read on the group")
    parser.add_argument("--idempotent", action="store_true",
                        help="with --producer: IdempotentWrite on the cluster")


# ------------------------------------------------------------------------------ flags to ACLs


def _shown(value: str) -> str:
    return value if value else "''"


def _pattern(args):
    from core.client.acl_admin import PatternType
    return PatternType.parse(args.resource_pattern_type)


def _resources(args, pattern) -> list:
    """(resource type, name, pattern type) for each resource flag, in the order given."""
    from core.client.acl_admin import CLUSTER_NAME, WILDCARD, PatternType, ResourceType
    found = []
    for rtype, names in ((ResourceType.TOPIC, args.topic), (ResourceType.GROUP, args.group),
                         (ResourceType.TRANSACTIONAL_ID, args.transactional_id)):
        flag = _RESOURCE_FLAGS[rtype.name][0]
        for name in names:
            if not name:
                raise UsageError(f"{flag}: the name is empty")
            if name == WILDCARD and pattern is PatternType.PREFIXED:
                raise UsageError(f"{flag} '*': the wildcard is a literal name; with --resource-pattern-type prefixed "
                                 f"it would match only names that begin with '*'")
            found.append((rtype, name, pattern))
    if args.cluster:
        if pattern is PatternType.PREFIXED:
            raise UsageError("--cluster: the cluster is a literal resource; it takes no --resource-pattern-type "
                             "prefixed")
        found.append((ResourceType.CLUSTER, CLUSTER_NAME, pattern))
    return list(dict.fromkeys(found))


def _principals(values: list[str], flag: str) -> list[str]:
    out = []
    for value in values:
        principal = value.strip()
        kind, colon, name = principal.partition(":")
        if not colon or not kind or not name:
            raise UsageError(f"{flag} {_shown(principal)}: a principal is TYPE:NAME, such as User:alice")
        out.append(principal)
    return list(dict.fromkeys(out))


def _hosts(values: list[str], flag: str, principals: list[str], principal_flag: str) -> list[str]:
    if values and not principals:
        raise UsageError(f"{flag} needs {principal_flag}")
    hosts = [h.strip() for h in values] or ["*"]
    if "" in hosts:
        raise UsageError(f"{flag}: the host is empty (* is every host)")
    return list(dict.fromkeys(hosts))


def _operations(values: list[str]) -> list:
    from core.client.acl_admin import AclOperation
    ops = []
    for value in values or ["All"]:
        try:
            op = AclOperation.parse(value)
        except ValueError:
            op = AclOperation.ANY
        if op is AclOperation.ANY:
            raise UsageError(f"--operation {_shown(value)}: unknown operation (one of {', '.join(OPERATION_NAMES)})")
        ops.append(op)
    return list(dict.fromkeys(ops))


def _check_roles(args) -> None:
    """kafka-acls' rules for --producer, --consumer and --idempotent, and the flags they exclude."""
    if args.idempotent and not args.producer:
        raise UsageError("--idempotent needs --producer")
    if not (args.producer or args.consumer):
        return
    role = "--producer and --consumer" if args.producer and args.consumer else \
        "--producer" if args.producer else "--consumer"
    if args.operation:
        raise UsageError(f"--operation: not with {role}, which chooses the operations")
    if args.deny_principal:
        raise UsageError(f"--deny-principal: not with {role}, which only allows (use --operation instead)")
    if args.deny_host:
        raise UsageError(f"--deny-host: not with {role}, which only allows")
    if args.cluster:
        raise UsageError(f"--cluster: not with {role} (--idempotent gives a producer IdempotentWrite on the cluster)")
    if args.producer and not args.topic:
        raise UsageError("--producer needs --topic")
    if args.consumer and not args.topic:
        raise UsageError("--consumer needs --topic and --group")
    if args.consumer and not args.group:
        raise UsageError("--consumer needs --group (the consumer group that may read)")
    if args.group and not args.consumer:
        raise UsageError("--group: --producer makes no group ACLs (add --consumer for a consumer's)")
    if args.transactional_id and not args.producer:
        raise UsageError("--transactional-id: --consumer makes no transactional-id ACLs "
                         "(add --producer for a transactional producer's)")


def _operations_by_resource(args, pattern) -> dict:
    """{(resource type, name, pattern type): [operations]} as kafka-acls expands the flags."""
    from core.client.acl_admin import CLUSTER_NAME, SUPPORTED_OPERATIONS, AclOperation as Op, PatternType, ResourceType
    resources = _resources(args, pattern)
    if not resources:
        raise UsageError(f"{args.action} needs a resource: --topic, --group, --transactional-id or --cluster")
    plan: dict = {}
    if not (args.producer or args.consumer):
        ops = _operations(args.operation)
        for resource in resources:
            supported = SUPPORTED_OPERATIONS[resource[0]]
            for op in ops:
                if op not in supported:
                    flag, what = _RESOURCE_FLAGS[resource[0].name]
                    raise UsageError(f"--operation {op.kafka_name} is not valid with {flag} ({what} takes "
                                     f"{', '.join(o.kafka_name for o in supported)})")
            plan[resource] = list(ops)
        return plan

    def grant(resource, ops) -> None:
        have = plan.setdefault(resource, [])
        have.extend(op for op in ops if op not in have)

    for resource in resources:
        rtype = resource[0]
        if args.producer and rtype is ResourceType.TOPIC:
            grant(resource, (Op.WRITE, Op.DESCRIBE, Op.CREATE))
        if args.producer and rtype is ResourceType.TRANSACTIONAL_ID:
            grant(resource, (Op.WRITE, Op.DESCRIBE))
        if args.consumer and rtype is ResourceType.TOPIC:
            grant(resource, (Op.READ, Op.DESCRIBE))
        if args.consumer and rtype is ResourceType.GROUP:
            grant(resource, (Op.READ,))
    if args.idempotent:
        grant((ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL), (Op.IDEMPOTENT_WRITE,))
    return plan


def _entries(args) -> list[tuple[str, str, "AclPermission"]]:
    """(principal, host, permission) for --allow-* and --deny-*, principal by principal."""
    from core.client.acl_admin import AclPermission
    allow = _principals(args.allow_principal, "--allow-principal")
    deny = _principals(args.deny_principal, "--deny-principal")
    allow_hosts = _hosts(args.allow_host, "--allow-host", allow, "--allow-principal")
    deny_hosts = _hosts(args.deny_host, "--deny-host", deny, "--deny-principal")
    return ([(p, h, AclPermission.ALLOW) for p in allow for h in allow_hosts]
            + [(p, h, AclPermission.DENY) for p in deny for h in deny_hosts])


def plan_add(args) -> "list[AclBinding]":
    """The AclBindings `seaway acls add` creates; a UsageError naming the flag if the flags
    do not describe any, or describe one the cluster would refuse."""
    from core.client.acl_admin import AclBinding
    _check_roles(args)
    entries = _entries(args)
    plan = _operations_by_resource(args, _pattern(args))
    if not entries:
        raise UsageError("add needs --allow-principal or --deny-principal")
    return list(dict.fromkeys(AclBinding(rtype, name, pattern, principal, host, op, permission)
                              for (rtype, name, pattern), ops in plan.items()
                              for principal, host, permission in entries for op in ops))


def plan_remove(args) -> "list[AclBindingFilter]":
    """The AclBindingFilters `seaway acls remove` deletes with: each selects exactly one ACL
    the flags describe; without principals, every principal's (only with --force)."""
    from core.client.acl_admin import AclBindingFilter, AclOperation, AclPermission
    _check_roles(args)
    entries = _entries(args)
    plan = _operations_by_resource(args, _pattern(args))
    if entries:
        return list(dict.fromkeys(AclBindingFilter(rtype, name, pattern, principal, host, op, permission)
                                  for (rtype, name, pattern), ops in plan.items()
                                  for principal, host, permission in entries for op in ops))
    if not args.force:
        raise UsageError("remove without --allow-principal or --deny-principal removes every principal's ACLs "
                         "on the resources: add --force to do that")
    chosen = args.operation or args.producer or args.consumer
    return list(dict.fromkeys(AclBindingFilter(rtype, name, pattern, None, None,
                                               op if chosen else AclOperation.ANY, AclPermission.ANY)
                              for (rtype, name, pattern), ops in plan.items() for op in ops))


def plan_list(args) -> "list[AclBindingFilter]":
    """The AclBindingFilters `seaway acls list` describes with: each resource (or every
    resource) for each --principal (or every principal)."""
    from core.client.acl_admin import AclBindingFilter
    pattern = _pattern(args)
    resources = _resources(args, pattern)
    principals: list[str | None] = [*_principals(args.principal, "--principal")] or [None]
    if resources:
        return [AclBindingFilter(rtype, name, pat, principal) for rtype, name, pat in resources
                for principal in principals]
    return [AclBindingFilter(pattern_type=pattern, principal=principal) for principal in principals]


def _prepare_add(args) -> None:
    args.plan = plan_add(args)


def _prepare_remove(args) -> None:
    args.plan = plan_remove(args)


def _prepare_list(args) -> None:
    args.plan = plan_list(args)


# ------------------------------------------------------------------------------ the commands


def _acl_admin(admin):
    from core.client.acl_admin import AclAdmin
    return AclAdmin(admin.client, timeout_ms=admin.timeout_ms)


def _sorted(bindings) -> list:
    return sorted(dict.fromkeys(bindings), key=lambda b: (b.resource_type, b.name, b.pattern_type, b.principal,
                                                          b.host, b.operation, b.permission))


def _show(args, bindings, heading: str | None = None) -> None:
    if args.output == "json":
        emit_json([b.as_dict() for b in bindings])
        return
    if heading:
        print(heading)
    if bindings or heading is None:
        table(HEADERS, [[b.resource_type.name, b.name, b.pattern_type.name, b.principal, b.host, b.operation.name,
                         b.permission.name] for b in bindings])


def _plural(n: int) -> str:
    return f"{n} ACL" if n == 1 else f"{n} ACLs"


def _what(b) -> str:
    return (f"{b.permission.name} {b.principal} {b.operation.kafka_name} from {b.host} on "
            f"{b.resource_type.name} {b.name} ({b.pattern_type.name})")


async def _add(admin, args) -> int:
    bindings = args.plan
    errors = await _acl_admin(admin).create_acls(bindings)
    failed = [(b, e) for b, e in zip(bindings, errors) if e is not None]
    if failed and len(failed) == len(bindings) and len({(e.code, e.message) for _, e in failed}) == 1:
        raise failed[0][1]       # all refused alike (CLUSTER_AUTHORIZATION_FAILED): one line
    added = [b for b, e in zip(bindings, errors) if e is None]
    _show(args, added, f"Added {_plural(len(added))}:" if added else None)
    for b, e in failed:
        print(f"seaway: error: {_what(b)}: {e}", file=sys.stderr)
    return 1 if failed else 0


async def _remove(admin, args) -> int:
    results = await _acl_admin(admin).delete_acls(args.plan)
    errors = [r.error for r in results if r.error is not None]
    if errors and len(errors) == len(results) and len({(e.code, e.message) for e in errors}) == 1:
        raise errors[0]
    removed = _sorted(b for r in results for b in r.removed)
    _show(args, removed, f"Removed {_plural(len(removed))}:" if removed else "No ACL matched; nothing was removed.")
    for e in dict.fromkeys(str(e) for e in errors):
        print(f"seaway: error: {e}", file=sys.stderr)
    return 1 if errors else 0


async def _list(admin, args) -> int:
    acl_admin = _acl_admin(admin)
    found = []
    for acl_filter in args.plan:
        found += await acl_admin.describe_acls(acl_filter)
    _show(args, _sorted(found))
    return 0


__all__ = ["plan_add", "plan_list", "plan_remove", "register"]
