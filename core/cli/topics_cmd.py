"""`seaway topics`: create, list, describe, delete and alter topics (like kafka-topics)."""
from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("topics", help="manage topics")
    p.set_defaults(func=lambda args: p.print_help())
