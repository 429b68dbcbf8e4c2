"""The leader's view of its followers and of the ISR (Kafka's Replica/ReplicaState and the
PartitionState family of Partition.scala).

ReplicaProgress is what the leader learns of one follower from its Fetch requests: the fetch
offset is the follower's log end offset, and `last_caught_up_time_ms` is the latest time at
which the follower had everything the leader had (Replica.updateFetchStateOrThrow):

    fetch offset >= leader LEO now                    -> caught up now
    fetch offset >= leader LEO at the previous fetch  -> caught up at the previous fetch time

so a follower that keeps up with a steady stream of small appends still counts as caught up
although its fetch offset is never the leader's LEO. A follower is in sync while it has the
leader's LEO or was caught up within replica.lag.time.max.ms (ReplicaState.isCaughtUp).

IsrState: the ISR the controller committed, or a change the leader proposed with AlterPartition
and awaits, one at a time:

    CommittedIsr   isr = maximal = the controller's ISR
    PendingExpand  isr = the committed one; maximal = isr + the new member
    PendingShrink  isr = maximal = the committed one (the removed members still count)

The high watermark and acks=all wait for the *maximal* ISR (KIP-497): counting an expansion
early only makes them stricter, counting a shrink early could advance the high watermark past
a replica that the controller keeps in the ISR.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Union

from .messages import UNKNOWN_OFFSET, AlterPartitionRequest, BrokerInfo


@dataclass
class ReplicaProgress:
    replica_id: int
    log_start_offset: int = -1
    log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_leader_log_end_offset: int = 0
    last_fetch_time_ms: int = 0
    last_caught_up_time_ms: int = 0
    broker_epoch: int | None = None        # from its latest Fetch; None until one arrives

    def is_caught_up(self, leader_end_offset: int, now_ms: int, max_lag_ms: int) -> bool:
        return (leader_end_offset == self.log_end_offset
                or now_ms - self.last_caught_up_time_ms <= max_lag_ms)

    def update_fetch_state(self, fetch_offset: int, log_start_offset: int, now_ms: int,
                           leader_end_offset: int, broker_epoch: int) -> None:
        if fetch_offset >= leader_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms,
                                              self.last_fetch_time_ms)
        self.log_start_offset = log_start_offset
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_log_end_offset = max(leader_end_offset,
                                                    self.last_fetch_leader_log_end_offset)
        self.last_fetch_time_ms = now_ms
        self.broker_epoch = broker_epoch

    def reset(self, now_ms: int, leader_end_offset: int, is_new_leader: bool,
              in_sync: bool) -> None:
        """A (re-)elected leader starts its epoch (Replica.resetReplicaState): ISR members
        count as caught up now, the others not at all, so that a replica that left the ISR does
        not hold the high watermark back and does not rejoin before it fetches."""
        self.last_caught_up_time_ms = now_ms if in_sync else 0
        if is_new_leader:
            self.log_start_offset = -1
            self.log_end_offset = UNKNOWN_OFFSET
            self.last_fetch_leader_log_end_offset = -1
            self.last_fetch_time_ms = 0
            self.broker_epoch = None
        else:
            self.last_fetch_leader_log_end_offset = leader_end_offset
            self.last_fetch_time_ms = now_ms if in_sync else 0


@dataclass(frozen=True, slots=True)
class CommittedIsr:
    isr: frozenset[int]
    leader_recovery_state: int

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self.isr

    in_flight = False


@dataclass(frozen=True, slots=True)
class PendingChange:
    """An AlterPartition under way, proposed on `last_committed`."""
    request_id: int
    sent: AlterPartitionRequest
    last_committed: CommittedIsr

    in_flight = True

    @property
    def isr(self) -> frozenset[int]:
        return self.last_committed.isr

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self.last_committed.isr


@dataclass(frozen=True, slots=True)
class PendingExpand(PendingChange):
    new_member: int

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self.last_committed.isr | {self.new_member}


@dataclass(frozen=True, slots=True)
class PendingShrink(PendingChange):
    out_of_sync: frozenset[int]


IsrState = Union[CommittedIsr, PendingExpand, PendingShrink]


def broker_epoch_isr_eligible(stored: int | None, cached: int | None) -> bool:
    """The follower's Fetch named the broker epoch the metadata image has (or -1, no check)."""
    return stored is not None and cached is not None and (stored == -1 or stored == cached)


def is_replica_isr_eligible(progress: ReplicaProgress | None,
                            brokers: Mapping[int, BrokerInfo]) -> bool:
    """KRaft: only an unfenced broker, not shutting down, whose fetches come from the
    incarnation the metadata knows, may join the ISR (Partition.isReplicaIsrEligible)."""
    if progress is None:
        return False
    info = brokers.get(progress.replica_id)
    if info is None or info.fenced or info.in_controlled_shutdown:
        return False
    return broker_epoch_isr_eligible(progress.broker_epoch, info.broker_epoch)


def is_follower_in_sync(progress: ReplicaProgress, high_watermark: int,
                        epoch_start_offset: int) -> bool:
    """May join the ISR: it has the high watermark, and everything up to the start of our epoch
    (else it could be elected before it fetched committed records between our high watermark
    and log end; Partition.isFollowerInSync)."""
    end = progress.log_end_offset
    return end >= high_watermark and end >= epoch_start_offset


def high_watermark_candidate(leader_end_offset: int, remotes: Mapping[int, ReplicaProgress],
                             maximal_isr: frozenset[int], brokers: Mapping[int, BrokerInfo],
                             now_ms: int, max_lag_ms: int) -> int:
    """The smallest log end offset among the leader, the maximal ISR, and the followers that are
    caught up and eligible to join it (waiting for those lets them join; otherwise a follower
    just behind a lone leader would never reach the HW; Partition.maybeIncrementLeaderHW)."""
    candidate = leader_end_offset
    for progress in remotes.values():
        end = progress.log_end_offset
        if end < candidate and (
                progress.replica_id in maximal_isr
                or (progress.is_caught_up(leader_end_offset, now_ms, max_lag_ms)
                    and is_replica_isr_eligible(progress, brokers))):
            candidate = end
    return candidate


def out_of_sync_replicas(isr: frozenset[int], leader_id: int,
                         remotes: Mapping[int, ReplicaProgress], leader_end_offset: int,
                         now_ms: int, max_lag_ms: int) -> frozenset[int]:
    """ISR members (other than the leader) that are no longer caught up, or unknown."""
    out = set()
    for replica_id in isr:
        if replica_id == leader_id:
            continue
        progress = remotes.get(replica_id)
        if progress is None or not progress.is_caught_up(leader_end_offset, now_ms, max_lag_ms):
            out.add(replica_id)
    return frozenset(out)
