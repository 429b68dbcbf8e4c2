"""Fetch sessions (KIP-227), the fetcher's half, with no I/O: what the next Fetch names.

A fetcher says what it wants, partition by partition, as it learns it: `want(key, params)` when
a partition's fetch position (or any other parameter) is known or moves, `drop(key)` when it
stops fetching a partition. `build()` turns that into the next request: the first one is full
(epoch 0: every wanted partition, and the broker opens a session); after the broker answered
with a session id, each request is incremental and names only what changed since the previous
one, plus the partitions to forget. So a fetcher of thousands of idle partitions sends, and
looks at, almost nothing per round.

`build()` assumes the request will succeed and moves the changes into what the session holds.
If it fails (a session error, a lost connection), the next request is full again, naming
everything wanted, which replaces whatever the broker's session held:

    error                         next request
    FETCH_SESSION_ID_NOT_FOUND    full, session id 0, epoch 0 (open a new session)
    anything else, or no answer   full, same session id, epoch 0 (close it, open a new one)

A broker that answers a full request with session id 0 has no room (or no sessions): every
request stays full and asks again. Keys and parameters are opaque here; parameters are
compared with ==, so they should be tuples.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Hashable, TypeVar

from core.protocol.errors import ErrorCode

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
NO_SESSION = 0
MAX_EPOCH = 2**31 - 1

K = TypeVar("K", bound=Hashable)
P = TypeVar("P")


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= MAX_EPOCH else epoch + 1


@dataclass(frozen=True)
class FetchPlan(Generic[K, P]):
    session_id: int
    epoch: int
    partitions: dict[K, P]    # key -> params: every wanted partition (full) or the changed ones
    forgotten: list[K]        # keys the session is to drop (incremental requests only)

    @property
    def full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)


class FetchSessionHandler(Generic[K, P]):
    def __init__(self) -> None:
        self.session_id = NO_SESSION
        self.epoch = INITIAL_EPOCH
        self._held: dict = {}          # what the broker's session holds, once the last request is in
        self._changed: dict = {}       # to name in the next incremental request
        self._forgotten: set = set()   # to forget in the next incremental request

    def __repr__(self) -> str:
        return (f"FetchSessionHandler(session={self.session_id} epoch={self.epoch} held={len(self._held)} "
                f"changed={len(self._changed)} forgotten={len(self._forgotten)})")

    @property
    def in_session(self) -> bool:
        return self.session_id != NO_SESSION and self.epoch not in (INITIAL_EPOCH, FINAL_EPOCH)

    def want(self, key: K, params: P) -> None:
        self._forgotten.discard(key)
        if self._held.get(key, _MISSING) == params:
            self._changed.pop(key, None)
        else:
            self._changed[key] = params

    def drop(self, key: K) -> None:
        self._changed.pop(key, None)
        if key in self._held:
            self._forgotten.add(key)

    def holds(self, key: K, params: P) -> bool:
        """Does the broker's session already fetch `key` with exactly these parameters (as of
        the requests sent so far)?"""
        return key not in self._changed and key not in self._forgotten and \
            self._held.get(key, _MISSING) == params

    def wanted(self) -> dict:
        held = {k: v for k, v in self._held.items() if k not in self._forgotten}
        held.update(self._changed)
        return held

    def __contains__(self, key: K) -> bool:
        return key in self._changed or (key in self._held and key not in self._forgotten)

    def build(self, sessions: bool = True) -> FetchPlan[K, P]:
        """The next request. `sessions=False` (a broker older than Fetch v7): always full, no
        session."""
        if not sessions:
            self.session_id, self.epoch = NO_SESSION, FINAL_EPOCH
        plan: FetchPlan[K, P]
        if self.in_session:
            plan = FetchPlan(self.session_id, self.epoch, self._changed, sorted(self._forgotten, key=repr))
            self._held.update(self._changed)
            for key in self._forgotten:
                self._held.pop(key, None)
        else:
            epoch = INITIAL_EPOCH if sessions else FINAL_EPOCH
            plan = FetchPlan(self.session_id, epoch, self.wanted(), [])
            self._held = dict(plan.partitions)
        self._changed, self._forgotten = {}, set()
        return plan

    def handle_response(self, plan: FetchPlan, error_code: int, session_id: int) -> bool:
        """The answer's top-level error and session id: True if its partitions may be used."""
        if error_code == ErrorCode.NONE:
            if plan.full:
                self.session_id = session_id
                self.epoch = next_epoch(INITIAL_EPOCH) if session_id != NO_SESSION else plan.epoch
            else:
                self.epoch = next_epoch(plan.epoch)
            return True
        if error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
            self.session_id = NO_SESSION
        self.epoch = INITIAL_EPOCH if plan.epoch != FINAL_EPOCH else FINAL_EPOCH
        return False

    def handle_failure(self) -> None:
        """No answer (a lost connection, a timeout): start over with a full request that closes
        the session the broker may still hold."""
        if self.epoch != FINAL_EPOCH:
            self.epoch = INITIAL_EPOCH


SESSION_ERRORS = frozenset({ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH,
                            ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR})

_MISSING = object()
