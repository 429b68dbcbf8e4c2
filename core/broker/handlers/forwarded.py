"""The admin requests a KRaft broker forwards to the active controller: CreateTopics (19),
DeleteTopics (20), AlterConfigs (33), CreatePartitions (37), IncrementalAlterConfigs (44).

A standalone node handles them itself (create_topics.py and the others). In a KRaft cluster
the controller owns metadata: the broker sends it the request as it came (forwarding.py), and
relays the answer once its own image shows the change, so the client's next Metadata request
to this broker sees what it just did. If no controller answers within the request's timeout,
every topic or resource gets NOT_CONTROLLER (retriable), as from Kafka.
"""
from __future__ import annotations

import logging

from core.client.errors import KafkaError
from core.controller.controller import QuorumController
from core.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

FORWARDED = (19, 20, 33, 37, 44)
DEFAULT_TIMEOUT_MS = 30_000
SHOW_TIMEOUT_S = 5.0


def kraft_or(standalone):
    """The request table entry: the standalone handler, or forwarding in a KRaft cluster."""
    async def handle(ctx, request):
        if ctx.broker.kraft is None:
            return await standalone(ctx, request)
        return await forward(ctx, request)
    return handle


async def forward(ctx, request):
    kraft = ctx.broker.kraft
    timeout_ms = getattr(request, "timeout_ms", 0) or DEFAULT_TIMEOUT_MS
    synced_before = kraft.sync.synced_offset
    try:
        answer = await kraft.channel.send(ctx.api_key, request, ctx.api_version, timeout_ms / 1000)
    except KafkaError as exc:
        log.warning("forwarding API %d to the controller failed: %s", ctx.api_key, exc)
        return QuorumController._error_response(ctx.api_key, request, ctx.api_version,
                                                ErrorCode.NOT_CONTROLLER, str(exc))
    shown = _shown(ctx, request, answer, synced_before)
    if shown is not None and not await kraft.sync.wait_synced(shown, SHOW_TIMEOUT_S):
        log.info("API %d: the controller's change is not in this broker's image after %gs",
                 ctx.api_key, SHOW_TIMEOUT_S)
    return answer


def _shown(ctx, request, answer, synced_before: int):
    """A predicate that holds once this broker's image reflects a successful answer."""
    broker = ctx.broker
    if getattr(request, "validate_only", False):
        return None
    if ctx.api_key == 19:
        names = [t.name for t in answer.topics if t.error_code == 0]
        return (lambda: all(n in broker.topics for n in names)) if names else None
    if ctx.api_key == 20:
        names = [r.name for r in answer.responses if r.error_code == 0 and r.name]
        return (lambda: not any(n in broker.topics for n in names)) if names else None
    if ctx.api_key == 37:
        wanted = {t.name: t.count for t in request.topics}
        done = [r.name for r in answer.results if r.error_code == 0]
        return (lambda: all(n in broker.topics and len(broker.topics[n].partitions) >= wanted[n]
                            for n in done)) if done else None
    if any(r.error_code == 0 for r in answer.responses):
        return lambda: broker.kraft.sync.synced_offset > synced_before
    return None
