"""Committed offsets of every group this node coordinates, in memory (pure, no I/O).

The driver (manager.py) changes this store only after the matching records are in
`__consumer_offsets`, so what the store says is what a restart will load back.

Expiry follows Kafka (KIP-211): the offsets of a group that has a protocol expire
`offsets.retention.minutes` after the group became Empty, all together; a group without a
protocol (its consumers assign partitions themselves) loses each offset that long after its
commit; a Stable "consumer" group loses the offsets of topics no member subscribes to any more,
counted from their commit. An offset committed with an explicit retention (OffsetCommit v2-4)
expires at that time instead, unless its topic is subscribed. Other live groups (rebalancing,
or not "consumer") keep everything.
"""
from __future__ import annotations

from typing import Iterable, Optional

from .storage import CommittedOffset

TopicPartition = tuple[str, int]


class OffsetStore:
    def __init__(self) -> None:
        self._groups: dict[str, dict[TopicPartition, CommittedOffset]] = {}

    def groups(self) -> list[str]:
        return list(self._groups)

    def has_offsets(self, group: str) -> bool:
        return bool(self._groups.get(group))

    def get(self, group: str, tp: TopicPartition) -> Optional[CommittedOffset]:
        return self._groups.get(group, {}).get(tp)

    def all(self, group: str) -> dict[TopicPartition, CommittedOffset]:
        return dict(self._groups.get(group, {}))

    def put(self, group: str, tp: TopicPartition, committed: CommittedOffset) -> None:
        self._groups.setdefault(group, {})[tp] = committed

    def remove(self, group: str, tps: Iterable[TopicPartition]) -> None:
        offsets = self._groups.get(group)
        if offsets is None:
            return
        for tp in tps:
            offsets.pop(tp, None)
        if not offsets:
            del self._groups[group]

    def remove_group(self, group: str) -> list[TopicPartition]:
        return list(self._groups.pop(group, {}))

    def remove_topic(self, topic: str) -> dict[str, list[TopicPartition]]:
        """A deleted topic takes its committed offsets with it (Kafka's onPartitionsDeleted)."""
        removed: dict[str, list[TopicPartition]] = {}
        for group in list(self._groups):
            gone = [tp for tp in self._groups[group] if tp[0] == topic]
            if gone:
                removed[group] = gone
                self.remove(group, gone)
        return removed

    def expired(self, group: str, now_ms: int, retention_ms: int, *, has_protocol: bool,
                is_empty: bool, empty_since_ms: int,
                subscribed: Optional[set[str]]) -> list[TopicPartition]:
        """The partitions whose offsets have expired. `subscribed` is what the members of a
        Stable "consumer" group subscribe to; None for any other live group, which then keeps
        every offset (Kafka's ClassicGroup.offsetExpirationCondition). Offsets of a subscribed
        topic never expire, not even at an explicit expire timestamp."""
        if has_protocol and is_empty:
            def base(c: CommittedOffset) -> int:
                return empty_since_ms if empty_since_ms >= 0 else c.commit_timestamp_ms
        elif not has_protocol or subscribed is not None:
            def base(c: CommittedOffset) -> int:
                return c.commit_timestamp_ms
        else:
            return []
        out = []
        for tp, c in self._groups.get(group, {}).items():
            if subscribed is not None and tp[0] in subscribed:
                continue
            if c.expire_timestamp_ms >= 0:
                if now_ms >= c.expire_timestamp_ms:
                    out.append(tp)
            elif now_ms - base(c) >= retention_ms:
                out.append(tp)
        return out
