"""The transaction APIs' schemas (AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, WriteTxnMarkers,
TxnOffsetCommit, DescribeProducers, DescribeTransactions, ListTransactions) and the records of
__transaction_state: realistic messages at each API's lowest and highest version survive
encode -> decode field by field, fields a version lacks decode to Kafka's defaults, and a few
byte layouts written by hand from Kafka's JSON specs pin the wire format.
"""
from __future__ import annotations

import struct
from typing import TypeVar

import pytest

from core.protocol import messages as m
from core.protocol.api_keys import ApiKey
from core.protocol.codegen import Message, MessageCodec
from tests.support.codec_strategies import plain


M = TypeVar("M", bound=Message)


def decode_as(cls: type[M], codec: MessageCodec, version: int, data: bytes) -> M:
    back = codec.decode(version, data)
    assert type(back) is cls
    assert isinstance(back, cls)
    return back


def roundtrip(codec: MessageCodec, version: int, obj: M) -> M:
    data = codec.encode(version, obj)
    back = decode_as(type(obj), codec, version, data)
    assert codec.encode(version, back) == data
    return back


def req(key: int) -> MessageCodec:
    return m.API[key].request


def resp(key: int) -> MessageCodec:
    return m.API[key].response


def test_declared_version_ranges():
    assert {k: (m.API[k].min_version, m.API[k].max_version) for k in (24, 25, 26, 27, 28, 61, 65, 66)} == {
        ApiKey.ADD_PARTITIONS_TO_TXN: (0, 5), ApiKey.ADD_OFFSETS_TO_TXN: (0, 4), ApiKey.END_TXN: (0, 5),
        ApiKey.WRITE_TXN_MARKERS: (0, 1), ApiKey.TXN_OFFSET_COMMIT: (0, 4),
        ApiKey.DESCRIBE_PRODUCERS: (0, 0), ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
        ApiKey.LIST_TRANSACTIONS: (0, 1)}
    txn_log_value = m.DATA["TransactionLogValue"].spec
    assert (txn_log_value.versions.low, txn_log_value.versions.high) == (0, 1)
    assert txn_log_value.is_flexible(1) and not txn_log_value.is_flexible(0)


# --------------------------------------------------------------------------- AddPartitionsToTxn

APT = m.AddPartitionsToTxnRequest
APTR = m.AddPartitionsToTxnResponse


@pytest.mark.parametrize("version", [0, 3])
def test_add_partitions_to_txn_client_form(version):
    r = APT(v3_and_below_transactional_id="orders-tx", v3_and_below_producer_id=4001,
            v3_and_below_producer_epoch=7,
            v3_and_below_topics=[APT.AddPartitionsToTxnTopic(name="orders", partitions=[0, 2]),
                                 APT.AddPartitionsToTxnTopic(name="audit", partitions=[5])])
    back = roundtrip(req(24), version, r)
    assert back.v3_and_below_transactional_id == "orders-tx"
    assert back.v3_and_below_producer_id == 4001 and back.v3_and_below_producer_epoch == 7
    assert [(t.name, t.partitions) for t in back.v3_and_below_topics] == [("orders", [0, 2]), ("audit", [5])]
    assert back.transactions == []   # the batched form does not exist before v4

    res = APTR(throttle_time_ms=12, results_by_topic_v3_and_below=[APTR.AddPartitionsToTxnTopicResult(
        name="orders", results_by_partition=[
            APTR.AddPartitionsToTxnPartitionResult(partition_index=0, partition_error_code=0),
            APTR.AddPartitionsToTxnPartitionResult(partition_index=2, partition_error_code=51)])])
    rb = roundtrip(resp(24), version, res)
    assert rb.throttle_time_ms == 12 and rb.error_code == 0
    (topic,) = rb.results_by_topic_v3_and_below
    assert topic.name == "orders"
    assert [(p.partition_index, p.partition_error_code) for p in topic.results_by_partition] == [(0, 0), (2, 51)]
    assert rb.results_by_transaction == []


@pytest.mark.parametrize("version", [4, 5])
def test_add_partitions_to_txn_batched_broker_form(version):
    r = APT(transactions=[
        APT.AddPartitionsToTxnTransaction(
            transactional_id="orders-tx", producer_id=4001, producer_epoch=7, verify_only=True,
            topics=[APT.AddPartitionsToTxnTopic(name="orders", partitions=[0, 2])]),
        APT.AddPartitionsToTxnTransaction(
            transactional_id="billing-tx", producer_id=4002, producer_epoch=0, verify_only=False,
            topics=[APT.AddPartitionsToTxnTopic(name="billing", partitions=[1])])])
    back = roundtrip(req(24), version, r)
    assert [(t.transactional_id, t.producer_id, t.producer_epoch, t.verify_only,
             [(tp.name, tp.partitions) for tp in t.topics]) for t in back.transactions] == [
        ("orders-tx", 4001, 7, True, [("orders", [0, 2])]),
        ("billing-tx", 4002, 0, False, [("billing", [1])])]
    assert back.v3_and_below_transactional_id == "" and back.v3_and_below_topics == []

    res = APTR(throttle_time_ms=0, error_code=0, results_by_transaction=[APTR.AddPartitionsToTxnResult(
        transactional_id="orders-tx", topic_results=[APTR.AddPartitionsToTxnTopicResult(
            name="orders", results_by_partition=[
                APTR.AddPartitionsToTxnPartitionResult(partition_index=0, partition_error_code=0),
                APTR.AddPartitionsToTxnPartitionResult(partition_index=2, partition_error_code=120)])])])
    rb = roundtrip(resp(24), version, res)
    (txn,) = rb.results_by_transaction
    assert txn.transactional_id == "orders-tx"
    (topic,) = txn.topic_results
    assert topic.name == "orders"
    assert [(p.partition_index, p.partition_error_code) for p in topic.results_by_partition] == [(0, 0), (2, 120)]
    assert rb.results_by_topic_v3_and_below == []


def test_add_partitions_to_txn_v3_and_v4_differ_on_the_wire():
    """v3 (flexible, client form) starts with the compact transactional id; v4 with the compact
    array of transactions, then the (empty) client fields are absent."""
    v3 = APT(v3_and_below_transactional_id="t", v3_and_below_producer_id=1, v3_and_below_producer_epoch=2)
    assert req(24).encode(3, v3) == bytes.fromhex("0274" "0000000000000001" "0002" "01" "00")
    v4 = APT(transactions=[APT.AddPartitionsToTxnTransaction(transactional_id="t", producer_id=1,
                                                             producer_epoch=2, verify_only=True)])
    assert req(24).encode(4, v4) == bytes.fromhex(
        "02" "0274" "0000000000000001" "0002" "01" "01" "00" "00")
    # v0 (classic): int16-length string, int32-counted array.
    assert req(24).encode(0, v3) == bytes.fromhex("000174" "0000000000000001" "0002" "00000000")


# --------------------------------------------------------------------------- AddOffsetsToTxn


@pytest.mark.parametrize("version", [0, 4])
def test_add_offsets_to_txn(version):
    back = roundtrip(req(25), version, m.AddOffsetsToTxnRequest(
        transactional_id="orders-tx", producer_id=4001, producer_epoch=7, group_id="order-processor"))
    assert (back.transactional_id, back.producer_id, back.producer_epoch, back.group_id) == (
        "orders-tx", 4001, 7, "order-processor")
    rb = roundtrip(resp(25), version, m.AddOffsetsToTxnResponse(throttle_time_ms=3, error_code=51))
    assert (rb.throttle_time_ms, rb.error_code) == (3, 51)


# --------------------------------------------------------------------------- EndTxn


@pytest.mark.parametrize("version", [0, 5])
def test_end_txn(version):
    back = roundtrip(req(26), version, m.EndTxnRequest(
        transactional_id="orders-tx", producer_id=4001, producer_epoch=7, committed=True))
    assert (back.transactional_id, back.producer_id, back.producer_epoch, back.committed) == (
        "orders-tx", 4001, 7, True)
    rb = roundtrip(resp(26), version, m.EndTxnResponse(
        throttle_time_ms=0, error_code=0, producer_id=4001, producer_epoch=8))
    assert rb.error_code == 0
    if version >= 5:   # KIP-890 part 2: the bumped epoch comes back
        assert (rb.producer_id, rb.producer_epoch) == (4001, 8)
    else:              # absent before v5: Kafka's defaults
        assert (rb.producer_id, rb.producer_epoch) == (-1, -1)


def test_end_txn_v5_response_bytes():
    data = resp(26).encode(5, m.EndTxnResponse(throttle_time_ms=1, error_code=0, producer_id=9,
                                               producer_epoch=3))
    assert data == bytes.fromhex("00000001" "0000" "0000000000000009" "0003" "00")
    assert resp(26).encode(4, resp(26).decode(5, data)) == bytes.fromhex("00000001" "0000" "00")


# --------------------------------------------------------------------------- WriteTxnMarkers

WTM = m.WriteTxnMarkersRequest
WTMR = m.WriteTxnMarkersResponse


@pytest.mark.parametrize("version", [0, 1])
def test_write_txn_markers(version):
    r = WTM(markers=[
        WTM.WritableTxnMarker(producer_id=4001, producer_epoch=7, transaction_result=True, coordinator_epoch=3,
                              topics=[WTM.WritableTxnMarkerTopic(name="orders", partition_indexes=[0, 2]),
                                      WTM.WritableTxnMarkerTopic(name="__consumer_offsets", partition_indexes=[17])]),
        WTM.WritableTxnMarker(producer_id=4002, producer_epoch=1, transaction_result=False, coordinator_epoch=3,
                              topics=[WTM.WritableTxnMarkerTopic(name="billing", partition_indexes=[1])])])
    back = roundtrip(req(27), version, r)
    assert [(mk.producer_id, mk.producer_epoch, mk.transaction_result, mk.coordinator_epoch,
             [(t.name, t.partition_indexes) for t in mk.topics]) for mk in back.markers] == [
        (4001, 7, True, 3, [("orders", [0, 2]), ("__consumer_offsets", [17])]),
        (4002, 1, False, 3, [("billing", [1])])]

    res = WTMR(markers=[WTMR.WritableTxnMarkerResult(producer_id=4001, topics=[
        WTMR.WritableTxnMarkerTopicResult(name="orders", partitions=[
            WTMR.WritableTxnMarkerPartitionResult(partition_index=0, error_code=0),
            WTMR.WritableTxnMarkerPartitionResult(partition_index=2, error_code=6)])])])
    rb = roundtrip(resp(27), version, res)
    (marker,) = rb.markers
    assert marker.producer_id == 4001
    (topic,) = marker.topics
    assert topic.name == "orders"
    assert [(p.partition_index, p.error_code) for p in topic.partitions] == [(0, 0), (2, 6)]


def test_write_txn_markers_v1_carries_seaways_transaction_fields_tagged_and_v0_drops_them():
    """core/protocol/txn_markers.py: the start time and per-topic partition counts ride in
    private tags (10000, 10001) that a Kafka broker skips; without them the bytes are Kafka's."""
    def marker(**seaway):
        return WTM(markers=[WTM.WritableTxnMarker(
            producer_id=4001, producer_epoch=7, transaction_result=True, coordinator_epoch=3,
            topics=[WTM.WritableTxnMarkerTopic(name="orders", partition_indexes=[0])], **seaway)])
    plain = req(27).encode(1, marker())
    tagged = req(27).encode(1, marker(seaway_transaction_start_ms=1_796_000_000_123, seaway_transaction_topics=[
        WTM.SeawayTransactionTopic(name="orders", partition_count=3),
        WTM.SeawayTransactionTopic(name="__consumer_offsets", partition_count=1)]))
    assert tagged[:len(plain) - 2] == plain[:-2]       # the same up to the marker's tag buffer
    back = decode_as(WTM, req(27), 1, tagged)
    (mk,) = back.markers
    assert mk.seaway_transaction_start_ms == 1_796_000_000_123
    assert [(t.name, t.partition_count) for t in mk.seaway_transaction_topics] == [("orders", 3), ("__consumer_offsets", 1)]
    (old,) = decode_as(WTM, req(27), 0, req(27).encode(0, back)).markers
    assert (old.seaway_transaction_start_ms, old.seaway_transaction_topics) == (-1, [])
    assert decode_as(WTM, req(27), 1, plain).markers[0].seaway_transaction_start_ms == -1


# --------------------------------------------------------------------------- TxnOffsetCommit

TOC = m.TxnOffsetCommitRequest
TOCR = m.TxnOffsetCommitResponse


def _txn_offset_commit() -> TOC:
    return TOC(transactional_id="orders-tx", group_id="order-processor", producer_id=4001, producer_epoch=7,
               generation_id=12, member_id="consumer-1-4f2a", group_instance_id="host-a",
               topics=[TOC.TxnOffsetCommitRequestTopic(name="orders", partitions=[
                   TOC.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=1500,
                                                       committed_leader_epoch=4, committed_metadata="m"),
                   TOC.TxnOffsetCommitRequestPartition(partition_index=2, committed_offset=77,
                                                       committed_leader_epoch=4, committed_metadata=None)])])


def test_txn_offset_commit_v3_and_v4_carry_the_member():
    for version in (3, 4):
        back = roundtrip(req(28), version, _txn_offset_commit())
        assert plain(back) == plain(_txn_offset_commit())
        assert (back.generation_id, back.member_id, back.group_instance_id) == (12, "consumer-1-4f2a", "host-a")
        (topic,) = back.topics
        assert [(p.partition_index, p.committed_offset, p.committed_leader_epoch, p.committed_metadata)
                for p in topic.partitions] == [(0, 1500, 4, "m"), (2, 77, 4, None)]


def test_txn_offset_commit_v0_drops_what_it_lacks():
    back = roundtrip(req(28), 0, _txn_offset_commit())
    assert (back.transactional_id, back.group_id, back.producer_id, back.producer_epoch) == (
        "orders-tx", "order-processor", 4001, 7)
    # v3+ member fields and the v2+ leader epoch decode to Kafka's defaults.
    assert (back.generation_id, back.member_id, back.group_instance_id) == (-1, "", None)
    assert [(p.partition_index, p.committed_offset, p.committed_leader_epoch, p.committed_metadata)
            for p in back.topics[0].partitions] == [(0, 1500, -1, "m"), (2, 77, -1, None)]


@pytest.mark.parametrize("version", [0, 4])
def test_txn_offset_commit_response(version):
    rb = roundtrip(resp(28), version, TOCR(throttle_time_ms=5, topics=[TOCR.TxnOffsetCommitResponseTopic(
        name="orders", partitions=[TOCR.TxnOffsetCommitResponsePartition(partition_index=0, error_code=0),
                                   TOCR.TxnOffsetCommitResponsePartition(partition_index=2, error_code=22)])]))
    assert rb.throttle_time_ms == 5
    assert [(p.partition_index, p.error_code) for p in rb.topics[0].partitions] == [(0, 0), (2, 22)]


# --------------------------------------------------------------------------- admin: describe/list

DP = m.DescribeProducersRequest
DPR = m.DescribeProducersResponse


def test_describe_producers_v0():
    back = roundtrip(req(61), 0, DP(topics=[DP.TopicRequest(name="orders", partition_indexes=[0, 1])]))
    assert [(t.name, t.partition_indexes) for t in back.topics] == [("orders", [0, 1])]
    res = DPR(throttle_time_ms=0, topics=[DPR.TopicResponse(name="orders", partitions=[
        DPR.PartitionResponse(partition_index=0, error_code=0, error_message=None, active_producers=[
            DPR.ProducerState(producer_id=4001, producer_epoch=7, last_sequence=41, last_timestamp=1_700_000_000_000,
                              coordinator_epoch=3, current_txn_start_offset=1200)]),
        DPR.PartitionResponse(partition_index=1, error_code=6, error_message="not the leader")])])
    rb = roundtrip(resp(61), 0, res)
    p0, p1 = rb.topics[0].partitions
    (ps,) = p0.active_producers
    assert (ps.producer_id, ps.producer_epoch, ps.last_sequence, ps.last_timestamp, ps.coordinator_epoch,
            ps.current_txn_start_offset) == (4001, 7, 41, 1_700_000_000_000, 3, 1200)
    assert (p1.partition_index, p1.error_code, p1.error_message, p1.active_producers) == (1, 6, "not the leader", [])


def test_describe_producers_producer_state_defaults():
    ps = DPR.ProducerState()
    assert (ps.last_sequence, ps.last_timestamp, ps.current_txn_start_offset) == (-1, -1, -1)


DT = m.DescribeTransactionsRequest
DTR = m.DescribeTransactionsResponse


def test_describe_transactions_v0():
    back = roundtrip(req(65), 0, DT(transactional_ids=["orders-tx", "gone-tx"]))
    assert back.transactional_ids == ["orders-tx", "gone-tx"]
    res = DTR(throttle_time_ms=0, transaction_states=[
        DTR.TransactionState(error_code=0, transactional_id="orders-tx", transaction_state="Ongoing",
                             transaction_timeout_ms=60000, transaction_start_time_ms=1_700_000_000_000,
                             producer_id=4001, producer_epoch=7,
                             topics=[DTR.TopicData(topic="orders", partitions=[0, 2])]),
        DTR.TransactionState(error_code=105, transactional_id="gone-tx", transaction_state="",
                             transaction_start_time_ms=-1, producer_id=-1, producer_epoch=-1)])
    rb = roundtrip(resp(65), 0, res)
    s0, s1 = rb.transaction_states
    assert (s0.error_code, s0.transactional_id, s0.transaction_state, s0.transaction_timeout_ms,
            s0.transaction_start_time_ms, s0.producer_id, s0.producer_epoch) == (
        0, "orders-tx", "Ongoing", 60000, 1_700_000_000_000, 4001, 7)
    assert [(t.topic, t.partitions) for t in s0.topics] == [("orders", [0, 2])]
    assert (s1.error_code, s1.transactional_id, s1.producer_id, s1.topics) == (105, "gone-tx", -1, [])


LT = m.ListTransactionsRequest
LTR = m.ListTransactionsResponse


@pytest.mark.parametrize("version", [0, 1])
def test_list_transactions(version):
    back = roundtrip(req(66), version, LT(state_filters=["Ongoing", "PrepareCommit"], producer_id_filters=[4001],
                                          duration_filter=30000))
    assert back.state_filters == ["Ongoing", "PrepareCommit"] and back.producer_id_filters == [4001]
    assert back.duration_filter == (30000 if version >= 1 else -1)
    res = LTR(throttle_time_ms=0, error_code=0, unknown_state_filters=["Bogus"], transaction_states=[
        LTR.TransactionState(transactional_id="orders-tx", producer_id=4001, transaction_state="Ongoing")])
    rb = roundtrip(resp(66), version, res)
    assert rb.unknown_state_filters == ["Bogus"]
    assert [(s.transactional_id, s.producer_id, s.transaction_state) for s in rb.transaction_states] == [
        ("orders-tx", 4001, "Ongoing")]


# --------------------------------------------------------------------------- __transaction_state

TLV = m.TransactionLogValue


def _txn_log_value() -> TLV:
    return TLV(producer_id=4001, previous_producer_id=3999, next_producer_id=4002, producer_epoch=7,
               transaction_timeout_ms=60000, transaction_status=1,   # Ongoing
               transaction_partitions=[TLV.PartitionsSchema(topic="orders", partition_ids=[0, 2]),
                                       TLV.PartitionsSchema(topic="__consumer_offsets", partition_ids=[17])],
               transaction_last_update_timestamp_ms=1_700_000_000_500,
               transaction_start_timestamp_ms=1_700_000_000_000, client_transaction_version=2)


def test_transaction_log_key():
    codec = m.DATA["TransactionLogKey"]
    data = codec.encode(0, m.TransactionLogKey(transactional_id="orders-tx"))
    assert data == struct.pack(">h", 9) + b"orders-tx"
    assert decode_as(m.TransactionLogKey, codec, 0, data).transactional_id == "orders-tx"


def test_transaction_log_value_v1_keeps_the_kip_890_tagged_fields():
    back = roundtrip(m.DATA["TransactionLogValue"], 1, _txn_log_value())
    assert plain(back) == plain(_txn_log_value())
    assert (back.previous_producer_id, back.next_producer_id, back.client_transaction_version) == (3999, 4002, 2)
    assert back.transaction_partitions is not None
    assert [(p.topic, p.partition_ids) for p in back.transaction_partitions] == [
        ("orders", [0, 2]), ("__consumer_offsets", [17])]


def test_transaction_log_value_v0():
    back = roundtrip(m.DATA["TransactionLogValue"], 0, _txn_log_value())
    assert (back.producer_id, back.producer_epoch, back.transaction_timeout_ms, back.transaction_status,
            back.transaction_last_update_timestamp_ms, back.transaction_start_timestamp_ms) == (
        4001, 7, 60000, 1, 1_700_000_000_500, 1_700_000_000_000)
    assert back.transaction_partitions is not None
    assert [(p.topic, p.partition_ids) for p in back.transaction_partitions] == [
        ("orders", [0, 2]), ("__consumer_offsets", [17])]
    # v0 has no tagged fields: they decode to Kafka's defaults.
    assert (back.previous_producer_id, back.next_producer_id, back.client_transaction_version) == (-1, -1, 0)


def test_transaction_log_value_bytes():
    """Empty transaction (null partitions). v0: classic types, null array = int32 -1. v1: compact
    types, null array = uvarint 0, then tagged fields in tag order: PreviousProducerId (tag 0),
    NextProducerId (1), ClientTransactionVersion (2); fields at their default are not written."""
    value = TLV(producer_id=5, producer_epoch=1, transaction_timeout_ms=1000, transaction_status=0,
                transaction_partitions=None, transaction_last_update_timestamp_ms=2,
                transaction_start_timestamp_ms=-1)
    fixed = "0000000000000005" "0001" "000003e8" "00"
    times = "0000000000000002" "ffffffffffffffff"
    codec = m.DATA["TransactionLogValue"]
    assert codec.encode(0, value) == bytes.fromhex(fixed + "ffffffff" + times)
    assert codec.encode(1, value) == bytes.fromhex(fixed + "00" + times + "00")
    value.next_producer_id = 6
    value.client_transaction_version = 2
    assert codec.encode(1, value) == bytes.fromhex(
        fixed + "00" + times + "02" + "01" "08" "0000000000000006" + "02" "02" "0002")
    back = decode_as(TLV, codec, 1, codec.encode(1, value))
    assert back.transaction_partitions is None
    assert (back.previous_producer_id, back.next_producer_id, back.client_transaction_version) == (-1, 6, 2)
