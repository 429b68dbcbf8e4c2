"""What the transaction handlers share: the PRODUCER_FENCED a client too old to know it gets
as INVALID_PRODUCER_EPOCH (Kafka's KafkaApis does the same, per API and version), and the
handling of a request's transactions side by side."""
from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import anyio

from core.protocol.errors import ErrorCode

T = TypeVar("T")


def for_version(code: ErrorCode, version: int, first_with_fenced: int) -> ErrorCode:
    """PRODUCER_FENCED (KIP-588) is understood from `first_with_fenced` on; before, the
    client handles INVALID_PRODUCER_EPOCH the same way (fatal)."""
    if code == ErrorCode.PRODUCER_FENCED and version < first_with_fenced:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code


async def side_by_side(items: Sequence[Any], handle: Callable[[Any], Awaitable[T]]) -> list[T]:
    """`handle` of each item, run at once, the results in the items' order. The transactions
    of one request (a coordinator combines its markers, a leader its verifications) are
    independent: one that waits (for its ISR, or at the coordinator for its previous
    transaction to complete) holds up no other."""
    if len(items) == 1:
        return [await handle(items[0])]
    results: list = [None] * len(items)

    async def one(k: int) -> None:
        results[k] = await handle(items[k])
    async with anyio.create_task_group() as tg:
        for k in range(len(items)):
            tg.start_soon(one, k)
    return results
