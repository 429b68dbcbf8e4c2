"""`seaway transactions`: look at transactions and producers, find hanging transactions and
abort them, like kafka-transactions.

    seaway transactions list [--state Ongoing] [--producer-id N] [--duration-filter MS]
    seaway transactions describe --transactional-id ID
    seaway transactions describe-producers --topic T --partition P [--broker-id N]
    seaway transactions find-hanging (--broker-id N | --topic T [--partition P]) [--max-transaction-timeout MIN]
    seaway transactions abort --topic T --partition P (--start-offset N |
                              --producer-id N --producer-epoch N --coordinator-epoch N)

A transaction *hangs* on a partition when the partition's producer state still has it open
(DescribeProducers) but its coordinator will never write its marker there: the producer's id
is not listed by any coordinator, its transactional id is not found, or the coordinator's
transaction for it does not include that partition. `find-hanging` looks, as Kafka's tool
does, only at open transactions whose producer last wrote longer ago than
--max-transaction-timeout minutes (transaction.max.timeout.ms, 15 minutes by default: no live
transaction is older). `abort` writes the ABORT marker to that partition itself
(WriteTxnMarkers to its leader; needs ALTER or CLUSTER_ACTION on the cluster), which lets the last
stable offset, and so read_committed consumers, move past it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.protocol.errors import KafkaError

from .common import CliError, UsageError, admin_command
from .output import add_bootstrap_flag, emit_json, table

if TYPE_CHECKING:
    from core.client.txn_admin import ProducerState, TransactionDescription

MAX_EPOCH = 32767      # Java's Short.MAX_VALUE: producer epochs are int16


def register(sub) -> None:
    p = sub.add_parser("transactions", help="list and describe transactions and producers; find and abort "
                                            "hanging transactions",
                       description="Analyze the transactional state of producers in the cluster, and recover "
                                   "from hanging transactions (like kafka-transactions).")
    add_bootstrap_flag(p)
    tsub = p.add_subparsers(dest="action", metavar="ACTION")
    tsub.required = True

    c = tsub.add_parser("list", help="list transactional ids with their coordinator, producer id and state")
    c.add_argument("--state", action="append", default=[], metavar="STATE",
                   help="only transactions in this state (Empty, Ongoing, PrepareCommit, PrepareAbort, "
                        "CompleteCommit, CompleteAbort; repeatable or comma-separated)")
    c.add_argument("--producer-id", action="append", default=[], type=int, metavar="N",
                   help="only the transaction of this producer id (repeatable)")
    c.add_argument("--duration-filter", type=int, default=-1, metavar="MS",
                   help="only transactions running longer than this many milliseconds (default: -1, every "
                        "transaction)")
    admin_command(c, run_list, prepare=_prepare_list)

    c = tsub.add_parser("describe", help="describe the state of a transactional id",
                        description="Describe the state of a transactional id, as its coordinator knows it.")
    c.add_argument("--transactional-id", required=True, metavar="ID", help="the transactional id")
    admin_command(c, run_describe, prepare=_prepare_describe)

    c = tsub.add_parser("describe-producers", help="describe the active producers of a partition",
                        description="The active producers of a partition, as its leader's (or --broker-id's "
                                    "replica's) producer state holds them.")
    c.add_argument("--topic", required=True, help="topic name")
    c.add_argument("--partition", required=True, type=int, metavar="N", help="partition number")
    c.add_argument("--broker-id", type=int, metavar="N",
                   help="describe the producer state on this broker's replica (default: the leader)")
    admin_command(c, run_describe_producers, prepare=_prepare_partition)

    c = tsub.add_parser("find-hanging", help="find hanging transactions",
                        description="Find transactions that are open on a partition but that their "
                                    "coordinator will never complete there.")
    c.add_argument("--broker-id", type=int, metavar="N", help="search the partitions this broker has a replica of")
    c.add_argument("--topic", help="search this topic only (required with --partition)")
    c.add_argument("--partition", type=int, metavar="N", help="search this partition of --topic only")
    c.add_argument("--max-transaction-timeout", type=int, default=15, metavar="MINUTES",
                   help="only transactions whose producer wrote nothing for longer than this (default: 15, "
                        "Kafka's transaction.max.timeout.ms)")
    admin_command(c, run_find_hanging, prepare=_prepare_find_hanging)

    c = tsub.add_parser("abort", help="abort a hanging transaction (needs ALTER on the cluster)",
                        description="Abort a hanging transaction on one partition: write its ABORT marker "
                                    "there. Name the transaction by its start offset, or by producer id, "
                                    "producer epoch and coordinator epoch (see describe-producers).")
    c.add_argument("--topic", required=True, help="topic name")
    c.add_argument("--partition", required=True, type=int, metavar="N", help="partition number")
    c.add_argument("--start-offset", type=int, metavar="OFFSET",
                   help="start offset of the transaction to abort (its producer is looked up)")
    c.add_argument("--producer-id", type=int, metavar="N", help="producer id")
    c.add_argument("--producer-epoch", type=int, metavar="N", help="producer epoch")
    c.add_argument("--coordinator-epoch", type=int, metavar="N",
                   help="coordinator epoch (a negative one, as describe-producers shows for a producer that "
                        "never got a marker, is taken as 0)")
    admin_command(c, run_abort, prepare=_prepare_abort)


_REASONS = {
    "TRANSACTIONAL_ID_NOT_FOUND": "its coordinator does not know it",
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED": "not authorized to describe this transactional id",
    "TOPIC_AUTHORIZATION_FAILED": "not authorized to read this topic",
    "CLUSTER_AUTHORIZATION_FAILED": "not authorized: writing markers needs ALTER on the cluster",
    "UNKNOWN_TOPIC_OR_PARTITION": "no such topic or partition",
    "INVALID_PRODUCER_EPOCH": "the producer has a newer epoch there",
    "TRANSACTION_COORDINATOR_FENCED": "a newer coordinator epoch has written a marker there",
}


def _reason(err: KafkaError) -> str:
    name = getattr(err.code, "name", None)
    return f"{name}: {_REASONS[name]}" if name in _REASONS else str(err)


def _at_least(args, flag: str, low: int, high: int | None = None) -> None:
    """args.<flag> (if given) within low..high, else a UsageError naming the flag."""
    value = getattr(args, flag.lstrip("-").replace("-", "_"), None)
    if value is None:
        return
    if value < low:
        raise UsageError(f"{flag}: {value} is {'negative' if low == 0 else f'below {low}'}")
    if high is not None and value > high:
        raise UsageError(f"{flag}: {value} is above {high}")


def _now_ms() -> int:
    return int(time.time() * 1000)


# ---------------------------------------------------------------------------------- list

def _prepare_list(args) -> None:
    from core.client.txn_admin import transaction_state
    states = []
    for item in args.state:
        for name in item.split(","):
            try:
                states.append(transaction_state(name))
            except ValueError as exc:
                raise UsageError(f"--state: {exc}") from None
    args.states = list(dict.fromkeys(states))
    for pid in args.producer_id:
        if pid < 0:
            raise UsageError(f"--producer-id: {pid} is negative")
    args.duration_filter = max(args.duration_filter, -1)


async def run_list(admin, args) -> int:
    listings = await admin.list_transactions(args.states, args.producer_id, args.duration_filter)
    rows = [{"transactional_id": t.transactional_id, "coordinator": t.coordinator_id, "producer_id": t.producer_id,
             "state": t.state} for t in listings]
    if args.output == "json":
        emit_json(rows)
    else:
        table(["TRANSACTIONAL-ID", "COORDINATOR", "PRODUCER-ID", "STATE"],
              [(r["transactional_id"], r["coordinator"], r["producer_id"], r["state"]) for r in rows])
    return 0


# ---------------------------------------------------------------------------------- describe

def _prepare_describe(args) -> None:
    if not args.transactional_id:
        raise UsageError("--transactional-id: the transactional id is empty")


async def run_describe(admin, args) -> int:
    tid = args.transactional_id
    d = (await admin.describe_transactions([tid]))[tid]
    if isinstance(d, KafkaError):
        raise CliError(f"transactional id {tid!r}: {_reason(d)}")
    start = d.transaction_start_time_ms
    row = {"coordinator": d.coordinator_id, "transactional_id": tid, "producer_id": d.producer_id,
           "producer_epoch": d.producer_epoch, "state": d.state, "timeout_ms": d.transaction_timeout_ms,
           "start_time_ms": start, "duration_ms": None if start is None else max(_now_ms() - start, 0),
           "partitions": [f"{t}-{p}" for t, p in d.topic_partitions]}
    if args.output == "json":
        emit_json(row)
    else:
        table(["COORDINATOR", "TRANSACTIONAL-ID", "PRODUCER-ID", "PRODUCER-EPOCH", "STATE", "TIMEOUT-MS",
               "START-TIME-MS", "DURATION-MS", "PARTITIONS"], [list(row.values())])
    return 0


# ---------------------------------------------------------------------------------- describe-producers

def _prepare_partition(args) -> None:
    if not args.topic:
        raise UsageError("--topic: the topic name is empty")
    _at_least(args, "--partition", 0)
    _at_least(args, "--broker-id", 0)


def _producer_row(s) -> dict:
    return {"producer_id": s.producer_id, "producer_epoch": s.producer_epoch,
            "coordinator_epoch": s.coordinator_epoch, "last_sequence": s.last_sequence,
            "last_timestamp": s.last_timestamp, "current_transaction_start_offset": s.current_transaction_start_offset}


async def _producers(admin, topic: str, partition: int, broker_id: int | None = None):
    found = (await admin.describe_producers([(topic, partition)], broker_id=broker_id))[(topic, partition)]
    if isinstance(found, KafkaError):
        where = f"broker {broker_id}" if broker_id is not None else "its leader"
        raise CliError(f"producers of {topic}-{partition} on {where}: {_reason(found)}")
    return found


async def run_describe_producers(admin, args) -> int:
    rows = [_producer_row(s) for s in await _producers(admin, args.topic, args.partition, args.broker_id)]
    if args.output == "json":
        emit_json({"topic": args.topic, "partition": args.partition, "producers": rows})
    else:
        table(["PRODUCER-ID", "PRODUCER-EPOCH", "COORDINATOR-EPOCH", "LAST-SEQUENCE", "LAST-TIMESTAMP",
               "TXN-START-OFFSET"], [list(r.values()) for r in rows])
    return 0


# ---------------------------------------------------------------------------------- find-hanging

def _prepare_find_hanging(args) -> None:
    if args.topic is None and args.broker_id is None:
        raise UsageError("find-hanging: give --topic or --broker-id to limit the search")
    if args.partition is not None and args.topic is None:
        raise UsageError("find-hanging: --partition needs --topic")
    if args.topic == "":
        raise UsageError("--topic: the topic name is empty")
    _at_least(args, "--partition", 0)
    _at_least(args, "--broker-id", 0)
    _at_least(args, "--max-transaction-timeout", 0)


@dataclass(frozen=True)
class OpenTransaction:
    topic: str
    partition: int
    producer: "ProducerState"


def open_transactions(producers: dict, max_timeout_ms: int, now_ms: int) -> list[OpenTransaction]:
    """The open transactions among {(topic, partition): [ProducerState]} whose producer last
    wrote more than `max_timeout_ms` ago (Kafka's candidates: a live one is never that old)."""
    return [OpenTransaction(t, p, s) for (t, p), states in sorted(producers.items()) for s in states
            if s.current_transaction_start_offset is not None and now_ms - s.last_timestamp > max_timeout_ms]


def hanging_transactions(candidates: list[OpenTransaction], transactional_ids: dict[int, str],
                         descriptions: "dict[str, TransactionDescription | None]") -> list[OpenTransaction]:
    """Kafka's FindHangingTransactions: a candidate hangs if no coordinator lists its producer
    id, if its transactional id is not found (None in `descriptions`), or if the coordinator's
    transaction for it does not include the partition (a transaction that is ongoing or
    preparing there still gets its marker)."""
    out = []
    for c in candidates:
        tid = transactional_ids.get(c.producer.producer_id)
        d = descriptions.get(tid) if tid is not None else None
        if d is None or d.producer_id != c.producer.producer_id \
                or (c.topic, c.partition) not in d.topic_partitions:
            out.append(c)
    return out


async def _search_partitions(admin, args) -> list[tuple[str, int]]:
    if args.topic is not None and args.partition is not None:
        return [(args.topic, args.partition)]
    names = [args.topic] if args.topic is not None else await admin.list_topics(internal=True)
    found = await admin.describe_topics(names) if names else {}
    out = []
    for name in names:
        desc = found.get(name)
        if desc is None or isinstance(desc, KafkaError):
            if args.topic is not None:
                if desc is None or getattr(desc.code, "name", None) == "UNKNOWN_TOPIC_OR_PARTITION":
                    raise CliError(f"--topic: topic {name!r} does not exist")
                raise CliError(f"--topic {name}: {_reason(desc)}")
            continue    # deleted since it was listed
        out += [(name, p.partition) for p in desc.partitions
                if args.broker_id is None or args.broker_id in p.replicas]
    return out


async def run_find_hanging(admin, args) -> int:
    partitions = await _search_partitions(admin, args)
    producers = await admin.describe_producers(partitions, broker_id=args.broker_id) if partitions else {}
    for (t, p), found in sorted(producers.items()):
        if isinstance(found, KafkaError):
            where = f"broker {args.broker_id}" if args.broker_id is not None else "its leader"
            raise CliError(f"producers of {t}-{p} on {where}: {_reason(found)}")
    now = _now_ms()
    candidates = open_transactions(producers, args.max_transaction_timeout * 60_000, now)
    hanging: list[OpenTransaction] = []
    if candidates:
        pids = sorted({c.producer.producer_id for c in candidates})
        tids = {t.producer_id: t.transactional_id for t in await admin.list_transactions(producer_ids=pids)
                if t.producer_id in pids}
        descriptions: dict[str, TransactionDescription | None] = {}
        for tid, d in (await admin.describe_transactions(sorted(set(tids.values())))).items():
            if isinstance(d, KafkaError):
                if getattr(d.code, "name", None) != "TRANSACTIONAL_ID_NOT_FOUND":
                    raise CliError(f"transactional id {tid!r}: {_reason(d)}")
                descriptions[tid] = None
            else:
                descriptions[tid] = d
        hanging = hanging_transactions(candidates, tids, descriptions)
    rows = [{"topic": h.topic, "partition": h.partition, **_producer_row(h.producer),
             "duration_min": (now - h.producer.last_timestamp) // 60_000} for h in hanging]
    if args.output == "json":
        emit_json(rows)
    else:
        table(["TOPIC", "PARTITION", "PRODUCER-ID", "PRODUCER-EPOCH", "COORDINATOR-EPOCH", "START-OFFSET",
               "LAST-TIMESTAMP", "DURATION(MIN)"],
              [(r["topic"], r["partition"], r["producer_id"], r["producer_epoch"], r["coordinator_epoch"],
                r["current_transaction_start_offset"], r["last_timestamp"], r["duration_min"]) for r in rows])
    return 0


# ---------------------------------------------------------------------------------- abort

def _prepare_abort(args) -> None:
    _prepare_partition(args)
    by_producer = [f for f in ("producer_id", "producer_epoch", "coordinator_epoch") if getattr(args, f) is not None]
    if args.start_offset is not None and by_producer:
        raise UsageError("abort: give --start-offset, or --producer-id, --producer-epoch and --coordinator-epoch, "
                         "not both")
    if args.start_offset is None:
        if not by_producer:
            raise UsageError("abort: name the transaction with --start-offset, or with --producer-id, "
                             "--producer-epoch and --coordinator-epoch")
        for flag in ("--producer-id", "--producer-epoch", "--coordinator-epoch"):
            if getattr(args, flag[2:].replace("-", "_")) is None:
                raise UsageError(f"abort: {flag} is missing (a transaction named by its producer needs "
                                 f"--producer-id, --producer-epoch and --coordinator-epoch)")
    _at_least(args, "--start-offset", 0)
    _at_least(args, "--producer-id", 0)
    _at_least(args, "--producer-epoch", 0, MAX_EPOCH)
    if args.coordinator_epoch is not None and args.coordinator_epoch > 2**31 - 1:
        raise UsageError(f"--coordinator-epoch: {args.coordinator_epoch} is above {2**31 - 1}")


async def run_abort(admin, args) -> int:
    topic, partition = args.topic, args.partition
    if args.start_offset is not None:
        found = [s for s in await _producers(admin, topic, partition)
                 if s.current_transaction_start_offset == args.start_offset]
        if not found:
            raise CliError(f"--start-offset: no open transaction starts at offset {args.start_offset} "
                           f"of {topic}-{partition}")
        s = found[0]
        producer_id, producer_epoch, coordinator_epoch = s.producer_id, s.producer_epoch, s.coordinator_epoch
    else:
        producer_id, producer_epoch, coordinator_epoch = args.producer_id, args.producer_epoch, args.coordinator_epoch
    # A producer that never got a marker shows coordinator epoch -1 (None); 0 is at or below any
    # epoch a coordinator can have, as Kafka's tool reasons.
    coordinator_epoch = max(coordinator_epoch or 0, 0)
    try:
        await admin.abort_transaction(topic, partition, producer_id, producer_epoch, coordinator_epoch)
    except KafkaError as exc:
        raise CliError(f"abort the transaction of producer {producer_id} (epoch {producer_epoch}) on "
                       f"{topic}-{partition}: {_reason(exc)}") from None
    result = {"topic": topic, "partition": partition, "producer_id": producer_id, "producer_epoch": producer_epoch,
              "coordinator_epoch": coordinator_epoch, "aborted": True}
    if args.output == "json":
        emit_json(result)
    else:
        print(f"Aborted the transaction of producer {producer_id} (epoch {producer_epoch}) on {topic}-{partition} "
              f"(coordinator epoch {coordinator_epoch}).")
    return 0
