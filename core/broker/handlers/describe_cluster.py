"""DescribeCluster (key 60), v0-1.

The admin client's view of the cluster: brokers, controller, cluster id. v1 adds the endpoint
type (1 = brokers, 2 = controllers, KIP-919); a broker listener answers for brokers only
(controller listeners answer type 2, core/node/controller_apis.py).
"""
from __future__ import annotations

from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.security.authorizer import CLUSTER_NAME, Operation, ResourceType

from .metadata import image_brokers

R = m.DescribeClusterResponse
UNKNOWN_OPS = -(2**31)


async def handle(ctx, req):
    b = ctx.broker
    if ctx.api_version >= 1 and req.endpoint_type != 1:
        return R(throttle_time_ms=0, error_code=ErrorCode.MISMATCHED_ENDPOINT_TYPE,
                 error_message="this listener serves brokers (endpoint type 1)", endpoint_type=1,
                 cluster_id=b.cluster_id, controller_id=-1, brokers=[])
    ops = UNKNOWN_OPS
    if req.include_cluster_authorized_operations:   # 0 without DESCRIBE on the cluster, as Kafka
        ops = (ctx.authorizer.authorized_operations(ctx.principal, ResourceType.CLUSTER, CLUSTER_NAME, ctx.host)
               if ctx.authorize(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME) else 0)
    # The unfenced brokers of the image; like Metadata, a broker names itself as the
    # controller, since it forwards what clients send the controller.
    image = b.kraft.image
    brokers = [R.DescribeClusterBroker(broker_id=e.node_id, host=e.host, port=e.port, rack=e.rack)
               for e in image_brokers(image, ctx.listener.name)]
    return R(throttle_time_ms=0, error_code=0, endpoint_type=1, cluster_id=b.cluster_id,
             controller_id=b.node_id, brokers=brokers, cluster_authorized_operations=ops)


HANDLES = {m.ApiKey.DESCRIBE_CLUSTER: handle}
