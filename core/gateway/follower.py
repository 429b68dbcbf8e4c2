"""Following the DR controller: the latest decision for one pair, read from `__seaway_dr` on
every cluster of the pair that answers, and what each cluster's brokers are.

Each cluster keeps its own copy of the decision record (the controller writes it to both,
and a cluster that was away has an older one), so the gateway reads both and takes the
highest epoch: it needs no other gateway and no controller to answer. The reads are long
polls, so a new record reaches the gateway within a fetch round trip, not a polling period.
When neither cluster has answered for `stale_after_s`, the gateway keeps serving what it
last learnt and says so (`stale`, exported as a metric).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from core.client import Consumer, KafkaClient
from core.client.errors import KafkaError
from core.protocol.dr import DR_STATE_TOPIC, PHASE_ORDER, Decision

log = logging.getLogger("seaway.gateway")

POLL_MS = 250
RETRY_S = 1.0


@dataclass
class Source:
    """One cluster as the gateway last saw it."""
    name: str
    bootstrap: str
    decision: Decision | None = None
    answered_at: float = 0.0            # time.monotonic() of its last answer; 0: never
    error: str | None = None
    brokers: dict[int, tuple[str, int]] = field(default_factory=dict)   # id -> (host, port)


class DecisionFollower:
    """Reads the pair's decision from every cluster; calls `on_change` with the best one
    whenever it changes, and keeps each cluster's broker list fresh for the proxy."""

    def __init__(self, pair: str, clusters: dict[str, str], on_change: Callable[[Decision], None], *,
                 stale_after_s: float = 10.0, client_factory: Callable[[str], KafkaClient] | None = None):
        self.pair = pair
        self.sources = {name: Source(name, bootstrap) for name, bootstrap in clusters.items()}
        self.on_change = on_change
        self.stale_after_s = stale_after_s
        self._client_factory = client_factory or (lambda bootstrap: KafkaClient(
            bootstrap, client_id="seaway-gateway", allow_auto_create_topics=False, request_timeout_ms=5000))
        self.best: Decision | None = None

    @property
    def stale(self) -> bool:
        """No cluster has told us the decision lately: we serve what we last learnt."""
        last = max((s.answered_at for s in self.sources.values()), default=0.0)
        return time.monotonic() - last > self.stale_after_s

    def seconds_since_answer(self) -> float:
        last = max((s.answered_at for s in self.sources.values()), default=0.0)
        return time.monotonic() - last if last else float("inf")

    async def run(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        async with anyio.create_task_group() as tg:
            for source in self.sources.values():
                tg.start_soon(self._follow, source)
            task_status.started()

    async def _follow(self, source: Source) -> None:
        while True:
            try:
                async with self._client_factory(source.bootstrap) as client:
                    await self._read(client, source)
            except (KafkaError, OSError, TimeoutError) as exc:
                if source.error != str(exc):
                    log.warning("decision from %s: %s; serving what was last learnt", source.name, exc)
                source.error = str(exc)
            await anyio.sleep(RETRY_S)

    async def _read(self, client: KafkaClient, source: Source) -> None:
        view = await client.refresh_metadata([DR_STATE_TOPIC])
        self._note_brokers(source, view)
        if DR_STATE_TOPIC not in view.topics:
            # No DR controller has acted on this cluster yet: nothing to follow, but it answers.
            source.answered_at = time.monotonic()
            source.error = None
            return
        consumer = Consumer(client, fetch_max_wait_ms=POLL_MS, auto_offset_reset="earliest")
        consumer.assign([(DR_STATE_TOPIC, 0)])
        try:
            refreshed = time.monotonic()
            while True:
                records = await consumer.poll(timeout_ms=POLL_MS * 2)
                source.answered_at = time.monotonic()
                source.error = None
                for record in records:
                    if record.key == self.pair.encode() and record.value is not None:
                        self._consider(source, record.value)
                if time.monotonic() - refreshed > 5.0:
                    self._note_brokers(source, await client.refresh_metadata([DR_STATE_TOPIC]))
                    refreshed = time.monotonic()
        finally:
            await consumer.close()

    def _note_brokers(self, source: Source, view: Any) -> None:
        source.brokers = {b.node_id: (b.host, b.port) for b in view.brokers.values()}
        source.answered_at = time.monotonic()

    def _consider(self, source: Source, value: bytes) -> None:
        try:
            decision = Decision.decode(value)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("%s: an unreadable decision for %s in %s: %s", source.name, self.pair, DR_STATE_TOPIC, exc)
            return
        source.decision = decision
        best = self.best
        if best is None or _rank(decision) > _rank(best):
            self.best = decision
            self.on_change(decision)


def _rank(decision: Decision) -> tuple[int, int]:
    # Within one epoch the controller writes draining, switching, serving, in that order.
    return decision.epoch, PHASE_ORDER.get(decision.phase, -1)
