"""QuorumController: the KRaft controller's state machine (Kafka's QuorumController minus I/O).

Theory of operation
===================

The controller does no I/O and reads no clock but the one it is given (`clock() -> ms`). A
driver owns it, runs it from one task, and does the I/O:

    inputs                                  outputs
    replay(records, last_offset)            -
    load_snapshot(image, offset)            -
    activate(log_end_offset)                records to append (bootstrap)
    deactivate()                            -
    broker_registration(req, v[, next_offset]),
    broker_heartbeat, unregister_broker,
    create_topics, delete_topics,
    create_partitions,
    incremental_alter_configs,
    alter_configs,
    allocate_producer_ids,
    alter_partition,
    elect_leaders,
    alter_partition_reassignments,
    list_partition_reassignments  (or handle(key, req, v))  ControllerResult(records, response)
    tick()                                  records to append
    next_deadline_ms()                      when to call tick() next (None: no need)

State. The controller keeps two images (image.py):

* the **committed** image: every record the Raft log has committed, in log order, from
  replay() and load_snapshot(). Every node keeps it, standby or active.
* the **pending** image: committed + the records this node, as active controller, has
  generated but not yet seen committed. Requests are checked and records generated against
  the pending image, and the records are applied to it at once, so the next request sees them
  (Kafka does the same with its snapshot registry). On a standby node pending == committed.

Each ControllerResult's `response` is the wire response object of the API asked (for the
version asked). Its `records` (possibly none) must be appended to the metadata log as one
batch, in order, before anything else the controller returns later; the response is sent when
the log has committed the batch's last record. A result with no records was still read from
the pending image, so its response waits until every record returned before it has committed
(`has_uncommitted`), as Kafka's read-only controller operations wait for the purgatory: an
AlterPartition that changes nothing must not answer with an ISR the log may yet lose. A
validate-only request returns no records and leaves the pending image alone.

Offsets. The controller counts offsets itself: activate() is told the log end offset (after
the leader's LeaderChange control record), and every record it returns takes the next
offset. It needs them for three things, as Kafka does: a broker's epoch is the offset of the
first record of its registration batch; a fenced broker is unfenced once its heartbeat says it
has read up to its RegisterBrokerRecord; and a broker in controlled shutdown may stop once
every active broker has read past the records that began its shutdown. A driver whose log puts
something else between batches may pass the true next offset to broker_registration, and
replay() re-syncs the count from the committed offsets of the controller's own records.

Leadership. activate() is called once this node is the Raft leader *and* has replayed every
committed record up to the start of its epoch (Kafka's raft client gives the controller
leadership only then). It resets pending to committed, starts a session for every registered
broker (Kafka gives them a fresh session deadline), and returns bootstrap records when the log
holds no metadata.version yet (a FeatureLevelRecord: metadata.version 3.6-IV2, the last one
whose records this controller writes exactly: no directory assignment, no ELR).
deactivate() (leadership lost, or records could not be appended) drops the pending image, the
sessions and the schedule; the results the driver has not yet seen committed must be answered
NOT_CONTROLLER by the driver. While the controller is not active every request is answered
NOT_CONTROLLER with no records.

While active, replay() of records the controller generated itself advances the committed image
and forgets them from the uncommitted list. A committed record that does not line up with what
the controller proposed (the driver lost leadership without saying so) makes it deactivate.

Time. tick() fences brokers whose session ran out (broker.session.timeout.ms, Kafka's
maybeFenceOneStaleBroker), and runs Kafka's two periodic elections: unclean elections for
leaderless partitions of topics that allow them (unclean.leader.election.interval.ms), and,
with auto.leader.rebalance.enable, preferred-leader elections
(leader.imbalance.check.interval.seconds), each at most 1000 partitions a run.

Errors. Bad input never raises: every request gets its Kafka error code and a message in the
response (per topic or resource where the API has them). An unexpected exception inside a
request handler is logged and answered UNKNOWN_SERVER_ERROR with no records and no change.
replay() of a record that does not apply raises MetadataImageError: a corrupt log is fatal.

Where things live: brokers.py (registration, heartbeats, sessions, fencing, controlled
shutdown), placement.py (rack-aware replica placement), election.py (leader election and
PartitionChangeRecords), topics.py (CreateTopics, DeleteTopics, CreatePartitions),
configs.py (IncrementalAlterConfigs, AlterConfigs, effective topic configs), producer_ids.py
(AllocateProducerIds), alter_partition.py (AlterPartition: ISR changes a leader asks for),
elect_leaders.py (ElectLeaders: preferred and unclean elections an operator asks for),
reassignment.py (AlterPartitionReassignments, ListPartitionReassignments: moving partitions
between brokers, KIP-455), settings.py (ControllerConfig), common.py (ControllerResult,
KafkaError, the working image).
"""
from __future__ import annotations

import logging
import random
import uuid
from collections import deque
from typing import Any, Callable, Iterable, Sequence

from core.protocol import messages as m
from core.protocol.codegen import Message
from core.protocol.errors import ErrorCode, KafkaError
from core.protocol.metadata_records import MetadataRecord

from . import (acls, alter_partition, brokers, configs, elect_leaders, election, producer_ids,
               reassignment, scram, topics)
from .brokers import ClusterControl
from .common import ControllerResult, Working
from .image import MetadataImage
from .placement import StripedReplicaPlacer
from .settings import ControllerConfig

log = logging.getLogger(__name__)

METADATA_VERSION = "metadata.version"
BOOTSTRAP_METADATA_VERSION = 14     # 3.6-IV2
MAX_ELECTIONS_PER_RUN = 1000        # Kafka's maxElectionsPerImbalance
NOT_CONTROLLER_MESSAGE = "This node is not the active controller."

HANDLED_APIS = frozenset({
    m.ApiKey.CREATE_TOPICS, m.ApiKey.DELETE_TOPICS, m.ApiKey.ALTER_CONFIGS, m.ApiKey.CREATE_PARTITIONS,
    m.ApiKey.ELECT_LEADERS, m.ApiKey.INCREMENTAL_ALTER_CONFIGS, m.ApiKey.ALTER_PARTITION_REASSIGNMENTS,
    m.ApiKey.LIST_PARTITION_REASSIGNMENTS, m.ApiKey.ALTER_PARTITION, m.ApiKey.BROKER_REGISTRATION,
    m.ApiKey.BROKER_HEARTBEAT, m.ApiKey.UNREGISTER_BROKER, m.ApiKey.ALLOCATE_PRODUCER_IDS,
    m.ApiKey.ALTER_USER_SCRAM_CREDENTIALS, m.ApiKey.CREATE_ACLS, m.ApiKey.DELETE_ACLS})


def _message(record: Message | MetadataRecord) -> Message:
    return record.message if isinstance(record, MetadataRecord) else record


def _track_registrations(offsets: dict[int, int], records: Sequence[Message | MetadataRecord],
                         first_offset: int) -> None:
    for i, record in enumerate(records):
        msg = _message(record)
        if isinstance(msg, m.RegisterBrokerRecord):
            offsets[msg.broker_id] = first_offset + i
        elif isinstance(msg, m.UnregisterBrokerRecord):
            offsets.pop(msg.broker_id, None)


class QuorumController:
    def __init__(self, node_id: int, cluster_id: str, config: ControllerConfig | None = None,
                 *, clock: Callable[[], int], seed: int | None = None,
                 bootstrap_records: Iterable[Message] = ()):
        self.node_id = node_id
        # Written with metadata.version when the controller first activates on an empty log
        # (Kafka's bootstrap metadata): a one-node cluster's imported topic catalog.
        self._bootstrap_records = list(bootstrap_records)
        self.cluster_id = cluster_id
        self.config = config or ControllerConfig()
        self._clock = clock
        # Placement and topic ids are random; a seed makes a run repeatable.
        self._rng = random.Random(seed)
        self._placer = StripedReplicaPlacer(self._rng)
        self._committed = MetadataImage.empty()
        self._committed_offset = -1
        self._committed_registrations: dict[int, int] = {}   # broker id -> RegisterBrokerRecord offset
        self._pending = self._committed
        self._pending_registrations: dict[int, int] = {}
        self._active = False
        self._activation_offset = 0
        self._next_offset = 0
        self._uncommitted: deque[tuple[int, Message]] = deque()
        self._cluster = ClusterControl(cluster_id, self.config, clock, self._unclean)
        self._next_unclean_ms: int | None = None
        self._next_balance_ms: int | None = None

    # ------------------------------------------------------------------ state

    @property
    def is_active(self) -> bool:
        return self._active

    @property
    def committed_image(self) -> MetadataImage:
        return self._committed

    @property
    def pending_image(self) -> MetadataImage:
        return self._pending

    @property
    def committed_offset(self) -> int:
        """Offset of the last committed record replayed (-1: none)."""
        return self._committed_offset

    @property
    def has_uncommitted(self) -> bool:
        """Has this (active) controller returned records that have not been replayed yet?"""
        return bool(self._uncommitted)

    @property
    def next_write_offset(self) -> int:
        """The offset the next record this (active) controller generates will get."""
        return self._next_offset

    def registration_offset(self, broker_id: int) -> int | None:
        return self._pending_registrations.get(broker_id)

    def _unclean(self, image: MetadataImage, topic: str) -> bool:
        return configs.unclean_enabled(image, self.config, self.node_id, topic)

    # ------------------------------------------------------------------ the log

    def replay(self, records: Iterable[Message | MetadataRecord], last_offset: int) -> None:
        """Committed records, in log order; the last of them is at `last_offset` (records may
        be empty when only control records committed)."""
        records = list(records)
        first = last_offset - len(records) + 1
        if records and first <= self._committed_offset:
            raise ValueError(f"records at offsets {first}..{last_offset} were already replayed "
                             f"(committed offset {self._committed_offset})")
        self._committed = self._committed.apply_all(records)
        _track_registrations(self._committed_registrations, records, first)
        self._committed_offset = max(self._committed_offset, last_offset)
        if self._active:
            self._settle(records, first)
        else:
            self._reset_pending()

    def _settle(self, records: Sequence[Message | MetadataRecord], first: int) -> None:
        rebase = shifted = False
        for i, record in enumerate(records):
            offset = first + i
            if offset < self._activation_offset:
                # Committed before this node took over: pending must take it in too.
                rebase = True
                continue
            if not self._uncommitted or type(_message(record)) is not type(self._uncommitted[0][1]):
                log.warning("committed record at offset %d is not one this controller proposed; "
                            "giving up the active role", offset)
                self.deactivate()
                return
            expected, _ = self._uncommitted.popleft()
            if offset != expected:
                # The log put something (a control record) before our record: recount.
                shift = offset - expected
                self._uncommitted = deque((o + shift, r) for o, r in self._uncommitted)
                self._next_offset += shift
                shifted = True
        if not self._uncommitted:
            self._reset_pending()
            return
        ours = [r for _, r in self._uncommitted]
        if rebase:
            self._pending = self._committed.apply_all(ours)
        if rebase or shifted:
            self._pending_registrations = dict(self._committed_registrations)
            _track_registrations(self._pending_registrations, ours, self._uncommitted[0][0])

    def _reset_pending(self) -> None:
        self._pending = self._committed
        self._pending_registrations = dict(self._committed_registrations)

    def load_snapshot(self, image: MetadataImage, offset: int) -> None:
        """Replace the committed state with a snapshot's image, which holds the log up to and
        including `offset`."""
        if self._active:
            log.warning("loading a snapshot while active; giving up the active role")
            self.deactivate()
        self._committed = image
        self._committed_offset = offset
        # Kafka replays a snapshot's records at the snapshot's offset.
        self._committed_registrations = {broker_id: offset for broker_id in image.brokers}
        self._reset_pending()

    def _propose(self, records: list[Message], image: MetadataImage | None = None) -> None:
        if not records:
            return
        first = self._next_offset
        self._pending = self._pending.apply_all(records) if image is None else image
        _track_registrations(self._pending_registrations, records, first)
        self._uncommitted.extend((first + i, r) for i, r in enumerate(records))
        self._next_offset += len(records)

    # ------------------------------------------------------------------ leadership

    def activate(self, log_end_offset: int) -> list[Message]:
        if self._active:
            self.deactivate()
        self._active = True
        self._activation_offset = self._next_offset = log_end_offset
        self._uncommitted.clear()
        self._reset_pending()
        self._cluster.activate(self._pending)
        now = self._clock()
        self._next_unclean_ms = now + self.config.unclean_leader_election_interval_ms
        self._next_balance_ms = (now + self.config.leader_imbalance_check_interval_ms
                                 if self.config.auto_leader_rebalance_enable else None)
        records: list[Message] = []
        if METADATA_VERSION not in self._committed.features:
            # metadata.version last: an image that has it has the bootstrap records too, so a
            # broker can tell a bootstrapped log from an empty one (metadata_sync.py's sweep).
            records.extend(self._bootstrap_records)
            records.append(m.FeatureLevelRecord(name=METADATA_VERSION,
                                                feature_level=BOOTSTRAP_METADATA_VERSION))
        self._propose(records)
        return records

    def deactivate(self) -> None:
        self._active = False
        self._uncommitted.clear()
        self._reset_pending()
        self._cluster.deactivate()
        self._next_unclean_ms = self._next_balance_ms = None

    # ------------------------------------------------------------------ requests

    def _run(self, api_key: int, request: Message, version: int,
             generate: Callable[[Working], ControllerResult]) -> ControllerResult:
        if not self._active:
            return ControllerResult([], self._error_response(
                api_key, request, version, ErrorCode.NOT_CONTROLLER, NOT_CONTROLLER_MESSAGE))
        w = Working(self._pending)
        try:
            result = generate(w)
        except KafkaError as exc:
            return ControllerResult([], self._error_response(api_key, request, version,
                                                             ErrorCode(exc.code), exc.message))
        except Exception:  # noqa: BLE001 — a controller bug must not take the node down
            log.exception("controller failed to handle API %d v%d", api_key, version)
            return ControllerResult([], self._error_response(
                api_key, request, version, ErrorCode.UNKNOWN_SERVER_ERROR,
                "The controller failed to handle the request."))
        self._propose(result.records, w.image if result.records is w.records else None)
        return result

    @staticmethod
    def _error_response(api_key: int, request: Message, version: int, code: ErrorCode,
                        message: str | None) -> Message:
        # `request` is the request of `api_key`: the asserts only tell the type checker.
        if api_key in (m.ApiKey.BROKER_REGISTRATION, m.ApiKey.BROKER_HEARTBEAT, m.ApiKey.UNREGISTER_BROKER):
            return brokers.error_response(api_key, code, message)
        if api_key in (m.ApiKey.ALTER_CONFIGS, m.ApiKey.INCREMENTAL_ALTER_CONFIGS):
            assert isinstance(request, (m.AlterConfigsRequest, m.IncrementalAlterConfigsRequest))
            return configs.error_response(api_key, request, code, message)
        if api_key == m.ApiKey.ALLOCATE_PRODUCER_IDS:
            return producer_ids.error_response(code)
        if api_key in (m.ApiKey.CREATE_ACLS, m.ApiKey.DELETE_ACLS):
            assert isinstance(request, (m.CreateAclsRequest, m.DeleteAclsRequest))
            return acls.error_response(api_key, request, code, message)
        if api_key == m.ApiKey.ALTER_USER_SCRAM_CREDENTIALS:
            assert isinstance(request, m.AlterUserScramCredentialsRequest)
            return scram.error_response(request, code, message)
        if api_key == m.ApiKey.ALTER_PARTITION:
            return alter_partition.error_response(code)
        if api_key == m.ApiKey.ELECT_LEADERS:
            assert isinstance(request, m.ElectLeadersRequest)
            return elect_leaders.error_response(request, code, message)
        if api_key in (m.ApiKey.ALTER_PARTITION_REASSIGNMENTS, m.ApiKey.LIST_PARTITION_REASSIGNMENTS):
            assert isinstance(request, (m.AlterPartitionReassignmentsRequest,
                                        m.ListPartitionReassignmentsRequest))
            return reassignment.error_response(api_key, request, code, message)
        assert isinstance(request, (m.CreateTopicsRequest, m.DeleteTopicsRequest,
                                    m.CreatePartitionsRequest))
        return topics.error_response(api_key, request, version, code, message)

    def broker_registration(self, request: m.BrokerRegistrationRequest, version: int,
                            next_offset: int | None = None) -> ControllerResult:
        """BrokerRegistration (62). The broker epoch is the offset the batch's first record
        gets: `next_offset` when given (and the controller's count follows it), else the
        controller's own count."""
        if next_offset is not None and self._active:
            self._next_offset = next_offset

        def generate(w: Working) -> ControllerResult:
            response = self._cluster.register(w, request, version, self._next_offset)
            return ControllerResult(w.records, response)
        return self._run(m.ApiKey.BROKER_REGISTRATION, request, version, generate)

    def broker_heartbeat(self, request: m.BrokerHeartbeatRequest, version: int) -> ControllerResult:
        """BrokerHeartbeat (63)."""
        def generate(w: Working) -> ControllerResult:
            response = self._cluster.heartbeat(
                w, request, self._pending_registrations.get(request.broker_id), self._next_offset)
            return ControllerResult(w.records, response)
        return self._run(m.ApiKey.BROKER_HEARTBEAT, request, version, generate)

    def unregister_broker(self, request: m.UnregisterBrokerRequest, version: int) -> ControllerResult:
        """UnregisterBroker (64)."""
        def generate(w: Working) -> ControllerResult:
            return ControllerResult(w.records, self._cluster.unregister(w, request))
        return self._run(m.ApiKey.UNREGISTER_BROKER, request, version, generate)

    def create_topics(self, request: m.CreateTopicsRequest, version: int) -> ControllerResult:
        """CreateTopics (19)."""
        return self._run(m.ApiKey.CREATE_TOPICS, request, version, lambda w: topics.create_topics(
            request, version, image=w.image, config=self.config, node_id=self.node_id,
            placer=self._placer, new_topic_id=self._new_topic_id))

    def delete_topics(self, request: m.DeleteTopicsRequest, version: int) -> ControllerResult:
        """DeleteTopics (20), by name or (v6) by id."""
        return self._run(m.ApiKey.DELETE_TOPICS, request, version, lambda w: topics.delete_topics(
            request, version, image=w.image, config=self.config))

    def create_partitions(self, request: m.CreatePartitionsRequest, version: int) -> ControllerResult:
        """CreatePartitions (37)."""
        return self._run(m.ApiKey.CREATE_PARTITIONS, request, version, lambda w: topics.create_partitions(
            request, version, image=w.image, placer=self._placer))

    def incremental_alter_configs(self, request: m.IncrementalAlterConfigsRequest,
                                  version: int) -> ControllerResult:
        """IncrementalAlterConfigs (44) for TOPIC and BROKER resources."""
        return self._run(m.ApiKey.INCREMENTAL_ALTER_CONFIGS, request, version,
                         lambda w: configs.incremental_alter_configs(
            request, version, image=w.image, config=self.config, node_id=self.node_id))

    def alter_configs(self, request: m.AlterConfigsRequest, version: int) -> ControllerResult:
        """AlterConfigs (33): replaces each resource's whole config."""
        return self._run(m.ApiKey.ALTER_CONFIGS, request, version, lambda w: configs.alter_configs(
            request, version, image=w.image, config=self.config, node_id=self.node_id))

    def allocate_producer_ids(self, request: m.AllocateProducerIdsRequest,
                              version: int) -> ControllerResult:
        """AllocateProducerIds (67): the next block of producer ids for a broker."""
        def generate(w: Working) -> ControllerResult:
            return ControllerResult(w.records, producer_ids.allocate_producer_ids(w, request, self.cluster_id))
        return self._run(m.ApiKey.ALLOCATE_PRODUCER_IDS, request, version, generate)

    def alter_user_scram_credentials(self, request: m.AlterUserScramCredentialsRequest,
                                     version: int) -> ControllerResult:
        """AlterUserScramCredentials (51): set and delete SCRAM credentials (core/controller/scram.py)."""
        def generate(w: Working) -> ControllerResult:
            return ControllerResult(w.records, scram.alter_user_scram_credentials(w, request))
        return self._run(m.ApiKey.ALTER_USER_SCRAM_CREDENTIALS, request, version, generate)

    def create_acls(self, request: m.CreateAclsRequest, version: int) -> ControllerResult:
        """CreateAcls (30): new ACL bindings (core/controller/acls.py)."""
        def generate(w: Working) -> ControllerResult:
            return ControllerResult(w.records, acls.create_acls(w, request))
        return self._run(m.ApiKey.CREATE_ACLS, request, version, generate)

    def delete_acls(self, request: m.DeleteAclsRequest, version: int) -> ControllerResult:
        """DeleteAcls (31): remove the ACL bindings each filter matches."""
        def generate(w: Working) -> ControllerResult:
            return ControllerResult(w.records, acls.delete_acls(w, request))
        return self._run(m.ApiKey.DELETE_ACLS, request, version, generate)

    def alter_partition(self, request: m.AlterPartitionRequest, version: int) -> ControllerResult:
        """AlterPartition (56): a partition leader's ISR change."""
        def generate(w: Working) -> ControllerResult:
            return ControllerResult(w.records, alter_partition.alter_partition(w, request, version))
        return self._run(m.ApiKey.ALTER_PARTITION, request, version, generate)

    def elect_leaders(self, request: m.ElectLeadersRequest, version: int) -> ControllerResult:
        """ElectLeaders (43): preferred or unclean leader elections."""
        def generate(w: Working) -> ControllerResult:
            return ControllerResult(w.records, elect_leaders.elect_leaders(w, request, version))
        return self._run(m.ApiKey.ELECT_LEADERS, request, version, generate)

    def alter_partition_reassignments(self, request: m.AlterPartitionReassignmentsRequest,
                                      version: int) -> ControllerResult:
        """AlterPartitionReassignments (45): start or cancel partition reassignments."""
        def generate(w: Working) -> ControllerResult:
            image = w.image
            return ControllerResult(w.records, reassignment.alter_partition_reassignments(
                w, request, version, unclean=lambda name: self._unclean(image, name)))
        return self._run(m.ApiKey.ALTER_PARTITION_REASSIGNMENTS, request, version, generate)

    def list_partition_reassignments(self, request: m.ListPartitionReassignmentsRequest,
                                     version: int) -> ControllerResult:
        """ListPartitionReassignments (46): the reassignments in progress (no records)."""
        return self._run(m.ApiKey.LIST_PARTITION_REASSIGNMENTS, request, version, lambda w: ControllerResult(
            [], reassignment.list_partition_reassignments(w.image, request, version)))

    def handle(self, api_key: int, request: Message, version: int) -> ControllerResult:
        """Dispatch by API key (one of HANDLED_APIS)."""
        # Each handler takes the request class of its key, which the table cannot say.
        handlers: dict[int, Callable[[Any, int], ControllerResult]] = {m.ApiKey.CREATE_TOPICS: self.create_topics, m.ApiKey.DELETE_TOPICS: self.delete_topics,
                   m.ApiKey.ALTER_CONFIGS: self.alter_configs,
                   m.ApiKey.CREATE_PARTITIONS: self.create_partitions, m.ApiKey.ELECT_LEADERS: self.elect_leaders,
                   m.ApiKey.INCREMENTAL_ALTER_CONFIGS: self.incremental_alter_configs,
                   m.ApiKey.ALTER_PARTITION_REASSIGNMENTS: self.alter_partition_reassignments,
                   m.ApiKey.LIST_PARTITION_REASSIGNMENTS: self.list_partition_reassignments,
                   m.ApiKey.ALTER_PARTITION: self.alter_partition,
                   m.ApiKey.BROKER_REGISTRATION: self.broker_registration,
                   m.ApiKey.BROKER_HEARTBEAT: self.broker_heartbeat,
                   m.ApiKey.UNREGISTER_BROKER: self.unregister_broker,
                   m.ApiKey.ALLOCATE_PRODUCER_IDS: self.allocate_producer_ids,
                   m.ApiKey.ALTER_USER_SCRAM_CREDENTIALS: self.alter_user_scram_credentials,
                   m.ApiKey.CREATE_ACLS: self.create_acls, m.ApiKey.DELETE_ACLS: self.delete_acls}
        handler = handlers.get(api_key)
        if handler is None:
            raise KeyError(f"the controller does not handle API {api_key}")
        return handler(request, version)

    def _new_topic_id(self, image: MetadataImage) -> bytes:
        while True:
            raw = uuid.UUID(int=self._rng.getrandbits(128), version=4).bytes
            # Kafka's Uuid.randomUuid() also refuses ids whose base64 form starts with '-'.
            if raw != topics.ZERO_UUID and raw != topics.METADATA_TOPIC_ID \
                    and raw[0] >> 2 != 62 and raw not in image.topics:
                return raw

    # ------------------------------------------------------------------ time

    def tick(self) -> list[Message]:
        """Fence brokers whose session ran out and run the periodic elections that are due;
        the records to append."""
        if not self._active:
            return []
        now = self._clock()
        w = Working(self._pending)
        fenced = self._cluster.expire(w)
        if fenced:
            log.info("fenced broker(s) %s: their sessions timed out", fenced)
        if self._next_unclean_ms is not None and now >= self._next_unclean_ms:
            image = w.image
            records = election.unclean_elections(image, MAX_ELECTIONS_PER_RUN,
                                                 lambda name: self._unclean(image, name))
            w.add(records)
            self._next_unclean_ms = now if len(records) >= MAX_ELECTIONS_PER_RUN \
                else now + self.config.unclean_leader_election_interval_ms
        if self._next_balance_ms is not None and now >= self._next_balance_ms:
            records = election.preferred_leader_changes(w.image, MAX_ELECTIONS_PER_RUN)
            w.add(records)
            self._next_balance_ms = now if len(records) >= MAX_ELECTIONS_PER_RUN \
                else now + self.config.leader_imbalance_check_interval_ms
        self._propose(w.records, w.image if w.records else None)
        return w.records

    def next_deadline_ms(self) -> int | None:
        """When tick() has something to do next; None when inactive."""
        if not self._active:
            return None
        times = [t for t in (self._cluster.next_expiry_ms(self._pending), self._next_unclean_ms,
                             self._next_balance_ms) if t is not None]
        return min(times, default=None)
