"""mirror/txn_gate.py: a DR link releases a copied source transaction's commit markers only
once every partition of the link that it wrote holds its marker, and holding never deadlocks.

Tables for the rules, then seeded simulations: producers run transactions over the partitions
of two topics (some also commit consumer offsets, so their markers name `__consumer_offsets`,
which the link does not copy), their coordinators write the markers in any order, and the
link's copiers go through the source logs at random paces, holding and releasing as the gate
says. After every step a read_committed reader of the target sees no transaction in part, no
aborted record, and no producer's next transaction folded into an open one; at the end every
committed transaction is on the target, whole. A copier that held markers per *partition*
instead deadlocks on markers written in different orders, which the per-producer rule avoids.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from core.protocol.txn_markers import TxnShape
from mirror.txn_gate import Release, TxnGate

A0, A1, A2, B0 = ("a", 0), ("a", 1), ("a", 2), ("b", 0)


def shape(start: int, **counts: int) -> TxnShape:
    return TxnShape(start, tuple(sorted(counts.items())))


# --------------------------------------------------------------------------- rules


def test_a_transaction_is_released_once_every_partition_of_the_link_it_wrote_holds_its_marker():
    gate = TxnGate({"a", "b"})
    s = shape(100, a=2, b=1, __consumer_offsets=1)      # its offsets went where the link never copies
    assert gate.reach(A0, 7, 0, s) == []
    assert gate.blocks(A0, 7) and not gate.blocks(A0, 8) and not gate.blocks(A1, 7)
    assert gate.reach(B0, 7, 0, s) == []
    assert gate.waiting() == {(7, 0, 100): ({"a": 2, "b": 1}, frozenset({A0, B0}))}
    assert gate.reach(A2, 7, 0, s) == [Release((7, 0, 100), frozenset({A0, A2, B0}))]
    assert not gate.blocks(A0, 7) and gate.waiting() == {} and gate.released == 1


def test_two_transactions_of_one_producer_are_told_apart_by_their_start():
    gate = TxnGate({"a"})
    assert gate.reach(A0, 7, 0, shape(100, a=2)) == []
    # The next transaction's marker in another partition: a different transaction, not A0's partner.
    assert gate.reach(A1, 7, 0, shape(101, a=1)) == [Release((7, 0, 101), frozenset({A1}))]
    assert gate.reach(A1, 7, 0, shape(100, a=2)) == [Release((7, 0, 100), frozenset({A0, A1}))]


@pytest.mark.parametrize("marker_shape", [None, TxnShape(100, None)], ids=["kafka-marker", "counts-left-out"])
def test_a_marker_that_cannot_be_gated_is_released_at_once_and_counted(marker_shape):
    gate = TxnGate({"a"})
    assert gate.reach(A0, 7, 0, marker_shape) == [Release(None, frozenset({A0}))]
    assert gate.ungated == 1 and not gate.blocks(A0, 7)


def test_a_topic_the_link_copies_later_is_counted_for_transactions_reached_after():
    gate = TxnGate({"a"})
    assert gate.reach(A0, 7, 0, shape(100, a=1, b=1)) == [Release((7, 0, 100), frozenset({A0}))]
    gate.copy_topic("b")
    assert gate.reach(A0, 7, 0, shape(101, a=1, b=1)) == []
    assert gate.reach(B0, 7, 0, shape(101, a=1, b=1)) == [Release((7, 0, 101), frozenset({A0, B0}))]


def test_a_stopped_copy_no_longer_counts_and_reaches_the_marker_again_when_it_restarts():
    gate = TxnGate({"a"})
    s = shape(100, a=2)
    gate.reach(A0, 7, 0, s)
    gate.forget(A0)
    assert not gate.blocks(A0, 7) and gate.waiting() == {}
    assert gate.reach(A1, 7, 0, s) == []
    assert gate.reach(A0, 7, 0, s) == [Release((7, 0, 100), frozenset({A0, A1}))]


def test_a_second_marker_of_a_producer_behind_a_held_one_is_a_copier_bug():
    gate = TxnGate({"a"})
    gate.reach(A0, 7, 0, shape(100, a=2))
    with pytest.raises(ValueError, match="should have waited"):
        gate.reach(A0, 7, 0, shape(101, a=2))


# --------------------------------------------------------------------------- simulation

LINK = {"a": 3, "b": 2}
OFFSETS = ("__consumer_offsets", 0)


@dataclass(frozen=True)
class Data:
    producer: int
    txn: int


@dataclass(frozen=True)
class Marker:
    producer: int
    txn: int
    commit: bool
    shape: TxnShape


@dataclass
class Txn:
    producer: int
    partitions: list
    commit: bool
    data_left: list = field(default_factory=list)
    markers_left: list = field(default_factory=list)


def source_logs(rng: random.Random, producers: int = 4, txns_each: int = 12) -> tuple[dict, dict]:
    """Partition logs as the source holds them once every transaction ended: (tp -> entries,
    txn id -> Txn). Producers interleave; each writes its transaction's data, then its
    coordinator writes the markers one partition at a time, interleaved with everyone else,
    and only then may the producer begin its next transaction (Kafka's rule)."""
    tps = [(t, p) for t, n in LINK.items() for p in range(n)]
    logs: dict = {tp: [] for tp in tps + [OFFSETS]}
    txns: dict[int, Txn] = {}
    current: dict[int, int | None] = dict.fromkeys(range(producers))
    left = dict.fromkeys(range(producers), txns_each)
    next_id = 0
    while any(left.values()) or any(v is not None for v in current.values()):
        producer = rng.choice([p for p in range(producers) if left[p] or current[p] is not None])
        tid = current[producer]
        if tid is None:
            chosen = rng.sample(tps, rng.randint(1, 4)) + ([OFFSETS] if rng.random() < 0.3 else [])
            txn = Txn(producer, chosen, rng.random() < 0.8)
            txn.data_left = [tp for tp in chosen if tp != OFFSETS for _ in range(rng.randint(1, 3))]
            rng.shuffle(txn.data_left)
            txns[next_id] = txn
            current[producer], next_id, left[producer] = next_id, next_id + 1, left[producer] - 1
            continue
        txn = txns[tid]
        if txn.data_left:
            logs[txn.data_left.pop()].append(Data(producer, tid))
            if not txn.data_left:
                counts: dict[str, int] = {}
                for t, _ in txn.partitions:
                    counts[t] = counts.get(t, 0) + 1
                txn.markers_left = rng.sample(txn.partitions, len(txn.partitions))
                txn.shape = TxnShape(1_000 + tid, tuple(sorted(counts.items())))     # type: ignore[attr-defined]
            continue
        tp = txn.markers_left.pop()
        logs[tp].append(Marker(producer, tid, txn.commit, txn.shape))             # type: ignore[attr-defined]
        if not txn.markers_left:
            current[producer] = None
    del logs[OFFSETS]
    return logs, txns


class Link:
    """The copiers of every partition of LINK and the gate between them, as mirror/copier.py
    is to drive it: read_committed (aborted data and ABORT markers skipped), a held marker's
    producer waits behind it. `hold`: "producer" lets every other producer's entries pass;
    "next-batch" stops the whole partition at the held producer's next entry (a copier that
    takes held markers out of its in-order window and keeps the rest in order); "partition"
    stops the whole partition at the held marker itself, the rule that deadlocks."""

    def __init__(self, logs: dict, hold: str = "producer"):
        self.logs, self.hold = logs, hold
        self.gate = TxnGate(LINK)
        self.cursor = dict.fromkeys(logs, 0)
        self.waiting: dict = {tp: [] for tp in logs}          # entries passed over, in order
        self.held: dict = {tp: {} for tp in logs}             # producer -> its held Marker
        self.target: dict = {tp: [] for tp in logs}

    def done(self) -> bool:
        return all(self.cursor[tp] == len(self.logs[tp]) and not self.waiting[tp] and not self.held[tp]
                   for tp in self.logs)

    def step(self, tp) -> bool:
        """Copy one entry of `tp` (one that waited first); False if nothing could move."""
        for i, entry in enumerate(self.waiting[tp]):
            if self._may_go(tp, entry, self.waiting[tp][:i]):
                del self.waiting[tp][i]
                self._copy(tp, entry)
                return True
        if self.cursor[tp] == len(self.logs[tp]):
            return False
        entry = self.logs[tp][self.cursor[tp]]
        self.cursor[tp] += 1
        if self._may_go(tp, entry, self.waiting[tp]):
            self._copy(tp, entry)
        else:
            self.waiting[tp].append(entry)
        return True

    def _may_go(self, tp, entry, before: list) -> bool:
        if self.hold == "partition":
            return not self.held[tp] and not before
        if self.hold == "next-batch":
            return not before and not self.gate.blocks(tp, entry.producer)
        return not self.gate.blocks(tp, entry.producer) and all(e.producer != entry.producer for e in before)

    def _copy(self, tp, entry) -> None:
        if isinstance(entry, Data):
            if self._committed(entry.txn):
                self.target[tp].append(entry)
            return
        if not entry.commit:
            return
        self.held[tp][entry.producer] = entry
        for release in self.gate.reach(tp, entry.producer, 0, entry.shape):
            if release.key is not None:
                # The moment a read_committed reader could first see it: all of it is there.
                wrote = [where for where in TXNS[entry.txn].partitions if where != OFFSETS]
                assert release.partitions == set(wrote), \
                    f"transaction {entry.txn} released in {sorted(release.partitions)} of {sorted(wrote)}"
            for where in release.partitions:
                marker = self.held[where].pop(entry.producer if release.key is None else release.key[0])
                self.target[where].append(marker)

    def _committed(self, tid: int) -> bool:
        return TXNS[tid].commit


TXNS: dict[int, Txn] = {}


def check_target(link: Link, txns: dict) -> None:
    """What a read_committed reader of the target could see never holds part of a transaction;
    nothing aborted is there; a producer's transactions never fold together."""
    written = {(tp, e.txn) for tp, log in link.target.items() for e in log if isinstance(e, Marker)}
    for tid, txn in txns.items():
        link_parts = [tp for tp in txn.partitions if tp != OFFSETS]
        marked = [tp for tp in link_parts if (tp, tid) in written]
        if not txn.commit:
            assert not any(isinstance(e, Data) and e.txn == tid for log in link.target.values() for e in log)
            continue
        if marked:
            assert sorted(marked) == sorted(link_parts), f"transaction {tid} committed in {marked} of {link_parts}"
            for tp in link_parts:
                at = [i for i, e in enumerate(link.target[tp]) if e.txn == tid]
                assert len(at) == 1 + sum(1 for e in link.logs[tp] if isinstance(e, Data) and e.txn == tid)
                assert isinstance(link.target[tp][at[-1]], Marker), f"{tp}: data of {tid} after its marker"
    for tp, log in link.target.items():
        open_txn: dict[int, int] = {}
        for e in log:
            if isinstance(e, Data):
                assert open_txn.setdefault(e.producer, e.txn) == e.txn, \
                    f"{tp}: transaction {e.txn} folded into {open_txn[e.producer]} (producer {e.producer})"
            else:
                open_txn.pop(e.producer, None)


@pytest.mark.parametrize("hold", ["producer", "next-batch"])
@pytest.mark.parametrize("seed", range(20))
def test_simulated_links_never_show_part_of_a_transaction_and_never_deadlock(seed, hold):
    rng = random.Random(seed)
    logs, txns = source_logs(rng)
    TXNS.clear()
    TXNS.update(txns)
    link = Link(logs, hold)
    paces = {tp: rng.random() for tp in logs}           # some partitions' copies are slow
    idle = 0
    while not link.done():
        tp = rng.choices(list(logs), weights=[paces[t] + 0.05 for t in logs])[0]
        idle = 0 if link.step(tp) else idle + 1
        if idle > 200 and not any(link.step(t) for t in logs):
            pytest.fail(f"deadlock with {link.gate.waiting()}")
    check_target(link, txns)
    committed = [tid for tid, t in txns.items() if t.commit]
    markers = {(tp, e.txn) for tp, log in link.target.items() for e in log if isinstance(e, Marker)}
    assert all((tp, tid) in markers for tid in committed for tp in txns[tid].partitions if tp != OFFSETS)
    assert link.gate.waiting() == {} and link.gate.released == len(committed)


def test_markers_written_in_different_orders_deadlock_a_per_partition_hold_but_not_a_per_producer_one():
    """The module's example: X (producer 1) and W (producer 2) both wrote a0 and a1; their
    coordinators wrote X's marker first in a0 and W's first in a1."""
    x, w = shape(10, a=2), shape(20, a=2)
    logs = {A0: [Data(1, 0), Data(2, 1), Marker(1, 0, True, x), Marker(2, 1, True, w)],
            A1: [Data(1, 0), Data(2, 1), Marker(2, 1, True, w), Marker(1, 0, True, x)]}
    TXNS.clear()
    TXNS.update({0: Txn(1, [A0, A1], True), 1: Txn(2, [A0, A1], True)})
    stuck = Link(logs, hold="partition")
    stuck.gate = TxnGate({"a"})
    while any(stuck.step(tp) for tp in logs):
        pass
    assert not stuck.done() and len(stuck.gate.waiting()) == 2
    link = Link(logs, hold="next-batch")
    link.gate = TxnGate({"a"})
    while any(link.step(tp) for tp in logs):
        check_target(link, TXNS)
    assert link.done() and link.gate.released == 2
