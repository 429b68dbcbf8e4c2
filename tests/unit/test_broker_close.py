"""Broker.close with num.recovery.threads.per.data.dir: every log is flushed and marked clean,
whether one thread closes them or several (core/broker/broker.py)."""
from __future__ import annotations

import threading

import anyio
import pytest

from core.broker.broker import Broker
from core.config import BrokerConfig
from core.log.checkpoint import CLEAN_SHUTDOWN_FILE
from tests.support.records import batch


@pytest.mark.parametrize("threads, dirs", [(1, 1), (4, 2)])
def test_every_log_is_closed_clean_and_reopens_with_its_records(tmp_path, threads, dirs, monkeypatch):
    props = {"node.id": "1", "log.dirs": ",".join(str(tmp_path / f"d{i}") for i in range(dirs)),
             "num.recovery.threads.per.data.dir": str(threads)}
    broker = Broker(BrokerConfig(props))
    broker.open()
    anyio.run(lambda: broker.create_topic("t", 6, 1))
    for p in broker.topics["t"].partitions:
        p.log.append(batch(n=p.index + 1))
    closers = set()
    real = Broker._close_partition

    def noting(p):
        closers.add(threading.get_ident())
        real(p)
    monkeypatch.setattr(Broker, "_close_partition", staticmethod(noting))
    broker.close()
    partitions = broker.topics["t"].partitions
    assert all(p.log.closed and (p.log.directory / CLEAN_SHUTDOWN_FILE).exists() for p in partitions)
    assert (len(closers) == 1) == (threads == 1)

    again = Broker(BrokerConfig(props))
    again.open()
    assert [p.log.log_end_offset for p in again.topics["t"].partitions] == [i + 1 for i in range(6)]
    again.close()
