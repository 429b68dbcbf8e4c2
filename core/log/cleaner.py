"""Log compaction: keep the last record of every key (Kafka's LogCleaner / Cleaner).

Theory of operation
-------------------
Only logs whose cleanup.policy holds "compact" are cleaned, and never their active (last)
segment. The log is split at the cleaner checkpoint (`cleaner-offset-checkpoint` in the
partition directory, written after each clean): below it lies the *clean* section, already
compacted once; from it the *dirty* section. A clean:

1. finds the first uncleanable offset: the lowest of the active segment's base, the base
   of the segment holding `upper_bound_offset`, the base of the segment holding the first
   record of a transaction that has no marker in the log yet (see Transactions), and, when
   min.compaction.lag.ms > 0, the base of the first dirty segment whose largest timestamp
   is newer than now - min.compaction.lag.ms. Nothing in or after that segment is mapped
   or rewritten;
2. builds an offset map over the dirty section up to there: key -> latest offset, keyed by
   16-byte blake2b digests of the keys (as Kafka's SkimpyOffsetMap keys by MD5). Control
   batches and batches of aborted transactions are not mapped (see Transactions). The map
   holds at most `max_map_entries(dedupe_buffer_size)` keys; when the dirty section has
   more, only a prefix of it (whole batches) is mapped and the checkpoint moves only that
   far, so the next clean goes on from there. The budget is counted Kafka's way (24 bytes
   per entry, load factor 0.9); a Python dict really spends ~100+ bytes per entry, hence
   the smaller default buffer;
3. rewrites every closed segment from the log's first one up to the end of the mapped
   prefix, in groups of consecutive segments whose total size stays within segment.bytes,
   whose index files stay within segment.index.bytes and whose offsets fit int32 relative
   offsets (Kafka's groupSegmentsBySize). A record is kept when its offset is at least the
   map's offset for its key (or its key is not in the map). Records without a key are
   dropped, as Kafka's cleaner does (the broker refuses them at produce time).
   A group whose batches all survive unchanged is not rewritten at all, so cleaning an
   already clean log changes no file.

Tombstones (null value). This is Kafka's pre-KIP-534 rule, made deterministic: a tombstone
that is the latest record of its key is removed only when (a) it lies below the cleaner
checkpoint the clean started from, i.e. an earlier clean already kept it once, and (b) the
segment holding it has a largest timestamp older than now - delete.retention.ms. Kafka
(KIP-534) instead stamps a delete horizon into the batch header (attribute 0x40) when it
first cleans a tombstone; we write that bit only on transaction markers (below). Records of
a key whose tombstone went are gone too, because the tombstone was the key's latest record
and already hid them.

Batches. Offsets never change: a batch whose records all survive is copied byte for byte;
one that loses some is rebuilt around the surviving records' own bytes, with the original
base offset, lastOffsetDelta (so the offset range and the producer's sequence range stay),
base timestamp, attributes, compression codec, partition leader epoch and producer fields;
its max timestamp becomes the survivors' (CreateTime) and the CRC is recomputed. A batch
that loses every record disappears, except that the last batch of each producer id in the
log is kept as an empty batch (header only, zero records) so idempotent producer state can
be rebuilt from the log; Kafka does the same (BatchRetention.RETAIN_EMPTY). Such an empty
batch goes once its producer has a later batch.

Transactions (Kafka's CleanedTransactionMetadata). The caller passes as
`upper_bound_offset` min(high watermark, last stable offset), so every transaction with
records below the first uncleanable offset is decided: its marker is in the log and, if it
aborted with records, its entry (AbortedTxn) is in the `.txnindex` of the marker's segment.
As a second guard the cleaner stops by itself before the first record of any transaction
whose producer has no later marker in the log (no substitute for the bound: an abort
marker appended while `prepare` runs may be seen before its entry is). The entries come
from the `.txnindex` files (not from the Segments' in-memory lists, which belong to the
owner's thread); a transactional batch of producer P lies in an aborted transaction when
an entry of P has first_offset <= its base offset <= last_offset. Then:
- batches of aborted transactions are not mapped, so an aborted record never hides the
  committed record of its key, and they lose every record, without being decoded: a
  read_committed consumer never sees them and a read_uncommitted one is not promised them
  after compaction, as in Kafka. Committed transactional records compact like any other.
- a marker (control batch) of P is kept while its transaction has batches in the log: each
  pass goes over the log from its first segment, and keeps the marker if a transactional
  batch of P came after P's previous marker in this pass (even one this pass removes; the
  next pass then finds the transaction empty). The first pass that finds it empty stamps a
  delete horizon into it (KIP-534: attribute 0x40, the base timestamp becomes now +
  delete.retention.ms, each record's timestamp delta is re-encoded so its timestamp
  stays); a pass at or after the horizon removes it. A producer's last batch stays whole
  even then (its epoch fences zombies); control records other than COMMIT/ABORT stay.
- an ABORT marker that an aborted-transaction entry names goes with its entry, as in Kafka:
  Log.replace_segments copies every entry of the replaced segments into the cleaned one
  except those whose marker this clean removed. An entry and its marker must stay
  together: a read_committed consumer (Kafka's CompletedFetch, core/client's too) adds P to
  its aborted producers at the entry's first offset and drops it only at P's ABORT marker,
  so an entry without its marker would make it skip P's later transactions in the same
  fetch. The marker goes only once its transaction has no batch left and its horizon has
  passed, so no entry is dropped while its records or marker remain.
Hence a cleaned segment inherits every aborted-transaction entry of the segments it
replaces but those whose marker it removed; Log.replace_segments writes them at commit time, so entries a replay added while
`prepare` ran are not lost. The partition re-derives missing entries (its replay at open)
before its first clean, so the files hold every entry the clean needs.

Crash safety. A group is written as `<base>.log.cleaned` plus `.index.cleaned` and
`.timeindex.cleaned` (base = its first segment's base offset), fsynced, then swapped in by
Log.replace_segments (which adds `.txnindex.cleaned` when there are aborted-transaction
entries): rename to `.swap`, delete the old segments, rename `.swap` to the final names.
Log.open (recovery.finish_cleaner_swaps) deletes `.cleaned` files and completes a `.swap`.
The checkpoint is written after every swap, so a crash before it only means the next clean
redoes some work.

Threads (the contract with the broker)
--------------------------------------
`prepare(log, now_ms)` is the expensive part and takes no lock: run it in a worker thread
while the owner keeps appending and reading. It reads closed segments through descriptors
of its own (a segment deleted meanwhile by retention stays readable until closed, and its
absence is noticed at commit), as well as the batch headers of the active segment up to its
size then and every `.txnindex` file; it only reads immutable attributes of the Log
(segment list copy, base offsets, sizes of closed segments, config) and writes only
`.cleaned` files.
`commit(plan)` is short (a few renames, unlinks and three directory fsyncs per group,
then the checkpoint) and must be called under the same serialization as append and
apply_retention, on the thread that reads (it closes the old segments' descriptors). It
checks that the segments cleaned are still the log's, unchanged (same objects, sizes, no
truncation since prepare), else it drops the plan's files and cleans nothing.
`abort(plan)` drops the plan's files. `clean(log, now_ms, lock=...)` = prepare, then
commit under `lock`. Only one clean of a log may run at a time.

Reading and rewriting batches is cleaner_batches.py's; what a clean needs to know of
transactions, cleaner_txns.py's.
"""
from __future__ import annotations

import hashlib
import logging
import os
import struct
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ContextManager, Iterator

from core.protocol.records import ATTR_DELETE_HORIZON, HEADER_SIZE, MAX_TIMESTAMP_AT, BatchInfo

from .checkpoint import fsync_dir, read_offset, write_offset
from .cleaner_batches import Rec, iter_batches, parse_records, rebuild, records, stamp
from .cleaner_txns import CleanerTxns, aborted_txns
from .config import INT32_MAX
from .index import datasync, write_all
from .log import Log
from .recovery import CLEANER_CHECKPOINT_FILE
from .segment import Segment, _Tracker

log = logging.getLogger(__name__)

# Kafka's log.cleaner.dedupe.buffer.size default is 128 MiB for all cleaner threads; a
# Python dict entry costs far more than the 24 bytes Kafka's map does, so ours is smaller.
DEFAULT_DEDUPE_BUFFER_SIZE = 16 * 1024 * 1024
MAP_LOAD_FACTOR = 0.9              # log.cleaner.io.buffer.load.factor
_MAP_ENTRY_BYTES = 24              # 16-byte digest + 8-byte offset, as Kafka counts it
READ_CHUNK = 1 << 20
WRITE_CHUNK = 1 << 20

_HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC = struct.Struct(">I")
_CONTROL_KEY = struct.Struct(">hh")   # version, type
ABORT, COMMIT = 0, 1                  # control record types of transaction markers


def max_map_entries(dedupe_buffer_size: int) -> int:
    return max(1, int(dedupe_buffer_size * MAP_LOAD_FACTOR) // _MAP_ENTRY_BYTES)


def key_digest(key: bytes) -> bytes:
    return hashlib.blake2b(key, digest_size=16).digest()


@dataclass
class CleanResult:
    cleaned: bool = False            # at least one group was swapped in
    skipped: str | None = None       # why nothing was attempted (None if it ran)
    aborted: bool = False            # commit found the log changed; nothing swapped
    first_dirty_offset: int = -1     # the checkpoint the clean started from
    end_offset: int = -1             # the new checkpoint
    map_full: bool = False           # the dirty section did not fit the offset map
    segments_cleaned: int = 0        # old segments replaced
    groups_swapped: int = 0
    bytes_before: int = 0            # of the replaced segments
    bytes_after: int = 0
    records_removed: int = 0
    tombstones_removed: int = 0
    aborted_records_removed: int = 0  # of records_removed: records of aborted transactions
    markers_removed: int = 0          # transaction markers (control batches) removed


@dataclass
class _Group:
    segments: list[Segment]
    sizes: list[int]
    base: int
    changed: bool = False
    bytes_after: int = 0
    # (producer id, offset) of the ABORT markers removed here: their aborted-transaction
    # entries go with them (Log.replace_segments)
    dropped_entries: set[tuple[int, int]] = field(default_factory=set)


@dataclass
class CleanPlan:
    log: Log
    groups: list[_Group] = field(default_factory=list)
    truncations: int = 0
    result: CleanResult = field(default_factory=CleanResult)

    @property
    def paths(self) -> list[Path]:
        d = self.log.directory
        return [d / f"{g.segments[0].log_path.stem}.{kind}.cleaned"
                for g in self.groups if g.changed for kind in ("log", "index", "timeindex")]


# ------------------------------------------------------------------- selection


def checkpoint_path(log: Log) -> Path:
    return log.directory / CLEANER_CHECKPOINT_FILE


def first_dirty_offset(log: Log) -> int:
    """The stored cleaner checkpoint, reset to the log start when out of range (Kafka)."""
    stored = read_offset(checkpoint_path(log))
    lso, leo = log.log_start_offset, log.log_end_offset
    if stored is None or stored < lso or stored > leo:
        return lso
    return stored


@dataclass
class _SegScan:
    seg: Segment
    size: int
    next_offset: int
    max_ts: int


def dirty_ratio(log: Log, now_ms: int) -> float:
    """Dirty bytes / all bytes of the closed segments (Kafka's cleanableRatio, roughly:
    by segment, from segment headers, without reading records)."""
    allsegs = list(log._segments)
    segs = allsegs[:-1]
    if not segs:
        return 0.0
    first_dirty = first_dirty_offset(log)
    total = sum(s.size for s in segs)
    dirty = sum(s.size for i, s in enumerate(segs) if allsegs[i + 1].base_offset > first_dirty)
    return dirty / total if total else 0.0


def needs_cleaning(log: Log, now_ms: int) -> bool:
    """What the broker's cleaner thread asks before `clean`: compact policy, a closed
    segment, and min.cleanable.dirty.ratio reached, or max.compaction.lag.ms passed for the
    oldest dirty data (the first batch timestamp of the first dirty segment)."""
    cfg = log.config
    if not cfg.compact_enabled or len(log._segments) < 2:
        return False
    if dirty_ratio(log, now_ms) >= cfg.min_cleanable_dirty_ratio:
        return True
    first_dirty = first_dirty_offset(log)
    for i, seg in enumerate(list(log._segments)[:-1]):
        if log._segments[i + 1].base_offset > first_dirty:
            ts = seg.first_batch_timestamp()
            return 0 <= ts < now_ms - cfg.max_compaction_lag_ms
    return False


# ----------------------------------------------------------------------- clean


def clean(log: Log, now_ms: int, *, lock: ContextManager[object] | None = None,
          dedupe_buffer_size: int = DEFAULT_DEDUPE_BUFFER_SIZE,
          upper_bound_offset: int | None = None,
          hook: Callable[[str], None] | None = None) -> CleanResult:
    """Clean `log` once: prepare (no lock), then commit under `lock`. The caller decides
    when (see needs_cleaning); cleaning a clean log is a no-op that changes no file."""
    plan = prepare(log, now_ms, dedupe_buffer_size=dedupe_buffer_size,
                   upper_bound_offset=upper_bound_offset, hook=hook)
    if plan.result.skipped:
        return plan.result
    with lock if lock is not None else nullcontext():
        return commit(plan, hook=hook)


def prepare(log: Log, now_ms: int, *, dedupe_buffer_size: int = DEFAULT_DEDUPE_BUFFER_SIZE,
            upper_bound_offset: int | None = None,
            hook: Callable[[str], None] | None = None) -> CleanPlan:
    """Build the offset map and write the `.cleaned` files; takes no lock (see above).

    upper_bound_offset: min(high watermark, last stable offset), which the caller computes
    before the call; no segment holding an offset at or above it is mapped or rewritten
    (Kafka's firstUncleanableDirtyOffset is at most the LSO). None: no bound but the active
    segment, min.compaction.lag.ms and the transactions still open in the log."""
    cfg = log.config
    plan = CleanPlan(log, truncations=log.truncations)
    res = plan.result
    if not cfg.compact_enabled:
        res.skipped = "cleanup.policy has no compact"
        return plan
    segs = list(log._segments)
    closed = segs[:-1]
    if not closed:
        res.skipped = "no closed segment"
        return plan
    first_dirty = first_dirty_offset(log)
    res.first_dirty_offset = first_dirty
    fds: dict[int, int] = {}
    try:
        for seg in closed:
            try:
                fds[id(seg)] = os.open(seg.log_path, os.O_RDONLY)
            except FileNotFoundError:   # retention or a truncation got there first
                res.skipped = "log changed"
                return plan
        scans = [_scan_headers(fds[id(s)], s) for s in closed]
        last_batch_of_pid, first_open_txn = _producers(scans, segs[-1])

        # 1. the first uncleanable offset: the active segment, the upper bound (the LSO), the
        # first open transaction, min.compaction.lag.ms; the lowest wins
        uncleanable = segs[-1].base_offset
        bounds = [b for b in (upper_bound_offset, first_open_txn) if b is not None]
        if bounds:
            bound = min(bounds)
            for sc in scans:
                if sc.next_offset > bound:
                    uncleanable = min(uncleanable, sc.seg.base_offset)
                    break
        for sc in scans if cfg.min_compaction_lag_ms > 0 else ():   # as Kafka: only if > 0
            if sc.next_offset > first_dirty and sc.max_ts > now_ms - cfg.min_compaction_lag_ms:
                uncleanable = min(uncleanable, sc.seg.base_offset)
                break
        txns = CleanerTxns(aborted_txns(segs))

        # 2. the offset map over [first_dirty, uncleanable)
        limit = max_map_entries(dedupe_buffer_size)
        offsets: dict[bytes, int] = {}
        end = first_dirty
        full = False
        for sc in scans:
            if full or sc.seg.base_offset >= uncleanable:
                break
            if sc.next_offset <= first_dirty:
                continue
            for pos, info, data in iter_batches(fds[id(sc.seg)], sc.size):
                if info.base_offset + info.last_offset_delta < first_dirty:
                    continue
                if not info.is_control and not txns.aborted(info):
                    if len(offsets) + info.records_count > limit:
                        full = True
                        break
                    for rec in records(data, info):
                        if rec.offset >= first_dirty and rec.key is not None:
                            offsets[key_digest(rec.key)] = rec.offset
                end = info.base_offset + info.last_offset_delta + 1
        res.map_full = full
        if full and end == first_dirty:
            # `log` is the Log here, which shadows the module's logger.
            logging.getLogger(__name__).warning(
                "%s: offset map of %d entries cannot hold one batch; raise the dedupe buffer",
                log.directory, limit)
        res.end_offset = end

        # 3. rewrite the closed segments below the end of the map, in groups
        to_clean = [sc for sc in scans if sc.seg.base_offset < max(end, first_dirty)
                    and sc.seg.base_offset < uncleanable]
        flt = _Filter(offsets, first_dirty, now_ms, cfg.delete_retention_ms,
                      last_batch_of_pid, txns)
        flt.begin()   # each pass over to_clean goes through the transactions from the start
        sizes = {id(sc.seg): flt.output_size(fds[id(sc.seg)], sc) for sc in to_clean}
        flt.begin()
        for group in _group(to_clean, sizes, cfg.segment_bytes, cfg.segment_index_bytes):
            g = _Group([sc.seg for sc in group], [sc.size for sc in group],
                       group[0].seg.base_offset)
            plan.groups.append(g)
            _write_group(log, g, group, fds, flt, res)
    except BaseException:
        abort(plan)
        raise
    finally:
        for fd in fds.values():
            os.close(fd)
    if hook:
        hook("cleaned")   # a crash here leaves only .cleaned files
    return plan


def commit(plan: CleanPlan, *, hook: Callable[[str], None] | None = None) -> CleanResult:
    """Swap the cleaned groups in and write the checkpoint; under the owner's lock."""
    log = plan.log
    res = plan.result
    if res.skipped:
        return res
    live = {id(s): s.size for s in log._segments[:-1]}
    for g in plan.groups:
        if (plan.truncations != log.truncations
                or any(live.get(id(s)) != size for s, size in zip(g.segments, g.sizes))):
            abort(plan)
            res.aborted = True
            return res
    for g in plan.groups:
        if not g.changed:
            continue
        log.replace_segments(g.segments, hook, dropped_txns=g.dropped_entries)
        g.changed = False   # its files are now the log's
        res.groups_swapped += 1
        res.segments_cleaned += len(g.segments)
        res.bytes_before += sum(g.sizes)
        res.bytes_after += g.bytes_after
    res.cleaned = res.groups_swapped > 0
    if res.end_offset >= 0 and read_offset(checkpoint_path(log)) != res.end_offset:
        write_offset(checkpoint_path(log), res.end_offset)
    if hook:
        hook("checkpoint")
    return res


def abort(plan: CleanPlan) -> None:
    """Remove the plan's `.cleaned` files (nothing was swapped)."""
    for path in plan.paths:
        path.unlink(missing_ok=True)
    for g in plan.groups:
        g.changed = False


# --------------------------------------------------------------------- helpers


def _scan_headers(fd: int, seg: Segment) -> _SegScan:
    size = seg.size
    nxt, max_ts = seg.base_offset, -1
    for _pos, info, _data in iter_batches(fd, size, with_data=False):
        nxt = info.base_offset + info.last_offset_delta + 1
        max_ts = max(max_ts, info.max_timestamp)
    if max_ts < 0:   # no timestamps: the file's mtime, as retention does
        max_ts = os.fstat(fd).st_mtime_ns // 1_000_000
    return _SegScan(seg, size, nxt, max_ts)


def _producers(scans: list[_SegScan], active: Segment) -> tuple[dict[int, int], int | None]:
    """(producer id -> base offset of its last batch in the log, the first offset of the
    earliest transaction that has no marker after it in the log, or None), from the headers
    of every segment, the active one included."""
    last: dict[int, int] = {}
    open_txns: dict[int, int] = {}   # producer id -> first offset of its unended transaction
    try:
        fd = os.open(active.log_path, os.O_RDONLY)
    except FileNotFoundError:
        fd = -1
    try:
        sources = [(sc.seg, sc.size) for sc in scans]
        if fd >= 0:
            sources.append((active, active.size))
        for seg, size in sources:
            own = fd if seg is active else os.open(seg.log_path, os.O_RDONLY)
            try:
                for _pos, info, _d in iter_batches(own, size, with_data=False):
                    pid = info.producer_id
                    if pid >= 0:
                        last[pid] = info.base_offset
                        if info.is_control:
                            open_txns.pop(pid, None)
                        elif info.is_transactional:
                            open_txns.setdefault(pid, info.base_offset)
            finally:
                if own != fd:
                    os.close(own)
    finally:
        if fd >= 0:
            os.close(fd)
    return last, min(open_txns.values(), default=None)


def _group(scans: list[_SegScan], sizes: dict[int, int], max_bytes: int,
           max_index_bytes: int) -> Iterator[list[_SegScan]]:
    """Consecutive segments whose cleaned sizes (estimated) fit segment.bytes together, and
    their index files segment.index.bytes, with int32 relative offsets (Kafka groups by
    the segments' current sizes; estimating the output lets one pass reach a fixpoint)."""
    i = 0
    while i < len(scans):
        group = [scans[i]]
        size = sizes[id(scans[i].seg)]
        index = _index_size(scans[i].seg)
        j = i + 1
        while j < len(scans):
            nxt = scans[j]
            nidx = _index_size(nxt.seg)
            nsize = sizes[id(nxt.seg)]
            if (size + nsize > max_bytes or index + nidx > max_index_bytes
                    or nxt.next_offset - 1 - group[0].seg.base_offset > INT32_MAX):
                break
            group.append(nxt)
            size += nsize
            index += nidx
            j += 1
        yield group
        i = j


def _index_size(seg: Segment) -> int:
    total = 0
    for suffix in (".index", ".timeindex"):
        try:
            total += os.stat(seg.log_path.with_suffix(suffix)).st_size
        except OSError:
            pass
    return total


_COPY, _DROP, _REBUILD, _STAMP = range(4)


@dataclass(slots=True)
class _Verdict:
    action: int                                  # _COPY, _DROP, _REBUILD or _STAMP
    keep: list[Rec] = field(default_factory=list)
    payload: memoryview = memoryview(b"")
    removed: int = 0                             # records removed
    tombstones: int = 0                          # of them, tombstones
    aborted: int = 0                             # of them, records of aborted transactions


_KEEP = _Verdict(_COPY)
_GONE = _Verdict(_DROP)


class _Filter:
    """What becomes of each batch (shared by the sizing pass and the writer). Both passes
    must go over the batches in log order from the log's first segment, each after
    `begin()`, since markers depend on the batches before them."""

    def __init__(self, offsets: dict[bytes, int], first_dirty: int, now_ms: int,
                 delete_retention_ms: int, last_batch_of_pid: dict[int, int], txns: CleanerTxns):
        self.offsets = offsets
        self.first_dirty = first_dirty
        self.now_ms = now_ms
        self.delete_retention_ms = delete_retention_ms
        self.horizon = now_ms - delete_retention_ms   # for tombstones (see the docstring)
        self.last_batch_of_pid = last_batch_of_pid
        self.txns = txns

    def begin(self) -> None:
        self.txns.begin()

    def _last_of_producer(self, info: BatchInfo) -> bool:
        return (info.producer_id >= 0
                and self.last_batch_of_pid.get(info.producer_id) == info.base_offset)

    def decide(self, sc: _SegScan, info: BatchInfo, data: memoryview) -> _Verdict:
        if info.is_control:
            return self._marker(info, data)
        txns = self.txns
        txns.on_data(info)
        if txns.aborted(info):   # header checks only: its records are not decoded
            n = info.records_count   # (never a producer's last batch: its marker follows)
            return _Verdict(_DROP, removed=n, aborted=n)
        recs, payload = parse_records(data, info)
        removable_tombstones = sc.max_ts < self.horizon
        keep = []
        tombstones = 0
        for r in recs:
            if r.key is None or r.offset < self.offsets.get(key_digest(r.key), -1):
                continue
            if r.tombstone and removable_tombstones and r.offset < self.first_dirty:
                tombstones += 1
                continue
            keep.append(r)
        if len(keep) == len(recs) and (keep or self._last_of_producer(info)):
            return _KEEP   # (an empty batch stays only as its producer's last)
        removed = len(recs) - len(keep)
        if keep or self._last_of_producer(info):
            return _Verdict(_REBUILD, keep, payload, removed, tombstones)
        return _Verdict(_DROP, removed=removed, tombstones=tombstones)

    def _marker(self, info: BatchInfo, data: memoryview) -> _Verdict:
        """A control batch: kept while its transaction has batches in the log; then stamped
        with a delete horizon, and removed in a pass at or after it (see the docstring)."""
        if info.producer_id < 0:
            return _KEEP
        recs, payload = parse_records(data, info)
        ctype = None   # an empty control batch (one Kafka's cleaner emptied) has none
        if recs:
            key = recs[0].key
            if key is None or len(key) < _CONTROL_KEY.size:
                return _KEEP
            ctype = _CONTROL_KEY.unpack_from(key)[1]
            if ctype not in (ABORT, COMMIT):
                return _KEEP   # not a transaction marker: Kafka keeps it too
        if self.txns.on_marker(info):
            return _KEEP       # its transaction still has batches in the log
        if ctype is None:
            return _KEEP if self._last_of_producer(info) else _GONE
        if not info.attributes & ATTR_DELETE_HORIZON:
            return _Verdict(_STAMP, recs, payload)
        if info.base_timestamp > self.now_ms or self._last_of_producer(info):
            return _KEEP
        return _GONE

    def apply(self, sc: _SegScan, info: BatchInfo, data: memoryview, res: CleanResult | None
              ) -> tuple[bool, bytes]:
        """(changed, the batch to write: b"" for none)."""
        v = self.decide(sc, info, data)
        if v.action == _COPY:
            return False, bytes(data)
        if res is not None:
            res.records_removed += v.removed
            res.tombstones_removed += v.tombstones
            res.aborted_records_removed += v.aborted
            if v.action == _DROP and info.is_control:
                res.markers_removed += 1
        if v.action == _REBUILD:
            return True, rebuild(info, v.keep, v.payload)
        if v.action == _STAMP:
            return True, stamp(info, v.keep, v.payload, self.now_ms + self.delete_retention_ms)
        return True, b""

    def output_size(self, fd: int, sc: _SegScan) -> int:
        """An upper bound of the segment's size once cleaned (compression not redone)."""
        total = 0
        for _pos, info, data in iter_batches(fd, sc.size):
            v = self.decide(sc, info, data)
            if v.action == _COPY:
                total += info.size
            elif v.action == _REBUILD:
                total += HEADER_SIZE + sum(r.end - r.start for r in v.keep)
            elif v.action == _STAMP:   # a marker: one small record, built for its size
                total += len(stamp(info, v.keep, v.payload,
                                    self.now_ms + self.delete_retention_ms))
        return total


def _write_group(log: Log, g: _Group, group: list[_SegScan], fds: dict[int, int],
                 flt: _Filter, res: CleanResult) -> None:
    d = log.directory
    stem = g.segments[0].log_path.stem
    log_path = d / f"{stem}.log.cleaned"
    tracker = _Tracker(g.base, log.config.index_interval_bytes, 0, -1, -1, -1)
    out = bytearray()
    written = 0
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    g.changed = True   # from here on, abort() removes the files
    changed = len(group) > 1   # merging segments is a change too
    try:
        for sc in group:
            for _pos, info, data in iter_batches(fds[id(sc.seg)], sc.size):
                batch_changed, kept = flt.apply(sc, info, data, res)
                changed = changed or batch_changed
                if not kept and info.is_control and flt.txns.indexed(info):
                    g.dropped_entries.add((info.producer_id, info.base_offset))
                if kept:
                    last = info.base_offset + info.last_offset_delta
                    max_ts = struct.unpack_from(">q", kept, MAX_TIMESTAMP_AT)[0]
                    tracker.add(written + len(out), last, max_ts, len(kept))
                    out += kept
                    if len(out) >= WRITE_CHUNK:
                        write_all(fd, out)
                        written += len(out)
                        out.clear()
        write_all(fd, out)
        written += len(out)
        if not changed:
            os.close(fd)
            fd = -1
            log_path.unlink()
            g.changed = False
            return
        datasync(fd)
    finally:
        if fd >= 0:
            os.close(fd)
    tracker.time_entry()
    for kind, raw in (("index", tracker.idx), ("timeindex", tracker.tidx)):
        path = d / f"{stem}.{kind}.cleaned"
        ifd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            write_all(ifd, raw)
            datasync(ifd)
        finally:
            os.close(ifd)
    fsync_dir(d)
    g.bytes_after = written
