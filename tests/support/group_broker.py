"""A real on-disk broker in process, with a controlled clock, for tests of its group
coordinator."""
from __future__ import annotations

import anyio

from core.broker.broker import Broker
from core.config import BrokerConfig

MINUTE = 60_000


class Clock:
    def __init__(self, now=1_000_000):
        self.now = now

    def __call__(self):
        return self.now


def make_broker(tmp_path, clock, **extra) -> Broker:
    props = {"node.id": "1", "log.dirs": str(tmp_path / "data"), "offsets.topic.num.partitions": "4",
             "offsets.retention.minutes": "10", "group.initial.rebalance.delay.ms": "0"}
    props.update({k.replace("_", "."): str(v) for k, v in extra.items()})
    broker = Broker(BrokerConfig(props), clock=clock)
    broker.open()
    return broker


async def run(broker: Broker, body):
    async with anyio.create_task_group() as tg:
        tg.start_soon(broker.groups.run_writer)
        tg.start_soon(broker.groups.run_timers)
        try:
            await body(broker.groups)
        finally:
            tg.cancel_scope.cancel()


async def create_topic(broker: Broker, name="t", partitions=2):
    await broker.create_topic(name, partitions, 1, {})
