"""One Fetch in flight per source broker for all of a link's partitions it leads.

Theory of operation
-------------------
A copier (mirror/copier.py) needs its partition's next records; a source broker leads many
partitions. Fetching each partition on a connection of its own made every idle partition a
long poll of its own: 300 idle partitions were 600 requests a second, 7% of a core in the
mirror and 12% in the source broker, and a connection each (tests/benchmarks/README.md). Here a SourceFetcher per source
broker fetches all of its partitions in one request over one connection, in a fetch session
(KIP-227, core/client/fetch_session.py), as Kafka's consumer does: once the session holds
the partitions, a request names only those whose position moved, and an idle one costs one
long poll per `max_wait_ms` for the whole broker.

Each partition has a Slot, the meeting point of its copier and the fetcher:

    copier                              fetcher
    slot.ask(position)        ──►       the next request fetches the partition there
    answer = await slot.take()  ◄──     an answer with records or an error is put in the slot

- A slot holds up to two answers (DEPTH): the one its copier works on and the next, fetched
  ahead from where the first one's records end (`next_position`: past the last whole batch
  below the last stable offset, where the copier will ask next). So a partition is in every
  request while its copier keeps up, and a WAN round trip is not lost between answers.
- A full slot is left out of the requests (the session forgets it), so a copier that falls
  behind does not make the fetcher fetch what it cannot take; while any slot is full the
  long polls are short (`HELD_WAIT_MS`), so that it is fetched again soon after its copier
  takes. Nothing is fetched while the answers waiting in all slots add up to `max_bytes`.
- `ask` with a position other than the one fetched ahead starts a new *generation*: answers
  to requests built for the old position, in flight or waiting in the slot, are dropped.
- Answers without records (the partition was named, nothing new) only update the slot's
  high watermark; every answer the broker gives refreshes `last_answer_ms` of every slot the
  request covered: the source answered, whether or not it had news.
- A transport error, or an error of the whole request, is put in every covered slot, so their
  copiers retry (they then look up leaders again and may move to another fetcher). A
  partition's own error is put in its slot alone.

Lanes. One request in flight leaves the WAN idle for a round trip between an answer and the
next: across 80 ms of round trip, one 48 MiB answer every half second filled 1 Gbit/s to 63%
(tests/benchmarks/README.md). So a link has `per_broker` fetchers (lanes) per source broker,
each with its own connection and fetch session, and a partition always uses the same lane:
(crc32(topic) + partition) mod lanes, so a topic's partitions spread over the lanes in turn.
While one lane's answer crosses the WAN the others' requests are on their way, as MirrorMaker
2's tasks (`tasks.max`) each fetch with a consumer of their own. An idle lane costs one long
poll per `max_wait_ms`. The lanes of a link share one `Budget` of `max_bytes` fetched and not
yet taken, so the mirror holds no more with four lanes than with one.

Invariants: a slot's answers run back to back (each fetched where the one before it ends,
the first where its copier asked); a partition is in a request only if its slot has room and
a position; one request in flight per fetcher; the answers waiting in a link's slots stay within about
`max_bytes` plus one request's worth per lane; `Budget.used` is the sum of the record bytes in
the slots of the fetchers sharing it.
"""
from __future__ import annotations

import logging
import struct
import time
import zlib
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Hashable

import anyio
import anyio.lowlevel

from core.client import KafkaClient
from core.client.errors import KafkaConnectionError, KafkaError
from core.client.fetch_session import SESSION_ERRORS, FetchSessionHandler
from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.protocol.records import HEADER_SIZE, LAST_OFFSET_DELTA_AT, LENGTH_AT, LOG_OVERHEAD

log = logging.getLogger("mirror.fetcher")

FETCH = m.ApiKey.FETCH
READ_COMMITTED = 1
HELD_WAIT_MS = 20
DEPTH = 2         # answers a slot holds: the one its copier works on, and the next, fetched ahead
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
Key = tuple[str, int]


@dataclass
class Answer:
    fetch_offset: int
    next_position: int | None = None  # where the copier will ask next, as predicted from the records
    records: Any = None               # the partition's record bytes (whole or cut batches)
    aborted: list = field(default_factory=list)
    last_stable_offset: int = -1
    log_start_offset: int = -1
    error: BaseException | None = None
    error_code: int = 0               # the partition's own error, if any


class Budget:
    """Record bytes fetched and not yet taken, shared by the fetchers of one link. Past
    `limit` nothing more is fetched until copiers take some: what the mirror holds stays
    bounded however many partitions fall behind."""

    def __init__(self, limit: int):
        self.limit = limit
        self.used = 0
        self.fetchers: list["SourceFetcher"] = []

    @property
    def spent(self) -> bool:
        return self.used >= self.limit

    def add(self, nbytes: int) -> None:
        self.used += nbytes

    def give_back(self, nbytes: int) -> None:
        was_spent = self.spent
        self.used -= nbytes
        if was_spent and not self.spent:
            for fetcher in self.fetchers:   # any of them may be waiting for room
                fetcher.changed()


def _size(answer: "Answer") -> int:
    return len(answer.records) if answer.records is not None else 0


class Slot:
    def __init__(self, key: Key, fetcher: "SourceFetcher"):
        self.key = key
        self.fetcher = fetcher
        self.position = -1            # where the next request fetches (-1: not until asked)
        self.generation = 0
        self.answers: deque[Answer] = deque()
        self.source_end = -1          # the last stable offset (or high watermark) last seen
        self.last_answer_ms = -1
        self.interrupted = False
        self._arrived = anyio.Event()

    @property
    def wanted(self) -> bool:
        return self.position >= 0 and len(self.answers) < DEPTH

    @property
    def answer(self) -> Answer | None:
        return self.answers[0] if self.answers else None

    def ask(self, position: int) -> None:
        """The copier's next position. What was fetched ahead for it is kept; anything else
        (another position, or nothing) starts a new generation there."""
        head = self.answers[0].fetch_offset if self.answers else self.position
        if position != head:
            self.drop_answers()
            self.position = position
            self.generation += 1
        self.fetcher.changed()

    async def take(self, timeout_s: float) -> Answer | None:
        """The answer at the asked position, or None when none came within `timeout_s` (or
        `interrupt` cut the wait short)."""
        if not self.answers and not self.interrupted:
            self._arrived = anyio.Event()
            with anyio.move_on_after(timeout_s):
                await self._arrived.wait()
        if not self.answers:
            return None
        answer = self.answers.popleft()
        self.fetcher.budget.give_back(_size(answer))
        self.fetcher.changed()        # room again: fetch it in the next request
        return answer

    def drop_answers(self) -> None:
        self.fetcher.budget.give_back(sum(_size(a) for a in self.answers))
        self.answers.clear()

    def put(self, answer: Answer) -> None:
        self.answers.append(answer)
        self.fetcher.budget.add(_size(answer))
        if answer.error is not None or answer.error_code or answer.next_position is None:
            self.position = -1        # nothing to fetch ahead from: wait for the copier
        else:
            self.position = answer.next_position
        self._arrived.set()

    def interrupt(self) -> None:
        """End a `take` now, and every later one at once, with whatever the slot holds: its
        copier is stopping."""
        self.interrupted = True
        self._arrived.set()


def next_position(records, position: int, last_stable_offset: int) -> int | None:
    """Where a copier that took these records fetches next (mirror/batches.py
    prepare_for_target's next_fetch_offset): past the last whole batch below the last stable
    offset; None if there is none (a cut batch, or nothing below it)."""
    view = memoryview(records)
    end, pos, found = len(view), 0, None
    while end - pos >= HEADER_SIZE:
        length = _I32.unpack_from(view, pos + LENGTH_AT)[0]
        size = LOG_OVERHEAD + length
        if length < 0 or pos + size > end:
            break
        last = _I64.unpack_from(view, pos)[0] + _I32.unpack_from(view, pos + LAST_OFFSET_DELTA_AT)[0]
        if 0 <= last_stable_offset <= last:
            break
        found = max(position if found is None else found, last + 1)
        pos += size
    return found


class SourceFetcher:
    def __init__(self, client: KafkaClient, broker_id: int, *, max_wait_ms: int, partition_max_bytes: int,
                 max_bytes: int, budget: Budget | None = None, lane: int = 0):
        self.client = client
        self.broker_id = broker_id
        self.lane = lane
        self.max_wait_ms = max_wait_ms
        self.partition_max_bytes = partition_max_bytes
        self.max_bytes = max_bytes
        self.budget = budget if budget is not None else Budget(max_bytes)
        self.budget.fetchers.append(self)
        self.slots: dict[Key, Slot] = {}
        self.requests = 0
        self._session: FetchSessionHandler[Hashable, tuple[int, int]] = FetchSessionHandler()
        self._changed = anyio.Event()
        self._conn = None

    def __repr__(self) -> str:
        return f"SourceFetcher(broker {self.broker_id}, lane {self.lane}, {len(self.slots)} partitions)"

    def slot(self, key: Key) -> Slot:
        slot = self.slots.get(key)
        if slot is None:
            slot = self.slots[key] = Slot(key, self)
        return slot

    def release(self, key: Key) -> None:
        slot = self.slots.pop(key, None)
        if slot is not None:
            slot.drop_answers()
            self.changed()

    def changed(self) -> None:
        self._changed.set()

    async def run(self) -> None:
        attempt = 0
        try:
            while True:
                if self.budget.spent or not any(s.wanted for s in self.slots.values()):
                    self._changed = anyio.Event()
                    await self._changed.wait()
                    continue
                try:
                    await self._fetch_once()
                    attempt = 0
                except (KafkaError, OSError) as exc:
                    attempt += 1
                    await self._close()
                    self._session.handle_failure()
                    log.info("%r: %s; retrying", self, exc)
                    await anyio.sleep(min(self.client.backoff_ms(attempt), 5000) / 1000)
        finally:
            with anyio.CancelScope(shield=True):
                await self._close()

    async def _connection(self):
        conn = self._conn
        if conn is not None and conn.closed:
            conn = self._conn = None
            self._session = FetchSessionHandler()
        if conn is None:
            broker = self.client.cluster.brokers.get(self.broker_id)
            if broker is None:
                self.client.request_metadata_update()
                raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"broker {self.broker_id} unknown")
            conn = self._conn = await self.client.dedicated_connection(broker.host, broker.port, self.broker_id)
        return conn

    async def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()

    async def _fetch_once(self) -> None:
        covered: dict[Key, tuple[Slot, int, int]] = {}    # what this request asks: slot, generation, position
        try:
            conn = await self._connection()
        except (KafkaError, OSError) as exc:
            self._fail_wanted(exc)
            raise
        held = False
        for key, slot in self.slots.items():
            if slot.wanted:
                self._session.want(key, (slot.position, self.partition_max_bytes))
                covered[key] = (slot, slot.generation, slot.position)
            else:
                held |= len(slot.answers) >= DEPTH
                if key in self._session:
                    self._session.drop(key)
        for key in [k for k in self._session.wanted() if k not in self.slots]:
            self._session.drop(key)
        version = min(conn.version_for(FETCH), 12)      # by name (KIP-516 ids not needed)
        plan = self._session.build(sessions=version >= 7)
        R = m.FetchRequest
        topics: dict[str, list] = {}
        for (topic, partition), (position, max_bytes) in plan.partitions.items():
            topics.setdefault(topic, []).append(R.FetchPartition(
                partition=partition, current_leader_epoch=-1, fetch_offset=position, last_fetched_epoch=-1,
                log_start_offset=-1, partition_max_bytes=max_bytes))
        forgotten: dict[str, list[int]] = {}
        for topic, partition in plan.forgotten:
            forgotten.setdefault(topic, []).append(partition)
        max_wait = min(self.max_wait_ms, HELD_WAIT_MS) if held else self.max_wait_ms
        request = R(replica_id=-1, max_wait_ms=max_wait, min_bytes=1, max_bytes=self.max_bytes,
                    isolation_level=READ_COMMITTED, session_id=plan.session_id, session_epoch=plan.epoch,
                    topics=[R.FetchTopic(topic=t, partitions=ps) for t, ps in topics.items()],
                    forgotten_topics_data=[R.ForgottenTopic(topic=t, partitions=ps) for t, ps in forgotten.items()],
                    rack_id="")
        self._changed = anyio.Event()
        self.requests += 1
        try:
            response = await conn.send(request, api_key=FETCH, version=version,
                                       timeout_ms=self.client.request_timeout_ms + max_wait)
        except BaseException as exc:
            self._session.handle_failure()
            if isinstance(exc, (KafkaError, OSError)):
                self._fail(covered, exc)
            raise
        if not self._session.handle_response(plan, response.error_code, response.session_id):
            if response.error_code in SESSION_ERRORS:
                return          # the next request is full and opens a new session
            error = KafkaError(response.error_code, f"fetch from broker {self.broker_id}")
            self._fail(covered, error)
            raise error
        answered = False
        now_ms = int(time.time() * 1000)
        for slot, _, _ in covered.values():
            slot.last_answer_ms = now_ms
        for topic_data in response.responses:
            for p in topic_data.partitions:
                entry = covered.get((topic_data.topic, p.partition_index))
                if entry is None:
                    continue
                slot, generation, position = entry
                if slot.generation != generation or self.slots.get(slot.key) is not slot:
                    continue        # asked again elsewhere meanwhile: this answer is stale
                if p.error_code:
                    slot.put(Answer(position, error_code=p.error_code, log_start_offset=p.log_start_offset))
                    continue
                end = p.last_stable_offset if p.last_stable_offset >= 0 else p.high_watermark
                if end >= 0:
                    slot.source_end = end
                if p.records is not None and len(p.records):
                    slot.put(Answer(position, next_position(p.records, position, p.last_stable_offset), p.records,
                                    p.aborted_transactions or [], p.last_stable_offset, p.log_start_offset))
                    answered = True
        if answered:
            # The copiers just woken take their answers and ask for their next positions
            # without waiting on anything (mirror/copier.py _step); let them, so the next
            # request names those positions instead of leaving the partitions out of it.
            for _ in range(3):
                await anyio.lowlevel.checkpoint()

    def _fail_wanted(self, exc: BaseException) -> None:
        for slot in self.slots.values():
            if slot.wanted and not slot.answers:
                slot.put(Answer(slot.position, error=exc))

    def _fail(self, covered: dict[Key, tuple[Slot, int, int]], exc: BaseException) -> None:
        for slot, generation, position in covered.values():
            if slot.generation == generation and not slot.answers:
                slot.put(Answer(position, error=exc))


class SourceFetchers:
    """A link's fetchers, `per_broker` lanes per source broker, started on demand in the task
    group `run` holds; each ends with it. They share one Budget of `max_bytes`."""

    def __init__(self, client: KafkaClient, *, max_wait_ms: int, partition_max_bytes: int, max_bytes: int,
                 per_broker: int = 1):
        if per_broker < 1:
            raise ValueError(f"per_broker must be >= 1, got {per_broker!r}")
        self.client = client
        self.max_wait_ms = max_wait_ms
        self.partition_max_bytes = partition_max_bytes
        self.max_bytes = max_bytes
        self.per_broker = per_broker
        self.budget = Budget(max_bytes)
        self.by_lane: dict[tuple[int, int], SourceFetcher] = {}
        self._tg = None
        self._ready = anyio.Event()

    async def run(self, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            task_status.started()
            try:
                await anyio.sleep_forever()
            finally:
                self._tg = None

    def lane_of(self, key: Key) -> int:
        topic, partition = key
        return (zlib.crc32(topic.encode()) + partition) % self.per_broker

    def for_partition(self, broker_id: int, key: Key) -> SourceFetcher:
        """The fetcher that fetches `key` from its leader `broker_id`: always the same lane."""
        lane = self.lane_of(key)
        fetcher = self.by_lane.get((broker_id, lane))
        if fetcher is None:
            if self._tg is None:
                raise KafkaConnectionError("the link's fetchers are not running")
            fetcher = self.by_lane[(broker_id, lane)] = SourceFetcher(
                self.client, broker_id, max_wait_ms=self.max_wait_ms,
                partition_max_bytes=self.partition_max_bytes, max_bytes=self.max_bytes,
                budget=self.budget, lane=lane)
            self._tg.start_soon(fetcher.run, name=repr(fetcher))
        return fetcher

    @property
    def requests(self) -> int:
        return sum(f.requests for f in self.by_lane.values())
