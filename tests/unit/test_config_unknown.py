"""A key neither Seaway nor Kafka knows is a typo until shown otherwise: one line naming where
it came from and the nearest known key, before anything starts; Kafka's keys that Seaway does
not use still load (reported, as Kafka reports unused keys)."""
from __future__ import annotations

import logging

import pytest

from core.cli.main import main
from core.config.broker import BrokerConfig
from core.config.defs import ConfigError
from core.config.unknown import unknown_broker_setting
from regions.settings import broker_setting_problem
from regions.topology import TopologyError, parse_topology


@pytest.mark.parametrize("key, expected", [
    ("log.retention.ms", None),                                 # Seaway's
    ("num.network.threads", None),                              # Kafka's, not used here
    ("listener.name.client.ssl.keystore.type", None),
    ("listener.name.client.scram-sha-512.sasl.jaas.config", None),
    ("log.retension.ms", "log.retension.ms: not a broker setting of Seaway or Kafka (did you mean log.retention.ms?)"),
    ("retention.ms", "retention.ms: not a broker setting of Seaway or Kafka (did you mean log.retention.ms?)"),
    ("min.insync.replica", "min.insync.replica: not a broker setting of Seaway or Kafka (did you mean min.insync.replicas?)"),
    ("listener.name.client.ssl.keystore.typ",
     "listener.name.client.ssl.keystore.typ: not a broker setting of Seaway or Kafka "
     "(did you mean listener.name.client.ssl.keystore.type?)"),
    ("wibble", "wibble: not a broker setting of Seaway or Kafka"),
])
def test_known_and_mistyped_keys(key, expected):
    assert unknown_broker_setting(key) == expected


def test_a_node_config_with_a_typo_fails_and_kafkas_unused_keys_only_warn(caplog, tmp_path):
    with pytest.raises(ConfigError, match=r"^log\.retension\.ms: .*did you mean log\.retention\.ms\?\) \(and 1 more\)$"):
        BrokerConfig({"log.retension.ms": "1", "wibble": "2", "log.dirs": str(tmp_path)})
    with caplog.at_level(logging.WARNING):
        config = BrokerConfig({"num.network.threads": "8", "log.dirs": str(tmp_path)})
    assert config.unused == {} and "supplied but are not used" not in caplog.text   # accepted quietly


@pytest.mark.parametrize("source, flags, message", [
    ("log.retension.ms=5\n", [], "{file}: log.retension.ms: not a broker setting of Seaway or Kafka "
                                 "(did you mean log.retention.ms?)"),
    ("", ["--override", "auto.create.topic.enable=false"],
     "--override auto.create.topic.enable: not a broker setting of Seaway or Kafka "
     "(did you mean auto.create.topics.enable?)"),
])
def test_seaway_node_names_the_file_or_the_flag(tmp_path, capsys, source, flags, message):
    config = tmp_path / "node.properties"
    config.write_text(source)
    assert main(["node", "--config", str(config), *flags]) == 1
    err = capsys.readouterr().err
    assert err == f"seaway: error: {message.format(file=config)}\n"


TOPOLOGY = """\
name: t
regions:
  eu:
    clusters:
      eu-1:
        config: {{{config}}}
        nodes:
          - {{id: 1, roles: [broker, controller], zone: a, config: {{{node_config}}}}}
"""


@pytest.mark.parametrize("config, node_config, message", [
    ("log.retension.ms: 5", "", "topo.yaml:6: regions.eu.clusters.eu-1.config.log.retension.ms: not a broker "
                                "setting of Seaway or Kafka (did you mean log.retention.ms?)"),
    ("", "num.partition: 3", "topo.yaml:8: regions.eu.clusters.eu-1.nodes[0].config.num.partition: not a broker "
                             "setting of Seaway or Kafka (did you mean num.partitions?)"),
    ("num.partitions: lots", "", "topo.yaml:6: regions.eu.clusters.eu-1.config.num.partitions: 'lots' is not a "
                                 "valid int"),
    ("min.insync.replicas: 0", "", "topo.yaml:6: regions.eu.clusters.eu-1.config.min.insync.replicas: 0 is below "
                                   "the minimum 1"),
    ("node.id: 4", "", "topo.yaml:6: regions.eu.clusters.eu-1.config.node.id: node.id is set by the launcher "
                       "from the topology"),
])
def test_a_topologys_broker_settings_are_checked_before_anything_starts(config, node_config, message):
    with pytest.raises(TopologyError) as raised:
        parse_topology(TOPOLOGY.format(config=config, node_config=node_config), "topo.yaml",
                       check_setting=broker_setting_problem)
    assert str(raised.value) == message


def test_a_topology_with_kafkas_unused_and_seaways_own_settings_loads():
    parse_topology(TOPOLOGY.format(config="num.network.threads: 8, log.retention.ms: 5",
                                   node_config="auto.create.topics.enable: false"), "topo.yaml",
                   check_setting=broker_setting_problem)


# The settings of the server.properties Kafka ships for a combined KRaft node (3.x
# config/kraft/server.properties), with its defaults' values.
KAFKA_SERVER_PROPERTIES = """\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@localhost:{controller}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs={logs}
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
zookeeper.connection.timeout.ms=18000
"""


def test_kafkas_own_server_properties_loads(tmp_path):
    from core.client.properties import parse_properties
    props = parse_properties(KAFKA_SERVER_PROPERTIES.format(port=9092, controller=9093, logs=tmp_path))
    config = BrokerConfig(props)
    assert config["log.retention.ms"] == 168 * 3600 * 1000
    assert set(config.unused) <= {"socket.send.buffer.bytes", "socket.receive.buffer.bytes",
                                  "zookeeper.connection.timeout.ms", "log.retention.check.interval.ms"}
