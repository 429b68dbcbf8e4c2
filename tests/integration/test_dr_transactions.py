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
GRACE_S = 4


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
            time.sleep(1.5)
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
