"""ListTransactions (key 66), v0-1.

The transactional ids this broker coordinates (KIP-664), with producer id and state
(`kafka-transactions list`; the admin client asks every broker and merges the answers).
Filters, each matching everything when empty, as Kafka's TransactionStateManager: state names
(Kafka's, case-sensitive: Ongoing, PrepareCommit, ...; a name Kafka does not have is reported
back in UnknownStateFilters and matches nothing), producer ids, and from v1 DurationFilter
(KIP-994, -1: none): only transactions running longer than that many milliseconds.

Only the ids the caller may DESCRIBE are listed; the others are left out without an error, as
Kafka does. COORDINATOR_LOAD_IN_PROGRESS (and nothing listed) while any __transaction_state
partition is loading here.

Departure from Kafka: the duration filter keeps Ongoing transactions only (the coordinator's
`listed`); Kafka compares the start time of whatever transaction the id last had, so a
CompleteCommit id whose last transaction began long ago passes it too.
"""
from __future__ import annotations

from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.security.authorizer import Operation, ResourceType

from ..transactions.state import TxnState

R = m.ListTransactionsResponse


async def handle(ctx, req):
    b = ctx.broker
    coordinator = b.transactions.coordinator
    if coordinator.loading:
        return R(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, unknown_state_filters=[],
                 transaction_states=[])
    states: list[TxnState] = []
    unknown: list[str] = []
    for name in dict.fromkeys(req.state_filters):
        state = TxnState.from_kafka_name(name)
        if state is None:
            unknown.append(name)
        else:
            states.append(state)
    duration = req.duration_filter if ctx.api_version >= 1 else -1
    if req.state_filters and not states:
        listed = []       # every filter named an unknown state: nothing matches
    else:
        listed = coordinator.listed(states, req.producer_id_filters, duration, b.clock())
    return R(throttle_time_ms=0, error_code=ErrorCode.NONE, unknown_state_filters=unknown, transaction_states=[
        R.TransactionState(transactional_id=meta.transactional_id, producer_id=meta.producer_id,
                           transaction_state=meta.state.kafka_name)
        for meta in sorted(listed, key=lambda meta: meta.transactional_id)
        if meta.state is not TxnState.DEAD
        and ctx.authorize(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, meta.transactional_id)])


HANDLES = {m.ApiKey.LIST_TRANSACTIONS: handle}
