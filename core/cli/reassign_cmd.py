"""`seaway reassign`: move partition replicas between brokers, like kafka-reassign-partitions.

    seaway reassign generate --topics-to-move-json-file topics.json --broker-list 4,5,6
    seaway reassign execute --reassignment-json-file plan.json [--throttle 50000000]
    seaway reassign verify --reassignment-json-file plan.json     # until every partition is done
    seaway reassign execute --reassignment-json-file plan.json --cancel

The files are Kafka's (reassign_plan.py). `generate` changes nothing: it prints the current
assignment of the topics and a proposal spreading them over the given brokers (rack-aware
unless --disable-rack-aware). `execute` checks the plan against the cluster, prints the
current assignment (keep it: it is the plan that rolls back), sets the throttles if asked and
submits AlterPartitionReassignments; the controller then adds the new replicas, waits for
them to join the ISR and removes the old ones. `verify` reports each partition and, once all
are done, removes every replication throttle (the brokers' rates, the topics' throttled
replicas) unless --preserve-throttles.

The throttle, as Kafka's tool sets it: `leader.replication.throttled.rate` and
`follower.replication.throttled.rate` (bytes/s) as dynamic configs of every broker that holds
or receives a moving replica; on each topic, `leader.replication.throttled.replicas` lists the
moving partitions' existing replicas and `follower.replication.throttled.replicas` the replicas
being added. Replicas already in the ISR are never throttled.

Mistakes in the command line or the files (unreadable, not JSON, wrong types, a broker listed
twice) exit 2 before anything connects; a plan the cluster contradicts (an unknown topic,
partition or broker) exits 1. Each is one line naming the field.
"""
from __future__ import annotations

import json
import sys

import anyio

from .common import CliError, UsageError, admin_command, read_json_file
from .output import add_bootstrap_flag, emit_json

LONG_MAX = 2**63 - 1
MISMATCH_RECHECKS, MISMATCH_RECHECK_DELAY_S = 10, 0.2


def register(sub) -> None:
    p = sub.add_parser("reassign", help="move partition replicas between brokers",
                       description="Reassign partitions (like kafka-reassign-partitions).")
    add_bootstrap_flag(p)
    rsub = p.add_subparsers(dest="action", metavar="ACTION")
    rsub.required = True

    c = rsub.add_parser("generate", help="propose an assignment of some topics over some brokers",
                        description="Print the current assignment of the topics and a proposed one "
                                    "over the given brokers. Changes nothing.")
    c.add_argument("--topics-to-move-json-file", required=True, metavar="FILE",
                   help='{"version": 1, "topics": [{"topic": "t"}]}')
    c.add_argument("--broker-list", required=True, metavar="ID,ID,...", help="brokers to spread the replicas over")
    c.add_argument("--disable-rack-aware", action="store_true", help="ignore the brokers' racks")
    admin_command(c, run_generate, _prepare_generate)

    c = rsub.add_parser("execute", help="start the reassignment in a plan (or --cancel it)",
                        description="Start (or with --cancel, cancel) the reassignments in a plan.")
    c.add_argument("--reassignment-json-file", required=True, metavar="FILE",
                   help='{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2]}]}')
    c.add_argument("--throttle", type=int, default=-1, metavar="BYTES_PER_S",
                   help="cap the replication traffic of the moving replicas (bytes/s per broker)")
    c.add_argument("--replica-alter-log-dirs-throttle", type=int, default=-1, metavar="BYTES_PER_S",
                   help="accepted for kafka-reassign-partitions compatibility and ignored (replicas "
                        "do not move between log directories)")
    c.add_argument("--additional", action="store_true",
                   help="execute even though other reassignments are in progress")
    c.add_argument("--cancel", action="store_true", help="cancel the plan's reassignments that are in progress")
    c.add_argument("--preserve-throttles", action="store_true", help="with --cancel: keep the throttles")
    admin_command(c, run_execute, _prepare_execute)

    c = rsub.add_parser("verify", help="is the plan's reassignment done? then remove the throttles",
                        description="Report each partition of the plan; once all are done, remove the "
                                    "replication throttles (unless --preserve-throttles).")
    c.add_argument("--reassignment-json-file", required=True, metavar="FILE", help="the plan given to execute")
    c.add_argument("--preserve-throttles", action="store_true", help="keep the throttles")
    admin_command(c, run_verify, _prepare_plan)


def _note(message: str) -> None:
    print(message, file=sys.stderr)


def _compact(doc) -> str:
    return json.dumps(doc, separators=(",", ":"))


def _tps(tps) -> str:
    return ",".join(f"{t}-{p}" for t, p in sorted(tps))


async def _topics(admin, names: list[str]):
    """{topic: TopicDescription} of the topics that exist."""
    from core.protocol.errors import ErrorCode, KafkaError
    described = await admin.describe_topics(names)
    out = {}
    for name, desc in described.items():
        if isinstance(desc, KafkaError):
            if desc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                continue
            raise desc
        out[name] = desc
    return out


def _replicas(topics) -> dict:
    return {(name, p.partition): list(p.replicas) for name, d in topics.items() for p in d.partitions}


# ---------------------------------------------------------------------------------- generate

def _prepare_generate(args) -> None:
    from .reassign_plan import InputError, parse_broker_list, parse_topics_to_move
    flag = "--topics-to-move-json-file"
    doc = read_json_file(args.topics_to_move_json_file, flag)
    try:
        args.topics = parse_topics_to_move(doc)
    except InputError as exc:
        raise UsageError(f"{flag} {args.topics_to_move_json_file}: {exc}") from None
    try:
        args.brokers = parse_broker_list(args.broker_list)
    except InputError as exc:
        raise UsageError(str(exc)) from None


async def run_generate(admin, args) -> int:
    from .reassign_plan import Broker, InputError, propose, reassignment_json

    topics = await _topics(admin, args.topics)
    for i, name in enumerate(args.topics):
        if name not in topics:
            raise CliError(f"--topics-to-move-json-file {args.topics_to_move_json_file}: topics[{i}].topic: "
                           f"topic {name!r} does not exist")
    cluster = await admin.describe_cluster()
    racks = {b.node_id: b.rack or None for b in cluster.brokers}
    unknown = [b for b in args.brokers if b not in racks]
    if unknown:
        raise CliError(f"--broker-list: broker{'s' if len(unknown) > 1 else ''} {','.join(map(str, unknown))} "
                       f"not in the cluster (brokers: {','.join(map(str, sorted(racks)))})")
    brokers = [Broker(b, None if args.disable_rack_aware else racks[b]) for b in sorted(args.brokers)]
    current = _replicas(topics)
    try:
        proposed = propose(current, brokers)
    except InputError as exc:
        raise CliError(f"--broker-list: {exc}") from None
    current_doc, proposed_doc = reassignment_json(current), reassignment_json(proposed)
    if args.output == "json":
        emit_json({"current": current_doc, "proposed": proposed_doc})
    else:
        print("Current partition replica assignment")
        print(_compact(current_doc))
        print()
        print("Proposed partition reassignment configuration")
        print(_compact(proposed_doc))
    return 0


# ---------------------------------------------------------------------------------- execute

def _prepare_plan(args) -> None:
    from .reassign_plan import InputError, parse_reassignment
    flag = "--reassignment-json-file"
    doc = read_json_file(args.reassignment_json_file, flag)
    try:
        args.entries = parse_reassignment(doc)
    except InputError as exc:
        raise UsageError(f"{flag} {args.reassignment_json_file}: {exc}") from None
    args.targets = {e.tp: list(e.replicas) for e in args.entries}


def _prepare_execute(args) -> None:
    if not 0 <= args.throttle <= LONG_MAX and args.throttle != -1:
        raise UsageError(f"--throttle: {args.throttle} is not a rate in bytes/s (0 or more)")
    if args.cancel and args.throttle != -1:
        raise UsageError("execute: --throttle cannot be used with --cancel")
    if args.cancel and args.additional:
        raise UsageError("execute: --additional cannot be used with --cancel")
    if args.preserve_throttles and not args.cancel:
        raise UsageError("execute: --preserve-throttles is only for --cancel (and verify)")
    _prepare_plan(args)
    if args.replica_alter_log_dirs_throttle != -1 and args.output != "json":
        _note("note: --replica-alter-log-dirs-throttle is ignored (replicas do not move between log directories)")


async def _check_plan(admin, args, *, brokers: bool):
    """{tp: current replicas} of the plan's topics, after checking the plan against them."""
    from .reassign_plan import InputError, check_against_cluster
    topics = await _topics(admin, sorted({e.topic for e in args.entries}))
    live = [b.node_id for b in (await admin.describe_cluster()).brokers] if brokers else None
    try:
        check_against_cluster(args.entries, {t: len(d.partitions) for t, d in topics.items()}, live)
    except InputError as exc:
        raise CliError(f"--reassignment-json-file {args.reassignment_json_file}: {exc}") from None
    return _replicas(topics)


async def run_execute(admin, args) -> int:
    out: dict = {}
    text = args.output != "json"
    try:
        if args.cancel:
            await _cancel(admin, args, out, text)
        else:
            await _execute(admin, args, out, text)
    finally:
        if not text:
            emit_json(out)
    return 0


async def _execute(admin, args, out: dict, text: bool) -> None:
    from core.client import ConfigResource

    from .reassign_plan import (FOLLOWER_THROTTLED, LEADER_THROTTLED, THROTTLE_RATES, follower_throttles,
                                leader_throttles, move_map, reassigning_brokers, reassignment_json)
    current = await _check_plan(admin, args, brokers=True)
    ongoing = await admin.list_partition_reassignments()
    if ongoing and not args.additional:
        raise CliError(f"cannot execute: reassignments are in progress ({_tps(ongoing)}); wait for them "
                       f"(verify), or give --additional to add this plan (resubmitting a plan with "
                       f"--additional also changes its throttle)")
    rollback = reassignment_json({tp: current[tp] for tp in args.targets})
    out["current"] = rollback
    if text:
        print("Current partition replica assignment")
        print()
        print(_compact(rollback))
        print()
        print("Save this to use as the --reassignment-json-file option during rollback")
    if args.throttle >= 0:
        moves = move_map(ongoing, args.targets, current)
        if text:
            print("Warning: You must run verify periodically, until the reassignment completes, "
                  "to ensure the throttle is removed.")
        leaders, followers = leader_throttles(moves), follower_throttles(moves)
        brokers = sorted(reassigning_brokers(moves))
        # The rates first: a cluster that refuses them is left unchanged (throttled replicas
        # without a rate would throttle nothing, but would linger).
        _check_configs(await admin.incremental_alter_configs(
            {ConfigResource.broker(b): {rate: str(args.throttle) for rate in THROTTLE_RATES} for b in brokers}),
            "--throttle")
        topic_changes = {ConfigResource.topic(t): {LEADER_THROTTLED: leaders[t] or None,
                                                   FOLLOWER_THROTTLED: followers[t] or None}
                         for t in sorted(moves)}
        _check_configs(await admin.incremental_alter_configs(topic_changes), "--throttle")
        out["throttle"] = {"rate": args.throttle, "brokers": brokers,
                           "topics": {t: {LEADER_THROTTLED: leaders[t], FOLLOWER_THROTTLED: followers[t]}
                                      for t in sorted(moves)}}
        if text:
            print(f"The inter-broker throttle limit was set to {args.throttle} B/s")
    results = await admin.alter_partition_reassignments(args.targets)
    failed = {tp: err for tp, err in results.items() if err is not None}
    out["started"] = [f"{t}-{p}" for t, p in sorted(tp for tp in results if tp not in failed)]
    out["failed"] = {f"{t}-{p}": str(err) for (t, p), err in sorted(failed.items())}
    if failed:
        if text:
            print("Error reassigning partition(s):")
            for (t, p), err in sorted(failed.items()):
                print(f"{t}-{p}: {err}")
        raise CliError(f"{len(failed)} of {len(results)} partition reassignments could not be started")
    if text:
        plural = "s" if len(results) != 1 else ""
        print(f"Successfully started partition reassignment{plural} for {_tps(results)}")


def _config_errors(results) -> list[str]:
    return [f"{'broker' if resource.type == 4 else 'topic'} {resource.name}: {err}"
            for resource, err in results.items() if err is not None]


def _check_configs(results, flag: str) -> None:
    errors = _config_errors(results)
    if errors:
        raise CliError(f"{flag}: could not change the configs of {errors[0]}"
                       + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""))


async def _cancel(admin, args, out: dict, text: bool) -> None:
    await _check_plan(admin, args, brokers=False)
    ongoing = await admin.list_partition_reassignments(list(args.targets))
    active = sorted(tp for tp, r in ongoing.items()
                    if tp in args.targets and (r.adding_replicas or r.removing_replicas))
    out["cancelled"] = []
    if active:
        results = await admin.alter_partition_reassignments({tp: None for tp in active})
        failed = {tp: err for tp, err in results.items() if err is not None}
        out["cancelled"] = [f"{t}-{p}" for t, p in active if (t, p) not in failed]
        out["failed"] = {f"{t}-{p}": str(err) for (t, p), err in sorted(failed.items())}
        if failed:
            if text:
                print("Error cancelling partition reassignment(s):")
                for (t, p), err in sorted(failed.items()):
                    print(f"{t}-{p}: {err}")
            raise CliError(f"{len(failed)} of {len(active)} partition reassignments could not be cancelled")
        if text:
            print(f"Successfully cancelled partition reassignment{'s' if len(active) != 1 else ''} for: "
                  f"{_tps(active)}")
    elif text:
        print("None of the specified partition reassignments are active.")
    if not args.preserve_throttles:
        out["throttles_cleared"] = await _clear_throttles(admin, args.targets, text)


async def _clear_throttles(admin, targets, text: bool) -> dict:
    """Kafka's clearAllThrottles: the rates on every live broker, the throttled replicas on
    every topic of the plan."""
    from core.client import ConfigResource

    from .reassign_plan import FOLLOWER_THROTTLED, LEADER_THROTTLED, THROTTLE_RATES
    brokers = sorted(b.node_id for b in (await admin.describe_cluster()).brokers)
    topics = sorted({t for t, _ in targets})
    if text:
        print(f"Clearing broker-level throttles on broker{'s' if len(brokers) != 1 else ''} "
              f"{','.join(map(str, brokers))}")
    errors = _config_errors(await admin.incremental_alter_configs(
        {ConfigResource.broker(b): {rate: None for rate in THROTTLE_RATES} for b in brokers}))
    if text:
        print(f"Clearing topic-level throttles on topic{'s' if len(topics) != 1 else ''} {','.join(topics)}")
    # The topics' throttles go even if a broker refused: each is worth removing on its own.
    errors += _config_errors(await admin.incremental_alter_configs(
        {ConfigResource.topic(t): {LEADER_THROTTLED: None, FOLLOWER_THROTTLED: None} for t in topics}))
    if errors:
        raise CliError(f"clearing throttles: could not change the configs of {errors[0]}"
                       + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""))
    return {"brokers": brokers, "topics": topics}


# ---------------------------------------------------------------------------------- verify

async def run_verify(admin, args) -> int:
    from .reassign_plan import IN_PROGRESS, MISMATCH, partition_states, state_line
    # What is in progress first (the controller knows), then the replicas (a broker's
    # metadata, which may lag the controller by a moment): a partition the controller has
    # just finished may still show its old replicas there, so a mismatch is looked at again.
    ongoing = await admin.list_partition_reassignments(list(args.targets))
    for attempt in range(MISMATCH_RECHECKS + 1):
        current = await _check_plan(admin, args, brokers=False)
        states = partition_states(args.targets, ongoing, current)
        if attempt == MISMATCH_RECHECKS or not any(s["status"] == MISMATCH for s in states):
            break
        await anyio.sleep(MISMATCH_RECHECK_DELAY_S)
    done = not any(s["status"] == IN_PROGRESS for s in states)
    text = args.output != "json"
    if text:
        print("Status of partition reassignment:")
        for s in states:
            print(state_line(s))
    cleared = None
    if done and not args.preserve_throttles:
        cleared = await _clear_throttles(admin, args.targets, text)
    if not text:
        emit_json({"complete": done, "partitions": states, "throttles_cleared": cleared})
    return 0
