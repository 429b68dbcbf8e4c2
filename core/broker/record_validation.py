"""Which records of a produced partition are invalid, and what the producer is told (KIP-467).

A produced partition is normally appended without its records being read: scan_batches checks
each batch's framing and CRC, and the bytes go to the log. Three things make Kafka's
LogValidator look at every record, and only these make Seaway do it:

- the topic is compacted (`cleanup.policy` has `compact`): a record without a key could never be
  cleaned, so it is INVALID_RECORD;
- the topic keeps CreateTime and bounds it (`message.timestamp.before.max.ms` or
  `message.timestamp.after.max.ms` below their unbounded defaults): a record whose timestamp is
  older than now - before, or newer than now + after, is INVALID_TIMESTAMP. A record without a
  timestamp (-1) passes, as in Kafka;
- a batch claims LogAppendTime, which only a broker may stamp: on a LogAppendTime topic, or
  with no timestamp to check, each of its records is INVALID_TIMESTAMP. A DR copy carries the
  source cluster's stamps and is not asked (the caller leaves it out).

The answer. Nothing of the partition is appended when one record is bad: the partition's
error is INVALID_TIMESTAMP if any record's timestamp is wrong and INVALID_RECORD otherwise,
with a message, and `record_errors` (ProduceResponse v8+) lists each bad record by its index
within its batch, the first batch with a bad record deciding (later batches are not read, as
Kafka stops at the first). Clients use the list: librdkafka fails the listed records with the
partition's error and the others of the batch with _INVALID_DIFFERENT_RECORD, so an
application can tell the record it must fix from the ones it can send again.

Worked example: a compacted topic, one batch of four records whose keys are
`a, None, b, None`. The partition is answered INVALID_RECORD, record_errors
[(1, "... without a key ..."), (3, "... without a key ...")], and the log does not move.

The check is per record (a Python loop), so it runs only under the conditions above, which
an operator sets per topic; every other produce stays free of per-record work.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from core.protocol.errors import DecodeError, ErrorCode
from core.protocol.records import ATTR_LOG_APPEND_TIME, BatchInfo, Record, decode_batch

NO_TIMESTAMP = -1
UNBOUNDED = 2**62   # a bound at or above this is the default (Long.MAX_VALUE): no check
SHOWN = 3           # record errors quoted in the partition's message, as Kafka's


@dataclass(frozen=True, slots=True)
class RecordRules:
    """What the topic asks of every record (see the module's docstring)."""
    compacted: bool
    log_append_time: bool   # message.timestamp.type=LogAppendTime
    before_ms: int
    after_ms: int

    @property
    def bounds_timestamps(self) -> bool:
        return not self.log_append_time and (self.before_ms < UNBOUNDED or self.after_ms < UNBOUNDED)


@dataclass(frozen=True, slots=True)
class Rejection:
    """The partition's answer when some record is invalid."""
    code: ErrorCode
    message: str
    record_errors: tuple[tuple[int, str], ...]   # (index within its batch, what is wrong)


def needs_reading(rules: RecordRules, batches: Sequence[BatchInfo], *, trust_stamps: bool = False) -> bool:
    """Whether the records must be read at all: the common produce answers False per batch,
    never per record."""
    if rules.compacted or rules.bounds_timestamps:
        return True
    return not trust_stamps and any(b.attributes & ATTR_LOG_APPEND_TIME for b in batches)


def find_invalid(data, batches: Sequence[BatchInfo], rules: RecordRules, now: int, where: str, *,
                 max_decompressed: int, trust_stamps: bool = False) -> Rejection | None:
    """The first batch's bad records, as Kafka reports them, or None if every record passes.
    `where` names the partition in the messages ("topic-0")."""
    low, high = now - rules.before_ms, now + rules.after_ms
    for batch in batches:
        try:
            records = decode_batch(data, batch, verify_crc=False, max_decompressed=max_decompressed)
        except DecodeError as exc:
            return Rejection(ErrorCode.INVALID_RECORD, f"records of the batch at {batch.base_offset} in {where} "
                             f"cannot be read: {exc}", ())
        stamped = bool(batch.attributes & ATTR_LOG_APPEND_TIME) and not trust_stamps
        errors: list[tuple[int, str]] = []
        bad_timestamp = False
        for index, record in enumerate(records):
            assert isinstance(record, Record), record   # control batches are the caller's
            if rules.compacted and record.key is None:
                errors.append((index, f"compacted topic {where} cannot accept a record without a key"))
            elif not rules.log_append_time and record.timestamp != NO_TIMESTAMP and rules.bounds_timestamps \
                    and not low <= record.timestamp <= high:
                errors.append((index, f"timestamp {record.timestamp} of the record at offset {record.offset} is "
                               f"out of range: it must be within [{low}, {high}]"))
                bad_timestamp = True
            elif stamped and (rules.log_append_time or record.timestamp == NO_TIMESTAMP):
                errors.append((index, "a producer may not set the timestamp type to LogAppendTime"))
                bad_timestamp = True
        if errors:
            return _rejection(errors, bad_timestamp)
    return None


def _rejection(errors: list[tuple[int, str]], bad_timestamp: bool) -> Rejection:
    if bad_timestamp:
        return Rejection(ErrorCode.INVALID_TIMESTAMP,
                         "one or more records have been rejected for an invalid timestamp", tuple(errors))
    shown = "; ".join(f"record {i}: {message}" for i, message in errors[:SHOWN])
    return Rejection(ErrorCode.INVALID_RECORD, f"{len(errors)} record(s) rejected (the first "
                     f"{min(len(errors), SHOWN)}: {shown})", tuple(errors))
