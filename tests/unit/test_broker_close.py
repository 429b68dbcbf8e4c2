"""Broker.close with num.recovery.threads.per.data.dir: every log is flushed and marked clean,
whether one thread closes them or several (core/broker/broker.py), when a node shuts down."""
from __future__ import annotations

import threading

import pytest

from core.broker.broker import Broker
from core.log.checkpoint import CLEAN_SHUTDOWN_FILE
from core.protocol.records import build_batch, scan_batches
from tests.support.inprocess import create_topic, running_node

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]


def batch(n: int) -> bytearray:
    return bytearray(build_batch([(b"k%d" % i, b"\x00" * 20, [], 1_000) for i in range(n)]))


@pytest.mark.parametrize("threads, dirs", [(1, 1), (4, 2)])
async def test_every_log_is_closed_clean_and_reopens_with_its_records(tmp_path, threads, dirs, monkeypatch,
                                                                       anyio_backend):
    props = {"log.dirs": ",".join(str(tmp_path / f"d{i}") for i in range(dirs)),
             "num.recovery.threads.per.data.dir": str(threads)}
    async with running_node(tmp_path, props) as node:
        broker = node.broker
        topic = await create_topic(node, "t", 6)
        for p in topic.partitions:
            data = batch(n=p.index + 1)
            await p.append(data, scan_batches(data), broker.clock())
        closers = set()
        real = Broker._close_partition

        def noting(p):
            closers.add(threading.get_ident())
            real(p)
        monkeypatch.setattr(Broker, "_close_partition", staticmethod(noting))
    # the node has shut down: Broker.close has run
    partitions = broker.topics["t"].partitions
    assert all(p.log.closed and (p.log.directory / CLEAN_SHUTDOWN_FILE).exists() for p in partitions)
    assert (len(closers) == 1) == (threads == 1)

    async with running_node(tmp_path, props) as node:
        assert [p.log.log_end_offset for p in node.broker.topics["t"].partitions] == [i + 1 for i in range(6)]
