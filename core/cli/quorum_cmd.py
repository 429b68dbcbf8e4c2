"""`seaway quorum describe`: the metadata quorum's leader, epoch, voters, observers and lag, as
kafka-metadata-quorum shows them.

With --bootstrap-controller the tool asks a controller listener which controller is active
(DescribeCluster with endpoint type 2, KIP-919), then asks that one DescribeQuorum: only the
leader knows every replica's progress. The asking is core.client.quorum's; this module shows
the answer.
"""
from __future__ import annotations

import time

import anyio

from .common import CliError, command_config_security, guess_hint, resolve_cluster
from .output import add_cluster_flag, add_output_flag, emit_json, table


def register(sub) -> None:
    p = sub.add_parser("quorum", help="describe the KRaft metadata quorum",
                       description="Describe the metadata quorum (like kafka-metadata-quorum).")
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    d = actions.add_parser("describe", help="leader, epoch, high watermark, voters and observers")
    where = d.add_mutually_exclusive_group()     # none: common.resolve_cluster's default
    where.add_argument("--bootstrap-controller", "-C", metavar="HOST:PORT[,HOST:PORT]",
                       help="controller listener(s) to ask")
    where.add_argument("--bootstrap-server", "-b", metavar="HOST:PORT[,HOST:PORT]",
                       help="broker(s) to ask; a broker forwards the question to the active controller")
    add_cluster_flag(where)
    what = d.add_mutually_exclusive_group()
    what.add_argument("--status", action="store_true", help="the quorum's summary (default)")
    what.add_argument("--replication", action="store_true", help="one row per voter and observer")
    d.add_argument("--command-config", metavar="FILE",
                   help="Kafka client properties to connect with (security.protocol, ssl.*, sasl.*), "
                        "as Kafka's tools take them")
    add_output_flag(d)
    d.add_argument("--timeout", type=float, default=10.0, help="seconds to wait (default: 10)")
    d.set_defaults(func=lambda args: anyio.run(_describe, args))


async def _describe(args) -> int:
    # not at module level: `seaway --help` stays fast
    from core.client.quorum import QuorumError, describe_quorum, describe_quorum_via_broker
    if not args.bootstrap_controller:
        resolve_cluster(args)
    security = command_config_security(args.command_config)
    try:
        with anyio.fail_after(args.timeout):
            if args.bootstrap_controller:
                cluster_id, described = await describe_quorum(args.bootstrap_controller,
                                                              int(args.timeout * 1000), security=security)
            else:
                cluster_id, described = await describe_quorum_via_broker(args.bootstrap_server,
                                                                         int(args.timeout * 1000),
                                                                         security=security)
    except TimeoutError:
        where = args.bootstrap_controller or args.bootstrap_server
        raise CliError(f"no answer from {where} within {args.timeout:g}s{guess_hint(args)}") from None
    except QuorumError as exc:
        raise CliError(f"{exc}{guess_hint(args)}") from None
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
