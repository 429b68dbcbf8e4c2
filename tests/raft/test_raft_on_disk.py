"""Three RaftNodes on real storage (core/raft/storage.py over core/log), with messages passed
in memory and a virtual clock: an election, commits, a crashed node that restarts from its
files alone, and a whole-quorum restart that keeps every committed entry and never goes back
an epoch. This is the contract the anyio driver relies on: persist(ready), then send, then
advance — with the node rebuilt only from what storage.load() returns."""
from __future__ import annotations

import random
from collections import deque
from pathlib import Path

from core.raft.node import RaftNode
from core.raft.storage import RaftStorage

VOTERS = (1, 2, 3)
CLUSTER = "disk-test-cluster"


class Quorum:
    def __init__(self, root: Path, seed: int = 0):
        self.root = root
        self.now = 0
        self.rng = random.Random(seed)
        self.inbox: deque = deque()
        self.nodes: dict[int, RaftNode | None] = {}
        self.storage: dict[int, RaftStorage] = {}
        self.applied: dict[int, list[bytes]] = {n: [] for n in VOTERS}
        for node_id in VOTERS:
            self.start(node_id)

    def start(self, node_id: int) -> None:
        storage = RaftStorage.open(self.root / f"node-{node_id}", cluster_id=CLUSTER, voters=list(VOTERS))
        state, loaded = storage.load()
        self.storage[node_id] = storage
        self.nodes[node_id] = RaftNode(node_id, VOTERS, cluster_id=CLUSTER, clock=lambda: self.now,
                                       rng=random.Random(self.rng.getrandbits(32)), quorum_state=state,
                                       log=loaded.log, snapshot=loaded.snapshot)
        self.applied[node_id] = []
        self.drain(node_id)

    def crash(self, node_id: int) -> None:
        """Every Ready was persisted (fsynced) before its messages left, so dropping the
        process state loses nothing the others were told."""
        self.nodes[node_id] = None
        self.storage[node_id].close()
        self.inbox = deque(m for m in self.inbox if m.destination_id != node_id)

    def drain(self, node_id: int) -> None:
        node = self.nodes[node_id]
        while node.has_ready():
            ready = node.ready()
            self.storage[node_id].persist(ready)
            self.inbox.extend(ready.messages)
            self.applied[node_id].extend(e.payload for e in ready.committed_entries if not e.control)
            node.advance(ready)

    def run(self, ms: int, step_ms: int = 10) -> None:
        end = self.now + ms
        while self.now < end:
            while self.inbox:
                message = self.inbox.popleft()
                target = self.nodes.get(message.destination_id)
                if target is not None:
                    target.step(message)
                    self.drain(message.destination_id)
            self.now += step_ms
            for node_id, node in self.nodes.items():
                if node is not None:
                    deadline = node.next_deadline_ms()
                    if deadline is not None and deadline <= self.now:
                        node.tick()
                        self.drain(node_id)

    def leader(self) -> RaftNode | None:
        leaders = [n for n in self.nodes.values() if n is not None and n.is_leader]
        assert len(leaders) <= 1
        return leaders[0] if leaders else None

    def propose(self, payloads: list[bytes]) -> None:
        leader = self.leader()
        assert leader is not None, "no leader"
        leader.propose(payloads)
        self.drain(leader.node_id)

    def close(self) -> None:
        for node_id, node in self.nodes.items():
            if node is not None:
                self.storage[node_id].close()


def committed_payloads(node: RaftNode) -> list[bytes]:
    return [e.payload for e in node.log.slice(node.log.start_offset, node.high_watermark) if not e.control]


def test_a_quorum_on_disk_elects_commits_and_survives_restarts(tmp_path):
    q = Quorum(tmp_path)
    try:
        q.run(10_000)
        first = q.leader()
        assert first is not None, "no leader elected within 10 s of virtual time"
        q.propose([b"a", b"b", b"c"])
        q.run(2_000)
        for node in q.nodes.values():
            assert committed_payloads(node) == [b"a", b"b", b"c"]

        # the leader crashes; the others elect a new one in a later epoch and keep committing
        old_epoch = first.epoch
        q.crash(first.node_id)
        q.run(10_000)
        second = q.leader()
        assert second is not None and second.node_id != first.node_id and second.epoch > old_epoch
        q.propose([b"d"])
        q.run(2_000)

        # the crashed node restarts from its files alone and catches up
        q.start(first.node_id)
        q.run(5_000)
        for node in q.nodes.values():
            assert committed_payloads(node) == [b"a", b"b", b"c", b"d"]

        # the whole quorum stops and starts again: nothing committed is lost, no epoch goes back
        epochs = {n: node.epoch for n, node in q.nodes.items()}
        for node_id in VOTERS:
            q.crash(node_id)
        for node_id in VOTERS:
            q.start(node_id)
            assert q.nodes[node_id].epoch >= epochs[node_id]
            assert [e.payload for e in q.nodes[node_id].log.slice(0, q.nodes[node_id].log.end_offset)
                    if not e.control][:4] == [b"a", b"b", b"c", b"d"]
        q.run(10_000)
        third = q.leader()
        assert third is not None
        q.propose([b"e"])
        q.run(2_000)
        for node in q.nodes.values():
            assert committed_payloads(node) == [b"a", b"b", b"c", b"d", b"e"]
    finally:
        q.close()


def test_a_vote_on_disk_is_not_forgotten(tmp_path):
    """A voter that granted its vote in an epoch and restarts still has that vote and epoch:
    the quorum-state file is written before the vote leaves."""
    q = Quorum(tmp_path, seed=3)
    try:
        q.run(10_000)
        leader = q.leader()
        assert leader is not None
        voters = [n for n in VOTERS if n != leader.node_id]
        states = {n: q.storage[n].quorum_state.read() for n in voters}
        for n in voters:
            q.crash(n)
            q.start(n)
            assert q.nodes[n].epoch == states[n].leader_epoch == leader.epoch
        assert any(s.voted_id == leader.node_id or s.leader_id == leader.node_id for s in states.values())
    finally:
        q.close()
