"""Raw Kafka requests over a socket to a node (anything with a `port`), with our own codec and
no client library in between: a frame is built and read byte for byte, so a test sees exactly
what the node answers, or that it closed the connection."""
from __future__ import annotations

import socket
import struct
import time

from core.protocol import messages as m
from core.protocol.errors import ErrorCode


def frame(api_key: int, version: int, body, correlation_id: int = 7, header_version: int | None = None) -> bytes:
    api = m.API[api_key]
    hv = api.request_header_version(version) if header_version is None else header_version
    header = m.REQUEST_HEADER.encode(hv, m.RequestHeader(request_api_key=api_key, request_api_version=version,
                                                         correlation_id=correlation_id, client_id="bad-input-test"))
    payload = header + (body if isinstance(body, bytes) else api.request.encode(version, body))
    return struct.pack(">i", len(payload)) + payload


def connect(node) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", node.port), timeout=10)
    return s


def read_frame(s: socket.socket) -> bytes | None:
    """The next response frame, or None if the node closed the connection."""
    head = b""
    while len(head) < 4:
        chunk = s.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    (size,) = struct.unpack(">i", head)
    data = b""
    while len(data) < size:
        chunk = s.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def call(node, api_key: int, version: int, body):
    with connect(node) as s:
        s.sendall(frame(api_key, version, body))
        data = read_frame(s)
    assert data is not None, "node closed the connection instead of answering"
    api = m.API[api_key]
    hdr, pos = m.RESPONSE_HEADER.decode(api.response_header_version(version), data, whole=False)
    assert hdr.correlation_id == 7
    return api.response.decode(version, data, pos)


def create_topic(node, name: str, partitions: int = 1) -> None:
    req = m.CreateTopicsRequest(topics=[m.CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1)], timeout_ms=5000)
    resp = call(node, 19, 7, req)
    assert resp.topics[0].error_code in (0, ErrorCode.TOPIC_ALREADY_EXISTS)


def produce(node, topic: str, records: bytes, version: int = 9, partition: int = 0):
    req = m.ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[m.ProduceRequest.TopicProduceData(
        name=topic, partition_data=[m.ProduceRequest.PartitionProduceData(index=partition, records=records)])])
    resp = call(node, 0, version, req)
    return resp.responses[0].partition_responses[0]


def roundtrip(s: socket.socket, api_key: int, version: int, body, correlation_id: int = 7):
    """One request on an open connection: its decoded response, or None if the node closed
    the connection instead (the state of the connection is the test's to check)."""
    s.sendall(frame(api_key, version, body, correlation_id))
    data = read_frame(s)
    if data is None:
        return None
    api = m.API[api_key]
    hdr, pos = m.RESPONSE_HEADER.decode(api.response_header_version(version), data, whole=False)
    assert hdr.correlation_id == correlation_id
    response, _ = api.response.decode(version, data, pos, whole=False)
    return response


def closed_without_answer(s: socket.socket) -> bool:
    """True once the node has closed the connection, False if it sent bytes first."""
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True



def check_reauthentication(s: socket.socket, session_ms: int, correlation_id: int = 100) -> None:
    """KIP-368's rules on a connection logged in as alice (PLAIN, alice-secret) with sessions
    of `session_ms`, the same for a broker and for the gateway in front of one: logging in
    again in time keeps the connection past the first session's end, and logging in again as
    bob is refused with Kafka's message and closes it."""
    handshake = m.SaslHandshakeRequest(mechanism="PLAIN")
    time.sleep(session_ms / 1000 * 0.6)
    assert roundtrip(s, m.ApiKey.SASL_HANDSHAKE, 1, handshake, correlation_id).error_code == 0
    again = roundtrip(s, m.ApiKey.SASL_AUTHENTICATE, 2,
                      m.SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00alice-secret"), correlation_id + 1)
    assert again.error_code == 0 and again.session_lifetime_ms == session_ms
    time.sleep(session_ms / 1000 * 0.6)      # past the first session's end, inside the second's
    assert roundtrip(s, m.ApiKey.METADATA, 1, m.MetadataRequest(topics=[]), correlation_id + 2) is not None
    roundtrip(s, m.ApiKey.SASL_HANDSHAKE, 1, handshake, correlation_id + 3)
    as_bob = roundtrip(s, m.ApiKey.SASL_AUTHENTICATE, 2,
                       m.SaslAuthenticateRequest(auth_bytes=b"\x00bob\x00bob-secret"), correlation_id + 4)
    assert as_bob.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "Cannot change principals during re-authentication from User.alice: User.bob" in as_bob.error_message
    assert closed_without_answer(s)
