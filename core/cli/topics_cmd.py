"""`seaway topics`: create, list, describe, delete and alter topics, like kafka-topics."""
from __future__ import annotations

import uuid

from .common import CliError, admin_command
from .output import add_bootstrap_flag, emit_json, table


def register(sub) -> None:
    p = sub.add_parser("topics", help="create, list, describe, delete and alter topics",
                       description="Manage topics (like kafka-topics).")
    add_bootstrap_flag(p)
    tsub = p.add_subparsers(dest="action", metavar="ACTION")
    tsub.required = True

    c = tsub.add_parser("list", help="list topic names")
    c.add_argument("--internal", action="store_true", help="include internal topics")
    admin_command(c, run_list)

    c = tsub.add_parser("create", help="create a topic")
    c.add_argument("name")
    c.add_argument("--partitions", "-p", type=int, default=-1, help="partition count (default: the broker's num.partitions)")
    c.add_argument("--replication-factor", "-r", type=int, default=-1,
                   help="replicas per partition (default: the broker's default.replication.factor)")
    c.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help="topic config (repeatable)")
    c.add_argument("--if-not-exists", action="store_true", help="succeed if the topic already exists")
    c.add_argument("--validate-only", action="store_true", help="check the request without creating anything")
    admin_command(c, run_create)

    c = tsub.add_parser("describe", help="partitions, leaders, replicas, ISR, offsets and configs",
                        description="Describe topics: per partition the leader, replicas, ISR, offline "
                                    "replicas, reassignment in progress and start/end offsets. A filter "
                                    "lists only the partitions it matches (without offsets).")
    c.add_argument("names", nargs="*", help="topics to describe (default: all)")
    only = c.add_mutually_exclusive_group()
    only.add_argument("--under-replicated-partitions", action="store_true",
                      help="only partitions whose ISR is smaller than their replica set")
    only.add_argument("--unavailable-partitions", action="store_true",
                      help="only partitions without a leader, or whose leader is not a live broker")
    only.add_argument("--under-min-isr-partitions", action="store_true",
                      help="only partitions whose ISR is smaller than min.insync.replicas (or without a leader)")
    only.add_argument("--at-min-isr-partitions", action="store_true",
                      help="only partitions whose ISR is exactly min.insync.replicas")
    admin_command(c, run_describe)

    c = tsub.add_parser("delete", help="delete topics")
    c.add_argument("names", nargs="+")
    c.add_argument("--if-exists", action="store_true", help="succeed if a topic does not exist")
    admin_command(c, run_delete)

    c = tsub.add_parser("alter", help="add partitions or change configs")
    c.add_argument("name")
    c.add_argument("--partitions", "-p", type=int, help="new (larger) partition count")
    c.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help="set a config (repeatable)")
    c.add_argument("--delete-config", action="append", default=[], metavar="KEY",
                   help="remove an override so the default applies again (repeatable)")
    admin_command(c, run_alter)


def _parse_configs(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        if "=" not in item:
            raise CliError(f"--config: {item!r} is not KEY=VALUE")
        key, value = item.split("=", 1)
        out[key.strip()] = value.strip()
    return out


async def run_list(admin, args) -> int:
    names = await admin.list_topics(internal=args.internal)
    if args.output == "json":
        emit_json(names)
    else:
        for name in names:
            print(name)
    return 0


async def run_create(admin, args) -> int:
    from core.client import NewTopic
    from core.protocol.errors import ErrorCode, KafkaError

    configs = _parse_configs(args.config)
    results = await admin.create_topics([NewTopic(args.name, args.partitions, args.replication_factor, configs)],
                                        validate_only=args.validate_only)
    err = results[args.name]
    if isinstance(err, KafkaError):
        if args.if_not_exists and err.code == ErrorCode.TOPIC_ALREADY_EXISTS:
            err = None
        else:
            raise err
    verb = "would be created" if args.validate_only else "created"
    if args.output == "json":
        emit_json({"topic": args.name, "created": not args.validate_only and err is None})
    else:
        print(f"topic {args.name} {verb}")
    return 0


async def run_delete(admin, args) -> int:
    from core.protocol.errors import ErrorCode, KafkaError

    results = await admin.delete_topics(args.names)
    out = {}
    failed = None
    for name in args.names:
        err = results.get(name)
        if isinstance(err, KafkaError) and not (args.if_exists and err.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
            failed = failed or err
            out[name] = str(err)
        else:
            out[name] = "deleted"
    if args.output == "json":
        emit_json(out)
    else:
        for name, status in out.items():
            print(f"topic {name}: {status}")
    if failed:
        raise failed
    return 0


FILTERS = ("under_replicated_partitions", "unavailable_partitions", "under_min_isr_partitions",
           "at_min_isr_partitions")


def replication_factor(p: dict) -> int:
    """Kafka's TopicCommand: while a reassignment is in progress, the replicas not being added."""
    adding, removing = set(p.get("adding_replicas") or ()), set(p.get("removing_replicas") or ())
    if (adding or removing) and any(r in adding or r in removing for r in p["replicas"]):
        return len([r for r in p["replicas"] if r not in adding])
    return len(p["replicas"])


def matches(which: str, p: dict, min_isr: int | None, live_brokers) -> bool:
    """Does partition `p` (a describe row) pass the filter `which` (one of FILTERS)?
    As kafka-topics: no leader counts as under min ISR; unavailable means no leader or a
    leader that is not a live broker."""
    has_leader = p["leader"] is not None and p["leader"] >= 0
    isr = len(p["isr"])
    if which == "under_replicated_partitions":
        return replication_factor(p) - isr > 0
    if which == "unavailable_partitions":
        return not has_leader or p["leader"] not in live_brokers
    if which == "under_min_isr_partitions":
        return not has_leader or (min_isr is not None and isr < min_isr)
    if which == "at_min_isr_partitions":
        return min_isr is not None and isr == min_isr
    raise ValueError(f"unknown filter {which!r}")


async def _describe(admin, names, *, offsets: bool = True):
    from core.client import ConfigResource
    from core.protocol.errors import ErrorCode, KafkaError

    topics = await admin.describe_topics(names or None)
    for name, desc in topics.items():
        if isinstance(desc, KafkaError):
            raise desc
    live = {b.node_id for b in (await admin.describe_cluster()).brokers}
    try:
        ongoing = await admin.list_partition_reassignments(
            None if not names else [(n, p.partition) for n, d in topics.items() for p in d.partitions])
    except KafkaError as exc:
        # As kafka-topics: a cluster without KIP-455, or a user who may not describe the
        # cluster, gets the description without the reassignments.
        if exc.code not in (ErrorCode.UNSUPPORTED_VERSION, ErrorCode.CLUSTER_AUTHORIZATION_FAILED):
            raise
        ongoing = {}
    specs = {}
    if offsets:
        # Only partitions with a live leader: the others cannot answer (they would be retried
        # until the timeout) and show "-".
        for name, desc in topics.items():
            for p in desc.partitions:
                if p.leader >= 0 and p.leader in live:
                    specs[(name, p.partition)] = "earliest"
    starts = await admin.list_offsets(specs) if specs else {}
    ends = await admin.list_offsets({k: "latest" for k in specs}) if specs else {}
    configs = await admin.describe_configs([ConfigResource.topic(n) for n in topics]) if topics else {}
    result = []
    for name in sorted(topics):
        desc = topics[name]
        cfg = configs.get(ConfigResource.topic(name))
        cfg = {} if isinstance(cfg, KafkaError) or cfg is None else cfg
        overrides = {k: e.value for k, e in cfg.items() if e.source == 1}
        min_isr = cfg.get("min.insync.replicas")
        try:
            min_isr = int(min_isr.value) if min_isr is not None and min_isr.value is not None else None
        except ValueError:
            min_isr = None
        parts = []
        for p in desc.partitions:
            s, e = starts.get((name, p.partition)), ends.get((name, p.partition))
            r = ongoing.get((name, p.partition))
            parts.append({
                "partition": p.partition, "leader": p.leader, "leader_epoch": p.leader_epoch,
                "replicas": p.replicas, "isr": p.isr, "offline": p.offline_replicas,
                "adding_replicas": list(r.adding_replicas) if r else [],
                "removing_replicas": list(r.removing_replicas) if r else [],
                "start_offset": None if s is None or isinstance(s, KafkaError) else s.offset,
                "end_offset": None if e is None or isinstance(e, KafkaError) else e.offset,
            })
        result.append({"topic": name, "topic_id": str(uuid.UUID(bytes=desc.topic_id)) if desc.topic_id else None,
                       "internal": desc.is_internal, "partition_count": len(parts),
                       "replication_factor": len(parts[0]["replicas"]) if parts else 0,
                       "min_insync_replicas": min_isr, "configs": overrides, "partitions": parts})
    return result, live


async def run_describe(admin, args) -> int:
    which = next((f for f in FILTERS if getattr(args, f, False)), None)
    result, live = await _describe(admin, args.names, offsets=which is None)
    if which is not None:
        return _print_filtered(which, result, live, args.output)
    if args.output == "json":
        emit_json(result)
        return 0
    for i, t in enumerate(result):
        if i:
            print()
        cfg = ",".join(f"{k}={v}" for k, v in sorted(t["configs"].items())) or "-"
        print(f"Topic: {t['topic']}  TopicId: {t['topic_id']}  PartitionCount: {t['partition_count']}  "
              f"ReplicationFactor: {t['replication_factor']}  Configs: {cfg}")
        headers = ["PARTITION", "LEADER", "REPLICAS", "ISR", "OFFLINE", "START", "END"]
        moving = any(p["adding_replicas"] or p["removing_replicas"] for p in t["partitions"])
        if moving:
            headers += ["ADDING", "REMOVING"]
        table(headers,
              [(p["partition"], _leader(p["leader"]), p["replicas"], p["isr"], p["offline"], p["start_offset"],
                p["end_offset"]) + ((p["adding_replicas"], p["removing_replicas"]) if moving else ())
               for p in t["partitions"]])
    return 0


def _leader(leader: int | None):
    return "none" if leader is None or leader < 0 else leader


def _print_filtered(which: str, result: list[dict], live, output: str) -> int:
    """Only the matching partitions, as kafka-topics prints them with a filter (no topic
    lines, no offsets); nothing at all when none matches."""
    kept = []
    for t in result:
        parts = [dict(p) for p in t["partitions"] if matches(which, p, t["min_insync_replicas"], live)]
        for p in parts:
            del p["start_offset"], p["end_offset"]
        if parts:
            kept.append(dict(t, partitions=parts))
    if output == "json":
        emit_json(kept)
        return 0
    rows = [(t["topic"], p["partition"], _leader(p["leader"]), p["replicas"], p["isr"], p["offline"])
            for t in kept for p in t["partitions"]]
    if rows:
        table(["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR", "OFFLINE"], rows)
    return 0


async def run_alter(admin, args) -> int:
    from core.client import ConfigResource, check

    sets = _parse_configs(args.config)
    if args.partitions is None and not sets and not args.delete_config:
        raise CliError("alter: give --partitions, --config or --delete-config")
    done = []
    if args.partitions is not None:
        check(await admin.create_partitions({args.name: args.partitions}))
        done.append(f"partitions={args.partitions}")
    if sets or args.delete_config:
        changes: dict = dict(sets)
        changes.update({k: None for k in args.delete_config})
        check(await admin.incremental_alter_configs({ConfigResource.topic(args.name): changes}))
        done += [f"{k}={v}" for k, v in sets.items()] + [f"-{k}" for k in args.delete_config]
    if args.output == "json":
        emit_json({"topic": args.name, "changed": done})
    else:
        print(f"topic {args.name} altered: {' '.join(done)}")
    return 0
