"""The durable side of a Raft node: the quorum-state file, the metadata log and its snapshots.

Everything lives in the metadata partition directory, Kafka's layout:

    <metadata.log.dir>/__cluster_metadata-0/
        quorum-state                                    QuorumStateStore (JSON, Kafka's format)
        00000000000000000000.log .index .timeindex      the Raft log, on core/log
        00000000000000000042-0000000003.checkpoint      snapshots: <end offset>-<epoch>

All calls do blocking I/O and fsync before returning; the driver runs them in a worker thread,
one at a time, in the order the Ready contract gives (see `RaftStorage.persist`).

Log format. Each run of entries with the same epoch (and the same control flag) becomes one
record batch: base offset = the first entry's offset, partition leader epoch = the epoch, one
record per entry whose value is the entry's payload. Control entries go in control batches
whose records carry Kafka's control key (version 0, type 2 = LEADER_CHANGE).

Crash safety. core/log recovery cuts a torn or corrupt tail at open, so `load` only sees
whole, CRC-checked batches. A snapshot is written to `<name>.part`, fsynced, renamed into
place, and the directory fsynced, so a snapshot file is complete or absent. Installing a
snapshot writes it before the log is emptied; `load` finishes an install a crash interrupted
(a snapshot beyond or disagreeing with the log empties the log and starts it there) and a log
start advance (the log start is raised to the latest snapshot's end). Anything that cannot be
explained by a crash (an epoch going back, a hole, entries below the start with no snapshot,
an unreadable quorum-state file) raises StorageCorrupt naming the file: guessing could forget
a vote or an epoch and elect two leaders.

Each entry is its own batch. core/log truncates whole batches, and a DivergingEpoch may end
anywhere inside a run of one epoch; with one entry per batch a truncation never has to drop
durable entries below its offset and write them again (a crash in between would lose them).
Metadata entries are few and small, so the 61 bytes of batch header each are cheap. A log
written with several records per batch (by an older build) is still truncated correctly, by
re-appending the kept part of the cut batch, without that guarantee.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from core.log import Log, LogConfig, now_ms
from core.log.checkpoint import fsync_dir, write_durably
from core.protocol.records import ATTR_CONTROL, BatchInfo, Record, decode_batch, scan_batches
from core.raft.entries import NO_LEADER, Entry, SnapshotId
from core.raft.log import RaftLog
from core.raft.ready import Ready, Snapshot
from core.raft.state import QuorumState
from core.raft.wire import entry_batch

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION_DIR = f"{METADATA_TOPIC}-0"
QUORUM_STATE_FILE = "quorum-state"          # Kafka's FileQuorumStateStore.DEFAULT_FILE_NAME
QUORUM_STATE_VERSION = 0                    # the data_version we write (Kafka reads 0 and 1)
SNAPSHOT_SUFFIX = ".checkpoint"             # Kafka's Snapshots.SUFFIX
PARTIAL_SUFFIX = SNAPSHOT_SUFFIX + ".part"  # Kafka's Snapshots.PARTIAL_SUFFIX
DELETED_SUFFIX = SNAPSHOT_SUFFIX + ".deleted"
RETAINED_SNAPSHOTS = 2                      # as RaftNode: a transfer under way can finish

_SNAPSHOT_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
_READ_CHUNK = 8 << 20


class StorageCorrupt(Exception):
    """A durable Raft file holds something a crash cannot explain; it names the file."""


def metadata_log_config() -> LogConfig:
    """Kafka's metadata log: never deleted by retention (only snapshots move its start)."""
    return LogConfig(retention_ms=-1, retention_bytes=-1, cleanup_policy=())


# ------------------------------------------------------------------------- quorum state


class QuorumStateStore:
    """Kafka's `quorum-state` file (FileQuorumStateStore): one line of QuorumStateData JSON
    plus `data_version`. Written as version 0 (clusterId, leaderId, leaderEpoch, votedId,
    appliedOffset, currentVoters); versions 0 and 1 are read."""

    def __init__(self, path: Path, cluster_id: str = "", voters: Sequence[int] | None = None):
        self.path = Path(path)
        self.cluster_id = cluster_id
        self.voters = None if voters is None else sorted(voters)

    def encode(self, state: QuorumState) -> bytes:
        data = {
            "clusterId": self.cluster_id,
            "leaderId": state.leader_id,
            "leaderEpoch": state.leader_epoch,
            "votedId": state.voted_id,
            "appliedOffset": 0,
            "currentVoters": (None if self.voters is None
                              else [{"voterId": v} for v in self.voters]),
            "data_version": QUORUM_STATE_VERSION,
        }
        return json.dumps(data, separators=(",", ":")).encode()

    def write(self, state: QuorumState) -> None:
        """Replace the file atomically and durably (temp file, fsync, rename, fsync dir)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_durably(self.path, self.encode(state))

    def read(self) -> QuorumState:
        """The last state written; a fresh QuorumState() if there is no file yet.

        A temp file a crash left behind is ignored (the rename never happened). Any damage
        raises StorageCorrupt: an epoch or a vote must never be silently forgotten.
        """
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return QuorumState()
        try:
            return self._decode(raw)
        except (ValueError, TypeError, KeyError) as exc:
            raise StorageCorrupt(f"cannot read the quorum state file {self.path}: {exc}") from exc

    @staticmethod
    def _decode(raw: bytes) -> QuorumState:
        lines = raw.decode("utf-8").splitlines()
        if not lines:
            raise ValueError("the file is empty")
        data = json.loads(lines[0])
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        version = data.get("data_version")
        if type(version) is not int or not 0 <= version <= 1:
            raise ValueError(f"data_version {version!r} is not 0 or 1")

        def int_field(name: str) -> int:
            value = data.get(name, -1)
            if type(value) is not int:
                raise ValueError(f"{name} {value!r} is not an integer")
            return value

        epoch = int_field("leaderEpoch")
        leader = int_field("leaderId")
        voted = int_field("votedId")
        if epoch < 0:
            # Kafka's default (-1) means no epoch yet; anything else negative is damage.
            if epoch != -1 or leader != NO_LEADER or voted != NO_LEADER:
                raise ValueError(f"leaderEpoch {epoch} is invalid")
            epoch = 0
        if leader < NO_LEADER or voted < NO_LEADER:
            raise ValueError(f"leaderId {leader} or votedId {voted} is invalid")
        return QuorumState(leader_epoch=epoch, leader_id=leader, voted_id=voted)


# ------------------------------------------------------------------------------ snapshots


def snapshot_file_name(snapshot_id: SnapshotId) -> str:
    """Kafka's Snapshots.filenameFromSnapshotId: 20-digit end offset, 10-digit epoch."""
    return f"{snapshot_id.end_offset:020d}-{snapshot_id.epoch:010d}{SNAPSHOT_SUFFIX}"


def parse_snapshot_file_name(name: str) -> SnapshotId | None:
    m = _SNAPSHOT_NAME.match(name)
    return None if m is None else SnapshotId(int(m[1]), int(m[2]))


# --------------------------------------------------------------------------- metadata log


@dataclass(frozen=True, slots=True)
class Loaded:
    log: RaftLog                # durable entries, starting at the latest snapshot's end
    snapshot: Snapshot | None   # the latest snapshot with its bytes (RaftNode's `snapshot`)


class MetadataLog:
    """The __cluster_metadata-0 partition: the Raft log on core/log plus snapshot files."""

    def __init__(self, log: Log):
        self._log = log
        self.directory = log.directory

    @classmethod
    def open(cls, directory: Path, config: LogConfig | None = None, *,
             clock: Callable[[], int] = now_ms) -> "MetadataLog":
        """Open (creating if needed) the partition directory; core/log recovers a torn tail."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        for path in directory.iterdir():   # what an interrupted snapshot write/delete left
            if path.name.endswith((PARTIAL_SUFFIX, DELETED_SUFFIX)):
                path.unlink(missing_ok=True)
        return cls(Log.open(directory, config or metadata_log_config(), clock=clock))

    @property
    def core_log(self) -> Log:
        return self._log

    @property
    def log_start_offset(self) -> int:
        return self._log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log.log_end_offset

    def close(self) -> None:
        self._log.close()

    # --- the log -------------------------------------------------------------------------------

    def append(self, entries: Sequence[Entry]) -> None:
        """Append entries (offsets must continue the log), one batch each, then fsync."""
        if not entries:
            return
        if entries[0].offset != self._log.log_end_offset:
            raise ValueError(f"append at {entries[0].offset} but the log ends at "
                             f"{self._log.log_end_offset}")
        ts = now_ms()
        data = bytearray()
        for i, entry in enumerate(entries):
            if i and entry.offset != entries[i - 1].offset + 1:
                raise ValueError(f"entries skip from {entries[i - 1].offset} to {entry.offset}")
            data += entry_batch([entry], ts)
        self._log.append(data, assign_offsets=False, apply_flush_policy=False)
        self._log.flush()

    def truncate_to(self, offset: int) -> None:
        """Drop every entry at `offset` and above (durable on return).

        Our batches hold one entry, so this is a plain truncation at a batch boundary. A batch
        of several records (a log from an older build) is dropped whole and its entries below
        `offset` are appended again."""
        log = self._log
        if offset >= log.log_end_offset:
            return
        kept: list[Entry] = []
        if offset > log.log_start_offset:
            data = bytes(log.read(offset, 1).data)
            info = scan_batches(data)[0]
            if info.base_offset < offset:
                kept = [e for e in self._decode(data, info) if e.offset < offset]
        log.truncate_to(kept[0].offset if kept else offset)
        if kept:
            self.append(kept)

    def advance_log_start(self, offset: int) -> None:
        """The entries below `offset` are in a snapshot: delete them, and old snapshots.

        The snapshot must already be written (write_snapshot): without it those entries
        would be lost."""
        latest = self.latest_snapshot()
        if latest is None or latest.end_offset < offset:
            raise ValueError(f"no snapshot covers the log up to {offset} (latest: {latest})")
        if offset > self._log.log_start_offset:
            self._log.delete_records(min(offset, self._log.log_end_offset))
        self.delete_old_snapshots()

    # --- snapshots -----------------------------------------------------------------------------

    def snapshot_path(self, snapshot_id: SnapshotId) -> Path:
        return self.directory / snapshot_file_name(snapshot_id)

    def write_snapshot(self, snapshot: Snapshot) -> None:
        """Write a snapshot file durably: `.part`, fsync, rename, fsync the directory."""
        path = self.snapshot_path(snapshot.snapshot_id)
        tmp = path.with_name(path.name + ".part")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(snapshot.data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        fsync_dir(self.directory)

    def snapshots(self) -> list[SnapshotId]:
        """Every complete snapshot present, oldest first."""
        found = (parse_snapshot_file_name(p.name) for p in self.directory.iterdir())
        return sorted(s for s in found if s is not None)

    def latest_snapshot(self) -> SnapshotId | None:
        snaps = self.snapshots()
        return snaps[-1] if snaps else None

    def read_snapshot(self, snapshot_id: SnapshotId) -> bytes:
        return self.snapshot_path(snapshot_id).read_bytes()

    def delete_old_snapshots(self, keep: int = RETAINED_SNAPSHOTS) -> list[SnapshotId]:
        """Delete all but the `keep` newest snapshots (rename to .deleted, then unlink, as
        Kafka does); return those deleted."""
        doomed = self.snapshots()[:-keep] if keep > 0 else self.snapshots()
        for snapshot_id in doomed:
            path = self.snapshot_path(snapshot_id)
            gone = path.with_name(path.name + ".deleted")
            path.replace(gone)
            gone.unlink(missing_ok=True)
        if doomed:
            fsync_dir(self.directory)
        return doomed

    def install_snapshot(self, snapshot: Snapshot) -> None:
        """A snapshot from the leader replaces the whole log (Ready.snapshot). The snapshot is
        durable before the log is emptied, so `load` can finish what a crash interrupts."""
        self.write_snapshot(snapshot)
        self._log.truncate_fully_and_start_at(snapshot.snapshot_id.end_offset)
        self.delete_old_snapshots()

    # --- load ----------------------------------------------------------------------------------

    def load(self) -> Loaded:
        """Read everything back: a RaftLog starting at the latest snapshot's end (all durable)
        and that snapshot with its bytes. Finishes an interrupted install or start advance."""
        snapshot_id = self.latest_snapshot()
        entries = self._read_entries()
        if snapshot_id is not None:
            end = snapshot_id.end_offset
            last_epoch = entries[-1].epoch if entries else None
            below = (entries[end - 1 - entries[0].offset]
                     if entries and entries[0].offset <= end - 1 < entries[-1].offset + 1
                     else None)
            if (end > self._log.log_end_offset
                    or (below is not None and below.epoch != snapshot_id.epoch)
                    or (last_epoch is not None and last_epoch < snapshot_id.epoch)):
                # An install that crashed before the log was replaced (Kafka's
                # truncateToLatestSnapshot does the same).
                self._log.truncate_fully_and_start_at(end)
                entries = []
            else:
                if self._log.log_start_offset < end:
                    self._log.delete_records(end)
                entries = [e for e in entries if e.offset >= end]
        elif self._log.log_start_offset > 0:
            raise StorageCorrupt(f"{self.directory}: the log starts at "
                                 f"{self._log.log_start_offset} but there is no snapshot")
        if entries and snapshot_id is not None and entries[0].epoch < snapshot_id.epoch:
            raise StorageCorrupt(f"{self.directory}: epoch {entries[0].epoch} at offset "
                                 f"{entries[0].offset} is below the snapshot's epoch "
                                 f"{snapshot_id.epoch}")
        snapshot = (None if snapshot_id is None
                    else Snapshot(snapshot_id, self.read_snapshot(snapshot_id)))
        return Loaded(RaftLog(snapshot_id, entries), snapshot)

    def _read_entries(self) -> list[Entry]:
        log = self._log
        offset, end = log.log_start_offset, log.log_end_offset
        entries: list[Entry] = []
        last_epoch = -1
        while offset < end:
            result = log.read(offset, _READ_CHUNK)
            if not result.data:
                raise StorageCorrupt(f"{self._file_of(offset)}: no batch holds offset {offset}")
            buf = bytes(result.data)
            for info in scan_batches(buf, verify_crc=True):
                where = self._file_of(info.base_offset)
                if info.partition_leader_epoch < last_epoch:
                    raise StorageCorrupt(
                        f"{where}: epoch {info.partition_leader_epoch} at offset "
                        f"{info.base_offset} goes back from epoch {last_epoch}")
                last_epoch = info.partition_leader_epoch
                for entry in self._decode(buf, info):
                    if entry.offset < log.log_start_offset:
                        continue   # a batch straddling the log start
                    expected = entries[-1].offset + 1 if entries else log.log_start_offset
                    if entry.offset != expected:
                        raise StorageCorrupt(f"{where}: offset {entry.offset} follows "
                                             f"{expected - 1}")
                    entries.append(entry)
            offset = result.next_offset
        return entries

    @staticmethod
    def _decode(buf: bytes, info: BatchInfo) -> list[Entry]:
        # Control records decode to ControlRecord (no value); read them as data records.
        plain = info._replace(attributes=info.attributes & ~ATTR_CONTROL)
        entries = []
        for r in decode_batch(buf, plain, verify_crc=False):
            assert isinstance(r, Record)   # the control bit is off in `plain`
            entries.append(Entry(r.offset, info.partition_leader_epoch, r.value or b"",
                                 info.is_control))
        return entries

    def _file_of(self, offset: int) -> Path:
        segs = self._log.segments
        for seg in reversed(segs):
            if seg.base_offset <= offset:
                return seg.path
        return segs[0].path


# ------------------------------------------------------------------------------- together


class RaftStorage:
    """The quorum state and the metadata log of one node, persisted in Ready order."""

    def __init__(self, quorum_state: QuorumStateStore, log: MetadataLog):
        self.quorum_state = quorum_state
        self.log = log

    @classmethod
    def open(cls, metadata_log_dir: Path, *, cluster_id: str = "",
             voters: Sequence[int] | None = None, config: LogConfig | None = None,
             clock: Callable[[], int] = now_ms) -> "RaftStorage":
        """Open `<metadata_log_dir>/__cluster_metadata-0`."""
        directory = Path(metadata_log_dir) / METADATA_PARTITION_DIR
        log = MetadataLog.open(directory, config, clock=clock)
        return cls(QuorumStateStore(directory / QUORUM_STATE_FILE, cluster_id, voters), log)

    def load(self) -> tuple[QuorumState, Loaded]:
        return self.quorum_state.read(), self.log.load()

    def persist(self, ready: Ready) -> None:
        """Steps 1-4 of the Ready contract, in order; durable on return."""
        if ready.snapshot is not None:
            self.log.install_snapshot(ready.snapshot)
        if ready.quorum_state is not None:
            self.quorum_state.write(ready.quorum_state)
        if ready.truncate_to is not None:
            self.log.truncate_to(ready.truncate_to)
        self.log.append(ready.entries)
        if ready.log_start_offset is not None:
            self.log.advance_log_start(ready.log_start_offset)

    def close(self) -> None:
        self.log.close()
