"""KRaft settings of a node: process.roles, controller.quorum.voters, controller.listener.names.

Each bad combination fails at load time with one ConfigError that names the key to fix, as
Kafka's KafkaConfig validation does; good ones derive the voters, the roles, the metadata log
directory and listeners clients may be told about."""
from __future__ import annotations

from pathlib import Path

import pytest

from core.config import BrokerConfig, ConfigError

VOTERS = "1@127.0.0.1:9093,2@127.0.0.1:9094,3@[::1]:9095"


def config(**props) -> BrokerConfig:
    return BrokerConfig({k.replace("_", "."): v for k, v in props.items()}, warn_unknown=False)


def test_a_combined_node_of_a_quorum():
    c = config(node_id="1", process_roles="broker,controller", controller_quorum_voters=VOTERS,
               controller_listener_names="CONTROLLER",
               listeners="PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093", log_dirs="/data/a,/data/b")
    assert not c.single_node and c.roles == {"broker", "controller"}
    assert c.quorum_voters == {1: ("127.0.0.1", 9093), 2: ("127.0.0.1", 9094), 3: ("::1", 9095)}
    # A controller listener missing from the protocol map is PLAINTEXT; clients never see it.
    assert [(li.name, li.security_protocol) for li in c.listeners] == [("PLAINTEXT", "PLAINTEXT"),
                                                                      ("CONTROLLER", "PLAINTEXT")]
    assert [li.name for li in c.advertised_listeners] == ["PLAINTEXT"]
    assert c.metadata_log_dir == Path("/data/a")
    assert c.is_controller_listener("CONTROLLER") and not c.is_controller_listener("PLAINTEXT")


def test_without_voters_a_node_is_a_one_voter_cluster():
    """Its quorum is itself, reached over a loopback controller listener whose port the OS
    picks; clients are never told about that listener."""
    c = config(node_id="4", listeners="PLAINTEXT://0.0.0.0:9092")
    assert c.single_node and c.roles == {"broker", "controller"}
    assert c.quorum_voters == {4: ("127.0.0.1", 0)}
    assert [str(li) for li in c.listeners] == ["PLAINTEXT://0.0.0.0:9092", "CONTROLLER://127.0.0.1:0"]
    assert c.controller_listener_names == ["CONTROLLER"]
    assert [li.name for li in c.advertised_listeners] == ["PLAINTEXT"]


def test_a_one_node_cluster_keeps_clear_of_a_listener_named_controller():
    c = config(listeners="CONTROLLER://127.0.0.1:9092", listener_security_protocol_map="CONTROLLER:PLAINTEXT")
    assert c.controller_listener_names == ["CONTROLLER_LOCAL"]
    assert [li.name for li in c.advertised_listeners] == ["CONTROLLER"]


@pytest.mark.parametrize("roles", ["broker", "controller"])
def test_a_one_node_cluster_runs_both_roles(roles):
    with pytest.raises(ConfigError, match="^process.roles: .* needs controller.quorum.voters"):
        config(process_roles=roles)


def test_metadata_log_dir_can_be_its_own():
    c = config(node_id="2", process_roles="controller", controller_quorum_voters=VOTERS,
               controller_listener_names="CONTROLLER", listeners="CONTROLLER://127.0.0.1:9094",
               metadata_log_dir="/meta")
    assert c.metadata_log_dir == Path("/meta")


BROKER = dict(node_id="101", process_roles="broker", controller_quorum_voters=VOTERS,
              controller_listener_names="CONTROLLER", listeners="PLAINTEXT://127.0.0.1:9092")
CONTROLLER = dict(node_id="1", process_roles="controller", controller_quorum_voters=VOTERS,
                  controller_listener_names="CONTROLLER", listeners="CONTROLLER://127.0.0.1:9093")


@pytest.mark.parametrize("base, change, key", [
    (CONTROLLER, {"node_id": "7"}, "controller.quorum.voters"),                 # not a voter
    (BROKER, {"node_id": "2"}, "controller.quorum.voters"),                     # broker in voters
    (CONTROLLER, {"controller_listener_names": ""}, "controller.listener.names"),
    (CONTROLLER, {"controller_listener_names": "OTHER"}, "controller.listener.names"),   # CONTROLLER unmapped
    (CONTROLLER, {"controller_listener_names": "OTHER",
                  "listener_security_protocol_map": "CONTROLLER:PLAINTEXT"}, "controller.listener.names"),
    (CONTROLLER, {"listeners": "CONTROLLER://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092"}, "listeners"),
    (BROKER, {"listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"}, "listeners"),
    (BROKER, {"controller_quorum_voters": "1@host"}, "controller.quorum.voters"),
    (BROKER, {"controller_quorum_voters": "x@host:1"}, "controller.quorum.voters"),
    (BROKER, {"controller_quorum_voters": "1@h:1,1@h:2"}, "controller.quorum.voters"),
    (BROKER, {"controller_quorum_voters": "1@h:70000"}, "controller.quorum.voters"),
    (BROKER, {"process_roles": "broker,broker"}, "process.roles"),
    (BROKER, {"process_roles": "worker"}, "process.roles"),
    ({}, {"controller_listener_names": "CONTROLLER"}, "controller.quorum.voters"),
    (CONTROLLER, {"controller_quorum_election_timeout_ms": "0"}, "controller.quorum.election.timeout.ms"),
    (BROKER, {"broker_session_timeout_ms": "soon"}, "broker.session.timeout.ms"),
])
def test_bad_quorum_settings_name_the_key(base, change, key):
    with pytest.raises(ConfigError) as exc:
        config(**{**base, **change})
    assert key in str(exc.value)
    assert "\n" not in str(exc.value)
