"""AdminCore: what Admin and its mixins (GroupAdmin, ReplicaAdmin) share: the client, the
default timeout and the retry core that runs a request per item and retries retriable errors."""
from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable, Mapping, TypeVar

from core.protocol.errors import ErrorCode, KafkaError

from .client import KafkaClient

K = TypeVar("K")

_UNKNOWN_TOPIC = frozenset({ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID})


class AdminCore:
    def __init__(self, client: KafkaClient, *, timeout_ms: int | None = None):
        self.client = client
        self.timeout_ms = client.default_api_timeout_ms if timeout_ms is None else timeout_ms

    # ------------------------------------------------------------------ retry core

    async def _per_item(self, items: Mapping[K, Any],
                        attempt: Callable[[dict[K, Any]], Awaitable[dict[K, Any]]],
                        timeout_ms: float | None = None, final: frozenset = _UNKNOWN_TOPIC,
                        also_retry: frozenset = frozenset()) -> dict[K, Any]:
        """Run `attempt(items)` -> {item: result or KafkaError}; retry the items whose
        error is retriable (or all of them if `attempt` raised a retriable error).

        Codes in `final` are answers, not hiccups, even though Kafka marks them retriable:
        a broker saying a topic does not exist is not retried. Codes in `also_retry` are
        retried although Kafka's table does not mark them so (an operation's own "ask
        again", such as CONCURRENT_TRANSACTIONS)."""
        await self.client.start()  # idempotent: an Admin may be used before anyone started the client
        budget = self.timeout_ms if timeout_ms is None else timeout_ms
        deadline = time.monotonic() + budget / 1000
        todo = dict(items)
        results: dict[K, Any] = {}
        tries = 0
        while todo:
            try:
                outcome = await attempt(todo)
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                outcome = {k: exc for k in todo}
            retry = {k: todo[k] for k, v in outcome.items()
                     if isinstance(v, KafkaError) and (v.retriable or v.code in also_retry)
                     and v.code not in final and k in todo}
            results.update(outcome)
            delay = self.client.backoff_ms(tries) / 1000
            if not retry or time.monotonic() + delay >= deadline:
                break
            tries += 1
            await asyncio.sleep(delay)
            # A moved controller shows up in fresh metadata; moved leaders are picked up by
            # ensure_topics in the attempts that need them (the view is flagged stale).
            self.client.request_metadata_update()
            try:
                await self.client.refresh_metadata([])
            except KafkaError as exc:
                if not exc.retriable:
                    raise
            todo = retry
        return results

    def _send_timeout(self, broker_timeout_ms: int) -> float:
        return broker_timeout_ms + self.client.request_timeout_ms
