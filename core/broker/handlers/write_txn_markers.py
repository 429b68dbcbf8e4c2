"""WriteTxnMarkers (key 27), v0-1.

From a transaction coordinator to the leaders of a transaction's partitions: append the commit
or abort marker of (producer id, epoch) with the coordinator's epoch; also what
`seaway transactions abort` sends to end a hanging transaction. Needs ALTER on the cluster (an
operator, Kafka 3.8+, KIP-1037) or CLUSTER_ACTION (a broker), else CLUSTER_AUTHORIZATION_FAILED
for every partition. Per partition: NOT_LEADER_OR_FOLLOWER
where another broker leads, UNKNOWN_TOPIC_OR_PARTITION where the partition is gone (the
coordinator then stops asking), INVALID_PRODUCER_EPOCH for an epoch older than the producer's,
TRANSACTION_COORDINATOR_FENCED for a coordinator epoch older than the last marker's
(transactions/markers.py, producer_state.py). The answer follows the ISR (acks=all).

A Seaway coordinator also sends, in tagged fields of its own, the transaction's start and its
partition count per topic, which the marker's value then carries after Kafka's fields
(core/protocol/txn_markers.py); markers from anyone else have no such extension.
"""
from __future__ import annotations

from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.protocol.txn_markers import TxnShape
from core.security.authorizer import CLUSTER_NAME, Operation, ResourceType

from ..transactions.markers import append_markers
from .txn_common import side_by_side

R = m.WriteTxnMarkersResponse


def _result(producer_id: int, codes: dict) -> "R.WritableTxnMarkerResult":
    by_topic: dict[str, list] = {}
    for (topic, index), code in codes.items():
        by_topic.setdefault(topic, []).append(R.WritableTxnMarkerPartitionResult(partition_index=index,
                                                                                 error_code=code))
    return R.WritableTxnMarkerResult(producer_id=producer_id, topics=[
        R.WritableTxnMarkerTopicResult(name=t, partitions=ps) for t, ps in by_topic.items()])


def _shape(marker) -> TxnShape | None:
    """What names the transaction, from the Seaway coordinator's tagged fields (none from a
    Kafka coordinator or kafka-transactions abort); a negative count is left out as unknown."""
    if marker.seaway_transaction_start_ms < 0:
        return None
    topics = tuple((t.name, t.partition_count) for t in marker.seaway_transaction_topics)
    return TxnShape(marker.seaway_transaction_start_ms,
                    topics if topics and all(n > 0 for _, n in topics) else None)


async def handle(ctx, req):
    allowed = ctx.authorize(Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME, log_denied=False) \
        or ctx.authorize(Operation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)
    async def write(marker) -> "R.WritableTxnMarkerResult":
        tps = [(t.name, i) for t in marker.topics for i in t.partition_indexes]
        if not allowed:
            codes = dict.fromkeys(tps, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        else:
            codes = await append_markers(ctx.broker, marker.producer_id, marker.producer_epoch,
                                         marker.coordinator_epoch, marker.transaction_result, tps, _shape(marker))
        return _result(marker.producer_id, codes)

    # Markers are appended and replicated side by side, not one after another's ISR.
    return R(markers=await side_by_side(req.markers, write))


HANDLES = {m.ApiKey.WRITE_TXN_MARKERS: handle}
