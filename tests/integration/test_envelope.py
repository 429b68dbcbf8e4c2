"""Envelope (KIP-590) on a client listener (core/broker/handlers/envelope.py): a trusted proxy
forwards a client's request, and the broker authorizes it as the client's principal, never as
the proxy's. Real node, SASL PLAIN, the StandardAuthorizer."""
from __future__ import annotations

import anyio
import pytest
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                   ResourcePatternType, ResourceType)

from core.client.connection import BrokerConnection
from core.client.sasl import SaslCredentials
from core.gateway import routing
from core.protocol import messages as m
from core.protocol.envelope import encode_address, encode_principal
from core.protocol.errors import ErrorCode as E
from core.protocol.records import build_batch
from tests.support.node import SeawayNode, free_port

pytestmark = pytest.mark.timeout(300)
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_gateway="gateway-secret" user_alice="alice-secret" user_bob="bob-secret";')


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    plain, sasl = free_port(), free_port()
    n = SeawayNode(tmp_path_factory.mktemp("envelope-node"), {
        "listeners": f"PLAIN://127.0.0.1:{plain},SASL://127.0.0.1:{sasl}",
        "listener.security.protocol.map": "PLAIN:PLAINTEXT,SASL:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS"},
        port=plain).start()
    n.sasl_port = sasl
    admin = AdminClient({"bootstrap.servers": n.bootstrap})
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in ("alices", "secret")]).values():
        future.result(timeout=20)
    acls = [AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:gateway", "*",
                       AclOperation.CLUSTER_ACTION, AclPermissionType.ALLOW),
            AclBinding(ResourceType.TOPIC, "alices", ResourcePatternType.LITERAL, "User:alice", "*",
                       AclOperation.WRITE, AclPermissionType.ALLOW),
            AclBinding(ResourceType.TOPIC, "alices", ResourcePatternType.LITERAL, "User:alice", "*",
                       AclOperation.DESCRIBE, AclPermissionType.ALLOW)]
    for future in admin.create_acls(acls).values():
        future.result(timeout=20)
    yield n
    n.stop()


def produce(topic: str, acks: int = -1, correlation_id: int = 11) -> bytearray:
    P = m.ProduceRequest
    batch = build_batch([(b"k", b"v", [], 1000)])
    return routing.encode_request(0, 9, correlation_id, "app", P(transactional_id=None, acks=acks, timeout_ms=5000,
                                  topic_data=[P.TopicProduceData(name=topic, partition_data=[
                                      P.PartitionProduceData(index=0, records=batch)])]))


async def envelope(node, user: str, inner: bytes, principal: bytes | None = None) -> m.EnvelopeResponse:
    conn = BrokerConnection("127.0.0.1", node.sasl_port, sasl=SaslCredentials("PLAIN", user, f"{user}-secret"))
    await conn.connect()
    try:
        request = m.EnvelopeRequest(request_data=inner,
                                    request_principal=encode_principal("User:alice") if principal is None else principal,
                                    client_host_address=encode_address("127.0.0.1"))
        answer = await conn.send(request, api_key=58, version=0)
        # The carrying connection stays usable whatever was inside.
        assert (await conn.send(m.MetadataRequest(topics=[], allow_auto_topic_creation=False), api_key=3)).brokers
        return answer
    finally:
        await conn.close()


def inner_produce_error(answer: m.EnvelopeResponse, correlation_id: int = 11) -> int:
    assert answer.error_code == 0, answer
    got_correlation, body = routing.decode_response(0, 9, bytearray(answer.response_data))
    assert got_correlation == correlation_id
    return body.responses[0].partition_responses[0].error_code


def test_an_enveloped_request_is_authorized_as_the_client_it_names(node):
    # The gateway may forward; what alice may do, she does, and what she may not, she does not.
    assert inner_produce_error(anyio.run(envelope, node, "gateway", produce("alices"))) == E.NONE
    assert inner_produce_error(anyio.run(envelope, node, "gateway", produce("secret"))) == E.TOPIC_AUTHORIZATION_FAILED
    # Named as bob, who has no ACL: refused, though the gateway could have written as itself.
    as_bob = anyio.run(envelope, node, "gateway", produce("alices"), encode_principal("User:bob"))
    assert inner_produce_error(as_bob) == E.TOPIC_AUTHORIZATION_FAILED


def test_only_a_principal_allowed_cluster_action_may_send_an_envelope(node):
    answer = anyio.run(envelope, node, "alice", produce("alices"))
    assert (answer.error_code, answer.response_data) == (E.CLUSTER_AUTHORIZATION_FAILED, None)


@pytest.mark.parametrize("what, inner, principal, code", [
    ("an unreadable principal", None, b"\x00\x07garbage", E.PRINCIPAL_DESERIALIZATION_FAILURE),
    ("an envelope in an envelope", "nested", None, E.INVALID_REQUEST),
    ("authentication", "sasl", None, E.INVALID_REQUEST),
    ("a request that does not parse", b"\x00\x03\x00\x0c\x00\x00\x00\x01\xff\xff", None, E.INVALID_REQUEST),
    ("a frame too short for a header", b"\x00\x03", None, E.INVALID_REQUEST),
    ("an API the listener does not serve (Vote)", b"\x00\x34\x00\x00\x00\x00\x00\x01\x00\x00", None, E.INVALID_REQUEST),
])
def test_what_an_envelope_may_not_carry_is_refused_and_the_connection_stays(node, what, inner, principal, code):
    if inner is None:
        inner = produce("alices")
    elif inner == "nested":
        inner = routing.encode_request(58, 0, 3, "x", m.EnvelopeRequest(request_data=produce("alices"),
                                                                        request_principal=None, client_host_address=b""))
    elif inner == "sasl":
        inner = routing.encode_request(17, 1, 3, "x", m.SaslHandshakeRequest(mechanism="PLAIN"))
    answer = anyio.run(envelope, node, "gateway", inner, principal)
    assert answer.error_code == code, what


def test_acks_0_has_no_answer_inside_the_envelope(node):
    answer = anyio.run(envelope, node, "gateway", produce("alices", acks=0))
    assert (answer.error_code, answer.response_data) == (E.NONE, None)
