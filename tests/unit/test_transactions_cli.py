"""`seaway transactions`: every bad invocation is one line naming the flag, exit status 2,
before anything connects; and find-hanging's rules, as Kafka's FindHangingTransactions has
them, on made-up producer states. Against a node: tests/integration/test_transactions_admin.py."""
from __future__ import annotations

import shlex

import pytest

from core.cli.main import main
from core.cli.transactions_cmd import OpenTransaction, hanging_transactions, open_transactions
from core.client.txn_admin import ProducerState, TransactionDescription, transaction_state

NOWHERE = ["-b", "127.0.0.1:1", "--timeout", "1"]   # a test whose flags pass by mistake fails fast
ABORT = "abort --topic t --partition 0"

BAD = [
    # list
    ("list --state Bogus", "--state: unknown transaction state 'Bogus' (one of Empty, Ongoing, PrepareCommit"),
    ("list --state Ongoing,,", "--state: unknown transaction state ''"),
    ("list --producer-id x", "argument --producer-id: invalid int value: 'x'"),
    ("list --producer-id -3", "--producer-id: -3 is negative"),
    ("list --duration-filter soon", "argument --duration-filter: invalid int value: 'soon'"),
    # describe
    ("describe", "the following arguments are required: --transactional-id"),
    ("describe --transactional-id ''", "--transactional-id: the transactional id is empty"),
    ("describe --transactional-id", "argument --transactional-id: expected one argument"),
    # describe-producers
    ("describe-producers --topic t", "the following arguments are required: --partition"),
    ("describe-producers --partition 0", "the following arguments are required: --topic"),
    ("describe-producers --topic t --partition x", "argument --partition: invalid int value: 'x'"),
    ("describe-producers --topic t --partition -1", "--partition: -1 is negative"),
    ("describe-producers --topic '' --partition 0", "--topic: the topic name is empty"),
    ("describe-producers --topic t --partition 0 --broker-id -2", "--broker-id: -2 is negative"),
    ("describe-producers --topic t --partition 0 --broker-id one", "argument --broker-id: invalid int value: 'one'"),
    # find-hanging
    ("find-hanging", "find-hanging: give --topic or --broker-id to limit the search"),
    ("find-hanging --max-transaction-timeout 5", "find-hanging: give --topic or --broker-id"),
    ("find-hanging --broker-id 1 --partition 0", "find-hanging: --partition needs --topic"),
    ("find-hanging --topic t --partition -1", "--partition: -1 is negative"),
    ("find-hanging --topic t --max-transaction-timeout -1", "--max-transaction-timeout: -1 is negative"),
    ("find-hanging --topic t --max-transaction-timeout 1.5",
     "argument --max-transaction-timeout: invalid int value: '1.5'"),
    # abort
    ("abort --partition 0 --start-offset 1", "the following arguments are required: --topic"),
    ("abort --topic t --start-offset 1", "the following arguments are required: --partition"),
    (ABORT, "abort: name the transaction with --start-offset, or with --producer-id, --producer-epoch and "
            "--coordinator-epoch"),
    (f"{ABORT} --producer-id 5", "abort: --producer-epoch is missing"),
    (f"{ABORT} --producer-id 5 --producer-epoch 1", "abort: --coordinator-epoch is missing"),
    (f"{ABORT} --producer-epoch 1 --coordinator-epoch 1", "abort: --producer-id is missing"),
    (f"{ABORT} --start-offset 3 --producer-id 5", "abort: give --start-offset, or --producer-id, --producer-epoch "
                                                  "and --coordinator-epoch, not both"),
    (f"{ABORT} --start-offset -3", "--start-offset: -3 is negative"),
    (f"{ABORT} --start-offset 1e3", "argument --start-offset: invalid int value: '1e3'"),
    (f"{ABORT} --producer-id -5 --producer-epoch 1 --coordinator-epoch 1", "--producer-id: -5 is negative"),
    (f"{ABORT} --producer-id 5 --producer-epoch 40000 --coordinator-epoch 1", "--producer-epoch: 40000 is above 32767"),
    (f"{ABORT} --producer-id 5 --producer-epoch -1 --coordinator-epoch 1", "--producer-epoch: -1 is negative"),
    (f"{ABORT} --producer-id 5 --producer-epoch 1 --coordinator-epoch x",
     "argument --coordinator-epoch: invalid int value: 'x'"),
    ("abort --topic t --partition 0 --start-offset 1 --bogus", "unrecognized arguments: --bogus"),
    ("frobnicate", "argument ACTION: invalid choice: 'frobnicate' (choose from 'list', 'describe', "
                   "'describe-producers', 'find-hanging', 'abort')"),
]


@pytest.mark.parametrize("command,message", BAD, ids=[c for c, _ in BAD])
def test_every_bad_invocation_is_one_line_naming_the_flag(command, message, capsys):
    try:
        code = main(["transactions", *shlex.split(command), *NOWHERE])
    except SystemExit as exc:     # argparse's own checks exit from parse_args
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("seaway: error: ") and message in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err


def test_a_cluster_that_does_not_answer_is_one_line_exit_1(capsys):
    code = main(["transactions", "list", *NOWHERE])
    err = capsys.readouterr().err
    assert code == 1, err
    assert err.startswith("seaway: error: no answer from 127.0.0.1:1 within 1s"), err
    assert len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("action,flags", [
    ("list", ("--state", "--producer-id", "--duration-filter")),
    ("describe", ("--transactional-id",)),
    ("describe-producers", ("--topic", "--partition", "--broker-id")),
    ("find-hanging", ("--broker-id", "--topic", "--partition", "--max-transaction-timeout")),
    ("abort", ("--topic", "--partition", "--start-offset", "--producer-id", "--producer-epoch",
               "--coordinator-epoch")),
])
def test_help_names_kafka_transactions_flags(action, flags, capsys):
    with pytest.raises(SystemExit):
        main(["transactions", action, "--help"])
    out = capsys.readouterr().out
    for flag in (*flags, "--bootstrap-server", "--command-config", "--output", "--timeout"):
        assert flag in out, flag


def test_state_names_read_as_kafkas():
    assert [transaction_state(s) for s in ("Ongoing", "ongoing", " PREPAREABORT ", "completecommit")] \
        == ["Ongoing", "Ongoing", "PrepareAbort", "CompleteCommit"]
    with pytest.raises(ValueError, match="unknown transaction state 'Prepare-Abort'"):
        transaction_state("Prepare-Abort")


MIN = 60_000
NOW = 100 * MIN


def producer(pid: int, last_timestamp: int, start: int | None, epoch: int = 0) -> ProducerState:
    return ProducerState(pid, epoch, 3, last_timestamp, None, start)


def test_candidates_are_open_transactions_idle_longer_than_the_timeout():
    states = {("t", 0): [producer(1, NOW - 16 * MIN, 10),        # open, idle 16 min: a candidate
                         producer(2, NOW - 15 * MIN, 20),        # idle exactly 15 min: not (Kafka's >)
                         producer(3, NOW - 60 * MIN, None)],     # idle long, but no open transaction
              ("t", 1): [producer(4, NOW - 20 * MIN, 0)]}
    found = open_transactions(states, 15 * MIN, NOW)
    assert [(c.topic, c.partition, c.producer.producer_id) for c in found] == [("t", 0, 1), ("t", 1, 4)]
    assert [c.producer.producer_id for c in open_transactions(states, 0, NOW)] == [1, 2, 4]


def test_a_transaction_hangs_unless_its_coordinator_still_has_the_partition():
    def description(pid: int, state: str, *tps) -> TransactionDescription:
        return TransactionDescription(1, state, pid, 0, 60_000, NOW - MIN, tuple(tps))

    candidates = [OpenTransaction("t", 0, producer(1, 0, 5)),     # no coordinator lists producer 1
                  OpenTransaction("t", 0, producer(2, 0, 6)),     # tx-2 is not found
                  OpenTransaction("t", 0, producer(3, 0, 7)),     # tx-3 is ongoing on t-0: fine
                  OpenTransaction("t", 1, producer(3, 0, 8)),     # ... but not on t-1
                  OpenTransaction("t", 0, producer(4, 0, 9)),     # tx-4 preparing with t-0: its marker comes
                  OpenTransaction("t", 0, producer(5, 0, 9))]     # tx-5 now belongs to another producer
    tids = {2: "tx-2", 3: "tx-3", 4: "tx-4", 5: "tx-5"}
    descriptions = {"tx-2": None, "tx-3": description(3, "Ongoing", ("t", 0)),
                    "tx-4": description(4, "PrepareCommit", ("t", 0)),
                    "tx-5": description(6, "Ongoing", ("t", 0))}
    hanging = hanging_transactions(candidates, tids, descriptions)
    assert [(h.producer.producer_id, h.partition) for h in hanging] == [(1, 0), (2, 0), (3, 1), (5, 0)]
