"""The broker settings that may change at run time, as Kafka's DynamicBrokerConfig knows them
(Kafka 3.9 / 4.0), and the rules a change must pass.

A dynamic broker setting is set through IncrementalAlterConfigs or AlterConfigs on a broker
resource: a broker id (per broker) or "" (the cluster-wide default). Kafka's rules, in the
order Kafka checks them (DynamicBrokerConfig.validateConfigs); every failure is
INVALID_REQUEST, as Kafka answers a ConfigException from that check (KAFKA-13609):

1. a Kafka broker setting that is not dynamic (node.id, log.dirs, ...) is refused: "Cannot
   update these configs dynamically";
2. a keystore or truststore setting (ssl.keystore.location, ...) is only taken per listener,
   as `listener.name.<listener>.<setting>`;
3. the value must parse as the setting's type (with its bounds, where Kafka sets some);
4. at the cluster-wide default, settings that belong to one broker (its listeners' TLS and
   SASL settings) are refused: "broker id must be specified".

A name that neither Kafka nor Seaway knows is refused too (Kafka would store it and ignore
it; here a typo gets an answer). Listener names are Kafka's: `listener.name.<listener>.<name>`
for any listener setting, and `listener.name.<listener>.<mechanism>.<name>` for the SASL
mechanism settings (sasl.jaas.config, ...).

Stored is not applied. Brokers apply the replication throttle rates; the rest
(the brokers' topic defaults, thread counts, connection limits, listener TLS stores, remote
storage) are kept in the metadata log and described as Kafka would describe them, for a node
to read from there as it comes to use them.
"""
from __future__ import annotations

import re
from typing import Mapping

from .broker import BROKER_CONFIGS
from .defs import ConfigDef, ConfigError, ConfigType
from .kafka_names import KAFKA_BROKER_CONFIG_NAMES
from .topic import TOPIC_CONFIG_LIST

_T = ConfigType

# Keystores and truststores: per listener and per broker only (SslConfigs.RECONFIGURABLE_CONFIGS).
LISTENER_STORE_CONFIGS = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.certificates",
})

# A listener's settings (DynamicListenerConfig): per broker, except the three below.
_LISTENER_CONFIGS = LISTENER_STORE_CONFIGS | {
    "advertised.listeners", "listeners", "listener.security.protocol.map", "principal.builder.class",
    "ssl.protocol", "ssl.provider", "ssl.cipher.suites", "ssl.enabled.protocols", "ssl.keymanager.algorithm",
    "ssl.trustmanager.algorithm", "ssl.endpoint.identification.algorithm", "ssl.secure.random.implementation",
    "ssl.client.auth", "ssl.engine.factory.class", "sasl.mechanism.inter.broker.protocol", "sasl.jaas.config",
    "sasl.enabled.mechanisms", "sasl.kerberos.service.name", "sasl.kerberos.kinit.cmd",
    "sasl.kerberos.ticket.renew.window.factor", "sasl.kerberos.ticket.renew.jitter",
    "sasl.kerberos.min.time.before.relogin", "sasl.kerberos.principal.to.local.rules",
    "sasl.login.refresh.window.factor", "sasl.login.refresh.window.jitter",
    "sasl.login.refresh.min.period.seconds", "sasl.login.refresh.buffer.seconds",
    "max.connections", "max.connection.creation.rate", "num.network.threads",
}
_CLUSTER_LEVEL_LISTENER_CONFIGS = frozenset({"max.connections", "max.connection.creation.rate",
                                             "num.network.threads"})
PER_BROKER_CONFIGS = frozenset(_LISTENER_CONFIGS - _CLUSTER_LEVEL_LISTENER_CONFIGS)

# Kafka's KRaft brokers refuse to change their registered listeners (DynamicListenerConfig).
_REGISTRATION_CONFIGS = frozenset({"advertised.listeners", "listeners", "listener.security.protocol.map"})

# The broker synonyms of topic settings (DynamicLogConfig), and the replication throttles
# (DynamicConfig.Broker), which brokers apply.
TOPIC_DEFAULTS = {d.synonym: d for d in TOPIC_CONFIG_LIST if d.synonym}
THROTTLE_RATE_CONFIGS = frozenset({"leader.replication.throttled.rate", "follower.replication.throttled.rate"})


def _d(name: str, type_: ConfigType, doc: str, minimum: float | None = None, *, sensitive: bool = False,
       choices: tuple[str, ...] | None = None) -> ConfigDef:
    return ConfigDef(name, type_, None, doc, minimum=minimum, sensitive=sensitive, choices=choices)


_JAAS = _d("sasl.jaas.config", _T.PASSWORD, "the JAAS login context", sensitive=True)

# The dynamic settings Seaway's BROKER_CONFIGS does not define, with Kafka's types and bounds.
_OTHERS = [
    _d("ssl.keystore.type", _T.STRING, "the keystore's format"),
    _d("ssl.keystore.location", _T.STRING, "the keystore file"),
    _d("ssl.keystore.password", _T.PASSWORD, "the keystore's password", sensitive=True),
    _d("ssl.key.password", _T.PASSWORD, "the private key's password", sensitive=True),
    _d("ssl.truststore.type", _T.STRING, "the truststore's format"),
    _d("ssl.truststore.location", _T.STRING, "the truststore file"),
    _d("ssl.truststore.password", _T.PASSWORD, "the truststore's password", sensitive=True),
    _d("ssl.keystore.certificate.chain", _T.PASSWORD, "the certificate chain, PEM", sensitive=True),
    _d("ssl.keystore.key", _T.PASSWORD, "the private key, PEM", sensitive=True),
    _d("ssl.truststore.certificates", _T.PASSWORD, "the trusted certificates, PEM", sensitive=True),
    _d("principal.builder.class", _T.CLASS, "builds the principal of a connection"),
    _d("ssl.protocol", _T.STRING, "the TLS protocol of the SSLContext"),
    _d("ssl.provider", _T.STRING, "the security provider"),
    _d("ssl.cipher.suites", _T.LIST, "the cipher suites allowed"),
    _d("ssl.enabled.protocols", _T.LIST, "the TLS versions allowed"),
    _d("ssl.keymanager.algorithm", _T.STRING, "the key manager factory's algorithm"),
    _d("ssl.trustmanager.algorithm", _T.STRING, "the trust manager factory's algorithm"),
    _d("ssl.endpoint.identification.algorithm", _T.STRING, "how the peer's host name is checked"),
    _d("ssl.secure.random.implementation", _T.STRING, "the SecureRandom implementation"),
    _d("ssl.client.auth", _T.STRING, "client certificates", choices=("required", "requested", "none")),
    _d("ssl.engine.factory.class", _T.CLASS, "the SSLEngine factory"),
    _d("sasl.mechanism.inter.broker.protocol", _T.STRING, "the mechanism brokers use among themselves"),
    _JAAS,
    _d("sasl.enabled.mechanisms", _T.LIST, "the SASL mechanisms a listener offers"),
    _d("sasl.kerberos.service.name", _T.STRING, "the Kerberos principal name"),
    _d("sasl.kerberos.kinit.cmd", _T.STRING, "the kinit command"),
    _d("sasl.kerberos.ticket.renew.window.factor", _T.DOUBLE, "when to renew the ticket"),
    _d("sasl.kerberos.ticket.renew.jitter", _T.DOUBLE, "jitter of the renewal time"),
    _d("sasl.kerberos.min.time.before.relogin", _T.LONG, "sleep between refresh attempts"),
    _d("sasl.kerberos.principal.to.local.rules", _T.LIST, "principal to short name rules"),
    _d("sasl.login.refresh.window.factor", _T.DOUBLE, "when to refresh the credential", 0.5),
    _d("sasl.login.refresh.window.jitter", _T.DOUBLE, "jitter of the refresh time", 0.0),
    _d("sasl.login.refresh.min.period.seconds", _T.SHORT, "the least time between refreshes", 0),
    _d("sasl.login.refresh.buffer.seconds", _T.SHORT, "time kept before the credential expires", 0),
    _d("max.connections", _T.INT, "connections allowed in the broker at any time", 0),
    _d("max.connection.creation.rate", _T.INT, "new connections allowed per second", 0),
    _d("num.network.threads", _T.INT, "threads receiving requests and sending responses", 1),
    _d("max.connections.per.ip", _T.INT, "connections allowed from one address", 0),
    _d("max.connections.per.ip.overrides", _T.STRING, "per-address overrides: host:count,..."),
    _d("log.cleaner.threads", _T.INT, "background threads for log cleaning", 0),
    _d("log.cleaner.dedupe.buffer.size", _T.LONG, "memory for log deduplication across cleaner threads"),
    _d("log.cleaner.io.buffer.load.factor", _T.DOUBLE, "the dedupe buffer's load factor"),
    _d("log.cleaner.io.buffer.size", _T.INT, "memory for log cleaner I/O buffers", 0),
    _d("log.cleaner.io.max.bytes.per.second", _T.DOUBLE, "the cleaner's read and write throttle"),
    _d("num.io.threads", _T.INT, "threads processing requests", 1),
    _d("num.replica.fetchers", _T.INT, "fetcher threads per source broker"),
    _d("num.recovery.threads.per.data.dir", _T.INT, "threads per data directory for recovery", 1),
    _d("background.threads", _T.INT, "threads for background tasks", 1),
    _d("metric.reporters", _T.LIST, "classes used as metrics reporters"),
    _d("producer.id.expiration.ms", _T.INT, "how long an idle producer id is kept", 1),
    _d("remote.log.index.file.cache.total.size.bytes", _T.LONG, "remote index cache size", 1),
    _d("remote.fetch.max.wait.ms", _T.INT, "how long a remote fetch may wait", 1),
    _d("remote.log.manager.copy.max.bytes.per.second", _T.LONG, "remote copy throttle", 1),
    _d("remote.log.manager.fetch.max.bytes.per.second", _T.LONG, "remote fetch throttle", 1),
    _d("remote.list.offsets.request.timeout.ms", _T.LONG, "remote ListOffsets timeout", 1),
    _d("replica.alter.log.dirs.io.max.bytes.per.second", _T.LONG, "the log directory move throttle", 0),
]

# Dynamic only per listener and SASL mechanism: listener.name.<listener>.<mechanism>.<setting>.
_MECHANISM_CONFIGS = {d.name: d for d in [
    _JAAS,
    _d("sasl.login.callback.handler.class", _T.CLASS, "the login callback handler"),
    _d("sasl.login.class", _T.CLASS, "the Login implementation"),
    _d("sasl.server.callback.handler.class", _T.CLASS, "the server callback handler"),
    _d("connections.max.reauth.ms", _T.LONG, "the longest a session lives before it must reauthenticate"),
]}

# Dynamic settings only Seaway's BROKER_CONFIGS defines.
_SEAWAY_DEFINED = ("transaction.partition.verification.enable", "log.cleaner.backoff.ms", *THROTTLE_RATE_CONFIGS,
                   *_REGISTRATION_CONFIGS)
# Seaway's own definition where it has one (its bounds and choices are the node's), else the
# table above's; the topic defaults (message.max.bytes, log.retention.ms, ...) with the topic's.
DYNAMIC_BROKER_CONFIGS: dict[str, ConfigDef] = {
    name: BROKER_CONFIGS.get(name) or found for name, found in {
        **{d.name: d for d in _OTHERS},
        **{name: BROKER_CONFIGS[name] for name in _SEAWAY_DEFINED},
        **TOPIC_DEFAULTS,
    }.items()
}

_LISTENER_PREFIX = re.compile(r"listener\.name\.([^.]*)\.(.*)")


def _listener_base(name: str) -> str | None:
    prefixed = _LISTENER_PREFIX.fullmatch(name)
    return None if prefixed is None else prefixed.group(2)


def definition(name: str) -> ConfigDef | None:
    """The definition a dynamic broker setting is checked with (a listener's base setting's for
    `listener.name.<listener>.<setting>`), or None if it is not dynamic."""
    base = _listener_base(name)
    if base is None:
        return DYNAMIC_BROKER_CONFIGS.get(name)
    for mechanism_config, found in _MECHANISM_CONFIGS.items():
        if base.endswith("." + mechanism_config):
            return found
    return DYNAMIC_BROKER_CONFIGS[base] if base in _LISTENER_CONFIGS else None


def check_changes(values: Mapping[str, str | None], per_broker: bool) -> None:
    """ConfigError (the caller answers INVALID_REQUEST) if the dynamic config these values make
    for a broker (per_broker) or the cluster-wide default may not be stored."""
    not_dynamic = [n for n in values if definition(n) is None]
    fixed = sorted(n for n in not_dynamic if n in KAFKA_BROKER_CONFIG_NAMES or n in BROKER_CONFIGS)
    if fixed:
        raise ConfigError(f"Cannot update these configs dynamically: {', '.join(fixed)}")
    if not_dynamic:
        raise ConfigError(f"Unknown broker configs: {', '.join(sorted(not_dynamic))}")
    bare = sorted(n for n in values if n in LISTENER_STORE_CONFIGS)
    if bare:
        raise ConfigError("These security configs can be dynamically updated only per-listener using the "
                          f"listener prefix: {', '.join(bare)}")
    registration = sorted(n for n in values if (_listener_base(n) or n) in _REGISTRATION_CONFIGS)
    if registration:
        raise ConfigError("Advertised listeners cannot be altered when using a Raft-based metadata quorum: "
                          + ", ".join(registration))
    for name, value in values.items():
        if value is None:
            raise ConfigError(f"Null value not supported for broker configs: {name}")
        found = definition(name)
        assert found is not None   # not_dynamic was empty
        try:
            found.parse(value)
        except ConfigError as exc:
            raise ConfigError(f"{name}: {str(exc).split(': ', 1)[-1]}") from None
    if not per_broker:
        own = sorted(n for n in values if _per_broker(n))
        if own:
            raise ConfigError("Cannot update these configs at default cluster level, broker id must be "
                              f"specified: {', '.join(own)}")


def _per_broker(name: str) -> bool:
    base = _listener_base(name)
    if base is not None:
        return base not in _CLUSTER_LEVEL_LISTENER_CONFIGS
    return name in PER_BROKER_CONFIGS
