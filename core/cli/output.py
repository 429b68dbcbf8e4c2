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
    parser.add_argument("--output", "-O", choices=["table", "json"], default="table",
                        help="output format (default: table)")


def add_bootstrap_flag(parser, *, leaf: bool = False) -> None:
    """On the command group and on each action, so it may come before or after the action.
    Actions use SUPPRESS so that an absent flag there does not undo one given earlier."""
    import argparse
    import os
    default = argparse.SUPPRESS if leaf else os.environ.get("SEAWAY_BOOTSTRAP", "127.0.0.1:9092")
    parser.add_argument("--bootstrap-server", "-b", metavar="HOST:PORT", default=default,
                        help="broker to connect to (default: $SEAWAY_BOOTSTRAP or 127.0.0.1:9092)")
    parser.add_argument("--command-config", metavar="FILE", default=argparse.SUPPRESS if leaf else None,
                        help="Kafka client properties to connect with (security.protocol, ssl.*), "
                             "as Kafka's tools take them")
