"""DescribeQuorum (key 55), v0-2, on a broker listener.

kafka-metadata-quorum --bootstrap-server asks a broker, and a KRaft broker forwards the request
to the active controller, which alone knows every replica's progress (forwarding.py). A
standalone node runs no quorum: it answers INVALID_REQUEST, naming why.
"""
from __future__ import annotations

from core.client.errors import KafkaError
from core.protocol import messages as m
from core.protocol.errors import ErrorCode

R = m.DescribeQuorumResponse


async def handle(ctx, req):
    kraft = ctx.broker.kraft
    if kraft is None:
        return R(error_code=ErrorCode.INVALID_REQUEST,
                 error_message="this node is standalone: it runs no KRaft controller quorum",
                 topics=[], nodes=[])
    try:
        return await kraft.channel.send(m.ApiKey.DESCRIBE_QUORUM, req, ctx.api_version, timeout_s=10)
    except KafkaError as exc:
        return R(error_code=ErrorCode.NOT_CONTROLLER, error_message=str(exc), topics=[], nodes=[])


HANDLES = {m.ApiKey.DESCRIBE_QUORUM: handle}
