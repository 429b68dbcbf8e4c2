"""Producer id blocks: AllocateProducerIds (KIP-730), Kafka's ProducerIdControlManager.

A broker does not pick producer ids itself: it asks the active controller
for a block of PRODUCER_ID_BLOCK_SIZE ids and hands them out to InitProducerId until the block
runs low. The controller keeps one number, the image's `next_producer_id` (the first id of the
next block; 0 on a fresh log), and grants [next, next + 1000) by writing a
ProducerIdsRecord(BrokerId, BrokerEpoch, NextProducerId=next + 1000). Blocks are taken from the
pending image, so two requests in flight never get the same block; a block whose record never
commits is simply lost (its ids are never reused: the next block starts after the committed
ones, and ids need only be unique, not dense).

Where ids begin. Kafka starts every cluster at 0. Seaway starts a fresh cluster at a base of
its own, `producer_id_base(cluster.id)`: one of 2^20 ranges of 2^32 ids, picked by the
cluster id's CRC32C (core/protocol/dr.py's producer_id_range). The two clusters of a DR pair then hand out different ids (unless their
ids collide in 20 bits, one pair in a million), and that is what lets a DR link keep an
application producer's id on the other cluster (mirror/batches.py): its id there cannot be
another producer's. A cluster whose log already has a ProducerIdsRecord continues from it.

Checks, in Kafka's order:
* the broker must be registered with exactly the epoch it sends (ClusterControlManager.
  checkBrokerEpoch): otherwise STALE_BROKER_EPOCH. A fenced broker may allocate; Kafka does not
  look at fencing here.
* the block must end at or below Long.MAX_VALUE: otherwise UNKNOWN_SERVER_ERROR, no record.

The response has no error message field; errors carry only the code (ProducerIdStart and
ProducerIdLen stay 0), as Kafka's AllocateProducerIdsRequest.getErrorResponse builds them.
"""
from __future__ import annotations

from core.protocol import messages as m
from core.protocol.dr import producer_id_range
from core.protocol.codegen import Message
from core.protocol.errors import ErrorCode, KafkaError

from .brokers import check_broker_epoch
from .common import Working

PRODUCER_ID_BLOCK_SIZE = 1000   # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE
MAX_PRODUCER_ID = 2**63 - 1     # Long.MAX_VALUE


def producer_id_base(cluster_id: str) -> int:
    """The first producer id of a fresh cluster (see the module's notes)."""
    return producer_id_range(cluster_id).start


def allocate_producer_ids(w: Working, request: m.AllocateProducerIdsRequest,
                          cluster_id: str = "") -> m.AllocateProducerIdsResponse:
    """Grant the requesting broker the next block; adds its ProducerIdsRecord to `w`."""
    check_broker_epoch(w, request.broker_id, request.broker_epoch)
    first = w.image.next_producer_id or producer_id_base(cluster_id)
    if first > MAX_PRODUCER_ID - PRODUCER_ID_BLOCK_SIZE:
        raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR,
                       "Exhausted all producerIds as the next block's end producerId has "
                       "exceeded the int64 type limit")
    w.add([m.ProducerIdsRecord(broker_id=request.broker_id, broker_epoch=request.broker_epoch,
                               next_producer_id=first + PRODUCER_ID_BLOCK_SIZE)])
    return m.AllocateProducerIdsResponse(throttle_time_ms=0, error_code=0, producer_id_start=first,
                                         producer_id_len=PRODUCER_ID_BLOCK_SIZE)


def error_response(code: ErrorCode) -> Message:
    return m.AllocateProducerIdsResponse(throttle_time_ms=0, error_code=code, producer_id_start=0,
                                         producer_id_len=0)
