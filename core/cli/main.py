"""`seaway`: the command line. Each subcommand lives in its own module.

Errors a user can fix (a bad config value, an unreachable broker, a topic that does not
exist) print one line naming the problem and exit 1; they never print a traceback. Mistakes in
the command line itself (a missing argument, an unknown flag, flags that exclude each other,
an input file that cannot be read or does not parse) are one line too, with exit 2: they are
found before anything is sent to the cluster.
"""
from __future__ import annotations

import argparse
import sys

from . import (acls_cmd, gateway_cmd, groups_cmd, health_cmd, leaders_cmd, node_cmd, quorum_cmd, reassign_cmd, storage_cmd,
               topics_cmd, transactions_cmd, users_cmd)
from core.arguments import OneLineParser

from .common import CliError, UsageError, resolve_cluster

__all__ = ["CliError", "UsageError", "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="seaway", description="Seaway: a multi-region, Kafka-compatible streaming platform")
    parser.add_argument("--cluster", metavar="NAME", dest="platform_cluster", default=None,
                        help="a cluster of the running platform (`regions up`), for every command "
                             "that talks to one")
    parser.add_argument("--state-dir", metavar="DIR", default=None,
                        help="the platform's state directory (default: $SEAWAY_STATE_DIR or ~/.seaway/platform)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    node_cmd.register(sub)
    topics_cmd.register(sub)
    groups_cmd.register(sub)
    transactions_cmd.register(sub)
    storage_cmd.register(sub)
    quorum_cmd.register(sub)
    reassign_cmd.register(sub)
    leaders_cmd.register(sub)
    health_cmd.register(sub)
    users_cmd.register(sub)
    acls_cmd.register(sub)
    gateway_cmd.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if getattr(args, "talks_to_cluster", False):
            resolve_cluster(args)
        return args.func(args) or 0
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into `head` and the like
        sys.stderr.close()
        return 0
    except Exception as exc:  # noqa: BLE001 — the one place that turns errors into a line
        from core.config.defs import ConfigError
        from core.protocol.errors import KafkaError
        known = (CliError, ConfigError, KafkaError, OSError, TimeoutError)
        leaf = _first_leaf(exc)
        if isinstance(leaf, known):
            print(f"seaway: error: {_describe(leaf)}", file=sys.stderr)
            return 2 if isinstance(leaf, UsageError) else 1
        raise


def _first_leaf(exc: BaseException) -> BaseException:
    """Task groups wrap errors in ExceptionGroups; the user needs the error inside."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _describe(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.filename and exc.strerror:
        return f"{exc.filename}: {exc.strerror}"
    return str(exc)
