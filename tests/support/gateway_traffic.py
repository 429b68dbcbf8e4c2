"""Real clients' traffic through a gateway, for the gateway's tests and benchmark: each library
writes numbered records with an idempotent acks=all producer and reads them back in a
consumer group, recording what was acknowledged, what was read, and every error.

A test stops its clients in two steps, so that it can look at the logs in between: the
producers first (`stop_producing`: every send answered), then the consumers, once they have
read what the test expects and a quiet while more (`stop_consuming`: what a consumer reads
twice arrives in that while). `finish_all` does both; `close` stops a client at once."""
from __future__ import annotations

import json
import subprocess
import threading
import time
import traceback
from collections import Counter, defaultdict
from pathlib import Path
from typing import Callable, Iterable

from confluent_kafka import Consumer, KafkaError, Producer

from tests.support.node import REPO

PARTITIONS = 3
QUIET_S = 3.0      # how long consumers read on after they have read what was expected


def _where(exc: BaseException) -> str:
    """Where an exception came from: its traceback's frames, outermost first, one short line."""
    return " -> ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in traceback.extract_tb(exc.__traceback__))


class Traffic:
    """What one client library did: an idempotent acks=all producer writing numbered records
    to `topic`, and a group of consumers reading them, all bootstrapped at the gateway."""

    def __init__(self, bootstrap: str, topic: str, group: str):
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        self.stop_producing = threading.Event()
        self.stop_consuming = threading.Event()
        self.acked: dict[int, list[str]] = defaultdict(list)       # partition -> values, in ack order
        self.ack_times: list[tuple[float, str]] = []
        self.failed: list[str] = []
        self.fatal: list[str] = []
        self.consumed: list[tuple[int, str]] = []                  # (partition, value)
        self.consume_times: list[float] = []
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []

    def start(self) -> "Traffic":
        for t in self.threads:
            t.start()
        return self

    def _acked(self, partition: int, value: str) -> None:
        with self.lock:
            self.acked[partition].append(value)
            self.ack_times.append((time.monotonic(), value))

    def _consumed(self, partition: int, value: str) -> None:
        with self.lock:
            self.consumed.append((partition, value))
            self.consume_times.append(time.monotonic())

    def total_acked(self) -> int:
        return sum(len(v) for v in self.acked.values())

    def acked_values(self) -> set[str]:
        with self.lock:
            return {v for values in self.acked.values() for v in values}

    def consumed_values(self) -> set[str]:
        with self.lock:
            return {v for _, v in self.consumed}

    def active_since(self, since: float) -> bool:
        """A record acknowledged and a record read after `since` (time.monotonic())."""
        with self.lock:
            return any(t > since for t, _ in self.ack_times) and any(t > since for t in self.consume_times)

    def describe(self) -> str:
        with self.lock:
            return (f"{type(self).__name__}: {self.total_acked()} acknowledged, {len(self.consumed)} read, "
                    f"fatal {self.fatal[:3]}, errors {self.errors[-3:]}")

    # Stopping, in steps (the producer, then the consumers); a subclass says how.
    def request_stop_producing(self) -> None:
        self.stop_producing.set()

    def wait_producer_stopped(self, timeout: float) -> None:
        self.threads[0].join(timeout)

    def request_stop_consuming(self) -> None:
        self.stop_consuming.set()

    def wait_consumers_stopped(self, timeout: float) -> None:
        for t in self.threads[1:]:
            t.join(timeout)

    def close(self) -> None:
        """Stop at once, whatever was read (after a failure; a no-op once stopped)."""
        self.request_stop_producing()
        self.request_stop_consuming()
        self.wait_producer_stopped(150)
        self.wait_consumers_stopped(30)

    def finish(self, timeout: float = 90) -> None:
        finish_all([self], timeout=timeout)

    def check(self) -> None:
        """No acknowledged record lost, none read twice or skipped, none out of order within
        its partition, and no client error was fatal."""
        name = type(self).__name__
        assert not self.fatal, (name, self.fatal)
        assert not self.failed, (name, self.failed[:5])
        assert self.total_acked() > 100, (name, self.total_acked())
        consumed = Counter(v for _, v in self.consumed)
        twice = [v for v, n in consumed.items() if n > 1]
        assert not twice, f"{name}: {len(twice)} records read more than once, e.g. {twice[:5]}"
        acked = {v for values in self.acked.values() for v in values}
        missing = acked - set(consumed)
        assert not missing, f"{name}: {len(missing)} acknowledged records never read, e.g. {sorted(missing)[:5]}"
        by_partition = defaultdict(list)
        for p, v in self.consumed:
            by_partition[p].append(int(v.rsplit("-", 1)[1]))
        for p, values in by_partition.items():
            assert values == sorted(values), f"{name}: partition {p} read out of order"


class ConfluentTraffic(Traffic):
    """confluent-kafka (librdkafka): the producer, and two consumers in one group."""

    def __init__(self, bootstrap: str, topic: str, group: str, consumers: int = 2, rate: float = 200.0):
        super().__init__(bootstrap, topic, group)
        self.rate = rate
        self.threads = [threading.Thread(target=self._produce, daemon=True)]
        self.threads += [threading.Thread(target=self._consume, args=(i,), daemon=True) for i in range(consumers)]

    def _error_cb(self, err) -> None:
        with self.lock:
            (self.fatal if err.fatal() else self.errors).append(str(err))

    def _produce(self) -> None:
        p = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                      "linger.ms": 5, "error_cb": self._error_cb})

        def delivered(err, msg):
            if err:
                with self.lock:
                    self.failed.append(f"{msg.value().decode()}: {err}")
            else:
                self._acked(msg.partition(), msg.value().decode())
        i = 0
        try:
            while not self.stop_producing.is_set():
                p.produce(self.topic, f"ck-{i}".encode(), partition=i % PARTITIONS, on_delivery=delivered)
                i += 1
                p.poll(1 / self.rate)
            left = p.flush(120)
            if left:
                self.failed.append(f"{left} records unanswered after 120 s")
        except Exception as exc:    # a fatal producer error is raised from poll()
            with self.lock:
                self.fatal.append(f"producer: {exc}")

    def _consume(self, index: int) -> None:
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group, "auto.offset.reset": "earliest",
                      "error_cb": self._error_cb, "client.id": f"{self.group}-{index}"})
        c.subscribe([self.topic])
        try:
            while not self.stop_consuming.is_set():
                for msg in c.consume(100, 0.2):
                    if msg.error():
                        if msg.error().code() != KafkaError._PARTITION_EOF:
                            with self.lock:
                                self.errors.append(str(msg.error()))
                        continue
                    self._consumed(msg.partition(), msg.value().decode())
        except Exception as exc:
            with self.lock:
                self.fatal.append(f"consumer {index}: {exc}")
        finally:
            c.close()


class KafkaPythonTraffic(Traffic):
    """kafka-python: an idempotent producer and two consumers in one group."""

    def __init__(self, bootstrap: str, topic: str, group: str, consumers: int = 2, rate: float = 100.0):
        super().__init__(bootstrap, topic, group)
        self.rate = rate
        self.threads = [threading.Thread(target=self._produce, daemon=True)]
        self.threads += [threading.Thread(target=self._consume, args=(i,), daemon=True) for i in range(consumers)]

    def _produce(self) -> None:
        from kafka import KafkaProducer
        try:
            p = KafkaProducer(bootstrap_servers=self.bootstrap, enable_idempotence=True, acks="all", linger_ms=5,
                              delivery_timeout_ms=120_000)
            i = 0
            while not self.stop_producing.is_set():
                value = f"kp-{i}"
                future = p.send(self.topic, value.encode(), partition=i % PARTITIONS)
                future.add_callback(lambda md, v=value: self._acked(md.partition, v))
                future.add_errback(lambda exc, v=value: self.failed.append(f"{v}: {exc!r}"))
                i += 1
                time.sleep(1 / self.rate)
            p.flush(120)
            p.close(10)
        except Exception as exc:
            with self.lock:
                self.fatal.append(f"producer: {exc!r} at {_where(exc)}")

    def _consume(self, index: int) -> None:
        from kafka import KafkaConsumer
        try:
            c = KafkaConsumer(self.topic, bootstrap_servers=self.bootstrap, group_id=self.group,
                              auto_offset_reset="earliest", client_id=f"{self.group}-{index}")
            while not self.stop_consuming.is_set():
                for tp, msgs in c.poll(200).items():
                    for msg in msgs:
                        self._consumed(tp.partition, msg.value.decode())
            c.close()
        except Exception as exc:
            with self.lock:
                self.fatal.append(f"consumer {index}: {exc!r} at {_where(exc)}")


class KafkajsTraffic(Traffic):
    """kafkajs (tests/js/gateway_traffic.js): an idempotent producer and a consumer group."""

    def __init__(self, bootstrap: str, topic: str, group: str, rate: float = 50.0):
        super().__init__(bootstrap, topic, group)
        self.proc = subprocess.Popen(["node", str(REPO / "tests" / "js" / "gateway_traffic.js"), bootstrap, topic,
                                      str(PARTITIONS), group, "js-", str(rate)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True)
        self.threads = [threading.Thread(target=self._read, daemon=True)]
        self.producer_done = threading.Event()
        self.done = threading.Event()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        try:
            for line in self.proc.stdout:
                event = json.loads(line)
                if "acked" in event:
                    self._acked(*event["acked"])
                elif "consumed" in event:
                    self._consumed(*event["consumed"])
                elif "error" in event:
                    with self.lock:
                        (self.fatal if event["fatal"] else self.errors).append(event["error"])
                elif event.get("producer") == "done":
                    self.producer_done.set()
                elif event.get("done"):
                    self.done.set()
        finally:
            if not self.done.is_set():
                with self.lock:
                    self.fatal.append(f"node exited ({self.proc.poll()}) before it was told to")
            self.producer_done.set()
            self.done.set()

    def _tell(self, line: str | None) -> None:
        """A line to the script's stdin, or (None) the end of it."""
        assert self.proc.stdin is not None
        try:
            if line is None:
                self.proc.stdin.close()
            else:
                self.proc.stdin.write(line + "\n")
                self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):      # node exited already, or stdin is closed
            pass

    def request_stop_producing(self) -> None:
        self._tell("stop-producing")

    def wait_producer_stopped(self, timeout: float) -> None:
        self.producer_done.wait(timeout)

    def request_stop_consuming(self) -> None:
        self._tell(None)                # the end of stdin stops the consumers too

    def wait_consumers_stopped(self, timeout: float) -> None:
        self.done.wait(timeout)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.threads[0].join(10)

    def close(self) -> None:
        self.request_stop_consuming()
        self.wait_consumers_stopped(60)


def stop_producing(clients: Iterable[Traffic], timeout: float = 150) -> None:
    """Stop every client's producer, and wait until each has had an answer for every send."""
    clients = list(clients)
    for c in clients:
        c.request_stop_producing()
    for c in clients:
        c.wait_producer_stopped(timeout)


def stop_consuming(clients: Iterable[Traffic], expect: Callable[[Traffic], set[str]] | None = None,
                   timeout: float = 90) -> None:
    """Once every client's consumers have read what `expect` says (default: everything its
    producer had acknowledged), or at the deadline, they read on for QUIET_S, together (a
    record read twice arrives in that while), and stop. A client with a fatal error is not
    waited for (its tests fail on the error)."""
    clients = list(clients)
    wanted = {id(c): (expect(c) if expect else c.acked_values()) for c in clients}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(wanted[id(c)] - c.consumed_values() for c in clients if not c.fatal):
        time.sleep(0.2)
    time.sleep(QUIET_S)        # anything read twice arrives now
    for c in clients:
        c.request_stop_consuming()
    for c in clients:
        c.wait_consumers_stopped(30)


def finish_all(clients: Iterable[Traffic], timeout: float = 90) -> None:
    """Stop the producers, then the consumers once they have read all that was acknowledged."""
    clients = list(clients)
    stop_producing(clients)
    stop_consuming(clients, timeout=timeout)


def wait_active_since(clients: Iterable[Traffic], since: float, timeout: float = 60) -> None:
    """Until every client has had a record acknowledged and a record read after `since`; a
    client with a fatal error is not waited for (its tests fail on the error)."""
    clients = list(clients)
    deadline = time.monotonic() + timeout
    while not all(c.active_since(since) for c in clients if not c.fatal):
        assert time.monotonic() < deadline, [c.describe() for c in clients]
        time.sleep(0.1)


def wait_reading(clients: Iterable[Traffic], n: int | Callable[[Traffic], int], timeout: float = 60) -> None:
    """Until every client has read `n` records (or n(client)); a client with a fatal error is
    not waited for (its tests fail on the error)."""
    clients = list(clients)
    deadline = time.monotonic() + timeout
    while any(len(c.consumed) < (n(c) if callable(n) else n) for c in clients if not c.fatal):
        assert time.monotonic() < deadline, [c.describe() for c in clients]
        time.sleep(0.1)
