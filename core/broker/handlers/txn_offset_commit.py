"""TxnOffsetCommit (key 28), v0-4.

A transactional producer's consumed offsets, sent to the group coordinator after
AddOffsetsToTxn: they are appended to `__consumer_offsets` as part of the producer's
transaction and become the group's committed offsets only when the transaction commits
(groups/manager.py). Needs WRITE on the transactional id and READ on the group
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED for every partition), and
READ on each topic (TOPIC_AUTHORIZATION_FAILED). v3+ carries the member's generation, member
id and instance id, checked as for OffsetCommit (KIP-447: ILLEGAL_GENERATION,
UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID), so that a zombie member cannot commit; without them the
group is not checked. An unknown partition is UNKNOWN_TOPIC_OR_PARTITION and metadata over
offset.metadata.max.bytes OFFSET_METADATA_TOO_LARGE; the rest are written together.
PRODUCER_FENCED is INVALID_PRODUCER_EPOCH below v2.
"""
from __future__ import annotations

from core.broker.groups.storage import CommittedOffset
from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.security.authorizer import Operation, ResourceType

from .commit_common import checked_offsets
from .txn_common import for_version

R = m.TxnOffsetCommitResponse


def _response(req, codes):
    return R(throttle_time_ms=0, topics=[
        R.TxnOffsetCommitResponseTopic(name=t.name, partitions=[
            R.TxnOffsetCommitResponsePartition(partition_index=p.partition_index,
                                               error_code=codes[(t.name, p.partition_index)])
            for p in t.partitions]) for t in req.topics])


async def handle(ctx, req):
    v = ctx.api_version
    b = ctx.broker
    tps = [(t.name, p.partition_index) for t in req.topics for p in t.partitions]
    if not ctx.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
        return _response(req, dict.fromkeys(tps, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
    if not ctx.authorize(Operation.READ, ResourceType.GROUP, req.group_id):
        return _response(req, dict.fromkeys(tps, ErrorCode.GROUP_AUTHORIZATION_FAILED))
    now = b.clock()
    codes, offsets = checked_offsets(ctx, req.topics, lambda p, metadata: CommittedOffset(
        p.committed_offset, p.committed_leader_epoch if v >= 2 else -1, metadata, now))
    generation, member, instance = (req.generation_id, req.member_id, req.group_instance_id) if v >= 3 \
        else (-1, "", None)
    code = await b.groups.commit_txn_offsets(req.group_id, req.producer_id, req.producer_epoch, generation,
                                             member, instance, offsets)
    for tp in offsets:
        codes[tp] = for_version(code, v, 2)
    return _response(req, codes)


HANDLES = {m.ApiKey.TXN_OFFSET_COMMIT: handle}
