"""The simulation's safety checks: a History of everything the run has seen, grown and checked
as events happen, on the nodes each event touched.

- at most one leader per epoch, over the whole run;
- a node's epoch never decreases while it is up, nor below what it persisted; persisted epochs
  never decrease either;
- a node's high watermark never decreases while it is up;
- committed entries (below a node's high watermark) are the same on every node, forever: the
  global committed log is extended and compared as high watermarks move; no node truncates a
  committed entry from its disk; a new leader holds every committed entry; an installed snapshot
  holds exactly the committed state;
- log matching: an (offset, epoch) pair always names the same payload and the same epoch just
  before it, so two logs that share an entry share everything below it;
- persist-before-send, against the simulated disk: a vote request's epoch and self-vote, a
  granted vote, a BeginQuorumEpoch's leadership, a Fetch's offset and epoch are durable when
  the message leaves.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Sequence

from core.raft.entries import Entry
from core.raft.messages import (BeginQuorumEpochRequest, FetchRequest, RaftMessage, VoteRequest,
                                VoteResponse)
from core.raft.ready import Snapshot
from core.raft.roles import Role
from core.raft.state import QuorumState
from tests.support.simulation import InvariantViolation

if TYPE_CHECKING:
    from tests.raft.simulation import SimNode


class History:
    def __init__(self, clock: Callable[[], int]):
        self._clock = clock
        self.leaders: dict[int, int] = {}            # epoch -> its one leader
        self.committed: list[Entry] = []             # the committed log, indexed by offset
        # (offset, epoch) -> (payload, epoch of the entry before): log matching.
        self.entry_facts: dict[tuple[int, int], tuple[bytes, int]] = {}
        # (voter, candidate, correlation id) -> the VoteRequest the voter is answering.
        self.vote_requests: dict[tuple[int, int, int], VoteRequest] = {}

    def fail(self, sim_node: SimNode | None, what: str) -> None:
        who = f"node {sim_node.node_id}: " if sim_node is not None else ""
        raise InvariantViolation(f"t={self._clock()} {who}{what}")

    # --- a node's visible state, after each event ----------------------------------------------

    def check_node(self, sim_node: SimNode) -> None:
        raft = sim_node.raft
        epoch = raft.epoch
        if epoch < sim_node.max_epoch:
            self.fail(sim_node, f"epoch went back from {sim_node.max_epoch} to {epoch}")
        if epoch < sim_node.max_persisted_epoch:
            self.fail(sim_node, f"epoch {epoch} below its persisted {sim_node.max_persisted_epoch}")
        sim_node.max_epoch = epoch
        if raft.role is Role.LEADER:
            known = self.leaders.setdefault(epoch, sim_node.node_id)
            if known != sim_node.node_id:
                self.fail(sim_node, f"second leader of epoch {epoch} (first: {known})")
            if sim_node.leader_checked_epoch != epoch:
                sim_node.leader_checked_epoch = epoch
                self._check_leader_completeness(sim_node)
        hw = raft.high_watermark
        if hw < sim_node.hw:
            self.fail(sim_node, f"high watermark went back from {sim_node.hw} to {hw}")
        if hw > sim_node.hw:
            self._check_committed(sim_node, sim_node.hw, hw)
            sim_node.hw = hw

    def _check_leader_completeness(self, sim_node: SimNode) -> None:
        log = sim_node.raft.log
        end = len(self.committed)
        if end == 0 or end <= log.start_offset:
            return   # all of it is in the leader's snapshot (checked when installed)
        if log.end_offset < end or log.epoch_of(end - 1) != self.committed[end - 1].epoch:
            self.fail(sim_node, f"new leader of epoch {sim_node.raft.epoch} lacks committed "
                                f"entries below {end}")

    def _check_committed(self, sim_node: SimNode, old_hw: int, new_hw: int) -> None:
        log = sim_node.raft.log
        committed = self.committed
        for offset in range(max(old_hw, log.start_offset), new_hw):
            entry = log.entry(offset)
            if offset < len(committed):
                known = committed[offset]
                if known.epoch != entry.epoch or known.payload != entry.payload:
                    self.fail(sim_node, f"committed entry {offset} differs: {entry} vs {known}")
            elif offset == len(committed):
                committed.append(entry)
            else:
                self.fail(sim_node, f"committed {offset} beyond the known history "
                                    f"{len(committed)}")

    # --- what a node writes to its disk ---------------------------------------------------------

    def check_quorum_state_write(self, sim_node: SimNode, state: QuorumState) -> None:
        durable = sim_node.disk.quorum_state
        if state.leader_epoch < durable.leader_epoch:
            self.fail(sim_node, f"persisted epoch went back: {durable} -> {state}")
        sim_node.max_persisted_epoch = max(sim_node.max_persisted_epoch, state.leader_epoch)

    def check_append(self, sim_node: SimNode, entries: Sequence[Entry]) -> None:
        disk = sim_node.disk
        if entries[0].offset != disk.end:
            self.fail(sim_node, f"append at {entries[0].offset} to a disk log ending at "
                                f"{disk.end}")
        facts = self.entry_facts
        previous_epoch = disk.epoch_at(entries[0].offset - 1)
        for entry in entries:
            key = (entry.offset, entry.epoch)
            fact = (entry.payload, previous_epoch)
            known = facts.setdefault(key, fact)
            if known != fact:
                self.fail(sim_node, f"entry {key} is {fact}, elsewhere {known}")
            previous_epoch = entry.epoch

    def check_truncation(self, sim_node: SimNode, offset: int) -> None:
        # If the first entry dropped is the committed one, by log matching all below it are too.
        disk = sim_node.disk
        if offset < len(self.committed) and disk.base <= offset < disk.end:
            mine = disk.entries[offset - disk.base]
            known = self.committed[offset]
            if mine.epoch == known.epoch and mine.payload == known.payload:
                self.fail(sim_node, f"truncated committed entry {offset}")

    def check_snapshot(self, snapshot: Snapshot) -> None:
        end = snapshot.snapshot_id.end_offset
        if end > len(self.committed):
            self.fail(None, f"snapshot {snapshot.snapshot_id} beyond the committed log "
                            f"({len(self.committed)})")
        expected = b"".join(e.payload + b";" for e in self.committed[:end] if not e.control)
        if snapshot.data != expected:
            self.fail(None, f"snapshot {snapshot.snapshot_id} does not hold the committed state")

    # --- persist-before-send --------------------------------------------------------------------

    def saw_vote_request(self, message: RaftMessage) -> None:
        key = (message.destination_id, message.source_id, message.correlation_id)
        self.vote_requests[key] = message.data  # type: ignore[assignment]

    def check_sent(self, sim_node: SimNode, message: RaftMessage) -> None:
        data = message.data
        durable = sim_node.disk.quorum_state
        if isinstance(data, VoteRequest):
            if data.candidate_epoch > durable.leader_epoch or (
                    not data.pre_vote and data.candidate_epoch == durable.leader_epoch
                    and durable.voted_id != sim_node.node_id):
                self.fail(sim_node, f"sent {data} before persisting its epoch/vote ({durable})")
        elif isinstance(data, VoteResponse):
            if data.leader_epoch > durable.leader_epoch:
                self.fail(sim_node, f"sent {data} from an unpersisted epoch ({durable})")
            request = self.vote_requests.pop(
                (sim_node.node_id, message.destination_id, message.correlation_id), None)
            if request is not None and data.vote_granted and not request.pre_vote:
                bound = durable.leader_epoch > request.candidate_epoch or (
                    durable.leader_epoch == request.candidate_epoch
                    and durable.voted_id == request.candidate_id)
                if not bound:
                    self.fail(sim_node, f"granted {request} before persisting the vote "
                                        f"({durable})")
        elif isinstance(data, BeginQuorumEpochRequest):
            if (durable.leader_epoch, durable.leader_id) != (data.leader_epoch, data.leader_id):
                self.fail(sim_node, f"sent {data} before persisting the leadership ({durable})")
        elif isinstance(data, FetchRequest):
            disk = sim_node.disk
            if data.fetch_offset > disk.end or \
                    disk.epoch_at(data.fetch_offset - 1) != data.last_fetched_epoch:
                self.fail(sim_node, f"fetch at ({data.fetch_offset}, {data.last_fetched_epoch})"
                                    f" beyond the durable log (end {disk.end})")
