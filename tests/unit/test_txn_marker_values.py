"""Transaction markers' values with Seaway's extension (core/protocol/txn_markers.py): Kafka's
six bytes come first and unchanged, so Kafka's readers see the same marker; what follows names
the transaction and counts its partitions per topic; garbage is a DecodeError, never a crash."""
from __future__ import annotations

import struct

import pytest

from core.broker.producer_state import COMMIT, read_end_txn_marker
from core.broker.transactions.markers import marker_batch
from core.protocol.errors import DecodeError
from core.protocol.records import iter_batch_headers
from core.protocol.txn_markers import (
    MAX_EXTENSION, COMMIT as COMMIT_TYPE, MarkerValue, TxnShape, decode_marker_value, encode_marker_value,
    read_marker)

SHAPE = TxnShape(1_796_000_000_123, (("__consumer_offsets", 1), ("orders", 3), ("påyments", 2)))


@pytest.mark.parametrize("shape, expected", [
    (None, MarkerValue(7, None)),                                   # a Kafka marker
    (TxnShape(-1, (("orders", 1),)), MarkerValue(7, None)),         # no start known: nothing added
    (SHAPE, MarkerValue(7, SHAPE)),
    (TxnShape(42, None), MarkerValue(7, TxnShape(42, None))),       # the counts left out
    (TxnShape(42, ()), MarkerValue(7, TxnShape(42, ()))),
])
def test_a_marker_value_round_trips_and_starts_with_kafkas_six_bytes(shape, expected):
    value = encode_marker_value(7, shape)
    assert value[:6] == struct.pack(">hi", 0, 7)       # what Kafka's EndTransactionMarker reads
    assert decode_marker_value(value) == expected


def test_a_list_too_long_to_repeat_in_every_partitions_marker_is_left_out_but_the_start_is_kept():
    many = TxnShape(5, tuple((f"topic-{i:04d}-" + "x" * 40, 1) for i in range(200)))
    value = encode_marker_value(3, many)
    assert len(value) <= 6 + MAX_EXTENSION
    assert decode_marker_value(value) == MarkerValue(3, TxnShape(5, None))


@pytest.mark.parametrize("value, why", [
    (b"\x00\x00\x00", "shorter than Kafka's"),
    (encode_marker_value(1, SHAPE)[:-3], "the last count cut short"),
    (encode_marker_value(1, SHAPE)[:20], "a topic name cut short"),
    (struct.pack(">hiqh", 0, 1, 5, 1) + struct.pack(">h", 30000) + b"ab", "a name longer than the value"),
    (struct.pack(">hiqh", 0, 1, 5, 1) + struct.pack(">h", 2) + b"\xff\xfe" + struct.pack(">i", 1), "not UTF-8"),
    (struct.pack(">hi", 0, 1) + b"\x01", "an extension of one byte"),
])
def test_a_garbled_extension_is_a_decode_error(value, why):
    with pytest.raises(DecodeError):
        decode_marker_value(value)


def test_a_marker_batch_names_its_transaction_and_the_brokers_reader_still_reads_it():
    batch = marker_batch(4001, 2, 9, True, 1_000, SHAPE)
    [info] = list(iter_batch_headers(batch))
    assert info.is_control and info.is_transactional and info.producer_id == 4001
    marker = read_end_txn_marker(batch, info)
    assert (marker.control_type, marker.coordinator_epoch) == (COMMIT, 9)
    control_type, value = read_marker(batch, info)
    assert control_type == COMMIT_TYPE and decode_marker_value(value) == MarkerValue(9, SHAPE)


def test_a_shape_counts_partitions_per_topic():
    assert TxnShape.of(10, {("b", 0), ("a", 3), ("b", 2), ("a", 0), ("c", 1)}) == \
        TxnShape(10, (("a", 2), ("b", 2), ("c", 1)))
