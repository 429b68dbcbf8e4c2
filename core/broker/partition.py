"""One partition of a topic on this node: its log, its high watermark, its fetch waiters.

All appends and reads run on the event loop; only fsync leaves it, in a worker thread, under
the partition's lock, so that a flush never races an append or a segment deletion.
"""
from __future__ import annotations

import anyio

from core.config.defs import LONG_MAX
from core.log import Log, LogConfig
from core.protocol.errors import ErrorCode
from core.protocol.records import BatchInfo


class Partition:
    def __init__(self, topic: str, index: int, log: Log):
        self.topic = topic
        self.index = index
        self.log = log
        self.leader_epoch = 0
        self._waiters: set[anyio.Event] = set()
        self._lock = anyio.Lock()

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.index})"

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
        # A single node is its own whole ISR, so everything appended is committed.
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def flush_policy_active(self) -> bool:
        cfg = self.log.config
        return cfg.flush_messages < LONG_MAX or cfg.flush_ms < LONG_MAX

    async def append(self, data, batches: list[BatchInfo]):
        """Append validated client batches; returns once the flush policy is satisfied."""
        async with self._lock:
            result = self.log.append(data, batches, apply_flush_policy=False)
            if self.log.flush_due():
                await anyio.to_thread.run_sync(self.log.maybe_flush)
        self.wake_waiters()
        return result

    async def flush(self) -> None:
        async with self._lock:
            await anyio.to_thread.run_sync(self.log.maybe_flush)

    async def apply_retention(self) -> int:
        async with self._lock:
            return self.log.apply_retention()

    async def delete_records(self, before_offset: int) -> int:
        async with self._lock:
            return self.log.delete_records(before_offset)

    def update_config(self, config: LogConfig) -> None:
        self.log.update_config(config)

    def read(self, offset: int, max_bytes: int, *, min_one_batch: bool = True):
        return self.log.read(offset, max_bytes, max_offset=self.high_watermark, min_one_batch=min_one_batch)

    def add_waiter(self, event: anyio.Event) -> None:
        self._waiters.add(event)

    def remove_waiter(self, event: anyio.Event) -> None:
        self._waiters.discard(event)

    def wake_waiters(self) -> None:
        for event in self._waiters:
            event.set()
