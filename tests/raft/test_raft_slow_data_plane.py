"""A quorum whose nodes are slow, not broken: no election storm.

A node's Raft driver shares its process with the data plane. When that is busy the node steps
its messages and ticks late, in bursts: the network is fine, nobody crashed, every message
arrives, but a node goes quiet for a while and then handles everything at once. The seeded
simulation (simulation.py) models that as stalls: while a node is stalled, whatever is due for
it (deliveries, its tick) waits, in order, until the stall ends. Then:

- every node stalling often for less than the fetch timeout costs no election at all;
- one follower stalling for longer than the fetch and election timeouts costs no election
  either: when it wakes it asks for pre-votes (KIP-996), the others still hear from their
  leader and refuse, and it follows the leader again. Without pre-vote, each long stall would
  bump the epoch and depose a healthy leader: a storm driven by one slow node.

Invariants (invariants.py) are checked after every event, as in the chaos simulation, and the
run must still commit proposals.
"""
from __future__ import annotations

import pytest

from core.raft.roles import Role
from tests.raft.simulation import Faults, Simulation

RUN_MS = 60_000


class SlowSimulation(Simulation):
    def __init__(self, seed: int, slow: str):
        super().__init__(seed)
        self.faults = Faults(drop=0.0, duplicate=0.0, slow=0.0, crash_every_ms=0, torn_write=0.0,
                             partition_every_ms=0, leader_crash=0.0, chaos_ms=RUN_MS)
        self.slow = slow
        self.stalled_until: dict[int, int] = {}
        self.stalls = 0
        self.slow_node: int | None = None
        self.first_epoch: int | None = None
        self.epochs_seen: set[int] = set()

    def run(self) -> None:
        self._push(self.rng.randrange(50, 300), "client")
        self._push(500, "choose")
        self._run_until(RUN_MS)

    # --- stalls -------------------------------------------------------------------------------

    def _stalled(self, node_id: int) -> int | None:
        until = self.stalled_until.get(node_id)
        return until if until is not None and self.now < until else None

    def _on_deliver(self, message) -> None:
        until = self._stalled(message.destination_id)
        if until is not None:
            # Timers first: a node that wakes from a long stall finds its fetch timeout past
            # before it reads what arrived meanwhile (the case that tempts it to campaign).
            self._push(until + 1, "deliver", message)
            return
        super()._on_deliver(message)
        self._watch_epochs()

    def _on_tick(self, node_id: int, token: int) -> None:
        until = self._stalled(node_id)
        if until is not None:
            self._push(until, "tick", node_id, token)
            return
        super()._on_tick(node_id, token)
        self._watch_epochs()

    def _on_client(self) -> None:
        leaders = [n for n in self.nodes.values()
                   if n.up and n.raft.role is Role.LEADER and self._stalled(n.node_id) is None]
        if leaders:
            super()._on_client()
        else:
            self._push(self.now + self.rng.randrange(30, 400), "client")

    def _on_choose(self) -> None:
        """Once a leader is elected: start the stalls (on a follower, or on every node)."""
        leaders = [n for n in self.nodes.values() if n.up and n.raft.role is Role.LEADER]
        if not leaders:
            self._push(self.now + 200, "choose")
            return
        self.first_epoch = leaders[0].raft.epoch
        if self.slow == "follower":
            self.slow_node = self.rng.choice([i for i in self.voters if i != leaders[0].node_id])
            self._push(self.now + self.rng.randrange(500, 3000), "stall", self.slow_node)
        else:
            for node_id in self.voters:
                self._push(self.now + self.rng.randrange(100, 2000), "stall", node_id)

    def _on_stall(self, node_id: int) -> None:
        fetch_timeout = self.config.fetch_timeout_ms
        if self.slow == "follower":
            length = self.rng.randrange(fetch_timeout + 500, 3 * fetch_timeout)
            gap = self.rng.randrange(1000, 6000)
        else:
            length = self.rng.randrange(20, fetch_timeout * 2 // 5)
            gap = self.rng.randrange(200, 2000)
        self.stalled_until[node_id] = self.now + length
        self.stalls += 1
        self._push(self.now + length + gap, "stall", node_id)

    def _watch_epochs(self) -> None:
        for n in self.nodes.values():
            if n.up and n.raft.role is Role.LEADER:
                self.epochs_seen.add(n.raft.epoch)

    @property
    def elections_after_first(self) -> int:
        return len({e for e in self.epochs_seen if self.first_epoch is not None and e > self.first_epoch})


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("slow", ["follower", "everyone"])
def test_a_slow_data_plane_causes_no_election(seed: int, slow: str) -> None:
    sim = SlowSimulation(seed, slow)
    sim.run()
    assert sim.first_epoch is not None, "no leader was ever elected"
    assert sim.stalls >= 5, "the run did not stall anyone"
    assert sim.elections_after_first == 0, (
        f"seed {seed}: {sim.elections_after_first} elections after the first "
        f"({sorted(sim.epochs_seen)}), {sim.stalls} stalls, slow node {sim.slow_node}")
    assert sim.history.committed, "nothing was committed"
    if slow == "follower":
        assert sim.stats["tick Follower->Prospective"] >= 1, "the slow follower never asked for pre-votes"
