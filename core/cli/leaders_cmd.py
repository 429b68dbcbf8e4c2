"""`seaway leaders elect`: move leadership back to preferred replicas, or give leaderless
partitions an unclean leader, like kafka-leader-election.

    seaway leaders elect --election-type preferred --all-topic-partitions
    seaway leaders elect --election-type preferred --topic orders [--partition 3]
    seaway leaders elect --election-type unclean --path-to-json-file elect.json

The JSON file is kafka-leader-election's: {"partitions": [{"topic": "orders", "partition": 3}]}.
Per partition the answer is printed as Kafka's tool prints it: "Successfully completed leader
election (PREFERRED) for partitions ...", "Valid replica already elected for partitions ..."
(ELECTION_NOT_NEEDED) or one "Error completing leader election ..." line each; the exit status
is 1 if any partition failed. With --all-topic-partitions the controller answers only for the
partitions where an election happened or failed.
"""
from __future__ import annotations

from .common import CliError, UsageError, admin_command, read_json_file
from .output import add_bootstrap_flag, emit_json

ELECTION_TYPES = ("preferred", "unclean")


def register(sub) -> None:
    p = sub.add_parser("leaders", help="elect preferred or unclean partition leaders",
                       description="Partition leader elections (like kafka-leader-election).")
    add_bootstrap_flag(p)
    lsub = p.add_subparsers(dest="action", metavar="ACTION")
    lsub.required = True
    c = lsub.add_parser("elect", help="elect preferred (or unclean) leaders",
                        description="Elect the preferred replica as leader (preferred), or any live "
                                    "replica of a partition without a leader, even outside the ISR "
                                    "(unclean: may lose acknowledged records).")
    c.add_argument("--election-type", required=True, type=str.lower, choices=ELECTION_TYPES,
                   help="preferred or unclean")
    which = c.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", help="the topic whose partitions to elect (with --partition: one of them)")
    which.add_argument("--all-topic-partitions", action="store_true", help="every partition of every topic")
    which.add_argument("--path-to-json-file", metavar="FILE",
                       help='partitions to elect: {"partitions": [{"topic": "t", "partition": 0}]}')
    c.add_argument("--partition", type=int, help="one partition of --topic")
    admin_command(c, _elect, _prepare)


def _prepare(args) -> None:
    from .reassign_plan import InputError, parse_election_partitions

    if args.partition is not None and args.topic is None:
        raise UsageError("leaders elect: --partition is only allowed with --topic")
    if args.partition is not None and args.partition < 0:
        raise UsageError(f"--partition: {args.partition} is negative")
    args.partitions = None
    if args.path_to_json_file is not None:
        try:
            args.partitions = parse_election_partitions(read_json_file(args.path_to_json_file, "--path-to-json-file"))
        except InputError as exc:
            raise UsageError(f"--path-to-json-file {args.path_to_json_file}: {exc}") from None


async def _elect(admin, args) -> int:
    from core.protocol.errors import ErrorCode, KafkaError

    kind = args.election_type.upper()
    partitions = args.partitions
    if args.topic is not None:
        if args.partition is not None:
            partitions = [(args.topic, args.partition)]
        else:
            desc = (await admin.describe_topics([args.topic])).get(args.topic)
            if desc is None or isinstance(desc, KafkaError):
                raise CliError(f"--topic: topic {args.topic!r} does not exist"
                               if desc is None or desc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION else
                               f"--topic {args.topic}: {desc}")
            partitions = [(args.topic, p.partition) for p in desc.partitions]
    results = await admin.elect_leaders(kind, partitions)
    rows = []
    for (topic, partition), err in sorted(results.items()):
        if err is None:
            status, error = "elected", None
        elif isinstance(err, KafkaError) and err.code == ErrorCode.ELECTION_NOT_NEEDED:
            status, error = "already_elected", None
        else:
            status, error = "failed", str(err)
        rows.append({"topic": topic, "partition": partition, "status": status, "error": error})
    failed = [r for r in rows if r["status"] == "failed"]
    if args.output == "json":
        emit_json({"election_type": kind, "partitions": rows})
    else:
        def names(status):
            return ", ".join(f"{r['topic']}-{r['partition']}" for r in rows if r["status"] == status)
        if names("elected"):
            print(f"Successfully completed leader election ({kind}) for partitions {names('elected')}")
        if names("already_elected"):
            print(f"Valid replica already elected for partitions {names('already_elected')}")
        for r in failed:
            print(f"Error completing leader election ({kind}) for partition: {r['topic']}-{r['partition']}: "
                  f"{r['error']}")
    if failed:
        raise CliError(f"{len(failed)} partition{'s' if len(failed) > 1 else ''} could not be elected")
    return 0
