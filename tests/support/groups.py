"""Consumer-group test helpers: raw group requests, and real group consumers that record
what they own.

Raw protocol (our own codec, one persistent connection)::

    with Wire(node.port) as w:
        resp = w.call(11, 5, m.JoinGroupRequest(...))
        cid = w.send(11, 5, ...)       # a JoinGroup that will be parked
        resp = w.recv(cid, timeout=5)  # its answer, whenever it comes

Real members: ``ConfluentMember`` (in a thread, or with ``ChildMember`` in a subprocess that can
be killed with SIGKILL) and ``KafkaPythonMember`` (in a thread). Each appends events to
``member.events``, dicts with ``ev`` in:

- ``assign`` / ``revoke``: ``parts`` (partitions of the one topic), ``gen`` (the generation the
  client is in, read from the client), ``t`` (time.time()); kafka-python's assign also says
  whether it is the ``leader`` (it computed the assignment)
- ``rec``: ``p``, ``o``, ``v`` (value, text)
- ``stale``: ``p``, ``o``: a record librdkafka delivered after its partition was revoked, dropped
- ``commit``: ``offsets`` {partition: next offset}, after a successful synchronous commit
- ``commit_failed``, ``error`` (``code``, ``fatal``, ``text``), ``closed``

Assignments are recorded incrementally (an eager client revokes everything first), so one
``owned()`` works for eager and cooperative protocols. The child speaks JSON lines on stdout:
``python -m tests.support.groups '<json>'``.

``kafkajs_group_consume`` runs kafkajs consumers in one group (node; JSON lines on stdout).
"""
from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

if __package__ in (None, ""):  # run as a script: make `core` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

REPO = Path(__file__).resolve().parents[2]
JS_DIR = REPO / "tests" / "js"


# ============================================================================ raw protocol

class Wire:
    """One connection to a node; requests are answered in order, as Kafka does per connection."""

    def __init__(self, port: int, client_id: str = "groups-test", timeout: float = 30.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.client_id = client_id
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[int, int]] = {}
        self._answers: dict[int, object] = {}

    def __enter__(self) -> "Wire":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def send(self, api_key: int, version: int, body) -> int:
        from core.protocol import messages as m

        api = m.API[api_key]
        cid = next(self._ids)
        header = m.REQUEST_HEADER.encode(api.request_header_version(version), m.RequestHeader(
            request_api_key=api_key, request_api_version=version, correlation_id=cid,
            client_id=self.client_id))
        payload = header + api.request.encode(version, body)
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)
        self._pending[cid] = (api_key, version)
        return cid

    def _read_exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("node closed the connection")
            data += chunk
        return data

    def recv(self, cid: int, timeout: float | None = None):
        """The answer to request ``cid``; raises socket.timeout if none within ``timeout``."""
        from core.protocol import messages as m

        if timeout is not None:
            self.sock.settimeout(timeout)
        try:
            while cid not in self._answers:
                (size,) = struct.unpack(">i", self._read_exactly(4))
                data = self._read_exactly(size)
                (got,) = struct.unpack_from(">i", data, 0)
                api_key, version = self._pending.pop(got)
                api = m.API[api_key]
                hdr, pos = m.RESPONSE_HEADER.decode(api.response_header_version(version), data, whole=False)
                self._answers[got] = api.response.decode(version, data, pos)
        finally:
            self.sock.settimeout(30.0)
        return self._answers.pop(cid)

    def call(self, api_key: int, version: int, body, timeout: float = 30.0):
        return self.recv(self.send(api_key, version, body), timeout)


def wait_for_group_coordinator(w: "Wire", offsets_partitions: int, timeout: float = 30.0) -> None:
    """What a client's first FindCoordinator does for a test that then speaks to the node raw:
    the first lookup has the controller create __consumer_offsets (answered
    COORDINATOR_NOT_AVAILABLE meanwhile); then wait until this broker coordinates a group of
    every offsets partition (it has loaded them all), so no later group request meets
    NOT_COORDINATOR."""
    from core.broker.groups.storage import partition_for
    from core.protocol import messages as m

    def found() -> bool:
        resp = w.call(10, 4, m.FindCoordinatorRequest(key_type=0, coordinator_keys=["coordinator-probe"]))
        return resp.coordinators[0].error_code == 0

    wait_until(found, timeout, "FindCoordinator to find the group coordinator")
    probes: dict[int, str] = {}
    n = 0
    while len(probes) < offsets_partitions:
        probes.setdefault(partition_for(f"probe-{n}", offsets_partitions), f"probe-{n}")
        n += 1

    def coordinating() -> bool:
        resp = w.call(15, 5, m.DescribeGroupsRequest(groups=list(probes.values()),
                                                      include_authorized_operations=False))
        return all(g.error_code == 0 for g in resp.groups)

    wait_until(coordinating, timeout, "the broker to load every __consumer_offsets partition")


def subscription(*topics: str) -> bytes:
    from core.protocol.consumer_protocol import Subscription, encode_subscription

    return encode_subscription(Subscription(list(topics)))


def assignment(partitions: dict[str, list[int]]) -> bytes:
    from core.protocol.consumer_protocol import Assignment, encode_assignment

    return encode_assignment(Assignment(partitions))


# ============================================================================ real members

def librdkafka_generation(consumer) -> int:
    """The generation a confluent-kafka consumer is in. librdkafka does not expose it except in
    its serialized consumer-group metadata: b"CGMDv2:" + int32 generation (host order) + ..."""
    md = consumer.consumer_group_metadata()
    if not (isinstance(md, bytes) and md.startswith(b"CGMDv2:")):
        raise AssertionError(f"unexpected consumer group metadata {md!r}")
    return struct.unpack_from("=i", md, 7)[0]


def owned(events: list[dict]) -> set[int]:
    """What a member owns after ``events``."""
    out: set[int] = set()
    for e in events:
        if e["ev"] == "assign":
            out |= set(e["parts"])
        elif e["ev"] == "revoke":
            out -= set(e["parts"])
        elif e["ev"] == "closed":
            out = set()
    return out


class _Recorder:
    def __init__(self, name: str, emit: Callable[[dict], None] | None = None):
        self.name = name
        self.events: list[dict] = []
        self._lock = threading.Lock()
        self._emit = emit

    def emit(self, **event) -> None:
        event.setdefault("t", time.time())
        with self._lock:
            self.events.append(event)
        if self._emit is not None:
            self._emit(event)

    def snapshot(self) -> list[dict]:
        with self._lock:
            return list(self.events)

    def owned(self) -> set[int]:
        return owned(self.snapshot())

    def last(self, ev: str) -> dict | None:
        return next((e for e in reversed(self.snapshot()) if e["ev"] == ev), None)

    # members that run in a thread set `thread`, `stopping` and `exception`
    def stop(self, timeout: float = 30.0) -> None:
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(timeout)
            assert not self.thread.is_alive(), f"{self.name} did not close within {timeout}s"
        if self.exception is not None:
            raise self.exception

    def _run_safely(self) -> None:
        try:
            self.run()
        except BaseException as exc:  # surfaced by stop()
            self.exception = exc
            self.emit(ev="crashed", text=repr(exc))


class ConfluentMember(_Recorder):
    """A confluent-kafka consumer in a group, polling one message at a time. Offsets are committed
    synchronously every ``commit_interval`` seconds and in on_revoke, so that a member that leaves
    (or is revoked) has committed everything it consumed; a killed one loses what it consumed
    since its last commit. Runs in a thread (``start``) or in the calling thread (``run``)."""

    def __init__(self, name: str, bootstrap: str, group: str, topic: str, config: dict | None = None,
                 commit_interval: float = 0.3, emit: Callable[[dict], None] | None = None):
        super().__init__(name, emit)
        self.topic = topic
        self.commit_interval = commit_interval
        self.config = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                       "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                       "heartbeat.interval.ms": 500, "max.poll.interval.ms": 30000,
                       "partition.assignment.strategy": "range", "client.id": name, **(config or {})}
        self.consumer = None
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None
        self.exception: BaseException | None = None
        self.positions: dict[int, int] = {}
        self._committed: dict[int, int] = {}

    def start(self) -> "ConfluentMember":
        self.thread = threading.Thread(target=self._run_safely, name=self.name, daemon=True)
        self.thread.start()
        return self

    def _commit(self) -> None:
        todo = {p: o for p, o in self.positions.items() if self._committed.get(p) != o}
        if not todo:
            return
        from confluent_kafka import KafkaException, TopicPartition

        try:
            self.consumer.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in todo.items()],
                                 asynchronous=False)
        except KafkaException as exc:
            self.emit(ev="commit_failed", offsets=todo, text=str(exc))
            return
        self._committed.update(todo)
        self.emit(ev="commit", offsets=todo)

    def run(self) -> None:
        from confluent_kafka import Consumer

        def on_error(err):
            self.emit(ev="error", code=err.code(), name=err.name(), fatal=err.fatal(), text=err.str())

        self.consumer = c = Consumer({**self.config, "error_cb": on_error})

        # librdkafka applies an unassign asynchronously, so a record it prefetched can still come
        # out of poll() just after on_revoke; like a careful application, the member drops a
        # record of a partition it does not own (its next owner reads it from the commit)
        owned: set[int] = set()

        def on_assign(consumer, parts):
            owned.update(p.partition for p in parts)
            self.emit(ev="assign", gen=librdkafka_generation(consumer), member=consumer.memberid(),
                      parts=sorted(p.partition for p in parts))

        def on_revoke(consumer, parts):
            gone = {p.partition for p in parts}
            owned.difference_update(gone)
            self._commit()
            for p in gone:
                self.positions.pop(p, None)
            self.emit(ev="revoke", gen=librdkafka_generation(consumer), parts=sorted(gone))

        c.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke)
        last_commit = time.monotonic()
        try:
            while not self.stopping.is_set():
                msg = c.poll(0.1)
                if msg is not None:
                    if msg.error():
                        err = msg.error()
                        self.emit(ev="error", code=err.code(), name=err.name(), fatal=err.fatal(),
                                  text=err.str())
                        if err.fatal():
                            break
                    elif msg.partition() not in owned:
                        self.emit(ev="stale", p=msg.partition(), o=msg.offset())
                    else:
                        self.emit(ev="rec", p=msg.partition(), o=msg.offset(), v=msg.value().decode())
                        self.positions[msg.partition()] = msg.offset() + 1
                if time.monotonic() - last_commit >= self.commit_interval:
                    self._commit()
                    last_commit = time.monotonic()
        finally:
            c.close()
            self.emit(ev="closed")


class KafkaPythonMember(_Recorder):
    """A kafka-python consumer in a group, in a thread. kafka-python runs rebalance listeners
    on its IO thread, where a blocking commit is refused, so it commits the way the Java client
    does by default: auto-commit of consumed positions, synchronously before every rebalance
    (onJoinPrepare) and on close, and every ``auto_commit_interval_ms``."""

    def __init__(self, name: str, bootstrap: str, group: str, topic: str, config: dict | None = None):
        super().__init__(name)
        from kafka.coordinator.assignors.range import RangePartitionAssignor

        self.topic = topic
        self.config = dict(bootstrap_servers=bootstrap, group_id=group, client_id=name,
                           enable_auto_commit=True, auto_commit_interval_ms=500,
                           auto_offset_reset="earliest", session_timeout_ms=6000,
                           heartbeat_interval_ms=500, max_poll_interval_ms=30000,
                           partition_assignment_strategy=[RangePartitionAssignor], **(config or {}))
        self.stopping = threading.Event()
        self.exception: BaseException | None = None
        self.thread = threading.Thread(target=self._run_safely, name=name, daemon=True)

    def start(self) -> "KafkaPythonMember":
        self.thread.start()
        return self


    def run(self) -> None:
        from kafka import ConsumerRebalanceListener, KafkaConsumer

        consumer = KafkaConsumer(**self.config)
        me = self

        def generation() -> int:
            return consumer._coordinator._generation.generation_id  # not public in kafka-python

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                me.emit(ev="revoke", gen=generation(), parts=sorted(tp.partition for tp in revoked))

            def on_partitions_assigned(self, assigned):
                me.emit(ev="assign", gen=generation(), parts=sorted(tp.partition for tp in assigned),
                        leader=consumer._coordinator._is_leader)

        consumer.subscribe([self.topic], listener=Listener())
        try:
            while not self.stopping.is_set():
                for records in consumer.poll(timeout_ms=100).values():
                    for r in records:
                        self.emit(ev="rec", p=r.partition, o=r.offset, v=r.value.decode())
        finally:
            consumer.close()  # commits consumed positions, revokes, leaves
            self.emit(ev="closed")


class ChildMember(_Recorder):
    """A ConfluentMember in its own process (so that it can be SIGKILLed); its events stream
    back as JSON lines. ``kill`` records a ``killed`` event at the moment of the signal."""

    def __init__(self, name: str, bootstrap: str, group: str, topic: str, config: dict | None = None,
                 commit_interval: float = 0.3):
        super().__init__(name)
        spec = dict(name=name, bootstrap=bootstrap, group=group, topic=topic, config=config or {},
                    commit_interval=commit_interval)
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.support.groups", json.dumps(spec)],
                                     cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.stderr_lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by SIGKILL
            with self._lock:
                self.events.append(event)

    def _read_stderr(self) -> None:
        for line in self.proc.stderr:
            self.stderr_lines.append(line.decode(errors="replace"))

    def kill(self) -> None:
        # The event carries the moment of the signal but is recorded only after the pipe is
        # drained: records the child wrote before it died are still in the pipe, and they must
        # come before "killed" in the history, as they did in the child.
        killed_at = time.time()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self._reader.join(10)
        self.emit(ev="killed", t=killed_at)

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout)
        self._reader.join(10)

    def exited(self) -> bool:
        return self.proc.poll() is not None


def _child_main(spec: dict) -> None:
    out_lock = threading.Lock()

    def emit(event: dict) -> None:
        with out_lock:
            sys.stdout.write(json.dumps(event) + "\n")
            sys.stdout.flush()

    member = ConfluentMember(spec["name"], spec["bootstrap"], spec["group"], spec["topic"], spec["config"],
                             spec["commit_interval"], emit=emit)
    signal.signal(signal.SIGTERM, lambda *_: member.stopping.set())
    member.run()


# ============================================================================ pytest glue

def attach_log_on_failure(request, fixture_name: str, node) -> None:
    """Let tests/conftest.py attach ``node``'s log tail to the report of a failed test that
    uses the fixture ``fixture_name`` (conftest keeps its registry under a stash key of its own
    module, which is imported as a plugin, not as ``tests.conftest``)."""
    for plugin in request.config.pluginmanager.get_plugins():
        key = getattr(plugin, "_BROKERS", None)
        if key is not None and hasattr(plugin, "pytest_runtest_makereport"):
            request.config.stash.setdefault(key, {})[fixture_name] = node


# ============================================================================ waiting

def wait_until(predicate: Callable[[], object], timeout: float, what: str, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


# ============================================================================ kafkajs

_KAFKAJS_GROUP = r"""
const { Kafka, logLevel } = require('kafkajs')
const req = JSON.parse(process.argv[1])
const say = obj => process.stdout.write(JSON.stringify(obj) + '\n')
const kafka = new Kafka({ clientId: 'seaway-kafkajs-group', brokers: req.brokers, logLevel: logLevel.NOTHING,
                          retry: { retries: 8, initialRetryTime: 100, maxRetryTime: 1000 } })
const records = [], joins = [], latest = {}, consumers = []
let done, ready = false
const finished = new Promise(resolve => (done = resolve))
const timer = setTimeout(() => done('timeout'), req.timeout_ms)
// the test produces only once every member owns part of the topic: say "ready" then
function checkReady() {
  const owned = Object.values(latest)
  if (ready || owned.length < req.members || owned.some(ps => ps.length === 0)) return
  const all = new Set(owned.flat())
  if (all.size === req.partitions && owned.flat().length === req.partitions) {
    ready = true
    say({ ready: true })
  }
}

async function main() {
  for (let i = 0; i < req.members; i++) {
    const c = kafka.consumer({ groupId: req.group, sessionTimeout: 6000, heartbeatInterval: 500,
                               rebalanceTimeout: 10000, maxWaitTimeInMs: 200 })
    c.on(c.events.GROUP_JOIN, e => {
      const parts = e.payload.memberAssignment[req.topic] || []
      joins.push({ member: i, memberId: e.payload.memberId, leader: e.payload.isLeader, partitions: parts })
      latest[i] = parts
      checkReady()
    })
    await c.connect()
    await c.subscribe({ topic: req.topic, fromBeginning: true })
    await c.run({ autoCommit: true, autoCommitInterval: 200,
      eachMessage: async ({ partition, message }) => {
        records.push({ member: i, partition, offset: Number(message.offset), value: message.value.toString() })
        if (records.length >= req.count) done('count')
      } })
    consumers.push(c)
  }
  const why = await finished
  clearTimeout(timer)
  for (const c of consumers) await c.disconnect()   // commits what was consumed, leaves the group
  say({ why, records, joins })
  process.exit(0)
}
main().catch(e => { say({ error: { message: String((e && e.stack) || e) }, records, joins }); process.exit(1) })
"""


def kafkajs_group_consume(bootstrap: str, group: str, topic: str, partitions: int, count: int,
                          produce: Callable[[], None], members: int = 2, timeout: float = 30.0) -> dict:
    """Start ``members`` kafkajs consumers in one group; once each of them owns part of the
    topic, call ``produce()``; stop at ``count`` records between them (or ``timeout``), then
    disconnect them. Returns {"why", "records", "joins"}."""
    if not (JS_DIR / "node_modules" / "kafkajs").is_dir():
        raise RuntimeError(f"kafkajs not installed: run `npm ci` in {JS_DIR}")
    node = shutil.which("node") or "node"
    req = {"brokers": bootstrap.split(","), "group": group, "topic": topic, "count": count,
           "partitions": partitions, "members": members, "timeout_ms": int(timeout * 1000)}
    proc = subprocess.Popen([node, "-e", _KAFKAJS_GROUP, json.dumps(req)], cwd=JS_DIR, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        answer = None
        for line in proc.stdout:
            msg = json.loads(line)
            if msg.get("ready"):
                produce()
            else:
                answer = msg
                break
        proc.wait(timeout + 30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = proc.stderr.read().decode(errors="replace")
    if answer is None or proc.returncode != 0 or "error" in answer:
        raise RuntimeError(f"kafkajs group consumer (exit {proc.returncode}): "
                           f"{answer and answer.get('error')}\n{stderr[-3000:]}")
    return answer


if __name__ == "__main__":
    _child_main(json.loads(sys.argv[1]))
