"""One node's own view of its cluster: DescribeCluster (KIP-700; KIP-919's endpoint types)
asked of a single address over a connection of its own, never redirected to another node.

    answer = await describe_cluster_at("127.0.0.1", 9092, timeout_ms=5000)

Health checks need exactly this: what *this* node says (a container healthcheck, or every
broker of a cluster in turn, since a broker whose metadata image lags would hand a client a
partial cluster). Raises KafkaError or OSError when the node does not answer; an error code in
the answer is the caller's to judge.
"""
from __future__ import annotations

from core.protocol import messages as m

from .connection import BrokerConnection

BROKER_ENDPOINTS, CONTROLLER_ENDPOINTS = 1, 2


async def describe_cluster_at(host: str, port: int, *, timeout_ms: int, endpoint_type: int = BROKER_ENDPOINTS,
                              security=None, client_id: str = "seaway-cli") -> m.DescribeClusterResponse:
    """`security` (core.client.security.ClientSecurity): the TLS and SASL to connect with."""
    conn = BrokerConnection(host, port, client_id=client_id, request_timeout_ms=timeout_ms,
                            connect_timeout_ms=timeout_ms,
                            ssl_context=security.ssl_context if security is not None else None,
                            sasl=security.sasl if security is not None else None)
    try:
        await conn.connect()
        return await conn.send(m.DescribeClusterRequest(include_cluster_authorized_operations=False,
                                                        endpoint_type=endpoint_type),
                               m.ApiKey.DESCRIBE_CLUSTER, version=1)
    finally:
        await conn.close()
