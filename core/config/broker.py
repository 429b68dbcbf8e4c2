"""A node's settings, read from a Kafka-style properties file.

Kafka's keys that Seaway does not use are reported and ignored, as Kafka does ("supplied but
not used"), so an existing server.properties works; a key neither knows is an error naming the
nearest known one (core/config/unknown.py). Values are checked at load time and an error names
the key, so that a bad file fails in one readable line before anything starts.
"""
from __future__ import annotations

import logging
import re
import secrets
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.client.properties import PropertiesFileError, parse_properties, read_properties

from .defs import INT_MAX, LONG_MAX, ConfigDef, ConfigError, ConfigType
from .sasl import SASL_CONFIG_LIST, SASL_CONFIGS
from .tls import SSL_CONFIG_LIST, SSL_CONFIGS
from .topic import TOPIC_CONFIG_LIST
from .unknown import unknown_broker_setting

log = logging.getLogger(__name__)
_T = ConfigType

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


# Kafka's per-listener form of a security setting: listener.name.<listener>.ssl.keystore.location,
# listener.name.<listener>.sasl.enabled.mechanisms, listener.name.<listener>.<mechanism>.sasl.jaas.config,
# listener.name.<listener>[.<mechanism>].connections.max.reauth.ms
_LISTENER_SETTING_RE = re.compile(
    r"^listener\.name\.([A-Za-z0-9_]+)\.((?:[a-z0-9-]+\.)?(?:(?:ssl|sasl)\..+|connections\.max\.reauth\.ms))$")
_MECHANISM_JAAS_RE = re.compile(r"^([a-z0-9-]+)\.sasl\.jaas\.config$")
_MECHANISM_REAUTH_RE = re.compile(r"^([a-z0-9-]+)\.connections\.max\.reauth\.ms$")

_LISTENER_RE = re.compile(r"^([A-Za-z0-9_]+)://(\[[^\]]*\]|[^:]*):(\d+)$")


def parse_listeners(key: str, value: list[str], protocol_map: dict[str, str]) -> list[Listener]:
    out: list[Listener] = []
    for item in value:
        m = _LISTENER_RE.match(item)
        if not m:
            raise ConfigError(f"{key}: {item!r} is not NAME://HOST:PORT")
        name, host, port = m.group(1).upper(), m.group(2).strip("[]"), int(m.group(3))
        if not 0 <= port <= 65535:
            raise ConfigError(f"{key}: port {port} is out of range")
        protocol = protocol_map.get(name, name if name in SECURITY_PROTOCOLS else None)
        if protocol is None:
            raise ConfigError(f"{key}: listener {name} has no entry in listener.security.protocol.map")
        if any(li.name == name for li in out):
            raise ConfigError(f"{key}: listener {name} is listed twice")
        out.append(Listener(name, host, port, protocol))
    return out


_VOTER_RE = re.compile(r"^(\d+)@(\[[^\]]*\]|[^:@]+):(\d+)$")


def parse_voters(items: list[str]) -> dict[int, tuple[str, int]]:
    """controller.quorum.voters: `id@host:port,...` -> {id: (host, port)}."""
    voters: dict[int, tuple[str, int]] = {}
    for item in items:
        m = _VOTER_RE.match(item.strip())
        if not m:
            raise ConfigError(f"controller.quorum.voters: {item!r} is not ID@HOST:PORT")
        node_id, host, port = int(m.group(1)), m.group(2).strip("[]"), int(m.group(3))
        if not 0 < port <= 65535:
            raise ConfigError(f"controller.quorum.voters: port {port} is out of range")
        if node_id in voters:
            raise ConfigError(f"controller.quorum.voters: voter {node_id} is listed twice")
        voters[node_id] = (host, port)
    return voters


def _broker_defs() -> list[ConfigDef]:
    defs = [
        ConfigDef("node.id", _T.INT, 1, "this node's id in the cluster", minimum=0),
        ConfigDef("process.roles", _T.LIST, ["broker", "controller"], "broker, controller or both",
                  choices=("broker", "controller")),
        ConfigDef("listeners", _T.LIST, ["PLAINTEXT://127.0.0.1:9092"], "addresses to listen on"),
        ConfigDef("advertised.listeners", _T.LIST, None, "addresses given to clients (default: listeners)"),
        ConfigDef("listener.security.protocol.map", _T.LIST,
                  [f"{p}:{p}" for p in SECURITY_PROTOCOLS], "listener name to security protocol"),
        ConfigDef("inter.broker.listener.name", _T.STRING, None, "listener brokers talk to each other on"),
        ConfigDef("controller.listener.names", _T.LIST, [], "listeners that serve the controller quorum"),
        ConfigDef("controller.quorum.voters", _T.LIST, [], "id@host:port of each controller"),
        ConfigDef("controller.quorum.election.timeout.ms", _T.INT, 1000,
                  "how long a voter without a leader waits before it campaigns", minimum=1),
        ConfigDef("controller.quorum.election.backoff.max.ms", _T.INT, 1000,
                  "cap of a losing candidate's backoff", minimum=0),
        ConfigDef("controller.quorum.fetch.timeout.ms", _T.INT, 2000,
                  "a voter that hears nothing from its leader this long campaigns", minimum=1),
        ConfigDef("controller.quorum.request.timeout.ms", _T.INT, 2000,
                  "an unanswered quorum request is given up after this long", minimum=1),
        ConfigDef("controller.quorum.retry.backoff.ms", _T.INT, 20, "pause before re-sending a failed "
                  "quorum request", minimum=0),
        ConfigDef("metadata.log.dir", _T.STRING, None,
                  "directory of the __cluster_metadata log (default: the first of log.dirs)"),
        ConfigDef("metadata.log.max.record.bytes.between.snapshots", _T.LONG, 20 * 1024 * 1024,
                  "metadata log bytes after which a new snapshot is written", minimum=1),
        ConfigDef("broker.session.timeout.ms", _T.INT, 9000,
                  "a broker that has not heartbeated this long is fenced", minimum=1),
        ConfigDef("broker.heartbeat.interval.ms", _T.INT, 2000, "how often a broker heartbeats", minimum=1),
        ConfigDef("auto.leader.rebalance.enable", _T.BOOLEAN, True,
                  "move leadership back to each partition's preferred replica"),
        ConfigDef("leader.imbalance.check.interval.seconds", _T.LONG, 300,
                  "how often the controller looks for partitions not led by their preferred replica",
                  minimum=1),
        ConfigDef("unclean.leader.election.interval.ms", _T.LONG, 300_000,
                  "how often the controller tries unclean elections for leaderless partitions", minimum=1),
        ConfigDef("replica.lag.time.max.ms", _T.LONG, 30_000,
                  "a follower that has not caught up with the leader for this long leaves the ISR",
                  minimum=1),
        ConfigDef("replica.fetch.wait.max.ms", _T.INT, 500,
                  "how long a follower's fetch waits at the leader for new data", minimum=0),
        ConfigDef("replica.fetch.min.bytes", _T.INT, 1, "bytes a follower's fetch waits for", minimum=1),
        ConfigDef("replica.fetch.max.bytes", _T.INT, 1_048_576,
                  "bytes a follower fetches per partition (at least one batch)", minimum=0),
        ConfigDef("replica.fetch.response.max.bytes", _T.INT, 10_485_760,
                  "bytes a follower fetches per request (at least one batch)", minimum=0),
        ConfigDef("replica.fetch.backoff.ms", _T.INT, 1000,
                  "pause before a follower retries a fetch that failed", minimum=0),
        ConfigDef("replica.socket.timeout.ms", _T.INT, 30_000,
                  "a follower's fetch with no answer this long is given up", minimum=1),
        ConfigDef("replica.high.watermark.checkpoint.interval.ms", _T.LONG, 5000,
                  "how often each partition's high watermark is checkpointed", minimum=1),
        ConfigDef("replica.selector.class", _T.STRING, None,
                  "KIP-392 replica selector: RackAwareReplicaSelector lets consumers fetch from "
                  "a replica in their client.rack",
                  choices=("org.apache.kafka.common.replica.RackAwareReplicaSelector", "RackAwareReplicaSelector",
                           "org.apache.kafka.common.replica.LeaderSelector", "LeaderSelector")),
        ConfigDef("leader.replication.throttled.rate", _T.LONG, 2**63 - 1,
                  "bytes/s a leader sends to throttled followers (reassignment)", minimum=0),
        ConfigDef("follower.replication.throttled.rate", _T.LONG, 2**63 - 1,
                  "bytes/s a follower fetches for throttled replicas (reassignment)", minimum=0),
        ConfigDef("client.local.address", _T.STRING, None,
                  "Seaway: local IP address this node's outgoing connections (to other nodes) "
                  "are bound to; for multi-homed hosts and for fault-injection proxies that "
                  "tell nodes apart by source address"),
        ConfigDef("log.dirs", _T.LIST, None, "directories that hold partition logs"),
        ConfigDef("log.dir", _T.STRING, "/tmp/seaway-logs", "log directory when log.dirs is unset"),
        ConfigDef("num.partitions", _T.INT, 1, "partitions of an auto-created topic", minimum=1),
        ConfigDef("default.replication.factor", _T.INT, 1, "replicas of an auto-created topic", minimum=1),
        ConfigDef("auto.create.topics.enable", _T.BOOLEAN, True, "create topics on first Metadata request"),
        ConfigDef("delete.topic.enable", _T.BOOLEAN, True, "allow DeleteTopics"),
        ConfigDef("message.max.bytes", _T.INT, 1_048_588, "largest record batch accepted", minimum=0),
        ConfigDef("socket.request.max.bytes", _T.INT, 104_857_600, "largest request frame accepted",
                  minimum=1),
        ConfigDef("producer.id.expiration.ms", _T.INT, 86_400_000,
                  "forget an idempotent producer idle this long", minimum=1),
        ConfigDef("num.recovery.threads.per.data.dir", _T.INT, 1,
                  "threads per log dir that flush and close the logs at shutdown (their fsyncs "
                  "overlap: 4 closed 10,000 partitions about 4x faster here)", minimum=1, maximum=256),
        ConfigDef("producer.snapshot.interval.ms", _T.LONG, 60_000,
                  "how often idempotent-producer state is snapshotted (bounds replay after a crash)",
                  minimum=100),
        ConfigDef("log.cleaner.enable", _T.BOOLEAN, True, "compact topics whose cleanup.policy has compact"),
        ConfigDef("log.cleaner.backoff.ms", _T.LONG, 15_000, "pause between cleaner passes", minimum=1),
        ConfigDef("log.cleaner.dedupe.buffer.size", _T.LONG, 16 * 1024 * 1024,
                  "memory for the cleaner's key map; more keys than fit are cleaned over several passes",
                  minimum=1024 * 1024),
        ConfigDef("max.incremental.fetch.session.cache.slots", _T.INT, 1000,
                  "fetch sessions (KIP-227) this broker keeps; 0 turns sessions off", minimum=0),
        ConfigDef("min.incremental.fetch.session.eviction.ms", _T.INT, 120_000,
                  "a fetch session unused this long may be evicted for a new one", minimum=0),
        ConfigDef("fetch.max.bytes", _T.INT, 57_671_680, "largest Fetch response, whatever the client asks",
                  minimum=1024),
        ConfigDef("connections.max.idle.ms", _T.LONG, 600_000, "close connections idle this long", minimum=1),
        ConfigDef("socket.send.buffer.bytes", _T.INT, 102_400, "SO_SNDBUF (-1: OS default)", minimum=-1),
        ConfigDef("socket.receive.buffer.bytes", _T.INT, 102_400, "SO_RCVBUF (-1: OS default)", minimum=-1),
        ConfigDef("broker.rack", _T.STRING, None, "rack (or zone) of this broker"),
        ConfigDef("log.retention.hours", _T.INT, 168, "retention in hours", minimum=-1),
        ConfigDef("log.retention.minutes", _T.INT, None, "retention in minutes (overrides hours)", minimum=-1),
        ConfigDef("log.roll.hours", _T.INT, 168, "segment roll age in hours", minimum=1),
        ConfigDef("log.retention.check.interval.ms", _T.LONG, 300_000, "how often retention runs", minimum=1),
        ConfigDef("log.flush.scheduler.interval.ms", _T.LONG, 1000,
                  "how often the flush.ms policy is checked", minimum=1),
        ConfigDef("offsets.topic.replication.factor", _T.SHORT, 1, "replicas of __consumer_offsets", minimum=1),
        ConfigDef("offsets.topic.num.partitions", _T.INT, 50, "partitions of __consumer_offsets", minimum=1),
        ConfigDef("offsets.topic.segment.bytes", _T.INT, 104_857_600, "segment size of __consumer_offsets",
                  minimum=1024),
        ConfigDef("offsets.retention.minutes", _T.INT, 10_080,
                  "committed offsets of a group expire this long after it became empty", minimum=1),
        ConfigDef("offsets.retention.check.interval.ms", _T.LONG, 600_000,
                  "how often expired offsets are removed", minimum=1),
        ConfigDef("request.timeout.ms", _T.INT, 30_000,
                  "bound on a broker's own requests: transaction markers to other brokers and the "
                  "replication of a transaction coordinator's writes", minimum=1),
        ConfigDef("transaction.state.log.num.partitions", _T.INT, 50, "partitions of __transaction_state",
                  minimum=1),
        ConfigDef("transaction.state.log.replication.factor", _T.SHORT, 3,
                  "replicas of __transaction_state (at most the brokers registered when it is created)",
                  minimum=1),
        ConfigDef("transaction.state.log.min.isr", _T.INT, 2,
                  "min.insync.replicas of __transaction_state (at most its replication factor)", minimum=1),
        ConfigDef("transaction.state.log.segment.bytes", _T.INT, 104_857_600,
                  "segment size of __transaction_state", minimum=1024),
        ConfigDef("transaction.max.timeout.ms", _T.INT, 900_000,
                  "largest transaction.timeout.ms a producer may ask for", minimum=1),
        ConfigDef("transactional.id.expiration.ms", _T.INT, 604_800_000,
                  "a transactional id idle this long (no transaction ongoing) is removed", minimum=1),
        ConfigDef("transaction.abort.timed.out.transaction.cleanup.interval.ms", _T.INT, 10_000,
                  "how often transactions past their timeout are looked for and aborted", minimum=1),
        ConfigDef("transaction.remove.expired.transaction.cleanup.interval.ms", _T.INT, 3_600_000,
                  "how often expired transactional ids are removed", minimum=1),
        ConfigDef("transaction.partition.verification.enable", _T.BOOLEAN, True,
                  "partition leaders check with the coordinator that a transaction's first write to "
                  "them belongs to an ongoing transaction (KIP-890)"),
        ConfigDef("offset.metadata.max.bytes", _T.INT, 4096, "largest metadata string of a committed offset",
                  minimum=0),
        ConfigDef("group.initial.rebalance.delay.ms", _T.INT, 3000, "delay of a new group's first rebalance",
                  minimum=0),
        ConfigDef("group.min.session.timeout.ms", _T.INT, 6000, "smallest session timeout a member may ask",
                  minimum=0),
        ConfigDef("group.max.session.timeout.ms", _T.INT, 1_800_000, "largest session timeout a member may ask",
                  minimum=0),
        ConfigDef("group.max.size", _T.INT, 2**31 - 1, "most members a group may have", minimum=1),
        ConfigDef("metrics.port", _T.INT, None, "port of the Prometheus /metrics endpoint", minimum=0,
                  maximum=65535),
        ConfigDef("cluster.id", _T.STRING, None, "cluster id (normally set by storage format)"),
        ConfigDef("shutdown.timeout.ms", _T.LONG, 10_000, "bound on a graceful shutdown", minimum=0),
        ConfigDef("authorizer.class.name", _T.STRING, None,
                  "org.apache.kafka.metadata.authorizer.StandardAuthorizer turns ACLs on (unset: no checks)"),
        ConfigDef("super.users", _T.STRING, None,
                  "principals allowed everything, separated by semicolons (User:admin;User:broker)"),
        ConfigDef("allow.everyone.if.no.acl.found", _T.BOOLEAN, False,
                  "with ACLs on, whether a resource that no ACL names is open to everyone"),
        ConfigDef("audit.log.file", _T.STRING, None,
                  "JSON-lines file of authentications, denials, changes and ACL and credential "
                  "operations (unset: no audit log)"),
        ConfigDef("audit.log.max.bytes", _T.LONG, 100 * 1024 * 1024,
                  "size at which the audit log rotates", minimum=1024),
        ConfigDef("audit.log.backups", _T.INT, 10, "rotated audit log files kept", minimum=0),
    ]
    defs.extend(SSL_CONFIG_LIST)
    defs.extend(SASL_CONFIG_LIST)
    names = {d.name for d in defs}
    # Every topic setting has a broker-wide default under its synonym (log.retention.ms, ...).
    for t in TOPIC_CONFIG_LIST:
        if t.synonym and t.synonym not in names:
            defs.append(ConfigDef(t.synonym, t.type, t.default, t.doc, minimum=t.minimum,
                                  maximum=t.maximum, choices=t.choices))
            names.add(t.synonym)
    return defs


BROKER_CONFIG_LIST = _broker_defs()
BROKER_CONFIGS: dict[str, ConfigDef] = {d.name: d for d in BROKER_CONFIG_LIST}

# Settings Kafka has that we accept but do not act on (thread pools and the like, which an
# asyncio node has no use for). They are not reported as unknown.
_ACCEPTED_UNUSED = {
    "num.network.threads", "num.io.threads", "num.replica.fetchers",
    "queued.max.requests",
    "group.coordinator.rebalance.protocols", "share.coordinator.state.topic.replication.factor",
    "share.coordinator.state.topic.min.isr", "log.segment.bytes.per.partition",
}


def load_properties(path: str | Path) -> dict[str, str]:
    """A properties file; ConfigError naming it when it cannot be read."""
    try:
        return read_properties(path)
    except PropertiesFileError as exc:
        raise ConfigError(f"config file {str(exc).removeprefix('cannot read ')}") from None


class BrokerConfig:
    """Parsed and validated node settings. Values are read with `config["log.dirs"]`."""

    def __init__(self, props: dict[str, Any] | None = None, *, warn_unknown: bool = True):
        props = dict(props or {})
        self.values: dict[str, Any] = {}
        self.explicit: set[str] = set()
        # listener name (upper case) -> its own ssl.* values, which win over the node's
        self.listener_settings: dict[str, dict[str, Any]] = {}
        # A one-node cluster with ACLs: the principal it logs in to its own controller as
        self.internal_principal: str | None = None
        self._client_tls: dict[str, Any] = {}   # listener name -> ssl.SSLContext | None
        self._client_sasl: dict[str, Any] = {}  # listener name -> SaslCredentials | None
        for key in [k for k in props if k.startswith("listener.name.")]:
            m = _LISTENER_SETTING_RE.match(key)
            setting = m.group(2) if m else ""
            jaas = _MECHANISM_JAAS_RE.match(setting)
            reauth = _MECHANISM_REAUTH_RE.match(setting)
            definition = SSL_CONFIGS.get(setting) or SASL_CONFIGS.get(setting) \
                or (SASL_CONFIGS["sasl.jaas.config"] if jaas else None) \
                or (SASL_CONFIGS["connections.max.reauth.ms"] if reauth else None)
            if m is None or definition is None:
                continue   # reported below as not used, like any other unknown key
            try:
                value = definition.parse(props.pop(key))
            except ConfigError as exc:
                raise ConfigError(f"{key}: {str(exc).split(': ', 1)[1]}") from None
            self.listener_settings.setdefault(m.group(1).upper(), {})[m.group(2)] = value
        for name, definition in BROKER_CONFIGS.items():
            if name in props:
                self.values[name] = definition.parse(props.pop(name))
                self.explicit.add(name)
            else:
                self.values[name] = definition.default
        mistakes = [reason for key in props if (reason := unknown_broker_setting(key))]
        if mistakes:
            more = f" (and {len(mistakes) - 1} more)" if len(mistakes) > 1 else ""
            raise ConfigError(mistakes[0] + more)
        self.unused = {k: v for k, v in props.items() if k not in _ACCEPTED_UNUSED}
        if warn_unknown and self.unused:
            log.warning("these settings were supplied but are not used: %s", ", ".join(sorted(self.unused)))
        self._derive()

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def _derive(self) -> None:
        v = self.values
        # Kafka's precedence for retention and roll: ms, then minutes, then hours.
        if "log.retention.ms" not in self.explicit:
            if v["log.retention.minutes"] is not None:
                minutes = v["log.retention.minutes"]
                v["log.retention.ms"] = -1 if minutes < 0 else minutes * 60_000
                self.explicit.add("log.retention.ms")
            elif "log.retention.hours" in self.explicit:
                hours = v["log.retention.hours"]
                v["log.retention.ms"] = -1 if hours < 0 else hours * 3_600_000
                self.explicit.add("log.retention.ms")
        if "log.roll.ms" not in self.explicit and "log.roll.hours" in self.explicit:
            v["log.roll.ms"] = v["log.roll.hours"] * 3_600_000
            self.explicit.add("log.roll.ms")
        dirs = v["log.dirs"] or [v["log.dir"]]
        if not dirs:
            raise ConfigError("log.dirs: at least one directory is required")
        self.log_dirs = [Path(d) for d in dirs]
        pmap: dict[str, str] = {}
        for item in v["listener.security.protocol.map"]:
            if ":" not in item:
                raise ConfigError(f"listener.security.protocol.map: {item!r} is not NAME:PROTOCOL")
            name, proto = item.split(":", 1)
            if proto.upper() not in SECURITY_PROTOCOLS:
                raise ConfigError(f"listener.security.protocol.map: unknown security protocol {proto!r}")
            pmap[name.upper()] = proto.upper()
        for name in v["controller.listener.names"]:
            # As Kafka 3.x does: a controller listener missing from the map is PLAINTEXT.
            pmap.setdefault(name.upper(), "PLAINTEXT")
        self.protocol_map = pmap
        if v["controller.quorum.voters"] and not v["controller.listener.names"]:
            raise ConfigError("controller.listener.names: required when controller.quorum.voters is set")
        try:
            self.listeners = parse_listeners("listeners", v["listeners"], pmap)
        except ConfigError as exc:
            if not v["controller.quorum.voters"] or "protocol.map" not in str(exc):
                raise
            raise ConfigError(f"{exc} or in controller.listener.names") from None
        if not self.listeners:
            raise ConfigError("listeners: at least one listener is required")
        # A broker-only node sets the controller listener's ssl.* for its own connections to
        # the controllers without listening on it: any listener the map or the quorum names.
        known = {li.name for li in self.listeners} | set(pmap)
        for name in self.listener_settings:
            if name not in known:
                raise ConfigError(f"listener.name.{name.lower()}.*: {name} is not one of listeners")
        if v["advertised.listeners"]:
            self.advertised_listeners = parse_listeners("advertised.listeners", v["advertised.listeners"], pmap)
            names = {li.name for li in self.listeners}
            for adv in self.advertised_listeners:
                if adv.name not in names:
                    raise ConfigError(f"advertised.listeners: {adv.name} is not one of listeners")
        else:
            self.advertised_listeners = [
                Listener(li.name, li.host or "127.0.0.1", li.port, li.security_protocol) if li.host not in ("", "0.0.0.0", "::")
                else Listener(li.name, "127.0.0.1", li.port, li.security_protocol)
                for li in self.listeners]
        self._derive_quorum()
        if v["message.max.bytes"] > v["socket.request.max.bytes"]:
            log.warning("message.max.bytes is larger than socket.request.max.bytes")

    def _derive_quorum(self) -> None:
        """KRaft settings. With `controller.quorum.voters` set the node is part of a quorum
        cluster. Without it the node is a one-node cluster: broker and controller, and the only
        voter of its own quorum, which it reaches through a controller listener on a loopback
        port the OS picks (`single_node`; server.py fills in the port once it is bound). Both
        kinds keep their metadata the same way, in the metadata log."""
        v = self.values
        roles = v["process.roles"]
        if not roles or len(set(roles)) != len(roles):
            raise ConfigError(f"process.roles: {','.join(roles)!r} must be broker, controller or both")
        self.roles = frozenset(roles)
        self.quorum_voters = parse_voters(v["controller.quorum.voters"])
        self.controller_listener_names = [n.upper() for n in v["controller.listener.names"]]
        self.metadata_log_dir = Path(v["metadata.log.dir"]) if v["metadata.log.dir"] else self.log_dirs[0]
        self.single_node = not self.quorum_voters
        if self.single_node:
            if v["controller.listener.names"]:
                raise ConfigError("controller.quorum.voters: required when controller.listener.names is set")
            if self.roles != {"broker", "controller"}:
                raise ConfigError(f"process.roles: {','.join(roles)} needs controller.quorum.voters; "
                                  f"a node without voters is a one-node cluster with both roles")
            names = {li.name for li in self.listeners}
            name = next(n for n in ("CONTROLLER", "CONTROLLER_LOCAL", "SEAWAY_CONTROLLER") if n not in names)
            protocol = "PLAINTEXT"
            if v["authorizer.class.name"]:
                # With ACLs on, the controller listener checks CLUSTER_ACTION, and any local
                # process could reach a PLAINTEXT one as User:ANONYMOUS. So the node logs in
                # to its own controller with a secret made at start, as a principal nobody
                # can name, which is a super user (core.node.server._authorizer).
                protocol = "SASL_PLAINTEXT"
                user, password = f"seaway-node-{secrets.token_hex(8)}", secrets.token_urlsafe(24)
                self.internal_principal = f"User:{user}"
                self.listener_settings[name] = {
                    "sasl.enabled.mechanisms": ["PLAIN"],
                    "plain.sasl.jaas.config": f'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                              f'username="{user}" password="{password}" user_{user}="{password}";'}
                self.protocol_map[name] = protocol
            self.listeners = [*self.listeners, Listener(name, "127.0.0.1", 0, protocol)]
            self.controller_listener_names = [name]
            self.quorum_voters = {self.node_id: ("127.0.0.1", 0)}
            return
        if not self.controller_listener_names:
            raise ConfigError("controller.listener.names: required when controller.quorum.voters is set")
        names = {li.name for li in self.listeners}
        if "controller" in self.roles:
            if self.node_id not in self.quorum_voters:
                raise ConfigError(f"controller.quorum.voters: node.id {self.node_id} has the controller "
                                  f"role but is not one of the voters")
            missing = [n for n in self.controller_listener_names if n not in names]
            if missing:
                raise ConfigError(f"controller.listener.names: {missing[0]} is not one of listeners")
        else:
            if self.node_id in self.quorum_voters:
                raise ConfigError(f"controller.quorum.voters: node.id {self.node_id} is a voter but "
                                  f"process.roles has no controller")
            if names & set(self.controller_listener_names):
                raise ConfigError("listeners: a broker-only node must not listen on a controller listener")
        if "broker" in self.roles:
            if not names - set(self.controller_listener_names):
                raise ConfigError("listeners: a broker needs a listener that is not a controller listener")
        else:
            if names - set(self.controller_listener_names):
                raise ConfigError("listeners: a controller-only node may listen only on controller.listener.names")
        # Clients are never told about controller listeners.
        self.advertised_listeners = [li for li in self.advertised_listeners
                                     if li.name not in self.controller_listener_names] \
            or self.advertised_listeners

    def tls_values(self, listener_name: str) -> tuple[dict[str, Any], str]:
        """The ssl.* values a listener uses (its own listener.name.* values over the node's),
        and the key prefix errors should name: the listener's own when it sets anything."""
        values = {name: self.values[name] for name in SSL_CONFIGS}
        own = {k: v for k, v in self.listener_settings.get(listener_name.upper(), {}).items()
               if k in SSL_CONFIGS}
        values.update(own)
        return values, (f"listener.name.{listener_name.lower()}." if own else "")

    def sasl_values(self, listener_name: str) -> tuple[list[str], str | None, str, int]:
        """A SASL listener's (mechanisms, PLAIN's JAAS line, the key that line came from, the
        largest frame before authentication): its listener.name.* values over the node's."""
        own = self.listener_settings.get(listener_name.upper(), {})
        prefix = f"listener.name.{listener_name.lower()}."
        mechanisms = own.get("sasl.enabled.mechanisms", self.values["sasl.enabled.mechanisms"])
        for key in ("plain.sasl.jaas.config", "sasl.jaas.config"):
            if own.get(key):
                jaas, where = own[key], prefix + key
                break
        else:
            jaas, where = self.values["sasl.jaas.config"], "sasl.jaas.config"
        size = own.get("sasl.server.max.receive.size", self.values["sasl.server.max.receive.size"])
        return [m.upper() for m in mechanisms], jaas, where, size

    def reauth_ms(self, listener_name: str) -> dict[str, int]:
        """Each mechanism's session lifetime on a SASL listener (KIP-368), from the most
        specific of listener.name.<l>.<mechanism>.connections.max.reauth.ms,
        listener.name.<l>.connections.max.reauth.ms and connections.max.reauth.ms."""
        own = self.listener_settings.get(listener_name.upper(), {})
        mechanisms, _, _, _ = self.sasl_values(listener_name)
        default = own.get("connections.max.reauth.ms", self.values["connections.max.reauth.ms"])
        return {m: own.get(f"{m.lower()}.connections.max.reauth.ms", default) for m in mechanisms}

    def client_sasl(self, listener_name: str) -> Any:
        """The SASL credentials (core.client.sasl.SaslCredentials) this node presents on
        `listener_name` of other nodes, or None when that listener is not SASL: the mechanism
        of sasl.mechanism.inter.broker.protocol (or .controller.protocol) else the first the
        listener enables, and username="..." password="..." from that mechanism's JAAS line."""
        if listener_name in self._client_sasl:
            return self._client_sasl[listener_name]
        credentials = None
        if self.protocol_map.get(listener_name, "PLAINTEXT").startswith("SASL_"):
            from core.client.sasl import SaslCredentials, SaslSettingsError
            mechanisms, _, _, _ = self.sasl_values(listener_name)
            which = ("sasl.mechanism.controller.protocol" if listener_name in self.controller_listener_names
                     else "sasl.mechanism.inter.broker.protocol")
            mechanism = (self.values[which] or (mechanisms[0] if mechanisms else "")).upper()
            if mechanism.startswith("SCRAM-") and which == "sasl.mechanism.controller.protocol":
                # As in Kafka: the controllers would need the credentials to elect a leader,
                # and the credentials are in the metadata log that leader replicates.
                raise ConfigError(f"{which}: {mechanism} cannot log in to the controller quorum (SCRAM "
                                  f"credentials live in the metadata log the controllers replicate); "
                                  f"use PLAIN on listener {listener_name}, or SSL with client certificates")
            own = self.listener_settings.get(listener_name.upper(), {})
            key = f"{mechanism.lower()}.sasl.jaas.config"
            jaas = own.get(key) or own.get("sasl.jaas.config") or self.values["sasl.jaas.config"]
            where = f"listener.name.{listener_name.lower()}.{key}"
            try:
                credentials = SaslCredentials.from_properties(
                    {"sasl.mechanism": mechanism, **({"sasl.jaas.config": jaas} if jaas else {})}, where=f"{where}: ")
            except SaslSettingsError as exc:
                raise ConfigError(f"{exc} (this node's own login on listener {listener_name})") from None
        self._client_sasl[listener_name] = credentials
        return credentials

    def client_tls(self, listener_name: str) -> "ssl.SSLContext | None":
        """The TLS context this node's own connections to `listener_name` of other nodes use
        (followers to leaders, brokers to controllers, voters to voters): None for a PLAINTEXT
        listener, else a client context from that listener's ssl.* settings, its keystore
        presented as this node's certificate (mTLS). Made once per listener; a ConfigError
        naming the setting if it cannot work."""
        if listener_name in self._client_tls:
            return self._client_tls[listener_name]
        from core.client.tls import TlsError, TlsSettings, client_context
        protocol = self.protocol_map.get(listener_name, "PLAINTEXT")
        context = None
        if protocol in ("SSL", "SASL_SSL"):
            try:
                context = client_context(TlsSettings(*self.tls_values(listener_name)))
            except TlsError as exc:
                raise ConfigError(str(exc)) from None
        self._client_tls[listener_name] = context
        return context

    @property
    def controller_client_tls(self) -> "ssl.SSLContext | None":
        """What this node's connections to the controller quorum use."""
        return self.client_tls(self.controller_listener_names[0])

    @property
    def controller_client_sasl(self) -> Any:
        return self.client_sasl(self.controller_listener_names[0])

    def is_controller_listener(self, name: str) -> bool:
        return name in self.controller_listener_names

    @property
    def inter_broker_listener_name(self) -> str:
        """The listener followers fetch from: inter.broker.listener.name, else the first
        listener that is not a controller listener (Kafka's default is PLAINTEXT)."""
        name = self.values.get("inter.broker.listener.name")
        if name:
            return name
        for listener in self.listeners:
            if not self.is_controller_listener(listener.name):
                return listener.name
        return "PLAINTEXT"

    @property
    def node_id(self) -> int:
        return self.values["node.id"]

    def topic_defaults(self) -> dict[str, Any]:
        """Broker-level values of every topic setting that the operator set explicitly."""
        return {t.name: self.values[t.synonym] for t in TOPIC_CONFIG_LIST if t.synonym in self.explicit}

    def advertised(self, listener_name: str) -> Listener:
        for li in self.advertised_listeners:
            if li.name == listener_name:
                return li
        return self.advertised_listeners[0]

    @classmethod
    def from_file(cls, path: str | Path) -> "BrokerConfig":
        return cls(load_properties(path))


__all__ = ["BrokerConfig", "Listener", "BROKER_CONFIGS", "INT_MAX", "LONG_MAX", "parse_properties",
           "load_properties"]
