"""When a DR link may commit a copied source transaction on its target (sans-IO).

Theory of operation
-------------------
A source transaction that wrote partitions p and q is committed by a marker in each. A link's
copiers work per partition, each at its own pace, so the copy of p may reach its marker long
before the copy of q reaches its own. A failover in between must not promote half of it.

So a DR link is to copy a source transaction as a transaction (its batches keep the producer's
id, epoch, sequences and transactional bit, and the target holds them open: read_committed
consumers there see none of it), and to hold each of its commit markers until the transaction
is *complete* on the target: every partition of the link that the transaction wrote has
reached its marker. Then the markers are released, all of them, and the copies write them.
This module decides when; the copiers hold (mirror/copier.py), the link's TxnRelay records
the decision on the target and writes the markers, and `dr failover` ends what is left open.

A marker says which transaction it ends and how many partitions of each topic that
transaction wrote (core/protocol/txn_markers.py), so the gate needs nothing but the markers:
a transaction (producer id, epoch, start) is complete once, for each topic the link copies,
as many of its partitions hold its marker as the marker counts. Topics the link does not copy
(`__consumer_offsets`, where the transaction's consumer offsets went, or a topic outside the
link's filter) are not waited for.

Holding must not block a partition: only the same producer's later batches wait behind a held
marker (they belong to its next transaction, which the target must not fold into the open
one); everything else goes on past it. Blocking the whole partition can deadlock, because the
coordinators of two transactions write their markers concurrently, in different orders in
different partitions:

    partition q:  ... X's marker ... W's marker ...
    partition r:  ... W's marker ... X's marker ...

Held per partition, q waits at X's marker for r to reach X's, and r waits at W's marker for q
to reach W's: neither ever does. Held per producer there is no cycle: a copier waits behind a
held marker of P only at P's next batch, which P wrote after its transaction completed; a
cycle would need each of two transactions to complete before the other. The same argument
holds for a copier that takes held markers out of its in-order window and stops the whole
partition at the held producer's next batch (everything before that batch is copied), which
keeps the copier's window in order. The simulation in tests/unit/test_mirror_txn_gate.py
checks the deadlock and its absence under both rules.

An ABORT marker is never held: the link copies only committed records (read_committed), so an
aborted transaction left nothing open on the target. A marker that does not name its
transaction (a source that is not Seaway, or a transaction that wrote so many topics that the
counts were left out) cannot be gated: it is released at once, as the link did before, and
counted (`ungated`).

The gate forgets a partition whose copier stops (`forget`): its held markers no longer count,
and a new copier reaches them again from its recorded position.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from core.protocol.txn_markers import TxnShape

TopicPartition = tuple[str, int]
TxnKey = tuple[int, int, int]       # producer id, producer epoch, start_ms


@dataclass(frozen=True)
class Release:
    """The markers of `key` may be written now, in all of `partitions`."""
    key: TxnKey | None              # None: an ungated marker
    partitions: frozenset[TopicPartition]


@dataclass
class _Pending:
    expected: dict[str, int]                                  # topic -> partitions to hold it
    held: set[TopicPartition] = field(default_factory=set)

    def complete(self) -> bool:
        counts: dict[str, int] = {}
        for topic, _ in self.held:
            counts[topic] = counts.get(topic, 0) + 1
        return all(counts.get(topic, 0) >= n for topic, n in self.expected.items())


class TxnGate:
    def __init__(self, copied_topics: Iterable[str] = ()):
        self.copied_topics: set[str] = set(copied_topics)
        self._pending: dict[TxnKey, _Pending] = {}
        self._held_by: dict[TopicPartition, dict[int, TxnKey]] = {}   # tp -> producer id -> its held marker
        self.released = 0
        self.ungated = 0

    def copy_topic(self, topic: str) -> None:
        """The link copies `topic` from now on (its copiers start)."""
        self.copied_topics.add(topic)

    def reach(self, tp: TopicPartition, producer_id: int, producer_epoch: int, shape: TxnShape | None
              ) -> list[Release]:
        """The copy of `tp` reached a COMMIT marker of this producer and holds it. Returns what
        may be written now: this transaction's markers if it is complete, or this marker alone
        if it cannot be gated."""
        if shape is None or shape.topics is None:
            self.ungated += 1
            return [Release(None, frozenset({tp}))]
        key = (producer_id, producer_epoch, shape.start_ms)
        held = self._held_by.setdefault(tp, {})
        if producer_id in held and held[producer_id] != key:
            raise ValueError(f"{tp} holds a marker of producer {producer_id} already ({held[producer_id]}); "
                             f"its next batch should have waited behind it")
        pending = self._pending.get(key)
        if pending is None:
            expected = {topic: n for topic, n in shape.topics if topic in self.copied_topics}
            pending = self._pending[key] = _Pending(expected)
        pending.held.add(tp)
        held[producer_id] = key
        return self._release_if_complete(key)

    def blocks(self, tp: TopicPartition, producer_id: int) -> bool:
        """Must a batch (data or marker) of `producer_id` in `tp` wait? Yes while `tp` holds
        an unreleased marker of that producer."""
        held = self._held_by.get(tp)
        return held is not None and producer_id in held

    def forget(self, tp: TopicPartition) -> None:
        """The copy of `tp` stopped: what it held no longer counts."""
        for key in self._held_by.pop(tp, {}).values():
            pending = self._pending.get(key)
            if pending is not None:
                pending.held.discard(tp)
                if not pending.held:
                    del self._pending[key]

    def waiting(self) -> dict[TxnKey, tuple[dict[str, int], frozenset[TopicPartition]]]:
        """Transactions held and not yet complete: what each expects per topic, and what
        holds it so far (for logs and metrics)."""
        return {key: (dict(p.expected), frozenset(p.held)) for key, p in self._pending.items()}

    def _release_if_complete(self, key: TxnKey) -> list[Release]:
        pending = self._pending[key]
        if not pending.complete():
            return []
        del self._pending[key]
        for tp in pending.held:
            del self._held_by[tp][key[0]]
        self.released += 1
        return [Release(key, frozenset(pending.held))]

