"""Fetch sessions (KIP-227), the broker's half: the session cache, with no I/O.

Theory of operation
===================

A fetcher that reads many partitions from one broker (a follower, a consumer, the mirror)
would otherwise name every partition in every Fetch, and the broker would look at every one of
them on every round, although almost all of them are idle. A fetch session lets both sides
remember the set instead. The request's (session_id, session_epoch) says what it is:

    session_id  epoch   meaning                                         answer's session_id
    0           -1      full request, no session                        0
    0           0       full request, open a session                    new id (0: cache full)
    X           0       close session X, full request, open a new one   new id (0: cache full)
    X           -1      close session X, full request, no session       0
    X           N > 0   incremental request in session X                X
                        (X unknown: FETCH_SESSION_ID_NOT_FOUND;
                         N not the epoch X expects: INVALID_FETCH_SESSION_EPOCH)

An incremental request names only the partitions whose fetch position (or other parameter)
changed, and `forgotten_topics_data` the ones to drop; every other partition of the session is
fetched with the parameters the session remembers. The answer names only the partitions with
something to say: records, an error, or a high watermark, last stable offset or log start
offset other than the one this session last told the fetcher. After a successful incremental
request the session expects epoch N + 1 (wrapping from 2^31-1 to 1).

What the broker saves is the work, not just the bytes: the session keeps a *dirty* set, the
partitions that may have something to say. A partition enters it when the request names it,
and when the broker signals a change on it (an append, a high watermark or log start move, a
truncation, a leadership or deletion change: Partition.wake_waiters). A partition whose last
answer carried records or an error stays dirty, because the fetcher may not move on (the
broker then answers from the remembered position, as Kafka does). Everything else leaves the
set once it was looked at. A round thus costs the partitions that changed, not the session's
size, and a parked fetch waits on one event for the whole session.

The cache (Kafka's FetchSessionCache) holds at most `max.incremental.fetch.session.cache.slots`
sessions. Opening a session first drops the sessions unused for
`min.incremental.fetch.session.eviction.ms` (Kafka keeps them until it needs the room; here a
session is told of every change to its partitions, so a dead fetcher's should not linger).
When it is still full a new session may evict one: first a session unused for
`min.incremental.fetch.session.eviction.ms` (the least recently used); else a follower's
session (privileged) evicts a consumer's, and a session evicts a smaller one of its own class.
Otherwise the fetcher is answered with session id 0 and goes on sending full requests.

Sessions are keyed by partition as the request version names them: (topic id, index) from v13,
(topic name, index) before. A session opened by names cannot be used by ids, or the reverse
(FETCH_SESSION_TOPIC_ID_ERROR).
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Hashable, Iterator

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
NO_SESSION = 0
MAX_EPOCH = 2**31 - 1

PartitionKey = tuple[Hashable, int]    # (topic id or topic name, partition index)


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= MAX_EPOCH else epoch + 1


@dataclass(slots=True)
class CachedPartition:
    """What the session remembers of one partition: the fetcher's parameters, and what the
    session's last answer told the fetcher (-1: nothing yet)."""
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int
    last_fetched_epoch: int
    log_start_offset: int
    sent_high_watermark: int = -1
    sent_log_start_offset: int = -1
    watched: object = None          # the broker's Partition this session is registered with


class FetchSession:
    def __init__(self, session_id: int, privileged: bool, by_id: bool, now_ms: int):
        self.id = session_id
        self.privileged = privileged
        self.by_id = by_id
        self.epoch = next_epoch(INITIAL_EPOCH)    # the epoch the next request must carry
        self.created_ms = now_ms
        self.last_used_ms = now_ms
        self.partitions: dict[PartitionKey, CachedPartition] = {}
        self.dirty: dict[PartitionKey, None] = {}
        # A follower's partitions where it is outside the ISR or not known to have the whole
        # log: each request counts as a fetch of them (as every Kafka fetch counts for every
        # partition of its session), so the leader learns its position and lets it join the
        # ISR, although it names nothing new. Unlike `dirty`, this does not keep a long poll
        # from waiting.
        self.recheck: dict[PartitionKey, None] = {}
        self._wakers: set[Callable[[], None]] = set()
        self.closed = False

    def __repr__(self) -> str:
        return (f"FetchSession({self.id} epoch={self.epoch} partitions={len(self.partitions)} "
                f"dirty={len(self.dirty)}{' privileged' if self.privileged else ''})")

    @property
    def size(self) -> int:
        return len(self.partitions)

    def mark_dirty(self, key: PartitionKey) -> None:
        """The broker says `key` changed: look at it in the next (or the parked) round."""
        if key in self.partitions:
            self.dirty[key] = None
            for wake in self._wakers:
                wake()

    def add_waker(self, wake: Callable[[], None]) -> None:
        self._wakers.add(wake)

    def remove_waker(self, wake: Callable[[], None]) -> None:
        self._wakers.discard(wake)

    def update(self, named: dict[PartitionKey, CachedPartition],
               forgotten: list[PartitionKey]) -> list[CachedPartition]:
        """Apply an incremental request: named partitions are added or take the new parameters
        (keeping what was sent); forgotten ones leave. Returns the entries that left, so the
        caller can stop watching their partitions."""
        for key, entry in named.items():
            old = self.partitions.get(key)
            if old is not None:
                old.fetch_offset = entry.fetch_offset
                old.partition_max_bytes = entry.partition_max_bytes
                old.current_leader_epoch = entry.current_leader_epoch
                old.last_fetched_epoch = entry.last_fetched_epoch
                old.log_start_offset = entry.log_start_offset
            else:
                self.partitions[key] = entry
            self.dirty[key] = None
        gone = []
        for key in forgotten:
            if key in named:
                continue   # named and forgotten at once: Kafka keeps the named one
            dropped = self.partitions.pop(key, None)
            self.dirty.pop(key, None)
            self.recheck.pop(key, None)
            if dropped is not None:
                gone.append(dropped)
        return gone

    def take_dirty(self) -> list[PartitionKey]:
        keys = list(self.dirty)
        self.dirty.clear()
        return keys

    def take_recheck(self) -> list[PartitionKey]:
        keys = [k for k in self.recheck if k in self.partitions]
        self.recheck.clear()
        return keys

    def entries(self) -> Iterator[tuple[PartitionKey, CachedPartition]]:
        return iter(self.partitions.items())


class FetchSessionCache:
    def __init__(self, max_slots: int = 1000, eviction_ms: int = 120_000,
                 rng: random.Random | None = None):
        self.max_slots = max_slots
        self.eviction_ms = eviction_ms
        self.sessions: dict[int, FetchSession] = {}
        self.evictions = 0
        self.expired: list[FetchSession] = []   # removed by the last maybe_create as unused
        self._rng = rng or random.Random()

    def __len__(self) -> int:
        return len(self.sessions)

    @property
    def partitions(self) -> int:
        return sum(s.size for s in self.sessions.values())

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def remove(self, session_id: int) -> FetchSession | None:
        session = self.sessions.pop(session_id, None)
        if session is not None:
            session.closed = True
        return session

    def maybe_create(self, privileged: bool, by_id: bool, size: int,
                     now_ms: int) -> tuple[FetchSession | None, FetchSession | None]:
        """A new session for a full request of `size` partitions, or None when the cache is
        full and nothing may be evicted for it; and the session evicted to make room."""
        if self.max_slots <= 0:
            return None, None
        self.expired = [s for s in self.sessions.values() if now_ms - s.last_used_ms > self.eviction_ms]
        for stale in self.expired:
            # A fetcher that went away never says so; its session would go on being told of
            # every change to its partitions. Sessions unused past the eviction time go now.
            self.remove(stale.id)
            self.evictions += 1
        evicted = None
        if len(self.sessions) >= self.max_slots:
            evicted = self._evictable(privileged, size)
            if evicted is None:
                return None, None
            self.remove(evicted.id)
            self.evictions += 1
        session_id = self._new_id()
        session = FetchSession(session_id, privileged, by_id, now_ms)
        self.sessions[session_id] = session
        return session, evicted

    def _evictable(self, privileged: bool, size: int) -> FetchSession | None:
        # Stale sessions are gone already (maybe_create drops them first).
        # (privileged, size, id): the new session evicts the smallest session it outranks.
        candidates = [s for s in self.sessions.values() if privileged or not s.privileged]
        if not candidates:
            return None
        smallest = min(candidates, key=lambda s: (s.privileged, s.size, s.id))
        if (privileged, size) > (smallest.privileged, smallest.size):
            return smallest
        return None

    def _new_id(self) -> int:
        while True:
            session_id = self._rng.randint(1, MAX_EPOCH)
            if session_id not in self.sessions:
                return session_id
