"""`seaway health`: does this node serve? A container healthcheck asks the node itself, over the
Kafka protocol, rather than whether a port is open:

    seaway health --bootstrap-server 127.0.0.1:9092 --node-id 1 --controller 127.0.0.1:9093

- on the broker listener, DescribeCluster must list the node as a registered, unfenced broker:
  it has joined its cluster and clients can be sent to it;
- on the controller listener, DescribeCluster (KIP-919's controller endpoints) must name an
  active controller: the quorum this node votes in has a leader.

It talks to the given addresses only (never to the advertised ones, which a container may not
resolve for itself). Exit 0 with one line saying what was seen, or 1 with one line saying what
is missing.
"""
from __future__ import annotations

import anyio

from .common import CliError, UsageError


def register(sub) -> None:
    p = sub.add_parser("health", help="is this node registered, unfenced and in a quorum with a leader?",
                       description="Ask a node over the Kafka protocol whether it serves (for container "
                                   "healthchecks).")
    p.add_argument("--bootstrap-server", "-b", metavar="HOST:PORT",
                   help="the node's broker listener: the node must be a registered, unfenced broker")
    p.add_argument("--controller", "-C", metavar="HOST:PORT",
                   help="the node's controller listener: its quorum must have a leader")
    p.add_argument("--node-id", type=int, help="the node's id (default: any registered broker will do)")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds to wait (default: 5)")
    p.add_argument("--command-config", metavar="FILE",
                   help="client properties (security.protocol, ssl.*, sasl.*) for both listeners")
    p.set_defaults(func=lambda args: anyio.run(_check, args))


async def _check(args) -> int:
    from .common import command_config_security
    if not args.bootstrap_server and not args.controller:
        raise UsageError("health: give --bootstrap-server, --controller or both")
    security = command_config_security(args.command_config)
    seen = []
    try:
        with anyio.fail_after(args.timeout):
            if args.bootstrap_server:
                seen.append(await _broker(args.bootstrap_server, args.node_id, args.timeout, security))
            if args.controller:
                seen.append(await _controller(args.controller, args.timeout, security))
    except TimeoutError:
        raise CliError(f"unhealthy: no answer within {args.timeout:g}s") from None
    print("healthy: " + "; ".join(seen))
    return 0


async def _describe(address: str, endpoint_type: int, timeout: float, security):
    # not at module level: `seaway --help` (and every other command) stays fast
    from core.client.client import parse_bootstrap
    from core.client.describe import describe_cluster_at
    from core.client.errors import KafkaError

    try:
        [(host, port)] = parse_bootstrap(address)
    except ValueError:
        raise UsageError(f"health: {address!r} is not one HOST:PORT") from None
    try:
        answer = await describe_cluster_at(host, port, timeout_ms=int(timeout * 1000), endpoint_type=endpoint_type,
                                           security=security)
    except (KafkaError, OSError) as exc:
        raise CliError(f"unhealthy: {host}:{port} does not answer: {exc}") from None
    if answer.error_code:
        raise CliError(f"unhealthy: {host}:{port} answered DescribeCluster with error "
                       f"{answer.error_code} ({answer.error_message or 'no message'})")
    return answer


async def _broker(address: str, node_id: int | None, timeout: float, security) -> str:
    answer = await _describe(address, 1, timeout, security)
    ids = sorted(b.broker_id for b in answer.brokers)
    if node_id is None:
        if not ids:
            raise CliError(f"unhealthy: {address} knows no registered, unfenced broker")
        return f"brokers {ids} registered and unfenced (cluster {answer.cluster_id})"
    if node_id not in ids:
        raise CliError(f"unhealthy: broker {node_id} is not registered and unfenced "
                       f"(the cluster has {ids or 'none'})")
    return f"broker {node_id} registered and unfenced (cluster {answer.cluster_id}, brokers {ids})"


async def _controller(address: str, timeout: float, security) -> str:
    answer = await _describe(address, 2, timeout, security)
    if answer.controller_id < 0:
        raise CliError("unhealthy: the quorum has no leader (an election is under way or a "
                       "majority of the voters is down)")
    return f"quorum leader {answer.controller_id}"
