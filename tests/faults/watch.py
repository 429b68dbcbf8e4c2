"""Watch a topic's leaders and ISRs during a fault run, from outside the fault network.

A run that passes the checker only means something if the faults moved leaders and shrank
ISRs; this thread asks the nodes' real ports (never the proxies) for Metadata every
`interval` and counts the changes it sees.
"""
from __future__ import annotations

import asyncio
import threading

from core.client.connection import BrokerConnection
from core.protocol import messages as m
from tests.support.cluster import KRaftCluster


async def _metadata(port: int, topic: str):
    conn = BrokerConnection("127.0.0.1", port, client_id="fault-watch", request_timeout_ms=1000,
                            connect_timeout_ms=1000)
    await conn.connect()
    try:
        R = m.MetadataRequest
        return await conn.send(R(topics=[R.MetadataRequestTopic(name=topic)],
                                 allow_auto_topic_creation=False))
    finally:
        await conn.close()


class Watcher(threading.Thread):
    def __init__(self, cluster: KRaftCluster, topic: str, stop: threading.Event, interval: float = 0.5):
        super().__init__(name="watch", daemon=True)
        self.cluster, self.topic, self.stop_event, self.interval = cluster, topic, stop, interval
        self.state: dict[int, tuple[int, int, tuple]] = {}   # partition -> (leader, epoch, isr)
        self.leader_changes = 0
        self.isr_shrinks = 0
        self.isr_expands = 0

    def run(self) -> None:
        turn = 0
        while not self.stop_event.wait(self.interval):
            running = self.cluster.running()
            if not running:
                continue
            node = self.cluster.nodes[running[turn % len(running)]]
            turn += 1
            try:
                answer = asyncio.run(_metadata(node.port, self.topic))
            except Exception:   # that node is stopped or cut off: ask another next time
                continue
            for t in answer.topics:
                for p in t.partitions:
                    self._observe(p.partition_index, p.leader_id, p.leader_epoch, tuple(sorted(p.isr_nodes)))

    def _observe(self, partition: int, leader: int, epoch: int, isr: tuple) -> None:
        before = self.state.get(partition)
        if before is not None and epoch < before[1]:
            return   # a node with an older view of the metadata: not a change
        if before is not None:
            self.leader_changes += epoch > before[1]
            self.isr_shrinks += len(isr) < len(before[2])
            self.isr_expands += len(isr) > len(before[2])
        self.state[partition] = (leader, epoch, isr)

    def summary(self) -> str:
        return (f"leader changes {self.leader_changes}, ISR shrinks {self.isr_shrinks}, "
                f"ISR expands {self.isr_expands} (seen by polling metadata)")
