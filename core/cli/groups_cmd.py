"""`seaway groups`: list, describe and delete consumer groups and reset their committed offsets,
like kafka-consumer-groups.

    seaway groups list [--state Empty]
    seaway groups describe GROUP... | --all-groups [--members | --state]
    seaway groups delete GROUP...
    seaway groups delete-offsets GROUP --topic T[:P,P]
    seaway groups reset-offsets GROUP (--topic T[:P,P] | --all-topics) --to-earliest [--execute]

reset-offsets plans without changing anything unless --execute is given, and refuses a group
that is not inactive (Empty, or not existing yet), as Kafka does: a running member would
overwrite the reset with its next commit.
"""
from __future__ import annotations

import sys
import time

from core.protocol.errors import ErrorCode, KafkaError

from .common import CliError, admin_command
from .output import add_bootstrap_flag, emit_json, table
from .reset_plan import STRATEGIES, parse_reset_spec, parse_topic_partitions, plan_reset

STATES = ("Empty", "Stable", "PreparingRebalance", "CompletingRebalance", "Dead")
INACTIVE = ("Empty", "Dead")
REBALANCING = ("PreparingRebalance", "CompletingRebalance")


def register(sub) -> None:
    p = sub.add_parser("groups", help="list, describe and delete consumer groups; reset their offsets",
                       description="Manage consumer groups (like kafka-consumer-groups).")
    add_bootstrap_flag(p)
    gsub = p.add_subparsers(dest="action", metavar="ACTION")
    gsub.required = True

    c = gsub.add_parser("list", help="list groups with their state and protocol type")
    c.add_argument("--state", action="append", default=[], metavar="STATE",
                   help=f"only groups in this state ({', '.join(STATES)}; repeatable or comma-separated)")
    admin_command(c, run_list, prepare=_prepare_list)

    c = gsub.add_parser("describe", help="committed offsets, log end offsets and lag per partition; "
                                         "members; or the group's state")
    c.add_argument("groups", nargs="*", metavar="GROUP")
    c.add_argument("--all-groups", action="store_true", help="describe every group")
    what = c.add_mutually_exclusive_group()
    what.add_argument("--members", action="store_true", help="list members and their assigned partitions")
    what.add_argument("--state", dest="show_state", action="store_true",
                      help="show coordinator, state, assignment strategy and member count")
    admin_command(c, run_describe, prepare=_prepare_describe)

    c = gsub.add_parser("delete", help="delete inactive groups and their committed offsets")
    c.add_argument("groups", nargs="+", metavar="GROUP")
    admin_command(c, run_delete)

    c = gsub.add_parser("delete-offsets", help="delete a group's committed offsets of some topics",
                        description="Delete committed offsets (an Empty group's, or those of topics no "
                                    "member of an active group subscribes to).")
    c.add_argument("group", metavar="GROUP")
    c.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,P]",
                   help="topic, optionally only some partitions (repeatable; required)")
    admin_command(c, run_delete_offsets, prepare=_prepare_delete_offsets)

    c = gsub.add_parser("reset-offsets", help="plan (default) or --execute a reset of a group's offsets",
                        description="Reset an inactive group's committed offsets. Without --execute "
                                    "this prints the plan and changes nothing.")
    c.add_argument("group", metavar="GROUP")
    c.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,P]",
                   help="topic to reset, optionally only some partitions (repeatable)")
    c.add_argument("--all-topics", action="store_true", help="every topic the group has committed offsets for")
    c.add_argument("--to-earliest", action="store_true", help="to the log start offset")
    c.add_argument("--to-latest", action="store_true", help="to the log end offset")
    c.add_argument("--to-offset", metavar="N", help="to offset N (clamped to the log start and end)")
    c.add_argument("--shift-by", metavar="N", help="move the committed offset by N (may be negative)")
    c.add_argument("--to-datetime", metavar="ISO8601",
                   help="to the first offset at or after this time (e.g. 2024-05-01T12:00:00.000, local "
                        "time unless a zone is given)")
    c.add_argument("--by-duration", metavar="PnDTnHnMnS", help="to the first offset at or after now minus "
                                                               "this duration (e.g. PT10M)")
    c.add_argument("--execute", action="store_true", help="apply the plan")
    c.add_argument("--dry-run", action="store_true", help="only print the plan (the default)")
    admin_command(c, run_reset, prepare=_prepare_reset)


def _note(message: str) -> None:
    print(message, file=sys.stderr)


_REASONS = {
    "GROUP_ID_NOT_FOUND": "the group does not exist",
    "NON_EMPTY_GROUP": "the group has active members",
    "GROUP_AUTHORIZATION_FAILED": "not authorized for this group",
}


def _reason(err) -> str:
    name = getattr(err.code, "name", None)
    return f"{name}: {_REASONS[name]}" if name in _REASONS else str(err)


# ---------------------------------------------------------------------------------- list

def _prepare_list(args) -> None:
    wanted = []
    canonical = {s.lower(): s for s in STATES}
    for item in args.state:
        for s in item.split(","):
            s = s.strip()
            if s.lower() not in canonical:
                raise CliError(f"--state: unknown state {s!r} (one of {', '.join(STATES)})")
            wanted.append(canonical[s.lower()])
    args.states = list(dict.fromkeys(wanted))


async def run_list(admin, args) -> int:
    groups = await admin.list_groups(args.states or None)
    if args.output == "json":
        emit_json([{"group": g.group_id, "state": g.state, "protocol_type": g.protocol_type} for g in groups])
    else:
        table(["GROUP", "STATE", "PROTOCOL-TYPE"],
              [(g.group_id, g.state, g.protocol_type or "-") for g in groups])
    return 0


# ---------------------------------------------------------------------------------- describe

def _prepare_describe(args) -> None:
    if args.all_groups and args.groups:
        raise CliError("describe: give GROUP names or --all-groups, not both")
    if not args.all_groups and not args.groups:
        raise CliError("describe: name at least one GROUP, or give --all-groups")


async def _descriptions(admin, args):
    if args.all_groups:
        ids = [g.group_id for g in await admin.list_groups()]
    else:
        ids = list(dict.fromkeys(args.groups))
    descs = await admin.describe_groups(ids) if ids else {}
    out = {}
    for gid in ids:
        d = descs[gid]
        if isinstance(d, KafkaError):
            raise CliError(f"group {gid!r}: {_reason(d)}")
        if not d.exists:
            if args.all_groups:
                continue  # deleted between the list and the describe
            raise CliError(f"group {gid!r} does not exist")
        out[gid] = d
    return out


def _coordinator(d):
    c = d.coordinator
    return None if c is None else {"id": c.node_id, "host": c.host, "port": c.port}


def _coordinator_text(d) -> str:
    c = d.coordinator
    return "-" if c is None else f"{c.host}:{c.port} ({c.node_id})"


def _assignment_text(assignment) -> str:
    if assignment is None:
        return "-"
    return ",".join(f"{t}({','.join(str(p) for p in ps)})" for t, ps in sorted(assignment.items()) if ps) or "-"


async def _offset_rows(admin, descs):
    """Per group: one row per partition the group has a committed offset for or a member is
    assigned, with the log end offset and the lag."""
    from core.client import OffsetAndMetadata
    fetched = await admin.list_groups_offsets({gid: None for gid in descs}) if descs else {}
    committed = {}
    for gid in descs:
        res = fetched[gid]
        if isinstance(res, KafkaError):
            raise CliError(f"group {gid!r}: {_reason(res)}")
        committed[gid] = {tp: v.offset for tp, v in res.items() if isinstance(v, OffsetAndMetadata)}
    owners = {gid: {tp: mm for mm in d.members for tp in mm.partitions} for gid, d in descs.items()}
    every = {tp for gid in descs for tp in set(committed[gid]) | set(owners[gid])}
    ends = await admin.list_offsets({tp: "latest" for tp in every}) if every else {}
    out = {}
    for gid in descs:
        rows = []
        for tp in sorted(set(committed[gid]) | set(owners[gid])):
            cur = committed[gid].get(tp)
            e = ends.get(tp)
            end = None if e is None or isinstance(e, KafkaError) else e.offset
            mm = owners[gid].get(tp)
            rows.append({"topic": tp[0], "partition": tp[1], "current_offset": cur, "log_end_offset": end,
                         "lag": None if cur is None or end is None else end - cur,
                         "consumer_id": mm.member_id if mm else None, "host": mm.host if mm else None,
                         "client_id": mm.client_id if mm else None})
        out[gid] = rows
    return out


def _state_notes(gid, d) -> None:
    if d.state == "Empty" and not d.members:
        _note(f"Consumer group {gid!r} has no active members.")
    elif d.state in REBALANCING:
        _note(f"Warning: consumer group {gid!r} is rebalancing.")


async def run_describe(admin, args) -> int:
    descs = await _descriptions(admin, args)
    if args.show_state:
        data = [{"group": gid, "coordinator": _coordinator(d), "state": d.state, "protocol_type": d.protocol_type,
                 "assignment_strategy": d.protocol or None, "members": len(d.members)} for gid, d in descs.items()]
        if args.output == "json":
            emit_json(data)
        else:
            table(["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "PROTOCOL-TYPE", "#MEMBERS"],
                  [(x["group"], _coordinator_text(descs[x["group"]]), x["assignment_strategy"], x["state"],
                    x["protocol_type"] or None, x["members"]) for x in data])
        return 0
    if args.members:
        data = [{"group": gid, "state": d.state, "members": [
                    {"consumer_id": mm.member_id, "group_instance_id": mm.group_instance_id, "host": mm.host,
                     "client_id": mm.client_id, "partitions": len(mm.partitions),
                     "assignment": mm.assignment} for mm in d.members]}
                for gid, d in descs.items()]
        if args.output == "json":
            emit_json(data)
            return 0
        for i, x in enumerate(data):
            _state_notes(x["group"], descs[x["group"]])
            if not x["members"]:
                continue
            if i:
                print()
            table(["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"],
                  [(x["group"], mm["consumer_id"], mm["host"], mm["client_id"], mm["partitions"],
                    _assignment_text(mm["assignment"])) for mm in x["members"]])
        return 0
    rows = await _offset_rows(admin, descs)
    if args.output == "json":
        emit_json([{"group": gid, "state": d.state, "coordinator": _coordinator(d), "partitions": rows[gid]}
                   for gid, d in descs.items()])
        return 0
    first = True
    for gid, d in descs.items():
        _state_notes(gid, d)
        if not rows[gid]:
            continue
        if not first:
            print()
        first = False
        table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
               "CLIENT-ID"],
              [(gid, r["topic"], r["partition"], r["current_offset"], r["log_end_offset"], r["lag"],
                r["consumer_id"], r["host"], r["client_id"]) for r in rows[gid]])
    return 0


# ---------------------------------------------------------------------------------- delete

async def run_delete(admin, args) -> int:
    ids = list(dict.fromkeys(args.groups))
    results = await admin.delete_groups(ids)
    out, failed = {}, None
    for gid in ids:
        err = results.get(gid)
        if isinstance(err, KafkaError):
            out[gid] = _reason(err)
            failed = failed or f"group {gid!r} could not be deleted: {out[gid]}"
        else:
            out[gid] = "deleted"
    if args.output == "json":
        emit_json(out)
    else:
        for gid, status in out.items():
            print(f"group {gid}: {status}")
    if failed:
        raise CliError(failed)
    return 0


# ---------------------------------------------------------------------------------- delete-offsets

def _prepare_delete_offsets(args) -> None:
    if not args.topic:
        raise CliError("delete-offsets: give --topic TOPIC[:P,P]")
    try:
        args.topic_specs = [parse_topic_partitions(t) for t in args.topic]
    except ValueError as exc:
        raise CliError(str(exc)) from None


async def run_delete_offsets(admin, args) -> int:
    gid = args.group
    tps = await _named_partitions(admin, args.topic_specs)
    try:
        results = await admin.delete_group_offsets(gid, tps)
    except KafkaError as exc:
        raise CliError(f"group {gid!r}: {_reason(exc)}") from None
    rows = [{"topic": t, "partition": p, "error": None if err is None else str(err)}
            for (t, p), err in sorted(results.items())]
    if args.output == "json":
        emit_json({"group": gid, "partitions": rows})
    else:
        table(["TOPIC", "PARTITION", "STATUS"],
              [(r["topic"], r["partition"], "deleted" if r["error"] is None else r["error"]) for r in rows])
    failed = [r for r in rows if r["error"] is not None]
    if failed:
        raise CliError(f"group {gid!r}: offsets of {failed[0]['topic']}-{failed[0]['partition']} could not be "
                       f"deleted: {failed[0]['error']}")
    return 0


# ---------------------------------------------------------------------------------- reset-offsets

def _prepare_reset(args) -> None:
    try:
        args.spec = parse_reset_spec({s: getattr(args, s) for s in STRATEGIES}, int(time.time() * 1000))
        args.topic_specs = [parse_topic_partitions(t) for t in args.topic]
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if args.topic and args.all_topics:
        raise CliError("reset-offsets: give --topic or --all-topics, not both")
    if not args.topic and not args.all_topics:
        raise CliError("reset-offsets: give --topic TOPIC[:P,P] or --all-topics")
    if args.execute and args.dry_run:
        raise CliError("reset-offsets: give --execute or --dry-run, not both")


def _inactive_error(gid: str, state: str, members: int | None = None):
    who = f" with {members} active member(s)" if members else ""
    return CliError(f"group {gid!r} is {state}{who}: assignments can only be reset if the group is inactive "
                    f"(stop its consumers first)")


async def _reset_partitions(admin, args, committed) -> list[tuple[str, int]]:
    if args.all_topics:
        tps = sorted(committed)
        if not tps:
            raise CliError(f"reset-offsets: group {args.group!r} has no committed offsets; name the topics "
                           f"with --topic")
        return tps
    return await _named_partitions(admin, args.topic_specs)


async def _named_partitions(admin, topic_specs) -> list[tuple[str, int]]:
    """--topic T (every partition) and T:P,P -> partitions, checked against the topics."""
    names = list(dict.fromkeys(t for t, _ in topic_specs))
    topics = await admin.describe_topics(names)
    tps = set()
    for name, parts in topic_specs:
        desc = topics.get(name)
        if desc is None or isinstance(desc, KafkaError):
            raise CliError(f"--topic: topic {name!r} does not exist")
        have = {p.partition for p in desc.partitions}
        for p in parts if parts is not None else sorted(have):
            if p not in have:
                raise CliError(f"--topic: topic {name!r} has no partition {p} (it has {len(have)})")
            tps.add((name, p))
    return sorted(tps)


async def _offsets(admin, specs, what: str) -> dict:
    found = await admin.list_offsets(specs) if specs else {}
    for (t, p), res in sorted(found.items()):
        if isinstance(res, KafkaError):
            raise CliError(f"{what} offset of {t}-{p}: {res}")
    return {tp: res.offset for tp, res in found.items()}


async def run_reset(admin, args) -> int:
    from core.client import OffsetAndMetadata

    gid = args.group
    desc = (await admin.describe_groups([gid]))[gid]
    if isinstance(desc, KafkaError):
        raise CliError(f"group {gid!r}: {_reason(desc)}")
    if desc.state not in INACTIVE:
        raise _inactive_error(gid, desc.state, len(desc.members))
    fetched = await admin.list_group_offsets(gid)
    committed = {tp: v.offset for tp, v in fetched.items() if isinstance(v, OffsetAndMetadata)}
    tps = await _reset_partitions(admin, args, committed)
    starts = await _offsets(admin, {tp: "earliest" for tp in tps}, "earliest")
    ends = await _offsets(admin, {tp: "latest" for tp in tps}, "latest")
    by_time = None
    if args.spec.needs_timestamps:
        by_time = await _offsets(admin, {tp: args.spec.value for tp in tps}, "timestamp")
    try:
        plan = plan_reset(tps, args.spec, committed=committed, log_start=starts, log_end=ends,
                          offsets_for_time=by_time)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    for note in plan.notes:
        _note(f"warning: {note}")
    if args.execute:
        results = await admin.alter_group_offsets(gid, plan.offsets)
        for (t, p), err in sorted(results.items()):
            if isinstance(err, KafkaError):
                if err.code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.REBALANCE_IN_PROGRESS,
                                ErrorCode.ILLEGAL_GENERATION):
                    raise _inactive_error(gid, "no longer inactive (a consumer joined)")
                raise CliError(f"group {gid!r}: could not commit {t}-{p}: {err}")
    rows = [{"topic": t, "partition": p, "current_offset": committed.get((t, p)), "new_offset": new}
            for (t, p), new in sorted(plan.offsets.items())]
    if args.output == "json":
        emit_json({"group": gid, "executed": bool(args.execute), "partitions": rows})
    else:
        table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"],
              [(gid, r["topic"], r["partition"], r["current_offset"], r["new_offset"]) for r in rows])
    if not args.execute:
        _note("dry run: no offsets were changed; add --execute to apply this plan")
    elif not desc.exists:
        _note(f"group {gid!r} did not exist; it now has these committed offsets")
    return 0
