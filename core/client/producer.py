"""Producer: batches records per partition and ships them to partition leaders.

Theory of operation
-------------------
`send()` picks a partition (partitioner.py), appends the record to that partition's open
batch (accumulator.py) and returns a future of its RecordMetadata. One sender task drains
the accumulator: a partition's oldest batch is ready when it is full, when a younger batch
exists, when it has waited `linger_ms`, or while someone flushes or closes. Ready batches are
grouped by leader, and each broker gets one Produce request with at most one batch per
partition (Kafka accepts one batch per partition per request), as long as it has fewer than
`max_in_flight_per_broker` requests outstanding. Requests to one broker are pipelined on
one connection, which the broker answers in order.

Errors: a partition error that Kafka marks retriable (NOT_LEADER_OR_FOLLOWER, a lost
connection, a timeout...) flags metadata stale and puts the batch back in its place after a
backoff; MESSAGE_TOO_LARGE splits a multi-record batch in two; anything else, or a batch
older than `delivery_timeout_ms`, fails its records' futures.

Ordering: batches of a partition leave in order and the broker appends them in order.
Without idempotence, as with the Java client, a retry while a younger batch of the same
partition is in flight can reorder the two, or write a batch twice if only its response was
lost; `max_in_flight_per_broker=1` rules the first out, idempotence rules out both.

Idempotence (`enable_idempotence`, Kafka's enable.idempotence): on by default when acks=all,
max_in_flight_per_broker <= 5 and retries > 0, as in the Java client 3.x; asking for it
explicitly with any other setting is a ValueError naming the field. Before the first batch
the sender gets a producer id and epoch with InitProducerId (retrying coordinator and network
errors with backoff); every batch then carries them and a per-partition sequence, so the
broker drops a retried batch it already has and answers with its first offset. A retry
resends the same bytes, in sequence order; sequence errors bump the epoch as KIP-360 says.
idempotence.py holds that state machine and says exactly what happens on each error. If
idempotence is only on by default and the broker lacks InitProducerId (or refuses it with
CLUSTER_AUTHORIZATION_FAILED), the producer logs a warning and goes on without it; asked for
explicitly, that is a fatal error for every record, as in Java.

`acks=0` requests are written and forgotten: the broker sends no response, so futures resolve
with offset -1 once the bytes are handed to the socket.

Tasks. The sender, each Produce request awaiting its answer, InitProducerId and metadata
refreshes run in the producer's anyio task group (tasks.py), entered by `start()` (or `async
with`) and exited by `close()`, which must run in the same task (anyio's rule; `async with
Producer(...)` gets it right). A task that fails with a bug makes the producer fail as a fatal
error would: its records fail with it, and so does every later send().
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Mapping

from core.protocol import messages as m
from core.protocol.compression import Compression
from core.protocol.errors import ErrorCode, KafkaError

from .accumulator import Accumulator, ProducerBatch, RecordMetadata, estimate_size, expired_error
from .client import KafkaClient
from .errors import ClientClosedError
from .idempotence import MAX_IN_FLIGHT, SEQUENCE_ERRORS, Decision, IdempotenceState
from .partitioner import make_partitioner
from .tasks import BackgroundTasks

log = logging.getLogger(__name__)

__all__ = ["Producer", "RecordMetadata"]

PRODUCE = m.ApiKey.PRODUCE
INIT_PRODUCER_ID = m.ApiKey.INIT_PRODUCER_ID
INT32_MAX = 2 ** 31 - 1

#: Answers after which the broker may have appended the batch anyway (acks=all timed out
#: waiting for replicas): an idempotent retry must keep the batch's sequence.
_MAYBE_WRITTEN = frozenset({ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND})

_METADATA_ERRORS = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.NETWORK_EXCEPTION, ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.REQUEST_TIMED_OUT,
})


def _to_bytes(v, what: str) -> bytes | None:
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, str):
        return v.encode()
    raise TypeError(f"{what} must be bytes, str or None, not {type(v).__name__}")


def _headers(headers) -> list[tuple[str, bytes | None]] | None:
    if not headers:
        return None
    items = headers.items() if isinstance(headers, Mapping) else headers
    return [(k if isinstance(k, str) else bytes(k).decode(), _to_bytes(v, "header value"))
            for k, v in items]


class Producer:
    def __init__(self, client: KafkaClient, *, acks: int | str = -1, linger_ms: float = 5,
                 batch_size: int = 1_000_000, compression: str | int | None = "none",
                 max_in_flight_per_broker: int = 5, delivery_timeout_ms: int = 120000,
                 request_timeout_ms: int | None = None, max_request_size: int = 16 * 1024 * 1024,
                 buffer_memory: int = 32 * 1024 * 1024, max_block_ms: int = 60000,
                 partitioner: Any = "default", retries: int = INT32_MAX,
                 enable_idempotence: bool | None = None):
        self.client = client
        self.acks = -1 if acks in ("all", -1, "-1") else int(acks)
        if self.acks not in (-1, 0, 1):
            raise ValueError(f"acks must be -1/'all', 0 or 1, not {acks!r}")
        if retries < 0:
            raise ValueError(f"retries must be >= 0, not {retries}")
        self.retries = retries
        if enable_idempotence is None:  # Java 3.x: on unless another setting conflicts
            idempotent = self.acks == -1 and max_in_flight_per_broker <= MAX_IN_FLIGHT and retries > 0
        else:
            idempotent = bool(enable_idempotence)
            if idempotent and self.acks != -1:
                raise ValueError(f"enable_idempotence=True requires acks='all' (-1), got acks={acks!r}")
            if idempotent and max_in_flight_per_broker > MAX_IN_FLIGHT:
                raise ValueError(f"enable_idempotence=True requires max_in_flight_per_broker "
                                 f"<= {MAX_IN_FLIGHT}, got {max_in_flight_per_broker}")
            if idempotent and retries == 0:
                raise ValueError("enable_idempotence=True requires retries > 0, got retries=0")
        self._idempotence_explicit = enable_idempotence is not None
        self._idem: IdempotenceState | None = IdempotenceState() if idempotent else None
        self._initializing = False
        self._fatal: KafkaError | None = None
        self.linger_s = linger_ms / 1000
        self.batch_size = batch_size
        self.compression = Compression.parse(compression)
        self.max_in_flight = max(1, max_in_flight_per_broker)
        self.request_timeout_ms = request_timeout_ms or client.request_timeout_ms
        self.delivery_timeout_ms = delivery_timeout_ms
        self.max_request_size = max_request_size
        self.buffer_memory = buffer_memory
        self.max_block_ms = max_block_ms
        self.partitioner = make_partitioner(partitioner, batch_size)
        self._wakeup = asyncio.Event()
        self._space = asyncio.Event()  # set whenever settled batches free buffer memory
        self._space.set()
        self.acc = Accumulator(batch_size, delivery_timeout_ms, on_release=self._space.set)
        self._in_flight: dict[int, int] = {}
        self._flushing = 0
        self._closing = False
        self._closed = False
        self._tasks = BackgroundTasks("Producer", on_error=self._background_failed)
        self._refreshing = False
        self._last_refresh = 0.0
        self._topic_cache: dict[str, tuple[float, list[int], list[int]]] = {}

    # ------------------------------------------------------------------ public API

    @property
    def idempotent(self) -> bool:
        """Whether batches carry a producer id and sequences (False after a downgrade)."""
        return self._idem is not None

    @property
    def producer_id_and_epoch(self) -> tuple[int, int]:
        """(producer id, epoch), (-1, -1) until InitProducerId answered or without idempotence."""
        if self._idem is None:
            return -1, -1
        return self._idem.producer_id, self._idem.epoch

    async def start(self) -> "Producer":
        """Start the client (if it is not) and the sender; close() in the same task."""
        if self._closing:
            raise ClientClosedError("producer is closed")
        if not self._tasks.running:
            await self.client.start()
            await self._tasks.open()
            self._tasks.start_soon(self._run_sender, name="producer sender")
        return self

    async def __aenter__(self) -> "Producer":
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def send(self, topic: str, value=None, key=None, headers=None, partition: int | None = None,
                   timestamp_ms: int | None = None) -> asyncio.Future:
        """Queue a record; returns a future of its RecordMetadata.

        Waits only for metadata of a new topic and for buffer space (both up to
        `max_block_ms`), never for the broker: await the returned future for that.
        """
        if self._closing:
            raise ClientClosedError("producer is closed")
        if self._fatal is not None:
            raise self._fatal
        if not self._tasks.running:
            raise RuntimeError("the producer is not started: `async with Producer(...)` or "
                               "`await producer.start()` first")
        key = _to_bytes(key, "key")
        value = _to_bytes(value, "value")
        headers = _headers(headers)
        size = estimate_size(key, value, headers)
        if size > self.max_request_size:
            raise KafkaError(ErrorCode.MESSAGE_TOO_LARGE,
                             f"record of ~{size} bytes exceeds max_request_size {self.max_request_size}")
        partitions, available = await self._partitions(topic)
        if partition is None:
            partition = self.partitioner.partition(topic, key, partitions, available)
        elif partition not in partitions:
            raise ValueError(f"topic {topic!r} has no partition {partition} "
                             f"(it has {len(partitions)})")
        if self.acc.buffered_bytes + size > self.buffer_memory and self.acc.buffered_bytes:
            await self._wait_for_space(size)
        ts = int(time.time() * 1000) if timestamp_ms is None else int(timestamp_ms)
        fut = asyncio.get_running_loop().create_future()
        _batch, wake = self.acc.append(topic, partition, (key, value, headers, ts), size, fut)
        self.partitioner.on_append(topic, partition, size)
        if wake:
            self._wakeup.set()
        return fut

    async def send_and_wait(self, topic: str, value=None, **kwargs) -> RecordMetadata:
        return await (await self.send(topic, value, **kwargs))

    async def partitions_for(self, topic: str) -> list[int]:
        return (await self._partitions(topic))[0]

    async def flush(self, timeout_ms: float | None = None) -> None:
        """Send everything queued so far and wait until each record is acknowledged or failed."""
        pending = [b.done for b in self.acc.incomplete]
        if not pending:
            return
        self._flushing += 1
        self._wakeup.set()
        try:
            waiter = asyncio.gather(*pending)
            if timeout_ms is None:
                await waiter
            else:
                async with asyncio.timeout(timeout_ms / 1000):
                    await waiter
        finally:
            self._flushing -= 1

    async def close(self, timeout_ms: float | None = None) -> None:
        """Flush (bounded by `timeout_ms`, default delivery_timeout_ms) and stop the sender.
        Records still unsent after that fail with ClientClosedError."""
        if self._closed:
            return
        self._closing = True
        try:
            await self.flush(self.delivery_timeout_ms if timeout_ms is None else timeout_ms)
        except TimeoutError:
            log.warning("producer closed with records still unsent")
        finally:
            self._closed = True
            error = ClientClosedError("producer closed before the record was sent")
            self.acc.fail_all(error)
            try:
                # the sender, and requests still waiting for an answer: cancelled
                await self._tasks.close()
            finally:
                for b in list(self.acc.incomplete):
                    b.fail(error)

    def _background_failed(self, exc: BaseException) -> None:
        # a bug must fail the records, not leave them hanging behind a dead task
        if self._fatal is None and not self._closed:
            self._set_fatal(KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                       f"a producer task failed: {exc!r}"))

    # ------------------------------------------------------------------ metadata

    async def _partitions(self, topic: str) -> tuple[list[int], list[int]]:
        """(all partitions, partitions with a leader), waiting up to max_block_ms for the topic."""
        cluster = self.client.cluster
        cached = self._topic_cache.get(topic)
        if cached is not None and cached[0] == cluster.updated_at:
            return cached[1], cached[2]
        deadline = time.monotonic() + self.max_block_ms / 1000
        attempt = 0
        while True:
            await self.client.ensure_topics([topic])
            partitions = cluster.partitions_for(topic)
            if partitions:
                available = cluster.available_partitions(topic)
                self._topic_cache[topic] = (cluster.updated_at, partitions, available)
                return partitions, available
            error = cluster.topic_error(topic) or ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            if not ErrorCode(error).retriable:
                raise KafkaError(error, f"cannot produce to topic {topic!r}")
            if time.monotonic() >= deadline:
                raise KafkaError(error, f"topic {topic!r} not in metadata after {self.max_block_ms} ms")
            self.client.request_metadata_update()
            await asyncio.sleep(self.client.backoff_ms(attempt) / 1000)
            attempt += 1

    def _refresh_metadata_soon(self) -> None:
        if not self._refreshing:
            self._refreshing = True
            topics = {tp[0] for tp, _q in self.acc.nonempty()}
            self._tasks.start_soon(self._refresh, topics, name="producer metadata refresh")

    async def _refresh(self, topics: set[str]) -> None:
        try:
            # At most one refresh per retry_backoff_ms, however often the sender asks (a
            # leaderless partition would otherwise have us asking in a tight loop).
            wait = self._last_refresh + self.client.retry_backoff_ms / 1000 - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            self._last_refresh = time.monotonic()
            try:
                self.client.request_metadata_update()
                await self.client.ensure_topics(topics)
            except KafkaError as exc:
                log.debug("metadata refresh failed: %s", exc)
                await asyncio.sleep(self.client.retry_backoff_ms / 1000)
        finally:
            self._refreshing = False
            self._wakeup.set()

    async def _wait_for_space(self, size: int) -> None:
        deadline = time.monotonic() + self.max_block_ms / 1000
        while self.acc.buffered_bytes and self.acc.buffered_bytes + size > self.buffer_memory:
            self._space.clear()
            self._wakeup.set()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaError(ErrorCode.REQUEST_TIMED_OUT,
                                 f"no buffer space for a record within {self.max_block_ms} ms (buffer_memory)")
            try:
                async with asyncio.timeout(remaining):
                    await self._space.wait()
            except TimeoutError:
                pass

    # ------------------------------------------------------------------ sender

    async def _run_sender(self) -> None:
        while not self._closed:
            self._wakeup.clear()
            if self._idem is not None and self._idem.needs_producer_id and self.acc.incomplete:
                self._ensure_producer_id()
            next_check = self._send_ready()
            if self.acc.incomplete and (self.client.metadata_stale or
                                        self.client.cluster.age_ms() > self.client.metadata_max_age_ms):
                self._refresh_metadata_soon()
            if next_check == 0:
                await asyncio.sleep(0)  # sent something: look again, after letting others run
                continue
            timeout = None if next_check is None else max(next_check - time.monotonic(), 0.0005)
            try:
                async with asyncio.timeout(timeout):
                    await self._wakeup.wait()
            except TimeoutError:
                pass

    def _send_ready(self) -> float | None:
        """Send what is ready. Returns 0 if a request went out, else when to look again
        (a monotonic time) or None to wait for a wakeup."""
        now = time.monotonic()
        next_check: float | None = None
        by_node: dict[int, list[ProducerBatch]] = {}
        need_metadata = False
        cluster = self.client.cluster
        force = self._flushing > 0 or self._closing
        idem = self._idem
        for tp, q in self.acc.nonempty():
            while q and q[0].deadline <= now:
                self._expire(q)
            if not q:
                continue
            batch = q[0]
            if batch.retry_at > now:
                next_check = batch.retry_at if next_check is None else min(next_check, batch.retry_at)
                continue
            if not (batch.full or len(q) > 1 or force):
                ready_at = batch.created + self.linger_s
                if ready_at > now:
                    next_check = ready_at if next_check is None else min(next_check, ready_at)
                    continue
            leader = cluster.leader_for(*tp)
            if leader is None:
                need_metadata = True
                continue
            if self._in_flight.get(leader, 0) >= self.max_in_flight:
                continue  # a completing request wakes us
            if idem is not None and not idem.may_send(tp, batch):
                continue  # an answer, an epoch bump or the producer id wakes us
            by_node.setdefault(leader, []).append(batch)
        if need_metadata:
            self._refresh_metadata_soon()
        sent = False
        for node, batches in by_node.items():
            chosen: list[ProducerBatch] = []
            total = 0
            for b in batches:
                tp = (b.topic, b.partition)
                if idem is not None and b.base_seq is None:
                    idem.assign(tp, b)  # the sequence goes into the header, under the CRC
                size = len(b.encode(self.compression))
                if chosen and total + size > self.max_request_size:
                    break  # the rest go in the next request (keeping any sequence they got)
                q = self.acc.queues[tp]
                q.popleft()
                chosen.append(b)
                if idem is not None:
                    idem.on_send(tp, b)
                total += size
            self._in_flight[node] = self._in_flight.get(node, 0) + 1
            self._tasks.start_soon(self._produce, node, chosen)
            sent = True
        return 0 if sent else next_check

    def _expire(self, q) -> None:
        batch = q.popleft()
        self._fail_batch(batch, expired_error(batch))

    def _build_request(self, batches: list[ProducerBatch]):
        topics: dict[str, list] = {}
        for b in batches:
            topics.setdefault(b.topic, []).append(
                m.ProduceRequest.PartitionProduceData(index=b.partition, records=b.encoded))
        return m.ProduceRequest(
            transactional_id=None, acks=self.acks, timeout_ms=self.request_timeout_ms,
            topic_data=[m.ProduceRequest.TopicProduceData(name=t, partition_data=p)
                        for t, p in topics.items()])

    async def _produce(self, node: int, batches: list[ProducerBatch]) -> None:
        try:
            request = self._build_request(batches)
            if self.acks == 0:
                await self.client.send(node, request, api_key=PRODUCE, expect_response=False)
                for b in batches:
                    b.complete(-1, -1)
                return
            # A little slack over the broker-side timeout, so that the broker's own
            # REQUEST_TIMED_OUT answer arrives before we give up on the connection.
            response = await self.client.send(node, request, api_key=PRODUCE,
                                              timeout_ms=self.request_timeout_ms + 5000)
        except KafkaError as exc:
            # No answer: the broker may have appended the batches (we cannot tell a connect
            # failure from a connection lost after the request went out).
            for b in batches:
                self._on_batch_error(b, exc, maybe_written=True)
            self._apply_idempotence_failures()
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # an encoding bug must fail the records, not hang them
            log.exception("produce to node %d failed", node)
            for b in batches:
                self._fail_batch(b, exc)
            self._apply_idempotence_failures()
            return
        finally:
            self._in_flight[node] -= 1
            self._wakeup.set()
        results = {}
        for t in response.responses:
            for p in t.partition_responses:
                results[(t.name, p.index)] = p
        idem = self._idem
        for b in batches:
            p = results.get((b.topic, b.partition))
            if p is None:
                self._fail_batch(b, KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                               f"produce response from node {node} lacks {b.topic}-{b.partition}"))
            elif p.error_code == ErrorCode.NONE or (
                    p.error_code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER and b.base_seq is not None):
                # DUPLICATE_SEQUENCE_NUMBER: the broker already has the batch (Kafka brokers answer
                # NONE with the first offset instead; others say this, without the offset).
                if idem is not None and b.base_seq is not None:
                    idem.on_acknowledged((b.topic, b.partition), b)
                b.complete(p.base_offset, p.log_append_time_ms)
            else:
                message = p.error_message
                if p.record_errors:
                    message = (message or "") + "; " + ", ".join(
                        f"record {e.batch_index}: {e.batch_index_error_message}" for e in p.record_errors)
                self._on_batch_error(b, KafkaError(p.error_code, message),
                                     maybe_written=p.error_code in _MAYBE_WRITTEN)
        self._apply_idempotence_failures()

    def _on_batch_error(self, batch: ProducerBatch, error: KafkaError, *, maybe_written: bool) -> None:
        idem = self._idem
        if idem is None or batch.base_seq is None:
            self._retry_or_fail(batch, error)
            return
        tp = (batch.topic, batch.partition)
        if error.code in SEQUENCE_ERRORS:
            decision, message = idem.on_sequence_error(tp, batch, error.code)
            if decision is Decision.FAIL:
                self._fail_batch(batch, KafkaError(error.code, message))
            else:
                self._retry_or_fail(batch, error, retriable=True)
            return
        if error.retriable:
            idem.on_retriable(tp, batch, maybe_written)
        self._retry_or_fail(batch, error)

    def _retry_or_fail(self, batch: ProducerBatch, error: KafkaError, *, retriable: bool | None = None) -> None:
        now = time.monotonic()
        if (error.code == ErrorCode.MESSAGE_TOO_LARGE and len(batch.records) > 1
                and not self._closed and self._split(batch)):
            return
        if retriable is None:
            retriable = error.retriable
        if retriable and not self._closed and batch.attempts < self.retries:
            delay = self.client.backoff_ms(batch.attempts) / 1000
            if now + delay < batch.deadline:
                if error.code in _METADATA_ERRORS:
                    self.client.request_metadata_update()
                batch.attempts += 1
                batch.retry_at = now + delay
                log.debug("retrying %d record(s) for %s-%d after %s", len(batch.records),
                          batch.topic, batch.partition, error)
                self.acc.requeue(batch)
                self._wakeup.set()
                return
        self._fail_batch(batch, error)

    def _split(self, batch: ProducerBatch) -> bool:
        """MESSAGE_TOO_LARGE: put the batch's two halves back in its place."""
        idem = self._idem
        if idem is not None and batch.base_seq is not None and batch.maybe_written:
            return False  # its sequences must not change: see IdempotenceState.on_split
        parts = batch.split(self.acc.delivery_timeout_s)
        if idem is not None and batch.base_seq is not None:
            idem.on_split((batch.topic, batch.partition), batch, parts)
        self.acc.add_split(parts)
        self._wakeup.set()
        return True

    def _fail_batch(self, batch: ProducerBatch, error: BaseException) -> None:
        if self._idem is not None and batch.base_seq is not None:
            self._idem.on_failed((batch.topic, batch.partition), batch)
        batch.fail(error)

    def _apply_idempotence_failures(self) -> None:
        """Fail the batches the idempotence state gave up on (see IdempotenceState.take_failures)."""
        if self._idem is None:
            return
        for batch, error in self._idem.take_failures():
            q = self.acc.queues.get((batch.topic, batch.partition))
            if q is not None and batch in q:
                q.remove(batch)
            batch.fail(error)
        self._wakeup.set()

    # ------------------------------------------------------------------ producer id

    def _ensure_producer_id(self) -> None:
        if not self._initializing:
            self._initializing = True
            self._tasks.start_soon(self._get_producer_id, name="producer InitProducerId")

    async def _get_producer_id(self) -> None:
        try:
            await self._init_producer_id()
        except Exception as exc:
            # a bug must fail the records waiting for a producer id, not leave them hanging
            if self._fatal is None:
                self._set_fatal(KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                           f"getting a producer id failed: {exc!r}"))
        finally:
            self._initializing = False

    async def _init_producer_id(self) -> None:
        """InitProducerId without a transactional id, until it answers (or fails for good)."""
        idem = self._idem
        attempt = 0
        while not self._closed and self._idem is idem and idem is not None and idem.needs_producer_id:
            request = m.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=INT32_MAX)
            try:
                node = await self.client.any_node()
                response = await self.client.send(node, request, api_key=INIT_PRODUCER_ID)
                error = (KafkaError(response.error_code, f"InitProducerId answered by node {node}")
                         if response.error_code else None)
            except KafkaError as exc:
                error = exc
            if error is None:
                idem.set_producer_id(response.producer_id, response.producer_epoch)
                log.debug("idempotent producer: id %d, epoch %d", response.producer_id,
                          response.producer_epoch)
                self._wakeup.set()
                return
            if error.retriable:  # COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, ..._LOAD_IN_PROGRESS, network
                log.debug("InitProducerId failed, retrying: %s", error)
                if error.code in (ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT):
                    self.client.request_metadata_update()
                await asyncio.sleep(self.client.backoff_ms(attempt) / 1000)
                attempt += 1
                continue
            if (not self._idempotence_explicit and not idem.ever_had_producer_id
                    and error.code in (ErrorCode.UNSUPPORTED_VERSION, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)):
                log.warning("idempotence disabled (it was only on by default): %s", error)
                self._idem = None
                self._wakeup.set()
                return
            self._set_fatal(KafkaError(error.code, f"the idempotent producer cannot get a producer id "
                                                   f"(InitProducerId): {error}"))
            return

    def _set_fatal(self, error: KafkaError) -> None:
        """A fatal producer error (as Java's): queued records fail, and so does every later send."""
        log.error("producer failed: %s", error)
        self._fatal = error
        self.acc.fail_all(error)
        self._wakeup.set()
