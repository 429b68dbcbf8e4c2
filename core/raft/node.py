"""RaftNode: KRaft's Raft (KIP-595, with KIP-996 pre-vote) as a pure state machine.

Theory of operation
===================

The node does no I/O and reads no clock of its own. A driver feeds it inputs and carries out
its outputs:

    inputs                              outputs (one Ready at a time)
    step(message)  a request/response   quorum state to persist, log truncation and entries to
    tick()         the clock moved       append, a snapshot to install, messages to send,
    propose(...)   append as leader      committed entries to apply
    resign()       graceful shutdown
    snapshot_created(...)

and loops:

    while node.has_ready():
        ready = node.ready()
        persist(ready); send(ready.messages); apply(ready.committed_entries)
        node.advance(ready)
    sleep until a message arrives or node.next_deadline_ms(); then tick()/step()

Persist-before-send is the whole durability story (see ready.py): a message never leaves before
the state it relies on is on disk, so a crash loses only what nobody else has seen.

Roles. Each role is a state object plus a step function and a tick function that the node swaps
in when it changes role (become_*), as etcd-raft swaps stepLeader/stepFollower/stepCandidate.
node.state is typed as the union of the role states (RoleState); a role's functions read theirs
with node.role_state(FollowerState) and the like, which refuses any other role's state:

    Unattached   knows an epoch but no leader; may have voted. Voters campaign when the
                 election timeout (1000 ms + jitter) passes; observers look for the leader by
                 fetching from voters.
    Prospective  KIP-996 pre-vote: asks the voters whether they WOULD vote for it, without
                 bumping the epoch or binding anyone. A voter says yes if our log is at least
                 as up to date as its own, unless it is a follower that heard from its leader
                 within the fetch timeout (the leader is alive; we are merely cut off from it)
                 or the leader itself. A majority of yes makes it a Candidate; a majority of no
                 or a timeout sends it back to following (or to Unattached). So a voter that
                 was merely cut off cannot force a healthy quorum into a new epoch.
    Candidate    bumps the epoch, votes for itself (persisted), asks for votes. A majority makes
                 it Leader. A majority of no makes it back off (binary exponential, capped at
                 quorum.election.backoff.max.ms) before it tries again as Prospective.
    Leader       appends a LeaderChange control entry to open its epoch, tells the voters with
                 BeginQuorumEpoch (followers learn the leader only from that or from a Fetch
                 answer), answers Fetch and FetchSnapshot, advances the high watermark.
    Follower     pulls: sends Fetch(fetch_offset = its log end, last_fetched_epoch), one at a
                 time. The leader answers with entries, or a DivergingEpoch to truncate to, or a
                 SnapshotId to fetch first (FetchSnapshot, chunk by chunk). A voter that hears
                 nothing from its leader for quorum.fetch.timeout.ms becomes Prospective.
    Resigned     a leader stepping down (resign(), check quorum, or a restart after leading):
                 keeps its epoch, serves nothing, tells the voters with EndQuorumEpoch and a
                 ranked list of preferred successors so the best of them campaigns at once.
                 If nobody has taken over after an election timeout, it campaigns itself.

Epochs only grow. Any message from a later epoch moves the node into it (as a follower if it
names the leader, else Unattached) before it is handled; anything from an earlier epoch is
answered with FENCED_LEADER_EPOCH or ignored. At most one leader per epoch follows from each
voter voting at most once per epoch, which is why the vote is durable before it is granted.

Replication is pull based. The leader checks each Fetch's (fetch_offset, last_fetched_epoch)
against its epoch cache: entries are unique by (offset, epoch), so if the leader holds that
epoch up to that offset the follower's log matches its own below it (log matching), and the
fetch offset tells the leader how much the follower has durably. The high watermark is the
largest offset durable on a majority of voters, counting the leader's own flushed log end,
once an entry of the leader's own epoch is committed (see progress.py). Followers set theirs to
min(leader's HW, own log end). A node's high watermark never goes back.

Observers (non-voters, e.g. brokers) fetch like followers but never vote, never campaign and
never count toward the high watermark.

Snapshots (KIP-630): the application tells the node a snapshot exists up to an offset it has
applied (snapshot_created); the log start may then advance past it. A follower that needs
entries below the leader's log start is sent the snapshot id, fetches the snapshot in chunks
(position, size) and installs it through a Ready.

Where things live: messages.py (the RPCs), state.py (QuorumState), log.py (RaftLog and its epoch
cache), ready.py (the Ready contract), common.py (requests every role answers alike),
unattached.py, nominee.py (Prospective and Candidate), leader.py with progress.py (replica
progress, high watermark, check quorum), follower.py, resigned.py, election.py (tallies,
timeouts, backoffs).
"""
from __future__ import annotations

import random
from typing import Callable, Iterable, Protocol, Sequence, TypeVar

from core.protocol.errors import ErrorCode
from core.raft import common, follower, leader, nominee, resigned, unattached
from core.raft.config import QuorumConfig
from core.raft.election import random_election_timeout_ms
from core.raft.entries import NO_LEADER, OffsetAndEpoch, SnapshotId, leader_change_payload
from core.raft.errors import NotLeaderError, RaftStateError
from core.raft.log import RaftLog
from core.raft.messages import (REQUEST_TYPES, BeginQuorumEpochRequest, DescribeQuorumRequest,
                                DescribeQuorumResponse, EndQuorumEpochRequest, FetchRequest,
                                FetchResponse, FetchSnapshotRequest, FetchSnapshotResponse,
                                LeaderIdAndEpoch, RaftMessage, RaftRequest, RaftResponse,
                                VoteRequest)
from core.raft.progress import LeaderState
from core.raft.ready import Ready, Snapshot
from core.raft.roles import Role
from core.raft.state import QuorumState

Clock = Callable[[], int]
RETAINED_SNAPSHOTS = 2   # keep the previous snapshot too, so a transfer under way can finish

# The state of each role; RaftNode.state is always the one of its role.
RoleState = (unattached.UnattachedState | nominee.ProspectiveState | nominee.CandidateState
             | LeaderState | follower.FollowerState | resigned.ResignedState)
S = TypeVar("S", bound=RoleState)


class RoleModule(Protocol):
    """What each role module (unattached, nominee, leader, follower, resigned) provides."""

    def step(self, node: RaftNode, message: RaftMessage) -> None: ...

    def tick(self, node: RaftNode) -> None: ...

    def next_deadline(self, node: RaftNode) -> int | None: ...


class RaftNode:
    def __init__(self, node_id: int, voters: Iterable[int], *, cluster_id: str,
                 clock: Clock, rng: random.Random, config: QuorumConfig | None = None,
                 quorum_state: QuorumState | None = None, log: RaftLog | None = None,
                 snapshot: Snapshot | None = None):
        """Build a node from what the driver found on disk (nothing, on first start).

        `snapshot` is the latest snapshot with its bytes, which a leader serves to followers;
        `log` must start at its end offset.
        """
        self.node_id = node_id
        self.voters = frozenset(voters)
        if not self.voters:
            raise ValueError("a quorum needs at least one voter")
        self.is_voter = node_id in self.voters
        self.cluster_id = cluster_id
        self.config = config or QuorumConfig()
        self._clock = clock
        self.rng = rng
        self.log = log if log is not None else RaftLog()
        self._snapshots: dict[SnapshotId, bytes] = {}
        if snapshot is not None:
            if snapshot.snapshot_id.end_offset != self.log.start_offset:
                raise ValueError("the log must start where the latest snapshot ends")
            self._snapshots[snapshot.snapshot_id] = snapshot.data
            self.log.snapshot_created(snapshot.snapshot_id)
        persisted = quorum_state if quorum_state is not None else QuorumState()
        self.quorum_state = self._persisted_quorum_state = persisted
        # Everything below the log start is in a snapshot of committed entries.
        self.high_watermark = self.log.start_offset
        self._applied = self.log.start_offset
        self._pending_snapshot: Snapshot | None = None
        self._outbox: list[RaftMessage] = []
        # Random start: a late answer to a previous incarnation's request never matches ours.
        self._next_correlation_id = rng.getrandbits(30)
        self._unadvanced: Ready | None = None
        self.role = Role.UNATTACHED
        self.state: RoleState   # set by _initialize_role, like every role change, by _set_role
        self._step_role: Callable[[RaftNode, RaftMessage], None] = unattached.step
        self._tick_role: Callable[[RaftNode], None] = unattached.tick
        self._deadline_role: Callable[[RaftNode], int | None] = unattached.next_deadline
        self._initialize_role(persisted)
        self._maybe_campaign_alone()

    def _maybe_campaign_alone(self) -> None:
        """The only voter needs nobody's vote, so it campaigns at once instead of waiting out an
        election timeout (Kafka's KafkaRaftClient does the same): a one-node cluster serves
        within moments of starting. It leads a new epoch even after a restart as leader, which
        keeps (offset, epoch) unique as a resignation would."""
        if self.voters == {self.node_id} and self.role in (Role.UNATTACHED, Role.RESIGNED):
            self.become_prospective()

    def _initialize_role(self, persisted: QuorumState) -> None:
        epoch = persisted.leader_epoch
        if epoch < self.log.last_epoch:
            # The log saw a later epoch than the quorum state file (the driver crashed between
            # the two writes): the log is the truth about epochs.
            self.become_unattached(self.log.last_epoch)
        elif persisted.leader_id == self.node_id and self.is_voter:
            # We led this epoch. Never lead it again: entries of this epoch we had not flushed
            # are gone here but may live on followers, and (offset, epoch) must stay unique.
            self.become_resigned(())
        elif persisted.leader_id not in (NO_LEADER, self.node_id):
            self.become_follower(epoch, persisted.leader_id)
        else:
            self.become_unattached(epoch, persisted.voted_id)

    # --- what the node looks like ---------------------------------------------------------------

    def now(self) -> int:
        return self._clock()

    @property
    def epoch(self) -> int:
        return self.quorum_state.leader_epoch

    @property
    def leader_id(self) -> int:
        return self.quorum_state.leader_id

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    @property
    def applied_offset(self) -> int:
        """Offsets below this were handed to the driver (committed entries or a snapshot)."""
        return self._applied

    def leader_and_epoch(self) -> LeaderIdAndEpoch:
        return LeaderIdAndEpoch(leader_id=self.leader_id, leader_epoch=self.epoch)

    def role_state(self, kind: type[S]) -> S:
        """The state of the current role, which the caller knows to be a `kind`."""
        state = self.state
        if not isinstance(state, kind):
            raise RaftStateError(f"a {self.role.value} node has no {kind.__name__}")
        return state

    def snapshot_data(self, snapshot_id: SnapshotId) -> bytes | None:
        return self._snapshots.get(snapshot_id)

    def __repr__(self) -> str:
        return (f"RaftNode({self.node_id}, {self.role.value}, epoch={self.epoch}, "
                f"leader={self.leader_id}, hw={self.high_watermark}, "
                f"log=[{self.log.start_offset}, {self.log.end_offset}))")

    # --- inputs ---------------------------------------------------------------------------------

    def step(self, message: RaftMessage) -> None:
        self._check_not_awaiting_advance()
        data = message.data
        if isinstance(data, VoteRequest):
            common.handle_vote_request(self, message, data)
        elif isinstance(data, BeginQuorumEpochRequest):
            common.handle_begin_quorum_epoch_request(self, message, data)
        elif isinstance(data, EndQuorumEpochRequest):
            common.handle_end_quorum_epoch_request(self, message, data)
        elif isinstance(data, (FetchRequest, FetchSnapshotRequest)):
            if not common.reject_leader_only_request(self, message, data):
                self._step_role(self, message)
        elif isinstance(data, DescribeQuorumRequest):
            self.respond(message, self.describe_quorum())
        else:
            self._step_role(self, message)

    def tick(self) -> None:
        """Let timers that are due fire. Call at or after next_deadline_ms()."""
        self._check_not_awaiting_advance()
        self._tick_role(self)

    def next_deadline_ms(self) -> int | None:
        """The earliest clock reading at which tick() has something to do."""
        return self._deadline_role(self)

    def propose(self, payloads: Sequence[bytes]) -> OffsetAndEpoch:
        """Append entries as the leader. Returns the offset after the last one and the epoch:
        they are committed once the high watermark passes that offset in that epoch."""
        self._check_not_awaiting_advance()
        if self.role is not Role.LEADER:
            raise NotLeaderError(self.leader_id, self.epoch)
        if payloads:
            self.log.append_as_leader(payloads, self.epoch)
            leader.on_append(self)
        return self.log.end_offset_and_epoch()

    def resign(self) -> None:
        """Graceful shutdown of a leader: hand leadership over before going away."""
        self._check_not_awaiting_advance()
        if self.role is Role.LEADER:
            self.become_resigned(self.role_state(LeaderState).successors_by_progress())

    def snapshot_created(self, end_offset: int, data: bytes,
                         advance_log_start: bool = True) -> SnapshotId:
        """The application wrote a snapshot of its state up to `end_offset` (exclusive).

        It must have applied that far, which implies committed and durable here. With
        `advance_log_start` the entries it covers are dropped from the log (Ready's
        log_start_offset tells the driver to delete them) and followers that need them get the
        snapshot instead.
        """
        self._check_not_awaiting_advance()
        if not self.log.start_offset <= end_offset <= self._applied:
            raise ValueError(f"snapshot end {end_offset} is outside the applied range "
                             f"[{self.log.start_offset}, {self._applied}]")
        epoch = self.log.epoch_of(end_offset - 1) if end_offset > 0 else 0
        snapshot_id = SnapshotId(end_offset, epoch)
        self._snapshots[snapshot_id] = data
        for old in sorted(self._snapshots)[:-RETAINED_SNAPSHOTS]:
            del self._snapshots[old]
        self.log.snapshot_created(snapshot_id)
        if advance_log_start:
            self.log.advance_start_offset(snapshot_id)
        return snapshot_id

    def describe_quorum(self) -> DescribeQuorumResponse:
        if self.role is not Role.LEADER:
            return DescribeQuorumResponse(partition_error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                          leader_id=self.leader_id, leader_epoch=self.epoch)
        voters, observers = self.role_state(LeaderState).describe()
        return DescribeQuorumResponse(leader_id=self.node_id, leader_epoch=self.epoch,
                                      high_watermark=self.high_watermark,
                                      current_voters=voters, observers=observers)

    # --- outputs --------------------------------------------------------------------------------

    def has_ready(self) -> bool:
        return bool(self._outbox or self.quorum_state != self._persisted_quorum_state
                    or self.log.has_unpersisted or self._pending_snapshot is not None
                    or min(self.high_watermark, self.log.end_offset) > self._applied
                    or self.log.start_advanced)

    def ready(self) -> Ready:
        self._check_not_awaiting_advance()
        truncate_to, entries = self.log.unpersisted()
        qs = self.quorum_state
        committed_from = max(self._applied, self.log.start_offset)
        committed_to = min(self.high_watermark, self.log.end_offset)
        committed = (self.log.slice(committed_from, committed_to)
                     if committed_to > committed_from else ())
        ready = Ready(
            quorum_state=qs if qs != self._persisted_quorum_state else None,
            snapshot=self._pending_snapshot,
            truncate_to=truncate_to,
            entries=entries,
            log_start_offset=self.log.start_offset if self.log.start_advanced else None,
            messages=tuple(self._outbox),
            committed_entries=committed,
            high_watermark=self.high_watermark,
            leader=self.leader_and_epoch(),
        )
        self._outbox = []
        self._unadvanced = ready
        return ready

    def advance(self, ready: Ready) -> None:
        """The driver carried out `ready`: it is durable, sent and applied."""
        if ready is not self._unadvanced:
            raise RaftStateError("advance() with a Ready that is not the outstanding one")
        self._unadvanced = None
        if ready.quorum_state is not None:
            self._persisted_quorum_state = ready.quorum_state
        self.log.mark_persisted()
        if ready.log_start_offset is not None:
            self.log.take_start_advanced()
        self._pending_snapshot = None
        if ready.snapshot is not None:
            self._applied = max(self._applied, ready.snapshot.snapshot_id.end_offset)
        if ready.committed_entries:
            self._applied = ready.committed_entries[-1].offset + 1
        if self.role is Role.LEADER:
            # Only now does the leader's own log end count toward the high watermark.
            leader.on_flush(self)

    def _check_not_awaiting_advance(self) -> None:
        if self._unadvanced is not None:
            raise RaftStateError("the driver must call advance() before using the node again")

    # --- helpers for the role modules -----------------------------------------------------------

    def send(self, destination_id: int, data: RaftRequest | RaftResponse) -> int:
        correlation_id = self._next_correlation_id
        self._next_correlation_id = (correlation_id + 1) & 0x7FFFFFFF
        self._outbox.append(RaftMessage(self.node_id, destination_id, correlation_id, data))
        return correlation_id

    def respond(self, request: RaftMessage, data: RaftResponse) -> None:
        self._outbox.append(RaftMessage(self.node_id, request.source_id,
                                        request.correlation_id, data))

    def other_voters(self) -> list[int]:
        return sorted(self.voters - {self.node_id})

    def update_high_watermark(self, offset: int) -> bool:
        if offset <= self.high_watermark:
            return False
        self.high_watermark = offset
        return True

    def install_snapshot(self, snapshot: Snapshot) -> None:
        """A snapshot fetched from the leader replaces our log (installed by the next Ready)."""
        self.log.reset_to_snapshot(snapshot.snapshot_id)
        self._snapshots[snapshot.snapshot_id] = snapshot.data
        self._pending_snapshot = snapshot
        self.update_high_watermark(snapshot.snapshot_id.end_offset)

    def cluster_id_matches(self, cluster_id: str | None) -> bool:
        # Kafka does not enforce the cluster id when a request leaves it out.
        return cluster_id is None or cluster_id == self.cluster_id

    def vote_request(self, pre_vote: bool) -> VoteRequest:
        end = self.log.end_offset_and_epoch()
        return VoteRequest(cluster_id=self.cluster_id, candidate_epoch=self.epoch,
                           candidate_id=self.node_id, last_offset_epoch=end.epoch,
                           last_offset=end.offset, pre_vote=pre_vote)

    # --- transitions ----------------------------------------------------------------------------

    def _set_role(self, role: Role, state: RoleState, module: RoleModule) -> None:
        if self.role is Role.LEADER and role is not Role.LEADER:
            leader.abandon(self)
        self.role = role
        self.state = state
        self._step_role = module.step
        self._tick_role = module.tick
        self._deadline_role = module.next_deadline

    def become_unattached(self, epoch: int, voted_id: int = NO_LEADER) -> None:
        assert epoch >= self.epoch, (epoch, self.epoch)
        if epoch == self.epoch and voted_id == NO_LEADER:
            voted_id = self.quorum_state.voted_id   # a vote binds for the rest of its epoch
        self.quorum_state = QuorumState(epoch, NO_LEADER, voted_id)
        deadline = (self.now() + random_election_timeout_ms(self.config, self.rng)
                    if self.is_voter else None)
        self._set_role(Role.UNATTACHED, unattached.UnattachedState(deadline), unattached)
        unattached.on_become(self)

    def become_follower(self, epoch: int, leader_id: int) -> None:
        assert epoch >= self.epoch and leader_id != self.node_id, (epoch, leader_id)
        voted_id = self.quorum_state.voted_id if epoch == self.epoch else NO_LEADER
        self.quorum_state = QuorumState(epoch, leader_id, voted_id)
        state = follower.FollowerState(leader_id, self.now() + self.config.fetch_timeout_ms)
        self._set_role(Role.FOLLOWER, state, follower)
        follower.send_fetch(self)

    def become_prospective(self, retries: int = 0) -> None:
        assert self.is_voter
        state = nominee.ProspectiveState(
            self.voters, self.node_id,
            deadline=self.now() + random_election_timeout_ms(self.config, self.rng),
            retries=retries)
        self._set_role(Role.PROSPECTIVE, state, nominee)
        nominee.on_become(self, pre_vote=True)

    def become_candidate(self, retries: int) -> None:
        assert self.is_voter and self.role is not Role.LEADER
        self.quorum_state = QuorumState(self.epoch + 1, NO_LEADER, self.node_id)
        state = nominee.CandidateState(
            self.voters, self.node_id,
            deadline=self.now() + random_election_timeout_ms(self.config, self.rng),
            retries=retries)
        self._set_role(Role.CANDIDATE, state, nominee)
        nominee.on_become(self, pre_vote=False)

    def become_leader(self) -> None:
        assert self.role is Role.CANDIDATE
        epoch = self.epoch
        # The candidate's tally, before its state is replaced.
        granting = self.role_state(nominee.CandidateState).election.granted
        self.quorum_state = QuorumState(epoch, self.node_id, self.node_id)
        state = LeaderState(self.node_id, epoch, self.log.end_offset, self.voters,
                            self.config, self.now())
        self._set_role(Role.LEADER, state, leader)
        # Open the epoch with an entry of our own, so the high watermark can move (progress.py).
        self.log.append_as_leader([leader_change_payload(self.node_id, self.voters, granting)],
                                  epoch, control=True)
        leader.on_become(self)

    def become_resigned(self, preferred_successors: Sequence[int]) -> None:
        state = resigned.ResignedState(
            tuple(preferred_successors), set(self.other_voters()),
            deadline=self.now() + random_election_timeout_ms(self.config, self.rng))
        self._set_role(Role.RESIGNED, state, resigned)
        resigned.on_become(self)

    def maybe_transition(self, leader_id: int, epoch: int) -> bool:
        """Move to a later epoch, or learn the leader of ours. True if the role changed."""
        if epoch > self.epoch:
            if leader_id == self.node_id:
                raise RaftStateError(f"told that we lead epoch {epoch}, which we never won")
            if leader_id != NO_LEADER:
                self.become_follower(epoch, leader_id)
            else:
                self.become_unattached(epoch)
            return True
        if epoch == self.epoch and leader_id != NO_LEADER:
            if self.leader_id == NO_LEADER:
                if leader_id == self.node_id:
                    raise RaftStateError(f"told that we lead epoch {epoch}, which we never won")
                self.become_follower(epoch, leader_id)
                return True
            if self.leader_id != leader_id:
                raise RaftStateError(f"epoch {epoch} has two leaders: {self.leader_id} "
                                     f"and {leader_id}")
        return False

    def handle_common_response(self, error: ErrorCode, leader_id: int, epoch: int) -> bool:
        """The checks every response gets first. True when the response is dealt with (stale,
        an error, or news of another epoch or leader); False when the role should use it."""
        if epoch < self.epoch:
            return True    # an answer from an epoch we left: nothing in it applies any more
        if self.maybe_transition(leader_id, epoch):
            return True
        return error != ErrorCode.NONE

    def handle_response_header(self, message: RaftMessage) -> bool:
        """handle_common_response for any response message."""
        data = message.data
        assert not isinstance(data, REQUEST_TYPES), data   # requests never reach the roles' step
        if data.error_code != ErrorCode.NONE:
            return True
        if isinstance(data, (FetchResponse, FetchSnapshotResponse)):
            leader_id = data.current_leader.leader_id
            epoch = data.current_leader.leader_epoch
        elif isinstance(data, DescribeQuorumResponse):
            return True
        else:
            leader_id, epoch = data.leader_id, data.leader_epoch
        return self.handle_common_response(data.partition_error_code, leader_id, epoch)
