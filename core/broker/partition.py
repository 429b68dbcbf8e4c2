"""One partition of a topic on this node: its log, its high watermark, its fetch waiters.

All appends and reads run on the event loop; only fsync leaves it, in a worker thread, under
the partition's lock, so that a flush never races an append or a segment deletion.

Its `replica` (core/broker/replication's PartitionReplica, driven by replication/manager.py) owns
the high watermark, the leader epoch and who may append; appends, truncations and metadata
changes all go through the partition lock, so the log bytes and the replica's idea of them
change together. A partition gets its replica as soon as it is opened (metadata_sync.py), and
leads only when the metadata image makes its replica the leader.

Transactions: the producer state (producer_state.py) knows each producer's ongoing transaction
here; `append_marker` writes the commit or abort marker that ends one, and an abort's entry
goes to the log's aborted-transaction index (core/log/txn_index.py), which read_committed
fetches read (`aborted_transactions`). `last_stable_offset` is where those fetches stop, and
retention and compaction never pass it. Followers and restarts rebuild both from the batch
headers, reading each marker's type from its one control record.
"""
from __future__ import annotations

import asyncio
import logging
from functools import partial
import os
import uuid
from typing import Callable
from pathlib import Path

import anyio

from core.log import Log, LogConfig, LogCorrupted
from core.log.txn_index import AbortedTxn
from core.protocol.errors import ErrorCode
from core.log import cleaner
from core.log.checkpoint import TMP_SUFFIX, fsync_dir, write_unpublished
from core.protocol.records import BatchInfo, iter_batch_headers, scan_batches, set_partition_leader_epoch

from .producer_snapshots import delete_snapshots, latest_snapshot, snapshot_path
from .producer_state import AbortedTxnEntry, ProducerState, Verdict, read_end_txn_marker
from .transactions.markers import marker_batch
from core.protocol.txn_markers import TxnShape

log = logging.getLogger(__name__)


class DuplicateAppend:
    """A retried batch the log already holds: answered with its original offsets, and for
    acks=all only once the ISR has it (`replication`, awaited by wait_replicated)."""
    __slots__ = ("base_offset", "log_append_time", "replication")

    def __init__(self, base_offset: int, replication=None):
        self.base_offset = base_offset
        self.log_append_time = -1
        self.replication = replication


class Refused:
    """New records the topic's current role refuses (a DR replica or a fenced copy): `admit`
    said why. Only new appends: a retry of batches already in the log is answered as usual."""
    __slots__ = ("message",)

    def __init__(self, message: str):
        self.message = message


class Partition:
    def __init__(self, topic: str, index: int, log: Log, producers: ProducerState | None = None):
        self.topic = topic
        self.index = index
        self.log = log
        self.leader_epoch = 0
        self.is_leader = False   # the metadata image says, through the replica (replication/manager.py)
        self.producers = producers if producers is not None else ProducerState()
        self.own_producer_ids: range | None = None   # the cluster's own (producer_state.validate)
        self.snapshot_offset = -1  # log end offset of the latest producer snapshot written
        self._cuts = 0             # truncations so far: a snapshot begun before one is void
        self._waiters: set[asyncio.Event] = set()
        self._watchers: dict = {}   # fetch session -> its key for this partition
        # Called after each write (Broker._partition_written): the background jobs that flush
        # and snapshot look only at partitions written since, never at all of them.
        self.written: Callable[["Partition"], None] | None = None
        # asyncio's own lock: an uncontended one is taken without a trip through the event
        # loop (anyio's default makes one on every acquire) and without asking for the
        # current task (anyio's fast_acquire still does): 8.0, 1.7 and 0.3 us here, and a
        # transaction takes partition locks some 50 times. Waiters queue in order, and a
        # cancelled waiter (anyio's cancel scopes raise CancelledError too) leaves the queue.
        self._lock = asyncio.Lock()
        self.failure: str | None = None  # why the partition went offline, if it did
        self.replica = None     # PartitionReplica (replication/manager.py); None once stopped
        self.replicas = None    # its ReplicaManager

    @property
    def offline(self) -> bool:
        """After an I/O error the log can no longer be trusted in memory; Kafka takes the
        log directory offline. Requests get KAFKA_STORAGE_ERROR until a restart recovers it."""
        return self.failure is not None or self.log.failed

    def fail(self, exc: BaseException) -> None:
        if self.failure is None:
            self.failure = str(exc) or type(exc).__name__
            log.error("%r is offline after an I/O error: %s; fix the disk and restart the node to recover it",
                      self, self.failure)
        self.wake_waiters()

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.index})"

    @staticmethod
    def load_producer_state(plog: Log) -> tuple[ProducerState, int]:
        """Latest snapshot at or below the log end, then the batch headers after it (worker
        thread, at open). Snapshots above the end (recovery cut the log) are dropped.

        The aborted-transaction index is derived from the same replay: recovery discarded the
        index of every segment it rebuilt, so the snapshot must lie at or below
        `txn_index_complete_below`, and each abort marker met on the way is appended to the
        index again (an entry already there is ignored, txn_index.py)."""
        directory, end = plog.directory, plog.log_end_offset
        delete_snapshots(directory, above=end)
        found = latest_snapshot(directory, max_offset=min(end, plog.txn_index_complete_below))
        state, offset = (found[1], found[0]) if found else (ProducerState(), plog.log_start_offset)
        snapshot_offset = found[0] if found else -1
        offset = max(offset, plog.log_start_offset)
        while offset < end:
            data = plog.read(offset, 8 << 20, min_one_batch=True).data
            headers = [h for h in iter_batch_headers(data) if h.last_offset >= offset]
            if not headers:
                break
            for entry in state.replay_batches(headers, markers=partial(read_end_txn_marker, data)):
                plog.append_aborted_txn(_aborted(entry))
            offset = headers[-1].next_offset
        return state, snapshot_offset

    def check_leader_epoch(self, current_leader_epoch: int) -> ErrorCode:
        """KIP-320: a client that names an older epoch is fenced; a newer one means this
        replica has not heard of the new leader yet. -1 skips the check."""
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return ErrorCode.NONE
        if current_leader_epoch < self.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        return ErrorCode.UNKNOWN_LEADER_EPOCH

    @property
    def high_watermark(self) -> int:
        if self.replica is not None:
            return self.replica.high_watermark
        # Not (or no longer) a replica: nothing it holds is known to be committed.
        return self.log.log_start_offset

    @property
    def lock(self) -> asyncio.Lock:
        return self._lock

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    async def append(self, data, batches: list[BatchInfo], now_ms: int, *, acks: int = -1,
                     timeout_ms: int = 30_000, admit: Callable[[], str | None] | None = None,
                     verification_guard=None, require_verification: bool = False,
                     coordinator: bool = False, dr_copy: bool = False, strandable: bool = False):
        """Append validated client batches; returns once the flush policy is satisfied.

        Returns the log's AppendResult, or a Verdict when the idempotent-producer check refuses
        the batches or finds them already appended (a duplicate carries the original offset),
        or (with a replica) an ErrorCode the replica refused the append with. With a replica
        and acks=-1 the result may still wait for the ISR: `await wait_replicated(result)`.
        Check, append and state update happen under the lock, so no other append to this
        partition can slip between them. `admit` (the topic's DR role, read when the lock is
        held) may refuse new records: Refused; a duplicate is still answered as one, since
        its records were admitted when they were appended.

        Transactions: with `require_verification` (KIP-890) a transaction's first batch here
        needs the `verification_guard` the producer state handed out before the coordinator
        was asked, still in place; `coordinator` marks a group coordinator's transactional
        offset commit, which carries no sequence to check (Kafka's origin COORDINATOR);
        `dr_copy` a DR link's copy, whose batches copied before are duplicates
        (producer_state.py). A forward gap in the sequence of a producer from the DR partner
        is accepted only in a link's copy or with `strandable` (the topic was promoted by an
        unplanned failover, core/protocol/dr.py)."""
        async with self._lock:
            if self.offline:
                raise OSError(f"partition is offline: {self.failure}")
            if self.replica is None or not self.replica.is_leader:
                # Before the producer checks, as Kafka: a follower's sequence verdicts mean
                # nothing to the client, and OUT_OF_ORDER_SEQUENCE_NUMBER is fatal to it.
                return ErrorCode.NOT_LEADER_OR_FOLLOWER
            if coordinator:
                verdict = self._check_coordinator_batches(batches)
            else:
                verdict = self._check_producers(batches, verification_guard, require_verification, dr_copy,
                                                own_ids=self.own_producer_ids if dr_copy or strandable else None)
            if verdict is not None and verdict.is_duplicate:
                error, waiter = self.replicas.duplicate_as_leader(
                    self, verdict.base_offset, verdict.last_offset, acks, timeout_ms)
                if error:
                    return error
                return DuplicateAppend(verdict.base_offset, replication=waiter)
            refusal = admit() if admit is not None else None
            if refusal is not None:
                return Refused(refusal)
            if verdict is not None:
                return verdict
            count = sum(b.last_offset_delta + 1 for b in batches)
            replicated, waiter = self.replicas.append_as_leader(self, count, acks, timeout_ms)
            if replicated.error:
                return replicated.error
            set_partition_leader_epoch(data, batches, replicated.leader_epoch)
            try:
                result = self.log.append(data, batches, apply_flush_policy=False)
                self.replicas.appended(self, replicated, waiter, result)
                if self.log.flush_due():
                    await anyio.to_thread.run_sync(self.log.maybe_flush)
            except OSError as exc:
                self.fail(exc)
                raise
            offset = result.base_offset
            for b in batches:
                if b.producer_id >= 0:
                    self.producers.update(b, offset, timestamp_ms=now_ms)
                offset += b.last_offset_delta + 1
            self.note_written()
        self.wake_waiters()
        return result

    async def wait_replicated(self, result) -> ErrorCode:
        """acks=all: NONE once the ISR holds an append's records, else the error that ended the
        wait (NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT, NOT_LEADER_OR_FOLLOWER)."""
        waiter = getattr(result, "replication", None)
        if waiter is None:
            return ErrorCode.NONE
        if not waiter.done.is_set():   # an ISR of one is done as the append returns
            await waiter.done.wait()
        return waiter.error

    async def append_as_follower(self, data, batches: list[BatchInfo]) -> None:
        """Batches fetched from the leader, offsets and epochs as they are (caller holds the
        lock: replication/manager.py)."""
        self.log.append(data, batches, assign_offsets=False, apply_flush_policy=False)
        for entry in self.producers.replay_batches(batches, markers=lambda b: read_end_txn_marker(data, b)):
            self.log.append_aborted_txn(_aborted(entry))
        self.note_written()
        if self.log.flush_due():
            await anyio.to_thread.run_sync(self.log.maybe_flush)

    def truncated(self) -> None:
        """The log was cut (caller holds the lock): producer state above the cut is gone too,
        so rebuild it from the latest snapshot below the new end, as Kafka does."""
        self.producers, self.snapshot_offset = self.load_producer_state(self.log)
        self._cuts += 1
        self.note_written()
        self.wake_waiters()

    def note_written(self) -> None:
        if self.written is not None:
            self.written(self)

    def _check_producers(self, batches: list[BatchInfo], guard=None, require_verification: bool = False,
                         dr_copy: bool = False, own_ids: range | None = None) -> Verdict | None:
        """None to append; else the verdict to answer with (an error or a duplicate)."""
        idempotent = [b for b in batches if b.producer_id >= 0]
        if not idempotent:
            return None
        if len(batches) == 1:
            verdict = self.producers.validate(batches[0], own_ids, verification_guard=guard,
                                              require_verification=require_verification, dr_copy=dr_copy)
            return None if verdict.ok else verdict
        # Several batches in one request: each is checked against the state the ones before
        # it would leave, on a copy of just the producers concerned.
        staged = self.producers.stage({b.producer_id for b in idempotent})
        offset = self.log.log_end_offset
        for b in batches:
            verdict = staged.validate(b, own_ids, verification_guard=guard,
                                      require_verification=require_verification, dr_copy=dr_copy)
            if not verdict.ok:
                return verdict
            staged.update(b, offset)
            offset += b.last_offset_delta + 1
        return None

    def _check_coordinator_batches(self, batches: list[BatchInfo]) -> Verdict | None:
        """A group coordinator's transactional offset commit (origin COORDINATOR in Kafka):
        no sequence to check, but a producer fenced by a newer epoch is refused."""
        for b in batches:
            entry = self.producers.entry(b.producer_id) if b.producer_id >= 0 else None
            if entry is not None and b.producer_epoch < entry.epoch:
                return Verdict.error(ErrorCode.INVALID_PRODUCER_EPOCH,
                                     f"epoch {b.producer_epoch} is older than the producer's {entry.epoch}")
        return None

    async def append_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                            now_ms: int, *, timeout_ms: int = 30_000, shape: TxnShape | None = None,
                            copied: bytearray | None = None, admit: Callable[[], str | None] | None = None):
        """Append a transaction's commit or abort marker (WriteTxnMarkers) with acks=all: the
        log's AppendResult (await wait_replicated), or the ErrorCode that refused it.

        `copied` is a marker batch as another cluster wrote it, which a DR link copies into
        a replica (core/broker/handlers/produce.py); it is appended as it came, after the
        same checks, and `admit` (the topic's DR role, read under the lock) may refuse it
        (Refused)."""
        async with self._lock:
            if self.offline:
                raise OSError(f"partition is offline: {self.failure}")
            if self.replica is None or not self.replica.is_leader:
                return ErrorCode.NOT_LEADER_OR_FOLLOWER
            verdict = self.producers.validate_marker(producer_id, producer_epoch, coordinator_epoch)
            if not verdict.ok:
                return verdict.code
            refusal = admit() if admit is not None else None
            if refusal is not None:
                return Refused(refusal)
            data = copied if copied is not None else \
                marker_batch(producer_id, producer_epoch, coordinator_epoch, commit, now_ms, shape)
            batches = scan_batches(data)
            replicated, waiter = self.replicas.append_as_leader(self, 1, -1, timeout_ms)
            if replicated.error:
                return replicated.error
            set_partition_leader_epoch(data, batches, replicated.leader_epoch)
            try:
                result = self.log.append(data, batches, apply_flush_policy=False)
                self.replicas.appended(self, replicated, waiter, result)
                completed = self.producers.complete_txn(producer_id, producer_epoch, coordinator_epoch,
                                                        result.base_offset, commit, now_ms)
                entry = completed.aborted_entry() if completed is not None else None
                if entry is not None:
                    self.log.append_aborted_txn(_aborted(entry))
                if self.log.flush_due():
                    await anyio.to_thread.run_sync(self.log.maybe_flush)
            except OSError as exc:
                self.fail(exc)
                raise
            self.note_written()
        self.wake_waiters()
        return result

    @property
    def last_stable_offset(self) -> int:
        """Where read_committed consumers stop: the first offset of the earliest transaction
        not yet decided (or whose marker the ISR does not hold yet), at most the high
        watermark."""
        hw = self.high_watermark
        self.producers.on_high_watermark(hw)
        return self.producers.last_stable_offset(hw, self.log.log_start_offset)

    def aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions a read_committed fetch of [start, upper bound) must skip."""
        return self.log.collect_aborted_txns(start_offset, upper_bound_offset)

    async def compact(self, now_ms: int, dedupe_buffer_size: int):
        """One cleaner pass (cleanup.policy=compact): the long part reads and writes cleaned
        copies in a worker thread without the lock; only the swap takes it, and runs on the
        event loop, which owns the file descriptors that reads use."""
        # never past the last stable offset: an undecided transaction's records may yet be
        # aborted, and the cleaner must know which are before it compacts them
        bound = self.last_stable_offset
        plan = await anyio.to_thread.run_sync(
            lambda: cleaner.prepare(self.log, now_ms, dedupe_buffer_size=dedupe_buffer_size, upper_bound_offset=bound))
        async with self._lock:
            if self.offline:
                cleaner.abort(plan)
                return plan.result
            return cleaner.commit(plan)

    async def write_producer_snapshot(self) -> None:
        """Persist the producer state at the log end, so a restart replays only what follows.

        The file is written and fsynced without the partition's lock, which appends need:
        snapshotting a thousand busy partitions once a minute held each one's appends behind
        two fsyncs. Only the rename into place takes the lock, and only if the log was not cut
        (or closed) meanwhile: a snapshot above a truncation point would describe batches the
        log no longer has."""
        async with self._lock:
            offset = self.log.log_end_offset
            if offset == self.snapshot_offset or self.offline:
                return
            data = self.producers.snapshot_bytes()
            directory = self.log.directory
            previous = self.snapshot_offset
            cuts = self._cuts
        path = snapshot_path(directory, offset)
        tmp = path.with_name(path.name + TMP_SUFFIX)
        try:
            await anyio.to_thread.run_sync(write_unpublished, tmp, data)
        except OSError:
            if self.log.closed or self.offline:
                return   # deleted or failed meanwhile: nothing to snapshot
            raise
        async with self._lock:
            if self._cuts != cuts or self.log.closed or self.offline:
                await anyio.to_thread.run_sync(_unlink_quietly, tmp)
                return

            def publish():
                os.replace(tmp, path)
                if previous >= 0:
                    delete_snapshots(directory, below=previous)  # keep the last two

            await anyio.to_thread.run_sync(publish)
            self.snapshot_offset = offset
        # The rename's durability: a crash before this costs the newest snapshot, not correctness.
        await anyio.to_thread.run_sync(fsync_dir, directory)

    async def retire(self, suffix: str) -> Path:
        """Close the log and rename its directory aside (topic deletion); returns the new path."""
        async with self._lock:
            return await anyio.to_thread.run_sync(self._move_aside, suffix)

    def _move_aside(self, suffix: str) -> Path:
        directory = self.log.directory
        try:
            self.log.close()
        except Exception as exc:  # noqa: BLE001 — the files are going away regardless
            log.warning("%r: close before deletion failed: %s", self, exc)
        target = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}{suffix}")
        os.rename(directory, target)
        return target

    async def flush(self) -> None:
        async with self._lock:
            await anyio.to_thread.run_sync(self.log.maybe_flush)

    async def apply_retention(self) -> int:
        async with self._lock:
            if self.replica is None:
                return 0   # stopped: its files are about to go
            # Never past the high watermark: followers may still need what lies above it; and
            # never past the last stable offset: an open transaction keeps its records.
            deleted = self.log.apply_retention(high_watermark=min(self.replica.high_watermark,
                                                                  self.last_stable_offset))
            if deleted:
                self.producers.on_log_start_offset(self.log.log_start_offset)
                self.replicas.log_start_advanced(self)
            return deleted

    async def delete_records(self, before_offset: int) -> int:
        async with self._lock:
            start = self.log.delete_records(before_offset)
            self.producers.on_log_start_offset(start)
            self.note_written()
            if self.replica is not None:
                self.replicas.log_start_advanced(self)
            self.wake_waiters()   # the followers' parked fetches carry the new log start now
            return start

    def update_config(self, config: LogConfig) -> None:
        self.log.update_config(config)

    def read(self, offset: int, max_bytes: int, *, min_one_batch: bool = True, committed: bool = True,
             stable: bool = False):
        """Raises OffsetOutOfRange, or OSError (and the partition goes offline). Consumers
        read only committed records (below the high watermark), read_committed ones only
        below the last stable offset (`stable`); followers read to the end."""
        if self.offline:
            raise OSError(f"partition is offline: {self.failure}")
        limit = self.last_stable_offset if stable else self.high_watermark if committed else None
        try:
            return self.log.read(offset, max_bytes, max_offset=limit, min_one_batch=min_one_batch)
        except (OSError, LogCorrupted) as exc:
            self.fail(exc)
            raise OSError(str(exc)) from exc

    def add_waiter(self, event: asyncio.Event) -> None:
        self._waiters.add(event)

    def remove_waiter(self, event: asyncio.Event) -> None:
        self._waiters.discard(event)

    def watch(self, session, key) -> None:
        """A fetch session (fetch_session.py) holds this partition under `key`: tell it of every
        change, so that its rounds look only at partitions that changed."""
        self._watchers[session] = key

    def unwatch(self, session) -> None:
        self._watchers.pop(session, None)

    def wake_waiters(self) -> None:
        """Something a fetch may want changed: records, the high watermark, the log start,
        the leadership, or the partition went away."""
        for event in self._waiters:
            event.set()
        for session, key in self._watchers.items():
            session.mark_dirty(key)


def _aborted(entry: AbortedTxnEntry) -> AbortedTxn:
    return AbortedTxn(entry.producer_id, entry.first_offset, entry.last_offset, entry.last_stable_offset)


def _unlink_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
