"""One source partition copied to one target partition: fetch, pass batches through, produce
with several requests in flight, record where each batch landed.

Theory of operation
-------------------
The copier takes its partition's records (read_committed) at its position from the fetcher of
the source partition's leader (mirror/fetcher.py: one Fetch for all of the link's partitions
on that broker), turns the answer into target batches without decoding records (mirror/batches.py) and hands
them to the target leader, one batch per Produce request, up to `max_in_flight` requests at
once on one connection. Requests on one connection are answered in order, and each carries
the mirror's idempotent producer id and the next sequences, so a retry after a lost answer
is written once (the target's idempotence), and a window of requests keeps a cross-region
link busy instead of paying one round trip per batch. The window is kept in order by the
target's sequence check, which binds only batches of one producer the target already knows:
so a batch goes out behind unanswered ones only if they are all of its producer and the
target has acknowledged that producer here before (`_may_follow`); otherwise it waits.

When a batch is acknowledged at downstream offset d, the copier reports an offset sync
(upstream base, d, extent) to its `on_synced` callback: the extent is the batch's offset count
when its upstream offsets are dense (so upstream base + k is downstream d + k throughout, and
translation is exact anywhere inside it), and 0 for a batch rebuilt with fewer records than
offsets (a compacted one), where it is not; those are counted as `inexact_batches`. After the
window drains at the end of a fetch it reports the end edge (next upstream offset, next
downstream offset, 0), so a caught-up group translates exactly even past a hole. Syncs are
reported in order and only for acknowledged batches: a recorded sync never claims data the
target lacks.

Positions. The copier starts at `start_offset` (where the latest recorded sync's run ends, or
the source's log start). After a crash, batches produced after the last recorded sync are produced again:
duplicates are bounded by what was in flight or not yet recorded, never a loss.

Stopping. `request_stop` is a graceful stop (SIGTERM): no new fetch goes out, what was
already fetched is sent, every answer is awaited, and the end edge is recorded, so a mirror
started again resumes exactly where this one got and copies nothing twice. The whole stop,
including a step already under way, has `drain_timeout_s`; only a crash or a stop that
outlives it leaves duplicates, within the bound above.

Tasks. The Produce requests in flight run in a task group that lives for one attempt (of
copying, or of handing over): when the attempt fails, leaving it cancels the requests still
in flight, and their batches are sent again, in order, by the next attempt.

Producers. On a DR pair's links (`keep_producers`) a batch an application's idempotent
producer wrote keeps that producer's id, epoch and sequence (mirror/batches.py), so the
target's producer state follows the application's and the gateway can move the producer
across a failover mid-sequence. The copier's own producer stamps every other batch.

Transactions. With a `relay` (a DR pair's links) a committed source transaction is copied as
a transaction: its batches keep the producer's fields and transactional bit, so the target
holds them open, and its COMMIT marker is forwarded. A marker goes out only once the gate
(mirror/txn_gate.py, through the link's TxnRelay) says the transaction is whole on the target:
once everything before it is acknowledged, it is parked outside the window, and the copy stops
at the next batch of the same producer (which must not join the open transaction) while
everything before that batch goes on. Released, the relay writes it. While a marker is parked the
offset syncs are held back (`_sync`), so that a copier started again resumes before the marker
and reaches it again; what it then sends again is answered as duplicates where it kept a
producer's sequences (core/broker/producer_state.py, `dr_copy`).

Failures. Transport errors and retriable answers (leadership moved, not enough replicas)
resend the unacknowledged batches in order with the same sequences after a backoff. If the
target forgot or fenced the producer (UNKNOWN_PRODUCER_ID, OUT_OF_ORDER_SEQUENCE_NUMBER,
INVALID_PRODUCER_EPOCH) a new producer id is taken and the unacknowledged batches are sent
under it from sequence 0 (they may then be duplicated, within the same bound). A source
position below the log start (retention upstream) restarts at the log start, counted.
"""
from __future__ import annotations

import json
import logging
import os
import time
from collections import deque
from itertools import islice
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import anyio
from anyio.abc import TaskGroup

from core.client import Admin, KafkaClient
from core.client.errors import KafkaConnectionError, KafkaError
from core.client.offsets import list_offsets
from core.protocol import messages as m
from core.protocol.errors import DecodeError, ErrorCode
from core.protocol.records import MAX_TIMESTAMP_AT, PRODUCER_ID_AT

from core.protocol.records import read_batch_header
from core.protocol.txn_markers import decode_marker_value, read_marker

from .batches import MirrorBatchError, prepare_for_target, restamp_producer
from .fetcher import Slot, SourceFetchers
from .txn_gate import TxnGate

log = logging.getLogger("mirror.copier")

PRODUCE = m.ApiKey.PRODUCE
INT32_MAX = 2**31 - 1
# How long a caught-up copier waits for records before it looks again (a source that stops
# answering shows in the lag after mirror/metrics.py SOURCE_SILENCE_S, which is longer).
IDLE_TAKE_S = 5.0
# A fault hook for the tests: "<source topic>-<partition>=<seconds>,..." makes those
# partitions' copiers pause that long before each step, so that the others' markers stay
# parked waiting for them (tests/integration/test_dr_transactions.py).
SLOW_ENV = "SEAWAY_MIRROR_SLOW_PARTITIONS"


def _slow_partitions() -> dict[str, float]:
    out = {}
    for item in filter(None, os.environ.get(SLOW_ENV, "").split(",")):
        name, _, seconds = item.partition("=")
        out[name.strip()] = float(seconds)
    return out
RESET_PRODUCER = {ErrorCode.UNKNOWN_PRODUCER_ID, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                  ErrorCode.INVALID_PRODUCER_EPOCH}
# A copied marker refused for good: the target has a newer state of that producer, the marker
# is not one it takes, or the topic is no longer this link's to write; sending it again
# cannot help.
MARKER_REFUSED = {ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                  ErrorCode.INVALID_RECORD, ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_TOPIC_EXCEPTION}


class TxnRelay:
    """A DR link's gate (mirror/txn_gate.py), the copiers that hold markers for it, and the
    writing of the markers it releases.

    A released transaction's markers are written here, all at once, each straight to its
    partition's leader, not through the copiers' windows: a copier may be backing off from a
    failing source just then (the source region going down is what this is for), and the
    markers must not wait for it. That is safe because a copier parks a marker only once
    everything before it in its partition is acknowledged, and sends nothing more of that
    producer until the marker is written (`marker_written`).

    Before a released transaction's markers are written, `decide` records durably on the
    target that the link has all of it (core/protocol/dr.py `txn_decisions_topic`): a link
    that dies between two of the markers, or a target sealed between them by a failover,
    leaves copies some marked and some open, and `dr failover` then commits the open ones
    the record names instead of aborting them."""

    def __init__(self, tg: TaskGroup | None = None,
                 decide: Callable[[list[tuple[bytes, bytes]]], Awaitable[None]] | None = None):
        self.gate = TxnGate()
        self._copiers: dict[tuple[str, int], "PartitionCopier"] = {}
        self._tg = tg
        self._decide = decide

    def join(self, copier: "PartitionCopier") -> None:
        self._copiers[copier.key] = copier
        self.gate.copy_topic(copier.source_topic)

    def leave(self, copier: "PartitionCopier") -> None:
        if self._copiers.get(copier.key) is copier:
            del self._copiers[copier.key]
            self.gate.forget(copier.key)

    def reach(self, copier: "PartitionCopier", producer_id: int, producer_epoch: int, shape) -> None:
        for release in self.gate.reach(copier.key, producer_id, producer_epoch, shape):
            held = []
            for key in release.partitions:
                holder = self._copiers.get(key)
                entry = holder._parked.get(producer_id) if holder is not None else None
                if holder is not None and entry is not None:
                    held.append((holder, entry))
            assert self._tg is not None
            self._tg.start_soon(self._release, held, release.key is not None)

    async def _release(self, held: list, gated: bool) -> None:
        if gated and self._decide is not None:
            records = [(f"{c.target_topic}:{c.partition}:{e.producer_id}".encode(),
                        json.dumps({"epoch": e.producer_epoch, "first_offset": e.txn_first_offset,
                                    "start_ms": e.start_ms}).encode()) for c, e in held]
            attempt = 0
            while True:
                try:
                    await self._decide(records)
                    break
                except (KafkaError, OSError) as exc:
                    attempt += 1
                    log.info("recording a copied transaction's decision: %s; again", exc)
                    await anyio.sleep(min(0.1 * 2 ** attempt, 2.0))
        async with anyio.create_task_group() as tg:
            for copier, entry in held:
                tg.start_soon(self._write, copier, entry)

    async def _write(self, copier: "PartitionCopier", entry: "_InFlight") -> None:
        """Until the marker is written, or refused for good."""
        attempt = 0
        while True:
            try:
                code = await copier.send_marker(entry)
            except (KafkaError, OSError) as exc:
                code, detail = ErrorCode.NETWORK_EXCEPTION, str(exc)
            else:
                detail = ErrorCode(code).name
            if code == ErrorCode.NONE or code in MARKER_REFUSED or copier.stopped.is_set():
                break
            attempt += 1
            if attempt % 10 == 1:
                log.info("%r: the marker of producer %d: %s; writing it again", copier, entry.producer_id, detail)
            copier.target.request_metadata_update()
            await anyio.sleep(min(copier.target.backoff_ms(attempt), 1000) / 1000)
        if code:
            log.warning("%r: the marker of producer %d at upstream %d was not written (%s)", copier,
                        entry.producer_id, entry.upstream_base, ErrorCode(code).name)
        await copier.marker_written(entry)


class ProducerIdentity:
    """The mirror's idempotent producer on the target cluster (one per link): renewed when a
    partition finds it fenced or forgotten."""

    def __init__(self, client: KafkaClient):
        self.client = client
        self.producer_id = -1
        self.epoch = -1
        self._lock = anyio.Lock()

    async def ensure(self, stale_id: int | None = None) -> tuple[int, int]:
        async with self._lock:
            if self.producer_id >= 0 and self.producer_id != stale_id:
                return self.producer_id, self.epoch
            attempt = 0
            while True:
                try:
                    node = await self.client.any_node()
                    r = await self.client.send(node, m.InitProducerIdRequest(
                        transactional_id=None, transaction_timeout_ms=INT32_MAX),
                        api_key=m.ApiKey.INIT_PRODUCER_ID)
                    if not r.error_code:
                        self.producer_id, self.epoch = r.producer_id, r.producer_epoch
                        return self.producer_id, self.epoch
                    error = KafkaError(r.error_code, "InitProducerId")
                except KafkaError as exc:
                    error = exc
                attempt += 1
                log.info("InitProducerId on the target failed (%s); retrying", error)
                await anyio.sleep(self.client.backoff_ms(attempt) / 1000)


@dataclass
class CopierStats:
    position: int = -1                # next upstream offset to fetch
    source_end: int = -1              # the source's high watermark at the last fetch
    records: int = 0
    bytes: int = 0
    batches: int = 0
    # The upstream offset below which the target has acknowledged everything (the oldest
    # unacknowledged batch's base, or `position` when nothing is in flight): lag counts from it.
    mirrored: int = -1
    last_batch_timestamp_ms: int = -1  # max timestamp of the last acknowledged batch
    last_source_answer_ms: int = -1    # wall clock of the last fetch the source answered
    # Wall clock since which the source has held records the target has not acknowledged
    # (-1: caught up). Lag in seconds counts from it (mirror/metrics.py).
    behind_since_ms: int = -1
    # (wall clock in s, ms from the batch's newest timestamp to the target's acknowledgement)
    latencies_ms: deque = field(default_factory=lambda: deque(maxlen=1024))
    errors: int = 0
    failing_since_ms: int = -1         # wall clock of the first failure since the last good step
    last_error: str = ""
    skipped_aborted: int = 0
    skipped_control: int = 0
    lost_to_retention: int = 0
    inexact_batches: int = 0          # forwarded without a run: translation inside them re-reads

    @property
    def lag(self) -> int:
        """Records on the source the target has not acknowledged (fetched or not)."""
        done = self.mirrored if self.mirrored >= 0 else self.position
        return max(0, self.source_end - done) if self.source_end >= 0 and done >= 0 else 0

    def observe(self, now_ms: int) -> None:
        """After the source end or the mirrored offset moved: start or stop the lag clock."""
        if self.lag == 0:
            self.behind_since_ms = -1
        elif self.behind_since_ms < 0:
            self.behind_since_ms = now_ms


class _Answer:
    """What a Produce request in flight gets: a response, or the error its send raised."""

    __slots__ = ("done", "response", "error", "at")

    def __init__(self):
        self.done = anyio.Event()
        self.response: Any = None
        self.error: BaseException | None = None
        self.at = 0.0       # wall clock when it came (the copier may look at it much later)

    async def get(self):
        await self.done.wait()
        if self.error is not None:
            raise self.error
        return self.response


@dataclass
class _InFlight:
    data: memoryview
    base_sequence: int
    upstream_base: int
    records: int
    max_timestamp: int
    extent: int = 0                   # its run: upstream offsets that keep their distance downstream
    sent: _Answer | None = None       # the batch's Produce request, once sent
    producer_id: int = -1             # as stamped in `data`
    transactional: bool = False       # of a copied source transaction (relay)
    marker: bool = False              # a copied COMMIT marker (relay): parked, written by the relay
    producer_epoch: int = -1          # a marker's: its transaction's producer epoch,
    start_ms: int = -1                # ... start (core/protocol/txn_markers.py),
    txn_first_offset: int = -1        # ... and where its copy begins in this partition (-1: none)

    def __post_init__(self):
        self.producer_id = _producer_id(self.data)


class PartitionCopier:
    def __init__(self, source: KafkaClient, target: KafkaClient, producer: ProducerIdentity, *,
                 source_topic: str, target_topic: str, partition: int, start_offset: int | None,
                 on_synced: Callable[[int, int, int], Awaitable[None] | None],
                 fetchers: SourceFetchers, max_in_flight: int = 5, fetch_max_wait_ms: int = 500,
                 produce_timeout_ms: int = 30_000, retry_backoff_ms: int = 200, drain_timeout_s: float = 8.0,
                 keep_producers: bool = False, relay: TxnRelay | None = None):
        if not 1 <= max_in_flight <= 5:
            raise ValueError("max_in_flight must be 1..5 (the target's idempotence tracks 5 batches)")
        self.source, self.target, self.producer = source, target, producer
        self.source_topic, self.target_topic, self.partition = source_topic, target_topic, partition
        self.on_synced = on_synced
        self.max_in_flight = max_in_flight
        self.fetchers, self.fetch_max_wait_ms = fetchers, fetch_max_wait_ms
        self.produce_timeout_ms, self.retry_backoff_ms = produce_timeout_ms, retry_backoff_ms
        self.stats = CopierStats(position=-1 if start_offset is None else start_offset)
        self.keep_producers = keep_producers
        self.relay = relay
        self.key = (source_topic, partition)
        self._slow_s = _slow_partitions().get(f"{source_topic}-{partition}", 0.0)
        self._parked: dict[int, _InFlight] = {}     # producer id -> its marker, until acknowledged
        # producer id -> where its open copied transaction begins here (None: not known)
        self._open_txn: dict[int, int | None] = {}
        self._released = anyio.Event()
        self._held_syncs: list[tuple[int, int, int]] = []
        self._sync_lock = anyio.Lock()
        self._pid, self._epoch, self._next_seq = -1, -1, 0
        self._window: deque[_InFlight] = deque()
        # Producer ids the target has acknowledged a batch of, in this partition (_may_follow).
        self._known_producers: set[int] = set()
        self._downstream_end: int | None = None     # target offset after the last acked batch
        self._last_sync: tuple[int, int, int] | None = None
        self._slot: Slot | None = None              # where this partition's fetcher answers
        self._idle = False                          # the last take had nothing: wait longer
        self._requests: TaskGroup | None = None     # the current attempt's Produce requests
        self.drain_timeout_s = drain_timeout_s
        self._stop_requested = anyio.Event()
        self._aborted = False
        self._lifetime: anyio.CancelScope | None = None
        self.stopped = anyio.Event()
        self.handed_over = False      # stopped with everything acknowledged and recorded

    def __repr__(self) -> str:
        return f"PartitionCopier({self.source_topic}-{self.partition} -> {self.target_topic})"

    # ------------------------------------------------------------------ the loop

    def request_stop(self) -> None:
        """Stop fetching and hand over, within `drain_timeout_s` from now: a step stuck on a
        cluster that does not answer is cut off there, and what it left unacknowledged may
        then be copied again after a restart, as after a crash."""
        self._stop_requested.set()
        if self._slot is not None:
            self._slot.interrupt()
        if self._lifetime is None:
            return
        if self._pid < 0:
            self._lifetime.cancel()       # nothing sent yet: nothing to hand over
        else:
            self._lifetime.deadline = min(self._lifetime.deadline, anyio.current_time() + self.drain_timeout_s)

    def abort(self) -> None:
        """Stop now, sending nothing more: the target copy is no longer this link's to write
        (its DR role changed). What was acknowledged is recorded; what was not is dropped, as
        a retry that lands after the role flips back would be a duplicate."""
        self._aborted = True
        self._stop_requested.set()
        if self._lifetime is not None:
            self._lifetime.cancel()

    async def run(self) -> None:
        if self.relay is not None:
            self.relay.join(self)
        try:
            with anyio.CancelScope() as self._lifetime:
                if self._stop_requested.is_set():
                    return
                await self._copy()
                await self._hand_over()
            if self._aborted:
                log.info("%r: stopped at once (%d batches unacknowledged, dropped)", self, len(self._window))
            elif self._lifetime.cancelled_caught and self._pid >= 0:
                log.warning("%r: not handed over within %.0fs (%d batches unacknowledged); a restart "
                            "may copy what followed its last recorded sync again", self,
                            self.drain_timeout_s, len(self._window))
        finally:
            if self.relay is not None:
                self.relay.leave(self)
            self.stopped.set()
            self._release_slot()

    async def _attempt(self, body: Callable[[], Awaitable[None]], errors: tuple) -> BaseException | None:
        """Run `body` with a task group for the Produce requests it sends, and return the
        error (of `errors`) it failed with, if any. Requests still in flight then are
        cancelled with the group; their batches are sent again by the next attempt."""
        error = None
        try:
            async with anyio.create_task_group() as self._requests:
                try:
                    await body()
                except errors as exc:
                    error = exc
                    self._requests.cancel_scope.cancel()
        finally:
            self._requests = None
        if error is not None:
            self._forget_sends()
        return error

    async def _hand_over(self) -> None:
        """Send what was fetched, await every answer, record the end edge."""
        attempt = 0
        while True:
            exc = await self._attempt(self._drain_and_record, (KafkaError, OSError))
            if exc is None:
                self.handed_over = True
                return
            attempt += 1
            log.info("%r: while stopping: %s; retrying", self, exc)
            self.target.request_metadata_update()
            await anyio.sleep(min(self.target.backoff_ms(attempt), 1000) / 1000)

    async def _drain_and_record(self) -> None:
        await self._drain_window()
        await self._record_end()

    async def _copy(self) -> None:
        self._pid, self._epoch = await self.producer.ensure()
        self._next_seq = 0
        attempt = 0

        async def steps() -> None:
            nonlocal attempt
            while not self._stop_requested.is_set():
                if self.stats.position < 0:
                    await self._start_at_log_start()
                await self._step()
                attempt = 0
                self.stats.failing_since_ms = -1

        while not self._stop_requested.is_set():
            # A corrupt source batch is never forwarded: it is retried (a replica with good
            # bytes may lead next) and counted until someone looks.
            exc = await self._attempt(steps, (KafkaError, OSError, MirrorBatchError))
            if exc is None:
                return      # stopped: the requests still in flight were answered meanwhile
            self._release_slot()
            attempt += 1
            self.stats.errors += 1
            self.stats.last_error = str(exc)
            if self.stats.failing_since_ms < 0:
                self.stats.failing_since_ms = int(time.time() * 1000)
            log.info("%r: %s; retrying", self, exc)
            self.source.request_metadata_update()
            self.target.request_metadata_update()
            with anyio.move_on_after(min(self.source.backoff_ms(attempt), 5000) / 1000):
                await self._stop_requested.wait()

    async def _step(self) -> None:
        if self._slow_s:
            await anyio.sleep(self._slow_s)
        if self._window and self._window[0].sent is None:
            await self._drain_window()        # what an error left unacknowledged goes first
        # The next fetch goes out while this one's batches are still being acknowledged: a
        # window of produce requests and a fetch overlap, so neither round trip is paid alone.
        answer = await self._fetch()
        if answer is None:
            await self._drain_window()
            await self._record_end()
            return
        records, aborted, lso = answer
        prepared = prepare_for_target(records, fetch_offset=self.stats.position, aborted=aborted,
                                      last_stable_offset=lso,
                                      producer=(self._pid, self._epoch, self._next_seq),
                                      keep_producers=self.keep_producers,
                                      copy_transactions=self.relay is not None)
        self.stats.skipped_aborted += prepared.skipped_aborted
        self.stats.skipped_control += prepared.skipped_control
        # The whole answer joins the window before anything is sent, with the position and
        # sequence moved past it: whatever fails later is resent from the window, never
        # fetched again under new sequences (which the target could not tell from new data).
        for batch, view in zip(prepared.batches, prepared.views()):
            self._window.append(_InFlight(view, batch.base_sequence, batch.upstream_base_offset,
                                          batch.records_count, _max_timestamp(view), extent=batch.run,
                                          transactional=batch.transactional, marker=batch.marker))
        self._next_seq = prepared.next_sequence
        self.stats.position = prepared.next_fetch_offset
        self._note_mirrored()
        if self._slot is not None:
            self._slot.ask(self.stats.position)     # the fetcher's next request fetches on from here
        await self._fill_window()

    async def _fill_window(self) -> None:
        """Send what is unsent, completing the oldest whenever max_in_flight are out or the
        next may not follow the ones in flight (_may_follow); returns with up to
        max_in_flight requests still in flight."""
        while True:
            unsent = [e for e in self._window if e.sent is None]
            if not unsent:
                return
            in_flight = len(self._window) - len(unsent)
            entry = unsent[0]
            parked = self._parked.get(entry.producer_id)
            if parked is not None and parked is not entry:
                # Its producer's marker is held: this batch begins the next transaction.
                if in_flight:
                    await self._complete_oldest()
                else:
                    await self._until_released()
                continue
            if entry.marker:
                if in_flight:
                    await self._complete_oldest()   # parked only with everything before it written
                else:
                    await self._park(entry)
                continue
            if in_flight >= self.max_in_flight or (in_flight and not self._may_follow(entry, in_flight)):
                await self._complete_oldest()
                continue
            await self._send(entry)
            # Answers that are already in are taken now: they carry the offset syncs.
            while self._window and self._window[0].sent is not None and self._window[0].sent.done.is_set():
                await self._complete_oldest()

    # ------------------------------------------------------------------ held markers

    async def _park(self, entry: _InFlight) -> None:
        """Take a copied COMMIT marker out of the window and tell the gate, which has the
        relay write it once the transaction is whole on the target (at once, if it is)."""
        assert self.relay is not None
        header = read_batch_header(entry.data)
        found = read_marker(entry.data, header)
        try:
            shape = decode_marker_value(found[1]).shape if found is not None else None
        except DecodeError:
            shape = None                # a marker the gate cannot name is released at once
        entry.producer_epoch = header.producer_epoch
        entry.start_ms = shape.start_ms if shape is not None else -1
        first = self._open_txn.pop(entry.producer_id, -1)
        entry.txn_first_offset = first if first is not None else await self._open_txn_start(entry.producer_id)
        self._window.remove(entry)
        self._parked[entry.producer_id] = entry
        self.relay.reach(self, entry.producer_id, entry.producer_epoch, shape)

    async def _open_txn_start(self, producer_id: int) -> int:
        """Where the producer's open transaction begins on the target, when this copier only
        got duplicates for its batches (a restart sent them again): DescribeProducers."""
        found = await Admin(self.target).describe_producers([(self.target_topic, self.partition)])
        producers = found.get((self.target_topic, self.partition))
        if isinstance(producers, KafkaError):
            raise producers
        start = next((p.current_transaction_start_offset for p in producers or ()
                      if p.producer_id == producer_id), None)
        return -1 if start is None else start

    async def send_marker(self, entry: _InFlight) -> int:
        """Write a released marker (for the relay): the partition's error code."""
        conn = await self._target_connection()
        response = await conn.send(self._produce_request(entry), api_key=PRODUCE,
                                   timeout_ms=self.produce_timeout_ms + self.target.request_timeout_ms)
        return response.responses[0].partition_responses[0].error_code

    def _produce_request(self, entry: _InFlight) -> m.ProduceRequest:
        """One batch to the target partition, acks=all (one batch per partition entry)."""
        return m.ProduceRequest(transactional_id=None, acks=-1, timeout_ms=self.produce_timeout_ms,
                                topic_data=[m.ProduceRequest.TopicProduceData(
                                    name=self.target_topic, partition_data=[
                                        m.ProduceRequest.PartitionProduceData(index=self.partition,
                                                                              records=entry.data)])])

    async def marker_written(self, entry: _InFlight) -> None:
        """The relay wrote (or gave up on) a parked marker: its producer may go on, and once
        no marker is parked the held syncs are recorded."""
        if self._parked.get(entry.producer_id) is entry:
            del self._parked[entry.producer_id]
        self._released.set()
        async with self._sync_lock:
            if not self._parked:
                while self._held_syncs:
                    await self._record(*self._held_syncs[0])
                    self._held_syncs.pop(0)

    async def _until_released(self) -> None:
        """Until some parked marker is written (the caller checked just before, with no await
        in between: the relay cannot slip in)."""
        self._released = anyio.Event()
        await self._released.wait()

    def _may_follow(self, entry: _InFlight, in_flight: int) -> bool:
        """May `entry` be sent while the batches before it are still unanswered?

        Only behind batches of its own producer id, and only once the target knows that id.
        The target's sequence check is what keeps pipelined batches in order: if the first
        in flight fails with a retriable error (a leader that moved, too few replicas) and
        the broker accepts the next, the next is refused as out of order, and both are sent
        again. That check holds only within one producer, and not for a producer the target
        has no state of, whose first batch may have any sequence (Kafka's rule too: retention
        may have removed its state). So a batch of another producer, or of one not yet
        acknowledged here, waits until everything before it is answered; otherwise it could
        be written ahead of a batch that is then retried, out of order, and a retry refused
        as out of order is sent again under a new producer id: written twice."""
        pid = entry.producer_id
        # The batches in flight are the window's oldest (sends keep its order).
        return pid in self._known_producers and all(
            e.producer_id == pid for e in islice(self._window, in_flight))

    async def _drain_window(self) -> None:
        while True:
            await self._fill_window()
            if not self._window:
                return
            await self._complete_oldest()

    # ------------------------------------------------------------------ source

    async def _fetch(self):
        """(records, aborted, last stable offset), or None when nothing new arrived within the
        long poll's time. The fetching itself is the source broker's fetcher's
        (mirror/fetcher.py): one request for every partition of the link it leads."""
        tp = (self.source_topic, self.partition)
        await self.source.ensure_topics([self.source_topic])
        leader = self.source.leader_for(*tp)
        if leader is None:
            self.source.request_metadata_update()
            raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"no leader for {tp}")
        slot = self._slot
        if slot is None or slot.fetcher.broker_id != leader:
            self._release_slot()
            slot = self._slot = self.fetchers.for_partition(leader, tp).slot(tp)
        slot.ask(self.stats.position)
        # Caught up, with the end edge recorded: nothing to do until records come (the
        # fetcher wakes the slot) or a stop does (request_stop interrupts it).
        answer = await slot.take(IDLE_TAKE_S if self._idle else self.fetch_max_wait_ms / 1000)
        self._idle = answer is None
        if slot.last_answer_ms >= 0:
            self.stats.last_source_answer_ms = slot.last_answer_ms
        if slot.source_end >= 0:
            self.stats.source_end = slot.source_end
            self._note_mirrored()
        if answer is None:
            return None
        if answer.error is not None:
            raise KafkaConnectionError(f"fetch {tp} from broker {leader}: {answer.error}")
        if answer.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            await self._reset_to_log_start(answer.log_start_offset)
            return None
        if answer.error_code:
            raise KafkaError(answer.error_code, f"fetch {tp} at {self.stats.position}")
        return answer.records, answer.aborted, answer.last_stable_offset

    async def _start_at_log_start(self) -> None:
        found = await list_offsets(self.source, {(self.source_topic, self.partition): "earliest"})
        answer = next(iter(found.values()))
        if isinstance(answer, KafkaError):
            raise answer
        self.stats.position = answer.offset

    def _release_slot(self) -> None:
        slot, self._slot = self._slot, None
        if slot is not None:
            slot.fetcher.release(slot.key)

    async def _reset_to_log_start(self, log_start: int) -> None:
        if log_start < 0:
            position = self.stats.position
            await self._start_at_log_start()
            log_start, self.stats.position = self.stats.position, position
        if log_start > self.stats.position:
            # Deleted upstream before it was copied: nothing can bring it back; say how much.
            self.stats.lost_to_retention += log_start - self.stats.position
            log.warning("%r: offsets %d..%d were deleted upstream before they were mirrored",
                        self, self.stats.position, log_start - 1)
        self.stats.position = log_start

    # ------------------------------------------------------------------ target

    async def _target_connection(self):
        await self.target.ensure_topics([self.target_topic])
        leader = self.target.leader_for(self.target_topic, self.partition)
        if leader is None:
            self.target.request_metadata_update()
            raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"no leader for {self.target_topic}-{self.partition}")
        return await self.target.connection(leader)

    async def _send(self, entry: _InFlight) -> None:
        conn = await self._target_connection()
        request = self._produce_request(entry)
        # Tasks run first in the order they were started, and send() writes the request before
        # it first yields, so sends keep the window's order.
        entry.sent = answer = _Answer()
        self._requests.start_soon(self._produce, conn, request, answer)
        await anyio.lowlevel.checkpoint()

    async def _produce(self, conn, request, answer: _Answer) -> None:
        try:
            answer.response = await conn.send(
                request, api_key=PRODUCE, timeout_ms=self.produce_timeout_ms + self.target.request_timeout_ms)
        except Exception as exc:     # raised when the window reaches this batch
            answer.error = exc
        except BaseException:        # cancelled with its attempt: the batch is sent again
            answer.error = KafkaConnectionError(f"{self!r}: produce request abandoned")
            raise
        finally:
            answer.at = time.time()
            answer.done.set()

    def _forget_sends(self) -> None:
        """After an error every unacknowledged batch is sent again, in order, same sequences
        (the requests in flight were cancelled with their attempt's task group)."""
        for entry in self._window:
            entry.sent = None

    async def _complete_oldest(self) -> None:
        entry = self._window[0]
        response = await entry.sent.get()
        part = response.responses[0].partition_responses[0]
        code = part.error_code
        if code == ErrorCode.NONE:
            self._window.popleft()
            self._known_producers.add(entry.producer_id)
            if entry.transactional:
                self._open_txn.setdefault(entry.producer_id, part.base_offset)
            await self._acknowledged(entry, part.base_offset, entry.sent.at)
            return
        if code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:      # written before; its offset is unknown
            self._window.popleft()
            self._downstream_end = None
            if entry.transactional:
                self._open_txn.setdefault(entry.producer_id, None)
            return
        if code in RESET_PRODUCER:
            await self._renew_producer()
        raise KafkaError(code, f"produce to {self.target_topic}-{self.partition}")



    async def _renew_producer(self) -> None:
        """Re-stamp what is unacknowledged with a new producer id, sequences from 0. A batch
        that kept its application producer's fields (keep_producers) and was refused by the
        target's state of that producer is re-stamped too: written under the mirror's
        producer, it is copied all the same (a batch copied before, re-sent beyond the
        target's 5-batch window after a restart, is then written twice, within the bound
        the module's notes give)."""
        self._pid, self._epoch = await self.producer.ensure(stale_id=self._pid)
        seq = 0
        for entry in self._window:
            if entry.marker:
                continue        # the source producer's marker, never the mirror's
            entry.transactional = False     # a plain copy from now on (restamp_producer)
            entry.data = memoryview(restamp_producer(entry.data, self._pid, self._epoch, seq))
            entry.producer_id = self._pid
            entry.base_sequence = seq
            seq += entry.records
        self._next_seq = seq

    async def _acknowledged(self, entry: _InFlight, downstream_base: int, acknowledged_at: float) -> None:
        stats = self.stats
        stats.records += entry.records
        stats.bytes += len(entry.data)
        stats.batches += 1
        # Latency ends when the target's answer came, not when the copier looked at it: a
        # caught-up copier completes its window only when its next take times out.
        if entry.max_timestamp >= 0:
            stats.last_batch_timestamp_ms = entry.max_timestamp
            stats.latencies_ms.append((acknowledged_at,
                                       max(0, int(acknowledged_at * 1000) - entry.max_timestamp)))
        self._note_mirrored(int(time.time() * 1000))
        self._downstream_end = downstream_base + entry.records
        if not entry.extent:
            stats.inexact_batches += 1
        await self._sync(entry.upstream_base, downstream_base, entry.extent)

    def _note_mirrored(self, now_ms: int | None = None) -> None:
        stats = self.stats
        stats.mirrored = self._window[0].upstream_base if self._window else stats.position
        stats.observe(int(time.time() * 1000) if now_ms is None else now_ms)

    async def _record_end(self) -> None:
        """The end edge: where the next upstream record will land downstream."""
        if self._downstream_end is not None and not self._window:
            await self._sync(self.stats.position, self._downstream_end, 0)

    async def _sync(self, upstream: int, downstream: int, extent: int) -> None:
        last = self._last_sync
        if last is not None and (last[0] + last[2], last[1] + last[2]) == (upstream, downstream) and not extent:
            return      # an end edge where the last run ends says nothing new
        if last == (upstream, downstream, extent):
            return
        async with self._sync_lock:
            if self._parked or self._held_syncs:
                # A restart must resume before the parked marker and reach it again.
                self._held_syncs.append((upstream, downstream, extent))
            else:
                await self._record(upstream, downstream, extent)
        self._last_sync = (upstream, downstream, extent)   # only once handed to the producer or held

    async def _record(self, upstream: int, downstream: int, extent: int) -> None:
        result = self.on_synced(upstream, downstream, extent)
        if result is not None:
            await result


def _producer_id(batch: memoryview) -> int:
    return int.from_bytes(batch[PRODUCER_ID_AT:PRODUCER_ID_AT + 8], "big", signed=True)


def _max_timestamp(batch: memoryview) -> int:
    end = MAX_TIMESTAMP_AT + 8
    return int.from_bytes(batch[MAX_TIMESTAMP_AT:end], "big", signed=True) if len(batch) >= end else -1
