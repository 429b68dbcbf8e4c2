"""`seaway node`: run one node from a Kafka-style properties file."""
from __future__ import annotations

import logging
import signal
import sys

import anyio

from core.arguments import deprecated_alias


def register(sub) -> None:
    p = sub.add_parser("node", help="run a node", description="Run a Seaway node. Without --config it runs a "
                       "single-node cluster on PLAINTEXT://127.0.0.1:9092 with its data in /tmp/seaway-logs.")
    p.add_argument("--config", "-c", metavar="FILE", help="properties file (Kafka's server.properties format)")
    p.add_argument("--override", metavar="KEY=VALUE", action="append", default=[],
                   help="set a property, overriding the file (repeatable)")
    # -o is --output in every other command; here it was --override.
    deprecated_alias(p, "-o", dest="override", replacement="--override", prog="seaway node", append=True,
                     metavar="KEY=VALUE")
    p.add_argument("--cluster-id", metavar="ID",
                   help="format the log dirs with this cluster id first unless they already are (as "
                        "`seaway storage format --ignore-formatted`; what Kafka's container image does "
                        "with CLUSTER_ID), so a container's first start needs no separate step")
    p.add_argument("--add-scram-file", metavar="FILE",
                   help="with --cluster-id: SCRAM credentials for a new cluster's metadata log, one "
                        "'SCRAM-SHA-512=[name=USER,password=PASSWORD]' per line (as `storage format`)")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.set_defaults(func=run)


def _props(args) -> dict[str, str]:
    """The file's properties with the overrides on top; a key neither Seaway nor Kafka knows
    is an error naming where it came from (the file or --override) and the nearest known key."""
    from core.config import load_properties
    from core.config.defs import ConfigError
    from core.config.unknown import unknown_broker_setting
    props = load_properties(args.config) if args.config else {}
    for key in props:
        if reason := unknown_broker_setting(key):
            raise ConfigError(f"{args.config}: {reason}")
    for item in args.override:
        if "=" not in item:
            raise ConfigError(f"--override: {item!r} is not KEY=VALUE")
        key, value = item.split("=", 1)
        if reason := unknown_broker_setting(key.strip()):
            raise ConfigError(f"--override {reason}")
        props[key.strip()] = value.strip()
    return props


def run(args) -> int:
    from core.config import BrokerConfig
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = BrokerConfig(_props(args))
    if args.add_scram_file and not args.cluster_id:
        from core.config.defs import ConfigError
        raise ConfigError("--add-scram-file: only with --cluster-id (credentials go into a new cluster's log)")
    if args.cluster_id:
        from pathlib import Path

        from core.node.bootstrap import read_add_scram_file, write_bootstrap
        from core.node.storage import format_storage
        scram = read_add_scram_file(args.add_scram_file) if args.add_scram_file else []
        formatted = False
        for directory, what in format_storage([Path(d) for d in config.log_dirs], config.node_id,
                                              args.cluster_id, ignore_formatted=True):
            logging.getLogger("seaway").info("%s: %s (cluster %s)", what, directory, args.cluster_id)
            formatted |= what == "formatted"
        if scram and formatted:   # the controller reads it only for a new metadata log anyway
            write_bootstrap(Path(config.metadata_log_dir), scram)
            logging.getLogger("seaway").info("%d SCRAM credentials for the new metadata log", len(scram))
    from core.node.allocator import keep_freed_memory
    keep_freed_memory()
    backend_options = {}
    try:
        import uvloop  # noqa: F401
        backend_options["use_uvloop"] = True
    except ImportError:
        pass
    anyio.run(_serve, config, backend="asyncio", backend_options=backend_options)
    return 0


async def _serve(config) -> None:
    from core.node.server import run_node

    async with anyio.create_task_group() as tg:
        handle = await tg.start(run_node, config)
        for name, (host, port) in handle.bound.items():
            # One line per listener on stdout: scripts and tests wait for it.
            print(f"seaway node {config.node_id} listening on {name}://{host}:{port}", flush=True)
        if handle.metrics_port is not None:
            print(f"seaway node {config.node_id} metrics on port {handle.metrics_port}", flush=True)
        tg.start_soon(_on_signals, handle)
        if handle.broker is not None:
            tg.start_soon(_report_serving, config, handle)
        await handle.stopped.wait()
        tg.cancel_scope.cancel()


async def _report_serving(config, handle) -> None:
    """The broker accepts clients once it has caught up with the metadata log and been
    unfenced: on a one-node cluster moments after the lines above, in a cluster once its
    controller quorum has a leader."""
    await handle.serving.wait()
    print(f"seaway node {config.node_id} serving clients", flush=True)


async def _on_signals(handle) -> None:
    """The first SIGTERM/SIGINT drains gracefully; a second one stops at once."""
    log = logging.getLogger("seaway")
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with anyio.create_task_group() as tg:
            async for signum in signals:
                if not handle.draining:
                    log.info("received %s; shutting down", signal.Signals(signum).name)
                    tg.start_soon(handle.shutdown)
                else:
                    log.info("received %s again; stopping now", signal.Signals(signum).name)
                    handle.stop()
