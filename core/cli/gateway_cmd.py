"""`seaway gateway`: the Kafka-protocol gateway of one DR pair (core/gateway). Applications
bootstrap from it and it forwards to whichever cluster of the pair the DR controller's
decision makes active, moving them at a failover without a restart or a config change:

    seaway gateway --pair eu-west-1~us-east-1 \\
        --cluster eu-west-1=127.0.0.1:19092 --cluster us-east-1=127.0.0.1:29092 \\
        --listen 127.0.0.1:39092 --slots 3 --metrics-port 39190

It listens on --slots consecutive ports from --listen's (one per broker a client may address;
give at least as many as the larger cluster has brokers) and prints the bootstrap address,
the cluster it serves and where its metrics are. The first --cluster is served until a
decision names one.
"""
from __future__ import annotations

import logging
import signal
import sys

import anyio

from .common import UsageError, command_config_security


def register(sub) -> None:
    p = sub.add_parser("gateway", help="forward Kafka clients to the active cluster of a DR pair",
                       description="A Kafka-protocol gateway for one DR pair: clients bootstrap from it and "
                                   "ride through `dr failover` and `dr failback` unchanged.")
    p.add_argument("--pair", required=True, metavar="NAME", help="the DR pair's name (as `dr status` shows it)")
    p.add_argument("--cluster", action="append", required=True, metavar="NAME=HOST:PORT[,...]",
                   help="a cluster of the pair and its bootstrap servers (twice; the first is served "
                        "until a decision names one)")
    p.add_argument("--listen", default="127.0.0.1:0", metavar="HOST:PORT",
                   help="where the first slot listens; slot k listens on PORT+k (PORT 0: any free ports; "
                        "default 127.0.0.1:0)")
    p.add_argument("--slots", type=int, default=3, metavar="N",
                   help="ports, one per broker a client may address (default 3)")
    p.add_argument("--advertised-host", metavar="HOST", help="the host clients are told to connect to "
                                                              "(default: --listen's host)")
    p.add_argument("--metrics-port", type=int, metavar="PORT", help="serve /metrics and /health here (0: any)")
    p.add_argument("--listener-config", metavar="FILE",
                   help="the gateway's own ports, as a broker listener's properties: ssl.keystore.location "
                        "(PEM or PKCS12), ssl.client.auth and ssl.truststore.location for TLS, "
                        "sasl.enabled.mechanisms (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) for clients to log in")
    p.add_argument("--command-config", metavar="FILE",
                   help="the gateway's own client properties towards the brokers (security.protocol, ssl.*, "
                        "sasl.*); with a SASL login the gateway forwards every request as its client's")
    p.add_argument("--max-request-bytes", type=int, default=104_857_600, metavar="N",
                   help="the largest request accepted, as Kafka's socket.request.max.bytes (default 104857600)")
    p.set_defaults(func=_run)


def _parse(args):
    from core.gateway.proxy import GatewayConfig
    clusters: dict[str, str] = {}
    for item in args.cluster:
        name, sep, bootstrap = item.partition("=")
        if not sep or not name or not bootstrap:
            raise UsageError(f"gateway: --cluster {item!r}: expected NAME=HOST:PORT[,HOST:PORT...]")
        if name in clusters:
            raise UsageError(f"gateway: --cluster {name} is given twice")
        clusters[name] = bootstrap
    if len(clusters) != 2:
        raise UsageError(f"gateway: --cluster: a DR pair has two clusters, got {len(clusters)}")
    host, sep, port_text = args.listen.rpartition(":")
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise UsageError(f"gateway: --listen {args.listen!r}: expected HOST:PORT")
    if not 1 <= args.slots <= 64:
        raise UsageError(f"gateway: --slots {args.slots}: expected 1..64")
    first = int(port_text)
    if first and first + args.slots - 1 > 65535:
        raise UsageError(f"gateway: --listen {args.listen} with --slots {args.slots} goes past port 65535")
    if args.max_request_bytes < 1024:
        raise UsageError(f"gateway: --max-request-bytes {args.max_request_bytes}: expected at least 1024")
    ports = [first + k if first else 0 for k in range(args.slots)]
    upstream = command_config_security(args.command_config)
    listener_ssl, mechanisms = _listener(args.listener_config)
    if mechanisms and upstream.sasl is None:
        raise UsageError("gateway: --listener-config sasl.enabled.mechanisms needs --command-config with the "
                         "gateway's own SASL login (it forwards each request as its client's, in an Envelope)")
    return GatewayConfig(pair=args.pair, clusters=clusters, host=host, ports=ports,
                         advertised_host=args.advertised_host, max_request_bytes=args.max_request_bytes,
                         listener_ssl=listener_ssl, sasl_mechanisms=mechanisms, upstream=upstream)


SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _listener(path: str | None):
    """(TLS context or None, SASL mechanisms) from --listener-config; a UsageError naming the
    file and the key when it cannot serve."""
    if path is None:
        return None, ()
    from core.client.tls import TlsError, TlsSettings
    from core.config import load_properties
    from core.config.defs import ConfigError
    from core.security.tls import server_context
    try:
        props = dict(load_properties(path))
        mechanisms = tuple(x.strip().upper() for x in props.pop("sasl.enabled.mechanisms", "").split(",") if x.strip())
        unknown = [x for x in mechanisms if x not in SASL_MECHANISMS]
        if unknown:
            raise UsageError(f"gateway: --listener-config {path}: sasl.enabled.mechanisms: {', '.join(unknown)} "
                             f"is not one of {', '.join(SASL_MECHANISMS)}")
        settings = TlsSettings.from_properties({k: v for k, v in props.items() if k.startswith("ssl.")},
                                               where=f"{path}: ")
        others = sorted(k for k in props if not k.startswith("ssl."))
        if others:
            raise UsageError(f"gateway: --listener-config {path}: {others[0]}: not a listener setting the "
                             f"gateway knows (ssl.*, sasl.enabled.mechanisms)")
        return (server_context(settings) if settings.has_keystore else None), mechanisms
    except (ConfigError, TlsError) as exc:
        raise UsageError(f"gateway: --listener-config {exc}") from None


def _run(args) -> int:
    config = _parse(args)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    anyio.run(_serve, config, args.metrics_port)
    return 0


async def _serve(config, metrics_port: int | None) -> None:
    from core.gateway.proxy import Gateway
    from core.metrics_http import serve_http
    gateway = Gateway(config)

    def health() -> tuple[bool, str]:
        view, stale = gateway.view, gateway.follower.stale
        state = f"serving {view.active}" + (f" (moving consumers from {view.groups_home})" if view.moving else "")
        if stale:
            return False, f"{state}; the decision could not be read lately"
        return True, state

    async with anyio.create_task_group() as tg:
        addresses = await tg.start(gateway.serve)
        bootstrap = ",".join(f"{a.host}:{a.port}" for a in addresses)
        print(f"seaway gateway for DR pair {config.pair}: bootstrap.servers={bootstrap}", flush=True)
        decision = gateway.decision
        print(f"  serving {gateway.view.active}"
              + (f" (DR epoch {decision.epoch}, {decision.phase})" if decision else " (no DR decision recorded yet)"),
              flush=True)
        if metrics_port is not None:
            port = serve_http(gateway.metrics.registry, metrics_port, "0.0.0.0", health=health)
            print(f"  metrics: http://{addresses[0].host}:{port}/metrics (health: /health)", flush=True)
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                print("seaway gateway: stopping", flush=True)
                tg.cancel_scope.cancel()
                return
