"""The records of `__transaction_state`, in Kafka's own format.

A key is an int16 version (0) and TransactionLogKey (the transactional id); a value is an
int16 version and TransactionLogValue, or null: the tombstone of an expired id. We write value
version 0, as Kafka does until the finalized feature transaction.version reaches 1, and read
both versions (v1 only adds tagged fields for KIP-890 part 2, which we do not act on). Because
the layout is Kafka's, Kafka's tools read our records and we read Kafka-written ones.

The last record per key wins, so the partition is compacted, and loading it is reading it
from the start.
"""
from __future__ import annotations

import struct
from collections import defaultdict
from typing import Optional

from core.protocol.errors import DecodeError
from core.protocol.messages import DATA, TransactionLogKey, TransactionLogValue

from .state import TxnMetadata, TxnState

TOPIC = "__transaction_state"
KEY_VERSION = 0
VALUE_VERSION = 0

_KEY = DATA["TransactionLogKey"]
_VALUE = DATA["TransactionLogValue"]
_VERSION = struct.Struct(">h")


def key_bytes(transactional_id: str) -> bytes:
    return _VERSION.pack(KEY_VERSION) + _KEY.encode(KEY_VERSION, TransactionLogKey(transactional_id=transactional_id))


def value_bytes(meta: TxnMetadata) -> bytes:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic, index in sorted(meta.partitions):
        by_topic[topic].append(index)
    partitions = None if meta.state is TxnState.EMPTY else [
        TransactionLogValue.PartitionsSchema(topic=t, partition_ids=ids) for t, ids in by_topic.items()]
    return _VERSION.pack(VALUE_VERSION) + _VALUE.encode(VALUE_VERSION, TransactionLogValue(
        producer_id=meta.producer_id, producer_epoch=meta.producer_epoch, transaction_timeout_ms=meta.timeout_ms,
        transaction_status=int(meta.state), transaction_partitions=partitions,
        transaction_last_update_timestamp_ms=meta.last_update_ms,
        transaction_start_timestamp_ms=meta.start_ms))


def _split(blob, what: str) -> tuple[int, memoryview]:
    view = memoryview(blob)
    if len(view) < 2:
        raise DecodeError(f"{what} is {len(view)} bytes; it needs a 2-byte version")
    version = _VERSION.unpack_from(view)[0]
    if version < 0:
        raise DecodeError(f"{what} has negative version {version}")
    return version, view


def decode_key(blob) -> Optional[str]:
    """The transactional id, or None for a key version this broker does not know."""
    version, view = _split(blob, f"{TOPIC} key")
    if version > KEY_VERSION:
        return None
    k = _KEY.decode(version, view, 2)
    if isinstance(k, tuple):
        k = k[0]
    assert isinstance(k, TransactionLogKey)
    return k.transactional_id


def decode_value(transactional_id: str, blob) -> Optional[TxnMetadata]:
    """None for a tombstone."""
    if blob is None:
        return None
    version, view = _split(blob, f"{TOPIC} value")
    newest = _VALUE.spec.versions.high
    assert newest is not None   # a data struct's versions are a closed range
    # a newer value is read with our newest layout: later versions only add tagged fields
    v = _VALUE.decode(min(version, newest), view, 2, whole=version <= newest)
    if isinstance(v, tuple):
        v = v[0]
    assert isinstance(v, TransactionLogValue)
    try:
        state = TxnState(v.transaction_status)
    except ValueError:
        raise DecodeError(f"{TOPIC} value for {transactional_id!r}: unknown status {v.transaction_status}") from None
    partitions = frozenset((p.topic, i) for p in v.transaction_partitions or () for i in p.partition_ids)
    return TxnMetadata(transactional_id, v.producer_id, v.producer_epoch, v.transaction_timeout_ms, state,
                       partitions, v.transaction_start_timestamp_ms, v.transaction_last_update_timestamp_ms)
