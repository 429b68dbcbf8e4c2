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

Every request is authorized as Kafka's ControllerApis authorizes it (none for ApiVersions and
SASL): CLUSTER_ACTION on the cluster for what nodes send each other (the Raft RPCs,
registration, heartbeats, AlterPartition, AllocateProducerIds), DESCRIBE for DescribeQuorum
and ListPartitionReassignments, ALTER for UnregisterBroker, ElectLeaders, reassignments, SCRAM
credentials, ACLs and DescribeCluster (KIP-919 gives controller endpoints only to operators),
else CLUSTER_AUTHORIZATION_FAILED. The admin requests a client may send a controller directly
(CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs, IncrementalAlterConfigs) are
narrowed per resource as on a broker (core/broker/admin_authorization.py).

Brokers forward admin requests here as they came, over their own connection, having
authorized the client themselves; Kafka carries the client's principal in an Envelope, which
needs CLUSTER_ACTION to send. The equivalent here: a principal with CLUSTER_ACTION (a node) is
trusted with any admin request, and every other principal is checked itself.
"""
from __future__ import annotations

from core.broker import admin_authorization
from core.broker.handlers import sasl
from core.broker.handlers.api_versions import api_versions_response
from core.controller.controller import HANDLED_APIS, QuorumController
from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.raft import wire
from core.raft.driver import RESPONSE_OF
from core.raft.messages import (BeginQuorumEpochRequest, DescribeQuorumRequest, EndQuorumEpochRequest,
                                FetchRequest, FetchSnapshotRequest, VoteRequest)
from core.security.authorizer import CLUSTER_NAME, Operation, ResourceType

# The cluster operation each API needs; the admin APIs a client may send are narrowed instead.
CLUSTER_OPERATION: dict[int, Operation] = {
    **{key: Operation.CLUSTER_ACTION for key in (
        m.ApiKey.VOTE, m.ApiKey.BEGIN_QUORUM_EPOCH, m.ApiKey.END_QUORUM_EPOCH, m.ApiKey.FETCH,
        m.ApiKey.FETCH_SNAPSHOT, m.ApiKey.BROKER_REGISTRATION, m.ApiKey.BROKER_HEARTBEAT,
        m.ApiKey.ALTER_PARTITION, m.ApiKey.ALLOCATE_PRODUCER_IDS)},
    **{key: Operation.DESCRIBE for key in (m.ApiKey.DESCRIBE_QUORUM, m.ApiKey.LIST_PARTITION_REASSIGNMENTS)},
    **{key: Operation.ALTER for key in (
        m.ApiKey.UNREGISTER_BROKER, m.ApiKey.ELECT_LEADERS, m.ApiKey.ALTER_PARTITION_REASSIGNMENTS,
        m.ApiKey.ALTER_USER_SCRAM_CREDENTIALS, m.ApiKey.CREATE_ACLS, m.ApiKey.DELETE_ACLS,
        m.ApiKey.DESCRIBE_CLUSTER)},
}


def _forwarder(ctx) -> bool:
    """A node, which forwards admin requests it has already authorized."""
    return ctx.authorize(Operation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME, log_denied=False)


def _denied(ctx, api_key: int) -> bool:
    operation = CLUSTER_OPERATION.get(api_key)
    if operation is None:
        return False
    if operation is not Operation.CLUSTER_ACTION and _forwarder(ctx):
        return False
    return not ctx.authorize(operation, ResourceType.CLUSTER, CLUSTER_NAME)

_REQUEST_OF = {cls.api_key: cls for cls in (VoteRequest, BeginQuorumEpochRequest, EndQuorumEpochRequest,
                                             FetchRequest, FetchSnapshotRequest, DescribeQuorumRequest)}


def _raft_handler(api_key: int):
    async def handle(ctx, request):
        if _denied(ctx, api_key):
            return wire.to_wire(RESPONSE_OF[_REQUEST_OF[api_key]](
                error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED), ctx.api_version)[1]
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
    if _denied(ctx, m.ApiKey.DESCRIBE_CLUSTER):
        return R(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                 error_message=None, endpoint_type=CONTROLLER_ENDPOINTS, cluster_id=server.quorum.cluster_id,
                 controller_id=-1, brokers=[])
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
        runner = ctx.controller.runner
        if _denied(ctx, api_key):
            return QuorumController._error_response(api_key, request, ctx.api_version,
                                                    ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
        if api_key in admin_authorization.CHECKED_APIS and not _forwarder(ctx):
            narrowed = admin_authorization.narrow(ctx, request, ctx.controller.quorum.loader.image)
            if not narrowed.anything_allowed:
                return narrowed.merge(QuorumController._error_response(api_key, narrowed.request, ctx.api_version,
                                                                       ErrorCode.NONE, None))
            return narrowed.merge(await runner.handle(api_key, ctx.api_version, narrowed.request))
        return await runner.handle(api_key, ctx.api_version, request)
    return handle


CONTROLLER_HANDLERS: dict = {m.ApiKey.API_VERSIONS: _api_versions, m.ApiKey.DESCRIBE_CLUSTER: _describe_cluster,
                              **sasl.HANDLES}
# The QuorumController's APIs (HANDLED_APIS): those brokers forward here, and the brokers' own.
for _key in HANDLED_APIS:
    CONTROLLER_HANDLERS[_key] = _controller_handler(_key)
for _raft_key in _REQUEST_OF:
    CONTROLLER_HANDLERS[_raft_key] = _raft_handler(_raft_key)
