"""The controller listener's requests: what a node with the controller role serves on the
listeners named by controller.listener.names.

Controller APIs (BrokerRegistration, BrokerHeartbeat, UnregisterBroker, AllocateProducerIds,
AlterPartition from partition leaders, and the admin requests brokers forward: CreateTopics,
DeleteTopics, CreatePartitions, AlterConfigs, IncrementalAlterConfigs, ElectLeaders,
AlterPartitionReassignments, ListPartitionReassignments) go to the ControllerRunner; a
controller that is not active answers NOT_CONTROLLER, as Kafka's does.

KRaft's RPCs (Vote 52, BeginQuorumEpoch 53, EndQuorumEpoch 54, DescribeQuorum 55,
FetchSnapshot 59, and Fetch 1 for __cluster_metadata only, v12+) go to the Raft driver through
core.raft.wire. ApiVersions lists exactly this table, so a peer negotiates versions the quorum
can speak. A request naming another topic or partition gets the error Kafka's raft client gives
(wire.NotClusterMetadata).
"""
from __future__ import annotations

from core.broker.handlers import sasl
from core.broker.handlers.api_versions import api_versions_response
from core.controller.controller import HANDLED_APIS
from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.raft import wire
from core.raft.driver import RESPONSE_OF
from core.raft.messages import (BeginQuorumEpochRequest, DescribeQuorumRequest, EndQuorumEpochRequest,
                                FetchRequest, FetchSnapshotRequest, VoteRequest)

_REQUEST_OF = {cls.api_key: cls for cls in (VoteRequest, BeginQuorumEpochRequest, EndQuorumEpochRequest,
                                             FetchRequest, FetchSnapshotRequest, DescribeQuorumRequest)}


def _raft_handler(api_key: int):
    async def handle(ctx, request):
        try:
            data = wire.from_wire(api_key, ctx.api_version, request, is_request=True)
        except wire.NotClusterMetadata as exc:
            response = RESPONSE_OF[_REQUEST_OF[api_key]](error_code=exc.code)
        else:
            response = await ctx.controller.driver.handle_request(data)
        return wire.to_wire(response, ctx.api_version)[1]
    setattr(handle, "VERSIONS", wire.VERSIONS[api_key])   # read by api_versions_response
    return handle


async def _api_versions(ctx, request):
    return api_versions_response(ErrorCode.NONE, CONTROLLER_HANDLERS)


async def _describe_cluster(ctx, request):
    """KIP-919: on a controller listener DescribeCluster v1 lists the controllers (endpoint
    type 2) and names the active one, which is how admin tools given --bootstrap-controller
    find the leader. Brokers (type 1) are asked on a broker listener."""
    R = m.DescribeClusterResponse
    server = ctx.controller
    if ctx.api_version < 1 or request.endpoint_type != CONTROLLER_ENDPOINTS:
        return R(throttle_time_ms=0, error_code=ErrorCode.MISMATCHED_ENDPOINT_TYPE,
                 error_message="a controller listener describes controllers (endpoint type 2)",
                 endpoint_type=CONTROLLER_ENDPOINTS, cluster_id=server.quorum.cluster_id,
                 controller_id=-1, brokers=[])
    leader = server.quorum.leader_id
    return R(throttle_time_ms=0, error_code=0, endpoint_type=CONTROLLER_ENDPOINTS,
             cluster_id=server.quorum.cluster_id, controller_id=leader,
             brokers=[R.DescribeClusterBroker(broker_id=node_id, host=host, port=port, rack=None)
                      for node_id, (host, port) in sorted(server.config.quorum_voters.items())])


setattr(_describe_cluster, "VERSIONS", range(0, 2))   # read by api_versions_response
CONTROLLER_ENDPOINTS = 2

def _controller_handler(api_key: int):
    async def handle(ctx, request):
        return await ctx.controller.runner.handle(api_key, ctx.api_version, request)
    return handle


CONTROLLER_HANDLERS: dict = {m.ApiKey.API_VERSIONS: _api_versions, m.ApiKey.DESCRIBE_CLUSTER: _describe_cluster,
                              **sasl.HANDLES}
# The QuorumController's APIs (HANDLED_APIS): those brokers forward here, and the brokers' own.
for _key in HANDLED_APIS:
    CONTROLLER_HANDLERS[_key] = _controller_handler(_key)
for _raft_key in _REQUEST_OF:
    CONTROLLER_HANDLERS[_raft_key] = _raft_handler(_raft_key)
