"""The canary: the topic, group and clients a drill moves, following a DR decision exactly as
the README's recipe says applications do (dr/drill.py has the theory of operation).
"""
from __future__ import annotations

import time
from pathlib import Path

import anyio

from core.client import Admin, Consumer, KafkaClient, Producer
from core.client.errors import KafkaError
from core.protocol.errors import ErrorCode

from .config import PairConfig
from .decision import SERVING, Decision, read_file
from .observe import client_for
from .stranded import read_range

CANARY_TOPIC = "seaway-canary"
CANARY_GROUP = "seaway-canary"
CANARY_PARTITIONS = 3
TICK_S = 0.05
SWITCH_TIMEOUT_S = 120.0        # a refused batch waits this long for a decision to follow
GIVE_UP_S = 1.0                 # a send unanswered this long after the decision moved is sent again


class DrillError(Exception):
    """One line: why the drill could not run or did not finish."""


def canary_key(pair_name: str) -> str:
    return f"{pair_name}.canary"


class CanaryTraffic:
    """The canary producer and consumer, following the decision kept under `key` (the canary's
    own, or in a full drill the pair's)."""

    def __init__(self, pair_config: PairConfig, state_dir: Path, run_id: str, rate: float, timeout_s: float,
                 key: str | None = None):
        self.pair_config = pair_config
        self.state_dir = state_dir
        self.key = key or canary_key(pair_config.pair.name)
        self.run_id = run_id
        self.rate = rate
        self.timeout_s = timeout_s
        self.next_seq = 0
        self.queue: list[int] = []                             # numbers not yet acknowledged, in order
        self.acked: dict[int, tuple[str, float]] = {}          # seq -> (cluster, when)
        self.sent_again: set[int] = set()                      # a send got no clear answer
        self._moved_at: float | None = None     # when the decision left the cluster being written to
        self.consumed: list[tuple[int, str, float]] = []       # (seq, cluster, when)
        self.producing = True
        self.produced = False       # the producer has stopped: every record it sent is acknowledged
        self.consuming = True
        self.error: str | None = None

    def active(self) -> Decision | None:
        return read_file(self.state_dir, self.key)

    def first_ack_on(self, cluster: str, after: float) -> float | None:
        return min((t for c, t in self.acked.values() if c == cluster and t >= after), default=None)

    def first_read_on(self, cluster: str, after: float) -> float | None:
        return min((t for _, c, t in self.consumed if c == cluster and t >= after), default=None)

    def _moved_from(self, cluster: str) -> bool:
        decision = self.active()
        return decision is not None and decision.active_cluster != cluster

    async def produce(self) -> None:
        while self.producing or self.queue:
            decision = self.active()
            if decision is None:
                raise DrillError(f"no decision {self.key} in {self.state_dir / 'active'}")
            cluster = decision.active_cluster
            try:
                await self._produce_on(cluster)
            except (KafkaError, OSError, TimeoutError):
                # The cluster went away under the producer (a full drill kills it): what it
                # did not acknowledge waits, in order, for the decision to name the other.
                pass
            if self.queue:
                await self._until_decision_leaves(cluster)
        self.produced = True

    async def _produce_on(self, cluster: str) -> None:
        async with client_for(self.pair_config.access(cluster), self.timeout_s, client_id="seaway-dr-canary") as client:
            producer = Producer(client, acks=-1, enable_idempotence=True, linger_ms=1)
            await producer.start()
            try:
                while self.producing or self.queue:
                    if self.producing:
                        due = int(self.rate * TICK_S) or 1
                        self.queue.extend(range(self.next_seq, self.next_seq + due))
                        self.next_seq += due
                    if not await self._send(producer, cluster):
                        return          # to the cluster the decision names next
                    await anyio.sleep(TICK_S)
            finally:
                # What is still unanswered was given up on (_send): do not wait for it.
                await producer.close(timeout_ms=0)

    async def _send(self, producer: Producer, cluster: str) -> bool:
        """Send the queue; what is acknowledged leaves it. False if anything was refused or
        given up on (it stays queued, in order)."""
        sent = []
        try:
            for seq in self.queue:
                sent.append((seq, await producer.send(CANARY_TOPIC, value=f"{self.run_id}:{seq}".encode(),
                                                      key=str(seq).encode(), partition=seq % CANARY_PARTITIONS)))
        except (KafkaError, OSError, TimeoutError):
            pass        # the rest were never sent
        left = []
        self._moved_at = None
        for seq, delivery in sent:
            try:
                await self._answer(delivery, cluster)
            except (KafkaError, OSError, TimeoutError) as exc:
                if not isinstance(exc, KafkaError) or exc.code != ErrorCode.INVALID_TOPIC_EXCEPTION:
                    self.sent_again.add(seq)    # no clear answer: it may be in the log already
                left.append(seq)
                continue
            self.acked[seq] = (cluster, time.time())
        left += self.queue[len(sent):]
        self.queue = left
        return not left

    async def _answer(self, delivery, cluster: str) -> None:
        """The send's answer; TimeoutError once the decision has named another cluster for
        GIVE_UP_S (a killed cluster never answers, and the producer would retry for minutes);
        once given up on, the rest of the batch at once."""
        while not delivery.done():
            if self._moved_at is None and self._moved_from(cluster):
                self._moved_at = time.monotonic()
            if self._moved_at is not None and time.monotonic() - self._moved_at > GIVE_UP_S:
                raise TimeoutError(f"no answer from {cluster}, which is no longer active")
            await anyio.sleep(TICK_S)
        await delivery

    async def _until_decision_leaves(self, cluster: str) -> None:
        with anyio.fail_after(SWITCH_TIMEOUT_S):
            while not self._moved_from(cluster):
                await anyio.sleep(TICK_S)

    async def consume(self) -> None:
        while self.consuming:
            decision = self.active()
            if decision is None or decision.phase != SERVING:
                await anyio.sleep(TICK_S)
                continue
            try:
                await self._consume_on(decision.active_cluster)
            except (KafkaError, OSError, TimeoutError):
                # Its cluster went away (a full drill): it joins where the decision says next.
                await anyio.sleep(0.5)

    async def _consume_on(self, cluster: str) -> None:
        async with client_for(self.pair_config.access(cluster), self.timeout_s, client_id="seaway-dr-canary") as client:
            consumer = Consumer(client, group_id=CANARY_GROUP, auto_commit=False,
                                session_timeout_ms=10000, heartbeat_interval_ms=1000)
            try:
                consumer.subscribe([CANARY_TOPIC])
                last_commit = time.monotonic()
                while self.consuming:
                    for record in await consumer.poll(timeout_ms=100):
                        run, _, seq = (record.value or b"").decode().partition(":")
                        if run == self.run_id:
                            self.consumed.append((int(seq), cluster, time.time()))
                    moved = self._moved_from(cluster)
                    if moved or time.monotonic() - last_commit > 0.5:
                        with anyio.fail_after(self.timeout_s):
                            await consumer.commit()
                        last_commit = time.monotonic()
                    if moved:
                        break
            finally:
                with anyio.move_on_after(self.timeout_s):
                    await consumer.close()


async def read_run(client: KafkaClient, run_id: str, topic: str = CANARY_TOPIC) -> list[tuple[int, int]]:
    """(partition, seq) of this drill's records in `topic` (none if it does not exist), in log
    order per partition."""
    admin = Admin(client)
    described = (await admin.describe_topics([topic])).get(topic)
    if described is None or isinstance(described, KafkaError):
        if described is None or described.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            return []
        raise described
    tps = [(topic, p.partition) for p in described.partitions]
    ends = await admin.list_offsets({tp: "latest" for tp in tps})
    out: list[tuple[int, int]] = []
    for tp in sorted(tps):
        end = ends[tp]
        if isinstance(end, KafkaError):
            raise end
        # From 0: below the log start the consumer resets to it.
        async for record in read_range(client, *tp, 0, end.offset):
            run, _, seq = (record.value or b"").decode().partition(":")
            if run == run_id:
                out.append((record.partition, int(seq)))
    return out
