"""Dynamic broker configs on a real node: every setting Kafka lets change at run time is taken
(per broker and cluster-wide), the rest are refused as Kafka refuses them (INVALID_REQUEST,
naming the setting), and DescribeConfigs tells where each value comes from, with its synonyms.
A broker's own resource through confluent-kafka's AdminClient; the cluster-wide default (the
resource "") with raw requests, since confluent-kafka refuses an empty resource name."""
from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   ConfigSource, ResourceType)

from core.protocol import messages as m
from tests.support.node import SeawayNode
from tests.support.wire import call

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with SeawayNode(tmp_path_factory.mktemp("node"), {"num.partitions": "1"}) as n:
        n.admin = AdminClient({"bootstrap.servers": n.bootstrap, "log_level": 3})
        yield n


IA = m.IncrementalAlterConfigsRequest
SET, DELETE = 0, 1


def _alter(node, broker: str, *entries: tuple[str, str | None], validate_only: bool = False) -> tuple[int, str]:
    """(error code, message) of the resource's answer."""
    if broker:
        ops = [ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET if value is not None
                           else AlterConfigOpType.DELETE) for name, value in entries]
        resource = ConfigResource(ResourceType.BROKER, broker, incremental_configs=ops)
        try:
            for future in node.admin.incremental_alter_configs([resource], validate_only=validate_only).values():
                future.result(15)
        except KafkaException as exc:
            return exc.args[0].code(), exc.args[0].str()
        return 0, ""
    req = IA(validate_only=validate_only, resources=[IA.AlterConfigsResource(
        resource_type=4, resource_name="", configs=[
            IA.AlterableConfig(name=name, config_operation=SET if value is not None else DELETE, value=value)
            for name, value in entries])])
    [answer] = call(node, 44, 1, req).responses
    return answer.error_code, answer.error_message or ""


def _describe(node, broker: str) -> dict[str, tuple[str | None, int, bool]]:
    """name -> (value, source, read-only)."""
    if broker:
        resource = ConfigResource(ResourceType.BROKER, broker)
        found = next(iter(node.admin.describe_configs([resource]).values())).result(15)
        return {n: (e.value, e.source, e.is_read_only) for n, e in found.items()}
    req = m.DescribeConfigsRequest(resources=[m.DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=4, resource_name="", configuration_keys=None)], include_synonyms=True)
    [result] = call(node, 32, 4, req).results
    return {c.name: (c.value, c.config_source, c.read_only) for c in result.configs}


def test_per_broker_and_cluster_wide_values_and_where_they_come_from(node):
    assert _alter(node, "", ("log.retention.ms", "3600000"), ("num.io.threads", "12"),
                  ("max.connections", "500")) == (0, "")
    assert _alter(node, "1", ("num.io.threads", "16"), ("listener.name.plaintext.ssl.keystore.password", "s3cret")) \
        == (0, "")
    mine = _describe(node, "1")
    assert mine["num.io.threads"] == ("16", ConfigSource.DYNAMIC_BROKER_CONFIG.value, False)
    assert mine["log.retention.ms"] == ("3600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value, False)
    assert mine["max.connections"][:2] == ("500", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    assert mine["listener.name.plaintext.ssl.keystore.password"][0] is None, "a password is never described"
    assert mine["node.id"][1:] == (ConfigSource.STATIC_BROKER_CONFIG.value, True)
    # every layer that has it, in precedence order (confluent-kafka keys synonyms by name, so
    # the three num.io.threads would be one there: read them off the wire)
    req = m.DescribeConfigsRequest(resources=[m.DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=4, resource_name="1", configuration_keys=["num.io.threads"])], include_synonyms=True)
    [entry] = call(node, 32, 4, req).results[0].configs
    assert [(s.value, s.source) for s in entry.synonyms][:2] == [
        ("16", ConfigSource.DYNAMIC_BROKER_CONFIG.value), ("12", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)]
    cluster = _describe(node, "")
    assert set(cluster) == {"log.retention.ms", "num.io.threads", "max.connections"}, \
        "the default resource holds the cluster-wide values alone"
    assert {source for _, source, _ in cluster.values()} == {ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value}
    assert _alter(node, "1", ("num.io.threads", None)) == (0, "")
    assert _describe(node, "1")["num.io.threads"][0] == "12", "deleted per broker: the cluster's again"


@pytest.mark.parametrize("broker, name, value, says", [
    ("1", "node.id", "7", "Cannot update these configs dynamically: node.id"),
    ("1", "log.dirs", "/tmp/x", "Cannot update these configs dynamically: log.dirs"),
    ("1", "ssl.keystore.location", "/k.jks", "only per-listener using the listener prefix"),
    ("", "listener.name.plaintext.ssl.keystore.location", "/k.jks", "broker id must be specified"),
    ("", "ssl.client.auth", "required", "broker id must be specified"),
    ("1", "num.io.threads", "zero", "num.io.threads"),
    ("1", "no.such.setting", "1", "Unknown broker configs: no.such.setting"),
    ("1", "advertised.listeners", "PLAINTEXT://h:1", "Raft-based metadata quorum"),
])
def test_what_kafka_refuses_is_refused(node, broker, name, value, says):
    code, message = _alter(node, broker, (name, value))
    assert code == KafkaError.INVALID_REQUEST and says in message
    assert _describe(node, broker).get(name, (None,))[0] != value, "a refused value was stored"


def test_validate_only_stores_nothing(node):
    assert _alter(node, "1", ("background.threads", "20"), validate_only=True) == (0, "")
    assert _alter(node, "", ("log.cleaner.threads", "3"), validate_only=True) == (0, "")
    assert "background.threads" not in _describe(node, "1")
    assert "log.cleaner.threads" not in _describe(node, "")
