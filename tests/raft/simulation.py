"""A deterministic, seeded simulation of a KRaft quorum built from core.raft nodes.

Everything runs on one virtual clock and one random generator seeded from the seed, so a seed
replays exactly. The network drops, delays, reorders and duplicates messages and blocks links
(both ways or one way). Nodes crash and restart with what their disk held: the simulated driver
persists each Ready step by step (snapshot, quorum state, truncation, entries) and may crash
part way through, losing the rest and every message of that Ready. Clients propose to whichever
node believes it leads; nodes take snapshots of their applied state.

After every event the nodes it touched are checked against the run's History (invariants.py):
one leader per epoch, epochs and high watermarks that never go back, committed entries that
never change anywhere, log matching, and persist-before-send against the simulated disk.

After the chaos phase the network heals and every node restarts; a leader must then be elected
and a proposal committed on every node within LIVENESS_BOUND_MS.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from core.raft.config import QuorumConfig
from core.raft.entries import Entry
from core.raft.log import RaftLog
from core.raft.messages import RaftMessage, VoteRequest
from core.raft.node import RaftNode
from core.raft.roles import Role
from core.raft.ready import Ready, Snapshot
from core.raft.state import QuorumState
from tests.raft.formatting import format_message
from tests.raft.invariants import History
from tests.support.simulation import EventLoop, InvariantViolation, Network

CLUSTER_ID = "sim-cluster"
LIVENESS_BOUND_MS = 10_000
MAX_READIES_PER_EVENT = 100   # a node that never runs out of Readies is stuck in a loop
OBSERVER_IDS = (101, 102)

# Fetch byte limits drawn per run: 1 answers one entry per fetch (which splits an epoch's first
# entry from the older ones before it), the others batch. Snapshots travel in several chunks.
FETCH_MAX_BYTES = (1, 96, 4096)
SNAPSHOT_CHUNK_BYTES = 64

NETWORK = Network(delay_ms=(1, 10), slow_ms=(10, 600), duplicates=True)


@dataclass
class Faults:
    """How hostile one run is; drawn from the seed."""
    drop: float
    duplicate: float
    slow: float            # share of messages delayed a lot (which reorders them)
    crash_every_ms: int    # mean time between crashes, 0 for none
    torn_write: float      # chance a Ready's persistence is cut short by a crash
    partition_every_ms: int
    leader_crash: float    # share of crashes aimed at a leader
    chaos_ms: int

    @classmethod
    def draw(cls, rng: random.Random) -> Faults:
        calm = rng.random() < 0.2
        return cls(drop=0.0 if calm else rng.choice([0.0, 0.01, 0.05, 0.15]),
                   duplicate=0.0 if calm else rng.choice([0.0, 0.02, 0.1]),
                   slow=0.0 if calm else rng.choice([0.0, 0.05, 0.2]),
                   crash_every_ms=0 if calm else rng.choice([0, 1500, 4000]),
                   torn_write=rng.choice([0.0, 0.02, 0.1]),
                   partition_every_ms=0 if calm else rng.choice([0, 2000, 5000]),
                   leader_crash=rng.choice([0.0, 0.5, 0.9]),
                   chaos_ms=rng.randrange(4000, 20000))


@dataclass
class Disk:
    """What survives a crash."""
    quorum_state: QuorumState = field(default_factory=QuorumState)
    snapshot: Snapshot | None = None
    base: int = 0                                   # offset of entries[0]
    entries: list[Entry] = field(default_factory=list)

    @property
    def end(self) -> int:
        return self.base + len(self.entries)

    def epoch_at(self, offset: int) -> int:
        if offset < self.base:
            if self.snapshot is not None and offset == self.snapshot.snapshot_id.end_offset - 1:
                return self.snapshot.snapshot_id.epoch
            return 0 if offset < 0 else -1
        return self.entries[offset - self.base].epoch


class SimNode:
    def __init__(self, node_id: int):
        self.node_id = node_id
        self.disk = Disk()
        self.raft: RaftNode | None = None
        self.incarnation = 0
        self.max_epoch = 0           # in memory, this incarnation
        self.max_persisted_epoch = 0
        self.hw = 0                  # last observed high watermark, this incarnation
        self.applied = 0
        self.state = bytearray()     # the application: applied payloads, ';'-terminated
        self.tick_token = 0
        self.tick_at: int | None = None
        self.leader_checked_epoch = -1

    @property
    def up(self) -> bool:
        return self.raft is not None


class Simulation(EventLoop):
    """The event loop, the clock, the network's misbehaviour and the trace are the generic
    EventLoop's (tests/support/simulation.py); this is the quorum."""
    network = NETWORK

    def __init__(self, seed: int, trace: bool = False):
        super().__init__(seed, trace)
        self.faults = Faults.draw(self.rng)
        voter_count = 3 if self.rng.random() < 0.6 else 5
        self.voters = tuple(range(1, voter_count + 1))
        self.observers = OBSERVER_IDS[:self.rng.choice([0, 1, 2])]
        self.nodes = {i: SimNode(i) for i in self.voters + self.observers}
        self.config = QuorumConfig(fetch_max_bytes=self.rng.choice(FETCH_MAX_BYTES),
                                   fetch_snapshot_max_bytes=SNAPSHOT_CHUNK_BYTES)
        self.history = History(self._clock)
        self.proposals = 0
        for sim_node in self.nodes.values():
            self._start(sim_node)

    # --- the run -------------------------------------------------------------------------------

    def run(self) -> None:
        faults = self.faults
        self._push(self.rng.randrange(50, 300), "client")
        self._push(self.rng.randrange(500, 2000), "snapshot")
        if faults.crash_every_ms:
            self._push(self.rng.randrange(faults.crash_every_ms * 2), "crash")
        if faults.partition_every_ms:
            self._push(self.rng.randrange(faults.partition_every_ms * 2), "partition")
        self._push(self.rng.randrange(2000, 8000), "resign")
        self._push(faults.chaos_ms, "heal_all")
        self._run_until(faults.chaos_ms)
        self._check_liveness()

    # --- events ---------------------------------------------------------------------------------

    def _on_deliver(self, message: RaftMessage) -> None:
        target = self.nodes.get(message.destination_id)
        if target is None or not target.up:
            return
        if (message.source_id, message.destination_id) in self.blocked:
            return
        if self.trace_lines is not None:
            self._trace(f"deliver {message.source_id}->{message.destination_id} "
                        f"#{message.correlation_id} {format_message(message.data, CLUSTER_ID)}")
        if isinstance(message.data, VoteRequest):
            self.history.saw_vote_request(message)
        self.stats[type(message.data).__name__] += 1
        target.raft.step(message)
        self._drain(target)

    def _on_tick(self, node_id: int, token: int) -> None:
        sim_node = self.nodes[node_id]
        if not sim_node.up or token != sim_node.tick_token:
            return
        sim_node.tick_at = None
        before = sim_node.raft.role
        sim_node.raft.tick()
        if sim_node.raft.role is not before:
            self.stats[f"tick {before.value}->{sim_node.raft.role.value}"] += 1
            self._trace(f"tick {node_id}: {before.value} -> {sim_node.raft!r}")
        self._drain(sim_node)

    def _on_client(self) -> None:
        leaders = [n for n in self.nodes.values() if n.up and n.raft.role is Role.LEADER]
        if leaders:
            target = self.rng.choice(leaders)
            payloads = []
            for _ in range(self.rng.randrange(1, 4)):
                self.proposals += 1
                payloads.append(b"p%d" % self.proposals)
            self._trace(f"propose {target.node_id} {payloads}")
            target.raft.propose(payloads)
            self._drain(target)
        if self.chaos:
            self._push(self.now + self.rng.randrange(30, 400), "client")

    def _on_snapshot(self) -> None:
        candidates = [n for n in self.nodes.values()
                      if n.up and n.applied > n.raft.log.start_offset + 2]
        if candidates:
            sim_node = self.rng.choice(candidates)
            raft = sim_node.raft
            data = bytes(sim_node.state)
            snapshot_id = raft.snapshot_created(sim_node.applied, data)
            # The application writes the snapshot file before it tells Raft about it.
            sim_node.disk.snapshot = Snapshot(snapshot_id, data)
            self._trace(f"snapshot {sim_node.node_id} {snapshot_id}")
            self._drain(sim_node)
        if self.chaos:
            self._push(self.now + self.rng.randrange(500, 3000), "snapshot")

    def _on_resign(self) -> None:
        """Graceful shutdown of a leader: resign, then stop a little later."""
        if not self.chaos:
            return
        leaders = [n for n in self.nodes.values() if n.up and n.raft.role is Role.LEADER]
        if leaders:
            sim_node = self.rng.choice(leaders)
            self._trace(f"resign {sim_node.node_id}")
            self.stats["resign"] += 1
            sim_node.raft.resign()
            self._drain(sim_node)
            self._push(self.now + self.rng.randrange(0, 300), "stop", sim_node.node_id,
                       sim_node.incarnation)
        self._push(self.now + self.rng.randrange(2000, 8000), "resign")

    def _on_stop(self, node_id: int, incarnation: int) -> None:
        sim_node = self.nodes[node_id]
        if self.chaos and sim_node.up and sim_node.incarnation == incarnation:
            self._crash(sim_node)

    def _on_crash(self) -> None:
        if not self.chaos:
            return
        up = [n for n in self.nodes.values() if n.up]
        leaders = [n for n in up if n.raft.role is Role.LEADER]
        if leaders and self.rng.random() < self.faults.leader_crash:
            self._crash(self.rng.choice(leaders))
        elif up:
            self._crash(self.rng.choice(up))
        if self.chaos:
            self._push(self.now + self.rng.randrange(self.faults.crash_every_ms * 2), "crash")

    def _on_restart(self, node_id: int) -> None:
        sim_node = self.nodes[node_id]
        if not sim_node.up:
            self._start(sim_node)

    def _on_partition(self) -> None:
        if not self.chaos:
            return
        self.blocked = self._cut_links(list(self.nodes))
        self._trace(f"partition {sorted(self.blocked)}")
        self._push(self.now + self.rng.randrange(200, 4000), "heal")
        if self.chaos:
            self._push(self.now + self.rng.randrange(self.faults.partition_every_ms * 2),
                       "partition")

    def _on_heal_all(self) -> None:
        self.chaos = False
        self.blocked = set()
        self._trace("heal all")
        for sim_node in self.nodes.values():
            if not sim_node.up:
                self._start(sim_node)

    # --- the network ----------------------------------------------------------------------------

    def _send(self, message: RaftMessage) -> None:
        for delay in self._transit(message.source_id, message.destination_id):
            self._push(self.now + delay, "deliver", message)

    # --- nodes: start, crash, drain -------------------------------------------------------------

    def _start(self, sim_node: SimNode) -> None:
        disk = sim_node.disk
        sim_node.incarnation += 1
        snapshot = disk.snapshot
        start = snapshot.snapshot_id.end_offset if snapshot else 0
        entries = [e for e in disk.entries if e.offset >= start]
        log = RaftLog(snapshot.snapshot_id if snapshot else None, entries)
        node_rng = random.Random(self.rng.getrandbits(64))
        sim_node.raft = RaftNode(sim_node.node_id, self.voters, cluster_id=CLUSTER_ID,
                                 clock=self._clock, rng=node_rng, config=self.config,
                                 quorum_state=disk.quorum_state, log=log, snapshot=snapshot)
        sim_node.max_epoch = 0
        sim_node.hw = sim_node.raft.high_watermark
        sim_node.applied = start
        sim_node.state = bytearray(snapshot.data) if snapshot else bytearray()
        sim_node.tick_at = None
        self._trace(f"start {sim_node.raft!r}")
        self._drain(sim_node)

    def _crash(self, sim_node: SimNode) -> None:
        self._trace(f"crash {sim_node.node_id}")
        sim_node.raft = None
        sim_node.tick_token += 1
        self._push(self.now + self.rng.randrange(100, 3000), "restart", sim_node.node_id)

    def _drain(self, sim_node: SimNode) -> None:
        raft = sim_node.raft
        for _ in range(MAX_READIES_PER_EVENT):
            if not raft.has_ready():
                break
            ready = raft.ready()
            if self.chaos and self.rng.random() < self.faults.torn_write:
                self.stats["torn write"] += 1
                self._persist(sim_node, ready, torn=True)
                self._crash(sim_node)
                return
            self._persist(sim_node, ready, torn=False)
            for message in ready.messages:
                self.history.check_sent(sim_node, message)
                self._send(message)
            self._apply(sim_node, ready)
            raft.advance(ready)
        else:
            self.history.fail(sim_node, f"still has a Ready after {MAX_READIES_PER_EVENT} "
                                        f"in a row")
        self.history.check_node(sim_node)
        deadline = raft.next_deadline_ms()
        if deadline is not None and deadline != sim_node.tick_at:
            sim_node.tick_token += 1
            sim_node.tick_at = deadline
            self._push(max(deadline, self.now), "tick", sim_node.node_id, sim_node.tick_token)

    def _persist(self, sim_node: SimNode, ready: Ready, torn: bool) -> None:
        """Carry out a Ready's durable steps in order; a torn write stops at a random one."""
        disk = sim_node.disk
        steps = 4 + len(ready.entries)
        stop_after = self.rng.randrange(steps) if torn else steps
        if stop_after <= 0:
            return
        if ready.snapshot is not None:
            self.stats["snapshot installed"] += 1
            self.history.check_snapshot(ready.snapshot)
            disk.snapshot = ready.snapshot
            disk.base = ready.snapshot.snapshot_id.end_offset
            disk.entries = []
        if stop_after <= 1:
            return
        if ready.quorum_state is not None:
            self.history.check_quorum_state_write(sim_node, ready.quorum_state)
            disk.quorum_state = ready.quorum_state
        if stop_after <= 2:
            return
        if ready.truncate_to is not None:
            self.stats["truncation"] += 1
            self.history.check_truncation(sim_node, ready.truncate_to)
            del disk.entries[max(0, ready.truncate_to - disk.base):]
        if stop_after <= 3:
            return
        entries = ready.entries[:stop_after - 3] if torn else ready.entries
        if entries:
            self.history.check_append(sim_node, entries)
            disk.entries.extend(entries)
        if not torn and ready.log_start_offset is not None:
            drop = ready.log_start_offset - disk.base
            if drop > 0:
                if disk.snapshot is None or \
                        disk.snapshot.snapshot_id.end_offset < ready.log_start_offset:
                    self.history.fail(sim_node, "log start moved past the durable snapshot")
                del disk.entries[:drop]
                disk.base = ready.log_start_offset

    def _apply(self, sim_node: SimNode, ready: Ready) -> None:
        if ready.snapshot is not None:
            sim_node.state = bytearray(ready.snapshot.data)
            sim_node.applied = ready.snapshot.snapshot_id.end_offset
        for entry in ready.committed_entries:
            if entry.offset != sim_node.applied:
                self.history.fail(sim_node, f"applied {entry.offset} after {sim_node.applied}")
            sim_node.applied += 1
            if not entry.control:
                sim_node.state += entry.payload + b";"

    # --- liveness -------------------------------------------------------------------------------

    def _check_liveness(self) -> None:
        """Healed, everyone up: a leader must be elected and commit a proposal everywhere."""
        healed_at = self.now
        marker: tuple[int, Entry] | None = None   # (its leader, the entry) proposed after healing

        def progressed() -> bool:
            nonlocal marker
            leaders = [n for n in self.nodes.values() if n.raft.role is Role.LEADER]
            if not leaders:
                return False
            current = max(leaders, key=lambda n: n.raft.epoch)
            if marker is None or marker[0] != current.node_id:
                self.proposals += 1
                payload = b"live%d" % self.proposals
                end = current.raft.propose([payload])
                marker = (current.node_id, Entry(end.offset - 1, end.epoch, payload))
                self._drain(current)
                return False
            entry = marker[1]
            committed = self.history.committed
            return (len(committed) > entry.offset and committed[entry.offset] == entry
                    and all(n.raft.high_watermark > entry.offset for n in self.nodes.values()))

        if self._settle(LIVENESS_BOUND_MS, 100, progressed):
            self.stats["liveness ms"] = max(self.stats["liveness ms"], self.now - healed_at)
            return
        states = ", ".join(repr(n.raft) for n in self.nodes.values())
        raise InvariantViolation(f"no progress within {LIVENESS_BOUND_MS} ms after healing at "
                                 f"t={healed_at}: {states}")


def run_seed(seed: int, trace: bool = False) -> Simulation:
    simulation = Simulation(seed, trace=trace)
    simulation.run()
    return simulation
