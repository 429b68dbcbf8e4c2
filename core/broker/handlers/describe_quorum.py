"""DescribeQuorum (key 55), v0-2, on a broker listener.

kafka-metadata-quorum --bootstrap-server asks a broker, and the broker forwards the request
to the active controller, which alone knows every replica's progress (controller_channel.py). A
one-node cluster answers too: its quorum is its own controller. It needs DESCRIBE on the
cluster (Kafka's controller checks it), else CLUSTER_AUTHORIZATION_FAILED; the broker checks,
as it forwards without the client's principal.
"""
from __future__ import annotations

from core.client.errors import KafkaError
from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.security.authorizer import CLUSTER_NAME, Operation, ResourceType

R = m.DescribeQuorumResponse


async def handle(ctx, req):
    if not ctx.authorize(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return R(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=None, topics=[], nodes=[])
    try:
        return await ctx.broker.kraft.channel.send(m.ApiKey.DESCRIBE_QUORUM, req, ctx.api_version, timeout_s=10)
    except KafkaError as exc:
        return R(error_code=ErrorCode.NOT_CONTROLLER, error_message=str(exc), topics=[], nodes=[])


HANDLES = {m.ApiKey.DESCRIBE_QUORUM: handle}
