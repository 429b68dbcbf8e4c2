"""Where the gateway sends each request while it follows a DR pair's decision, and the answers it
gives itself (core/gateway/routing.py), by tables and through the real codec."""
from __future__ import annotations

import pytest

from core.gateway import routing
from core.gateway.proxy import _acks
from core.gateway.routing import Answer, Forward, HoldJoin, View, route, view_of
from core.protocol import messages as m
from core.protocol.api_keys import ApiKey as K
from core.protocol.dr import DRAINING, SERVING, SWITCHING, Decision
from core.protocol.errors import ErrorCode

EU, US = "eu-1", "us-1"
PAIR = (EU, US)


def decision(active: str, epoch: int, phase: str) -> Decision:
    return Decision(f"{EU}~{US}", epoch, "region", active, "host:1", phase, 0.0, "test")


# What the gateway serves after each decision, from what it served before.
@pytest.mark.parametrize("before, d, after", [
    (View(EU), None, View(EU)),                                           # nothing decided yet
    (View(EU), decision(EU, 1, DRAINING), View(EU, None, 1, draining=True)),  # a planned failover fences EU
    (View(EU, None, 1, draining=True), decision(US, 1, SWITCHING), View(US, EU, 1)),  # US takes writes
    (View(EU, None, 1, draining=True), decision(EU, 1, SERVING), View(EU, None, 1)),  # rolled back
    (View(EU), decision(US, 1, SWITCHING), View(US, EU, 1)),              # `draining` missed
    (View(US, EU, 1), decision(US, 1, SERVING), View(US, None, 1)),       # ... and ends
    (View(US, EU, 1), decision(US, 1, SWITCHING), View(US, EU, 1)),       # the same record read again
    (View(EU), decision(US, 1, SERVING), View(US, None, 1)),              # unplanned, or `switching` missed
    (View(US, None, 1), decision(EU, 2, SWITCHING), View(EU, US, 2)),     # failing back
    (View(US, None, 3), decision(EU, 2, SERVING), View(US, None, 3)),     # an older epoch changes nothing
    (View(EU), decision("ap-1", 5, SERVING), View(EU)),                   # a cluster outside the pair
    (View(EU), decision(EU, 1, SWITCHING), View(EU, US, 1)),              # started mid-move: groups are on US
    (View(EU), decision(US, 1, "unknown-phase"), View(EU)),
])
def test_the_view_a_decision_asks_for(before, d, after):
    assert view_of(d, PAIR, before) == after


MOVING = View(US, EU, 4)
DRAINING_EU = View(EU, None, 4, draining=True)


@pytest.mark.parametrize("api, view, expected", [
    (K.PRODUCE, View(EU), Forward(EU)),
    (K.FETCH, View(EU), Forward(EU)),
    (K.HEARTBEAT, View(EU), Forward(EU)),
    (K.JOIN_GROUP, View(US, None, 2), Forward(US)),
    # During a move: writes and metadata to the new side at once...
    (K.PRODUCE, MOVING, Forward(US)),
    (K.METADATA, MOVING, Forward(US)),
    (K.INIT_PRODUCER_ID, MOVING, Forward(US)),
    (K.CREATE_TOPICS, MOVING, Forward(US)),
    # ... a group's commits and lookups to the old side, where its generation is valid ...
    (K.OFFSET_COMMIT, MOVING, Forward(EU)),
    (K.OFFSET_FETCH, MOVING, Forward(EU)),
    (K.FIND_COORDINATOR, MOVING, Forward(EU)),
    (K.LEAVE_GROUP, MOVING, Forward(EU)),
    (K.LIST_OFFSETS, MOVING, Forward(EU)),
    # ... members told to rejoin, and their joins held ...
    (K.HEARTBEAT, MOVING, Answer()),
    (K.SYNC_GROUP, MOVING, Answer()),
    (K.JOIN_GROUP, MOVING, HoldJoin(EU)),
    # ... and fetches answered empty after their wait, capped.
    (K.FETCH, MOVING, Answer(0.5)),
    # While the old side drains, consumers are moved already; everything else stays there.
    (K.HEARTBEAT, DRAINING_EU, Answer()),
    (K.JOIN_GROUP, DRAINING_EU, HoldJoin(EU)),
    (K.FETCH, DRAINING_EU, Answer(0.5)),
    (K.OFFSET_COMMIT, DRAINING_EU, Forward(EU)),
    (K.PRODUCE, DRAINING_EU, Forward(EU)),
    (K.METADATA, DRAINING_EU, Forward(EU)),
])
def test_where_a_request_goes(api, view, expected):
    assert route(api, view, max_wait_ms=500) == expected


@pytest.mark.parametrize("max_wait_ms, delay_s", [(0, 0.0), (100, 0.1), (500, 0.5), (30_000, 0.5), (-1, 0.0)])
def test_a_fetch_during_a_move_waits_its_own_max_wait_but_never_long(max_wait_ms, delay_s):
    assert route(K.FETCH, MOVING, max_wait_ms=max_wait_ms) == Answer(delay_s)


def frame_of(api_key: int, version: int, body, correlation_id: int = 77, client_id: str = "app") -> bytearray:
    return routing.encode_request(api_key, version, correlation_id, client_id, body)


@pytest.mark.parametrize("api_key, version", [(K.HEARTBEAT, v) for v in range(5)] + [(K.SYNC_GROUP, v) for v in range(6)])
def test_members_are_told_to_rejoin_in_the_version_they_asked(api_key, version):
    head = routing.RequestHead(api_key, version, 77)
    correlation_id, body = routing.decode_response(api_key, version, routing.rebalance_answer(head))
    assert (correlation_id, body.error_code) == (77, ErrorCode.REBALANCE_IN_PROGRESS)


@pytest.mark.parametrize("version", [4, 7, 11])
def test_an_empty_fetch_answer_names_every_partition_asked_for(version):
    F = m.FetchRequest
    request = F(max_wait_ms=500, min_bytes=1, topics=[
        F.FetchTopic(topic="orders", partitions=[F.FetchPartition(partition=p, fetch_offset=10, partition_max_bytes=1)
                                                 for p in (0, 2)]),
        F.FetchTopic(topic="audit", partitions=[F.FetchPartition(partition=1, fetch_offset=0, partition_max_bytes=1)])],
        forgotten_topics_data=[])
    head = routing.RequestHead(K.FETCH, version, 9)
    correlation_id, body = routing.decode_response(K.FETCH, version, routing.empty_fetch_answer(head, request))
    assert correlation_id == 9 and body.error_code == 0
    got = {(t.topic, p.partition_index): (p.error_code, p.records or b"") for t in body.responses for p in t.partitions}
    assert got == {("orders", 0): (0, b""), ("orders", 2): (0, b""), ("audit", 1): (0, b"")}
    # A session the client had is not continued (0: none), so its next fetch names everything.
    if version >= 7:
        assert body.session_id == 0


@pytest.mark.parametrize("version", [0, 5, 6, 9])
def test_a_held_join_goes_to_the_new_side_as_a_new_members_with_the_clients_own_header(version):
    J = m.JoinGroupRequest
    join = J(group_id="billing", session_timeout_ms=45000, rebalance_timeout_ms=300000, member_id="rdkafka-1",
             group_instance_id="inst-1" if version >= 5 else None, protocol_type="consumer",
             protocols=[J.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01")])
    frame = frame_of(K.JOIN_GROUP, version, join, correlation_id=31, client_id="billing-0")
    head = routing.request_head(frame)
    header, decoded, body_at = routing.decode_request(head, frame)
    leave_version, leave = routing.leave_request(decoded)
    assert [(x.member_id, x.group_instance_id) for x in leave.members] == \
        [("rdkafka-1", "inst-1" if version >= 5 else None)]
    m.API[K.LEAVE_GROUP].request.encode(leave_version, leave)       # encodable as sent
    routing.join_as_new_member(decoded)
    again = routing.encode_request_body(head, frame, body_at, decoded)
    header2, rejoin, _ = routing.decode_request(routing.request_head(again), again)
    assert (header2.correlation_id, header2.client_id) == (31, "billing-0")
    assert rejoin.member_id == "" and rejoin.group_id == "billing" and rejoin.protocols == decoded.protocols


def test_a_first_join_has_no_member_to_take_out_of_the_old_group():
    J = m.JoinGroupRequest
    assert routing.leave_request(J(group_id="g", member_id="", group_instance_id=None)) is None


@pytest.mark.parametrize("version", range(3, 10))
@pytest.mark.parametrize("acks, transactional_id", [(0, None), (1, None), (-1, None), (-1, "txn-a"), (0, "")])
def test_acks_are_read_without_decoding_the_records(version, acks, transactional_id):
    P = m.ProduceRequest
    body = P(transactional_id=transactional_id, acks=acks, timeout_ms=1000, topic_data=[P.TopicProduceData(
        name="orders", partition_data=[P.PartitionProduceData(index=0, records=b"\x00" * 70)])])
    frame = frame_of(K.PRODUCE, version, body)
    assert _acks(routing.request_head(frame), frame) == acks


def test_a_frame_too_short_for_a_header_has_none():
    assert routing.request_head(b"\x00\x12\x00") is None
    assert routing.request_head(b"\x00\x12\x00\x03\x00\x00\x00\x07") == routing.RequestHead(18, 3, 7)
