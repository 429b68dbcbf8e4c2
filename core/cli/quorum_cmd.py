"""`seaway quorum describe`: the metadata quorum's leader, epoch, voters, observers and lag, as
kafka-metadata-quorum shows them.

With --bootstrap-controller the tool asks a controller listener which controller is active
(DescribeCluster with endpoint type 2, KIP-919), then asks that one DescribeQuorum: only the
leader knows every replica's progress.
"""
from __future__ import annotations

import time

import anyio

from .output import add_output_flag, emit_json, table


def register(sub) -> None:
    p = sub.add_parser("quorum", help="describe the KRaft metadata quorum",
                       description="Describe the metadata quorum (like kafka-metadata-quorum).")
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    d = actions.add_parser("describe", help="leader, epoch, high watermark, voters and observers")
    where = d.add_mutually_exclusive_group(required=True)
    where.add_argument("--bootstrap-controller", "-C", metavar="HOST:PORT[,HOST:PORT]",
                       help="controller listener(s) to ask")
    where.add_argument("--bootstrap-server", "-b", metavar="HOST:PORT[,HOST:PORT]",
                       help="broker(s) to ask; a broker forwards the question to the active controller")
    what = d.add_mutually_exclusive_group()
    what.add_argument("--status", action="store_true", help="the quorum's summary (default)")
    what.add_argument("--replication", action="store_true", help="one row per voter and observer")
    add_output_flag(d)
    d.add_argument("--timeout", type=float, default=10.0, help="seconds to wait (default: 10)")
    d.set_defaults(func=lambda args: anyio.run(_describe, args))


async def _describe(args) -> int:
    from .main import CliError
    try:
        with anyio.fail_after(args.timeout):
            if args.bootstrap_controller:
                cluster_id, described = await describe_quorum(args.bootstrap_controller,
                                                              int(args.timeout * 1000))
            else:
                cluster_id, described = await describe_quorum_via_broker(args.bootstrap_server,
                                                                         int(args.timeout * 1000))
    except TimeoutError:
        where = args.bootstrap_controller or args.bootstrap_server
        raise CliError(f"no answer from {where} within {args.timeout:g}s") from None
    now = int(time.time() * 1000)
    if args.replication:
        rows = replication_rows(described)
        if args.output == "json":
            emit_json(rows)
        else:
            def ago(ts):
                return None if ts is None else f"{max(0, now - ts)} ms ago"
            table(["NodeId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp",
                   "Status"],
                  [[r["node_id"], r["log_end_offset"], r["lag"], ago(r["last_fetch_timestamp"]),
                    ago(r["last_caught_up_timestamp"]), r["status"]] for r in rows])
        return 0
    status = status_of(cluster_id, described, now)
    if args.output == "json":
        emit_json(status)
    else:
        labels = {"cluster_id": "ClusterId", "leader_id": "LeaderId", "leader_epoch": "LeaderEpoch",
                  "high_watermark": "HighWatermark", "max_follower_lag": "MaxFollowerLag",
                  "max_follower_lag_time_ms": "MaxFollowerLagTimeMs",
                  "current_voters": "CurrentVoters", "current_observers": "CurrentObservers"}
        for key, label in labels.items():
            value = status[key]
            if isinstance(value, list):
                value = "[" + ",".join(str(v) for v in value) + "]"
            print(f"{label + ':':<24}{value}")
    return 0


async def describe_quorum(bootstrap: str, timeout_ms: int):
    """(cluster id, DescribeQuorumResponse) from the active controller."""
    from core.client.client import parse_bootstrap
    from core.client.errors import KafkaError
    from core.protocol import messages as m

    from .main import CliError

    errors = []
    for host, port in parse_bootstrap(bootstrap):
        conn = _connection(host, port, timeout_ms)
        try:
            await conn.connect()
            cluster = await conn.send(m.DescribeClusterRequest(include_cluster_authorized_operations=False,
                                                               endpoint_type=2),
                                      m.ApiKey.DESCRIBE_CLUSTER, version=1)
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
            raise CliError("the quorum has no leader right now (an election is under way or a "
                           "majority of the voters is down)")
        leader = next((b for b in cluster.brokers if b.broker_id == cluster.controller_id), None)
        if leader is None:
            raise CliError(f"controller {cluster.controller_id} leads but its address is unknown")
        conn = _connection(leader.host, leader.port, timeout_ms)
        try:
            await conn.connect()
            answer, raw = await _ask_quorum(conn)
        except KafkaError as exc:
            raise CliError(f"controller {leader.broker_id} at {leader.host}:{leader.port}: {exc}") from None
        finally:
            await conn.close()
        code = raw.error_code if answer is None else answer.partition_error_code
        if code:
            raise CliError(f"controller {leader.broker_id} answered {_code_name(code)}; try again")
        return cluster.cluster_id, answer
    raise CliError("no controller answered: " + "; ".join(errors))


def _connection(host: str, port: int, timeout_ms: int):
    from core.client.connection import BrokerConnection
    return BrokerConnection(host, port, client_id="seaway-cli", request_timeout_ms=timeout_ms,
                            connect_timeout_ms=timeout_ms)


async def _ask_quorum(conn):
    from core.raft import wire
    from core.raft.messages import DescribeQuorumRequest
    version = conn.version_for(wire.DESCRIBE_QUORUM, wire.VERSIONS[wire.DESCRIBE_QUORUM][-1])
    key, request = wire.to_wire(DescribeQuorumRequest(), version)
    raw = await conn.send(request, key, version=version)
    if raw.error_code:
        return None, raw
    return wire.from_wire(key, version, raw, is_request=False), raw


async def describe_quorum_via_broker(bootstrap: str, timeout_ms: int):
    """(cluster id, DescribeQuorumResponse), asked of a broker, which forwards it."""
    from core.client.client import parse_bootstrap
    from core.client.errors import KafkaError
    from core.protocol import messages as m

    from .main import CliError
    errors = []
    for host, port in parse_bootstrap(bootstrap):
        conn = _connection(host, port, timeout_ms)
        try:
            await conn.connect()
            cluster = await conn.send(m.DescribeClusterRequest(include_cluster_authorized_operations=False),
                                      m.ApiKey.DESCRIBE_CLUSTER)
            answer, raw = await _ask_quorum(conn)
        except KafkaError as exc:
            errors.append(f"{host}:{port}: {exc}")
            continue
        finally:
            await conn.close()
        if answer is None:
            raise CliError(f"{host}:{port} answered {_code_name(raw.error_code)}"
                           + (f": {raw.error_message}" if getattr(raw, "error_message", None) else ""))
        if answer.partition_error_code:
            raise CliError(f"the controller answered {answer.partition_error_code.name}; try again")
        return cluster.cluster_id, answer
    raise CliError("no broker answered: " + "; ".join(errors))


def _code_name(code: int) -> str:
    from core.protocol.errors import ErrorCode
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


def status_of(cluster_id: str, d, now_ms: int) -> dict:
    """kafka-metadata-quorum --status, from a DescribeQuorum answer."""
    followers = [v for v in d.current_voters if v.replica_id != d.leader_id]
    leader = next((v for v in d.current_voters if v.replica_id == d.leader_id), None)
    leader_end = leader.log_end_offset if leader else d.high_watermark
    lag = max((leader_end - v.log_end_offset for v in followers), default=0)
    lag_time = max((now_ms - v.last_caught_up_timestamp for v in followers
                    if v.last_caught_up_timestamp >= 0), default=0)
    return {"cluster_id": cluster_id, "leader_id": d.leader_id, "leader_epoch": d.leader_epoch,
            "high_watermark": d.high_watermark, "max_follower_lag": max(lag, 0),
            "max_follower_lag_time_ms": max(lag_time, 0),
            "current_voters": sorted(v.replica_id for v in d.current_voters),
            "current_observers": sorted(o.replica_id for o in d.observers)}


def replication_rows(d) -> list[dict]:
    leader_end = next((v.log_end_offset for v in d.current_voters if v.replica_id == d.leader_id),
                      d.high_watermark)

    def row(state, status: str) -> dict:
        return {"node_id": state.replica_id, "log_end_offset": state.log_end_offset,
                "lag": max(0, leader_end - state.log_end_offset),
                "last_fetch_timestamp": None if state.last_fetch_timestamp < 0 else state.last_fetch_timestamp,
                "last_caught_up_timestamp": (None if state.last_caught_up_timestamp < 0
                                             else state.last_caught_up_timestamp),
                "status": status}
    rows = [row(v, "Leader" if v.replica_id == d.leader_id else "Follower")
            for v in sorted(d.current_voters, key=lambda v: (v.replica_id != d.leader_id, v.replica_id))]
    rows += [row(o, "Observer") for o in sorted(d.observers, key=lambda o: o.replica_id)]
    return rows
