"""`mirror run`: copy topics between clusters, from a link config or a running platform.

    mirror run --config links.yaml       # links: [{source_alias, source_bootstrap, target_alias,
                                         #          target_bootstrap, topics, exclude, policy}]
    mirror run --platform                # the mirror links of the platform `regions up` runs

A link of a platform runs where its target is: it reads the source through the WAN addresses
the target's region sees, and writes the target directly. Errors are one line.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from pathlib import Path

import anyio
import yaml
from pydantic import ValidationError

from .link import LinkConfig, MirrorLink


class CliError(Exception):
    pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mirror", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    run = sub.add_parser("run", help="run mirror links until stopped")
    where = run.add_mutually_exclusive_group(required=True)
    where.add_argument("--config", type=Path, help="a YAML file of links")
    where.add_argument("--platform", action="store_true", help="the links of the running platform")
    run.add_argument("--state-dir", type=Path, default=None,
                     help="the platform's state directory ($SEAWAY_STATE_DIR, default ~/.seaway/platform)")
    run.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    args = parser.parse_args(argv)
    try:
        links = load_links(args.config) if args.config else platform_links(args.state_dir)
    except CliError as exc:
        print(f"mirror {args.command}: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        anyio.run(_run, links)
    except KeyboardInterrupt:
        pass
    return 0


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
    links = []
    for i, item in enumerate(items):
        try:
            links.append(LinkConfig.model_validate(item))
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(x) for x in err["loc"])
            raise CliError(f"{path}: links[{i}].{field}: {err['msg']}") from None
    return links


def platform_links(state_dir: Path | None) -> list[LinkConfig]:
    from regions.layout import plan
    from regions.topology import TopologyError, load_topology
    state_dir = state_dir or Path(os.environ.get("SEAWAY_STATE_DIR") or Path.home() / ".seaway" / "platform")
    try:
        info = json.loads((state_dir / "platform.json").read_text())
        topology = load_topology(Path(info["topology"]))
    except (OSError, ValueError, KeyError, TopologyError) as exc:
        raise CliError(f"no running platform in {state_dir} ({exc})") from None
    layout = plan(topology, state_dir)
    links = []
    for m in topology.mirrors:
        target_region = topology.region_of(m.target)
        links.append(LinkConfig(source_alias=m.source, target_alias=m.target,
                                source_bootstrap=layout.wan_bootstrap(m.source, target_region),
                                target_bootstrap=layout.clusters[m.target].bootstrap,
                                topics=m.topics, exclude=m.exclude or LinkConfig.model_fields["exclude"].default_factory(),
                                policy=m.policy))
    if not links:
        raise CliError(f"the platform's topology ({info['topology']}) has no mirror links")
    return links


async def _run(links: list[LinkConfig]) -> None:
    async with anyio.create_task_group() as tg:
        for link in links:
            tg.start_soon(MirrorLink(link).run)
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                logging.getLogger("mirror").info("stopping")
                tg.cancel_scope.cancel()
                return


if __name__ == "__main__":
    sys.exit(main())
