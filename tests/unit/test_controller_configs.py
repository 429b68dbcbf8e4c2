"""IncrementalAlterConfigs and AlterConfigs for topics and brokers, and how a topic's effective
config resolves."""
from __future__ import annotations

import pytest

from core.controller import ControllerConfig
from core.controller.configs import (SOURCE_DEFAULT, SOURCE_DYNAMIC_BROKER,
                                     SOURCE_DYNAMIC_DEFAULT_BROKER, SOURCE_STATIC_BROKER,
                                     SOURCE_TOPIC, resolve_topic_config, unclean_enabled)
from core.controller.image import MetadataImage
from core.protocol import messages as m
from core.protocol.errors import ErrorCode as E

from tests.support.controller_harness import CONTROLLER_ID, Harness

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
TOPIC, BROKER = 2, 4
IAC = m.IncrementalAlterConfigsRequest
A = m.AlterConfigsRequest


@pytest.fixture
def h():
    harness = Harness(ControllerConfig(controller_ids=frozenset({100, 101})))
    harness.add_brokers({1: None})
    harness.create_topic("t", configs={"retention.ms": "100", "cleanup.policy": "compact"})
    return harness


def incremental(h, *resources, validate_only=False, version=1):
    request = IAC(resources=[IAC.AlterConfigsResource(
        resource_type=rtype, resource_name=name,
        configs=[IAC.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops])
        for rtype, name, ops in resources], validate_only=validate_only)
    return h.call("incremental_alter_configs", request, version)


def legacy(h, *resources, validate_only=False, version=2):
    request = A(resources=[A.AlterConfigsResource(
        resource_type=rtype, resource_name=name,
        configs=[A.AlterableConfig(name=k, value=v) for k, v in configs.items()])
        for rtype, name, configs in resources], validate_only=validate_only)
    return h.call("alter_configs", request, version)


def changes(records):
    return [(r.resource_type, r.resource_name, r.name, r.value) for r in records]


# --------------------------------------------------------------------------- incremental


def test_set_delete_append_subtract_on_a_topic(h):
    result = incremental(h, (TOPIC, "t", [("retention.ms", SET, "200"),
                                          ("cleanup.policy", APPEND, "delete"),
                                          ("segment.ms", DELETE, None)]))
    assert [(r.error_code, r.error_message) for r in result.response.responses] == [(0, None)]
    assert changes(result.records) == [(TOPIC, "t", "retention.ms", "200"),
                                       (TOPIC, "t", "cleanup.policy", "compact,delete")]
    result = incremental(h, (TOPIC, "t", [("cleanup.policy", SUBTRACT, "compact"),
                                          ("retention.ms", DELETE, None)]))
    assert changes(result.records) == [(TOPIC, "t", "cleanup.policy", "delete"),
                                       (TOPIC, "t", "retention.ms", None)]
    assert dict(h.image.topic_config("t")) == {"cleanup.policy": "delete"}


def test_append_to_an_unset_list_starts_from_its_default(h):
    h.create_topic("u")
    result = incremental(h, (TOPIC, "u", [("cleanup.policy", APPEND, "compact")]))
    assert changes(result.records) == [(TOPIC, "u", "cleanup.policy", "delete,compact")]


def test_an_unchanged_topic_value_writes_nothing_but_a_broker_value_always_does(h):
    assert incremental(h, (TOPIC, "t", [("retention.ms", SET, "100")])).records == []
    result = incremental(h, (BROKER, "", [("log.retention.ms", SET, "5")]))
    assert changes(result.records) == [(BROKER, "", "log.retention.ms", "5")]
    result = incremental(h, (BROKER, "", [("log.retention.ms", SET, "5")]))
    assert changes(result.records) == [(BROKER, "", "log.retention.ms", "5")]


BAD_INCREMENTAL = [
    ("append to a non-list", (TOPIC, "t", [("retention.ms", APPEND, "1")]), E.INVALID_CONFIG,
     "Can't APPEND to key retention.ms because its type is not LIST."),
    ("subtract from a non-list", (TOPIC, "t", [("retention.ms", SUBTRACT, "1")]),
     E.INVALID_CONFIG, "Can't SUBTRACT to key retention.ms"),
    ("set null", (TOPIC, "t", [("retention.ms", SET, None)]), E.INVALID_CONFIG,
     "Null value not supported for topic configs: retention.ms"),
    ("unknown operation", (TOPIC, "t", [("retention.ms", 7, "1")]), E.INVALID_REQUEST,
     "Unknown config operation 7"),
    ("bad value", (TOPIC, "t", [("segment.ms", SET, "1"), ("retention.ms", SET, "x")]),
     E.INVALID_CONFIG, "retention.ms"),
    ("unknown topic config", (TOPIC, "t", [("retention.foo", SET, "1")]), E.INVALID_CONFIG,
     "retention.foo"),
    ("emptied cleanup policy", (TOPIC, "t", [("cleanup.policy", SUBTRACT, "compact")]),
     E.INVALID_CONFIG, "cleanup.policy"),
    ("unknown topic", (TOPIC, "nope", [("retention.ms", SET, "1")]),
     E.UNKNOWN_TOPIC_OR_PARTITION, "The topic 'nope' does not exist."),
    ("values are checked before existence", (TOPIC, "nope", [("retention.ms", SET, "x")]),
     E.INVALID_CONFIG, "retention.ms"),
    ("default topic resource", (TOPIC, "", [("retention.ms", SET, "1")]), E.INVALID_REQUEST,
     "Default topic resources are not allowed."),
    ("illegal topic name", (TOPIC, "a b", [("retention.ms", SET, "1")]),
     E.INVALID_TOPIC_EXCEPTION, "Topic name is invalid"),
    ("broker name not a number", (BROKER, "b1", [("log.retention.ms", SET, "1")]),
     E.INVALID_REQUEST, "Unable to parse broker name as a base 10 number."),
    ("negative broker", (BROKER, "-3", [("log.retention.ms", SET, "1")]), E.INVALID_REQUEST,
     "Invalid negative broker ID."),
    ("unregistered broker", (BROKER, "7", [("log.retention.ms", SET, "1")]),
     E.BROKER_ID_NOT_REGISTERED, "No node with id 7 found."),
    # Broker settings: Kafka's DynamicBrokerConfig rules, each broken one INVALID_REQUEST.
    ("a static broker config", (BROKER, "", [("node.id", SET, "4")]),
     E.INVALID_REQUEST, "Cannot update these configs dynamically: node.id"),
    ("listeners cannot change under KRaft", (BROKER, "1", [("listeners", SET, "PLAINTEXT://:1")]),
     E.INVALID_REQUEST, "Advertised listeners cannot be altered when using a Raft-based metadata quorum"),
    ("unknown broker config", (BROKER, "1", [("no.such.thing", SET, "1")]), E.INVALID_REQUEST,
     "Unknown broker configs: no.such.thing"),
    ("bad broker value", (BROKER, "", [("unclean.leader.election.enable", SET, "maybe")]),
     E.INVALID_REQUEST, "unclean.leader.election.enable"),
    ("a thread count below one", (BROKER, "", [("num.io.threads", SET, "0")]),
     E.INVALID_REQUEST, "num.io.threads"),
    ("a keystore without its listener", (BROKER, "1", [("ssl.keystore.location", SET, "/k.jks")]),
     E.INVALID_REQUEST, "only per-listener using the listener prefix: ssl.keystore.location"),
    ("a listener's keystore at the cluster default", (BROKER, "", [
        ("listener.name.external.ssl.keystore.location", SET, "/k.jks")]),
     E.INVALID_REQUEST, "broker id must be specified: listener.name.external.ssl.keystore.location"),
    ("a listener setting Kafka does not reconfigure", (BROKER, "1", [("listener.name.external.log.dirs", SET, "/x")]),
     E.INVALID_REQUEST, "listener.name.external.log.dirs"),
    ("resource type the controller does not keep", (8, "1", [("kafka", SET, "DEBUG")]),
     E.INVALID_REQUEST, "Resource type 8"),
    ("unknown resource type", (99, "x", []), E.UNSUPPORTED_VERSION, "Unknown resource type 99."),
    ("key given twice", (TOPIC, "t", [("retention.ms", SET, "1"), ("retention.ms", DELETE, None)]),
     E.INVALID_REQUEST, "'retention.ms' appears more than once"),
]


@pytest.mark.parametrize("resource, code, message", [c[1:] for c in BAD_INCREMENTAL],
                         ids=[c[0] for c in BAD_INCREMENTAL])
def test_incremental_rejects(h, resource, code, message):
    before = h.image
    result = incremental(h, resource)
    [res] = result.response.responses
    assert (res.resource_type, res.resource_name) == resource[:2]
    assert res.error_code == code and message in res.error_message
    assert result.records == [] and h.image == before


# Kafka's dynamic broker settings, per broker and cluster-wide (Kafka 3.9's update modes).
KAFKA_DYNAMIC = [
    ("", "num.io.threads", "16"), ("", "num.replica.fetchers", "4"), ("", "background.threads", "20"),
    ("", "num.network.threads", "6"), ("", "max.connections", "1000"), ("", "max.connections.per.ip", "200"),
    ("", "max.connections.per.ip.overrides", "10.0.0.1:5"), ("", "max.connection.creation.rate", "50"),
    ("", "log.cleaner.threads", "2"), ("", "log.cleaner.io.max.bytes.per.second", "1048576.0"),
    ("", "log.cleaner.dedupe.buffer.size", "134217728"), ("", "log.cleaner.backoff.ms", "15000"),
    ("", "message.max.bytes", "2097152"), ("", "log.retention.ms", "86400000"), ("", "log.segment.bytes", "1048576"),
    ("", "metric.reporters", ""), ("", "producer.id.expiration.ms", "86400000"),
    ("", "transaction.partition.verification.enable", "false"), ("", "leader.replication.throttled.rate", "1000"),
    ("", "remote.log.manager.copy.max.bytes.per.second", "1000000"),
    ("", "replica.alter.log.dirs.io.max.bytes.per.second", "1000"),
    ("", "listener.name.external.max.connections", "10"),
    ("1", "listener.name.external.ssl.keystore.location", "/etc/kafka/k.jks"),
    ("1", "listener.name.external.ssl.keystore.password", "secret"),
    ("1", "listener.name.internal.scram-sha-512.sasl.jaas.config", "x required;"),
    ("1", "ssl.client.auth", "required"), ("1", "sasl.enabled.mechanisms", "SCRAM-SHA-512,PLAIN"),
    ("1", "listener.name.external.ssl.client.auth", "requested"),
]


@pytest.mark.parametrize("resource_name, name, value", KAFKA_DYNAMIC, ids=[c[1] for c in KAFKA_DYNAMIC])
def test_every_dynamic_broker_setting_kafka_takes_is_taken(h, resource_name, name, value):
    result = incremental(h, (BROKER, resource_name, [(name, SET, value)]))
    [res] = result.response.responses
    assert res.error_code == 0, res.error_message
    assert changes(result.records) == [(BROKER, resource_name, name, value)]


@pytest.mark.parametrize("name, value", [("ssl.client.auth", "required"),
                                         ("listener.name.external.ssl.truststore.location", "/t.jks")])
def test_a_brokers_own_settings_are_refused_cluster_wide(h, name, value):
    [res] = incremental(h, (BROKER, "", [(name, SET, value)])).response.responses
    assert res.error_code == E.INVALID_REQUEST and "broker id must be specified" in res.error_message


def test_broker_resources_may_name_brokers_and_controllers(h):
    result = incremental(h, (BROKER, "1", [("log.retention.ms", SET, "7")]),
                         (BROKER, str(CONTROLLER_ID), [("log.retention.ms", SET, "8")]),
                         (BROKER, "101", [("log.retention.ms", SET, "9")]))
    assert [r.error_code for r in result.response.responses] == [0, 0, 0]
    assert h.image.broker_config(1) == {"log.retention.ms": "7"}


def test_each_resource_stands_alone_and_duplicates_fail(h):
    result = incremental(h, (TOPIC, "t", [("retention.ms", SET, "x")]),
                         (BROKER, "", [("log.retention.ms", SET, "5")]),
                         (BROKER, "1", [("log.retention.ms", SET, "6")]),
                         (BROKER, "1", [("log.retention.ms", SET, "7")]))
    codes = [r.error_code for r in result.response.responses]
    assert codes == [E.INVALID_CONFIG, 0, E.INVALID_REQUEST, E.INVALID_REQUEST]
    assert result.response.responses[2].error_message == "Duplicate resource."
    assert changes(result.records) == [(BROKER, "", "log.retention.ms", "5")]


@pytest.mark.parametrize("version", [0, 1])
def test_incremental_validate_only(h, version):
    before = h.image
    result = incremental(h, (TOPIC, "t", [("retention.ms", SET, "9")]), validate_only=True,
                         version=version)
    assert result.response.responses[0].error_code == 0
    assert result.records == [] and h.image == before


# --------------------------------------------------------------------------- legacy AlterConfigs


@pytest.mark.parametrize("version", [0, 1, 2])
def test_alter_configs_replaces_the_whole_topic_config(h, version):
    result = legacy(h, (TOPIC, "t", {"retention.ms": "100", "segment.ms": "50"}), version=version)
    assert result.response.responses[0].error_code == 0
    assert changes(result.records) == [(TOPIC, "t", "segment.ms", "50"),
                                       (TOPIC, "t", "cleanup.policy", None)]
    assert dict(h.image.topic_config("t")) == {"retention.ms": "100", "segment.ms": "50"}


def test_alter_configs_for_brokers_rewrites_every_key(h):
    legacy(h, (BROKER, "", {"log.retention.ms": "5", "log.segment.bytes": "100000"}))
    result = legacy(h, (BROKER, "", {"log.retention.ms": "5"}))
    assert changes(result.records) == [(BROKER, "", "log.retention.ms", "5"),
                                       (BROKER, "", "log.segment.bytes", None)]


@pytest.mark.parametrize("resource, code, message", [
    ((TOPIC, "t", {"retention.ms": None}), E.INVALID_CONFIG,
     "Null value not supported for topic configs: retention.ms"),
    ((TOPIC, "t", {"retention.ms": "-5"}), E.INVALID_CONFIG, "retention.ms"),
    ((TOPIC, "nope", {"retention.ms": "5"}), E.UNKNOWN_TOPIC_OR_PARTITION, "nope"),
    ((BROKER, "", {"node.id": "5"}), E.INVALID_REQUEST, "Cannot update these configs dynamically: node.id"),
])
def test_alter_configs_rejects(h, resource, code, message):
    result = legacy(h, resource)
    [res] = result.response.responses
    assert res.error_code == code and message in res.error_message
    assert result.records == []


def test_alter_configs_validate_only(h):
    result = legacy(h, (TOPIC, "t", {}), validate_only=True)
    assert result.response.responses[0].error_code == 0 and result.records == []
    assert h.image.topic_config("t")


# --------------------------------------------------------------------------- resolution


def layered_image(topic=None, node=None, cluster=None) -> MetadataImage:
    records = [m.TopicRecord(name="t", topic_id=bytes([1] * 16))]
    for rtype, rname, value in ((TOPIC, "t", topic), (BROKER, "100", node), (BROKER, "", cluster)):
        if value is not None:
            key = "unclean.leader.election.enable"
            records.append(m.ConfigRecord(resource_type=rtype, resource_name=rname, name=key,
                                          value=value))
    return MetadataImage.empty().apply_all(records)


@pytest.mark.parametrize("topic, node, cluster, static, expect", [
    (None, None, None, False, (False, SOURCE_DEFAULT)),
    (None, None, None, True, (True, SOURCE_STATIC_BROKER)),
    (None, None, "true", False, (True, SOURCE_DYNAMIC_DEFAULT_BROKER)),
    (None, "false", "true", True, (False, SOURCE_DYNAMIC_BROKER)),
    ("true", "false", "false", False, (True, SOURCE_TOPIC)),
    ("TRUE ", None, None, False, (True, SOURCE_TOPIC)),
    ("garbage", None, None, True, (False, SOURCE_TOPIC)),
])
def test_unclean_resolves_topic_then_node_then_cluster_then_static(topic, node, cluster, static,
                                                                   expect):
    image = layered_image(topic, node, cluster)
    config = ControllerConfig(unclean_leader_election_enable=static)
    _, source = resolve_topic_config(image, config, 100, "unclean.leader.election.enable",
                                     image.topic_config("t"))
    assert (unclean_enabled(image, config, 100, "t"), source) == expect
