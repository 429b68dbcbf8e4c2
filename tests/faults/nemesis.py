"""A seeded random nemesis for a KRaftCluster behind a FaultNet.

One fault at a time: inject, hold, undo, rest. So at most one node is dead, stopped or cut
off at any moment and a majority always remains, which is the failure model
`min.insync.replicas=2` of 3 promises to survive. The seed fixes the schedule (which fault,
which node, how long); the processes' timing is real, so a seed replays the schedule, not
the exact interleaving.
"""
from __future__ import annotations

import random
import threading
import time

from tests.support.cluster import KRaftCluster
from tests.support.faultnet import CLIENT
from tests.support.jepsen import History

KINDS = ("kill9", "sigstop", "isolate", "isolate-with-clients", "partition-link", "cut",
         "delay", "drop")


class Nemesis(threading.Thread):
    def __init__(self, cluster: KRaftCluster, history: History, seed: int, stop: threading.Event,
                 *, kinds=KINDS, hold=(1.0, 8.0), rest=(1.0, 3.0)):
        super().__init__(name="nemesis", daemon=True)
        if cluster.net is None:
            raise ValueError("the nemesis needs a cluster behind a FaultNet")
        unknown = set(kinds) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}; known: {KINDS}")
        self.cluster, self.net, self.history = cluster, cluster.net, history
        self.rng = random.Random(seed)
        self.stop_event = stop
        self.kinds, self.hold, self.rest = tuple(kinds), hold, rest
        self.errors: list[str] = []

    def run(self) -> None:
        while not self.stop_event.wait(self.rng.uniform(*self.rest)):
            kind = self.rng.choice(self.kinds)
            node = self.rng.choice(sorted(self.cluster.nodes))
            undo = self._inject(kind, node)
            self.stop_event.wait(self.rng.uniform(*self.hold))
            try:
                undo()
            except Exception as exc:   # a node that will not come back is a finding, not a crash
                self.errors.append(f"undo {kind} on node {node}: {exc}")
                self.history.fault(f"undo {kind} on node {node} FAILED: {exc}")

    def _inject(self, kind: str, node: int):
        c, net, rng = self.cluster, self.net, self.rng
        others = [n for n in sorted(c.nodes) if n != node]
        if kind == "kill9":
            c.kill9(node)
            self.history.fault(f"kill -9 node {node}")
            return lambda: self._restart(node)
        if kind == "sigstop":
            c.sigstop(node)
            self.history.fault(f"SIGSTOP node {node}")
            return lambda: self._undo(f"SIGCONT node {node}", c.sigcont, node)
        if kind in ("isolate", "isolate-with-clients"):
            clients = kind == "isolate-with-clients"
            net.isolate(node, clients=clients)
            self.history.fault(f"blackhole node {node} from the other nodes"
                               + (" and clients" if clients else ""))
        elif kind == "partition-link":
            peer = rng.choice(others)
            net.partition([node], [peer])
            self.history.fault(f"blackhole link {node}<->{peer}")
        elif kind == "cut":
            net.isolate(node, mode="cut")
            self.history.fault(f"cut node {node} from the other nodes")
        elif kind == "delay":
            ms = rng.choice((50, 200, 800))
            for peer in others + [CLIENT]:
                net.delay(node, peer, ms, jitter_ms=ms / 4)
            self.history.fault(f"delay node {node} {ms}ms")
        elif kind == "drop":
            p = rng.choice((0.02, 0.1, 0.3))
            for peer in others:
                net.drop(node, peer, p)
            self.history.fault(f"lossy links of node {node} (reset p={p})")
        return lambda: self._undo("heal", lambda _: net.heal_all(), node)

    def _undo(self, text: str, fn, node: int) -> None:
        fn(node)
        self.history.fault(text)

    def _restart(self, node: int) -> None:
        started = time.monotonic()
        self.cluster.nodes[node].start(timeout=60)
        self.history.fault(f"restarted node {node} ({time.monotonic() - started:.1f}s)")
