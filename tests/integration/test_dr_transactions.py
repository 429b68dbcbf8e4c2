"""Transactions across a planned `dr failover` (issue 23, item 5): the link copies only
committed records, so a transaction still open on the fenced topics would hold the drain back
until it timed out. The drain gives open transactions `transactions_grace_s` to end; one that
commits in time is copied whole, and one left open is aborted by fencing its producer (Kafka's
Admin.fenceProducers), so the promoted side never holds part of a transaction and the
producer hears that it was fenced, never a commit that did not happen. The application then
starts its producer again on the promoted side."""
from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.mirror import dr_pair
from tests.support.node import REPO

pytestmark = pytest.mark.integration

PARTITIONS = 3
GRACE_S = 6     # generous: the transaction committed during the drain must make it under load


def read(bootstrap: str, isolation: str, expect: int, timeout: float = 30) -> list[tuple[int, str]]:
    """Every record of orders, (partition, value), sorted; reads until `expect` are there and
    then 1.5 s more, so that one too many would show."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "isolation.level": isolation,
                  "enable.auto.commit": False})
    c.assign([TopicPartition("orders", p, 0) for p in range(PARTITIONS)])
    got: list[tuple[int, str]] = []
    deadline = time.monotonic() + timeout
    quiet_until = None
    try:
        while time.monotonic() < deadline:
            got += [(m.partition(), m.value().decode()) for m in c.consume(100, timeout=0.3) if not m.error()]
            if len(got) >= expect:
                quiet_until = quiet_until or time.monotonic() + 1.5
                if time.monotonic() > quiet_until:
                    break
    finally:
        c.close()
    return sorted(got)


def transaction(producer: Producer, values: dict[int, str]) -> None:
    producer.begin_transaction()
    for partition, value in values.items():
        producer.produce("orders", value.encode(), partition=partition)
    producer.flush(10)


def test_a_planned_failover_copies_ended_transactions_whole_and_aborts_one_left_open(tmp_path):
    with dr_pair(tmp_path, transactions_grace_s=GRACE_S) as (eu, us, config):
        admin = AdminClient({"bootstrap.servers": eu.bootstrap})
        admin.create_topics([NewTopic("orders", PARTITIONS, 1)])["orders"].result(10)

        billing = Producer({"bootstrap.servers": eu.bootstrap, "transactional.id": "billing"})
        billing.init_transactions(30)
        transaction(billing, {0: "t1-0", 1: "t1-1", 2: "t1-2"})
        billing.commit_transaction(30)
        transaction(billing, {0: "open-0", 1: "open-1"})        # never ended by its producer

        late = Producer({"bootstrap.servers": eu.bootstrap, "transactional.id": "late"})
        late.init_transactions(30)
        transaction(late, {1: "late-1", 2: "late-2"})           # committed during the drain

        def commit_late():
            time.sleep(0.5)
            late.commit_transaction(30)
        committer = threading.Thread(target=commit_late)

        committer.start()
        done = subprocess.run([sys.executable, "-m", "dr.cli", "--config", str(config), "failover", "eu-west"],
                              cwd=REPO, capture_output=True, text=True, timeout=120)
        committer.join(30)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"aborted 1 open transaction by fencing its producer after {GRACE_S}s (billing)" in done.stdout, \
            done.stdout

        whole = [(0, "t1-0"), (1, "late-1"), (1, "t1-1"), (2, "late-2"), (2, "t1-2")]
        assert read(us.bootstrap, "read_committed", len(whole)) == whole
        assert read(us.bootstrap, "read_uncommitted", len(whole)) == whole, "the link copied part of a transaction"
        assert read(eu.bootstrap, "read_committed", len(whole)) == whole

        with pytest.raises(KafkaException) as fenced:
            billing.commit_transaction(10)
        assert fenced.value.args[0].fatal(), fenced.value      # fenced: this producer is done

        # The application starts again on the promoted side, with the same transactional id.
        again = Producer({"bootstrap.servers": us.bootstrap, "transactional.id": "billing"})
        again.init_transactions(30)
        transaction(again, {0: "t2-0", 2: "t2-2"})
        again.commit_transaction(30)
        after = sorted(whole + [(0, "t2-0"), (2, "t2-2")])
        assert read(us.bootstrap, "read_committed", len(after)) == after


def test_a_consume_transform_produce_loop_through_the_gateway_rides_a_failover_exactly_once(tmp_path):
    """The exactly-once loop of the fault run (tests/faults/txn_loop.py: read_committed input,
    transactional output with the input offsets in the transaction), bootstrapped at the
    gateway, runs through `dr failover eu-west` while a producer writes its input there too.
    The transaction it has open at the fence is aborted (it restarts, as it does after any
    error, and reads on from the group's committed offsets, which sync-groups moved), so
    us-east ends with every input's output exactly once and no part of an aborted one."""
    from tests.faults.txn_loop import INPUT, OUTPUT
    from tests.support.gateway import GatewayProcess

    with dr_pair(tmp_path, transactions_grace_s=2) as (eu, us, config):
        admin = AdminClient({"bootstrap.servers": eu.bootstrap})
        for done in admin.create_topics([NewTopic(INPUT, 2, 1), NewTopic(OUTPUT, 2, 1)]).values():
            done.result(10)
        gateway = GatewayProcess(tmp_path, "eu-1~us-1", [("eu-1", eu.bootstrap), ("us-1", us.bootstrap)]).start()
        loop = _Supervised([sys.executable, "tests/faults/txn_loop.py", "--bootstrap", gateway.bootstrap,
                            "--slot", "0", "--batch", "10"], tmp_path / "loop.log")
        acked: list[str] = []
        stop = threading.Event()

        def write_input():
            p = Producer({"bootstrap.servers": gateway.bootstrap, "enable.idempotence": True, "acks": "all",
                          "linger.ms": 5})
            i = 0
            while not stop.is_set():
                value = f"in-{i}"
                p.produce(INPUT, value.encode(), partition=i % 2,
                          on_delivery=lambda err, msg: None if err else acked.append(msg.value().decode()))
                i += 1
                p.poll(0.01)
            assert p.flush(120) == 0
        writer = threading.Thread(target=write_input)
        try:
            writer.start()
            loop.start()
            _wait(lambda: len(_committed_outputs(eu.bootstrap)) >= 100, 60, "the loop to commit on eu-west")
            done = subprocess.run([sys.executable, "-m", "dr.cli", "--config", str(config), "failover", "eu-west"],
                                  cwd=REPO, capture_output=True, text=True, timeout=180)
            assert done.returncode == 0, done.stdout + done.stderr
            moved = len(acked)
            _wait(lambda: len(acked) > moved + 200, 60, "input written on us-east through the gateway")
            stop.set()
            writer.join(150)
            _wait(lambda: sorted(_committed_outputs(us.bootstrap)) == sorted(f"out:{v}" for v in acked), 120,
                  "us-east to hold one output for every input")
        finally:
            stop.set()
            loop.stop()
            gateway.stop()
        outputs = _committed_outputs(us.bootstrap)
        assert len(outputs) == len(set(outputs)) == len(acked), "each input's output exactly once"
        assert loop.restarts >= 1, "the loop's transaction at the fence was aborted, and it started again"
        uncommitted = _committed_outputs(us.bootstrap, isolation="read_uncommitted")
        assert sorted(uncommitted) == sorted(outputs), "the link copied no aborted output"


def _committed_outputs(bootstrap: str, isolation: str = "read_committed") -> list[str]:
    """Every value of the loop's output topic, read until nothing more comes for about a second."""
    from tests.faults.txn_loop import OUTPUT
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "isolation.level": isolation,
                  "enable.auto.commit": False})
    c.assign([TopicPartition(OUTPUT, p, 0) for p in range(2)])
    got: list[str] = []
    idle, deadline = 0, time.monotonic() + 30
    try:
        while idle < 3 and time.monotonic() < deadline:
            batch = [m.value().decode() for m in c.consume(500, timeout=0.3) if not m.error()]
            got += batch
            idle = 0 if batch else idle + 1
        return got
    finally:
        c.close()


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


class _Supervised:
    """A process started again whenever it exits, until stop(); counts the restarts."""

    def __init__(self, argv: list[str], log_path):
        self.argv, self.log = argv, open(log_path, "ab")
        self.restarts = -1
        self.proc: subprocess.Popen | None = None
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        while not self.stopping.is_set():
            self.restarts += 1
            self.proc = subprocess.Popen(self.argv, cwd=REPO, stdout=self.log, stderr=self.log)
            while self.proc.poll() is None and not self.stopping.is_set():
                time.sleep(0.2)

    def stop(self) -> None:
        self.stopping.set()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.thread.join(20)
