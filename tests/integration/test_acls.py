"""ACLs with a real AdminClient and real clients: CreateAcls, DescribeAcls and DeleteAcls with
Kafka's filters, and the ACL authorizer (authorizer.class.name) deciding produce and consume.
Which API checks which operation, on every API, is the next step of issue 17; this module
checks the ACL store and the decisions the produce and fetch paths already ask for."""
from __future__ import annotations

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType)

from tests.support.clients import CLIENTS
from tests.support.node import SeawayNode, free_port

pytestmark = pytest.mark.timeout(300)
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_alice="alice-secret" user_bob="bob-secret";')
ANY_FILTER = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                              AclPermissionType.ANY)


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    plain, sasl = free_port(), free_port()
    n = SeawayNode(tmp_path_factory.mktemp("acl-node"), {
        "listeners": f"PLAIN://127.0.0.1:{plain},SASL://127.0.0.1:{sasl}",
        "listener.security.protocol.map": "PLAIN:PLAINTEXT,SASL:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS"},    # the local PLAINTEXT listener administers
        port=plain).start()
    n.sasl_port = sasl
    admin = AdminClient({"bootstrap.servers": n.bootstrap})
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in ("orders-eu", "orders-us", "secret")]).values():
        future.result(timeout=20)
    yield n
    n.stop()


def login(user: str) -> dict:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN", "sasl.username": user,
            "sasl.password": f"{user}-secret"}


def produce_error(node, user: str, topic: str):
    errors = []
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{node.sasl_port}", "message.timeout.ms": 5000,
                         **login(user)})
    producer.produce(topic, b"v", on_delivery=lambda err, msg: errors.append(err) if err else None)
    producer.flush(10)
    return errors[0].name() if errors else None


def binding(name, op, principal="User:alice", pattern=ResourcePatternType.LITERAL, permission=AclPermissionType.ALLOW,
            rtype=ResourceType.TOPIC, host="*"):
    return AclBinding(rtype, name, pattern, principal, host, op, permission)


def test_acls_decide_who_may_produce_and_consume(node):
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    created = admin.create_acls([
        binding("orders-", AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED),
        binding("orders-", AclOperation.READ, pattern=ResourcePatternType.PREFIXED),
        binding("orders-us", AclOperation.ALL, permission=AclPermissionType.DENY),
        binding("*", AclOperation.READ, rtype=ResourceType.GROUP),   # the consumer's group, whatever its name
    ])
    for future in created.values():
        assert future.result(timeout=20) is None
    assert produce_error(node, "alice", "orders-eu") is None
    assert produce_error(node, "alice", "orders-us") == "TOPIC_AUTHORIZATION_FAILED"   # DENY wins
    assert produce_error(node, "alice", "secret") == "TOPIC_AUTHORIZATION_FAILED"      # no ACL: denied
    assert produce_error(node, "bob", "orders-eu") == "TOPIC_AUTHORIZATION_FAILED"     # not bob's
    got = CLIENTS["confluent"].consume(f"127.0.0.1:{node.sasl_port}", "orders-eu", {0: 0}, count=1,
                                       config=login("alice"))
    assert [r.value for r in got] == [b"v"]
    listed = admin.describe_acls(ANY_FILTER).result(timeout=20)
    assert len(listed) == 4
    deleted = admin.delete_acls([AclBindingFilter(ResourceType.TOPIC, "orders-us", ResourcePatternType.LITERAL,
                                                  None, None, AclOperation.ANY, AclPermissionType.ANY)])
    assert [b.name for b in list(deleted.values())[0].result(timeout=20)] == ["orders-us"]
    assert produce_error(node, "alice", "orders-us") is None                           # the DENY is gone


def test_describe_filters_select_as_kafka_does(node):
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    for future in admin.create_acls([binding("g", AclOperation.READ, rtype=ResourceType.GROUP, principal="User:bob"),
                                     binding("*", AclOperation.DESCRIBE, principal="User:*")]).values():
        future.result(timeout=20)
    match = AclBindingFilter(ResourceType.TOPIC, "orders-eu", ResourcePatternType.MATCH, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    names = sorted(b.name for b in admin.describe_acls(match).result(timeout=20))
    assert names == ["*", "orders-", "orders-"]                 # the wildcard and the prefixes that apply
    bob = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:bob", None, AclOperation.ANY,
                           AclPermissionType.ANY)
    assert [(b.restype, b.name) for b in admin.describe_acls(bob).result(timeout=20)] == [(ResourceType.GROUP, "g")]
    assert len(admin.describe_acls(ANY_FILTER).result(timeout=20)) == 5


def test_creating_acls_needs_alter_on_the_cluster_and_bad_ones_are_refused(node):
    sasl_admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{node.sasl_port}", **login("bob")})
    with pytest.raises(Exception, match="CLUSTER_AUTHORIZATION_FAILED"):
        list(sasl_admin.create_acls([binding("x", AclOperation.READ)]).values())[0].result(timeout=20)
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    with pytest.raises(Exception, match="kafka-cluster"):
        list(admin.create_acls([binding("not-the-cluster", AclOperation.ALTER, rtype=ResourceType.BROKER)]
                               ).values())[0].result(timeout=20)


def test_without_an_authorizer_the_acl_apis_are_security_disabled(tmp_path):
    """Kafka keeps no ACLs without authorizer.class.name: CreateAcls, DescribeAcls and
    DeleteAcls all answer SECURITY_DISABLED, so a tool is not led to think they protect anything."""
    from confluent_kafka import KafkaError, KafkaException
    from core.protocol import messages as m
    from core.protocol.errors import ErrorCode
    from tests.support.wire import call
    with SeawayNode(tmp_path) as plain:
        admin = AdminClient({"bootstrap.servers": plain.bootstrap})
        answers = [lambda: list(admin.create_acls([binding("t", AclOperation.READ)]).values())[0].result(timeout=20),
                   lambda: list(admin.delete_acls([ANY_FILTER]).values())[0].result(timeout=20)]
        for answer in answers:
            with pytest.raises(KafkaException) as refused:
                answer()
            assert refused.value.args[0].code() == KafkaError.SECURITY_DISABLED
            assert "No Authorizer is configured." in refused.value.args[0].str()
        # (confluent-kafka's describe_acls drops the top-level error and returns []: ask on the wire)
        described = call(plain, 29, 3, m.DescribeAclsRequest(
            resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter=None,
            host_filter=None, operation=1, permission_type=1))
        assert (described.error_code, described.resources) == (ErrorCode.SECURITY_DISABLED, [])
