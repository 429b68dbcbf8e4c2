"""ControllerConfig: the node settings the controller state machine acts on, by Kafka's names.

The node's properties are parsed once by core.config (BrokerConfig), which checks every value
and names the key of a bad one; this picks out what the controller needs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from core.config import BrokerConfig, ConfigError
from core.config.topic import TOPIC_CONFIGS



@dataclass(frozen=True)
class ControllerConfig:
    num_partitions: int = 1                          # num.partitions
    default_replication_factor: int = 1              # default.replication.factor
    broker_session_timeout_ms: int = 9000            # broker.session.timeout.ms
    broker_heartbeat_interval_ms: int = 2000         # broker.heartbeat.interval.ms
    unclean_leader_election_enable: bool = False     # unclean.leader.election.enable
    min_insync_replicas: int = 1                     # min.insync.replicas
    delete_topic_enable: bool = True                 # delete.topic.enable
    auto_leader_rebalance_enable: bool = True        # auto.leader.rebalance.enable
    leader_imbalance_check_interval_ms: int = 300_000  # leader.imbalance.check.interval.seconds
    unclean_leader_election_interval_ms: int = 300_000  # unclean.leader.election.interval.ms
    # Ids in controller.quorum.voters: a BROKER config resource may name them as well as
    # registered brokers (Kafka's ConfigResourceExistenceChecker).
    controller_ids: frozenset[int] = frozenset()
    # The broker role of this controller's own process (a combined node's node.id), if any.
    colocated_broker_id: int | None = None
    # Topic settings the node's properties set under their broker synonym (log.retention.ms,
    # ...), rendered as strings: the STATIC_BROKER_CONFIG layer of a topic's effective config.
    topic_defaults: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        for name in ("num_partitions", "default_replication_factor", "broker_session_timeout_ms",
                     "broker_heartbeat_interval_ms", "min_insync_replicas",
                     "leader_imbalance_check_interval_ms", "unclean_leader_election_interval_ms"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}: must be at least 1, got {getattr(self, name)}")
        unknown = [k for k in self.topic_defaults if k not in TOPIC_CONFIGS]
        if unknown:
            raise ConfigError(f"{unknown[0]}: unknown topic config")
        # The two topic settings that are also fields must agree with the static layer of
        # effective topic configs, however the config was built.
        defaults = dict(self.topic_defaults)
        for name, value in (("unclean.leader.election.enable", self.unclean_leader_election_enable),
                            ("min.insync.replicas", self.min_insync_replicas)):
            if name not in defaults and value != TOPIC_CONFIGS[name].default:
                defaults[name] = TOPIC_CONFIGS[name].render(value)
        object.__setattr__(self, "topic_defaults", MappingProxyType(defaults))

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any]) -> "ControllerConfig":
        """From a node's properties (Kafka's names); ConfigError names a bad key."""
        return cls.from_broker_config(BrokerConfig(dict(properties), warn_unknown=False))

    @classmethod
    def from_broker_config(cls, config: BrokerConfig) -> "ControllerConfig":
        get = config.__getitem__
        defaults = {name: TOPIC_CONFIGS[name].render(value)
                    for name, value in config.topic_defaults().items()}
        return cls(
            num_partitions=config["num.partitions"],
            default_replication_factor=config["default.replication.factor"],
            broker_session_timeout_ms=get("broker.session.timeout.ms"),
            broker_heartbeat_interval_ms=get("broker.heartbeat.interval.ms"),
            unclean_leader_election_enable=config["unclean.leader.election.enable"],
            min_insync_replicas=config["min.insync.replicas"],
            delete_topic_enable=config["delete.topic.enable"],
            auto_leader_rebalance_enable=get("auto.leader.rebalance.enable"),
            leader_imbalance_check_interval_ms=get("leader.imbalance.check.interval.seconds") * 1000,
            unclean_leader_election_interval_ms=get("unclean.leader.election.interval.ms"),
            controller_ids=frozenset(config.quorum_voters),
            colocated_broker_id=config.node_id if {"broker", "controller"} <= set(config.roles) else None,
            topic_defaults=MappingProxyType(defaults),
        )

