"""Admin operations on consumer groups, as Kafka's Java Admin does them.

`GroupAdmin` is a part of `Admin` (which inherits it); it lives here because groups are
their own concern: they are reached through their coordinator, not through partition
leaders or the controller.

Routing
-------
ListGroups goes to every broker (each answers for the groups it coordinates) and the answers
are merged. Every other call first asks any broker for the group's coordinator
(FindCoordinator, batched for many groups from v4, KIP-699) and then sends the request there:
DescribeGroups, DeleteGroups, OffsetFetch (several groups in one request from v8, KIP-709),
OffsetCommit and OffsetDelete. NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE and
COORDINATOR_LOAD_IN_PROGRESS are retried (the coordinator is looked up again each attempt)
until the admin's timeout.

Results follow admin.py's convention: a dict from each group (or partition) to its result or
a KafkaError instance. Calls about one group raise a group-level error instead.

alter_group_offsets commits with generation -1 and no member id, as the Java Admin does (and
kafka-consumer-groups --reset-offsets through it): the coordinator accepts that only while the
group is Empty, and answers UNKNOWN_MEMBER_ID while it has members.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Iterable, Mapping

from core.protocol import messages as m
from core.protocol.consumer_protocol import PROTOCOL_TYPE, decode_assignment
from core.protocol.errors import DecodeError, ErrorCode, KafkaError

from .admin_core import AdminCore
from .cluster import BrokerInfo
from .errors import UnsupportedVersionError

__all__ = ["GroupAdmin", "GroupListing", "GroupDescription", "MemberDescription", "OffsetAndMetadata"]

TopicPartition = tuple[str, int]

OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = (m.ApiKey.OFFSET_COMMIT, m.ApiKey.OFFSET_FETCH,
                                                m.ApiKey.FIND_COORDINATOR)
LEAVE_GROUP, DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS, OFFSET_DELETE = 13, 15, 16, 42, 47
GROUP_KEY = 0

_UNKNOWN_TOPIC = frozenset({ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID})


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    protocol_type: str          # "consumer" for consumer groups, "" for offsets-only groups
    state: str | None           # None from brokers older than ListGroups v4
    group_type: str | None = None  # "classic" / "consumer" from ListGroups v5

    @property
    def is_simple_consumer_group(self) -> bool:
        return self.protocol_type == ""


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    #: topic -> partitions, decoded for "consumer" groups; None for other protocol types or an
    #: assignment that does not parse. Empty while the group is not Stable (the coordinator
    #: only hands out assignments of a Stable group).
    assignment: dict[str, list[int]] | None
    raw_assignment: bytes = b""
    raw_metadata: bytes = b""

    @property
    def partitions(self) -> list[TopicPartition]:
        return sorted((t, p) for t, ps in (self.assignment or {}).items() for p in ps)


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str                  # Empty, PreparingRebalance, CompletingRebalance, Stable, Dead
    protocol_type: str
    protocol: str               # the assignor ("range", "cooperative-sticky", ...); "" unless Stable
    members: list[MemberDescription]
    coordinator: BrokerInfo | None

    @property
    def is_simple_consumer_group(self) -> bool:
        return self.protocol_type == ""

    @property
    def exists(self) -> bool:
        """DescribeGroups (before v6) reports a group the coordinator does not know as Dead."""
        return self.state != "Dead"


@dataclass(frozen=True)
class OffsetAndMetadata:
    offset: int
    metadata: str = ""
    leader_epoch: int = -1


def _decode_assignment(protocol_type: str, blob: bytes) -> dict[str, list[int]] | None:
    if protocol_type != PROTOCOL_TYPE:
        return None
    try:
        return {t: sorted(ps) for t, ps in decode_assignment(blob).partitions.items()}
    except DecodeError:
        return None


class GroupAdmin(AdminCore):
    """Mixed into Admin; uses its client, timeout and `_per_item` retry core (AdminCore)."""

    # ------------------------------------------------------------------ coordinators

    async def _find_coordinators(self, group_ids: Iterable[str]) -> dict[str, int | KafkaError]:
        """group id -> coordinator node id, or the KafkaError FindCoordinator answered."""
        group_ids = list(dict.fromkeys(group_ids))
        node = await self.client.any_node()
        conn = await self.client.connection(node)
        R = m.FindCoordinatorRequest
        found: dict[str, tuple[int, str, int] | KafkaError] = {}
        if conn.supports(FIND_COORDINATOR, 4):
            resp = await conn.send(R(key_type=GROUP_KEY, coordinator_keys=group_ids), api_key=FIND_COORDINATOR)
            for c in resp.coordinators:
                found[c.key] = (KafkaError(c.error_code, c.error_message or f"coordinator of group {c.key!r}")
                                if c.error_code else (c.node_id, c.host, c.port))
        else:
            async def one(gid):
                resp = await conn.send(R(key=gid, key_type=GROUP_KEY), api_key=FIND_COORDINATOR)
                if resp.error_code:
                    return KafkaError(resp.error_code, resp.error_message or f"coordinator of group {gid!r}")
                return (resp.node_id, resp.host, resp.port)
            for gid, res in zip(group_ids, await asyncio.gather(*(one(g) for g in group_ids))):
                found[gid] = res
        out: dict[str, int | KafkaError] = {}
        for gid in group_ids:
            res = found.get(gid, KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"no coordinator for {gid!r}"))
            if isinstance(res, KafkaError):
                out[gid] = res
                continue
            node_id = res[0]
            if node_id not in self.client.cluster.brokers:
                await self.client.refresh_metadata([])
            out[gid] = node_id if node_id in self.client.cluster.brokers else KafkaError(
                ErrorCode.COORDINATOR_NOT_AVAILABLE, f"coordinator {node_id} of group {gid!r} is not in the metadata")
        return out

    async def _via_coordinators(self, items: Mapping[str, Any],
                                one_node: Callable[[int, dict[str, Any]], Awaitable[dict[str, Any]]]
                                ) -> dict[str, Any]:
        """Look up each group's coordinator, run `one_node(node, {group: spec})` per
        coordinator, and merge the per-group results; retriable ones are retried."""
        async def attempt(todo: dict[str, Any]):
            coordinators = await self._find_coordinators(todo)
            out: dict[str, Any] = {}
            by_node: dict[int, dict[str, Any]] = {}
            for gid, c in coordinators.items():
                if isinstance(c, KafkaError):
                    out[gid] = c
                else:
                    by_node.setdefault(c, {})[gid] = todo[gid]
            outcomes = await asyncio.gather(*(one_node(n, g) for n, g in by_node.items()),
                                            return_exceptions=True)
            for (_n, g), outcome in zip(by_node.items(), outcomes):
                if isinstance(outcome, KafkaError):
                    out.update({gid: outcome for gid in g})
                elif isinstance(outcome, BaseException):
                    raise outcome
                else:
                    out.update(outcome)
            for gid in todo:
                out.setdefault(gid, KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"no result for group {gid!r}"))
            return out

        return await self._per_item(dict(items), attempt, final=frozenset())

    async def _one_group(self, group_id: str, items: Mapping[TopicPartition, Any],
                         one: Callable[[Any, dict[TopicPartition, Any]], Awaitable[dict[TopicPartition, Any]]]
                         ) -> dict[TopicPartition, Any]:
        """Per-partition requests to one group's coordinator (OffsetCommit, OffsetDelete):
        `one(connection, {tp: spec})`; partitions with retriable errors are retried."""
        async def attempt(todo: dict[TopicPartition, Any]):
            coordinator = (await self._find_coordinators([group_id]))[group_id]
            if isinstance(coordinator, KafkaError):
                if not coordinator.retriable:
                    raise coordinator
                return {tp: coordinator for tp in todo}
            return await one(await self.client.connection(coordinator), todo)

        return await self._per_item(dict(items), attempt, final=_UNKNOWN_TOPIC)

    # ------------------------------------------------------------------ groups

    async def list_groups(self, states: Iterable[str] | None = None) -> list[GroupListing]:
        """Every group of the cluster (ListGroups to each broker), sorted by id; with `states`
        only groups in one of them (ListGroups v4+, case-insensitive)."""
        await self.client.start()
        states = [s for s in (states or [])]
        await self.client.call(lambda: self.client.refresh_metadata([]), timeout_ms=self.timeout_ms)

        async def one(node: int) -> list[GroupListing]:
            async def once():
                conn = await self.client.connection(node)
                version = conn.version_for(LIST_GROUPS)
                if states and version < 4:
                    raise UnsupportedVersionError(f"filtering groups by state needs ListGroups v4; "
                                                  f"{conn} speaks v{version}")
                resp = await conn.send(m.ListGroupsRequest(states_filter=states, types_filter=[]),
                                       api_key=LIST_GROUPS, version=version)
                if resp.error_code:
                    raise KafkaError(resp.error_code, f"ListGroups on node {node}")
                return [GroupListing(g.group_id, g.protocol_type, g.group_state if version >= 4 else None,
                                     g.group_type if version >= 5 else None) for g in resp.groups]
            return await self.client.call(once, timeout_ms=self.timeout_ms)

        nodes = sorted(self.client.cluster.brokers)
        merged: dict[str, GroupListing] = {}
        for listing in await asyncio.gather(*(one(n) for n in nodes)):
            for g in listing:
                merged.setdefault(g.group_id, g)
        return [merged[g] for g in sorted(merged)]

    async def describe_groups(self, group_ids: Iterable[str]
                              ) -> dict[str, GroupDescription | KafkaError]:
        """State, protocol, coordinator and members of each group; members of a "consumer"
        group come with their decoded assignment. A group nobody knows is state "Dead"."""
        R = m.DescribeGroupsRequest

        async def one_node(node: int, group: dict[str, None]):
            resp = await self.client.send(node, R(groups=list(group), include_authorized_operations=False),
                                          api_key=DESCRIBE_GROUPS)
            coordinator = self.client.cluster.brokers.get(node)
            out: dict[str, GroupDescription | KafkaError] = {}
            for g in resp.groups:
                if g.group_id not in group:
                    continue
                if g.error_code:
                    out[g.group_id] = KafkaError(g.error_code, f"describe group {g.group_id!r}")
                    continue
                members = [MemberDescription(
                    mm.member_id, mm.group_instance_id, mm.client_id, mm.client_host,
                    _decode_assignment(g.protocol_type, bytes(mm.member_assignment)),
                    bytes(mm.member_assignment), bytes(mm.member_metadata)) for mm in g.members]
                out[g.group_id] = GroupDescription(g.group_id, g.group_state, g.protocol_type,
                                                   g.protocol_data, members, coordinator)
            return out

        return await self._via_coordinators(dict.fromkeys(group_ids), one_node)

    async def delete_groups(self, group_ids: Iterable[str]) -> dict[str, KafkaError | None]:
        """Delete Empty groups with their offsets: None per deleted group; NON_EMPTY_GROUP for
        a group with members, GROUP_ID_NOT_FOUND for one that does not exist."""
        R = m.DeleteGroupsRequest

        async def one_node(node: int, group: dict[str, None]):
            resp = await self.client.send(node, R(groups_names=list(group)), api_key=DELETE_GROUPS)
            out: dict[str, KafkaError | None] = {}
            for r in resp.results:
                if r.group_id in group:
                    out[r.group_id] = KafkaError(r.error_code, f"delete group {r.group_id!r}") \
                        if r.error_code else None
            return out

        return await self._via_coordinators(dict.fromkeys(group_ids), one_node)

    async def remove_members(self, group_id: str, members: Iterable[MemberDescription],
                             reason: str | None = None) -> dict[str, KafkaError | None]:
        """Make members leave a classic group at once (LeaveGroup v3+, as Kafka's
        removeMembersFromConsumerGroup): None per member removed, its error otherwise. For
        members that will never leave themselves (their process died with the cluster, and the
        coordinator would wait out their session); a live one rejoins."""
        R = m.LeaveGroupRequest
        wanted = list(members)
        if not wanted:
            return {}
        coordinator = (await self._find_coordinators([group_id]))[group_id]
        if isinstance(coordinator, KafkaError):
            raise coordinator
        conn = await self.client.connection(coordinator)
        if not conn.supports(LEAVE_GROUP, 3):
            raise UnsupportedVersionError(f"removing members needs LeaveGroup v3; the coordinator of "
                                          f"{group_id!r} speaks less")
        resp = await conn.send(R(group_id=group_id, members=[
            R.MemberIdentity(member_id=w.member_id, group_instance_id=w.group_instance_id, reason=reason)
            for w in wanted]), api_key=LEAVE_GROUP)
        if resp.error_code:
            raise KafkaError(resp.error_code, f"remove members of group {group_id!r}")
        return {r.member_id: KafkaError(r.error_code, f"remove member {r.member_id!r} of {group_id!r}")
                if r.error_code else None for r in resp.members}

    # ------------------------------------------------------------------ committed offsets

    async def list_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition] | None = None
                                 ) -> dict[TopicPartition, OffsetAndMetadata | None | KafkaError]:
        """The group's committed offsets: every partition it has one for (partitions=None),
        or the given partitions, None where there is no commit. Raises a group-level error."""
        result = (await self.list_groups_offsets({group_id: partitions}))[group_id]
        if isinstance(result, KafkaError):
            raise result
        return result

    async def list_groups_offsets(self, specs: Mapping[str, Iterable[TopicPartition] | None]
                                  ) -> dict[str, dict[TopicPartition, OffsetAndMetadata | None | KafkaError]
                                            | KafkaError]:
        """list_group_offsets for several groups; groups sharing a coordinator go in one
        OffsetFetch where it speaks v8+."""
        specs = {g: None if ps is None else sorted(set(ps)) for g, ps in specs.items()}

        async def one_node(node: int, group: dict[str, list[TopicPartition] | None]):
            conn = await self.client.connection(node)
            version = conn.version_for(OFFSET_FETCH)
            if version >= 8:
                R = m.OffsetFetchRequest
                req = R(groups=[R.OffsetFetchRequestGroup(
                                    group_id=g, topics=_fetch_topics(R.OffsetFetchRequestTopics, ps))
                                for g, ps in group.items()], require_stable=False)
                resp = await conn.send(req, api_key=OFFSET_FETCH, version=version)
                out = {}
                for rg in resp.groups:
                    if rg.group_id in group:
                        out[rg.group_id] = _fetched(rg.group_id, rg.error_code, rg.topics, group[rg.group_id])
                return out
            results = await asyncio.gather(*(self._fetch_one(conn, version, g, ps) for g, ps in group.items()),
                                           return_exceptions=True)
            out = {}
            for g, res in zip(group, results):
                if isinstance(res, BaseException) and not isinstance(res, KafkaError):
                    raise res
                out[g] = res
            return out

        return await self._via_coordinators(specs, one_node)

    async def _fetch_one(self, conn, version: int, group_id: str, partitions: list[TopicPartition] | None):
        if partitions is None and version < 2:
            raise UnsupportedVersionError(f"fetching all of a group's offsets needs OffsetFetch v2; "
                                          f"{conn} speaks v{version}")
        R = m.OffsetFetchRequest
        req = R(group_id=group_id, topics=_fetch_topics(R.OffsetFetchRequestTopic, partitions),
                require_stable=False)
        resp = await conn.send(req, api_key=OFFSET_FETCH, version=version)
        return _fetched(group_id, resp.error_code if version >= 2 else 0, resp.topics, partitions)

    async def alter_group_offsets(self, group_id: str,
                                  offsets: Mapping[TopicPartition, int | OffsetAndMetadata]
                                  ) -> dict[TopicPartition, KafkaError | None]:
        """Commit `offsets` for the group from outside it (generation -1, no member id): only
        an Empty (or not yet existing) group accepts this; one with members answers
        UNKNOWN_MEMBER_ID for every partition."""
        R = m.OffsetCommitRequest
        wanted = {tp: o if isinstance(o, OffsetAndMetadata) else OffsetAndMetadata(int(o))
                  for tp, o in offsets.items()}

        async def one(conn, todo: dict[TopicPartition, OffsetAndMetadata]):
            topics: dict[str, list] = {}
            for (t, p), om in sorted(todo.items()):
                topics.setdefault(t, []).append(R.OffsetCommitRequestPartition(
                    partition_index=p, committed_offset=om.offset, committed_leader_epoch=om.leader_epoch,
                    commit_timestamp=-1, committed_metadata=om.metadata))
            req = R(group_id=group_id, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                    retention_time_ms=-1,
                    topics=[R.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in topics.items()])
            resp = await conn.send(req, api_key=OFFSET_COMMIT)
            return _fill(_partition_errors(resp.topics, todo, f"commit offset of group {group_id!r}"), todo)

        return await self._one_group(group_id, wanted, one)

    async def delete_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition]
                                   ) -> dict[TopicPartition, KafkaError | None]:
        """Drop the group's committed offsets for `partitions` (OffsetDelete, KIP-496).
        Raises the group-level error (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, ...); per partition
        GROUP_SUBSCRIBED_TO_TOPIC while a member consumes the topic."""
        R = m.OffsetDeleteRequest

        async def one(conn, todo: dict[TopicPartition, None]):
            topics: dict[str, list] = {}
            for t, p in sorted(todo):
                topics.setdefault(t, []).append(R.OffsetDeleteRequestPartition(partition_index=p))
            resp = await conn.send(R(group_id=group_id, topics=[R.OffsetDeleteRequestTopic(name=t, partitions=ps)
                                                                for t, ps in topics.items()]),
                                   api_key=OFFSET_DELETE)
            if resp.error_code:
                err = KafkaError(resp.error_code, f"delete offsets of group {group_id!r}")
                if not err.retriable:
                    raise err
                return {tp: err for tp in todo}
            return _fill(_partition_errors(resp.topics, todo, f"delete offset of group {group_id!r}"), todo)

        return await self._one_group(group_id, dict.fromkeys(partitions), one)


def _partition_errors(topics, todo, what: str) -> dict[TopicPartition, KafkaError | None]:
    """Per-partition error codes of a response, for the partitions asked about."""
    out: dict[TopicPartition, KafkaError | None] = {}
    for t in topics:
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            if tp in todo:
                out[tp] = KafkaError(p.error_code, f"{what} for {t.name}-{p.partition_index}") \
                    if p.error_code else None
    return out


def _fetch_topics(cls, partitions: list[TopicPartition] | None):
    if partitions is None:
        return None
    topics: dict[str, list[int]] = {}
    for t, p in partitions:
        topics.setdefault(t, []).append(p)
    return [cls(name=t, partition_indexes=ps) for t, ps in topics.items()]


def _fetched(group_id: str, error_code: int, topics, asked: list[TopicPartition] | None):
    """An OffsetFetch answer for one group -> {tp: OffsetAndMetadata | None | KafkaError}, or
    the group's KafkaError. A retriable partition error (UNSTABLE_OFFSET_COMMIT) makes the
    whole group retriable, as the Java Admin retries the group."""
    if error_code:
        return KafkaError(error_code, f"fetch offsets of group {group_id!r}")
    out: dict[TopicPartition, OffsetAndMetadata | None | KafkaError] = {}
    for t in topics:
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            if p.error_code:
                err = KafkaError(p.error_code, f"fetch offset of group {group_id!r} for {t.name}-{p.partition_index}")
                if err.retriable and err.code not in _UNKNOWN_TOPIC:
                    return err
                out[tp] = err
            elif p.committed_offset < 0:
                if asked is not None:
                    out[tp] = None
            else:
                out[tp] = OffsetAndMetadata(p.committed_offset, p.metadata or "", p.committed_leader_epoch)
    for tp in asked or ():
        out.setdefault(tp, None)
    return dict(sorted(out.items()))


def _fill(out: dict, todo: Mapping) -> dict:
    for tp in todo:
        out.setdefault(tp, KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"no result for {tp[0]}-{tp[1]}"))
    return out
