"""MetadataImage: the state the metadata log describes, and MetadataDelta, how records change it.

Theory of operation
-------------------
This is Kafka's `MetadataImage` / `MetadataDelta` pair, reduced to what Seaway models today:

* **brokers** – `BrokerRegistration` by id: epoch, incarnation id, endpoints, rack, supported
  features, log dirs, `fenced`, `in_controlled_shutdown`.
  RegisterBrokerRecord replaces the registration; FenceBrokerRecord / UnfenceBrokerRecord /
  BrokerRegistrationChangeRecord change flags of the registration whose id *and epoch* they
  name; UnregisterBrokerRecord removes it (again id and epoch must match, as Kafka's
  ClusterControlManager insists).
* **topics** – `TopicImage` by id (and a name → id index), with `PartitionRegistration`s.
  PartitionRecord sets a partition whole; PartitionChangeRecord merges exactly as Kafka's
  `PartitionRegistration.merge`: null Replicas/Isr/Removing/Adding/Directories/ELR = unchanged,
  Leader -2 (NO_LEADER_CHANGE) = unchanged, anything else (including -1, no leader, and the
  same leader again) sets the leader and bumps the leader epoch by one; LeaderRecoveryState -1
  = unchanged; the partition epoch bumps by one on every change record. (The controller decides
  when an ISR shrink must bump the leader epoch – it does so by writing Leader; the image only
  follows the record.) RemoveTopicRecord drops the topic and its topic configs.
* **configs** – by (resource type, resource name): ConfigRecord sets a key, a null value
  deletes it. Topic configs (type 2) must name an existing topic; broker configs (type 4) name
  a broker id or "" (the cluster default) – the broker need not be registered, as in Kafka.
* **producer ids** – ProducerIdsRecord's NextProducerId, which must strictly increase.
* **features** – FeatureLevelRecord; level 0 removes the feature (Kafka's FeaturesDelta).
* **SCRAM credentials** – by (user, mechanism): UserScramCredentialRecord sets one,
  RemoveUserScramCredentialRecord deletes one that must exist.
* **ACLs** – by id: AccessControlEntryRecord adds one under an id not in use,
  RemoveAccessControlEntryRecord deletes one that exists (Kafka's AclControlManager.replay).

NoOpRecord is accepted and ignored. Every other record type (quotas, delegation
tokens, controller registrations, transaction markers, ZK migration) raises
`UnsupportedMetadataRecord` rather than being dropped: an image that silently ignored
records would not be the state the log describes.

A record that names an unknown topic, partition or broker, a stale broker epoch, a duplicate
topic name or id, or an invalid flag value raises `MetadataImageError`: a corrupt log must not
be silently accepted. A failed replay leaves the delta's image unchanged only when used through
`MetadataImage.apply`; a `MetadataDelta` that raised mid-way must be discarded.

Images are immutable: mappings are `MappingProxyType`s, sequences tuples, entries frozen
dataclasses. `MetadataDelta` copies what it touches on first write, so replaying a whole
snapshot through one delta costs O(records), not O(records × image size).
"""
from __future__ import annotations

import uuid as _uuid
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping, Sequence

from core.protocol import messages as m
from core.protocol.codegen import Message
from core.protocol.metadata_records import MetadataRecord

NO_LEADER = -1
NO_LEADER_CHANGE = -2
LEADER_RECOVERY_NO_CHANGE = -1

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4

# BrokerRegistrationChangeRecord flags (Kafka's BrokerRegistrationFencingChange /
# BrokerRegistrationInControlledShutdownChange).
FENCING_FENCE, FENCING_NONE, FENCING_UNFENCE = 1, 0, -1
SHUTDOWN_NONE, SHUTDOWN_IN_CONTROLLED_SHUTDOWN = 0, 1

ZERO_UUID = bytes(16)
_EMPTY: Mapping[Any, Any] = MappingProxyType({})   # the empty default of every mapping


class MetadataImageError(ValueError):
    """A metadata record that cannot apply to the image (the log is corrupt or out of order)."""


class UnsupportedMetadataRecord(MetadataImageError):
    """A valid metadata record of a type the image does not model yet."""


def uuid_str(raw: bytes) -> str:
    return str(_uuid.UUID(bytes=bytes(raw)))


# --------------------------------------------------------------------------- image entries


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    name: str
    host: str
    port: int
    security_protocol: int


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    id: int
    epoch: int
    incarnation_id: bytes
    endpoints: tuple[BrokerEndpoint, ...] = ()
    rack: str | None = None
    fenced: bool = True
    in_controlled_shutdown: bool = False
    supported_features: Mapping[str, tuple[int, int]] = field(default_factory=lambda: _EMPTY)
    log_dirs: tuple[bytes, ...] = ()
    is_migrating_zk_broker: bool = False


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int = NO_LEADER
    leader_epoch: int = 0
    partition_epoch: int = 0
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader_recovery_state: int = 0
    directories: tuple[bytes, ...] = ()
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()

    def merge(self, rec: m.PartitionChangeRecord) -> "PartitionRegistration":
        """Kafka's PartitionRegistration.merge(PartitionChangeRecord)."""
        def pick(new: Sequence[int] | None, old: tuple[int, ...]) -> tuple[int, ...]:
            return old if new is None else tuple(new)
        if rec.leader == NO_LEADER_CHANGE:
            leader, leader_epoch = self.leader, self.leader_epoch
        elif rec.leader < NO_LEADER:
            raise MetadataImageError(f"PartitionChangeRecord has invalid leader {rec.leader}")
        else:
            leader, leader_epoch = rec.leader, self.leader_epoch + 1
        lrs = rec.leader_recovery_state
        if lrs == LEADER_RECOVERY_NO_CHANGE:
            lrs = self.leader_recovery_state
        elif lrs not in (0, 1):
            raise MetadataImageError(f"PartitionChangeRecord has invalid leader recovery state {lrs}")
        return PartitionRegistration(
            replicas=pick(rec.replicas, self.replicas),
            isr=pick(rec.isr, self.isr),
            leader=leader,
            leader_epoch=leader_epoch,
            partition_epoch=self.partition_epoch + 1,
            removing_replicas=pick(rec.removing_replicas, self.removing_replicas),
            adding_replicas=pick(rec.adding_replicas, self.adding_replicas),
            leader_recovery_state=lrs,
            directories=(self.directories if rec.directories is None
                         else tuple(bytes(d) for d in rec.directories)),
            elr=pick(rec.eligible_leader_replicas, self.elr),
            last_known_elr=pick(rec.last_known_elr, self.last_known_elr),
        )


@dataclass(frozen=True, slots=True)
class ScramEntry:
    """A user's stored SCRAM credential for one mechanism (never the password)."""
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


@dataclass(frozen=True, slots=True)
class AclEntry:
    """One ACL as its record states it (Kafka's codes: resource type, pattern type, operation,
    permission); core/security/acls.py turns these into decisions."""
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int


# Kafka's ScramMechanism type codes, as records and AlterUserScramCredentials carry them.
SCRAM_MECHANISM_TYPES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    id: bytes
    partitions: Mapping[int, PartitionRegistration] = field(default_factory=lambda: _EMPTY)


@dataclass(frozen=True, slots=True)
class MetadataImage:
    brokers: Mapping[int, BrokerRegistration] = field(default_factory=lambda: _EMPTY)
    topics: Mapping[bytes, TopicImage] = field(default_factory=lambda: _EMPTY)           # by topic id
    topic_ids: Mapping[str, bytes] = field(default_factory=lambda: _EMPTY)              # name -> id
    configs: Mapping[tuple[int, str], Mapping[str, str]] = field(default_factory=lambda: _EMPTY)
    next_producer_id: int = 0
    features: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    scram: Mapping[tuple[str, int], ScramEntry] = field(default_factory=lambda: _EMPTY)   # (user, mechanism)
    acls: Mapping[bytes, AclEntry] = field(default_factory=lambda: _EMPTY)                # by ACL id

    @classmethod
    def empty(cls) -> "MetadataImage":
        return cls()

    def apply(self, record: Message | MetadataRecord) -> "MetadataImage":
        """The image after one record (this image is unchanged, even if the record fails)."""
        delta = MetadataDelta(self)
        delta.replay(record)
        return delta.image()

    def apply_all(self, records: Iterable[Message | MetadataRecord]) -> "MetadataImage":
        delta = MetadataDelta(self)
        for record in records:
            delta.replay(record)
        return delta.image()

    # conveniences
    def topic(self, name: str) -> TopicImage | None:
        tid = self.topic_ids.get(name)
        return None if tid is None else self.topics[tid]

    def partition(self, name: str, partition: int) -> PartitionRegistration | None:
        topic = self.topic(name)
        return None if topic is None else topic.partitions.get(partition)

    def topic_config(self, name: str) -> Mapping[str, str]:
        return self.configs.get((TOPIC_RESOURCE, name), _EMPTY)

    def broker_config(self, broker: int | str) -> Mapping[str, str]:
        return self.configs.get((BROKER_RESOURCE, str(broker)), _EMPTY)


# --------------------------------------------------------------------------- delta


class MetadataDelta:
    """A mutable, copy-on-write view of an image that records are replayed into."""

    def __init__(self, base: MetadataImage):
        self._base = base
        self._brokers: dict[int, BrokerRegistration] | None = None
        self._topics: dict[bytes, TopicImage] | None = None
        self._topic_ids: dict[str, bytes] | None = None
        self._configs: dict[tuple[int, str], Mapping[str, str]] | None = None
        self._features: dict[str, int] | None = None
        self._scram: dict[tuple[str, int], ScramEntry] | None = None
        self._acls: dict[bytes, AclEntry] | None = None
        # topic id -> writable partitions dict
        self._partitions: dict[bytes, dict[int, PartitionRegistration]] = {}
        self._config_copies: set[tuple[int, str]] = set()   # config keys already copied
        self._next_producer_id = base.next_producer_id

    # -- writable copies
    def _w_brokers(self) -> dict[int, BrokerRegistration]:
        if self._brokers is None:
            self._brokers = dict(self._base.brokers)
        return self._brokers

    def _w_topics(self) -> dict[bytes, TopicImage]:
        if self._topics is None:
            self._topics = dict(self._base.topics)
            self._topic_ids = dict(self._base.topic_ids)
        return self._topics

    def _w_topic_ids(self) -> dict[str, bytes]:
        self._w_topics()   # copies both
        assert self._topic_ids is not None
        return self._topic_ids

    def _w_configs(self) -> dict[tuple[int, str], Mapping[str, str]]:
        if self._configs is None:
            self._configs = dict(self._base.configs)
        return self._configs

    def _w_features(self) -> dict[str, int]:
        if self._features is None:
            self._features = dict(self._base.features)
        return self._features

    def _brokers_r(self) -> Mapping[int, BrokerRegistration]:
        return self._base.brokers if self._brokers is None else self._brokers

    def _topics_r(self) -> Mapping[bytes, TopicImage]:
        return self._base.topics if self._topics is None else self._topics

    def _topic_ids_r(self) -> Mapping[str, bytes]:
        return self._base.topic_ids if self._topic_ids is None else self._topic_ids

    def _configs_r(self) -> Mapping[tuple[int, str], Mapping[str, str]]:
        return self._base.configs if self._configs is None else self._configs

    # -- replay
    def replay(self, record: Message | MetadataRecord) -> None:
        message = record.message if isinstance(record, MetadataRecord) else record
        handler = _HANDLERS.get(type(message))
        if handler is None:
            raise UnsupportedMetadataRecord(
                f"{type(message).__name__} is not supported by the metadata image")
        handler(self, message)

    def _broker(self, broker_id: int, epoch: int, action: str) -> BrokerRegistration:
        reg = self._brokers_r().get(broker_id)
        if reg is None:
            raise MetadataImageError(f"cannot {action} broker {broker_id}: it is not registered")
        if reg.epoch != epoch:
            raise MetadataImageError(f"cannot {action} broker {broker_id} with epoch {epoch}: "
                                     f"its registration has epoch {reg.epoch}")
        return reg

    def _register_broker(self, r: m.RegisterBrokerRecord) -> None:
        self._w_brokers()[r.broker_id] = BrokerRegistration(
            id=r.broker_id, epoch=r.broker_epoch, incarnation_id=bytes(r.incarnation_id),
            endpoints=tuple(BrokerEndpoint(e.name, e.host, e.port, e.security_protocol)
                            for e in r.end_points),
            rack=r.rack, fenced=bool(r.fenced),
            in_controlled_shutdown=bool(r.in_controlled_shutdown),
            supported_features=MappingProxyType(
                {f.name: (f.min_supported_version, f.max_supported_version) for f in r.features}),
            log_dirs=tuple(bytes(d) for d in r.log_dirs),
            is_migrating_zk_broker=bool(r.is_migrating_zk_broker))

    def _unregister_broker(self, r: m.UnregisterBrokerRecord) -> None:
        self._broker(r.broker_id, r.broker_epoch, "unregister")
        del self._w_brokers()[r.broker_id]

    def _fence(self, r: m.FenceBrokerRecord) -> None:
        reg = self._broker(r.id, r.epoch, "fence")
        self._w_brokers()[r.id] = replace(reg, fenced=True)

    def _unfence(self, r: m.UnfenceBrokerRecord) -> None:
        reg = self._broker(r.id, r.epoch, "unfence")
        self._w_brokers()[r.id] = replace(reg, fenced=False)

    def _registration_change(self, r: m.BrokerRegistrationChangeRecord) -> None:
        reg = self._broker(r.broker_id, r.broker_epoch, "change the registration of")
        fenced = {FENCING_FENCE: True, FENCING_NONE: reg.fenced, FENCING_UNFENCE: False}.get(r.fenced)
        if fenced is None:
            raise MetadataImageError(f"BrokerRegistrationChangeRecord for broker {r.broker_id} "
                                     f"has invalid Fenced value {r.fenced}")
        if r.in_controlled_shutdown == SHUTDOWN_NONE:
            shutdown = reg.in_controlled_shutdown
        elif r.in_controlled_shutdown == SHUTDOWN_IN_CONTROLLED_SHUTDOWN:
            shutdown = True
        else:
            raise MetadataImageError(f"BrokerRegistrationChangeRecord for broker {r.broker_id} has "
                                     f"invalid InControlledShutdown value {r.in_controlled_shutdown}")
        log_dirs = tuple(bytes(d) for d in r.log_dirs) if r.log_dirs else reg.log_dirs
        self._w_brokers()[r.broker_id] = replace(
            reg, fenced=fenced, in_controlled_shutdown=shutdown, log_dirs=log_dirs)

    def _topic(self, r: m.TopicRecord) -> None:
        tid = bytes(r.topic_id)
        if tid == ZERO_UUID:
            raise MetadataImageError(f"TopicRecord for {r.name!r} has the zero topic id")
        if not r.name:
            raise MetadataImageError("TopicRecord has an empty name")
        if r.name in self._topic_ids_r():
            raise MetadataImageError(f"TopicRecord: topic {r.name!r} already exists")
        if tid in self._topics_r():
            raise MetadataImageError(f"TopicRecord: topic id {uuid_str(tid)} already belongs to "
                                     f"topic {self._topics_r()[tid].name!r}")
        self._w_topics()[tid] = TopicImage(r.name, tid)
        self._w_topic_ids()[r.name] = tid

    def _existing_topic(self, raw_id: bytes, what: str) -> TopicImage:
        tid = bytes(raw_id)
        topic = self._topics_r().get(tid)
        if topic is None:
            raise MetadataImageError(f"{what} refers to unknown topic id {uuid_str(tid)}")
        return topic

    def _w_partitions(self, topic: TopicImage) -> dict[int, PartitionRegistration]:
        parts = self._partitions.get(topic.id)
        if parts is None:
            parts = self._partitions[topic.id] = dict(topic.partitions)
            self._w_topics()[topic.id] = replace(topic, partitions=MappingProxyType(parts))
        return parts

    def _partition(self, r: m.PartitionRecord) -> None:
        topic = self._existing_topic(r.topic_id, f"PartitionRecord {r.partition_id}")
        if r.partition_id < 0:
            raise MetadataImageError(f"PartitionRecord for {topic.name!r} has invalid "
                                     f"partition id {r.partition_id}")
        self._w_partitions(topic)[r.partition_id] = PartitionRegistration(
            replicas=tuple(r.replicas), isr=tuple(r.isr), leader=r.leader,
            leader_epoch=r.leader_epoch, partition_epoch=r.partition_epoch,
            removing_replicas=tuple(r.removing_replicas), adding_replicas=tuple(r.adding_replicas),
            leader_recovery_state=r.leader_recovery_state,
            directories=tuple(bytes(d) for d in r.directories),
            elr=tuple(r.eligible_leader_replicas or ()),
            last_known_elr=tuple(r.last_known_elr or ()))

    def _partition_change(self, r: m.PartitionChangeRecord) -> None:
        topic = self._existing_topic(r.topic_id, f"PartitionChangeRecord {r.partition_id}")
        current = topic.partitions.get(r.partition_id)
        if current is None:
            raise MetadataImageError(f"PartitionChangeRecord refers to unknown partition "
                                     f"{topic.name}-{r.partition_id}")
        self._w_partitions(topic)[r.partition_id] = current.merge(r)

    def _remove_topic(self, r: m.RemoveTopicRecord) -> None:
        topic = self._existing_topic(r.topic_id, "RemoveTopicRecord")
        del self._w_topics()[topic.id]
        del self._w_topic_ids()[topic.name]
        self._partitions.pop(topic.id, None)
        key = (TOPIC_RESOURCE, topic.name)
        if key in self._configs_r():
            del self._w_configs()[key]
            self._config_copies.discard(key)

    def _config(self, r: m.ConfigRecord) -> None:
        key = (r.resource_type, r.resource_name)
        if r.resource_type == TOPIC_RESOURCE and r.resource_name not in self._topic_ids_r():
            raise MetadataImageError(f"ConfigRecord {r.name!r} refers to unknown topic "
                                     f"{r.resource_name!r}")
        if r.resource_type == BROKER_RESOURCE and r.resource_name != "" \
                and not (r.resource_name.isdigit() and r.resource_name.isascii()):
            raise MetadataImageError(f"ConfigRecord {r.name!r} names broker "
                                     f"{r.resource_name!r}, which is not a broker id")
        configs = self._w_configs()
        if key not in self._config_copies:
            configs[key] = dict(configs.get(key, {}))
            self._config_copies.add(key)
        entry = configs[key]
        assert isinstance(entry, dict)   # copied above, or by an earlier record of this delta
        if r.value is None:
            entry.pop(r.name, None)
        else:
            entry[r.name] = r.value

    def _producer_ids(self, r: m.ProducerIdsRecord) -> None:
        if r.next_producer_id <= self._next_producer_id:
            raise MetadataImageError(f"ProducerIdsRecord next producer id {r.next_producer_id} "
                                     f"is not greater than the current {self._next_producer_id}")
        self._next_producer_id = r.next_producer_id

    def _feature_level(self, r: m.FeatureLevelRecord) -> None:
        if r.feature_level < 0:
            raise MetadataImageError(f"FeatureLevelRecord {r.name!r} has negative level "
                                     f"{r.feature_level}")
        features = self._w_features()
        if r.feature_level == 0:
            features.pop(r.name, None)
        else:
            features[r.name] = r.feature_level

    def _noop(self, r: m.NoOpRecord) -> None:
        pass

    def _w_scram(self) -> dict[tuple[str, int], ScramEntry]:
        if self._scram is None:
            self._scram = dict(self._base.scram)
        return self._scram

    def _scram_credential(self, r: m.UserScramCredentialRecord) -> None:
        if r.mechanism not in SCRAM_MECHANISM_TYPES:
            raise MetadataImageError(f"UserScramCredentialRecord for {r.name!r}: unknown mechanism {r.mechanism}")
        self._w_scram()[(r.name, r.mechanism)] = ScramEntry(bytes(r.salt), bytes(r.stored_key),
                                                           bytes(r.server_key), r.iterations)

    def _w_acls(self) -> dict[bytes, AclEntry]:
        if self._acls is None:
            self._acls = dict(self._base.acls)
        return self._acls

    def _acl(self, r: m.AccessControlEntryRecord) -> None:
        acls = self._w_acls()
        acl_id = bytes(r.id)
        if acl_id in acls:
            raise MetadataImageError(f"AccessControlEntryRecord: an ACL with id {_uuid.UUID(bytes=acl_id)} "
                                     f"already exists")
        acls[acl_id] = AclEntry(r.resource_type, r.resource_name, r.pattern_type, r.principal, r.host,
                                r.operation, r.permission_type)

    def _remove_acl(self, r: m.RemoveAccessControlEntryRecord) -> None:
        acls = self._w_acls()
        acl_id = bytes(r.id)
        if acl_id not in acls:
            raise MetadataImageError(f"RemoveAccessControlEntryRecord: no ACL has id {_uuid.UUID(bytes=acl_id)}")
        del acls[acl_id]

    def _remove_scram_credential(self, r: m.RemoveUserScramCredentialRecord) -> None:
        scram = self._w_scram()
        if (r.name, r.mechanism) not in scram:
            raise MetadataImageError(f"RemoveUserScramCredentialRecord: {r.name!r} has no credential "
                                     f"for mechanism {r.mechanism}")
        del scram[(r.name, r.mechanism)]

    # -- result
    def image(self) -> MetadataImage:
        base = self._base
        configs = base.configs
        if self._configs is not None:
            configs = MappingProxyType({
                k: (MappingProxyType(dict(v)) if k in self._config_copies else v)
                for k, v in self._configs.items() if len(v)})
        return MetadataImage(
            brokers=base.brokers if self._brokers is None else MappingProxyType(dict(self._brokers)),
            topics=base.topics if self._topics is None else MappingProxyType({
                tid: (replace(t, partitions=MappingProxyType(dict(self._partitions[tid])))
                      if tid in self._partitions else t)
                for tid, t in self._topics.items()}),
            topic_ids=base.topic_ids if self._topic_ids is None
            else MappingProxyType(dict(self._topic_ids)),
            configs=configs,
            next_producer_id=self._next_producer_id,
            features=base.features if self._features is None
            else MappingProxyType(dict(self._features)),
            scram=base.scram if self._scram is None else MappingProxyType(dict(self._scram)),
            acls=base.acls if self._acls is None else MappingProxyType(dict(self._acls)),
        )


# By record class, the replay of that class (whose argument type the table cannot say, hence Any).
_HANDLERS: dict[type[Message], Callable[[MetadataDelta, Any], None]] = {
    m.RegisterBrokerRecord: MetadataDelta._register_broker,
    m.UnregisterBrokerRecord: MetadataDelta._unregister_broker,
    m.FenceBrokerRecord: MetadataDelta._fence,
    m.UnfenceBrokerRecord: MetadataDelta._unfence,
    m.BrokerRegistrationChangeRecord: MetadataDelta._registration_change,
    m.TopicRecord: MetadataDelta._topic,
    m.PartitionRecord: MetadataDelta._partition,
    m.PartitionChangeRecord: MetadataDelta._partition_change,
    m.RemoveTopicRecord: MetadataDelta._remove_topic,
    m.ConfigRecord: MetadataDelta._config,
    m.ProducerIdsRecord: MetadataDelta._producer_ids,
    m.FeatureLevelRecord: MetadataDelta._feature_level,
    m.NoOpRecord: MetadataDelta._noop,
    m.UserScramCredentialRecord: MetadataDelta._scram_credential,
    m.RemoveUserScramCredentialRecord: MetadataDelta._remove_scram_credential,
    m.AccessControlEntryRecord: MetadataDelta._acl,
    m.RemoveAccessControlEntryRecord: MetadataDelta._remove_acl,
}
