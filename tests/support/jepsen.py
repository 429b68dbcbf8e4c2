"""A Jepsen-style history and checker for a produce/consume workload, and a replica comparer.

    h = History()
    h.invoke(process, value); h.ok(process, value, partition, offset)   # or fail / info
    h.read(reader, poll, partition, offset, value)                      # each record read
    h.fault("isolate 2")
    report = check(h); print(report.summary()); assert report.valid

Values are unique strings. An op ends `ok` (the broker acknowledged it at partition/offset;
the offset may be None when the client was not told it, e.g. librdkafka after the broker
answered a retry with DUPLICATE_SEQUENCE_NUMBER: such a value must still be read, but its
place is not checked),
`fail` (it certainly was not written) or `info` (nobody knows: a timeout, a lost connection;
it may or may not be in the log). An invoke with no completion counts as info.

What the checker demands of the reads:
- lost: an acknowledged value is never read;
- duplicated: a value is read more than once (at two offsets, or one offset twice);
- misplaced: an acknowledged value is read somewhere other than its acknowledged
  partition and offset;
- reordered: within a partition, acknowledged values are read out of acknowledged-offset order;
- conflicting acks: two values acknowledged at the same partition and offset;
- phantom: a value is read that no one ever sent; failed_present: a `fail` value is read;
- backwards: one reader sees a partition's offsets go back or repeat, poll after poll.

`compare_replicas` checks that the replicas of a partition hold the same bytes from their
common log start up to the high watermark, straight from Kafka-format segment files.
`explain_duplicates` says who wrote each copy of a duplicated value, from the same files: the
broker (one idempotent producer sequence stored twice) or the client (the records sent again
under a new producer epoch or id, which no broker can tell from new data).
"""
from __future__ import annotations

import itertools
import json
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from crc32c import crc32c

from core.log.checkpoint import LOG_START_OFFSET_FILE, read_offset
from core.protocol.records import CRC_AT, CRC_START, iter_batch_headers

INVOKE, OK, FAIL, INFO = "invoke", "ok", "fail", "info"


@dataclass(frozen=True)
class Op:
    index: int
    time: float
    process: int
    type: str
    value: str
    partition: int | None = None
    offset: int | None = None
    error: str | None = None


@dataclass(frozen=True)
class Read:
    reader: int
    poll: int
    partition: int
    offset: int
    value: str


class History:
    """Producers, readers and the nemesis record into one history from many threads.

    No lock: list.append and next() on itertools.count are atomic in CPython. A lock here
    deadlocked a fault run: librdkafka delivery callbacks run inside flush() and poll(), and
    one thread was left holding it for good (the holder never showed in any stack)."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.reads: list[Read] = []
        self.faults: list[tuple[float, str]] = []
        self._index = itertools.count()
        self.start = time.monotonic()

    def _op(self, process: int, type_: str, value: str, partition=None, offset=None, error=None):
        self.ops.append(Op(next(self._index), time.monotonic() - self.start, process, type_, value,
                           partition, offset, error))

    def invoke(self, process: int, value: str) -> None:
        self._op(process, INVOKE, value)

    def ok(self, process: int, value: str, partition: int, offset: int) -> None:
        self._op(process, OK, value, partition, offset)

    def fail(self, process: int, value: str, error: str) -> None:
        self._op(process, FAIL, value, error=error)

    def info(self, process: int, value: str, error: str) -> None:
        self._op(process, INFO, value, error=error)

    def read(self, reader: int, poll: int, partition: int, offset: int, value: str) -> None:
        self.reads.append(Read(reader, poll, partition, offset, value))

    def fault(self, text: str) -> None:
        self.faults.append((time.monotonic() - self.start, text))

    def dump(self, path: Path) -> None:
        """The whole history as JSON lines (ops, reads, faults), for a failed run's post-mortem."""
        with open(path, "w") as f:
            for op in list(self.ops):
                f.write(json.dumps({"op": op.__dict__}) + "\n")
            for rd in list(self.reads):
                f.write(json.dumps({"read": rd.__dict__}) + "\n")
            for t, text in list(self.faults):
                f.write(json.dumps({"fault": {"time": t, "text": text}}) + "\n")


@dataclass
class Report:
    ops: int = 0
    acknowledged: int = 0
    failed: int = 0
    unknown: int = 0
    unknown_read: int = 0          # indeterminate values that did make it into the log
    reads: int = 0
    faults: int = 0
    lost: list[str] = field(default_factory=list)
    # lost values acknowledged at or above their partition's final high watermark: the log
    # was cut back below an offset the broker had acknowledged (given the HWs to check())
    lost_above_hw: list[tuple] = field(default_factory=list)   # (value, partition, offset, hw)
    duplicated: dict[str, int] = field(default_factory=dict)
    misplaced: list[tuple] = field(default_factory=list)       # (value, acked (p, o), read (p, o))
    reordered: list[tuple] = field(default_factory=list)       # (partition, earlier, later)
    conflicting_acks: list[tuple] = field(default_factory=list)  # (partition, offset, values)
    phantom: list[str] = field(default_factory=list)
    failed_present: list[str] = field(default_factory=list)
    backwards: list[tuple] = field(default_factory=list)       # (reader, partition, prev, offset)
    malformed: list[str] = field(default_factory=list)         # the history itself is wrong

    ANOMALIES = ("lost", "duplicated", "misplaced", "reordered", "conflicting_acks", "phantom",
                 "failed_present", "backwards", "malformed")

    @property
    def valid(self) -> bool:
        return not any(getattr(self, a) for a in self.ANOMALIES)

    def summary(self, examples: int = 5) -> str:
        lines = [f"ops {self.ops}, acknowledged {self.acknowledged}, lost {len(self.lost)}, "
                 f"duplicated {len(self.duplicated)}, unknown {self.unknown} "
                 f"({self.unknown_read} read back), failed {self.failed}, reads {self.reads}, "
                 f"faults injected {self.faults}: {'VALID' if self.valid else 'INVALID'}"]
        if self.lost_above_hw:
            lines.append(f"  {len(self.lost_above_hw)} of the lost were acknowledged at or above "
                         f"the final high watermark: {self.lost_above_hw[:examples]}")
        for name in self.ANOMALIES:
            found = getattr(self, name)
            if found:
                items = list(found.items() if isinstance(found, dict) else found)
                lines.append(f"  {name} ({len(items)}): {items[:examples]}"
                             + (" ..." if len(items) > examples else ""))
        return "\n".join(lines)


def check(history: History, high_watermarks: Mapping[int, int] | None = None) -> Report:
    """Judge the history; `high_watermarks` ({partition: HW} the reads stopped at) only
    sharpens the explanation of lost values."""
    ops, reads = sorted(history.ops, key=lambda op: op.index), list(history.reads)
    r = Report(reads=len(reads), faults=len(history.faults))
    invoked: set[str] = set()
    outcome: dict[str, Op] = {}
    for op in ops:
        if op.type == INVOKE:
            if op.value in invoked:
                r.malformed.append(f"{op.value!r} invoked twice")
            invoked.add(op.value)
        elif op.value not in invoked:
            r.malformed.append(f"{op.value!r} completed ({op.type}) but never invoked")
        elif op.value in outcome:
            r.malformed.append(f"{op.value!r} completed twice")
        else:
            outcome[op.value] = op
    acked = {v: op for v, op in outcome.items() if op.type == OK}
    failed = {v for v, op in outcome.items() if op.type == FAIL}
    unknown = invoked - acked.keys() - failed
    r.ops, r.acknowledged, r.failed, r.unknown = len(invoked), len(acked), len(failed), len(unknown)

    placed = {v: op for v, op in acked.items() if op.partition is not None and op.offset is not None}
    by_position: dict[tuple, list[str]] = defaultdict(list)
    for v, op in placed.items():
        by_position[(op.partition, op.offset)].append(v)
    r.conflicting_acks = sorted((p, o, sorted(vs)) for (p, o), vs in by_position.items() if len(vs) > 1)

    counts = Counter(rd.value for rd in reads)
    r.lost = sorted(v for v in acked if counts[v] == 0)
    if high_watermarks:
        r.lost_above_hw = [(v, placed[v].partition, placed[v].offset, high_watermarks[placed[v].partition])
                           for v in r.lost if v in placed and placed[v].partition in high_watermarks
                           and placed[v].offset >= high_watermarks[placed[v].partition]]
    r.duplicated = {v: n for v, n in sorted(counts.items()) if n > 1}
    r.phantom = sorted(v for v in counts if v not in invoked)
    r.failed_present = sorted(v for v in counts if v in failed)
    r.unknown_read = sum(1 for v in unknown if counts[v])

    seen: set[str] = set()
    last_acked: dict[int, tuple[int, str]] = {}       # partition -> (acked offset, value)
    last_offset: dict[tuple[int, int], int] = {}      # (reader, partition) -> offset
    for rd in sorted(reads, key=lambda rd: (rd.reader, rd.poll)):   # stable: order within a poll kept
        key = (rd.reader, rd.partition)
        if key in last_offset and rd.offset <= last_offset[key]:
            r.backwards.append((rd.reader, rd.partition, last_offset[key], rd.offset))
        last_offset[key] = rd.offset
        op = placed.get(rd.value)
        if op is None or rd.value in seen:
            continue
        seen.add(rd.value)
        if (op.partition, op.offset) != (rd.partition, rd.offset):
            r.misplaced.append((rd.value, (op.partition, op.offset), (rd.partition, rd.offset)))
        prev = last_acked.get(rd.partition)
        if prev is not None and op.offset < prev[0]:
            r.reordered.append((rd.partition, prev[1], rd.value))
        last_acked[rd.partition] = (op.offset, rd.value)
    return r


# ---------------------------------------------------------------------- replicas

@dataclass(frozen=True)
class Batch:
    base_offset: int
    last_offset: int
    data: bytes
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1

    def writer_of(self, offset: int) -> tuple[int, int, int]:
        """(producer id, epoch, sequence) of the record at `offset` (-1 sequence if none)."""
        seq = self.base_sequence + (offset - self.base_offset) if self.base_sequence >= 0 else -1
        return self.producer_id, self.producer_epoch, seq


def log_batches(partition_dir: Path) -> list[Batch]:
    """Every whole batch in a partition directory's segments, in offset order (a torn tail,
    which recovery would cut, is left out)."""
    out: list[Batch] = []
    segments = sorted(p for p in Path(partition_dir).glob("*.log") if p.stem.isdigit())
    for seg in segments:
        data = seg.read_bytes()
        for info in iter_batch_headers(data):
            out.append(Batch(info.base_offset, info.last_offset,
                             data[info.position:info.position + info.size],
                             info.producer_id, info.producer_epoch, info.base_sequence))
    return out


def log_start_offset(partition_dir: Path, batches: list[Batch]) -> int:
    stored = read_offset(Path(partition_dir) / LOG_START_OFFSET_FILE)
    if stored is not None:
        return stored
    return batches[0].base_offset if batches else 0


def compare_replicas(replicas: Mapping[object, Path], high_watermark: int) -> list[str]:
    """Problems found comparing the replicas' bytes from their common log start to the high
    watermark: a replica short of the HW, a gap, a bad CRC, or bytes that differ. Empty if
    they agree."""
    problems: list[str] = []
    held: dict[object, list[Batch]] = {}
    starts = {}
    for name, directory in sorted(replicas.items(), key=lambda kv: str(kv[0])):
        batches = log_batches(directory)
        starts[name] = log_start_offset(directory, batches)
        held[name] = batches
    start = max(starts.values(), default=0)
    if start >= high_watermark:
        return problems
    kept: dict[object, list[Batch]] = {}
    for name, batches in held.items():
        mine = [b for b in batches if b.last_offset >= start and b.base_offset < high_watermark]
        kept[name] = mine
        expect = start
        for b in mine:
            if b.base_offset > expect:
                problems.append(f"replica {name}: offsets {expect}..{b.base_offset - 1} missing")
            if crc32c(b.data[CRC_START:]) != int.from_bytes(b.data[CRC_AT:CRC_AT + 4], "big"):
                problems.append(f"replica {name}: batch at offset {b.base_offset} fails its CRC")
            expect = max(expect, b.last_offset + 1)
        if expect < high_watermark:
            problems.append(f"replica {name}: ends at offset {expect}, below the high watermark "
                            f"{high_watermark}")
    names = list(kept)
    ref = names[0] if names else None
    for name in names[1:]:
        a, b = kept[ref], kept[name]
        if b"".join(x.data for x in a) == b"".join(x.data for x in b):
            continue
        for x, y in zip(a, b):
            if x.data != y.data:
                problems.append(f"replicas {ref} and {name} differ at the batch at offset "
                                f"{x.base_offset} / {y.base_offset}")
                break
        else:
            problems.append(f"replicas {ref} and {name} hold {len(a)} and {len(b)} batches "
                            f"below the high watermark")
    return problems


# ---------------------------------------------------------------------- duplicates

BROKER_DUPLICATE = "broker: one producer sequence stored twice"
CLIENT_RESEND = "client: sent again under a new producer epoch or id"
UNEXPLAINED = "unexplained"


def explain_duplicates(duplicated: Mapping[str, int], reads: list[Read],
                       partition_dirs: Mapping[int, Path]) -> dict[str, list[tuple]]:
    """Sort duplicated values by cause, from the batch headers holding each copy (one
    replica's directory per partition). A value read twice at one offset is a reader's
    repeat, not a stored copy, and is left to the `backwards` check.

    {cause: [(value, [(partition, offset, (producer id, epoch, sequence)), ...]), ...]}"""
    if not duplicated:
        return {}
    places: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for rd in reads:
        if rd.value in duplicated:
            places[rd.value].add((rd.partition, rd.offset))
    batches = {p: log_batches(d) for p, d in partition_dirs.items()}

    def writer(partition: int, offset: int):
        for b in batches.get(partition, ()):
            if b.base_offset <= offset <= b.last_offset:
                return b.writer_of(offset)
        return None

    causes: dict[str, list[tuple]] = defaultdict(list)
    for value in sorted(duplicated):
        copies = sorted(places[value])
        if len(copies) < 2:
            continue
        writers = [writer(p, o) for p, o in copies]
        entry = (value, [(p, o, w) for (p, o), w in zip(copies, writers)])
        if any(w is None or w[2] < 0 for w in writers):
            causes[UNEXPLAINED].append(entry)
        elif len(set(writers)) < len(writers):
            causes[BROKER_DUPLICATE].append(entry)
        elif len({w[:2] for w in writers}) == len(writers):
            causes[CLIENT_RESEND].append(entry)
        else:   # one producer epoch, two sequences: nothing the protocol explains
            causes[UNEXPLAINED].append(entry)
    return dict(causes)
