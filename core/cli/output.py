"""Rendering for CLI results: readable tables by default, JSON with --output json."""
from __future__ import annotations

import json
import sys
from typing import Any, Iterable, Sequence


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], out=None) -> None:
    out = out or sys.stdout
    text_rows = [[_cell(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in text_rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()
    print(line, file=out)
    for row in text_rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip(), file=out)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value) or "-"
    return str(value)


def emit_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")


def add_output_flag(parser) -> None:
    from core.arguments import deprecated_alias
    parser.add_argument("--output", "-o", choices=["table", "json"], default="table",
                        help="output format (default: table)")
    deprecated_alias(parser, "-O", dest="output", replacement="-o (--output)", prog="seaway",
                     choices=["table", "json"])


def add_bootstrap_flag(parser, *, leaf: bool = False, cluster_flag: bool = True) -> None:
    """On the command group and on each action, so it may come before or after the action.
    Every default is SUPPRESS: an absent flag on an action does not undo one given earlier,
    and common.resolve_cluster() decides what an absent one means. `cluster_flag=False` where
    `--cluster` means something else (`seaway acls`, as in kafka-acls): `seaway --cluster NAME
    acls ...` still picks the cluster."""
    import argparse
    parser.add_argument("--bootstrap-server", "-b", metavar="HOST:PORT", default=argparse.SUPPRESS,
                        help="broker to connect to (default: $SEAWAY_BOOTSTRAP, else the running "
                             "platform's only cluster, else 127.0.0.1:9092)")
    parser.set_defaults(talks_to_cluster=True)     # main() resolves the cluster for it
    if cluster_flag:
        add_cluster_flag(parser)
    parser.add_argument("--command-config", metavar="FILE", default=argparse.SUPPRESS,
                        help="Kafka client properties to connect with (security.protocol, ssl.*), "
                             "as Kafka's tools take them (default with --cluster: the platform's "
                             "admin properties on a secured platform)")


def add_cluster_flag(parser) -> None:
    import argparse
    parser.add_argument("--cluster", metavar="NAME", dest="platform_cluster", default=argparse.SUPPRESS,
                        help="a cluster of the platform `regions up` runs ($SEAWAY_STATE_DIR or "
                             "--state-dir), by name: its bootstrap servers and, on a secured "
                             "platform, its admin client properties")
