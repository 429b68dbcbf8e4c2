"""EndTxn (key 26), v0-4.

Commits or aborts the producer's ongoing transaction. The answer comes once the coordinator
has written PrepareCommit or PrepareAbort to __transaction_state: the outcome is decided and
survives a crash of the coordinator; the markers are written to the transaction's partitions
after the answer, and until they are, the producer's next AddPartitionsToTxn or EndTxn gets
CONCURRENT_TRANSACTIONS, which clients retry. Needs WRITE on the transactional id.
PRODUCER_FENCED is INVALID_PRODUCER_EPOCH below v2. v5 (transaction version 2: an epoch bump
with every transaction, KIP-890 part 2) is not advertised.
"""
from __future__ import annotations

from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.security.authorizer import Operation, ResourceType

from ..transactions.events import EndResult, EndTxn
from .txn_common import for_version

R = m.EndTxnResponse


async def handle(ctx, req):
    b = ctx.broker
    if not ctx.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
        return R(throttle_time_ms=0, error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    manager = b.transactions
    result = await manager.request(EndTxn(manager.new_request_id(), b.clock(), req.transactional_id,
                                          req.producer_id, req.producer_epoch, req.committed))
    assert isinstance(result, EndResult)
    return R(throttle_time_ms=0, error_code=for_version(result.error, ctx.api_version, 2))


handle.VERSIONS = (0, 4)  # type: ignore[attr-defined]
HANDLES = {m.ApiKey.END_TXN: handle}
