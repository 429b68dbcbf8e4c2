"""Cluster control: broker registration, heartbeats and sessions, fencing and controlled
shutdown (Kafka's ClusterControlManager, BrokerHeartbeatManager and the broker parts of
ReplicationControlManager).

Sessions exist only on the active controller. Every registered broker gets a fresh one when
the controller activates and when it registers; a heartbeat renews it. An unfenced broker whose
session is older than broker.session.timeout.ms is fenced (tick), oldest first, each fencing
seeing the ones before it. A fenced broker has no valid session, so a new incarnation may take
its id at once; an unfenced one with a live session keeps it (DUPLICATE_BROKER_REGISTRATION).
One exception, where Kafka would make the new incarnation wait out the session: the broker of
the controller's own process (a combined node) whose session is only the one activation
presumed, with no heartbeat heard since. Its old incarnation lived in an earlier run of this very
process, which has exited (kill -9, a crash), so nothing can still hold the id; waiting would
only keep a restarted one-node cluster from serving for broker.session.timeout.ms.

A heartbeat moves the broker through Kafka's BrokerControlState machine:

    FENCED   + want_shut_down                         -> SHUTDOWN_NOW
    FENCED   + !want_fence, caught up to its RegisterBrokerRecord -> UNFENCED
    UNFENCED + want_fence (+ want_shut_down)          -> FENCED (SHUTDOWN_NOW)
    UNFENCED + want_shut_down, leads a partition      -> CONTROLLED_SHUTDOWN
    UNFENCED + want_shut_down, leads nothing          -> SHUTDOWN_NOW
    CONTROLLED_SHUTDOWN, still leads something        -> stays
    CONTROLLED_SHUTDOWN, leads nothing, and every active broker has read the log up to where
                         its controlled shutdown was written                    -> SHUTDOWN_NOW

Records: fencing (FENCED, SHUTDOWN_NOW, session expiry) takes the broker out of every ISR it is
in (keeping a last member, see election.py) and out of leadership, then writes a
BrokerRegistrationChangeRecord(Fenced=1); unfencing writes BrokerRegistrationChangeRecord(
Fenced=-1) and then elects leaders for leaderless partitions; controlled shutdown writes
BrokerRegistrationChangeRecord(InControlledShutdown=1) and then moves ISR membership and
leadership away as fencing does. These are the records Kafka writes from metadata.version
3.3-IV3 on (before that FenceBrokerRecord/UnfenceBrokerRecord, which the image also reads).

Registration writes a RegisterBrokerRecord, fenced, whose broker epoch is the offset the first
record of the batch will get. The same incarnation registering again keeps its epoch, fencing
and shutdown state (Kafka amends the registration). A new incarnation of a broker that is still
unfenced in the image first has its ISR memberships and leaderships taken away, as fencing
would: its predecessor died without being fenced, and the new one starts from its own log.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable

from core.protocol import messages as m
from core.protocol.codegen import Message
from core.protocol.errors import ErrorCode, KafkaError

from .common import Working
from .election import all_partitions, leader_and_isr_updates, leaderless, leads_any
from .image import FENCING_FENCE, FENCING_UNFENCE, SHUTDOWN_IN_CONTROLLED_SHUTDOWN, MetadataImage
from .settings import ControllerConfig

UncleanFor = Callable[[MetadataImage, str], bool]


def check_broker_epoch(w: Working, broker_id: int, broker_epoch: int) -> None:
    """Kafka's ClusterControlManager.checkBrokerEpoch, against the pending image."""
    reg = w.image.brokers.get(broker_id)
    if reg is None:
        raise KafkaError(ErrorCode.STALE_BROKER_EPOCH,
                       f"No broker registration found for broker id {broker_id}")
    if reg.epoch != broker_epoch:
        raise KafkaError(ErrorCode.STALE_BROKER_EPOCH,
                       f"Expected broker epoch {reg.epoch}, but got broker epoch {broker_epoch}")


class BrokerState(enum.Enum):
    FENCED = "fenced"
    UNFENCED = "unfenced"
    CONTROLLED_SHUTDOWN = "controlled_shutdown"
    SHUTDOWN_NOW = "shutdown_now"

    @property
    def fenced(self) -> bool:
        return self in (BrokerState.FENCED, BrokerState.SHUTDOWN_NOW)

    @property
    def should_shut_down(self) -> bool:
        return self is BrokerState.SHUTDOWN_NOW


@dataclass
class Session:
    last_contact_ms: int
    metadata_offset: int = -1             # CurrentMetadataOffset of the last heartbeat
    presumed: bool = False                # given at activation; no heartbeat heard since
    controlled_shutdown_offset: int = -1  # last offset of the records that began it; -1: none

    @property
    def shutting_down(self) -> bool:
        return self.controlled_shutdown_offset >= 0


class ClusterControl:
    def __init__(self, cluster_id: str, config: ControllerConfig, clock: Callable[[], int],
                 unclean: UncleanFor):
        self.cluster_id = cluster_id
        self.config = config
        self.clock = clock
        self.unclean = unclean
        self.sessions: dict[int, Session] = {}

    # ------------------------------------------------------------------ sessions

    def activate(self, image: MetadataImage) -> None:
        now = self.clock()
        self.sessions = {broker_id: Session(now, presumed=True) for broker_id in image.brokers}

    def deactivate(self) -> None:
        self.sessions = {}

    def _expired(self, session: Session, now: int) -> bool:
        return now > session.last_contact_ms + self.config.broker_session_timeout_ms

    def has_valid_session(self, image: MetadataImage, broker_id: int) -> bool:
        reg = image.brokers.get(broker_id)
        session = self.sessions.get(broker_id)
        return (reg is not None and not reg.fenced and session is not None
                and not self._expired(session, self.clock()))

    def next_expiry_ms(self, image: MetadataImage) -> int | None:
        """When the oldest session of an unfenced broker runs out (the first ms it is stale)."""
        times = [s.last_contact_ms for b, s in self.sessions.items()
                 if b in image.brokers and not image.brokers[b].fenced]
        return min(times) + self.config.broker_session_timeout_ms + 1 if times else None

    def lowest_active_offset(self, image: MetadataImage) -> float:
        offsets = [s.metadata_offset for b, s in self.sessions.items()
                   if b in image.brokers and not image.brokers[b].fenced and not s.shutting_down]
        return min(offsets, default=float("inf"))

    # ------------------------------------------------------------------ record builders

    def _updates(self, w: Working, broker_id: int, *, remove: bool) -> list[Message]:
        image = w.image

        def unclean(name: str) -> bool:
            return self.unclean(image, name)

        if remove:
            # Leaders are ISR members in every log this controller writes; also looking at
            # leadership keeps fencing correct on a log that says otherwise.
            affected = (t for t in all_partitions(image)
                        if broker_id in t[2].isr or t[2].leader == broker_id)
            return leader_and_isr_updates(image, affected, remove=broker_id, unclean=unclean)
        return leader_and_isr_updates(image, leaderless(image), add=broker_id, unclean=unclean)

    def fence(self, w: Working, broker_id: int) -> None:
        reg = w.image.brokers[broker_id]
        w.add(self._updates(w, broker_id, remove=True))
        if not reg.fenced:
            w.add([m.BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=reg.epoch,
                                                    fenced=FENCING_FENCE)])
        session = self.sessions.get(broker_id)
        if session is not None:
            session.controlled_shutdown_offset = -1

    def _unfence(self, w: Working, broker_id: int, epoch: int) -> None:
        w.add([m.BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=epoch,
                                                fenced=FENCING_UNFENCE)])
        w.add(self._updates(w, broker_id, remove=False))

    def _enter_controlled_shutdown(self, w: Working, broker_id: int, epoch: int) -> None:
        if not w.image.brokers[broker_id].in_controlled_shutdown:
            w.add([m.BrokerRegistrationChangeRecord(
                broker_id=broker_id, broker_epoch=epoch,
                in_controlled_shutdown=SHUTDOWN_IN_CONTROLLED_SHUTDOWN)])
        w.add(self._updates(w, broker_id, remove=True))

    # ------------------------------------------------------------------ BrokerRegistration

    def register(self, w: Working, request: m.BrokerRegistrationRequest, version: int,
                 epoch: int) -> m.BrokerRegistrationResponse:
        broker_id = request.broker_id
        if request.cluster_id != self.cluster_id:
            raise KafkaError(ErrorCode.INCONSISTENT_CLUSTER_ID,
                           f"Expected cluster ID {self.cluster_id}, but got cluster ID "
                           f"{request.cluster_id}")
        if broker_id < 0:
            raise KafkaError(ErrorCode.INVALID_REGISTRATION, f"Invalid broker id {broker_id}.")
        image = w.image
        existing = image.brokers.get(broker_id)
        incarnation = bytes(request.incarnation_id)
        same = existing is not None and existing.incarnation_id == incarnation
        if existing is not None and not same and self.has_valid_session(image, broker_id) \
                and not self._restarted_here(broker_id):
            raise KafkaError(ErrorCode.DUPLICATE_BROKER_REGISTRATION,
                           "Another broker is registered with that broker id.")
        if version >= 1 and request.is_migrating_zk_broker:
            raise KafkaError(ErrorCode.BROKER_ID_NOT_REGISTERED,
                           "Controller does not support registering ZK brokers.")
        for f in request.features:
            level = image.features.get(f.name)
            if level is not None and not f.min_supported_version <= level <= f.max_supported_version:
                raise KafkaError(ErrorCode.UNSUPPORTED_VERSION,
                               f"Unable to register because the broker does not support finalized "
                               f"version {level} of {f.name}. The broker wants a version between "
                               f"{f.min_supported_version} and {f.max_supported_version}, "
                               "inclusive.")
        if same and existing is not None:
            epoch, fenced, shutdown = existing.epoch, existing.fenced, existing.in_controlled_shutdown
        else:
            fenced, shutdown = True, False
            if existing is not None and not existing.fenced:
                w.add(self._updates(w, broker_id, remove=True))
        R = m.RegisterBrokerRecord
        w.add([R(broker_id=broker_id, is_migrating_zk_broker=False, incarnation_id=incarnation,
                 broker_epoch=epoch,
                 end_points=[R.BrokerEndpoint(name=li.name, host=li.host, port=li.port,
                                              security_protocol=li.security_protocol)
                             for li in request.listeners],
                 features=[R.BrokerFeature(name=f.name,
                                           min_supported_version=f.min_supported_version,
                                           max_supported_version=f.max_supported_version)
                           for f in request.features],
                 rack=request.rack, fenced=fenced, in_controlled_shutdown=shutdown,
                 log_dirs=[bytes(d) for d in request.log_dirs] if version >= 2 else [])])
        session = self.sessions.get(broker_id)
        if same and session is not None:
            session.last_contact_ms = self.clock()
            session.presumed = False
        else:
            self.sessions[broker_id] = Session(self.clock())
        return m.BrokerRegistrationResponse(throttle_time_ms=0, error_code=0, broker_epoch=epoch)

    def _restarted_here(self, broker_id: int) -> bool:
        """A new incarnation of the broker in this controller's own process, whose old one has
        not been heard from since activation (see the module doc)."""
        session = self.sessions.get(broker_id)
        return broker_id == self.config.colocated_broker_id and session is not None and session.presumed

    # ------------------------------------------------------------------ BrokerHeartbeat

    def _next_state(self, image: MetadataImage, broker_id: int, current: BrokerState,
                    session: Session, request: m.BrokerHeartbeatRequest,
                    register_offset: int) -> BrokerState:
        if current is BrokerState.FENCED:
            if request.want_shut_down:
                return BrokerState.SHUTDOWN_NOW
            if not request.want_fence and request.current_metadata_offset >= register_offset:
                return BrokerState.UNFENCED
            return BrokerState.FENCED
        if current is BrokerState.UNFENCED:
            if request.want_fence:
                return BrokerState.SHUTDOWN_NOW if request.want_shut_down else BrokerState.FENCED
            if request.want_shut_down:
                return BrokerState.CONTROLLED_SHUTDOWN if leads_any(image, broker_id) \
                    else BrokerState.SHUTDOWN_NOW
            return BrokerState.UNFENCED
        if current is BrokerState.CONTROLLED_SHUTDOWN:
            if leads_any(image, broker_id):
                return BrokerState.CONTROLLED_SHUTDOWN
            if session.controlled_shutdown_offset <= self.lowest_active_offset(image):
                return BrokerState.SHUTDOWN_NOW
            return BrokerState.CONTROLLED_SHUTDOWN
        return BrokerState.SHUTDOWN_NOW

    def heartbeat(self, w: Working, request: m.BrokerHeartbeatRequest, register_offset: int | None,
                  next_offset: int) -> m.BrokerHeartbeatResponse:
        """`register_offset`: where the broker's RegisterBrokerRecord is (or will be) in the log;
        `next_offset`: the offset the first record this heartbeat writes will get."""
        broker_id = request.broker_id
        reg = w.image.brokers.get(broker_id)
        if reg is None or register_offset is None:
            raise KafkaError(ErrorCode.STALE_BROKER_EPOCH,
                           f"No broker registration found for broker id {broker_id}")
        if reg.epoch != request.broker_epoch:
            raise KafkaError(ErrorCode.STALE_BROKER_EPOCH,
                           f"Expected broker epoch {reg.epoch}, but got broker epoch "
                           f"{request.broker_epoch}")
        session = self.sessions.setdefault(broker_id, Session(self.clock()))
        if session.shutting_down:
            current = BrokerState.CONTROLLED_SHUTDOWN
        else:
            current = BrokerState.FENCED if reg.fenced else BrokerState.UNFENCED
        state = self._next_state(w.image, broker_id, current, session, request, register_offset)
        if state is not current:
            if state.fenced:
                self.fence(w, broker_id)
            elif state is BrokerState.UNFENCED:
                self._unfence(w, broker_id, reg.epoch)
            else:
                self._enter_controlled_shutdown(w, broker_id, reg.epoch)
        session.last_contact_ms = self.clock()
        session.presumed = False
        session.metadata_offset = request.current_metadata_offset
        if state.fenced:
            session.controlled_shutdown_offset = -1
        elif state is BrokerState.CONTROLLED_SHUTDOWN and not session.shutting_down:
            # Kafka takes the end offset of the batch that began the shutdown.
            session.controlled_shutdown_offset = next_offset + len(w.records) - 1
        return m.BrokerHeartbeatResponse(
            throttle_time_ms=0, error_code=0,
            is_caught_up=request.current_metadata_offset >= register_offset,
            is_fenced=state.fenced, should_shut_down=state.should_shut_down)

    # ------------------------------------------------------------------ UnregisterBroker

    def unregister(self, w: Working, request: m.UnregisterBrokerRequest) -> m.UnregisterBrokerResponse:
        broker_id = request.broker_id
        reg = w.image.brokers.get(broker_id)
        if reg is None:
            raise KafkaError(ErrorCode.BROKER_ID_NOT_REGISTERED,
                           f"Broker ID {broker_id} is not currently registered")
        w.add(self._updates(w, broker_id, remove=True))
        w.add([m.UnregisterBrokerRecord(broker_id=broker_id, broker_epoch=reg.epoch)])
        self.sessions.pop(broker_id, None)
        return m.UnregisterBrokerResponse(throttle_time_ms=0, error_code=0, error_message=None)

    # ------------------------------------------------------------------ session expiry

    def expire(self, w: Working) -> list[int]:
        """Fence every unfenced broker whose session ran out; the ids fenced."""
        now = self.clock()
        image = w.image
        stale = sorted((s.last_contact_ms, b) for b, s in self.sessions.items()
                       if b in image.brokers and not image.brokers[b].fenced
                       and self._expired(s, now))
        for _, broker_id in stale:
            self.fence(w, broker_id)
        return [b for _, b in stale]


def error_response(api_key: int, code: ErrorCode, message: str | None) -> Message:
    if api_key == m.ApiKey.BROKER_REGISTRATION:
        return m.BrokerRegistrationResponse(throttle_time_ms=0, error_code=code, broker_epoch=-1)
    if api_key == m.ApiKey.BROKER_HEARTBEAT:
        return m.BrokerHeartbeatResponse(throttle_time_ms=0, error_code=code, is_caught_up=False,
                                         is_fenced=True, should_shut_down=False)
    return m.UnregisterBrokerResponse(throttle_time_ms=0, error_code=code, error_message=message)
