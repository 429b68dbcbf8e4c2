"""The fault run's clients: confluent-kafka producers that record a History, and the reader.

Producers use acks=all and enable.idempotence=true and write unique values "p<process>-<n>".
A delivery report is `ok` with its partition and offset; an error is `info` (indeterminate:
a timed-out or in-flight message may well be in the log) unless librdkafka says the message
never left its queue, which is a `fail`.
"""
from __future__ import annotations

import threading
import time

from confluent_kafka import (OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer,
                             TopicPartition)

from tests.support.jepsen import History

# Errors that prove the message was never sent to any broker.
NEVER_SENT = {KafkaError._PURGE_QUEUE, KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC}

PRODUCER_CONFIG = {
    "acks": "all",
    "enable.idempotence": True,
    "linger.ms": 5,
    "message.timeout.ms": 20000,     # past this librdkafka gives up: an `info`, not a loss
    "request.timeout.ms": 5000,
    "socket.timeout.ms": 5000,
    "reconnect.backoff.max.ms": 1000,
    "log_level": 3,                  # the nemesis makes librdkafka chatty at info level
}


class ProducerThread(threading.Thread):
    def __init__(self, process: int, bootstrap: str, topic: str, history: History,
                 stop: threading.Event, *, rate: float = 100.0, acks: str = "all",
                 max_in_flight: int = 5):
        super().__init__(name=f"producer-{process}", daemon=True)
        self.process, self.bootstrap, self.topic = process, bootstrap, topic
        self.history, self.stop_event = history, stop
        self.interval = 1.0 / rate
        # librdkafka's idempotence requires acks=all; acks=1 runs without it
        self.config = dict(PRODUCER_CONFIG, **({} if acks == "all" else
                                               {"acks": acks, "enable.idempotence": False}))
        # librdkafka bumps the producer epoch when a request behind a failed one gets
        # OUT_OF_ORDER_SEQUENCE_NUMBER and re-sends with new sequences, which can duplicate
        # (librdkafka issue #4953); 1 in flight rules that client-side cause out.
        self.config["max.in.flight.requests.per.connection"] = max_in_flight
        self.fatal_errors: list[str] = []
        self.sent = 0
        self.remaining = 0          # messages still undelivered when the final flush gave up
        self._fatal = False

    def _new_producer(self) -> Producer:
        self._fatal = False

        def on_error(err):
            if err.fatal() and not self._fatal:
                self._fatal = True
                self.fatal_errors.append(str(err))
        return Producer(dict(self.config, **{"bootstrap.servers": self.bootstrap,
                                                 "client.id": f"jepsen-{self.process}",
                                                 "error_cb": on_error}))

    def _report(self, value: str):
        def delivered(err, msg):
            if err is None:
                self.history.ok(self.process, value, msg.partition(), msg.offset())
            elif err.code() in NEVER_SENT:
                self.history.fail(self.process, value, err.name())
            else:
                self.history.info(self.process, value, err.name())
        return delivered

    def run(self) -> None:
        try:
            self._produce()
        except Exception as exc:   # reported with the run's notes instead of a stray traceback
            self.fatal_errors.append(f"producer thread crashed: {type(exc).__name__}: {exc}")

    def _produce(self) -> None:
        producer = self._new_producer()
        next_at = time.monotonic()
        while not self.stop_event.is_set():
            if self._fatal:   # an idempotent producer's fatal error: drain, start a new one
                self._call(producer.flush, 5)
                producer = self._new_producer()
            value = f"p{self.process}-{self.sent}"
            try:
                producer.produce(self.topic, value.encode(), callback=self._report(value))
            except BufferError:
                self._call(producer.poll, 0.1)
                continue
            except KafkaException as exc:
                self._on_exception(exc)
                continue
            self.history.invoke(self.process, value)
            self.sent += 1
            next_at = max(next_at + self.interval, time.monotonic() - 1.0)   # no catch-up bursts
            self._call(producer.poll, 0)
            time.sleep(max(0.0, next_at - time.monotonic()))
        self.remaining = self._call(producer.flush, PRODUCER_CONFIG["message.timeout.ms"] / 1000 + 5)

    def _call(self, fn, *args):
        try:
            return fn(*args)
        except KafkaException as exc:
            self._on_exception(exc)
            return None

    def _on_exception(self, exc: KafkaException) -> None:
        # After a fatal error produce(), poll() and flush() raise it (or a generic _FATAL),
        # possibly before error_cb has been served.
        err = exc.args[0]
        if not (err.fatal() or err.code() == KafkaError._FATAL):
            raise exc
        if not self._fatal:
            self._fatal = True
            self.fatal_errors.append(str(err))


def read_back(bootstrap: str, topic: str, partitions: int, history: History, *, reader: int = 0,
              timeout: float = 60.0) -> dict[int, int]:
    """Read every partition from the beginning to its high watermark, recording each poll's
    records; returns {partition: high watermark}."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"jepsen-reader-{reader}",
                         "enable.auto.commit": False, "enable.partition.eof": False,
                         "log_level": 3})
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends = {tp.partition: consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in tps}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        next_offset = {p: 0 for p in ends}
        deadline = time.monotonic() + timeout
        poll = 0
        while any(next_offset[p] < ends[p] for p in ends):
            if time.monotonic() > deadline:
                raise TimeoutError(f"read back stopped at {next_offset} of {ends}")
            for msg in consumer.consume(500, timeout=1.0):
                if msg.error():
                    continue
                history.read(reader, poll, msg.partition(), msg.offset(), msg.value().decode())
                next_offset[msg.partition()] = msg.offset() + 1
            poll += 1
        return ends
    finally:
        consumer.close()
