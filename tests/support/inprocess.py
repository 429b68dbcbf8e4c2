"""A whole Seaway node in the test's own event loop, for tests that reach into the broker.

    async with running_node(tmp_path, {"offsets.topic.num.partitions": "4"}, clock=clock) as node:
        await create_topic(node, "t", 2)
        await offsets_topic_ready(node)    # __consumer_offsets exists, loaded, coordinated here
        node.broker.groups...              # the real broker, its logs and coordinator

The node is the real one (`core.node.server.run_node`: a one-node cluster with its quorum,
controller, listeners and background jobs), so topics are created the only way they are, through
the controller; only its broker clock may be a test's. Leaving the block shuts it down
gracefully, as SIGTERM would, so the next `running_node`
on the same directory is a restart.

Group tests: `offsets_topic_ready(node)` has __consumer_offsets created and waits until this
broker coordinates every group (after a restart: until the groups are loaded again);
tests/support/group_node.py wraps both with the group tests' properties.
"""
from __future__ import annotations

from core.protocol.errors import KafkaError
import itertools
import logging
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import AsyncIterator

import anyio

from core.broker.groups.storage import TOPIC as OFFSETS_TOPIC
from core.broker.groups.storage import partition_for
from core.client import Admin, KafkaClient, NewTopic
from core.config import BrokerConfig
from core.node.server import NodeHandle, run_node

log = logging.getLogger(__name__)

START_TIMEOUT_S = 30
READY_TIMEOUT_S = 30


class Clock:
    """A broker clock (epoch ms) that moves only when a test moves it: `clock.now += ...`."""

    def __init__(self, now: int = 1_000_000):
        self.now = now

    def __call__(self) -> int:
        return self.now


@asynccontextmanager
async def running_node(directory: Path, props: dict[str, str] | None = None, *,
                       clock=None) -> AsyncIterator[NodeHandle]:
    config = BrokerConfig({"node.id": "1", "listeners": "PLAINTEXT://127.0.0.1:0",
                           "log.dirs": str(Path(directory) / "data"), **(props or {})})
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(START_TIMEOUT_S):
            handle = await tg.start(partial(run_node, config, clock=clock))
            await handle.serving.wait()
        try:
            yield handle
        finally:
            with anyio.CancelScope(shield=True):
                await handle.shutdown()
                await handle.stopped.wait()


def bootstrap(node: NodeHandle) -> str:
    host, port = node.bound["PLAINTEXT"]
    return f"{host}:{port}"


async def create_topic(node: NodeHandle, name: str, partitions: int = 1, configs: dict[str, str] | None = None):
    """Create a topic through the controller and return the broker's Topic once its partitions
    are open here (and lead)."""
    async with KafkaClient(bootstrap(node)) as client:
        results = await Admin(client).create_topics([NewTopic(name, partitions, 1, configs or {})])
    if results.get(name) is not None:
        raise results[name]
    await _reconciled(node)
    return node.broker.topics[name]


async def _reconciled(node: NodeHandle) -> None:
    """Wait until the broker has finished reconciling an image at least as new as the loader's
    now. An admin answer comes once the broker's topic table shows the change, which may be in
    the middle of the reconcile that makes it (a created topic's partitions not open yet, a
    deleted topic's offsets not yet handed to the group coordinator)."""
    sync = node.broker.kraft.sync
    target = node.broker.kraft.quorum.loader.next_offset
    with anyio.fail_after(READY_TIMEOUT_S):
        await sync.wait_synced(lambda: sync.synced_offset >= target, float("inf"))


async def delete_topic(node: NodeHandle, name: str) -> None:
    """Delete a topic through the controller; returns once this broker has removed it (its
    partitions gone, and the group coordinator told: the tombstones for the topic's committed
    offsets are queued)."""
    async with KafkaClient(bootstrap(node)) as client:
        results = await Admin(client).delete_topics([name])
    if results.get(name) is not None:
        raise results[name]
    await _reconciled(node)
    assert name not in node.broker.topics


def _one_group_per_partition(partitions: int) -> list[str]:
    """Group ids whose __consumer_offsets partitions are 0, 1, ... partitions - 1."""
    found: dict[int, str] = {}
    for i in itertools.count():
        found.setdefault(partition_for(f"group-{i}", partitions), f"group-{i}")
        if len(found) == partitions:
            return [found[index] for index in range(partitions)]


def offsets_topic_loaded(node: NodeHandle) -> bool:
    """Does __consumer_offsets exist, with every partition led and loaded here, so that this
    broker coordinates every group (GroupManager.is_coordinator)?"""
    groups = node.broker.groups
    topic = node.broker.topics.get(OFFSETS_TOPIC)
    return (topic is not None and len(topic.partitions) == groups.num_partitions
            and all(groups.is_coordinator(g) for g in _one_group_per_partition(groups.num_partitions)))


async def offsets_topic_ready(node: NodeHandle) -> None:
    """Have __consumer_offsets created (as a group request's first use would: the controller
    creates it in the background) and wait until this broker has loaded every partition of it,
    i.e. coordinates every group. After a restart this is the wait for the groups to load.

    Loading happens in the metadata sync's reconcile (GroupManager.on_metadata), so we wait
    on its progress signal. The creation is asked again on every round in case the background
    creator gave up on an attempt (it only retries when asked)."""
    groups = node.broker.groups
    sync = node.broker.kraft.sync
    with anyio.fail_after(READY_TIMEOUT_S):
        while not offsets_topic_loaded(node):
            try:
                await groups.ensure_topic()
            except KafkaError:
                pass   # COORDINATOR_NOT_AVAILABLE: being created
            await sync.wait_synced(lambda: offsets_topic_loaded(node), timeout_s=1.0)
