"""`seaway transactions` as an operator uses it, like kafka-transactions: a real node, transaction
states made with the coordinator's requests (InitProducerId, AddPartitionsToTxn) from our own
client, and the CLI as a subprocess, checked field by field.

The node runs with transaction.partition.verification.enable=false, as a broker before KIP-890
did, so that a transactional batch from a producer no coordinator knows is accepted: the
classic hanging transaction, which find-hanging must find and abort must clear. The answers of
the three APIs themselves, errors and ACLs included, are in tests/unit/test_txn_admin_handlers.py;
the command line's mistakes in tests/unit/test_transactions_cli.py."""
from __future__ import annotations

import json
import time

import anyio
import pytest

from core.client import Admin, KafkaClient, NewTopic
from tests.support.cli import seaway
from tests.support.node import SeawayNode
from tests.support.txn_requests import (add_partitions, coordinator, idempotent_producer, init_transactions,
                                        produce_batch)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with SeawayNode(tmp_path_factory.mktemp("txn-admin"), {
        "auto.create.topics.enable": "false",
        "transaction.state.log.num.partitions": "2",
        "transaction.partition.verification.enable": "false",
    }) as n:
        n.ids = anyio.run(_transactions, n.bootstrap)
        time.sleep(0.01)    # the hanging batch is older than --max-transaction-timeout 0
        yield n


async def _transactions(bootstrap: str) -> dict:
    """tx-live: Ongoing, its first batch at orders-0 offset 0. tx-empty: Empty. And a producer
    with no transactional id known to any coordinator that wrote a transactional batch at
    orders-1 offset 0: a hanging transaction."""
    async with KafkaClient(bootstrap) as client:
        admin = Admin(client)
        created = await admin.create_topics([NewTopic("orders", 2, 1)])
        assert created == {"orders": None}
        conn = await coordinator(client, "tx-live")
        live, live_epoch = await init_transactions(conn, "tx-live", timeout_ms=60_000)
        assert await add_partitions(conn, "tx-live", live, live_epoch, [("orders", 0)]) == {("orders", 0): 0}
        written = await produce_batch(conn, "orders", 0, live, live_epoch, 0, 2, transactional_id="tx-live")
        assert (written.error_code, written.base_offset) == (0, 0)
        empty, _ = await init_transactions(conn, "tx-empty", timeout_ms=30_000)
        ghost, _ = await idempotent_producer(conn)
        written = await produce_batch(conn, "orders", 1, ghost, 0, 0, 1, transactional_id="tx-ghost")
        assert (written.error_code, written.base_offset) == (0, 0)
        start = (await admin.describe_transactions(["tx-live"]))["tx-live"].transaction_start_time_ms
        return {"live": live, "empty": empty, "ghost": ghost, "live_start": start}


def txn(node, *args, **kw):
    return seaway("transactions", "--bootstrap-server", node.bootstrap, *args, **kw)


def txn_json(node, *args):
    return json.loads(txn(node, *args, "--output", "json").stdout)


def one_line_error(proc, message: str) -> None:
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr == f"seaway: error: {message}\n", proc.stderr
    assert "Traceback" not in proc.stderr


def test_list(node):
    ids = node.ids
    out = txn(node, "list").stdout.splitlines()
    assert out[0].split() == ["TRANSACTIONAL-ID", "COORDINATOR", "PRODUCER-ID", "STATE"]
    assert [line.split() for line in out[1:]] == [["tx-empty", "1", str(ids["empty"]), "Empty"],
                                                   ["tx-live", "1", str(ids["live"]), "Ongoing"]]
    assert txn_json(node, "list", "--state", "ongoing") == [
        {"transactional_id": "tx-live", "coordinator": 1, "producer_id": ids["live"], "state": "Ongoing"}]
    assert txn_json(node, "list", "--state", "Empty,CompleteCommit", "--producer-id", str(ids["empty"])) == [
        {"transactional_id": "tx-empty", "coordinator": 1, "producer_id": ids["empty"], "state": "Empty"}]
    assert txn_json(node, "list", "--duration-filter", "0") == [
        {"transactional_id": "tx-live", "coordinator": 1, "producer_id": ids["live"], "state": "Ongoing"}]
    assert txn_json(node, "list", "--duration-filter", "3600000") == []


def test_describe(node):
    ids = node.ids
    described = txn_json(node, "describe", "--transactional-id", "tx-live")
    assert described.pop("duration_ms") >= 0
    assert described == {"coordinator": 1, "transactional_id": "tx-live", "producer_id": ids["live"],
                         "producer_epoch": 0, "state": "Ongoing", "timeout_ms": 60_000,
                         "start_time_ms": ids["live_start"], "partitions": ["orders-0"]}
    out = txn(node, "describe", "--transactional-id", "tx-empty").stdout.splitlines()
    assert out[0].split() == ["COORDINATOR", "TRANSACTIONAL-ID", "PRODUCER-ID", "PRODUCER-EPOCH", "STATE",
                              "TIMEOUT-MS", "START-TIME-MS", "DURATION-MS", "PARTITIONS"]
    assert out[1].split() == ["1", "tx-empty", str(ids["empty"]), "0", "Empty", "30000", "-", "-", "-"]
    one_line_error(txn(node, "describe", "--transactional-id", "nope", check=False),
                   "transactional id 'nope': TRANSACTIONAL_ID_NOT_FOUND: its coordinator does not know it")


def test_describe_producers(node):
    ids = node.ids
    found = txn_json(node, "describe-producers", "--topic", "orders", "--partition", "0")
    assert found["topic"] == "orders" and found["partition"] == 0
    [live] = found["producers"]
    assert live.pop("last_timestamp") > 0
    assert live == {"producer_id": ids["live"], "producer_epoch": 0, "coordinator_epoch": None, "last_sequence": 1,
                    "current_transaction_start_offset": 0}
    out = txn(node, "describe-producers", "--topic", "orders", "--partition", "0", "--broker-id", "1").stdout
    assert out.splitlines()[0].split() == ["PRODUCER-ID", "PRODUCER-EPOCH", "COORDINATOR-EPOCH", "LAST-SEQUENCE",
                                           "LAST-TIMESTAMP", "TXN-START-OFFSET"]
    assert out.splitlines()[1].split()[:4] == [str(ids["live"]), "0", "-", "1"]
    one_line_error(txn(node, "describe-producers", "--topic", "nope", "--partition", "0", check=False),
                   "producers of nope-0 on its leader: UNKNOWN_TOPIC_OR_PARTITION: no such topic or partition")
    one_line_error(txn(node, "describe-producers", "--topic", "orders", "--partition", "5", check=False),
                   "producers of orders-5 on its leader: UNKNOWN_TOPIC_OR_PARTITION: no such topic or partition")


def test_find_hanging_then_abort(node):
    ghost = node.ids["ghost"]
    # tx-live's open transaction on orders-0 is its coordinator's: only the ghost's hangs
    for scope in (["--topic", "orders"], ["--broker-id", "1"], ["--topic", "orders", "--partition", "1"]):
        [hanging] = txn_json(node, "find-hanging", *scope, "--max-transaction-timeout", "0")
        assert hanging.pop("last_timestamp") > 0 and hanging.pop("duration_min") == 0
        assert hanging == {"topic": "orders", "partition": 1, "producer_id": ghost, "producer_epoch": 0,
                           "coordinator_epoch": None, "last_sequence": 0, "current_transaction_start_offset": 0}
    assert txn_json(node, "find-hanging", "--topic", "orders", "--partition", "0",
                    "--max-transaction-timeout", "0") == []
    # with the default 15 minutes nothing is old enough
    assert txn(node, "find-hanging", "--topic", "orders").stdout.split() == [
        "TOPIC", "PARTITION", "PRODUCER-ID", "PRODUCER-EPOCH", "COORDINATOR-EPOCH", "START-OFFSET",
        "LAST-TIMESTAMP", "DURATION(MIN)"]
    one_line_error(txn(node, "find-hanging", "--topic", "nope", check=False), "--topic: topic 'nope' does not exist")

    done = txn(node, "abort", "--topic", "orders", "--partition", "1", "--start-offset", "0")
    assert done.stdout == f"Aborted the transaction of producer {ghost} (epoch 0) on orders-1 (coordinator epoch 0).\n"
    [after] = txn_json(node, "describe-producers", "--topic", "orders", "--partition", "1")["producers"]
    assert (after["producer_id"], after["coordinator_epoch"], after["current_transaction_start_offset"]) \
        == (ghost, 0, None)
    assert txn_json(node, "find-hanging", "--topic", "orders", "--max-transaction-timeout", "0") == []
    one_line_error(txn(node, "abort", "--topic", "orders", "--partition", "1", "--start-offset", "0", check=False),
                   "--start-offset: no open transaction starts at offset 0 of orders-1")
    # named by its producer instead: a marker with a newer coordinator epoch is written (it ends
    # nothing now), one with an older epoch is refused, as the partition refuses a replaced coordinator
    by_producer = ["abort", "--topic", "orders", "--partition", "1", "--producer-id", str(ghost), "--producer-epoch", "0"]
    assert txn_json(node, *by_producer, "--coordinator-epoch", "5") == {
        "topic": "orders", "partition": 1, "producer_id": ghost, "producer_epoch": 0, "coordinator_epoch": 5,
        "aborted": True}
    one_line_error(txn(node, *by_producer, "--coordinator-epoch", "3", check=False),
                   f"abort the transaction of producer {ghost} (epoch 0) on orders-1: TRANSACTION_COORDINATOR_FENCED: "
                   f"a newer coordinator epoch has written a marker there")
