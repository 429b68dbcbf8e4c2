"""`seaway acls`: the flags to ACL bindings and filters, as Kafka's kafka-acls expands them
(--producer, --consumer, --idempotent, --transactional-id, prefixed patterns, principals x hosts
x operations), and every mistake as one line naming the flag, exit status 2, before anything
connects. Against a node: tests/integration/test_cli_acls.py."""
from __future__ import annotations

import shlex

import pytest

from core.cli.acls_cmd import plan_add, plan_list, plan_remove
from core.cli.main import build_parser, main
from core.client.acl_admin import (CLUSTER_NAME, AclBinding, AclBindingFilter, AclOperation, AclPermission,
                                   PatternType, ResourceType)

NOWHERE = ["-b", "127.0.0.1:1", "--timeout", "1"]   # a test whose flags pass by mistake fails fast


def parse(action: str, flags: str):
    return build_parser().parse_args(["acls", action, *shlex.split(flags)])


def short(bindings) -> list[tuple[str, ...]]:
    """(TYPE, name, PATTERN, principal, host, OPERATION, PERMISSION), as `seaway acls list` prints them."""
    return [(b.resource_type.name, b.name, b.pattern_type.name, b.principal, b.host, b.operation.name,
             b.permission.name) for b in bindings]


@pytest.mark.parametrize("flags,expected", [
    ("--allow-principal User:alice --topic orders",
     [("TOPIC", "orders", "LITERAL", "User:alice", "*", "ALL", "ALLOW")]),
    ("--allow-principal User:alice --operation read --operation DESCRIBE --operation Read --topic orders",
     [("TOPIC", "orders", "LITERAL", "User:alice", "*", "READ", "ALLOW"),
      ("TOPIC", "orders", "LITERAL", "User:alice", "*", "DESCRIBE", "ALLOW")]),
    ("--allow-principal User:alice --operation ClusterAction --operation idempotent_write "
     "--operation alter-configs --cluster",
     [("CLUSTER", CLUSTER_NAME, "LITERAL", "User:alice", "*", "CLUSTER_ACTION", "ALLOW"),
      ("CLUSTER", CLUSTER_NAME, "LITERAL", "User:alice", "*", "IDEMPOTENT_WRITE", "ALLOW"),
      ("CLUSTER", CLUSTER_NAME, "LITERAL", "User:alice", "*", "ALTER_CONFIGS", "ALLOW")]),
    ("--deny-principal User:bob --deny-host 10.0.0.1 --operation Write --topic '*'",
     [("TOPIC", "*", "LITERAL", "User:bob", "10.0.0.1", "WRITE", "DENY")]),
    ("--allow-principal User:alice --topic orders- --resource-pattern-type PREFIXED --operation Write",
     [("TOPIC", "orders-", "PREFIXED", "User:alice", "*", "WRITE", "ALLOW")]),
    ("--allow-principal User:alice --group billing --transactional-id tx --operation Describe",
     [("GROUP", "billing", "LITERAL", "User:alice", "*", "DESCRIBE", "ALLOW"),
      ("TRANSACTIONAL_ID", "tx", "LITERAL", "User:alice", "*", "DESCRIBE", "ALLOW")]),
    # every principal x host x operation, ALLOW and DENY each with their own hosts
    ("--allow-principal User:a --allow-principal User:b --allow-host h1 --allow-host h2 "
     "--deny-principal User:c --operation Read --operation Write --topic t",
     [("TOPIC", "t", "LITERAL", "User:a", "h1", "READ", "ALLOW"),
      ("TOPIC", "t", "LITERAL", "User:a", "h1", "WRITE", "ALLOW"),
      ("TOPIC", "t", "LITERAL", "User:a", "h2", "READ", "ALLOW"),
      ("TOPIC", "t", "LITERAL", "User:a", "h2", "WRITE", "ALLOW"),
      ("TOPIC", "t", "LITERAL", "User:b", "h1", "READ", "ALLOW"),
      ("TOPIC", "t", "LITERAL", "User:b", "h1", "WRITE", "ALLOW"),
      ("TOPIC", "t", "LITERAL", "User:b", "h2", "READ", "ALLOW"),
      ("TOPIC", "t", "LITERAL", "User:b", "h2", "WRITE", "ALLOW"),
      ("TOPIC", "t", "LITERAL", "User:c", "*", "READ", "DENY"),
      ("TOPIC", "t", "LITERAL", "User:c", "*", "WRITE", "DENY")]),
    # repeated flags and values give each ACL once
    ("--allow-principal User:a --allow-principal ' User:a ' --topic t --topic t --operation All",
     [("TOPIC", "t", "LITERAL", "User:a", "*", "ALL", "ALLOW")]),
    # --producer: Write, Describe, Create on the topics
    ("--allow-principal User:alice --producer --topic orders- --resource-pattern-type prefixed",
     [("TOPIC", "orders-", "PREFIXED", "User:alice", "*", "WRITE", "ALLOW"),
      ("TOPIC", "orders-", "PREFIXED", "User:alice", "*", "DESCRIBE", "ALLOW"),
      ("TOPIC", "orders-", "PREFIXED", "User:alice", "*", "CREATE", "ALLOW")]),
    # --idempotent: IdempotentWrite on the cluster, which is literal even when the topic is prefixed
    ("--allow-principal User:alice --producer --idempotent --topic orders- --resource-pattern-type prefixed",
     [("TOPIC", "orders-", "PREFIXED", "User:alice", "*", "WRITE", "ALLOW"),
      ("TOPIC", "orders-", "PREFIXED", "User:alice", "*", "DESCRIBE", "ALLOW"),
      ("TOPIC", "orders-", "PREFIXED", "User:alice", "*", "CREATE", "ALLOW"),
      ("CLUSTER", CLUSTER_NAME, "LITERAL", "User:alice", "*", "IDEMPOTENT_WRITE", "ALLOW")]),
    # --transactional-id with --producer: Write and Describe on it
    ("--allow-principal User:alice --producer --topic t --transactional-id tx-1",
     [("TOPIC", "t", "LITERAL", "User:alice", "*", "WRITE", "ALLOW"),
      ("TOPIC", "t", "LITERAL", "User:alice", "*", "DESCRIBE", "ALLOW"),
      ("TOPIC", "t", "LITERAL", "User:alice", "*", "CREATE", "ALLOW"),
      ("TRANSACTIONAL_ID", "tx-1", "LITERAL", "User:alice", "*", "WRITE", "ALLOW"),
      ("TRANSACTIONAL_ID", "tx-1", "LITERAL", "User:alice", "*", "DESCRIBE", "ALLOW")]),
    # --consumer: Read and Describe on the topics, Read on the group
    ("--allow-principal User:bob --allow-host 10.0.0.2 --consumer --topic t --group g",
     [("TOPIC", "t", "LITERAL", "User:bob", "10.0.0.2", "READ", "ALLOW"),
      ("TOPIC", "t", "LITERAL", "User:bob", "10.0.0.2", "DESCRIBE", "ALLOW"),
      ("GROUP", "g", "LITERAL", "User:bob", "10.0.0.2", "READ", "ALLOW")]),
    # both roles at once: the topic gets both sets, each operation once
    ("--allow-principal User:c --producer --consumer --topic t --group g --transactional-id tx",
     [("TOPIC", "t", "LITERAL", "User:c", "*", "WRITE", "ALLOW"),
      ("TOPIC", "t", "LITERAL", "User:c", "*", "DESCRIBE", "ALLOW"),
      ("TOPIC", "t", "LITERAL", "User:c", "*", "CREATE", "ALLOW"),
      ("TOPIC", "t", "LITERAL", "User:c", "*", "READ", "ALLOW"),
      ("GROUP", "g", "LITERAL", "User:c", "*", "READ", "ALLOW"),
      ("TRANSACTIONAL_ID", "tx", "LITERAL", "User:c", "*", "WRITE", "ALLOW"),
      ("TRANSACTIONAL_ID", "tx", "LITERAL", "User:c", "*", "DESCRIBE", "ALLOW")]),
])
def test_add_expands_the_flags_as_kafka_acls_does(flags, expected):
    assert short(plan_add(parse("add", flags))) == expected


def test_the_bindings_carry_the_wire_codes():
    [b] = plan_add(parse("add", "--allow-principal User:alice --operation IdempotentWrite --cluster"))
    assert b == AclBinding(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, "User:alice", "*",
                           AclOperation.IDEMPOTENT_WRITE, AclPermission.ALLOW)
    assert (int(b.resource_type), int(b.pattern_type), int(b.operation), int(b.permission)) == (4, 3, 12, 3)


def test_remove_selects_exactly_the_acls_add_would_make():
    for flags in ("--allow-principal User:alice --producer --idempotent --topic orders- --resource-pattern-type prefixed",
                  "--allow-principal User:a --deny-principal User:b --operation Read --topic t --group g"):
        assert plan_remove(parse("remove", flags)) == [b.to_filter() for b in plan_add(parse("add", flags))]


def test_remove_without_a_principal_takes_force_and_selects_every_principal():
    assert plan_remove(parse("remove", "--topic t --force")) == [
        AclBindingFilter(ResourceType.TOPIC, "t", PatternType.LITERAL, None, None, AclOperation.ANY,
                         AclPermission.ANY)]
    assert plan_remove(parse("remove", "--topic t --operation Write --resource-pattern-type match --force")) == [
        AclBindingFilter(ResourceType.TOPIC, "t", PatternType.MATCH, None, None, AclOperation.WRITE,
                         AclPermission.ANY)]
    assert [f.operation.name for f in plan_remove(parse("remove", "--consumer --topic t --group g --force"))] == [
        "READ", "DESCRIBE", "READ"]


@pytest.mark.parametrize("flags,expected", [
    ("", [AclBindingFilter()]),
    ("--principal User:alice", [AclBindingFilter(principal="User:alice")]),
    ("--resource-pattern-type literal", [AclBindingFilter(pattern_type=PatternType.LITERAL)]),
    ("--topic orders-eu --resource-pattern-type match",
     [AclBindingFilter(ResourceType.TOPIC, "orders-eu", PatternType.MATCH)]),
    ("--topic t --cluster --principal User:a --principal User:b",
     [AclBindingFilter(ResourceType.TOPIC, "t", PatternType.ANY, "User:a"),
      AclBindingFilter(ResourceType.TOPIC, "t", PatternType.ANY, "User:b"),
      AclBindingFilter(ResourceType.CLUSTER, "kafka-cluster", PatternType.ANY, "User:a"),
      AclBindingFilter(ResourceType.CLUSTER, "kafka-cluster", PatternType.ANY, "User:b")]),
    ("--group g --transactional-id tx --resource-pattern-type prefixed",
     [AclBindingFilter(ResourceType.GROUP, "g", PatternType.PREFIXED),
      AclBindingFilter(ResourceType.TRANSACTIONAL_ID, "tx", PatternType.PREFIXED)]),
])
def test_list_filters(flags, expected):
    assert plan_list(parse("list", flags)) == expected


ADD_PRODUCER = "add --allow-principal User:alice --producer"
BAD = [
    # principals, hosts, operations
    ("add --allow-principal alice --topic t", "--allow-principal alice: a principal is TYPE:NAME, such as User:alice"),
    ("add --deny-principal User: --topic t", "--deny-principal User:: a principal is TYPE:NAME"),
    ("add --allow-principal '' --topic t", "--allow-principal '': a principal is TYPE:NAME"),
    ("list --principal bob", "--principal bob: a principal is TYPE:NAME"),
    ("add --topic t", "add needs --allow-principal or --deny-principal"),
    ("add --allow-host 10.0.0.1 --deny-principal User:b --topic t", "--allow-host needs --allow-principal"),
    ("add --deny-host 10.0.0.1 --allow-principal User:b --topic t", "--deny-host needs --deny-principal"),
    ("add --allow-principal User:a --allow-host '' --topic t", "--allow-host: the host is empty"),
    ("add --allow-principal User:a --operation Fly --topic t", "--operation Fly: unknown operation (one of All, Read"),
    ("add --allow-principal User:a --operation Any --topic t", "--operation Any: unknown operation"),
    ("add --allow-principal User:a --operation CreateTokens --topic t", "--operation CreateTokens: unknown operation"),
    # operations a resource type does not have, as Kafka's AclCommand refuses them
    ("add --allow-principal User:a --operation Read --cluster",
     "--operation Read is not valid with --cluster (the cluster takes All, Create, Alter, Describe, ClusterAction, "
     "DescribeConfigs, AlterConfigs, IdempotentWrite)"),
    ("add --allow-principal User:a --operation ClusterAction --topic t", "--operation ClusterAction is not valid "
                                                                         "with --topic (a topic takes All, Read,"),
    ("add --allow-principal User:a --operation Write --group g", "--operation Write is not valid with --group"),
    ("add --allow-principal User:a --operation Read --transactional-id tx",
     "--operation Read is not valid with --transactional-id (a transactional id takes All, Write, Describe)"),
    ("remove --allow-principal User:a --operation IdempotentWrite --topic t",
     "--operation IdempotentWrite is not valid with --topic"),
    # resources and pattern types
    ("add --allow-principal User:a", "add needs a resource: --topic, --group, --transactional-id or --cluster"),
    ("remove --allow-principal User:a", "remove needs a resource"),
    ("add --allow-principal User:a --topic ''", "--topic: the name is empty"),
    ("add --allow-principal User:a --topic '*' --resource-pattern-type prefixed",
     "--topic '*': the wildcard is a literal name; with --resource-pattern-type prefixed"),
    ("add --allow-principal User:a --group '*' --resource-pattern-type prefixed", "--group '*': the wildcard"),
    ("list --transactional-id '*' --resource-pattern-type prefixed", "--transactional-id '*': the wildcard"),
    ("add --allow-principal User:a --cluster --resource-pattern-type prefixed",
     "--cluster: the cluster is a literal resource"),
    ("add --allow-principal User:a --topic t --resource-pattern-type any",
     "argument --resource-pattern-type: invalid choice: 'any' (choose from 'literal', 'prefixed')"),
    ("add --allow-principal User:a --topic t --resource-pattern-type match", "argument --resource-pattern-type"),
    ("list --resource-pattern-type exact", "argument --resource-pattern-type: invalid choice: 'exact'"),
    # --producer, --consumer, --idempotent
    ("add --allow-principal User:a --idempotent --topic t", "--idempotent needs --producer"),
    (f"{ADD_PRODUCER}", "--producer needs --topic"),
    (f"{ADD_PRODUCER} --transactional-id tx", "--producer needs --topic"),
    ("add --allow-principal User:a --consumer --group g", "--consumer needs --topic and --group"),
    ("add --allow-principal User:a --consumer --topic t", "--consumer needs --group"),
    (f"{ADD_PRODUCER} --topic t --group g", "--group: --producer makes no group ACLs (add --consumer"),
    ("add --allow-principal User:a --consumer --topic t --group g --transactional-id tx",
     "--transactional-id: --consumer makes no transactional-id ACLs"),
    (f"{ADD_PRODUCER} --topic t --cluster", "--cluster: not with --producer (--idempotent gives"),
    ("add --allow-principal User:a --consumer --topic t --group g --cluster", "--cluster: not with --consumer"),
    (f"{ADD_PRODUCER} --topic t --operation Read", "--operation: not with --producer, which chooses the operations"),
    (f"{ADD_PRODUCER} --consumer --topic t --group g --operation Read",
     "--operation: not with --producer and --consumer"),
    ("add --deny-principal User:a --producer --topic t", "--deny-principal: not with --producer"),
    (f"{ADD_PRODUCER} --deny-host h --topic t", "--deny-host: not with --producer"),
    # what each action takes
    ("remove --topic t", "remove without --allow-principal or --deny-principal removes every principal's ACLs "
                         "on the resources: add --force to do that"),
    ("list --allow-principal User:a", "unrecognized arguments: --allow-principal User:a"),
    ("list --producer", "unrecognized arguments: --producer"),
    ("add --allow-principal User:a --topic t --principal User:a", "unrecognized arguments: --principal"),
    ("add --allow-principal User:a --topic t --force", "unrecognized arguments: --force"),
    ("frobnicate", "argument ACTION: invalid choice: 'frobnicate' (choose from 'add', 'list', 'remove')"),
]


@pytest.mark.parametrize("command,message", BAD, ids=[c for c, _ in BAD])
def test_every_mistake_is_one_line_naming_the_flag(command, message, capsys):
    try:
        code = main(["acls", *shlex.split(command), *NOWHERE])
    except SystemExit as exc:     # argparse's own checks exit from parse_args
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("seaway: error: ") and message in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err


def test_help_lists_the_actions_and_kafkas_flags(capsys):
    with pytest.raises(SystemExit):
        main(["acls", "add", "--help"])
    out = capsys.readouterr().out
    for flag in ("--allow-principal", "--deny-principal", "--allow-host", "--deny-host", "--operation", "--topic",
                 "--group", "--cluster", "--transactional-id", "--resource-pattern-type", "--producer",
                 "--consumer", "--idempotent", "--command-config", "--output"):
        assert flag in out


def test_operation_names_read_as_kafkas():
    assert [AclOperation.parse(t) for t in ("ClusterAction", "CLUSTER_ACTION", "cluster-action", " clusteraction ")] \
        == [AclOperation.CLUSTER_ACTION] * 4
    assert AclOperation.DESCRIBE_CONFIGS.kafka_name == "DescribeConfigs"
    with pytest.raises(ValueError):
        AclOperation.parse("fly")


def test_the_clients_acl_codes_are_the_brokers():
    """core/client may not import core/security (the import contract), so AclAdmin has its own
    enums, with the filter-only ANY and MATCH the broker's closed sets leave out. Every code the
    broker knows must mean the same on both sides."""
    from core.client.acl_admin import PatternType, ResourceType
    from core.security import acls, authorizer
    pairs = [(authorizer.Operation, AclOperation), (authorizer.ResourceType, ResourceType),
             (acls.PatternType, PatternType), (acls.Permission, AclPermission)]
    for broker, client in pairs:
        assert {m.name: m.value for m in broker}.items() <= {m.name: m.value for m in client}.items(), broker
    assert {m.name for m in AclOperation} - {m.name for m in authorizer.Operation} == {"ANY"}
    assert {m.name for m in ResourceType} - {m.name for m in authorizer.ResourceType} == {"ANY"}
