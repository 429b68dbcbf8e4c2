"""Transactions across a planned `dr failover` (issue 23, item 5): the link copies only
committed records, so a transaction still open on the fenced topics would hold the drain back
until it timed out. The drain gives open transactions `transactions_grace_s` to end; one that
commits in time is copied whole, and one left open is aborted by fencing its producer (Kafka's
Admin.fenceProducers), so the promoted side never holds part of a transaction and the
producer hears that it was fenced, never a commit that did not happen. The application then
starts its producer again on the promoted side."""
from __future__ import annotations

import re
import subprocess
import sys
import threading
import time

import anyio
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


LEDGER_PARTITIONS = 4


def test_an_unplanned_failover_never_shows_part_of_a_transaction(tmp_path):
    """eu-west dies (kill -9) while a transactional producer commits transactions across
    every partition of `ledger`, each its own size per partition so that the link's copies of
    the partitions run at different paces. The link copies each source transaction as a
    transaction and commits it on us-east only once it has all of it (mirror/txn_gate.py);
    `dr failover --force` aborts those it had in part. So us-east's read_committed view is whole
    transactions, exactly the first N the producer committed (one producer commits in order),
    and the promoted partitions are not held back by anything left open: a transaction
    written there afterwards is read at once."""
    with dr_pair(tmp_path) as (eu, us, config):
        admin = AdminClient({"bootstrap.servers": eu.bootstrap})
        admin.create_topics([NewTopic("ledger", LEDGER_PARTITIONS, 1)])["ledger"].result(10)
        committed: list[int] = []
        stop = threading.Event()

        def write():
            p = Producer({"bootstrap.servers": eu.bootstrap, "transactional.id": "ledger-writer",
                          "linger.ms": 2, "message.timeout.ms": 10_000})
            p.init_transactions(30)
            n = 0
            try:
                while not stop.is_set():
                    p.begin_transaction()
                    for partition in range(LEDGER_PARTITIONS):
                        for k in range(1 + (n + partition) % 5):       # uneven: 1..5 records each
                            p.produce("ledger", f"{n}:{k}:".encode() + b"x" * 2000 * partition,
                                      partition=partition)
                    p.commit_transaction(10)
                    committed.append(n)
                    n += 1
            except KafkaException:
                pass            # the region died under it
        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        _wait(lambda: len(committed) >= 150, 60, "150 transactions committed on eu-west")
        eu.kill()
        stop.set()
        writer.join(30)

        done = subprocess.run([sys.executable, "-m", "dr.cli", "--config", str(config), "--timeout", "2",
                               "failover", "eu-west", "--force"], cwd=REPO, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        assert re.search(r"(\d+ copied transactions? left open by the link aborted|no copied transaction "
                         r"left open) on us-1", done.stdout), done.stdout

        seen = _ledger(us.bootstrap, "read_committed")
        whole = {n: sum(1 + (n + p) % 5 for p in range(LEDGER_PARTITIONS)) for n in seen}
        partial = {n: (len(records), whole[n]) for n, records in seen.items() if len(records) != whole[n]}
        assert not partial, f"transactions seen in part on the promoted side (n: (seen, written)): {partial}"
        assert sorted(seen) == list(range(len(seen))), "the promoted side holds the first N transactions"
        assert len(seen) >= 100 and len(seen) <= len(committed) + 1, (len(seen), len(committed))
        for n, records in seen.items():
            assert len(set(records)) == len(records), f"transaction {n} copied twice"

        after = Producer({"bootstrap.servers": us.bootstrap, "transactional.id": "ledger-writer"})
        after.init_transactions(30)
        after.begin_transaction()
        for partition in range(LEDGER_PARTITIONS):
            after.produce("ledger", b"after:0:", partition=partition)
        after.commit_transaction(30)
        _wait(lambda: len(_ledger(us.bootstrap, "read_committed", quiet_s=0.6).get("after", [])) == LEDGER_PARTITIONS,
              30, "the transaction written on the promoted side to be read there")


def _ledger(bootstrap: str, isolation: str, quiet_s: float = 1.5) -> dict:
    """Every record of ledger on `bootstrap`, by transaction: n -> [(partition, k)], read
    until nothing more comes for `quiet_s`."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "ledger-check", "isolation.level": isolation,
                  "enable.auto.commit": False})
    c.assign([TopicPartition("ledger", p, 0) for p in range(LEDGER_PARTITIONS)])
    out: dict = {}
    quiet_until, deadline = time.monotonic() + quiet_s, time.monotonic() + 60
    try:
        while time.monotonic() < min(quiet_until, deadline):
            for msg in c.consume(500, timeout=0.2):
                if msg.error():
                    continue
                n, k, _ = msg.value().split(b":", 2)
                if n == b"plain":
                    continue
                key = n.decode() if n == b"after" else int(n)
                out.setdefault(key, []).append((msg.partition(), int(k)))
                quiet_until = time.monotonic() + quiet_s
        return out
    finally:
        c.close()


def test_an_unplanned_failover_commits_the_copies_the_link_had_decided_and_aborts_the_rest(tmp_path):
    """The link records that it has a copied transaction whole before it writes its markers
    (mirror/copier.py TxnRelay). Here it got as far as one marker of two (written by hand, as
    the link would): `dr failover --force` commits the copy its decision names, so both halves
    show, and aborts a copy no decision names, so none of it does."""

    from core.broker.transactions.markers import marker_batch
    from core.client import KafkaClient, Producer as OurProducer
    from core.protocol import messages as m
    from core.protocol.dr import mirror_client_id, txn_decisions_topic
    from core.protocol.records import build_batch
    from core.protocol.txn_markers import TxnShape
    import json

    decided, undecided = 9_000_001, 9_000_002
    with dr_pair(tmp_path) as (eu, us, config):
        admin = AdminClient({"bootstrap.servers": eu.bootstrap})
        admin.create_topics([NewTopic("ledger", 2, 1)])["ledger"].result(10)
        us_admin = AdminClient({"bootstrap.servers": us.bootstrap})
        _wait(lambda: "ledger" in us_admin.list_topics(timeout=5).topics, 30, "the link to create the replica on us-east")

        async def copy_by_hand():
            async with KafkaClient(us.bootstrap, client_id=mirror_client_id("eu-1")) as client:
                await client.refresh_metadata(["ledger"])

                async def write(partition: int, records) -> int:
                    R = m.ProduceRequest
                    conn = await client.connection(client.leader_for("ledger", partition))
                    resp = await conn.send(R(transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=[
                        R.TopicProduceData(name="ledger", partition_data=[
                            R.PartitionProduceData(index=partition, records=records)])]))
                    part = resp.responses[0].partition_responses[0]
                    assert part.error_code == 0, part
                    return part.base_offset

                def data(pid: int, value: str):
                    return build_batch([(b"k", value.encode(), None, 1_000)], producer_id=pid, producer_epoch=0,
                                       base_sequence=0, transactional=True)
                first = {p: await write(p, data(decided, f"decided-{p}")) for p in (0, 1)}
                await write(1, data(undecided, "undecided-1"))
                async with OurProducer(client, acks=-1) as producer:
                    for p in (0, 1):
                        await producer.send(txn_decisions_topic("eu-1"), partition=0,
                                            key=f"ledger:{p}:{decided}".encode(),
                                            value=json.dumps({"epoch": 0, "first_offset": first[p],
                                                              "start_ms": 5}).encode())
                    await producer.flush()
                await write(0, marker_batch(decided, 0, 3, True, 1_000, TxnShape(5, (("ledger", 2),))))
        anyio.run(copy_by_hand)
        eu.kill()
        done = subprocess.run([sys.executable, "-m", "dr.cli", "--config", str(config), "--timeout", "2",
                               "failover", "eu-west", "--force"], cwd=REPO, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "1 copied transaction the link had whole committed on us-1; 1 copied transaction left open by " \
               "the link aborted on us-1" in done.stdout, done.stdout
        c = Consumer({"bootstrap.servers": us.bootstrap, "group.id": "check", "isolation.level": "read_committed",
                      "enable.auto.commit": False})
        c.assign([TopicPartition("ledger", p, 0) for p in (0, 1)])
        seen: list[str] = []
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and len(seen) < 2:
            seen += [msg.value().decode() for msg in c.consume(10, timeout=0.5) if not msg.error()]
        time.sleep(1)
        seen += [msg.value().decode() for msg in c.consume(10, timeout=0.5) if not msg.error()]
        c.close()
        assert sorted(seen) == ["decided-0", "decided-1"], seen


def test_a_dr_link_killed_with_kill9_copies_every_transaction_once_and_whole(tmp_path, monkeypatch):
    """A DR link killed (kill -9) while it copies transactions, and started again, ends with
    every committed transaction on us-east once and whole, in both read_committed and
    read_uncommitted views, and no transaction committed by another's marker. One
    partition's copy is slowed (mirror/copier.py's fault hook), so the other partitions hold
    transactions' markers parked while it catches up, and copy another producer's records
    past them; the kill lands then. The restarted link must resume before every marker it
    had not written (its offset syncs waited for them), or those transactions stay open on
    us-east for good. (With the syncs not held back this failed 1 run in 2.)"""
    from mirror.copier import SLOW_ENV
    from tests.support.mirror import start_dr_links, stop_mirror
    from tests.support.node import SeawayNode

    monkeypatch.setenv(SLOW_ENV, "ledger-0=4")

    total = 200
    with SeawayNode(tmp_path / "eu") as eu, SeawayNode(tmp_path / "us") as us:
        admin = AdminClient({"bootstrap.servers": eu.bootstrap})
        admin.create_topics([NewTopic("ledger", LEDGER_PARTITIONS, 1)])["ledger"].result(10)
        links = (("eu-1", eu.bootstrap), ("us-1", us.bootstrap))
        mirror = start_dr_links(tmp_path, *links)
        committed: list[int] = []

        def write():
            p = Producer({"bootstrap.servers": eu.bootstrap, "transactional.id": "ledger-writer", "linger.ms": 2})
            p.init_transactions(30)
            for n in range(total):
                p.begin_transaction()
                for partition in range(LEDGER_PARTITIONS):
                    for k in range(1 + (n + partition) % 5):
                        p.produce("ledger", f"{n}:{k}:".encode() + b"x" * 2000 * partition, partition=partition)
                p.commit_transaction(30)
                committed.append(n)
        plain_done = threading.Event()

        def write_plain():
            # Records of another producer between the transaction's: a copy goes on past a
            # parked marker with them, and records their offset syncs (held back).
            p = Producer({"bootstrap.servers": eu.bootstrap, "enable.idempotence": True, "linger.ms": 2})
            i = 0
            while not plain_done.is_set():
                p.produce("ledger", f"plain:{i}:".encode(), partition=i % LEDGER_PARTITIONS)
                i += 1
                p.poll(0.002)
            p.flush(30)
        plain = threading.Thread(target=write_plain, daemon=True)
        writer = threading.Thread(target=write, daemon=True)
        plain.start()
        writer.start()
        try:
            writer.join(120)
            assert len(committed) == total
            # The other partitions' copies hold the last transaction's marker while
            # ledger-0's (slowed) catches up: the kill lands then.
            time.sleep(1)
            mirror.kill()
            mirror.wait()
            plain_done.set()
            plain.join(30)
            time.sleep(1)
            mirror = start_dr_links(tmp_path, *links)
            _wait(lambda: len(_ledger(us.bootstrap, "read_committed", quiet_s=0.5)) == total, 90,
                  f"us-east to hold all {total} transactions")
            seen = _ledger(us.bootstrap, "read_committed")
            everything = _ledger(us.bootstrap, "read_uncommitted")
            folded = anyio.run(_folded, us.bootstrap, "ledger", LEDGER_PARTITIONS)
        finally:
            stop_mirror(mirror)
    assert sorted(seen) == list(range(total))
    for n, records in seen.items():
        assert sorted(records) == sorted((p, k) for p in range(LEDGER_PARTITIONS) for k in range(1 + (n + p) % 5)), \
            f"transaction {n}: {sorted(records)}"
    assert {n: len(r) for n, r in everything.items()} == {n: len(r) for n, r in seen.items()}, \
        "nothing copied twice, not even outside a committed transaction"
    assert not folded, f"transactions committed by another's marker on us-east: {folded[:5]}"


async def _folded(bootstrap: str, topic: str, partitions: int) -> list:
    """Where a replica's log holds records of two source transactions between one COMMIT
    marker of their producer and the next: a transaction whose marker the link never wrote,
    committed later by the next one's (the records start with the transaction's number)."""
    from core.client import KafkaClient
    from core.protocol import messages as m
    from core.protocol.records import decode_batch, iter_batch_headers
    out = []
    F = m.FetchRequest
    async with KafkaClient(bootstrap) as client:
        await client.refresh_metadata([topic])
        for partition in range(partitions):
            conn = await client.connection(client.leader_for(topic, partition))
            position, open_txns = 0, {}
            while True:
                resp = await conn.send(F(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=8 << 20,
                                         isolation_level=0, topics=[F.FetchTopic(topic=topic, partitions=[
                                             F.FetchPartition(partition=partition, fetch_offset=position,
                                                              partition_max_bytes=8 << 20)])]), version=11)
                data = resp.responses[0].partitions[0].records or b""
                infos = list(iter_batch_headers(data))
                if not infos:
                    break
                for info in infos:
                    if info.is_control:
                        open_txns.pop(info.producer_id, None)
                    elif info.is_transactional:
                        numbers = {r.value.split(b":", 1)[0] for r in decode_batch(data, info)}
                        seen = open_txns.setdefault(info.producer_id, set())
                        seen |= numbers
                        if len(seen) > 1:
                            out.append((partition, info.base_offset, sorted(seen)))
                    position = info.next_offset
    return out
