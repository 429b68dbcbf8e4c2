"""The simulation's KRaft controller, for one partition: broker registrations and sessions,
fencing, leader elections (core.controller.election, so the project's own election rules) and
AlterPartition with Kafka's validation. It is reliable and instant; what it decides reaches the
brokers as metadata images through the simulated network (`publish`).

Kafka's rules kept (ClusterControlManager, ReplicationControlManager):
- a broker registers with a new broker epoch per incarnation, fenced until its first heartbeat;
  a new incarnation cannot register while the previous one's session is alive
  (DuplicateBrokerRegistration), so a restarted broker is fenced, and out of the ISR, first;
- a session expires after broker.session.timeout.ms without heartbeats: the broker is fenced,
  removed from the ISR and from leadership (the last ISR member stays, as without ELR);
- an unfenced broker may lead leaderless partitions; with unclean.leader.election.enable a
  leaderless partition also elects outside the ISR (periodically);
- AlterPartition is checked in validateAlterPartitionData's order, and an ISR change without a
  leader change bumps only the partition epoch (KAFKA-15021).
"""
from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass
from typing import Callable

from core.broker.replication import AlterPartitionAnswer, AlterPartitionRequest, BrokerInfo, \
    PartitionMetadata
from core.controller.election import RECOVERED, RECOVERING, Election, partition_change
from core.controller.image import NO_LEADER, PartitionRegistration
from core.protocol.errors import ErrorCode as E
from tests.replication.invariants import History


@dataclass
class Registration:
    broker_epoch: int
    incarnation: int
    fenced: bool
    last_heartbeat_ms: int


class SimController:
    def __init__(self, replicas: tuple[int, ...], *, unclean: bool, session_timeout_ms: int,
                 clock: Callable[[], int], history: History, stats: Counter,
                 trace: Callable[[str], None], publish: Callable[[], None],
                 is_tainted: Callable[[int], bool]):
        self.partition = PartitionRegistration(replicas=replicas, isr=replicas,
                                               leader=replicas[0], leader_epoch=0)
        self.registrations: dict[int, Registration] = {}
        self.unclean = unclean
        self.version = 0
        self._next_broker_epoch = 100
        self._session_timeout_ms = session_timeout_ms
        self._clock = clock
        self._history = history
        self._stats = stats
        self._trace = trace
        self._publish = publish
        self._is_tainted = is_tainted

    def image(self) -> tuple[int, PartitionMetadata, dict[int, BrokerInfo]]:
        part = self.partition
        return (self.version,
                PartitionMetadata(part.leader, part.leader_epoch, part.partition_epoch,
                                  part.replicas, part.isr, part.leader_recovery_state),
                {b: BrokerInfo(r.broker_epoch, r.fenced) for b, r in self.registrations.items()})

    def _changed(self) -> None:
        self.version += 1
        self._publish()

    # --- brokers ----------------------------------------------------------------------------

    def register(self, broker_id: int, incarnation: int, fenced: bool = True) -> int | None:
        """The broker epoch of this incarnation, or None while the previous one's session is
        alive (DuplicateBrokerRegistration: retry later)."""
        now = self._clock()
        registration = self.registrations.get(broker_id)
        if registration is not None:
            if registration.incarnation == incarnation:
                return registration.broker_epoch
            if now - registration.last_heartbeat_ms <= self._session_timeout_ms:
                return None
            if not registration.fenced:
                self._fence(broker_id)
        self._next_broker_epoch += 1
        self.registrations[broker_id] = Registration(self._next_broker_epoch, incarnation,
                                                     fenced, now)
        self._trace(f"controller: B{broker_id}#{incarnation} registered, "
                    f"epoch {self._next_broker_epoch}")
        self._changed()
        return self._next_broker_epoch

    def heartbeat(self, broker_id: int, broker_epoch: int) -> None:
        registration = self.registrations.get(broker_id)
        if registration is None or registration.broker_epoch != broker_epoch:
            return
        registration.last_heartbeat_ms = self._clock()
        if registration.fenced:
            registration.fenced = False
            self._trace(f"controller: unfence B{broker_id}")
            self._changed()
            if self.partition.leader == NO_LEADER:
                self._elect(add=broker_id)

    def check(self) -> None:
        """Expire sessions; elect uncleanly for a leaderless partition if allowed."""
        now = self._clock()
        for broker_id, registration in self.registrations.items():
            if not registration.fenced and \
                    now - registration.last_heartbeat_ms > self._session_timeout_ms:
                self._fence(broker_id)
        if self.partition.leader == NO_LEADER and self.unclean:
            self._elect()

    def _fence(self, broker_id: int) -> None:
        self._stats["fence"] += 1
        self._trace(f"controller: fence B{broker_id}")
        self.registrations[broker_id].fenced = True
        self._changed()
        self._elect(remove=broker_id)

    def _active(self, broker_id: int) -> bool:
        registration = self.registrations.get(broker_id)
        return registration is not None and not registration.fenced

    # --- elections --------------------------------------------------------------------------

    def _elect(self, remove: int = NO_LEADER, add: int = NO_LEADER) -> None:
        """generateLeaderAndIsrUpdates for our one partition: `remove` leaves the ISR and the
        leadership, `add` counts as able to lead."""
        part = self.partition
        target = [r for r in part.isr if r != remove]
        record = partition_change(
            b"t", 0, part, lambda r: r != remove and (r == add or self._active(r)),
            target_isr=target, election=Election.UNCLEAN if self.unclean else Election.ONLINE)
        if record is None:
            return
        new = part.merge(record)
        if new.leader != part.leader:
            self._stats["leader change"] += 1
            if new.leader != NO_LEADER:
                if new.leader not in target:
                    self._stats["unclean election"] += 1
                    self._history.unclean_epochs.add(new.leader_epoch)
                elif self._is_tainted(new.leader):
                    # The last replica standing lost its unflushed tail (no ELR): as unclean.
                    self._stats["lossy election"] += 1
                    self._history.lossy_epochs.add(new.leader_epoch)
        self._set_partition(new)

    def _set_partition(self, new: PartitionRegistration) -> None:
        if new.leader != NO_LEADER and new.leader not in new.isr:
            self._history.fail(None, f"controller: leader {new.leader} not in ISR {new.isr}")
        self._trace(f"controller: leader {new.leader} epoch {new.leader_epoch} isr "
                    f"{list(new.isr)} pe {new.partition_epoch} lrs {new.leader_recovery_state}")
        self.partition = new
        self._changed()

    # --- AlterPartition -----------------------------------------------------------------------

    def alter_partition(self, request: AlterPartitionRequest
                        ) -> tuple[AlterPartitionAnswer | None, set[int]]:
        """The partition's answer (None: STALE_BROKER_EPOCH for the whole request) and the
        brokers that joined the ISR."""
        registration = self.registrations.get(request.broker_id)
        if registration is None or registration.broker_epoch != request.broker_epoch:
            return None, set()
        error = self._validate(request)
        if error != E.NONE:
            return AlterPartitionAnswer(error), set()
        part = self.partition
        joined: set[int] = set()
        new = dataclasses.replace(part, isr=request.isr,
                                  leader_recovery_state=request.leader_recovery_state)
        if (new.isr, new.leader_recovery_state) != (part.isr, part.leader_recovery_state):
            joined = set(new.isr) - set(part.isr)
            self._stats["isr shrink" if len(new.isr) < len(part.isr) else "isr expand"] += 1
            self._set_partition(dataclasses.replace(new,
                                                    partition_epoch=part.partition_epoch + 1))
        part = self.partition
        return AlterPartitionAnswer(E.NONE, part.leader, part.leader_epoch, part.isr,
                                    part.partition_epoch, part.leader_recovery_state), joined

    def _validate(self, request: AlterPartitionRequest) -> E:
        """ReplicationControlManager.validateAlterPartitionData, in its order."""
        part = self.partition
        if request.leader_epoch > part.leader_epoch or \
                request.partition_epoch > part.partition_epoch:
            return E.NOT_CONTROLLER
        if request.leader_epoch < part.leader_epoch:
            return E.FENCED_LEADER_EPOCH
        if request.broker_id != part.leader:
            return E.INVALID_REQUEST
        if request.partition_epoch < part.partition_epoch:
            return E.INVALID_UPDATE_VERSION
        isr = request.isr
        if len(set(isr)) != len(isr) or not set(isr) <= set(part.replicas) or \
                part.leader not in isr:
            return E.INVALID_REQUEST
        if request.leader_recovery_state == RECOVERING and len(isr) > 1:
            return E.INVALID_REQUEST
        if part.leader_recovery_state == RECOVERED and \
                request.leader_recovery_state == RECOVERING:
            return E.INVALID_REQUEST
        for member in request.new_isr:
            registration = self.registrations.get(member.broker_id)
            if registration is None or registration.fenced or (
                    member.broker_epoch != -1
                    and member.broker_epoch != registration.broker_epoch):
                return E.INELIGIBLE_REPLICA
        return E.NONE
