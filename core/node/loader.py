"""MetadataLoader: the committed metadata log, applied to a MetadataImage.

Every KRaft node runs one, as the listener of its Raft driver (controllers as voters, brokers
as observers), like Kafka's MetadataLoader. It sees the log in order: a snapshot replaces the
image, committed entries apply one record at a time. Control entries (LeaderChange) carry no
metadata and are skipped. Publishers (the active controller, the broker's data plane) are told
after each batch of entries with the image before and after, so they can act on the difference.

Snapshots are the image written back out as records (image_records.py), in record batches
whose offsets start at 0: the snapshot id says where in the log they belong.

A record that does not decode or does not apply means the log is corrupt or was written by a
version that knows more than we do. Applying past it would serve a wrong image, so the loader
raises and the driver's loop (and the process) stops.
"""
from __future__ import annotations

import logging
from typing import Callable, Sequence

import anyio

from core.controller.image import MetadataImage
from core.protocol import messages as m
from core.protocol.metadata_records import decode_record, encode_record
from core.raft.entries import Entry
from core.raft.messages import LeaderIdAndEpoch
from core.raft.ready import Snapshot
from core.raft.wire import entries_to_records, records_to_entries

from .image_records import image_records

log = logging.getLogger(__name__)

Publisher = Callable[[MetadataImage, MetadataImage, int], None]   # (before, after, next offset)
LeaderListener = Callable[[LeaderIdAndEpoch], None]
# (records, offset of the last): one call per run of consecutive metadata records, and one
# with no records for each control entry, so offsets always line up.
RecordListener = Callable[[list, int], None]
SnapshotListener = Callable[[MetadataImage, int], None]          # (image, offset of its last record)


def snapshot_bytes(image: MetadataImage, epoch: int = 0) -> bytes:
    """A snapshot's content: the image as metadata records, in record batches."""
    return entries_to_records(Entry(i, epoch, encode_record(r)) for i, r in enumerate(image_records(image)))


def image_from_snapshot(data: bytes) -> MetadataImage:
    return MetadataImage.empty().apply_all(decode_record(e.payload) for e in records_to_entries(data)
                                           if not e.control)


class MetadataLoader:
    def __init__(self, *, keep_image: bool = True) -> None:
        # The controller's loader (on the raft thread) passes records to the controller, which
        # keeps its own state: it builds an image only for a snapshot's listeners.
        self.keep_image = keep_image
        self.image = MetadataImage.empty()
        self.next_offset = 0            # the offset after the last entry applied
        self.last_epoch = 0             # the epoch of that entry
        self.bytes_since_snapshot = 0
        # topic id -> offset of its TopicRecord, for topics created since this process loaded
        # its latest snapshot (a retried forwarded create asks: was it created after I sent it?)
        self.topic_created_at: dict[bytes, int] = {}
        self.leader = LeaderIdAndEpoch(-1, 0)
        self.publishers: list[Publisher] = []
        self.leader_listeners: list[LeaderListener] = []
        self.record_listeners: list[RecordListener] = []
        self.snapshot_listeners: list[SnapshotListener] = []
        self._progress = anyio.Event()

    # RaftListener

    def handle_snapshot(self, snapshot: Snapshot) -> None:
        before = self.image
        image = image_from_snapshot(snapshot.data)
        if self.keep_image:
            self.image = image
        self.next_offset = snapshot.snapshot_id.end_offset
        self.last_epoch = snapshot.snapshot_id.epoch
        self.bytes_since_snapshot = 0
        self.topic_created_at = {}
        if self.keep_image:
            log.info("loaded metadata snapshot up to offset %d (%d brokers, %d topics)",
                     self.next_offset, len(image.brokers), len(image.topics))
        for listener in self.snapshot_listeners:
            listener(image, self.next_offset - 1)
        self._publish(before)

    def handle_commit(self, entries: Sequence[Entry], high_watermark: int) -> None:
        before = self.image
        records: list = []
        run: list = []

        def flush_run(last_offset: int) -> None:
            if run:
                for listener in self.record_listeners:
                    listener(list(run), last_offset)
                records.extend(run)
                run.clear()

        for e in entries:
            if e.offset < self.next_offset:
                continue     # re-delivered after a restart below what a snapshot already holds
            if e.control:
                flush_run(e.offset - 1)
                for listener in self.record_listeners:
                    listener([], e.offset)
            else:
                record = decode_record(e.payload)
                run.append(record)
                self.bytes_since_snapshot += len(e.payload)
                message = record.message
                if isinstance(message, m.TopicRecord):
                    self.topic_created_at[message.topic_id] = e.offset
                elif isinstance(message, m.RemoveTopicRecord):
                    self.topic_created_at.pop(message.topic_id, None)
            self.next_offset = e.offset + 1
            self.last_epoch = e.epoch
        flush_run(self.next_offset - 1)
        if records and self.keep_image:
            self.image = self.image.apply_all(records)
        self._publish(before)

    def handle_leader_change(self, leader: LeaderIdAndEpoch) -> None:
        self.leader = leader
        for listener in self.leader_listeners:
            listener(leader)
        self._wake()

    # waiting

    def _publish(self, before: MetadataImage) -> None:
        for publish in self.publishers:
            publish(before, self.image, self.next_offset)
        self._wake()

    def _wake(self) -> None:
        self._progress.set()
        self._progress = anyio.Event()

    async def wait_for(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until predicate() holds after some commit or leader change; False on timeout."""
        with anyio.move_on_after(timeout_s):
            while not predicate():
                await self._progress.wait()
            return True
        return predicate()
