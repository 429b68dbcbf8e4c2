"""`seaway acls add|list|remove` against a node with the ACL authorizer and SASL users: the CLI
runs as a user types it (a subprocess, logging in as the super user with --command-config), and
confluent-kafka clients logged in as alice find out what the ACLs let them do. A user who may
not alter ACLs gets one line: CLUSTER_AUTHORIZATION_FAILED. The flags themselves are covered in
tests/unit/test_acls_cli.py."""
from __future__ import annotations

import json
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.cli import seaway
from tests.support.node import SeawayNode, free_port

pytestmark = pytest.mark.timeout(300)
USERS = ("admin", "alice", "bob")
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{u}-secret"' for u in USERS) + ";")
PRODUCER = ["--allow-principal", "User:alice", "--producer", "--topic", "orders-", "--resource-pattern-type", "prefixed"]
CONSUMER = ["--allow-principal", "User:alice", "--consumer", "--topic", "orders-", "--group", "billing",
            "--resource-pattern-type", "prefixed"]


def login(user: str) -> dict:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN", "sasl.username": user,
            "sasl.password": f"{user}-secret"}


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    directory = tmp_path_factory.mktemp("acls-cli")
    plain, sasl = free_port(), free_port()
    n = SeawayNode(directory / "node", {
        "listeners": f"PLAIN://127.0.0.1:{plain},SASL://127.0.0.1:{sasl}",
        "listener.security.protocol.map": "PLAIN:PLAINTEXT,SASL:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin"},
        port=plain).start()
    n.sasl = f"127.0.0.1:{sasl}"
    n.configs = {}
    for user in USERS:
        path = directory / f"{user}.properties"
        path.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username={user}\n"
                        f"sasl.password={user}-secret\n")
        n.configs[user] = str(path)
    admin = AdminClient({"bootstrap.servers": n.sasl, **login("admin")})
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in ("orders-eu", "payroll")]).values():
        future.result(timeout=20)
    yield n
    n.stop()


def acls(node, *args, user="admin", check=True):
    return seaway("acls", *args, "-b", node.sasl, "--command-config", node.configs[user], check=check)


def produce_error(node, topic: str, user: str = "alice"):
    errors = []
    producer = Producer({"bootstrap.servers": node.sasl, "message.timeout.ms": 5000, **login(user)})
    producer.produce(topic, b"v", on_delivery=lambda err, msg: errors.append(err) if err else None)
    producer.flush(10)
    return errors[0].name() if errors else None


def consume_one(node, topic: str, group: str, user: str = "alice", timeout: float = 20.0):
    """The first record's value, read in the group and committed; or the error's name."""
    consumer = Consumer({"bootstrap.servers": node.sasl, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, **login(user)})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                return msg.error().name()
            try:
                consumer.commit(message=msg, asynchronous=False)
            except KafkaException as exc:
                return exc.args[0].name()
            return msg.value()
        return None
    finally:
        consumer.close()


def listed(node, *args) -> set[tuple[str, ...]]:
    rows = json.loads(acls(node, "list", *args, "--output", "json").stdout)
    return {(r["resource_type"], r["name"], r["pattern_type"], r["principal"], r["host"], r["operation"],
             r["permission"]) for r in rows}


def test_producer_and_consumer_acls_from_the_cli(node):
    assert produce_error(node, "orders-eu") == "TOPIC_AUTHORIZATION_FAILED"   # no ACL yet: denied

    added = acls(node, "add", *PRODUCER)
    assert added.stdout.splitlines()[0] == "Added 3 ACLs:", added.stdout
    assert "PRINCIPAL" in added.stdout and "PREFIXED" in added.stdout
    assert produce_error(node, "orders-eu") is None                           # under the prefix
    assert produce_error(node, "payroll") == "TOPIC_AUTHORIZATION_FAILED"      # outside it
    assert produce_error(node, "orders-eu", user="bob") == "TOPIC_AUTHORIZATION_FAILED"

    acls(node, "add", *CONSUMER)
    assert consume_one(node, "orders-eu", "billing") == b"v"
    assert consume_one(node, "orders-eu", "other", timeout=10) == "GROUP_AUTHORIZATION_FAILED"

    topic = ("TOPIC", "orders-", "PREFIXED", "User:alice", "*")
    group = ("GROUP", "billing", "PREFIXED", "User:alice", "*", "READ", "ALLOW")
    alices = {(*topic, op, "ALLOW") for op in ("WRITE", "DESCRIBE", "CREATE", "READ")} | {group}
    assert listed(node, "--principal", "User:alice") == alices
    assert listed(node) == alices
    assert listed(node, "--principal", "User:bob") == set()
    assert listed(node, "--topic", "orders-eu") == set()                     # any: the name exactly
    assert listed(node, "--topic", "orders-eu", "--resource-pattern-type", "match") == \
        {a for a in alices if a[0] == "TOPIC"}                                 # the prefixes that apply
    table = acls(node, "list", "--group", "billing", "--resource-pattern-type", "prefixed").stdout.splitlines()
    assert table[0].split() == ["RESOURCE", "TYPE", "NAME", "PATTERN", "PRINCIPAL", "HOST", "OPERATION",
                                "PERMISSION"]
    assert [line.split() for line in table[1:]] == [list(group)]

    removed = acls(node, "remove", *PRODUCER)
    assert removed.stdout.splitlines()[0] == "Removed 3 ACLs:", removed.stdout
    assert produce_error(node, "orders-eu") == "TOPIC_AUTHORIZATION_FAILED"   # denied again
    assert listed(node, "--principal", "User:alice") == {(*topic, "READ", "ALLOW"), group}
    again = acls(node, "remove", *PRODUCER)
    assert again.stdout.strip() == "No ACL matched; nothing was removed."
    gone = json.loads(acls(node, "remove", *CONSUMER, "--output", "json").stdout)
    assert {(r["resource_type"], r["operation"]) for r in gone} == {("TOPIC", "READ"), ("GROUP", "READ")}
    assert listed(node) == set()
    assert consume_one(node, "orders-eu", "billing", timeout=10) in ("TOPIC_AUTHORIZATION_FAILED",
                                                                      "GROUP_AUTHORIZATION_FAILED")


def test_a_cluster_acl_and_removing_every_principals_acls_with_force(node):
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    acls(node, "add", "--allow-principal", "User:alice", "--allow-principal", "User:bob", "--operation", "Describe",
         "--operation", "Write", "--topic", topic)
    acls(node, "add", "--deny-principal", "User:bob", "--deny-host", "10.9.9.9", "--operation", "Write",
         "--topic", topic)
    acls(node, "add", "--allow-principal", "User:alice", "--operation", "IdempotentWrite", "--cluster")
    assert ("CLUSTER", "kafka-cluster", "LITERAL", "User:alice", "*", "IDEMPOTENT_WRITE", "ALLOW") in listed(
        node, "--cluster")
    assert len(listed(node, "--topic", topic)) == 5
    refused = acls(node, "remove", "--topic", topic, check=False)
    assert refused.returncode == 2 and "--force" in refused.stderr
    removed = json.loads(acls(node, "remove", "--topic", topic, "--force", "--output", "json").stdout)
    assert len(removed) == 5 and {r["permission"] for r in removed} == {"ALLOW", "DENY"}
    acls(node, "remove", "--allow-principal", "User:alice", "--operation", "IdempotentWrite", "--cluster")
    assert listed(node) == set()


@pytest.mark.parametrize("action", [
    ["add", "--allow-principal", "User:bob", "--operation", "All", "--topic", "payroll"],
    ["remove", "--topic", "payroll", "--force"],
    ["list"],
])
def test_a_user_who_may_not_manage_acls_gets_one_line(node, action):
    refused = acls(node, *action, user="bob", check=False)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in refused.stderr, refused.stderr
    assert lines[0].startswith("seaway: error: CLUSTER_AUTHORIZATION_FAILED: not authorized to "), lines[0]
    assert refused.stdout == ""
