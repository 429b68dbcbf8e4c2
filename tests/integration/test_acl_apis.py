"""Which operation each API needs, asked of a real node by a SASL user with raw requests, one
table row per rule (Kafka's KafkaApis and ControllerApis are the reference).

Each row grants alice some ACLs on names of its own (so rows do not see each other's ACLs),
sends one request, and states the error each resource must get. A row fails if a check is
missing, checks the wrong operation, answers with the wrong code, or leaks what Kafka hides.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import anyio
import pytest
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                   ResourcePatternType, ResourceType)

from core.client.connection import BrokerConnection
from core.client.sasl import SaslCredentials
from core.protocol import messages as m
from core.protocol.errors import ErrorCode as E
from tests.support.node import SeawayNode, free_port

pytestmark = pytest.mark.timeout(300)
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_alice="alice-secret" user_node="node-secret";')
ACL_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
EXISTING = ("secret", "ro-alter", "ro-delete", "ro-parts", "ro-conf")


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    plain, sasl = free_port(), free_port()
    audit_path = tmp_path_factory.mktemp("acl-apis-audit") / "audit.log"
    n = SeawayNode(tmp_path_factory.mktemp("acl-apis"), {
        "listeners": f"PLAIN://127.0.0.1:{plain},SASL://127.0.0.1:{sasl}",
        "listener.security.protocol.map": "PLAIN:PLAINTEXT,SASL:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": JAAS,
        "authorizer.class.name": ACL_AUTHORIZER, "super.users": "User:ANONYMOUS",
        "audit.log.file": str(audit_path)},
        port=plain).start()
    n.sasl_port = sasl
    n.audit_path = audit_path
    admin = AdminClient({"bootstrap.servers": n.bootstrap})
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in EXISTING]).values():
        future.result(timeout=20)
    yield n
    n.stop()


def grant(node, *bindings: AclBinding) -> None:
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    for future in admin.create_acls(list(bindings)).values():
        assert future.result(timeout=20) is None


def revoke(node, *bindings: AclBinding) -> None:
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    filters = [AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation,
                                b.permission_type) for b in bindings]
    for future in admin.delete_acls(filters).values():
        future.result(timeout=20)


def allow(name: str, op: AclOperation, rtype=ResourceType.TOPIC, pattern=ResourcePatternType.LITERAL):
    return AclBinding(rtype, name, pattern, "User:alice", "*", op, AclPermissionType.ALLOW)


def as_alice(node, api_key: int, version: int, request):
    async def run():
        conn = BrokerConnection("127.0.0.1", node.sasl_port, sasl=SaslCredentials("PLAIN", "alice", "alice-secret"))
        await conn.connect()
        try:
            return await conn.send(request, api_key, version=version)
        finally:
            await conn.close()
    return anyio.run(run)


def topic_id(node, name: str) -> bytes:
    meta = as_super(node, m.ApiKey.METADATA, 12, m.MetadataRequest(
        topics=[m.MetadataRequest.MetadataRequestTopic(topic_id=bytes(16), name=name)],
        allow_auto_topic_creation=False))
    return bytes(meta.topics[0].topic_id)


def as_super(node, api_key: int, version: int, request):
    async def run():
        conn = await BrokerConnection("127.0.0.1", node.port).connect()
        try:
            return await conn.send(request, api_key, version=version)
        finally:
            await conn.close()
    return anyio.run(run)


@dataclass
class Row:
    name: str
    grants: list
    api_key: int
    version: int
    request: Callable                   # node -> request
    results: Callable                   # response -> {resource: error}
    expected: dict
    extra: Callable | None = None       # response -> None, asserts more
    setup: list = field(default_factory=list)   # topics the super user creates first


CT = m.CreateTopicsRequest
DT = m.DeleteTopicsRequest
CP = m.CreatePartitionsRequest
AC = m.AlterConfigsRequest
IAC = m.IncrementalAlterConfigsRequest


def create_topics(*names):
    return lambda node: CT(topics=[CT.CreatableTopic(name=n, num_partitions=1, replication_factor=1, assignments=[],
                                                     configs=[]) for n in names], timeout_ms=10_000)


def by_name(response, attr="topics"):
    return {t.name: t.error_code for t in getattr(response, attr)}


def configs_hidden(response):
    [result] = [t for t in response.topics if t.name == "ct-hidden"]
    assert result.topic_config_error_code == E.TOPIC_AUTHORIZATION_FAILED and not result.configs


def configs_shown(response):
    [result] = [t for t in response.topics if t.name == "ct-shown"]
    assert result.topic_config_error_code == 0 and any(c.name == "cleanup.policy" for c in result.configs)


def delete_by_id(name):
    return lambda node: DT(topics=[DT.DeleteTopicState(name=None, topic_id=topic_id(node, name))], timeout_ms=10_000)


def deleted_by_id(response):
    return {(t.name, t.error_code) for t in response.responses}


CONFIG_OF = {4: "log.retention.ms"}   # a setting each resource type has


def configs(cls, *resources):
    R, C = cls.AlterConfigsResource, cls.AlterableConfig
    if cls is IAC:
        return lambda node: IAC(resources=[R(resource_type=t, resource_name=n, configs=[
            C(name=CONFIG_OF.get(t, "retention.ms"), config_operation=0, value="1000")]) for t, n in resources],
            validate_only=True)
    return lambda node: AC(resources=[R(resource_type=t, resource_name=n, configs=[
        C(name=CONFIG_OF.get(t, "retention.ms"), value="1000")]) for t, n in resources], validate_only=True)


def by_resource(response):
    return {(r.resource_type, r.resource_name): r.error_code for r in response.responses}


def _directories(response, count: int) -> None:
    assert len(response.results) == count


TAF, CAF, GAF = E.TOPIC_AUTHORIZATION_FAILED, E.CLUSTER_AUTHORIZATION_FAILED, E.GROUP_AUTHORIZATION_FAILED
ROWS = [
    Row("CreateTopics needs CREATE on the topic", [allow("ct-a", AclOperation.CREATE)],
        m.ApiKey.CREATE_TOPICS, 7, create_topics("ct-a", "ct-b"), by_name, {"ct-a": 0, "ct-b": TAF}),
    Row("CreateTopics: CREATE on the cluster covers every topic",
        [allow("kafka-cluster", AclOperation.CREATE, ResourceType.BROKER)],
        m.ApiKey.CREATE_TOPICS, 5, create_topics("ct-c1", "ct-c2"), by_name, {"ct-c1": 0, "ct-c2": 0}),
    Row("CreateTopics returns configs only with DESCRIBE_CONFIGS", [allow("ct-hidden", AclOperation.CREATE)],
        m.ApiKey.CREATE_TOPICS, 7, create_topics("ct-hidden"), by_name, {"ct-hidden": 0}, configs_hidden),
    Row("CreateTopics with DESCRIBE_CONFIGS returns configs",
        [allow("ct-shown", AclOperation.CREATE), allow("ct-shown", AclOperation.DESCRIBE_CONFIGS)],
        m.ApiKey.CREATE_TOPICS, 7, create_topics("ct-shown"), by_name, {"ct-shown": 0}, configs_shown),
    Row("DeleteTopics: an undescribable topic is TOPIC_AUTHORIZATION_FAILED, existing or not", [],
        m.ApiKey.DELETE_TOPICS, 5, lambda node: DT(topic_names=["secret", "no-such-topic"], timeout_ms=10_000),
        lambda r: by_name(r, "responses"), {"secret": TAF, "no-such-topic": TAF}),
    Row("DeleteTopics: describable but not deletable is refused; describable and absent is unknown",
        [allow("ro-", AclOperation.DESCRIBE, pattern=ResourcePatternType.PREFIXED)],
        m.ApiKey.DELETE_TOPICS, 4, lambda node: DT(topic_names=["ro-delete", "ro-absent"], timeout_ms=10_000),
        lambda r: by_name(r, "responses"), {"ro-delete": TAF, "ro-absent": E.UNKNOWN_TOPIC_OR_PARTITION}),
    Row("DeleteTopics by id of an undescribable topic does not name it", [],
        m.ApiKey.DELETE_TOPICS, 6, delete_by_id("secret"), deleted_by_id, {(None, TAF)}),
    Row("DeleteTopics with DELETE deletes", [allow("dt-gone", AclOperation.DELETE)],
        m.ApiKey.DELETE_TOPICS, 6,
        lambda node: DT(topics=[DT.DeleteTopicState(name="dt-gone", topic_id=bytes(16))], timeout_ms=10_000),
        lambda r: by_name(r, "responses"), {"dt-gone": 0}, setup=["dt-gone"]),
    Row("CreatePartitions needs ALTER on the topic", [allow("ro-parts", AclOperation.DESCRIBE)],
        m.ApiKey.CREATE_PARTITIONS, 3,
        lambda node: CP(topics=[CP.CreatePartitionsTopic(name="ro-parts", count=2, assignments=None)],
                        timeout_ms=10_000, validate_only=True),
        lambda r: by_name(r, "results"), {"ro-parts": TAF}),
    Row("CreatePartitions with ALTER goes ahead", [allow("ro-alter", AclOperation.ALTER)],
        m.ApiKey.CREATE_PARTITIONS, 3,
        lambda node: CP(topics=[CP.CreatePartitionsTopic(name="ro-alter", count=2, assignments=None)],
                        timeout_ms=10_000, validate_only=True),
        lambda r: by_name(r, "results"), {"ro-alter": 0}),
    Row("AlterConfigs: ALTER_CONFIGS on the topic, on the cluster for brokers",
        [allow("ro-conf", AclOperation.ALTER_CONFIGS)],
        m.ApiKey.ALTER_CONFIGS, 2, configs(AC, (2, "ro-conf"), (2, "secret"), (4, "1")),
        by_resource, {(2, "ro-conf"): 0, (2, "secret"): TAF, (4, "1"): CAF}),
    Row("IncrementalAlterConfigs: topics, brokers, broker loggers and groups", [],
        m.ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, configs(IAC, (2, "secret"), (4, ""), (8, "1"), (32, "g")),
        by_resource, {(2, "secret"): TAF, (4, ""): CAF, (8, "1"): CAF, (32, "g"): GAF}),
    Row("IncrementalAlterConfigs with ALTER_CONFIGS on the cluster alters the broker",
        [allow("kafka-cluster", AclOperation.ALTER_CONFIGS, ResourceType.BROKER)],
        m.ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, configs(IAC, (4, "")), by_resource, {(4, ""): E.NONE}),
    Row("DescribeLogDirs needs DESCRIBE on the cluster, and says nothing without it", [],
        m.ApiKey.DESCRIBE_LOG_DIRS, 4, lambda node: m.DescribeLogDirsRequest(topics=None),
        lambda r: {"cluster": r.error_code}, {"cluster": CAF}, lambda r: _directories(r, 0)),
    Row("DescribeLogDirs with DESCRIBE on the cluster lists the directories",
        [allow("kafka-cluster", AclOperation.DESCRIBE, ResourceType.BROKER)],
        m.ApiKey.DESCRIBE_LOG_DIRS, 4, lambda node: m.DescribeLogDirsRequest(topics=None),
        lambda r: {"cluster": r.error_code}, {"cluster": 0}, lambda r: _directories(r, 1)),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_each_admin_api_checks_what_kafka_checks(node, row):
    if row.setup:
        admin = AdminClient({"bootstrap.servers": node.bootstrap})
        for future in admin.create_topics([NewTopic(t, 1, 1) for t in row.setup]).values():
            future.result(timeout=20)
    if row.grants:
        grant(node, *row.grants)
    try:
        response = as_alice(node, row.api_key, row.version, row.request(node))
    finally:   # each row's ACLs are its own
        if row.grants:
            revoke(node, *row.grants)
    got = row.results(response)
    if isinstance(row.expected, set):
        assert got == row.expected
    else:
        assert {k: E(v).name for k, v in got.items()} == {k: E(v).name for k, v in row.expected.items()}
    if row.extra is not None:
        row.extra(response)


# --- the controller listener ------------------------------------------------------------------

def test_the_controller_listener_authorizes_every_api(tmp_path):
    """A dedicated controller with ACLs on: alice (no ACLs) is refused every node-to-node RPC
    and every admin API with Kafka's errors, while the nodes (super users) run the cluster."""
    from core.raft import wire as raft_wire
    from core.raft.messages import DescribeQuorumRequest, VoteRequest
    from tests.support.cluster import KRaftCluster
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="node" '
            'password="node-secret" user_node="node-secret" user_alice="alice-secret";')
    secure = {"listener.security.protocol.map": "PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
              "sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": jaas,
              "authorizer.class.name": ACL_AUTHORIZER, "super.users": "User:node"}
    with KRaftCluster(tmp_path, controllers=1, brokers=1, overrides=secure) as cluster:
        port = cluster.controller_ports[1]

        def ask(user: str, api_key: int, version: int, request):
            async def run():
                conn = BrokerConnection("127.0.0.1", port, sasl=SaslCredentials("PLAIN", user, f"{user}-secret"))
                await conn.connect()
                try:
                    return await conn.send(request, api_key, version=version)
                finally:
                    await conn.close()
            return anyio.run(run)

        vote = raft_wire.to_wire(VoteRequest(cluster_id=cluster.cluster_id, candidate_epoch=99, candidate_id=7,
                                             last_offset_epoch=0, last_offset=0), 1)[1]
        assert ask("alice", m.ApiKey.VOTE, 1, vote).error_code == CAF
        quorum = raft_wire.to_wire(DescribeQuorumRequest(), 1)[1]
        deadline = time.monotonic() + 30
        while ask("node", m.ApiKey.DESCRIBE_QUORUM, 1, quorum).topics[0].partitions[0].leader_id < 0:
            assert time.monotonic() < deadline, "no quorum leader:\n" + cluster.log_tails()
            time.sleep(0.2)
        assert ask("alice", m.ApiKey.DESCRIBE_QUORUM, 1, quorum).error_code == CAF
        assert ask("node", m.ApiKey.DESCRIBE_QUORUM, 1, quorum).error_code == 0
        described = ask("alice", m.ApiKey.DESCRIBE_CLUSTER, 1, m.DescribeClusterRequest(
            include_cluster_authorized_operations=False, endpoint_type=2))
        assert described.error_code == CAF and described.brokers == []
        beat = ask("alice", m.ApiKey.BROKER_HEARTBEAT, 0, m.BrokerHeartbeatRequest(
            broker_id=2, broker_epoch=0, current_metadata_offset=0, want_fence=False, want_shut_down=False))
        assert beat.error_code == CAF
        created = ask("alice", m.ApiKey.CREATE_TOPICS, 7, create_topics("direct")(None))
        assert by_name(created) == {"direct": TAF}
        acls = ask("alice", m.ApiKey.CREATE_ACLS, 3, m.CreateAclsRequest(creations=[
            m.CreateAclsRequest.AclCreation(resource_type=2, resource_name="x", resource_pattern_type=3,
                                            principal="User:alice", host="*", operation=3, permission_type=3)]))
        assert [r.error_code for r in acls.results] == [CAF]
        # The nodes themselves are served: the broker registers, is unfenced, and a topic is placed on it.
        deadline = time.monotonic() + 30
        while (code := ask("node", m.ApiKey.CREATE_TOPICS, 7, create_topics("by-node")(None)).topics[0].error_code):
            assert code == E.INVALID_REPLICATION_FACTOR and time.monotonic() < deadline, \
                f"{E(code).name}:\n" + cluster.log_tails()
            time.sleep(0.3)


# --- the client APIs ------------------------------------------------------------------------------

def metadata(node, *topics, ids=(), create=False, version=12):
    T = m.MetadataRequest.MetadataRequestTopic
    wanted = [T(topic_id=bytes(16), name=t) for t in topics] + [T(topic_id=i, name=None) for i in ids]
    return as_alice(node, m.ApiKey.METADATA, version, m.MetadataRequest(
        topics=wanted if (topics or ids) else None, allow_auto_topic_creation=create))


def test_metadata_never_reveals_a_topic_alice_may_not_describe(node):
    grant(node, allow("md-seen", AclOperation.DESCRIBE))
    as_super(node, m.ApiKey.CREATE_TOPICS, 7, create_topics("md-seen")(node))
    listed = {t.name for t in metadata(node).topics}
    assert "md-seen" in listed and not listed & {"secret", "ct-c1", "ct-c2"}   # what alice may not see is left out
    named = {(t.name, t.error_code, bytes(t.topic_id)) for t in metadata(node, "secret", "md-absent").topics}
    assert named == {("secret", TAF, bytes(16)), ("md-absent", TAF, bytes(16))}   # the same, existing or not
    [by_id] = metadata(node, ids=[topic_id(node, "secret")]).topics
    assert (by_id.name, by_id.error_code) == (None, TAF)


def test_auto_creation_needs_create(node):
    grant(node, allow("ac-", AclOperation.DESCRIBE, pattern=ResourcePatternType.PREFIXED),
          allow("ac-yes", AclOperation.CREATE))
    codes = {t.name: t.error_code for t in metadata(node, "ac-no", "ac-yes", create=True).topics}
    assert codes["ac-no"] == TAF and codes["ac-yes"] in (0, E.LEADER_NOT_AVAILABLE)
    assert metadata(node, "ac-no").topics[0].error_code == E.UNKNOWN_TOPIC_OR_PARTITION   # not created


def test_produce_and_fetch_say_unauthorized_before_unknown(node):
    grant(node, allow("pf-", AclOperation.DESCRIBE, pattern=ResourcePatternType.PREFIXED))
    P = m.ProduceRequest
    produced = as_alice(node, m.ApiKey.PRODUCE, 9, P(acks=-1, timeout_ms=5000, topic_data=[
        P.TopicProduceData(name=n, partition_data=[P.PartitionProduceData(index=0, records=None)])
        for n in ("secret", "pf-absent")]))
    assert {t.name: t.partition_responses[0].error_code for t in produced.responses} == \
        {"secret": TAF, "pf-absent": TAF}   # WRITE is checked first, so absence is not revealed
    fetched = fetch(node, ["secret", "pf-absent"])
    assert fetched == {"secret": TAF, "pf-absent": TAF}


def fetch(node, names, replica_id=-1, version=12):
    F = m.FetchRequest
    response = as_alice(node, m.ApiKey.FETCH, version, F(
        replica_id=replica_id, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
        session_epoch=-1, topics=[F.FetchTopic(topic=n, partitions=[F.FetchPartition(
            partition=0, fetch_offset=0, partition_max_bytes=1 << 20)]) for n in names],
        forgotten_topics_data=[], rack_id=""))
    return {t.topic: t.partitions[0].error_code for t in response.responses}


def test_cve_2018_1288_a_replica_fetch_without_cluster_action_reads_nothing(node):
    """A client that sets a replica id must not read as a follower (which ignores READ ACLs and
    moves the high watermark): without CLUSTER_ACTION every partition is refused, even one it
    may READ."""
    grant(node, allow("ro-", AclOperation.READ, pattern=ResourcePatternType.PREFIXED))
    assert fetch(node, ["ro-alter"]) == {"ro-alter": 0}
    assert fetch(node, ["ro-alter", "secret"], replica_id=1) == {"ro-alter": TAF, "secret": TAF}


def test_idempotence_needs_write_on_some_topic_or_idempotent_write(tmp_path_factory):
    """KIP-679. A node of its own: the ACLs that grant WRITE elsewhere in this module would
    already satisfy it."""
    plain, sasl = free_port(), free_port()
    n = SeawayNode(tmp_path_factory.mktemp("acl-idempotent"), {
        "listeners": f"PLAIN://127.0.0.1:{plain},SASL://127.0.0.1:{sasl}",
        "listener.security.protocol.map": "PLAIN:PLAINTEXT,SASL:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": JAAS,
        "authorizer.class.name": ACL_AUTHORIZER, "super.users": "User:ANONYMOUS"}, port=plain).start()
    try:
        n.sasl_port = sasl
        request = m.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000,
                                          producer_id=-1, producer_epoch=-1)
        assert as_alice(n, m.ApiKey.INIT_PRODUCER_ID, 4, request).error_code == CAF
        grant(n, allow("idem-", AclOperation.READ, pattern=ResourcePatternType.PREFIXED))
        assert as_alice(n, m.ApiKey.INIT_PRODUCER_ID, 4, request).error_code == CAF    # READ is not enough
        grant(n, AclBinding(ResourceType.TOPIC, "idem-x", ResourcePatternType.PREFIXED, "User:alice", "*",
                            AclOperation.WRITE, AclPermissionType.DENY),
              allow("idem-x", AclOperation.WRITE))
        assert as_alice(n, m.ApiKey.INIT_PRODUCER_ID, 4, request).error_code == CAF    # denied where allowed
        grant(n, allow("idem-", AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED))
        answer = as_alice(n, m.ApiKey.INIT_PRODUCER_ID, 4, request)
        assert answer.error_code == 0 and answer.producer_id >= 0
    finally:
        n.stop()


def test_list_groups_shows_only_describable_groups_unless_the_cluster_is_describable(node):
    from confluent_kafka import Consumer, TopicPartition
    for group in ("lg-mine", "lg-other"):
        c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": group, "enable.auto.commit": False})
        c.commit(offsets=[TopicPartition("ro-conf", 0, 1)], asynchronous=False)
        c.close()
    grant(node, allow("lg-mine", AclOperation.DESCRIBE, ResourceType.GROUP))
    listed = as_alice(node, m.ApiKey.LIST_GROUPS, 4, m.ListGroupsRequest(states_filter=[]))
    assert {g.group_id for g in listed.groups} & {"lg-mine", "lg-other"} == {"lg-mine"}
    described = as_alice(node, m.ApiKey.DESCRIBE_CLUSTER, 1, m.DescribeClusterRequest(
        include_cluster_authorized_operations=True, endpoint_type=1))
    assert described.error_code == 0 and described.cluster_authorized_operations == 0
    grant(node, allow("kafka-cluster", AclOperation.DESCRIBE, ResourceType.BROKER))
    listed = as_alice(node, m.ApiKey.LIST_GROUPS, 4, m.ListGroupsRequest(states_filter=[]))
    assert {"lg-mine", "lg-other"} <= {g.group_id for g in listed.groups}


# --- the audit log -----------------------------------------------------------------------------

def audit_lines(node, since: int = 0, timeout: float = 10.0, want=lambda lines: True) -> list[dict]:
    import json
    deadline = time.monotonic() + timeout
    while True:
        text = node.audit_path.read_text() if node.audit_path.exists() else ""
        lines = [json.loads(line) for line in text.splitlines()[since:]]
        if want(lines) or time.monotonic() > deadline:
            return lines


def test_the_audit_log_records_logins_denials_and_changes_but_not_filtering(node):
    import json
    before = len(node.audit_path.read_text().splitlines()) if node.audit_path.exists() else 0
    metadata(node)                                               # filtering only: no line
    fetch(node, ["secret"])                                      # a denial
    grant(node, allow("au-", AclOperation.CREATE, pattern=ResourcePatternType.PREFIXED))   # an ACL change
    as_alice(node, m.ApiKey.CREATE_TOPICS, 7, create_topics("au-new")(node))              # a change, allowed
    with pytest.raises(Exception):
        asyncio_login(node, "alice", "wrong")                     # a failed login
    lines = audit_lines(node, before, want=lambda ls: any(e["result"] == "FAILED" for e in ls))
    keys = ["time", "time_ms", "kind", "principal", "client", "listener", "api", "resource_type", "resource_name",
            "operation", "result", "detail"]
    assert all(list(line) == keys for line in lines), lines[:3]
    seen = {(e["kind"], e["principal"], e["api"], e["resource_name"], e["operation"], e["result"]) for e in lines}
    assert ("authentication", "User:alice", "SaslAuthenticate", "", "SASL/PLAIN", "SUCCEEDED") in seen
    assert ("authorization", "User:alice", "Fetch", "secret", "READ", "DENIED") in seen
    assert ("authorization", "User:ANONYMOUS", "CreateAcls", "kafka-cluster", "ALTER", "ALLOWED") in seen
    assert ("authorization", "User:alice", "CreateTopics", "au-new", "CREATE", "ALLOWED") in seen
    assert any(e["kind"] == "authentication" and e["result"] == "FAILED" and e["listener"] == "SASL"
               and "Invalid username or password" in e["detail"] for e in lines)
    # Metadata for all topics left "secret" out without a line; nothing else was asked of it.
    assert not [e for e in lines if e["api"] == "Metadata"], [json.dumps(e) for e in lines if e["api"] == "Metadata"]
    assert oct(node.audit_path.stat().st_mode & 0o777) == "0o600"


def asyncio_login(node, user: str, password: str) -> None:
    async def run():
        conn = BrokerConnection("127.0.0.1", node.sasl_port, sasl=SaslCredentials("PLAIN", user, password))
        await conn.connect()
        await conn.close()
    anyio.run(run)


def test_a_one_node_cluster_with_acls_and_no_super_user_runs_and_guards_its_controller(tmp_path):
    """The node reaches its own controller listener: with ACLs on, that listener asks for a
    login only the node knows, so the node registers and serves, and a local process that
    finds the port gets nothing from it."""
    import re
    import socket
    from tests.support import wire
    n = SeawayNode(tmp_path, {"authorizer.class.name": ACL_AUTHORIZER}).start()
    try:
        created = as_super(n, m.ApiKey.CREATE_TOPICS, 7, create_topics("nobody-may")(n))
        assert by_name(created) == {"nobody-may": TAF}       # ANONYMOUS is no one special here
        port = int(re.search(r"CONTROLLER://127\.0\.0\.1:(\d+)", n.log_path.read_text()).group(1))
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(wire.frame(m.ApiKey.DESCRIBE_QUORUM, 1, m.DescribeQuorumRequest(topics=[])))
            assert wire.closed_without_answer(sock)
    finally:
        n.stop()
