"""Produce and consume with REAL Kafka clients; get plain Python data back.

Four drivers share one shape, so a test can be parametrized over ``CLIENTS``::

    client = CLIENTS["kcat"]
    sent = client.produce(bootstrap, topic, [Record(key=b"k", value=b"v", partition=0)])
    got = client.consume(bootstrap, topic, {0: 0}, count=1)   # {partition: start offset}

- ``confluent``    confluent-kafka (librdkafka bundled in the wheel)
- ``kafka-python`` kafka-python (pure Python)
- ``kcat``         the ``kcat`` binary (Debian's, on an older librdkafka; see ``kcat -V``)
- ``kafkajs``      kafkajs through ``node tests/js/kafkajs_client.js`` (JSON on stdin/stdout)

Consumers never join a group: each driver assigns partitions by hand and starts at the given
offset (an int or ``"earliest"``), and stops after ``count`` records or ``timeout`` seconds,
whichever first, returning what it got. Producers return one ``Record`` per input with the
partition and offset the broker assigned (``offset`` is None where the client cannot say).

What a client cannot do is a flag on the driver (``sets_timestamps``, ``compressions``,
``ordered_headers``, ``null_header_values``, ``binary_header_values``); asking for it anyway
raises ``Unsupported``.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import secrets
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

__all__ = [
    "CLIENTS", "Confluent", "KafkaJS", "KafkaPython", "Kcat", "Record", "Unsupported",
    "by_partition", "create_topic", "unique_topic",
]  # fmt: skip

JS_DIR = Path(__file__).resolve().parent.parent / "js"

Header = tuple[str, "bytes | None"]
Offsets = Mapping[int, "int | str"] | Iterable[int]


class Unsupported(Exception):
    """The client cannot express what was asked (e.g. kcat and explicit timestamps)."""


@dataclass
class Record:
    key: bytes | None = None
    value: bytes | None = None
    headers: list[Header] = field(default_factory=list)
    timestamp: int | None = None  # ms since the epoch
    partition: int | None = None
    offset: int | None = None

    def __post_init__(self) -> None:
        self.headers = [(str(k), None if v is None else bytes(v)) for k, v in self.headers]

    def content(self) -> tuple:
        """What a round trip must preserve: key, value, headers, timestamp."""
        return (self.key, self.value, tuple(self.headers), self.timestamp)


def by_partition(records: Iterable[Record]) -> dict[int, list[Record]]:
    out: dict[int, list[Record]] = {}
    for r in records:
        out.setdefault(r.partition, []).append(r)
    return out


def unique_topic(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def create_topic(
    bootstrap: str, topic: str, partitions: int = 3, replication_factor: int = 1,
    config: Mapping[str, str] | None = None, timeout: float = 15.0,
) -> None:  # fmt: skip
    """CreateTopics through confluent-kafka's AdminClient, then wait until every partition has
    a leader in Metadata."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, partitions, replication_factor, config=dict(config or {}))
    admin.create_topics([new], operation_timeout=timeout)[topic].result(timeout)
    deadline = time.monotonic() + timeout
    while True:
        md = admin.list_topics(topic, timeout=timeout).topics.get(topic)
        if md and md.error is None and len(md.partitions) == partitions:
            if all(p.leader >= 0 for p in md.partitions.values()):
                return
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {topic} not ready: {md}")
        time.sleep(0.05)


def produce_many(producer, topic: str, payload: bytes, n: int) -> None:
    """n records of `payload` through a confluent-kafka Producer as fast as it takes them,
    waiting (not failing) while its local queue is full; no flush."""
    produce, poll = producer.produce, producer.poll
    for i in range(n):
        while True:
            try:
                produce(topic, payload)
                break
            except BufferError:
                poll(0.002)
        if not i & 0x3FFF:
            poll(0)


def drop_topic(bootstrap: str, topic: str, timeout: float = 30.0) -> None:
    """Delete a benchmark run's topic to free its data (a broker's memory, files and page
    cache) before the next run; a topic left behind only costs memory, so it is reported,
    not raised."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    try:
        admin.delete_topics([topic], operation_timeout=timeout)[topic].result(timeout)
    except Exception as exc:  # noqa: BLE001
        print(f"  (could not delete {topic}: {exc})", flush=True)


def _start_offsets(partitions: Offsets, start: int | str) -> dict[int, int | str]:
    if isinstance(partitions, Mapping):
        return {int(p): o for p, o in partitions.items()}
    return {int(p): start for p in partitions}


def _acks(acks: int | str) -> int:
    return -1 if acks in ("all", -1, "-1") else int(acks)


class Confluent:
    """confluent-kafka ``Producer`` / ``Consumer`` with ``assign``.

    confluent-kafka will not build a Consumer without ``group.id``, so it gets a throwaway one;
    the group is never joined or committed to, but librdkafka does send FindCoordinator for it.
    """

    name = "confluent"
    sets_timestamps = True
    ordered_headers = True
    null_header_values = True
    binary_header_values = True
    compressions = frozenset({"none", "gzip", "snappy", "lz4", "zstd"})

    def produce(
        self, bootstrap: str, topic: str, records: Sequence[Record], *, acks: int | str = "all",
        compression: str = "none", timeout: float = 30.0, config: Mapping | None = None,
    ) -> list[Record]:  # fmt: skip
        from confluent_kafka import KafkaException, Producer

        conf = {"bootstrap.servers": bootstrap, "acks": str(_acks(acks)),
                "compression.type": compression, "linger.ms": 5, **(config or {})}  # fmt: skip
        producer = Producer(conf)
        results: list[Record | None] = [None] * len(records)
        errors = []

        def delivered(i, err, msg):
            if err is not None:
                errors.append((i, err))
                return
            off = msg.offset()
            results[i] = replace(records[i], partition=msg.partition(),
                                 offset=off if off is not None and off >= 0 else None,
                                 timestamp=msg.timestamp()[1] if msg.timestamp()[0] else None)  # fmt: skip

        for i, r in enumerate(records):
            kw = {"partition": r.partition} if r.partition is not None else {}
            producer.produce(topic, value=r.value, key=r.key, headers=list(r.headers) or None,
                             timestamp=r.timestamp or 0, on_delivery=lambda e, m, i=i: delivered(i, e, m),
                             **kw)  # fmt: skip
            producer.poll(0)
        left = producer.flush(timeout)
        if errors or left:
            raise KafkaException(f"confluent produce: {left} undelivered, errors {errors[:5]}")
        return results  # type: ignore[return-value]

    def consume(
        self, bootstrap: str, topic: str, partitions: Offsets, *, count: int,
        timeout: float = 20.0, start: int | str = "earliest", config: Mapping | None = None,
    ) -> list[Record]:  # fmt: skip
        from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaException
        from confluent_kafka import TopicPartition

        special = {"earliest": OFFSET_BEGINNING, "latest": OFFSET_END}
        conf = {"bootstrap.servers": bootstrap, "group.id": f"seaway-assign-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False, "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest", **(config or {})}  # fmt: skip
        consumer = Consumer(conf)
        out: list[Record] = []
        try:
            consumer.assign([TopicPartition(topic, p, special.get(o, o))  # type: ignore[arg-type]
                             for p, o in _start_offsets(partitions, start).items()])  # fmt: skip
            deadline = time.monotonic() + timeout
            while len(out) < count and (left := deadline - time.monotonic()) > 0:
                for msg in consumer.consume(count - len(out), min(left, 0.5)):
                    if msg.error():
                        raise KafkaException(msg.error())
                    ts_type, ts = msg.timestamp()
                    out.append(Record(key=msg.key(), value=msg.value(), headers=msg.headers() or [],
                                      timestamp=ts if ts_type else None,
                                      partition=msg.partition(), offset=msg.offset()))  # fmt: skip
        finally:
            consumer.close()
        return out


class KafkaPython:
    """kafka-python ``KafkaProducer`` / ``KafkaConsumer`` (``assign`` + ``seek``, no group)."""

    name = "kafka-python"
    sets_timestamps = True
    ordered_headers = True
    null_header_values = False  # KafkaProducer.send: "All headers items must be (str, bytes)"
    binary_header_values = True

    # kafka-python's codecs are optional packages, all in the ``test`` extra (python-snappy, lz4,
    # zstandard): a missing one is a broken install, so produce() fails rather than the test
    # skipping.
    compressions = frozenset({"none", "gzip", "snappy", "lz4", "zstd"})

    @staticmethod
    def missing_codecs() -> set[str]:
        """The codecs kafka.codec cannot find a library for here."""
        from kafka import codec

        has = {"gzip": codec.has_gzip(), "snappy": codec.has_snappy(),
               "lz4": codec.has_lz4(), "zstd": codec.has_zstd()}  # fmt: skip
        return {c for c, ok in has.items() if not ok}

    def produce(
        self, bootstrap: str, topic: str, records: Sequence[Record], *, acks: int | str = "all",
        compression: str = "none", timeout: float = 30.0, config: Mapping | None = None,
    ) -> list[Record]:  # fmt: skip
        from kafka import KafkaProducer

        if compression not in self.compressions:
            raise Unsupported(f"kafka-python has no {compression} codec")
        if compression in self.missing_codecs():
            raise RuntimeError(f"kafka-python finds no {compression} library: "
                               "run `pip install -e '.[test]'`")  # fmt: skip
        if any(v is None for r in records for _, v in r.headers):
            raise Unsupported("kafka-python cannot send a null header value")
        acks_ = _acks(acks)
        conf = dict(config or {})  # kafka-python 3 produces idempotently by default
        producer = KafkaProducer(
            bootstrap_servers=bootstrap, acks="all" if acks_ == -1 else acks_,
            compression_type=None if compression == "none" else compression, linger_ms=5,
            max_block_ms=int(timeout * 1000), **conf,
        )  # fmt: skip
        try:
            futures = [producer.send(topic, value=r.value, key=r.key, headers=list(r.headers),
                                     partition=r.partition, timestamp_ms=r.timestamp)
                       for r in records]  # fmt: skip
            producer.flush(timeout)
            out = []
            for r, f in zip(records, futures):
                md = f.get(timeout)
                # kafka-python 3.0.12 makes up offset 0 + index for acks=0 (no response)
                out.append(replace(r, partition=md.partition,
                                   offset=md.offset if md.offset >= 0 and acks_ != 0 else None,
                                   timestamp=md.timestamp if md.timestamp >= 0 else None))  # fmt: skip
            return out
        finally:
            producer.close(timeout)

    def consume(
        self, bootstrap: str, topic: str, partitions: Offsets, *, count: int,
        timeout: float = 20.0, start: int | str = "earliest", config: Mapping | None = None,
    ) -> list[Record]:  # fmt: skip
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                 enable_auto_commit=False, auto_offset_reset="earliest",
                                 **(config or {}))  # fmt: skip
        out: list[Record] = []
        try:
            offsets = {TopicPartition(topic, p): o for p, o in _start_offsets(partitions, start).items()}
            consumer.assign(list(offsets))
            for tp, o in offsets.items():
                if o == "earliest":
                    consumer.seek_to_beginning(tp)
                elif o == "latest":
                    consumer.seek_to_end(tp)
                else:
                    consumer.seek(tp, int(o))
            deadline = time.monotonic() + timeout
            while len(out) < count and (left := deadline - time.monotonic()) > 0:
                polled = consumer.poll(timeout_ms=int(min(left, 0.5) * 1000), max_records=count - len(out))
                # poll() returns a dict by partition; keep each partition's order
                for msgs in polled.values():
                    for m in msgs:
                        out.append(Record(key=m.key, value=m.value, headers=m.headers or [],
                                          timestamp=m.timestamp if m.timestamp >= 0 else None,
                                          partition=m.partition, offset=m.offset))  # fmt: skip
        finally:
            consumer.close()
        return out


class Kcat:
    """The ``kcat`` binary in a subprocess.

    Producing (``-P``): consecutive records with the same partition and headers go in one kcat
    run; per-message keys use ``-K`` and messages are split with ``-D``, both random delimiters
    checked not to occur in the data. Headers are ``-H name=value`` arguments, so they apply to
    the whole run, cannot contain NUL, and names cannot contain ``=``. kcat cannot set a
    record's timestamp (librdkafka stamps CreateTime = now) nor report offsets.
    Consuming: one ``kcat -C -J -e -p P -o OFFSET`` per partition, repeated from the next
    offset until ``count`` records or the timeout.
    """

    name = "kcat"
    sets_timestamps = False
    ordered_headers = True
    null_header_values = True  # -H name (no "=")
    binary_header_values = False  # -H arguments: no NUL byte
    compressions = frozenset({"none", "gzip", "snappy", "lz4", "zstd"})

    def __init__(self, binary: str | None = None) -> None:
        self.binary = binary or shutil.which("kcat") or shutil.which("kafkacat") or "kcat"

    def produce(
        self, bootstrap: str, topic: str, records: Sequence[Record], *, acks: int | str = "all",
        compression: str = "none", timeout: float = 30.0, config: Mapping | None = None,
    ) -> list[Record]:  # fmt: skip
        if any(r.timestamp is not None for r in records):
            raise Unsupported("kcat cannot set record timestamps")
        data = [b for r in records for b in (r.key or b"", r.value or b"")]
        kdelim, mdelim = self._delimiter(data), self._delimiter(data)
        deadline = time.monotonic() + timeout

        def group(r: Record):
            return (r.partition, tuple(r.headers), r.value is None)

        for (partition, headers, null_value), run in itertools.groupby(records, key=group):
            args = [self.binary, "-P", "-q", "-b", bootstrap, "-t", topic, "-K", kdelim, "-D", mdelim,
                    "-X", f"acks={_acks(acks)}", "-X", f"compression.codec={compression}"]  # fmt: skip
            if partition is not None:
                args += ["-p", str(partition)]
            if null_value:
                args.append("-Z")  # an empty message becomes a NULL value
            for name, value in headers:
                if "=" in name or (value is not None and b"\0" in value):
                    raise Unsupported(f"kcat -H cannot carry header {name!r}={value!r}")
                args += ["-H", name.encode() + (b"" if value is None else b"=" + value)]
            args += [f"-X{k}={v}" for k, v in (config or {}).items()]
            stdin = b"".join((b"" if r.key is None else r.key + kdelim.encode())
                             + (r.value or b"") + mdelim.encode() for r in run)  # fmt: skip
            proc = subprocess.run(args, input=stdin, capture_output=True,
                                  timeout=max(1.0, deadline - time.monotonic()))  # fmt: skip
            if proc.returncode != 0 or b"ERROR" in proc.stderr:
                raise RuntimeError(f"kcat -P failed ({proc.returncode}): {proc.stderr.decode(errors='replace')}")
        return [replace(r) for r in records]  # kcat reports no partition/offset

    @staticmethod
    def _delimiter(data: list[bytes]) -> str:
        while True:
            d = f"\x1e{secrets.token_hex(6)}\x1f"
            if not any(d.encode() in b for b in data):
                return d

    def consume(
        self, bootstrap: str, topic: str, partitions: Offsets, *, count: int,
        timeout: float = 20.0, start: int | str = "earliest", config: Mapping | None = None,
    ) -> list[Record]:  # fmt: skip
        nxt = {p: ("beginning" if o == "earliest" else "end" if o == "latest" else str(o))
               for p, o in _start_offsets(partitions, start).items()}  # fmt: skip
        deadline = time.monotonic() + timeout
        out: list[Record] = []
        while len(out) < count and time.monotonic() < deadline:
            procs = {p: subprocess.Popen(
                [self.binary, "-C", "-q", "-J", "-e", "-b", bootstrap, "-t", topic, "-p", str(p),
                 "-o", o, *[f"-X{k}={v}" for k, v in (config or {}).items()]],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE) for p, o in nxt.items()}  # fmt: skip
            got = 0
            for p, proc in procs.items():
                try:
                    stdout, stderr = proc.communicate(timeout=max(0.5, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    stdout, stderr = proc.communicate()
                if proc.returncode not in (0, -9):
                    raise RuntimeError(f"kcat -C failed ({proc.returncode}): {stderr.decode(errors='replace')}")
                for line in stdout.splitlines():
                    rec = self._parse(line)
                    if len(out) < count:
                        out.append(rec)
                        nxt[p] = str(rec.offset + 1)
                        got += 1
            if not got:
                time.sleep(0.1)
        return out

    @staticmethod
    def _parse(line: bytes) -> Record:
        # kcat writes key/payload/header bytes as JSON strings; undecodable bytes survive the
        # round trip through surrogateescape.
        j = json.loads(line.decode("utf-8", "surrogateescape"))
        enc = (lambda s: None if s is None else s.encode("utf-8", "surrogateescape"))  # noqa: E731
        h = j.get("headers") or []
        return Record(key=enc(j.get("key")), value=enc(j.get("payload")),
                      headers=[(h[i], enc(h[i + 1])) for i in range(0, len(h), 2)],
                      timestamp=j.get("ts") if j.get("tstype") in ("create", "logappend") else None,
                      partition=j["partition"], offset=j["offset"])  # fmt: skip


class KafkaJS:
    """kafkajs via ``node tests/js/kafkajs_client.js`` (see that file for how it consumes
    without a consumer group). Headers are a JS object there: duplicate names are grouped and
    keep first-seen order, so only header lists already in that order are accepted."""

    name = "kafkajs"
    sets_timestamps = True
    ordered_headers = False
    null_header_values = False  # the record encoder calls Buffer.byteLength(null) and throws
    binary_header_values = True
    compressions = frozenset({"none", "gzip", "snappy", "lz4", "zstd"})  # tests/js/codecs.js

    def __init__(self, node: str | None = None) -> None:
        self.node = node or shutil.which("node") or "node"
        self.script = JS_DIR / "kafkajs_client.js"
        self.last_requests: dict[str, list[int]] = {}  # API name -> versions used, last call

    def run(self, request: dict, timeout: float) -> dict:
        if not (JS_DIR / "node_modules" / "kafkajs").is_dir():
            raise RuntimeError(f"kafkajs not installed: run `npm ci` in {JS_DIR}")
        proc = subprocess.run([self.node, str(self.script)], input=json.dumps(request).encode(),
                              capture_output=True, timeout=timeout + 15,
                              env={**os.environ, "KAFKAJS_NO_PARTITIONER_WARNING": "1"})  # fmt: skip
        try:
            answer = json.loads(proc.stdout.decode().strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            answer = {"error": {"message": f"no JSON answer (exit {proc.returncode})"}}
        self.last_requests = answer.get("requests", {})
        if proc.returncode != 0 or "error" in answer:
            raise RuntimeError(f"kafkajs {request['action']}: {answer.get('error')}\n"
                               f"{proc.stderr.decode(errors='replace')[-3000:]}")  # fmt: skip
        return answer

    def produce(
        self, bootstrap: str, topic: str, records: Sequence[Record], *, acks: int | str = "all",
        compression: str = "none", timeout: float = 30.0, config: Mapping | None = None,
    ) -> list[Record]:  # fmt: skip
        if compression not in self.compressions:
            raise Unsupported(f"kafkajs has no {compression} codec")
        if any(v is None for r in records for _, v in r.headers):
            raise Unsupported("kafkajs cannot send a null header value")
        for r in records:
            grouped = sorted(r.headers, key=lambda h: [n for n, _ in r.headers].index(h[0]))
            if grouped != r.headers:
                raise Unsupported(f"kafkajs cannot keep header order {r.headers!r}")
        req = {"action": "produce", "brokers": bootstrap.split(","), "topic": topic,
               "acks": _acks(acks), "compression": compression, "timeout_ms": int(timeout * 1000),
               "records": [{"key": _b64(r.key), "value": _b64(r.value),
                            "headers": [[n, _b64(v)] for n, v in r.headers],
                            "timestamp": r.timestamp, "partition": r.partition} for r in records],
               **(config or {})}  # fmt: skip
        answer = self.run(req, timeout)
        return [replace(r, partition=a["partition"], offset=a["offset"])
                for r, a in zip(records, answer["records"])]  # fmt: skip

    def consume(
        self, bootstrap: str, topic: str, partitions: Offsets, *, count: int,
        timeout: float = 20.0, start: int | str = "earliest", config: Mapping | None = None,
    ) -> list[Record]:  # fmt: skip
        req = {"action": "consume", "brokers": bootstrap.split(","), "topic": topic,
               "partitions": {str(p): o for p, o in _start_offsets(partitions, start).items()},
               "count": count, "timeout_ms": int(timeout * 1000), **(config or {})}  # fmt: skip
        answer = self.run(req, timeout)
        return [Record(key=_unb64(r["key"]), value=_unb64(r["value"]),
                       headers=[(n, _unb64(v)) for n, v in r["headers"]], timestamp=r["timestamp"],
                       partition=r["partition"], offset=r["offset"]) for r in answer["records"]]  # fmt: skip

    def admin(self, bootstrap: str, calls: list[tuple[str, dict]], timeout: float = 60.0) -> list[dict]:
        """kafkajs admin methods called in order by one admin client: each answer is
        ``{"ok": result}`` or ``{"error": {"name", "type", "message", "errors"}}``."""
        answer = self.run({"action": "admin", "brokers": bootstrap.split(","),
                           "calls": [{"method": method, "args": args} for method, args in calls]}, timeout)
        return answer["results"]

    def offsets(self, bootstrap: str, topic: str, timeout: float = 20.0) -> dict[int, tuple[int, int]]:
        """``{partition: (low, high)}`` from kafkajs's admin.fetchTopicOffsets."""
        answer = self.run({"action": "offsets", "brokers": bootstrap.split(","), "topic": topic}, timeout)
        return {o["partition"]: (o["low"], o["high"]) for o in answer["offsets"]}


def _b64(b: bytes | None) -> str | None:
    return None if b is None else base64.b64encode(b).decode()


def _unb64(s: str | None) -> bytes | None:
    return None if s is None else base64.b64decode(s)


CLIENTS = {c.name: c for c in (Confluent(), KafkaPython(), Kcat(), KafkaJS())}
