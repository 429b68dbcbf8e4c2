"""`mirror run`: copy topics between clusters, from a link config or a running platform.

    mirror run --config links.yaml       # links: [{source_alias, source_bootstrap, target_alias,
                                         #          target_bootstrap, topics, exclude, policy}]
    mirror run --platform                # the mirror links of the platform `regions up` runs

A link of a platform runs where its target is: it reads the source through the WAN addresses
the target's region sees, and writes the target directly. The platform (regions/) decides that
and writes each link's configuration into platform.json; the mirror knows no topology. Errors
are one line.
"""
from __future__ import annotations

import json
import logging
import signal
import sys
from pathlib import Path

import anyio
import yaml
from pydantic import ValidationError

from core.arguments import OneLineParser
from core.platform_file import PLATFORM_FILE, default_state_dir

from .link import LinkConfig, MirrorLink


HAND_OVER_S = 12.0     # copiers hand over in 8 s, the link closes in 3 s; `regions` waits 20 s


class CliError(Exception):
    pass


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="mirror", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    run = sub.add_parser("run", help="run mirror links until stopped")
    where = run.add_mutually_exclusive_group(required=True)
    where.add_argument("--config", type=Path, help="a YAML file of links")
    where.add_argument("--platform", action="store_true", help="the links of the running platform")
    run.add_argument("--state-dir", type=Path, default=None,
                     help="the platform's state directory ($SEAWAY_STATE_DIR, default ~/.seaway/platform)")
    run.add_argument("--metrics-port", type=int, default=None,
                     help="serve Prometheus metrics on this port (with --platform: the platform's)")
    run.add_argument("--metrics-host", default="127.0.0.1",
                     help="the address metrics listen on (default 127.0.0.1; 0.0.0.0 in a container)")
    run.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    status = sub.add_parser("status", help="per link, topic and partition: lag, latency, throughput")
    where = status.add_mutually_exclusive_group()
    where.add_argument("--metrics-url", help="a running mirror's /metrics URL")
    where.add_argument("--platform", action="store_true",
                       help="the mirror of the running platform (the default without --metrics-url)")
    status.add_argument("--state-dir", type=Path, default=None)
    status.add_argument("--output", "-o", choices=("table", "json"), default="table")
    args = parser.parse_args(argv)
    try:
        if args.command == "status":
            return show_status(args)
        if args.config:
            links, metrics_port = load_links(args.config), args.metrics_port
        else:
            links, metrics_port = platform_links(args.state_dir)
            metrics_port = args.metrics_port or metrics_port
    except CliError as exc:
        print(f"mirror {args.command}: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        anyio.run(_run, links, metrics_port, args.metrics_host)
    except KeyboardInterrupt:
        pass
    return 0


def show_status(args) -> int:
    from prometheus_client.parser import text_string_to_metric_families
    from urllib.request import urlopen
    url = args.metrics_url
    if url is None:
        state_dir = args.state_dir or default_state_dir()
        try:
            url = json.loads((state_dir / PLATFORM_FILE).read_text())["mirror_metrics"]
        except (OSError, ValueError, KeyError) as exc:
            raise CliError(f"no running platform in {state_dir} ({exc}); start one with `regions up`, "
                           f"or name a mirror's metrics with --metrics-url") from None
        if not url:
            raise CliError("the platform has no mirror links")
    try:
        with urlopen(url, timeout=10) as response:
            text = response.read().decode()
    except OSError as exc:
        print(f"mirror status: cannot read {url}: {exc}", file=sys.stderr)
        return 1
    rows: dict[tuple, dict] = {}
    links: dict[str, dict] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, sample.value
            if "partition" in labels:
                row = rows.setdefault((labels["link"], labels["topic"], int(labels["partition"])), {})
                row[name.removeprefix("seaway_mirror_").removeprefix("partition_").removesuffix("_total")] = value
            elif name == "seaway_mirror_link_state_info":
                links.setdefault(labels["link"], {}).update(state=labels["state"], reason=labels["reason"])
            elif "link" in labels:
                key = name.removeprefix("seaway_mirror_").removesuffix("_total")
                if "result" in labels:      # topic_config_syncs_applied, ..._failed
                    key += "_" + labels["result"]
                links.setdefault(labels["link"], {})[key] = value
    if args.output == "json":
        print(json.dumps({"metrics_url": url, "links": links,
                          "partitions": [dict(link=k[0], topic=k[1], partition=k[2], **v)
                                         for k, v in sorted(rows.items())]}, indent=2))
        return 0
    print(f"mirror metrics: {url}")
    table = [["LINK", "TOPIC", "PARTITION", "LAG", "LAG S", "RECORDS", "BYTES", "ERRORS"]]
    for (link, topic, partition), v in sorted(rows.items()):
        table.append([link, topic, str(partition), f"{v.get('lag_records', 0):.0f}",
                      f"{v.get('lag_seconds', 0):.1f}", f"{v.get('records', 0):.0f}", f"{v.get('bytes', 0):.0f}",
                      f"{v.get('errors', 0):.0f}"])
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for r in table:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    for link, v in sorted(links.items()):
        p50, p99 = v.get("replication_latency_p50_ms"), v.get("replication_latency_p99_ms")
        age = v.get("checkpoint_age_seconds", -1)
        if v.get("state") == "degraded":
            print(f"{link}: DEGRADED: {v.get('reason')}")
        latency = (f"replication latency p50 {_ms(p50)} p99 {_ms(p99)}" if p50 is not None
                   else "no batches acknowledged in the last minute")
        print(f"{link}: {latency}, checkpoint age "
              f"{'none yet' if age < 0 else f'{age:.1f}s'}, errors {v.get('errors', 0):.0f}, "
              f"lost to retention {v.get('lost_to_retention', 0):.0f}, "
              f"topics with unsynced configs {v.get('topic_configs_unsynced', 0):.0f}")
    return 0


def _ms(value) -> str:
    return "-" if value is None else f"{value:.0f} ms"


def load_links(path: Path) -> list[LinkConfig]:
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise CliError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise CliError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}") from None
    items = doc.get("links") if isinstance(doc, dict) and "links" in doc else [doc]
    if not isinstance(items, list) or not items:
        raise CliError(f"{path}: links: expected a list of links")
    return _validated(items, path, "links")


def platform_links(state_dir: Path | None) -> tuple[list[LinkConfig], int | None]:
    """The links of the platform `regions up` runs, and the port of its mirror metrics. The
    platform (regions/) owns the topology and writes each link's configuration into
    platform.json; the mirror only reads it."""
    state_dir = state_dir or default_state_dir()
    path = state_dir / PLATFORM_FILE
    try:
        info = json.loads(path.read_text())
        items, metrics_port = info["mirror_links"], info["mirror_metrics_port"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CliError(f"no running platform in {state_dir} ({exc})") from None
    if not items:
        raise CliError(f"the platform's topology ({info.get('topology')}) has no mirror links")
    return _validated(items, path, "mirror_links"), metrics_port


def _validated(items: list, path: Path, key: str) -> list[LinkConfig]:
    links = []
    for i, item in enumerate(items):
        try:
            links.append(LinkConfig.model_validate(item))
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(x) for x in err["loc"])
            raise CliError(f"{path}: {key}[{i}].{field}: {err['msg']}") from None
    return links


async def _run(links: list[LinkConfig], metrics_port: int | None, metrics_host: str = "127.0.0.1") -> None:
    running = [MirrorLink(link) for link in links]
    if metrics_port is not None:
        from .metrics import MirrorMetrics
        port = MirrorMetrics(running).serve(metrics_port, metrics_host)
        logging.getLogger("mirror").info("metrics on http://%s:%d/metrics (health on /health)",
                                         metrics_host, port)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_stop_on_signal, running, tg.cancel_scope)
        async with anyio.create_task_group() as links:
            for link in running:
                links.start_soon(link.run)
        tg.cancel_scope.cancel()        # every link has handed over


async def _stop_on_signal(running: list[MirrorLink], everything: anyio.CancelScope) -> None:
    """The first SIGTERM or SIGINT stops the links gracefully (each partition's copier sends
    what it fetched and records its position, up to its drain deadline); a second one, or
    HAND_OVER_S later, stops at once."""
    log = logging.getLogger("mirror")
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            log.info("stopping: handing over every partition (a second signal stops at once)")
            for link in running:
                link.stop()
            break
        with anyio.move_on_after(HAND_OVER_S):
            async for _ in signals:
                break
        log.info("stopping at once")
        everything.cancel()


if __name__ == "__main__":
    sys.exit(main())
