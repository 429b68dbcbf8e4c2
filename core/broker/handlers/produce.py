"""Produce (key 0), v3-11.

v3 is the first version that carries record batches v2, the only format we store. Per
partition: check the batches' framing and CRC, refuse batches over the topic's
max.message.bytes, patch base offsets and append the bytes as they came. The records inside
are read only on compacted topics, topics with bounded timestamps and batches that claim
LogAppendTime (record_validation.py); a bad record fails the partition with the index of every
bad record in the first batch that has one (v8+ record_errors, KIP-467). Only a
topic whose compression.type names a codec other than the producer's has its batches decoded
and re-encoded (recompress.py), as Kafka does.

acks: 0 sends no response (and an error closes the connection, as Kafka does, so the client
learns of it); 1 answers after the leader's append and its flush policy. -1 (all) refuses
with NOT_ENOUGH_REPLICAS while the ISR is below min.insync.replicas, and
otherwise answers once every ISR member has the records (the high watermark covers them), or
with NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_LEADER_OR_FOLLOWER or REQUEST_TIMED_OUT (timeout_ms)
if that does not happen; the partitions of one request wait together. On a one-node cluster
the ISR is the node alone, so -1 waits for nothing more.

Transactional batches need the request's transactional id and WRITE on it (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED). KIP-890 part 1 (transaction.partition.verification.enable):
before the first batch of a producer's transaction is appended to a partition, the leader asks
the transaction coordinator whether the partition is in the producer's ongoing transaction and
records a verification guard; the batch is appended only if the coordinator said yes and no
marker came in between, so a late write of an aborted transaction can never start a new,
hanging one. A partition not in the transaction is INVALID_TXN_STATE; a coordinator that cannot
answer (moving, loading, busy) gives NOT_ENOUGH_REPLICAS, which clients below produce v12 retry,
as Kafka maps it.

Idempotent producers (producer id set): the partition checks each batch's epoch and
sequence against the producer's last five batches (producer_state.py). A retry of a batch
already appended is answered with its original offset and nothing is appended; a gap is
OUT_OF_ORDER_SEQUENCE_NUMBER, an old epoch INVALID_PRODUCER_EPOCH.

A read-only DR replica (topic config seaway.replica.of) takes records only from the mirror
copying from the cluster it names; anyone else gets INVALID_TOPIC_EXCEPTION, as a write to an
internal topic does (core/protocol/dr.py). That mirror may also copy the source's transactions
as they are: transactional batches of the source's producers, without a transactional id and
without KIP-890 verification (their coordinator is on the other cluster), and the source's
COMMIT/ABORT markers, one control batch per partition entry, appended after the checks a
coordinator's marker gets (producer_state.py); a control batch from anyone else is
INVALID_RECORD, as in Kafka.
"""
from __future__ import annotations

import logging
from typing import cast

from core.protocol import messages as m
from core.protocol.dr import DR_EPOCH, REPLICA_OF, UNPLANNED_FROM, copies_into, refusal_error, replica_write_refusal
from core.protocol.errors import ErrorCode
from core.protocol.errors import DecodeError
from core.protocol.records import ATTR_TRANSACTIONAL, ATTRIBUTES_AT, InvalidBatch, scan_batches
from core.protocol.txn_markers import COMMIT, read_marker
from core.security.authorizer import Operation, ResourceType

from ..partition import DuplicateAppend, Refused
from ..producer_state import Verdict
from ..recompress import recompress, target_codec
from ..record_validation import RecordRules, find_invalid, needs_reading

log = logging.getLogger(__name__)
R = m.ProduceResponse
PR = R.PartitionProduceResponse


def _error(index: int, code: ErrorCode, message: str | None = None,
           record_errors: tuple[tuple[int, str], ...] = (), log_start_offset: int = -1) -> PR:
    return PR(index=index, error_code=code, base_offset=-1, log_append_time_ms=-1,
              log_start_offset=log_start_offset, error_message=message,
              record_errors=[R.BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=text)
                             for i, text in record_errors])


# What a coordinator's answer to a verification means for the produce (Kafka's
# AddPartitionsToTxnManager, for produce below v12).
_VERIFY_RETRIABLE = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                               ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS})


def _verification_error(code: ErrorCode) -> ErrorCode:
    if code in _VERIFY_RETRIABLE:
        return ErrorCode.NOT_ENOUGH_REPLICAS
    if code in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH):
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return ErrorCode.INVALID_TXN_STATE


async def _verify(ctx, partition, topic, index: int, transactional_id: str, batches):
    """(guard or None, error): KIP-890 verification of a transaction's first batch here."""
    first = next(b for b in batches if b.is_transactional)
    producers = partition.producers
    if not producers.needs_verification(first):
        return None, ErrorCode.NONE
    guard = producers.start_verification(first.producer_id, first.producer_epoch, first.base_sequence,
                                         ctx.broker.clock())
    if guard is None:
        return None, ErrorCode.NONE
    code = await ctx.broker.transactions.verify(transactional_id, first.producer_id, first.producer_epoch,
                                                (topic.name, index))
    return guard, ErrorCode.NONE if code == ErrorCode.NONE else _verification_error(code)


async def _produce_partition(ctx, topic, index: int, records, acks: int = 1, timeout_ms: int = 30_000,
                             transactional_id: str | None = None):
    """The partition's answer, or (with acks=-1 in a cluster) (partition, append result) to
    wait on."""
    partition, code = ctx.broker.leader_partition(topic, index)
    if partition is None:
        return _error(index, code)
    if topic.internal:
        # only the coordinator writes there; a client record could corrupt group state
        return _error(index, ErrorCode.INVALID_TOPIC_EXCEPTION, f"cannot append to internal topic {topic.name}")
    if records is None or len(records) == 0:
        # Kafka's ProduceRequest.validateRecords: INVALID_RECORD, which is not retriable.
        return _error(index, ErrorCode.INVALID_RECORD, "produce request has no records")
    if partition.offline:
        return _error(index, ErrorCode.KAFKA_STORAGE_ERROR, f"partition is offline: {partition.failure}")
    max_batch = topic.configs.get("max.message.bytes")
    try:
        batches = scan_batches(records, max_batch_size=max_batch, from_client=True)
    except InvalidBatch as exc:
        log.warning("%s: rejected produce to %s-%d: %s", ctx.peer, topic.name, index, exc)
        return _error(index, exc.code, str(exc))
    if len(records) > topic.configs.get("segment.bytes"):
        return _error(index, ErrorCode.RECORD_LIST_TOO_LARGE,
                      f"{len(records)} bytes of records exceed segment.bytes")
    refusal_code = ErrorCode.INVALID_TOPIC_EXCEPTION

    def admit() -> str | None:
        """A DR replica takes only its mirror's writes (core/protocol/dr.py). Asked with the
        partition's append lock held, of the topic's configs as they are then: a produce
        that waited for the lock while the topic was fenced is refused, not appended after
        the fence."""
        nonlocal refusal_code
        current = ctx.broker.topics.get(topic.name) or topic
        replica_of = current.configs.get(REPLICA_OF)
        refusal_code = refusal_error(replica_of, ctx.client_id)
        return replica_write_refusal(current.name, replica_of, ctx.client_id, current.configs.get(DR_EPOCH))

    dr_copy = copies_into(ctx.client_id, topic.configs.get(REPLICA_OF))
    if any(b.is_control for b in batches):
        if not dr_copy:
            return _error(index, ErrorCode.INVALID_RECORD, "clients may not write control batches")
        result = await _copy_marker(ctx, partition, records, batches, timeout_ms, admit)
        if isinstance(result, str):
            return _error(index, ErrorCode.INVALID_RECORD, result)
        if isinstance(result, Refused):
            return _error(index, refusal_code, result.message)
        if isinstance(result, ErrorCode):
            return _error(index, result)
        return (partition, result) if getattr(result, "replication", None) is not None \
            else _appended(partition, index, result)
    guard, verify = None, False
    if any(b.is_transactional for b in batches) and not dr_copy:
        if transactional_id is None:
            return _error(index, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                          "transactional records need the request's transactional id")
        verify = ctx.broker.config["transaction.partition.verification.enable"]
        if verify:
            guard, code = await _verify(ctx, partition, topic, index, transactional_id, batches)
            if code:
                return _error(index, code, "the partition is not in the producer's ongoing transaction"
                              if code == ErrorCode.INVALID_TXN_STATE else None)
    rules = _record_rules(topic)
    if needs_reading(rules, batches, trust_stamps=dr_copy):
        rejection = find_invalid(records, batches, rules, ctx.broker.clock(), f"{topic.name}-{index}",
                                 max_decompressed=ctx.broker.config["socket.request.max.bytes"],
                                 trust_stamps=dr_copy)
        if rejection is not None:
            log.info("%s: rejected produce to %s-%d: %s", ctx.peer, topic.name, index, rejection.message)
            return _error(index, rejection.code, rejection.message, rejection.record_errors,
                          partition.log_start_offset)
    # `records` is a writable view into the request frame: the log patches offsets in place.
    data = records if isinstance(records, memoryview) and not records.readonly else bytearray(records)
    codec = target_codec(topic.configs.get("compression.type"))
    if codec is not None:
        try:
            data, batches = recompress(data, batches, codec, max_decompressed=ctx.broker.config["socket.request.max.bytes"])
        except DecodeError as exc:
            return _error(index, ErrorCode.CORRUPT_MESSAGE, f"cannot recompress: {exc}")
    result = await partition.append(data, batches, ctx.broker.clock(), acks=acks, timeout_ms=timeout_ms,
                                    admit=admit, verification_guard=guard, require_verification=verify,
                                    dr_copy=dr_copy, strandable=bool(topic.configs.get(UNPLANNED_FROM)))
    if isinstance(result, ErrorCode):
        return _error(index, result)
    if isinstance(result, Refused):
        return _error(index, refusal_code, result.message)
    if isinstance(result, Verdict):
        if result.is_duplicate:  # already appended: answer as the first time, append nothing
            return PR(index=index, error_code=0, base_offset=result.base_offset, log_append_time_ms=-1,
                      log_start_offset=partition.log_start_offset)
        return _error(index, result.code, result.message)
    if isinstance(result, DuplicateAppend):
        # Replicated: answered as the first append would be, once its acks are satisfied.
        return (partition, result) if result.replication is not None else _appended(partition, index, result)
    metrics = ctx.broker.metrics
    metrics.bytes_in.labels(topic.name).inc(len(data))
    metrics.records_in.labels(topic.name).inc(result.records)
    if getattr(result, "replication", None) is not None:
        return partition, result
    return _appended(partition, index, result)


async def _copy_marker(ctx, partition, records, batches, timeout_ms: int, admit):
    """A DR link's copy of a source marker: the AppendResult, or what refused it (a message
    for INVALID_RECORD, Refused, or the producer state's ErrorCode)."""
    if len(batches) != 1 or not batches[0].is_transactional or batches[0].producer_id < 0:
        return "a copied marker is one transactional control batch of a producer"
    batch = batches[0]
    try:
        found = read_marker(records, batch)
    except DecodeError as exc:
        return f"unreadable control batch: {exc}"
    if found is None or batch.records_count != 1:
        return "a copied control batch must hold one COMMIT or ABORT marker"
    control_type, value = found
    coordinator_epoch = int.from_bytes(value[2:6], "big", signed=True)
    return await partition.append_marker(batch.producer_id, batch.producer_epoch, coordinator_epoch,
                                         control_type == COMMIT, ctx.broker.clock(), timeout_ms=timeout_ms,
                                         copied=bytearray(records), admit=admit)


def _appended(partition, index: int, result) -> PR:
    return PR(index=index, error_code=0, base_offset=result.base_offset,
              log_append_time_ms=result.log_append_time, log_start_offset=partition.log_start_offset)


def _record_rules(topic) -> RecordRules:
    configs = topic.configs
    return RecordRules(compacted="compact" in configs.get("cleanup.policy"),
                       log_append_time=configs.get("message.timestamp.type") == "LogAppendTime",
                       before_ms=configs.get("message.timestamp.before.max.ms"),
                       after_ms=configs.get("message.timestamp.after.max.ms"))


def _has_transactional_records(req) -> bool:
    """Kafka's ProduceRequest.hasTransactionalRecords: the first batch of some partition's
    records is transactional (a request's batches for a partition come from one producer).
    Only the attributes of each first batch are read."""
    for td in req.topic_data:
        for pd in td.partition_data:
            records = pd.records
            if records is not None and len(records) > ATTRIBUTES_AT + 1 \
                    and records[ATTRIBUTES_AT + 1] & ATTR_TRANSACTIONAL:
                return True
    return False


async def handle(ctx, req):
    b = ctx.broker
    responses = []
    waiting = []   # acks=all appends the ISR has yet to confirm
    failed = False
    bad_acks = req.acks not in (0, 1, -1)
    # As Kafka's KafkaApis: a request carrying transactional records needs the transactional id
    # and WRITE on it, or every partition is refused.
    txn_refused = _has_transactional_records(req) and not (req.transactional_id is not None and ctx.authorize(
        Operation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id))
    for td in req.topic_data:
        parts: list[PR | None] = []   # None: an acks=all append, answered once replicated
        topic = b.topics.get(td.name)
        for pd in td.partition_data:
            if bad_acks:
                pr = _error(pd.index, ErrorCode.INVALID_REQUIRED_ACKS)
            elif txn_refused and not (topic is not None and copies_into(ctx.client_id, topic.configs.get(REPLICA_OF))):
                pr = _error(pd.index, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            elif not ctx.authorize(Operation.WRITE, ResourceType.TOPIC, td.name):
                pr = _error(pd.index, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            elif topic is None:
                pr = _error(pd.index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            else:
                try:
                    pr = await _produce_partition(ctx, topic, pd.index, pd.records, req.acks, req.timeout_ms,
                                                  req.transactional_id)
                    if isinstance(pr, tuple):
                        waiting.append((len(parts), parts, pd.index, *pr))
                        pr = None
                except InvalidBatch as exc:
                    pr = _error(pd.index, exc.code, str(exc))
                except OSError as exc:
                    log.error("%s-%d: append failed: %s", td.name, pd.index, exc)
                    pr = _error(pd.index, ErrorCode.KAFKA_STORAGE_ERROR, str(exc))
            if pr is not None and pr.error_code:
                failed = True
                b.metrics.partition_errors.labels("Produce", ErrorCode(pr.error_code).name).inc()
            parts.append(pr)
        # The None slots are filled in below, before the response leaves.
        responses.append(R.TopicProduceResponse(name=td.name,
                                                partition_responses=cast("list[PR]", parts)))
    for slot, parts, index, partition, result in waiting:
        # Each waits on its own ISR; together they take as long as the slowest.
        code = await partition.wait_replicated(result)
        if code:
            b.metrics.partition_errors.labels("Produce", code.name).inc()
            parts[slot] = _error(index, code)
        else:
            parts[slot] = _appended(partition, index, result)
    if req.acks == 0:
        ctx.close_after_response = failed
        return None
    return R(responses=responses, throttle_time_ms=0)


HANDLES = {m.ApiKey.PRODUCE: handle}
