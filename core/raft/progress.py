"""LeaderState: what a leader knows about the replicas that fetch from it.

It decides the high watermark: the largest offset durable on a majority of VOTERS (observers
never count), counting the leader's own log only up to what it has flushed, and only once an
entry of the leader's own epoch is among them. That last rule is Raft's: an entry of an earlier
epoch that sits on a majority can still be overwritten by a later leader (the "figure 8" case),
so a leader commits older entries only by committing one of its own. The leader writes a
LeaderChange control entry at the start of its epoch (at epoch_start_offset) so that this
happens without waiting for a client's write.

It also runs "check quorum": a leader that has not heard from a majority of voters within 1.5
fetch timeouts resigns, so a leader cut off from the quorum stops claiming to lead.
"""
from __future__ import annotations

from dataclasses import dataclass

from core.raft.config import QuorumConfig
from core.raft.election import majority
from core.raft.entries import UNKNOWN_OFFSET
from core.raft.messages import FetchRequest, RaftMessage, ReplicaState


@dataclass(slots=True)
class ReplicaProgress:
    replica_id: int
    end_offset: int = UNKNOWN_OFFSET   # its durable log end, as its last fetch offset said
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    # The leader's log end when this replica last fetched (Kafka's lastFetchLeaderLogEndOffset):
    # reaching it later proves the replica was caught up as of that earlier fetch.
    leader_end_at_last_fetch: int = UNKNOWN_OFFSET

    def record_fetch(self, fetch_offset: int, leader_end: int, now_ms: int) -> None:
        if fetch_offset >= leader_end:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
        elif self.leader_end_at_last_fetch > 0 and fetch_offset >= self.leader_end_at_last_fetch:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.end_offset = fetch_offset
        self.leader_end_at_last_fetch = leader_end
        self.last_fetch_ms = max(self.last_fetch_ms, now_ms)

    def describe(self) -> ReplicaState:
        return ReplicaState(replica_id=self.replica_id, log_end_offset=self.end_offset,
                            last_fetch_timestamp=self.last_fetch_ms,
                            last_caught_up_timestamp=self.last_caught_up_ms)


class LeaderState:
    def __init__(self, local_id: int, epoch: int, epoch_start_offset: int,
                 voters: frozenset[int], config: QuorumConfig, now_ms: int):
        self.local_id = local_id
        self.epoch = epoch
        self.epoch_start_offset = epoch_start_offset
        self.voters = voters
        self.voter_progress = {v: ReplicaProgress(v) for v in sorted(voters)}
        self.observer_progress: dict[int, ReplicaProgress] = {}
        # None until an entry of this epoch is committed: until then the leader does not know a
        # high watermark it may vouch for (Kafka sends -1 in that window).
        self.high_watermark: int | None = None
        self.unacknowledged_voters = set(voters) - {local_id}
        # Fetches that found nothing new wait here (Kafka's fetch purgatory): by replica id,
        # the request message, its Fetch request and when its max wait ends.
        self.parked_fetches: dict[int, tuple[RaftMessage, FetchRequest, int]] = {}
        self.begin_epoch_resend_at = now_ms
        self._config = config
        self._voters_heard = {local_id}
        self.check_quorum_deadline = now_ms + config.check_quorum_timeout_ms

    def can_grant_vote(self, node: object, candidate_id: int, log_up_to_date: bool,
                       pre_vote: bool) -> bool:
        return False   # this epoch has a leader: us; and we hear from a majority

    # --- progress -------------------------------------------------------------------------------

    def update_local_end(self, flushed_end_offset: int, now_ms: int) -> bool:
        """The leader's own durable end moved. Returns True if the high watermark advanced."""
        local = self.voter_progress[self.local_id]
        local.end_offset = flushed_end_offset
        local.last_fetch_ms = local.last_caught_up_ms = now_ms
        return self._maybe_advance_high_watermark()

    def update_replica(self, replica_id: int, fetch_offset: int, leader_end: int,
                       now_ms: int) -> bool:
        """A replica fetched from `fetch_offset`, so its log holds everything below it, durably
        (followers persist before they fetch). Returns True if the high watermark advanced."""
        progress = self.voter_progress.get(replica_id)
        if progress is None:
            progress = self.observer_progress.get(replica_id)
            if progress is None:
                progress = self.observer_progress[replica_id] = ReplicaProgress(replica_id)
            progress.record_fetch(fetch_offset, leader_end, now_ms)
            return False
        progress.record_fetch(fetch_offset, leader_end, now_ms)
        self.voter_heard(replica_id, now_ms)
        return self._maybe_advance_high_watermark()

    def hw_candidate_progress(self) -> list[ReplicaProgress]:
        """The replicas whose logs decide the high watermark: voters only."""
        return list(self.voter_progress.values())

    def _maybe_advance_high_watermark(self) -> bool:
        ends = sorted((p.end_offset for p in self.hw_candidate_progress()), reverse=True)
        # The smallest end offset among the most advanced majority.
        replicated = ends[majority(len(self.voters)) - 1]
        if replicated <= self.epoch_start_offset:
            return False   # our own epoch's first entry is not on a majority yet
        if self.high_watermark is not None and replicated <= self.high_watermark:
            return False   # a slow replica's report never moves the high watermark back
        self.high_watermark = replicated
        return True

    # --- who acknowledges this leader -----------------------------------------------------------

    def voter_heard(self, voter_id: int, now_ms: int) -> None:
        """A voter fetched from us or answered BeginQuorumEpoch: it follows us in this epoch."""
        if voter_id not in self.voters:
            return
        self.unacknowledged_voters.discard(voter_id)
        self._voters_heard.add(voter_id)
        if len(self._voters_heard) >= majority(len(self.voters)):
            self.check_quorum_deadline = now_ms + self._config.check_quorum_timeout_ms
            self._voters_heard = {self.local_id}

    def check_quorum_expired(self, now_ms: int) -> bool:
        return len(self.voters) > 1 and now_ms >= self.check_quorum_deadline

    def successors_by_progress(self) -> tuple[int, ...]:
        """The other voters, furthest replicated first: EndQuorumEpoch's preferred successors."""
        others = [p for v, p in self.voter_progress.items() if v != self.local_id]
        others.sort(key=lambda p: (-p.end_offset, p.replica_id))
        return tuple(p.replica_id for p in others)

    def describe(self) -> tuple[tuple[ReplicaState, ...], tuple[ReplicaState, ...]]:
        voters = tuple(self.voter_progress[v].describe() for v in sorted(self.voter_progress))
        observers = tuple(self.observer_progress[o].describe()
                          for o in sorted(self.observer_progress))
        return voters, observers
