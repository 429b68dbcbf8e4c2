"""The KRaft metadata quorum as a client asks about it: DescribeQuorum (KIP-595; KIP-836's
timestamps from v1), the leader, its epoch, the high watermark, the voters and observers.

    cluster_id, quorum = await describe_quorum("127.0.0.1:9093", timeout_ms=5000)
    cluster_id, quorum = await describe_quorum_via_broker("127.0.0.1:9092", timeout_ms=5000)

Only the leader knows every replica's progress. On controller listeners, DescribeCluster with
endpoint type 2 (KIP-919) names the active controller, which is then asked; a broker forwards
the question to the active controller itself. A question that gets no usable answer raises
QuorumError, one line saying why (no leader, no listener answering, an error code); the
deadline is the caller's (anyio.fail_after). How the answer is shown is the caller's business:
`seaway quorum describe` prints it, `regions status` reads the leader from it.
"""
from __future__ import annotations

from dataclasses import dataclass

from core.protocol import messages as m
from core.protocol.errors import DecodeError, ErrorCode

from .client import parse_bootstrap
from .connection import BrokerConnection
from .errors import KafkaError

__all__ = ["QuorumDescription", "QuorumError", "ReplicaState", "describe_quorum",
           "describe_quorum_via_broker"]

DESCRIBE_QUORUM, DESCRIBE_CLUSTER = m.ApiKey.DESCRIBE_QUORUM, m.ApiKey.DESCRIBE_CLUSTER
MAX_VERSION = 2                  # DescribeQuorum v0-2, as KRaft serves it
CONTROLLER_ENDPOINTS = 2         # DescribeCluster endpoint type: controllers (KIP-919)
METADATA_TOPIC, METADATA_PARTITION = "__cluster_metadata", 0


class QuorumError(Exception):
    """The quorum could not be described; the message says why in one line."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaState:
    replica_id: int
    log_end_offset: int = -1
    last_fetch_timestamp: int = -1          # ms; -1 if unknown (always before DescribeQuorum v1)
    last_caught_up_timestamp: int = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class QuorumDescription:
    """The active controller's DescribeQuorum answer for __cluster_metadata-0."""
    error_code: ErrorCode = ErrorCode.NONE
    partition_error_code: ErrorCode = ErrorCode.NONE
    leader_id: int = -1
    leader_epoch: int = -1
    high_watermark: int = -1
    current_voters: tuple[ReplicaState, ...] = ()
    observers: tuple[ReplicaState, ...] = ()


async def describe_quorum(bootstrap: str, timeout_ms: int, *, client_id: str = "seaway-cli",
                          security=None) -> tuple[str, QuorumDescription]:
    """(cluster id, description) from the active controller, found through the controller
    listener(s) in `bootstrap`."""
    errors = []
    for host, port in parse_bootstrap(bootstrap):
        conn = _connection(host, port, timeout_ms, client_id, security)
        try:
            await conn.connect()
            cluster = await conn.send(m.DescribeClusterRequest(include_cluster_authorized_operations=False,
                                                               endpoint_type=CONTROLLER_ENDPOINTS),
                                      DESCRIBE_CLUSTER, version=1)
        except KafkaError as exc:
            errors.append(f"{host}:{port}: {exc}")
            continue
        finally:
            await conn.close()
        if cluster.error_code:
            errors.append(f"{host}:{port} is not a controller listener "
                          f"({cluster.error_message or cluster.error_code})")
            continue
        if cluster.controller_id < 0:
            raise QuorumError("the quorum has no leader right now (an election is under way or a "
                              "majority of the voters is down)")
        leader = next((b for b in cluster.brokers if b.broker_id == cluster.controller_id), None)
        if leader is None:
            raise QuorumError(f"controller {cluster.controller_id} leads but its address is unknown")
        conn = _connection(leader.host, leader.port, timeout_ms, client_id, security)
        try:
            await conn.connect()
            answer, raw = await _ask(conn)
        except KafkaError as exc:
            raise QuorumError(f"controller {leader.broker_id} at {leader.host}:{leader.port}: {exc}") from None
        finally:
            await conn.close()
        code = raw.error_code if answer is None else answer.partition_error_code
        if code:
            raise QuorumError(f"controller {leader.broker_id} answered {_code_name(code)}; try again")
        return cluster.cluster_id, answer
    raise QuorumError("no controller answered: " + "; ".join(errors))


async def describe_quorum_via_broker(bootstrap: str, timeout_ms: int, *, client_id: str = "seaway-cli",
                                     security=None) -> tuple[str, QuorumDescription]:
    """(cluster id, description), asked of the first broker in `bootstrap` that answers; the
    broker forwards the question to the active controller."""
    errors = []
    for host, port in parse_bootstrap(bootstrap):
        conn = _connection(host, port, timeout_ms, client_id, security)
        try:
            await conn.connect()
            cluster = await conn.send(m.DescribeClusterRequest(include_cluster_authorized_operations=False),
                                      DESCRIBE_CLUSTER)
            answer, raw = await _ask(conn)
        except KafkaError as exc:
            errors.append(f"{host}:{port}: {exc}")
            continue
        finally:
            await conn.close()
        if answer is None:
            raise QuorumError(f"{host}:{port} answered {_code_name(raw.error_code)}"
                              + (f": {raw.error_message}" if getattr(raw, "error_message", None) else ""))
        if answer.partition_error_code:
            raise QuorumError(f"the controller answered {answer.partition_error_code.name}; try again")
        return cluster.cluster_id, answer
    raise QuorumError("no broker answered: " + "; ".join(errors))


def _connection(host: str, port: int, timeout_ms: int, client_id: str, security=None) -> BrokerConnection:
    """`security` (core.client.security.ClientSecurity): the TLS and SASL to connect with."""
    return BrokerConnection(host, port, client_id=client_id, request_timeout_ms=timeout_ms,
                            connect_timeout_ms=timeout_ms,
                            ssl_context=security.ssl_context if security is not None else None,
                            sasl=security.sasl if security is not None else None)


async def _ask(conn: BrokerConnection):
    """(description, raw response); the description is None if the answer is a top-level error."""
    version = conn.version_for(DESCRIBE_QUORUM, MAX_VERSION)
    R = m.DescribeQuorumRequest
    request = R(topics=[R.TopicData(topic_name=METADATA_TOPIC,
                                    partitions=[R.PartitionData(partition_index=METADATA_PARTITION)])])
    raw = await conn.send(request, DESCRIBE_QUORUM, version=version)
    if raw.error_code:
        return None, raw
    return _description(raw, version), raw


def _description(raw, version: int) -> QuorumDescription:
    """A DescribeQuorumResponse without a top-level error, read; DecodeError if it is not
    about exactly __cluster_metadata-0."""
    if len(raw.topics) != 1:
        raise DecodeError(f"DescribeQuorum names {len(raw.topics)} topics, expected {METADATA_TOPIC} only")
    topic = raw.topics[0]
    if topic.topic_name != METADATA_TOPIC:
        raise DecodeError(f"DescribeQuorum names topic {topic.topic_name!r}, not {METADATA_TOPIC}")
    if len(topic.partitions) != 1 or topic.partitions[0].partition_index != METADATA_PARTITION:
        raise DecodeError(f"DescribeQuorum must name exactly partition {METADATA_TOPIC}-0, got "
                          f"{[p.partition_index for p in topic.partitions]}")
    p = topic.partitions[0]

    def replicas(states) -> tuple[ReplicaState, ...]:
        return tuple(ReplicaState(replica_id=r.replica_id, log_end_offset=r.log_end_offset,
                                  last_fetch_timestamp=r.last_fetch_timestamp if version >= 1 else -1,
                                  last_caught_up_timestamp=r.last_caught_up_timestamp if version >= 1 else -1)
                     for r in states)

    return QuorumDescription(error_code=_code(raw.error_code), partition_error_code=_code(p.error_code),
                             leader_id=p.leader_id, leader_epoch=p.leader_epoch,
                             high_watermark=p.high_watermark, current_voters=replicas(p.current_voters),
                             observers=replicas(p.observers))


def _code(value: int) -> ErrorCode:
    """An error code as ErrorCode; one we do not know is UNKNOWN_SERVER_ERROR."""
    try:
        return ErrorCode(value)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


def _code_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)
