"""A real node in process for group-coordinator tests, with a test clock:

    clock = Clock()
    async with group_node(tmp_path, clock) as node:       # __consumer_offsets ready
        await create_topic(node, "t", 2)
        await node.broker.groups.commit_offsets(...)
    async with group_node(tmp_path, clock) as node:       # a restart: the groups loaded again
        node.broker.groups.fetch_offsets(...)

The node runs the group writer, timers and offset-expiry jobs itself (core/node/server.py); the
expiry job runs every offsets.retention.check.interval.ms (10 minutes of real time), so a test
calls `expire_offsets()` when it wants expiry.
"""
from __future__ import annotations

from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator

from core.node.server import NodeHandle

from .inprocess import Clock, create_topic, offsets_topic_ready, running_node

__all__ = ["MINUTE", "Clock", "create_topic", "group_node"]

MINUTE = 60_000


def group_props(**extra) -> dict[str, str]:
    """The node's properties; `extra` as keywords with _ for . (group_max_session_timeout_ms=...)."""
    props = {"offsets.topic.num.partitions": "4", "offsets.retention.minutes": "10",
             "group.initial.rebalance.delay.ms": "0"}
    props.update({k.replace("_", "."): str(v) for k, v in extra.items()})
    return props


@asynccontextmanager
async def group_node(directory: Path, clock: Clock, **extra) -> AsyncIterator[NodeHandle]:
    """`running_node` with the group tests' properties, once __consumer_offsets exists and every
    partition of it is loaded here (so this broker coordinates every group). Entering again on
    the same directory is a restart, and waits for the groups to load again."""
    async with running_node(directory, group_props(**extra), clock=clock) as node:
        await offsets_topic_ready(node)
        yield node
