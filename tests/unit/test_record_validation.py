"""core/broker/record_validation.py: which records of a produced partition are invalid (KIP-467),
as a table of topics, batches and the answer Kafka's LogValidator gives."""
from __future__ import annotations

import struct

import pytest

from core.protocol.errors import ErrorCode
from core.protocol.records import ATTR_LOG_APPEND_TIME, CRC_AT, CRC_START, Compression, build_batch, crc32c, scan_batches
from core.broker.record_validation import UNBOUNDED, RecordRules, find_invalid, needs_reading

NOW = 1_800_000_000_000
PLAIN = RecordRules(compacted=False, log_append_time=False, before_ms=UNBOUNDED * 2, after_ms=UNBOUNDED * 2)
COMPACTED = RecordRules(compacted=True, log_append_time=False, before_ms=UNBOUNDED * 2, after_ms=UNBOUNDED * 2)
HOUR = RecordRules(compacted=False, log_append_time=False, before_ms=3_600_000, after_ms=60_000)
COMPACTED_HOUR = RecordRules(compacted=True, log_append_time=False, before_ms=3_600_000, after_ms=60_000)
APPEND_TIME = RecordRules(compacted=False, log_append_time=True, before_ms=3_600_000, after_ms=60_000)


def _batch(records, compression=Compression.NONE) -> bytes:
    return build_batch([(k, b"v", [], ts) for k, ts in records], compression=compression)


def _stamped(batch: bytes) -> bytes:
    """The batch with its LogAppendTime attribute set, CRC recomputed."""
    out = bytearray(batch)
    attributes_at = 21
    struct.pack_into(">h", out, attributes_at, struct.unpack_from(">h", out, attributes_at)[0] | ATTR_LOG_APPEND_TIME)
    struct.pack_into(">I", out, CRC_AT, crc32c(memoryview(out)[CRC_START:]))
    return bytes(out)


def _check(data: bytes, rules: RecordRules, trust_stamps: bool = False):
    batches = scan_batches(data, from_client=True)
    return find_invalid(data, batches, rules, NOW, "t-0", max_decompressed=1 << 20, trust_stamps=trust_stamps)


OLD, NEW, RIGHT = NOW - 3_600_001, NOW + 60_001, NOW - 5


# (what, rules, batches, expected code or None, expected bad indexes)
CASES = [
    ("keys everywhere on a compacted topic", COMPACTED, [_batch([(b"a", RIGHT), (b"b", RIGHT)])], None, []),
    ("missing keys on a compacted topic", COMPACTED,
     [_batch([(b"a", RIGHT), (None, RIGHT), (b"b", RIGHT), (None, RIGHT)])], ErrorCode.INVALID_RECORD, [1, 3]),
    ("missing keys, compressed batch", COMPACTED,
     [_batch([(None, RIGHT), (b"a", RIGHT)], Compression.GZIP)], ErrorCode.INVALID_RECORD, [0]),
    ("no keys needed elsewhere", PLAIN, [_batch([(None, OLD), (None, NEW)])], None, []),
    ("timestamps inside the bounds, at both edges", HOUR,
     [_batch([(None, NOW - 3_600_000), (None, NOW + 60_000), (None, RIGHT)])], None, []),
    ("one too old, one too new", HOUR,
     [_batch([(None, RIGHT), (None, OLD), (None, RIGHT), (None, NEW)])], ErrorCode.INVALID_TIMESTAMP, [1, 3]),
    ("a key error and a timestamp error: the timestamp decides the code", COMPACTED_HOUR,
     [_batch([(None, RIGHT), (b"k", OLD)])], ErrorCode.INVALID_TIMESTAMP, [0, 1]),
    ("a record without a key is reported for its key, not its timestamp", COMPACTED_HOUR,
     [_batch([(None, OLD)])], ErrorCode.INVALID_RECORD, [0]),
    ("the first batch with a bad record decides; indexes are within it", COMPACTED,
     [_batch([(b"a", RIGHT), (b"b", RIGHT)]), _batch([(b"c", RIGHT), (None, RIGHT)]), _batch([(None, RIGHT)])],
     ErrorCode.INVALID_RECORD, [1]),
    ("no timestamp (-1) is never out of range", HOUR, [_batch([(None, -1)])], None, []),
    ("a LogAppendTime topic does not bound producers' timestamps", APPEND_TIME, [_batch([(None, OLD)])], None, []),
    ("a producer's LogAppendTime batch on a LogAppendTime topic", APPEND_TIME,
     [_stamped(_batch([(None, RIGHT), (None, RIGHT)]))], ErrorCode.INVALID_TIMESTAMP, [0, 1]),
    ("a producer's LogAppendTime batch on a CreateTime topic, with a timestamp in range", HOUR,
     [_stamped(_batch([(None, RIGHT)]))], None, []),
]


@pytest.mark.parametrize("what, rules, batches, code, bad", CASES, ids=[c[0] for c in CASES])
def test_invalid_records_table(what, rules, batches, code, bad):
    rejection = _check(b"".join(batches), rules)
    if code is None:
        assert rejection is None
        return
    assert rejection is not None
    assert rejection.code == code
    assert [i for i, _ in rejection.record_errors] == bad
    assert all(text for _, text in rejection.record_errors)


def test_the_messages_say_what_is_wrong():
    keys = _check(_batch([(None, RIGHT)] * 5), COMPACTED)
    assert keys is not None and "5 record(s) rejected" in keys.message
    assert "record 2:" in keys.message and "record 3:" not in keys.message   # the first three, as Kafka's
    assert "without a key" in keys.record_errors[0][1] and "t-0" in keys.record_errors[0][1]
    times = _check(_batch([(None, OLD)]), HOUR)
    assert times is not None and "invalid timestamp" in times.message
    assert str(OLD) in times.record_errors[0][1] and str(NOW - 3_600_000) in times.record_errors[0][1]


def test_a_dr_copy_keeps_its_source_stamps():
    stamped = _stamped(_batch([(None, RIGHT)]))
    batches = scan_batches(stamped, from_client=True)
    assert needs_reading(PLAIN, batches) and not needs_reading(PLAIN, batches, trust_stamps=True)
    assert _check(stamped, APPEND_TIME, trust_stamps=True) is None


def test_records_are_read_only_when_a_rule_asks():
    plain = scan_batches(_batch([(None, OLD)]), from_client=True)
    assert not needs_reading(PLAIN, plain)
    assert not needs_reading(APPEND_TIME, plain)
    assert needs_reading(COMPACTED, plain) and needs_reading(HOUR, plain)


def test_unreadable_records_are_invalid_record_without_a_list():
    data = bytearray(_batch([(b"k", RIGHT)]))
    data[61] = 0x7f      # the first record's length now runs past the batch
    struct.pack_into(">I", data, CRC_AT, crc32c(memoryview(data)[CRC_START:]))
    rejection = _check(bytes(data), COMPACTED)
    assert rejection is not None and rejection.code == ErrorCode.INVALID_RECORD and rejection.record_errors == ()
    assert "cannot be read" in rejection.message
