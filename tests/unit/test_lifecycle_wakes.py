"""A broker registering, waiting to be unfenced or shutting down tries again as soon as the
quorum moves (a leader change or a commit), not when its backoff or heartbeat interval runs
out (core/node/lifecycle.py). With both made a minute long here, a one-node cluster still
serves and stops within seconds only because the quorum's progress wakes its lifecycle."""
from __future__ import annotations

import time

import anyio
import pytest

from core.node import lifecycle
from tests.support.inprocess import create_topic, running_node

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]


async def test_a_node_registers_is_unfenced_and_stops_on_the_quorum_s_progress(tmp_path, monkeypatch,
                                                                                anyio_backend):
    monkeypatch.setattr(lifecycle, "RETRY_BACKOFF_S", 60.0)
    monkeypatch.setattr(lifecycle, "FENCED_HEARTBEAT_S", 60.0)
    started = time.monotonic()
    with anyio.fail_after(20):
        async with running_node(tmp_path, {"broker.heartbeat.interval.ms": "60000"}) as node:
            assert node.lifecycle.broker_epoch >= 0 and not node.lifecycle.fenced
            await create_topic(node, "t", 2)      # leads its partitions: shutdown must move them
            serving = time.monotonic()
        stopped = time.monotonic()
    assert node.lifecycle.shutdown_granted.is_set(), "the controller never granted the controlled shutdown"
    assert serving - started < 10 and stopped - serving < 10, (serving - started, stopped - serving)
