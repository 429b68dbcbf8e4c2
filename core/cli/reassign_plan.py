"""Planning `seaway reassign` and `seaway leaders elect`: pure functions, no I/O.

* The JSON files, in kafka-reassign-partitions' and kafka-leader-election's formats:

      reassignment   {"version": 1, "partitions": [{"topic": "t", "partition": 0,
                                                    "replicas": [1, 2], "log_dirs": ["any", "any"]}]}
      topics to move {"version": 1, "topics": [{"topic": "t"}]}
      elections      {"partitions": [{"topic": "t", "partition": 0}]}

  Each parser raises InputError whose message names the field (`partitions[2].replicas`), ready
  for a one-line CLI error.
* The proposal of `reassign generate`: Kafka's AdminUtils.assignReplicasToBrokers, rack-aware
  or not, run per topic over the given brokers.
* The throttles of `reassign execute --throttle` (ReassignPartitionsCommand's move map): the
  leader side throttles each moving partition's existing replicas, the follower side the
  replicas being added; the rate goes on every broker that is a source or a destination.
* The states `reassign verify` reports.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

TopicPartition = tuple[str, int]

ANY_LOG_DIR = "any"
REASSIGNMENT_VERSION = 1
THROTTLE_RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
LEADER_THROTTLED = "leader.replication.throttled.replicas"
FOLLOWER_THROTTLED = "follower.replication.throttled.replicas"


class InputError(ValueError):
    """Something wrong with what the user gave; the message names the field."""


def tp_name(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


# ---------------------------------------------------------------------------------- JSON types

def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list",
            dict: "an object"}.get(type(value), type(value).__name__)


def _object(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise InputError(f"{where}: expected an object, got {_type_name(value)}")
    return value


def _field(obj: dict, key: str, where: str) -> Any:
    if key not in obj:
        raise InputError(f"{where}.{key}: missing" if where else f"{key}: missing")
    return obj[key]


def _list(value: Any, where: str) -> list:
    if not isinstance(value, list):
        raise InputError(f"{where}: expected a list, got {_type_name(value)}")
    return value


def _int(value: Any, where: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{where}: expected an integer, got {_type_name(value)} {value!r}")
    if value < minimum:
        raise InputError(f"{where}: {value} is negative")
    if value > 2**31 - 1:
        raise InputError(f"{where}: {value} is too large")
    return value


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise InputError(f"{where}: expected a string, got {_type_name(value)}")
    if not value:
        raise InputError(f"{where}: is empty")
    return value


def _version(doc: dict) -> None:
    if "version" not in doc:
        return  # Kafka's tools take the earliest version
    version = doc["version"]
    if isinstance(version, bool) or not isinstance(version, int):
        raise InputError(f"version: expected an integer, got {_type_name(version)}")
    if version != REASSIGNMENT_VERSION:
        raise InputError(f"version: {version} is not supported (only {REASSIGNMENT_VERSION})")


def _topic_partition(entry: dict, where: str) -> TopicPartition:
    return (_string(_field(entry, "topic", where), f"{where}.topic"),
            _int(_field(entry, "partition", where), f"{where}.partition"))


def _no_duplicate_partitions(tps: Sequence[TopicPartition]) -> None:
    seen: dict[TopicPartition, int] = {}
    for i, tp in enumerate(tps):
        if tp in seen:
            raise InputError(f"partitions[{i}]: {tp_name(tp)} is listed twice (also partitions[{seen[tp]}])")
        seen[tp] = i


# ---------------------------------------------------------------------------------- parsers

@dataclass(frozen=True)
class ReassignmentEntry:
    index: int                    # position in the file's "partitions" list, for messages
    topic: str
    partition: int
    replicas: tuple[int, ...]

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)

    @property
    def where(self) -> str:
        return f"partitions[{self.index}]"


def parse_reassignment(doc: Any) -> list[ReassignmentEntry]:
    """The --reassignment-json-file of `reassign execute|verify`."""
    doc = _object(doc, "the file")
    _version(doc)
    parts = _list(_field(doc, "partitions", ""), "partitions")
    if not parts:
        raise InputError("partitions: the list is empty")
    out = []
    for i, raw in enumerate(parts):
        where = f"partitions[{i}]"
        entry = _object(raw, where)
        topic, partition = _topic_partition(entry, where)
        replicas = [_int(b, f"{where}.replicas[{j}]")
                    for j, b in enumerate(_list(_field(entry, "replicas", where), f"{where}.replicas"))]
        if not replicas:
            raise InputError(f"{where}.replicas: the list is empty")
        seen = set()
        for b in replicas:
            if b in seen:
                raise InputError(f"{where}.replicas: broker {b} is listed twice in {replicas}")
            seen.add(b)
        if "log_dirs" in entry:
            dirs = _list(entry["log_dirs"], f"{where}.log_dirs")
            for j, d in enumerate(dirs):
                if not isinstance(d, str):
                    raise InputError(f"{where}.log_dirs[{j}]: expected a string, got {_type_name(d)}")
            if len(dirs) != len(replicas):
                raise InputError(f"{where}.log_dirs: has {len(dirs)} entries for {len(replicas)} replicas")
            if any(d != ANY_LOG_DIR for d in dirs):
                raise InputError(f"{where}.log_dirs: moving replicas between log directories is not "
                                 f"supported; use \"{ANY_LOG_DIR}\"")
        out.append(ReassignmentEntry(i, topic, partition, tuple(replicas)))
    _no_duplicate_partitions([e.tp for e in out])
    return out


def parse_topics_to_move(doc: Any) -> list[str]:
    """The --topics-to-move-json-file of `reassign generate`."""
    doc = _object(doc, "the file")
    _version(doc)
    topics = _list(_field(doc, "topics", ""), "topics")
    if not topics:
        raise InputError("topics: the list is empty")
    out: list[str] = []
    for i, raw in enumerate(topics):
        where = f"topics[{i}]"
        name = _string(_field(_object(raw, where), "topic", where), f"{where}.topic")
        if name in out:
            raise InputError(f"{where}.topic: {name!r} is listed twice (also topics[{out.index(name)}])")
        out.append(name)
    return out


def parse_election_partitions(doc: Any) -> list[TopicPartition]:
    """The --path-to-json-file of `leaders elect`."""
    doc = _object(doc, "the file")
    parts = _list(_field(doc, "partitions", ""), "partitions")
    if not parts:
        raise InputError("partitions: the list is empty")
    out = [_topic_partition(_object(raw, f"partitions[{i}]"), f"partitions[{i}]") for i, raw in enumerate(parts)]
    _no_duplicate_partitions(out)
    return out


def parse_broker_list(text: str) -> list[int]:
    """--broker-list 1,2,3."""
    out: list[int] = []
    for item in text.split(","):
        item = item.strip()
        if not item.isdigit() or not item.isascii():
            raise InputError(f"--broker-list: {item!r} is not a broker id")
        broker = int(item)
        if broker in out:
            raise InputError(f"--broker-list: broker {broker} is listed twice")
        out.append(broker)
    return out


def reassignment_json(assignment: Mapping[TopicPartition, Sequence[int]]) -> dict:
    """Kafka's reassignment JSON, partitions sorted by topic and partition."""
    return {"version": REASSIGNMENT_VERSION, "partitions": [
        {"topic": t, "partition": p, "replicas": list(assignment[(t, p)]),
         "log_dirs": [ANY_LOG_DIR] * len(assignment[(t, p)])}
        for t, p in sorted(assignment)]}


# ---------------------------------------------------------------------------------- generate

@dataclass(frozen=True)
class Broker:
    id: int
    rack: str | None = None


def _replica_index(first: int, second_shift: int, index: int, n: int) -> int:
    shift = 1 + (second_shift + index) % (n - 1)
    return (first + shift) % n


def rack_alternated_brokers(rack_of: Mapping[int, str]) -> list[int]:
    """Brokers ordered rack by rack (racks sorted, brokers sorted within a rack): one from
    each rack in turn, as Kafka's getRackAlternatedBrokerList."""
    by_rack: dict[str, list[int]] = {}
    for broker, rack in rack_of.items():
        by_rack.setdefault(rack, []).append(broker)
    iters = {rack: iter(sorted(brokers)) for rack, brokers in by_rack.items()}
    racks = sorted(iters)
    out: list[int] = []
    i = 0
    while len(out) < len(rack_of):
        next_broker = next(iters[racks[i]], None)
        if next_broker is not None:
            out.append(next_broker)
        i = (i + 1) % len(racks)
    return out


def assign_replicas(brokers: Sequence[Broker], partitions: int, replication_factor: int, *,
                    fixed_start_index: int = -1, start_partition_id: int = -1,
                    rng: random.Random | None = None) -> dict[int, list[int]]:
    """Kafka's AdminUtils.assignReplicasToBrokers: partition -> replicas (the first leads).

    Without racks the leaders go round robin from a start index and the followers are shifted
    by a growing amount, so that replicas spread evenly. With racks the brokers are first put
    in rack-alternating order, and a follower is skipped while its rack (or itself) already
    holds a replica and some rack (broker) does not. Random start indexes unless fixed."""
    rng = rng or random.Random()
    if partitions <= 0:
        raise InputError("the number of partitions must be larger than 0")
    if replication_factor <= 0:
        raise InputError("the replication factor must be larger than 0")
    if replication_factor > len(brokers):
        raise InputError(f"replication factor {replication_factor} is larger than the "
                         f"{len(brokers)} available broker{'s' if len(brokers) != 1 else ''}")
    rack_of: dict[int, str] | None
    if all(b.rack is None for b in brokers):
        order = [b.id for b in brokers]
        rack_of = None
    else:
        missing = [b.id for b in brokers if b.rack is None]
        if missing:
            raise InputError(f"not all brokers have rack information (none for "
                             f"{','.join(map(str, missing))}); use --disable-rack-aware")
        rack_of = {b.id: b.rack for b in brokers if b.rack is not None}   # none is missing
        order = rack_alternated_brokers(rack_of)
    n = len(order)
    start = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    shift = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    pid = max(0, start_partition_id)
    num_racks = len(set(rack_of.values())) if rack_of else 0
    out: dict[int, list[int]] = {}
    for _ in range(partitions):
        if pid > 0 and pid % n == 0:
            shift += 1
        first = (pid + start) % n
        replicas = [order[first]]
        if rack_of is None:
            replicas += [order[_replica_index(first, shift, j, n)] for j in range(replication_factor - 1)]
        else:
            racks_used = {rack_of[order[first]]}
            k = 0
            for _ in range(replication_factor - 1):
                while True:
                    broker = order[_replica_index(first, shift * num_racks, k, n)]
                    rack = rack_of[broker]
                    k += 1
                    if (rack not in racks_used or len(racks_used) == num_racks) and \
                            (broker not in replicas or len(replicas) == n):
                        replicas.append(broker)
                        racks_used.add(rack)
                        break
        out[pid] = replicas
        pid += 1
    return out


def propose(current: Mapping[TopicPartition, Sequence[int]], brokers: Sequence[Broker], *,
            rng: random.Random | None = None, fixed_start_index: int = -1) -> dict[TopicPartition, list[int]]:
    """`reassign generate`: each topic's partitions spread anew over `brokers`, keeping the
    partition count and the replication factor (that of the topic's first partition)."""
    by_topic: dict[str, dict[int, Sequence[int]]] = {}
    for (t, p), replicas in current.items():
        by_topic.setdefault(t, {})[p] = replicas
    out: dict[TopicPartition, list[int]] = {}
    for topic in sorted(by_topic):
        parts = by_topic[topic]
        rf = len(parts[min(parts)])
        try:
            assigned = assign_replicas(brokers, len(parts), rf, rng=rng, fixed_start_index=fixed_start_index)
        except InputError as exc:
            raise InputError(f"topic {topic!r}: {exc}") from None
        out.update({(topic, p): replicas for p, replicas in assigned.items()})
    return out


# ---------------------------------------------------------------------------------- execute

@dataclass
class Move:
    sources: set[int]
    destinations: set[int]


def move_map(ongoing: Mapping[TopicPartition, Any], proposed: Mapping[TopicPartition, Sequence[int]],
             current: Mapping[TopicPartition, Sequence[int]]) -> dict[str, dict[int, Move]]:
    """Kafka's calculateProposedMoveMap. `ongoing` maps partitions being reassigned to objects
    with `replicas` and `adding_replicas`: their sources are the replicas not being added.
    Every other proposed partition moves from its current replicas."""
    moves: dict[str, dict[int, Move]] = {}
    for (t, p), r in ongoing.items():
        adding = set(r.adding_replicas)
        moves.setdefault(t, {})[p] = Move({b for b in r.replicas if b not in adding}, set(adding))
    for (t, p), replicas in proposed.items():
        topic = moves.setdefault(t, {})
        sources = topic[p].sources if p in topic else set(current[(t, p)])
        topic[p] = Move(set(sources), set(replicas))
    return moves


def _throttle_list(items: Iterable[tuple[int, int]]) -> str:
    return ",".join(f"{p}:{b}" for p, b in sorted(set(items)))


def leader_throttles(moves: Mapping[str, Mapping[int, Move]]) -> dict[str, str]:
    """topic -> leader.replication.throttled.replicas: every existing replica of a moving
    partition (any of them may lead while the new ones catch up)."""
    return {t: _throttle_list((p, b) for p, mv in parts.items() for b in mv.sources)
            for t, parts in moves.items()}


def follower_throttles(moves: Mapping[str, Mapping[int, Move]]) -> dict[str, str]:
    """topic -> follower.replication.throttled.replicas: the replicas being added."""
    return {t: _throttle_list((p, b) for p, mv in parts.items() for b in mv.destinations - mv.sources)
            for t, parts in moves.items()}


def reassigning_brokers(moves: Mapping[str, Mapping[int, Move]]) -> set[int]:
    return {b for parts in moves.values() for mv in parts.values() for b in mv.sources | mv.destinations}


def check_against_cluster(entries: Sequence[ReassignmentEntry], partition_counts: Mapping[str, int],
                          live_brokers: Iterable[int] | None) -> None:
    """Every partition of the plan exists and (unless `live_brokers` is None) every replica
    is a live broker."""
    for e in entries:
        count = partition_counts.get(e.topic)
        if count is None:
            raise InputError(f"{e.where}.topic: topic {e.topic!r} does not exist")
        if e.partition >= count:
            raise InputError(f"{e.where}.partition: topic {e.topic!r} has no partition {e.partition} "
                             f"(it has {count})")
        if live_brokers is None:
            continue
        live = set(live_brokers)
        unknown = [b for b in e.replicas if b not in live]
        if unknown:
            raise InputError(f"{e.where}.replicas: broker{'s' if len(unknown) > 1 else ''} "
                             f"{','.join(map(str, unknown))} not in the cluster (brokers: "
                             f"{','.join(map(str, sorted(live)))})")


# ---------------------------------------------------------------------------------- verify

COMPLETED, IN_PROGRESS, MISMATCH = "completed", "in_progress", "mismatch"


def partition_states(targets: Mapping[TopicPartition, Sequence[int]], ongoing: Mapping[TopicPartition, Any],
                     current: Mapping[TopicPartition, Sequence[int]]) -> list[dict]:
    """One state per target partition, as Kafka's findPartitionReassignmentStates: in
    progress while the controller lists it, else completed if its replicas are the target's
    (in the target's order: the first is the preferred leader), else a mismatch (nothing in
    progress, but the replicas are not the ones asked for)."""
    out = []
    for tp in sorted(targets):
        target = list(targets[tp])
        if tp in ongoing:
            state, replicas = IN_PROGRESS, list(ongoing[tp].replicas)
        else:
            replicas = list(current.get(tp, []))
            state = COMPLETED if replicas == target else MISMATCH
        out.append({"topic": tp[0], "partition": tp[1], "status": state, "replicas": replicas,
                    "target_replicas": target})
    return out


def state_line(state: dict) -> str:
    name = f"{state['topic']}-{state['partition']}"
    if state["status"] == COMPLETED:
        return f"Reassignment of partition {name} is completed."
    if state["status"] == IN_PROGRESS:
        return f"Reassignment of partition {name} is still in progress."
    return (f"There is no active reassignment of partition {name}, but replica set is "
            f"{','.join(map(str, state['replicas']))} rather than {','.join(map(str, state['target_replicas']))}.")
