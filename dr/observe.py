"""Looking at a DR pair's clusters: their DR topics and roles, their DR epochs, and how far the
link out of the active cluster is behind (dr/plan.py's PairView).

A cluster that does not answer within `timeout_s` is unreachable, with the reason; that is an
observation, not an error. Lag comes from the clusters themselves, not from the mirror: the
latest offset sync of each partition (in the active cluster's `mm2-offset-syncs.<partner>
.internal`) says up to where the partner has the records, its end offset says how many there
are, the timestamp of the first record not yet copied says how old the backlog is, and the
batches from there to the end how many bytes it holds (backlog_bytes). The groups' commits on
the active cluster and the partner's checkpoints of them (`<active>.checkpoints.internal`)
say whether the groups could resume there (dr/groups.py).
"""
from __future__ import annotations

import time
from contextlib import AsyncExitStack
from dataclasses import dataclass

import anyio

from core.client import Admin, Consumer, KafkaClient
from core.client.acl_admin import AclAdmin
from core.client.admin import ConfigResource
from core.client.errors import KafkaError
from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from core.protocol.dr import DR_EPOCH, DR_STATE_TOPIC, REPLICA_OF
from core.protocol.records import iter_batch_headers
from mirror.policy import IdentityReplicationPolicy, TopicFilter
from mirror.link import DYNAMIC_TOPIC_CONFIG, NOT_COPIED, read_offset_syncs
from mirror.records import OffsetSync, decode_checkpoint
from mirror.translation import OffsetSyncStore

from .access import Access
from .config import ClusterAccess, PairConfig
from .groups import EXCLUDED_GROUPS, CheckpointSeen, GroupsView
from .plan import ClusterView, PairView, PartitionLag

POLICY = IdentityReplicationPolicy()
CLIENT_ID = "seaway-dr"


class PairClients:
    """One client per cluster of a pair, opened on entry and closed on exit. A cluster that
    cannot be reached then has no client, and `unreachable` says why."""

    def __init__(self, config: PairConfig, *, timeout_s: float = 5.0):
        self.config = config
        self.timeout_s = timeout_s
        self.clients: dict[str, KafkaClient] = {}
        self.unreachable: dict[str, str] = {}
        self._stack = AsyncExitStack()

    async def __aenter__(self) -> "PairClients":
        for side in (self.config.first, self.config.second):
            # Bounded by the client's own connect and request timeouts (a client's task group
            # must not be entered under a cancel scope that ends before it does).
            try:
                client = await self._stack.enter_async_context(client_for(side, self.timeout_s))
            except (KafkaError, OSError) as exc:
                self.unreachable[side.cluster] = str(exc) or type(exc).__name__
                continue
            self.clients[side.cluster] = client
        return self

    async def __aexit__(self, *exc) -> None:
        await self._stack.aclose()

    def admin(self, cluster: str) -> Admin:
        return Admin(self.clients[cluster])


def client_for(side: ClusterAccess, timeout_s: float, *, client_id: str = CLIENT_ID) -> KafkaClient:
    """A client of one cluster of a pair (an async context manager), with the controller's
    login and `timeout_s` for connecting and for each request."""
    ms = int(timeout_s * 1000)
    return KafkaClient(side.bootstrap, client_id=client_id, security=side.security(),
                       request_timeout_ms=ms, connect_timeout_ms=ms, default_api_timeout_ms=ms,
                       reconnect_backoff_ms=100)


def is_dr_topic(config: PairConfig, topic: str) -> bool:
    """A topic the pair's links carry (each cluster keeps its own heartbeats)."""
    return (not POLICY.is_internal_topic(topic) and not POLICY.is_heartbeats_topic(topic)
            and TopicFilter(tuple(config.topics), tuple(config.exclude)).selects(topic))


async def observe_cluster(clients: PairClients, cluster: str) -> ClusterView:
    if cluster not in clients.clients:
        return ClusterView(cluster, False, error=clients.unreachable.get(cluster, "no client"))
    try:
        with anyio.fail_after(clients.timeout_s * 2):
            admin = clients.admin(cluster)
            names = [t for t in await admin.list_topics(internal=True) if is_dr_topic(clients.config, t)]
            described = await admin.describe_topics(names) if names else {}
            resources = [ConfigResource.topic(t) for t in names]
            has_state = DR_STATE_TOPIC in await admin.list_topics(internal=True)
            if has_state:
                resources.append(ConfigResource.topic(DR_STATE_TOPIC))
            configs = await admin.describe_configs(resources) if resources else {}
            access = await read_access(clients.clients[cluster])
    except (KafkaError, OSError, TimeoutError) as exc:
        return ClusterView(cluster, False, error=str(exc) or type(exc).__name__)
    topics = {}
    copied: dict[str, dict[str, str]] = {}
    # The cluster's epoch, or a topic's if one is higher (`__seaway_dr` deleted and made
    # again starts at 0, but its topics remember): the next epoch must pass both checks.
    epoch = 0
    for name in names:
        desc, entries = described.get(name), configs.get(ConfigResource.topic(name))
        if desc is None or isinstance(desc, KafkaError) or not isinstance(entries, dict):
            continue        # deleted meanwhile
        entry = entries.get(REPLICA_OF)
        topics[name] = (len(desc.partitions), entry.value or "" if entry is not None else "")
        copied[name] = {k: e.value for k, e in entries.items() if e.source == DYNAMIC_TOPIC_CONFIG
                        and e.value is not None and not e.sensitive and not NOT_COPIED.fullmatch(k)}
        epoch = max(epoch, dr_epoch(entries))
    state = configs.get(ConfigResource.topic(DR_STATE_TOPIC)) if has_state else None
    if isinstance(state, dict):
        epoch = max(epoch, dr_epoch(state))
    return ClusterView(cluster, True, epoch, topics, configs=copied, access=access)


async def read_access(client: KafkaClient) -> Access:
    """The cluster's ACL bindings and SCRAM users (dr/access.py); an Access with the error
    where it refuses to say (not authorized). A cluster without an authorizer has no ACLs."""
    try:
        acls = frozenset(await AclAdmin(client).describe_acls())
    except KafkaError as exc:
        if exc.code != ErrorCode.SECURITY_DISABLED:
            return Access(error=f"its ACLs cannot be read: {exc}")
        acls = frozenset()
    try:
        found = await Admin(client).describe_user_scram_credentials()
    except KafkaError as exc:
        return Access(error=f"its SCRAM users cannot be read: {exc}")
    users = {user: frozenset(m.name for m, _ in creds) for user, creds in found.items() if isinstance(creds, list)}
    return Access(acls, users)


def dr_epoch(entries: dict) -> int:
    """seaway.dr.epoch of a DescribeConfigs answer's entries (0 where unset or unreadable)."""
    entry = entries.get(DR_EPOCH)
    try:
        return int(entry.value or 0) if entry is not None else 0
    except ValueError:
        return 0


async def observe(clients: PairClients) -> PairView:
    pair = clients.config.pair
    views = {}
    for cluster in (pair.first, pair.second):
        views[cluster] = await observe_cluster(clients, cluster)
    view = PairView(pair, views)
    # Each side's link carries the topics active there (topics may be split between the two).
    actives = {cluster for cluster in view.roles().values() if cluster is not None}
    lag: dict[tuple[str, int], PartitionLag] = {}
    copied: dict[tuple[str, int], int] = {}
    lag_known = False
    if actives and all(views[c].reachable for c in actives):
        try:
            with anyio.fail_after(clients.timeout_s * 3):
                for active in sorted(actives):
                    topics = {t: views[active].topics[t] for t in view.active_for(active)}
                    where = await positions(clients, active, pair.partner(active), topics)
                    copied.update({tp: pos.copied for tp, pos in where.items()})
                    lag.update(await link_lag(clients, active, where))
            lag_known = True
        except (KafkaError, OSError, TimeoutError):
            lag, copied = {}, {}        # lag unknown: not the same as none
    groups = {active: await read_groups(clients, active, pair.partner(active), set(view.active_for(active)), copied)
              for active in sorted(actives) if views[active].reachable and views[pair.partner(active)].reachable}
    return PairView(pair, views, lag, lag_known, groups, time.time() if lag_known else None)


async def read_syncs(client: KafkaClient, topic: str) -> list[OffsetSync]:
    """Every offset sync in `topic`; [] if it does not exist (the link has not started)."""
    if topic not in await Admin(client).list_topics(internal=True):
        return []
    return await read_offset_syncs(client, topic)


async def sync_store(client: KafkaClient, partner: str, *, capacity: int | None = None) -> OffsetSyncStore:
    """The translation store of the link from `client`'s cluster to `partner` (its offset
    syncs, kept on this cluster); a sync the store refuses is skipped, as the mirror skips it."""
    store = OffsetSyncStore() if capacity is None else OffsetSyncStore(capacity=capacity)
    for sync in await read_syncs(client, POLICY.offset_syncs_topic(partner)):
        try:
            store.observe(sync)
        except ValueError:
            continue
    return store


@dataclass(frozen=True)
class PartitionPosition:
    end: int            # the active copy's end offset
    copied: int         # up to here the partner has the records (the latest sync's run end)


async def positions(clients: PairClients, active: str, partner: str,
                    topics: dict[str, tuple[int, str]]) -> dict[tuple[str, int], PartitionPosition]:
    """Per partition of the active copies: its end, and how far the link has copied it."""
    client = clients.clients[active]
    covered: dict[tuple[str, int], int] = {}
    for sync in await read_syncs(client, POLICY.offset_syncs_topic(partner)):
        covered[(sync.topic, sync.partition)] = sync.upstream_offset + sync.extent
    specs = {(t, p): "latest" for t, (n, _) in topics.items() for p in range(n)}
    starts = {(t, p): "earliest" for t, (n, _) in topics.items() for p in range(n)}
    admin = clients.admin(active)
    ends = await admin.list_offsets(specs) if specs else {}
    firsts = await admin.list_offsets(starts) if starts else {}
    out = {}
    for tp, end in ends.items():
        if isinstance(end, KafkaError):
            raise end
        first = firsts.get(tp)
        start = first.offset if first is not None and not isinstance(first, KafkaError) else 0
        out[tp] = PartitionPosition(end.offset, max(covered.get(tp, start), start))
    return out


async def link_lag(clients: PairClients, active: str,
                   where: dict[tuple[str, int], PartitionPosition]) -> dict[tuple[str, int], PartitionLag]:
    """The lag of each partition of `active` that its partner has not got whole (positions())."""
    behind = {tp: pos for tp, pos in where.items() if pos.end > pos.copied}
    ages = await _first_timestamps(clients.clients[active], {tp: pos.copied for tp, pos in behind.items()}) \
        if behind else {}
    sizes = await _backlog_batches(clients.clients[active], behind) if behind else {}
    now = time.time() * 1000
    out = {}
    for tp, pos in behind.items():
        measured = backlog_bytes(sizes.get(tp, []), pos.copied, pos.end)
        out[tp] = PartitionLag(pos.end - pos.copied, max(0.0, (now - ages[tp]) / 1000) if tp in ages else 0.0,
                               None if measured is None else measured[0], measured is not None and measured[1])
    return out


# How much of a partition's backlog one look reads to count its bytes: exact below this, an
# estimate above (the mirror's own fetches are about this size).
BYTES_PROBE = 256 * 1024


def backlog_bytes(batches: list[tuple[int, int, int]], copied: int, end: int) -> tuple[int, bool] | None:
    """The bytes of the active partition's log the partner has not got, from the batches
    (base offset, next offset, size in bytes) a fetch at `copied` returned: (bytes, estimated).

    The rule: every batch holding an offset in [copied, end) counts whole, with its header
    (the mirror forwards whole batches, so that is what is still to cross the link; a batch
    that `copied` falls inside counts whole too). Exact when the fetch reached `end`. When it
    did not (the backlog is larger than BYTES_PROBE), the rest is estimated at the bytes per
    offset of what was read, and said so: an overestimate where the rest has holes (compacted
    away, aborted), an underestimate where its records are larger. None when the fetch
    returned no batch of the backlog (it was deleted meanwhile, or could not be read)."""
    seen = [(base, nxt, size) for base, nxt, size in batches if nxt > copied and base < end]
    if not seen:
        return None
    total = sum(size for _, _, size in seen)
    first, reached = min(base for base, _, _ in seen), max(nxt for _, nxt, _ in seen)
    if reached >= end:
        return total, False
    return total + round((end - reached) * total / (reached - first)), True


def partitions_by_leader(client: KafkaClient, tps) -> dict[int, list[tuple[str, int]]]:
    """The partitions grouped by the leader the client's metadata names (leaderless ones left
    out), for one request per leader."""
    out: dict[int, list[tuple[str, int]]] = {}
    for tp in tps:
        leader = client.leader_for(*tp)
        if leader is not None:
            out.setdefault(leader, []).append(tp)
    return out


async def _backlog_batches(client: KafkaClient, behind: dict[tuple[str, int], PartitionPosition]
                           ) -> dict[tuple[str, int], list[tuple[int, int, int]]]:
    """Per partition, the batches (base, next, size) of one fetch at its copied offset, up to
    BYTES_PROBE, read from the leader without decoding a record; a partition that could not be
    read is left out (its bytes are then unknown, not 0)."""
    await client.ensure_topics({t for t, _ in behind})
    by_leader = partitions_by_leader(client, behind)
    R = m.FetchRequest
    out: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
    for node, tps in by_leader.items():
        topics: dict[str, list] = {}
        for topic, partition in tps:
            topics.setdefault(topic, []).append(R.FetchPartition(
                partition=partition, current_leader_epoch=-1, fetch_offset=behind[(topic, partition)].copied,
                last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=BYTES_PROBE))
        # Sessionless (id 0, epoch -1), by topic name (v12), up to the high watermark.
        request = R(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=BYTES_PROBE * len(tps), isolation_level=0,
                    session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
                    topics=[R.FetchTopic(topic=t, partitions=parts) for t, parts in topics.items()])
        try:
            response = await client.send(node, request, max_version=12)
        except KafkaError:
            continue
        for t in response.responses:
            for p in t.partitions:
                if p.error_code == 0:
                    out[(t.topic, p.partition_index)] = [
                        (b.base_offset, b.next_offset, b.size) for b in iter_batch_headers(p.records or b"")]
    return out


async def read_groups(clients: PairClients, active: str, standby: str, topics: set[str],
                      copied: dict[tuple[str, int], int]) -> GroupsView:
    """The commits of `active`'s groups on `topics` and `standby`'s checkpoints of them (with
    how far the link has `copied` each partition, where known); a GroupsView with the error
    when either could not be read in time."""
    try:
        with anyio.fail_after(clients.timeout_s * 3):
            commits = await committed_offsets(clients.admin(active), topics) if topics else {}
            checkpoints, newest = await read_checkpoints(clients.clients[standby], POLICY.checkpoints_topic(active))
    except (KafkaError, OSError, TimeoutError) as exc:
        return GroupsView(active, standby, error=str(exc) or type(exc).__name__)
    return GroupsView(active, standby, commits, checkpoints, newest, copied=copied)


async def committed_offsets(admin: Admin, topics: set[str]) -> dict[str, dict[tuple[str, int], int]]:
    """group -> (topic, partition) -> committed offset, for the groups the mirror checkpoints
    and these topics only (a group deleted meanwhile is left out)."""
    groups = [g.group_id for g in await admin.list_groups() if not EXCLUDED_GROUPS.fullmatch(g.group_id)]
    offsets = await admin.list_groups_offsets({g: None for g in groups}) if groups else {}
    out = {}
    for group, committed in offsets.items():
        if not isinstance(committed, dict):
            continue
        mine = {tp: om.offset for tp, om in committed.items()
                if tp[0] in topics and om is not None and not isinstance(om, KafkaError) and om.offset >= 0}
        if mine:
            out[group] = mine
    return out


async def read_checkpoints(client: KafkaClient, topic: str
                           ) -> tuple[dict[tuple[str, str, int], CheckpointSeen], float | None]:
    """The newest checkpoint of each (group, topic, partition) in `topic` (partition 0, read to
    its end), and when the newest of all was written; ({}, None) if the topic does not exist
    (the link has written none). Records that are not checkpoints are skipped."""
    if topic not in await Admin(client).list_topics(internal=True):
        return {}, None
    consumer = Consumer(client)
    found: dict[tuple[str, str, int], CheckpointSeen] = {}
    newest: float | None = None
    try:
        await consumer.start()
        consumer.assign([(topic, 0)])
        consumer.seek_to_beginning((topic, 0))
        end = (await consumer.end_offsets([(topic, 0)]))[(topic, 0)]
        position = (await consumer.beginning_offsets([(topic, 0)]))[(topic, 0)]
        while position < end:
            for record in await consumer.poll(timeout_ms=500):
                position = record.offset + 1
                try:
                    cp = decode_checkpoint(record.key, record.value)
                except ValueError:
                    continue        # a tombstone, or someone else's record
                at = record.timestamp / 1000
                found[(cp.group, cp.topic, cp.partition)] = CheckpointSeen(cp.upstream_offset, cp.downstream_offset, at)
                newest = at if newest is None else max(newest, at)
    finally:
        await consumer.close()
    return found, newest


async def _first_timestamps(client: KafkaClient, offsets: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    """The timestamp of the record at each (topic, partition) offset, where it could be read."""
    consumer = Consumer(client, max_partition_fetch_bytes=64 * 1024)
    found: dict[tuple[str, int], int] = {}
    try:
        await consumer.start()
        consumer.assign(list(offsets))
        for tp, offset in offsets.items():
            consumer.seek(*tp, offset)
        deadline = anyio.current_time() + 2
        while len(found) < len(offsets) and anyio.current_time() < deadline:
            for record in await consumer.poll(timeout_ms=500):
                tp = (record.topic, record.partition)
                if tp not in found and record.offset >= offsets[tp]:
                    found[tp] = record.timestamp
    finally:
        await consumer.close()
    return found
