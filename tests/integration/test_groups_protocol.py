"""Group APIs on the wire, raw: edge cases and error codes of the classic group protocol.

Each case speaks our own codec (core.protocol.messages) over a real socket to a real node, so
no client library can retry, mask or reinterpret what the node answers. Expected codes follow
Kafka's classic group coordinator (ClassicGroup.java / GroupMetadataManager.java).
"""
from __future__ import annotations

import socket
import threading
import time
import uuid

import pytest

from core.protocol import messages as m
from core.protocol.consumer_protocol import decode_assignment
from core.protocol.errors import ErrorCode as E
from core.protocol.records import build_batch
from tests.support.groups import (Wire, assignment, attach_log_on_failure, subscription, wait_for_group_coordinator,
                                  wait_until)
from tests.support.node import SeawayNode

pytestmark = pytest.mark.integration

MAX_METADATA = 64
NODE_CONFIG = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "3",
    "offset.metadata.max.bytes": str(MAX_METADATA),
    "auto.create.topics.enable": "false",
    "offsets.retention.check.interval.ms": "300",
}
TOPIC, OTHER = "gp-topic", "gp-other"   # 3 and 2 partitions
SESSION = 10_000

JoinReq, SyncReq = m.JoinGroupRequest, m.SyncGroupRequest
CommitReq, FetchReq = m.OffsetCommitRequest, m.OffsetFetchRequest


def api_versions(key: int) -> range:
    api = m.API[key]
    return range(api.min_version, api.max_version + 1)


def create_topics(w: Wire, *specs: tuple[str, int]) -> None:
    resp = w.call(19, 7, m.CreateTopicsRequest(timeout_ms=10000, topics=[
        m.CreateTopicsRequest.CreatableTopic(name=n, num_partitions=p, replication_factor=1) for n, p in specs]))
    assert all(t.error_code in (0, E.TOPIC_ALREADY_EXISTS) for t in resp.topics), resp
    # As a client's first FindCoordinator would: the node coordinates groups from here on.
    wait_for_group_coordinator(w, int(NODE_CONFIG["offsets.topic.num.partitions"]))


@pytest.fixture(scope="module")
def node(tmp_path_factory, request):
    with SeawayNode(tmp_path_factory.mktemp("groups_protocol"), NODE_CONFIG) as n:
        attach_log_on_failure(request, "node", n)
        with Wire(n.port) as w:
            create_topics(w, (TOPIC, 3), (OTHER, 2))
        yield n


@pytest.fixture
def w(node):
    with Wire(node.port) as wire:
        yield wire


def gid(prefix: str = "g") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# ---------------------------------------------------------------------------- request builders

def join_req(group, member_id="", *, version=5, protocol_type="consumer", protocols=None, session=SESSION,
             rebalance=30_000, instance=None):
    if protocols is None:
        protocols = [("range", subscription(TOPIC))]
    return JoinReq(group_id=group, session_timeout_ms=session, rebalance_timeout_ms=rebalance,
                   member_id=member_id, group_instance_id=instance if version >= 5 else None,
                   protocol_type=protocol_type, reason=None,
                   protocols=[JoinReq.JoinGroupRequestProtocol(name=n, metadata=md) for n, md in protocols])


def join(w, group, member_id="", version=5, **kw):
    return w.call(11, version, join_req(group, member_id, version=version, **kw))


def join_new(w, group, version=5, **kw):
    """A new dynamic member's join: v4+ first gets MEMBER_ID_REQUIRED with its id (KIP-394)."""
    resp = join(w, group, "", version, **kw)
    if version >= 4 and kw.get("instance") is None:
        assert resp.error_code == E.MEMBER_ID_REQUIRED, resp
        assert resp.member_id and resp.generation_id == -1
        resp = join(w, group, resp.member_id, version, **kw)
    return resp


def sync(w, group, generation, member_id, assignments=(), version=3, instance=None, protocol=(None, None)):
    return w.call(14, version, SyncReq(
        group_id=group, generation_id=generation, member_id=member_id,
        group_instance_id=instance if version >= 3 else None,
        protocol_type=protocol[0], protocol_name=protocol[1],
        assignments=[SyncReq.SyncGroupRequestAssignment(member_id=mid, assignment=a) for mid, a in assignments]))


def heartbeat(w, group, generation, member_id, version=4, instance=None):
    return w.call(12, version, m.HeartbeatRequest(group_id=group, generation_id=generation, member_id=member_id,
                                                  group_instance_id=instance if version >= 3 else None))


def commit_req(group, offsets, generation=-1, member_id="", version=8, metadata="", retention=-1):
    topics: dict[str, list] = {}
    for (t, p), o in offsets.items():
        topics.setdefault(t, []).append(CommitReq.OffsetCommitRequestPartition(
            partition_index=p, committed_offset=o, committed_leader_epoch=-1, commit_timestamp=-1,
            committed_metadata=metadata))
    return CommitReq(group_id=group, generation_id_or_member_epoch=generation, member_id=member_id,
                     group_instance_id=None, retention_time_ms=retention,
                     topics=[CommitReq.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in topics.items()])


def commit(w, group, offsets, generation=-1, member_id="", version=8, metadata="", retention=-1):
    """{(topic, partition): error code}"""
    resp = w.call(8, version, commit_req(group, offsets, generation, member_id, version, metadata, retention))
    return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


def fetch(w, group, topics: dict[str, list[int]] | None, version=7):
    """{(topic, partition): (offset, metadata, error)}, top-level error"""
    if version >= 8:
        resp = w.call(9, version, FetchReq(require_stable=False, groups=[FetchReq.OffsetFetchRequestGroup(
            group_id=group, member_id=None, member_epoch=-1,
            topics=None if topics is None else [FetchReq.OffsetFetchRequestTopics(name=t, partition_indexes=ps)
                                                for t, ps in topics.items()])]))
        g = resp.groups[0]
        return {(t.name, p.partition_index): (p.committed_offset, p.metadata, p.error_code)
                for t in g.topics for p in t.partitions}, g.error_code
    resp = w.call(9, version, FetchReq(group_id=group, require_stable=False, topics=None if topics is None else [
        FetchReq.OffsetFetchRequestTopic(name=t, partition_indexes=ps) for t, ps in topics.items()]))
    return {(t.name, p.partition_index): (p.committed_offset, p.metadata, p.error_code)
            for t in resp.topics for p in t.partitions}, getattr(resp, "error_code", 0)


def describe(w, group, version=5):
    return w.call(15, version, m.DescribeGroupsRequest(groups=[group], include_authorized_operations=False)).groups[0]


def list_groups(w, version=4, states=()):
    resp = w.call(16, version, m.ListGroupsRequest(states_filter=list(states), types_filter=[]))
    assert resp.error_code == 0
    return {g.group_id: g for g in resp.groups}


def delete_groups(w, *groups, version=2):
    resp = w.call(42, version, m.DeleteGroupsRequest(groups_names=list(groups)))
    return [(r.group_id, r.error_code) for r in resp.results]


def offset_delete(w, group, topics: dict[str, list[int]]):
    Req = m.OffsetDeleteRequest
    resp = w.call(47, 0, Req(group_id=group, topics=[
        Req.OffsetDeleteRequestTopic(
            name=t, partitions=[Req.OffsetDeleteRequestPartition(partition_index=p) for p in ps])
        for t, ps in topics.items()]))
    return resp.error_code, {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


def stable_member(w, group, topics=(TOPIC,), parts=None, version=5, **kw):
    """One member that joined and synced (it leads and assigns itself ``parts``): (member id, generation)."""
    resp = join_new(w, group, version, protocols=[("range", subscription(*topics))], **kw)
    assert resp.error_code == 0, resp
    assert resp.leader == resp.member_id
    parts = parts if parts is not None else {TOPIC: [0, 1, 2]}
    s = sync(w, group, resp.generation_id, resp.member_id, [(resp.member_id, assignment(parts))],
             instance=kw.get("instance"))
    assert s.error_code == 0, s
    return resp.member_id, resp.generation_id


# ---------------------------------------------------------------------------- JoinGroup

@pytest.mark.parametrize("version", api_versions(11))
def test_join_new_member_id_required_from_v4(w, version):
    group = gid("join")
    first = join(w, group, "", version)
    if version >= 4:
        assert (first.error_code, first.generation_id) == (E.MEMBER_ID_REQUIRED, -1)
        assert first.member_id.startswith("groups-test-"), "the id starts with the client id, as Kafka's"
        assert first.members == [] and first.leader == ""
        again = join(w, group, first.member_id, version)
    else:
        again = first  # before KIP-394 the first join is the join
    assert again.error_code == 0, again
    assert again.generation_id == 1 and again.leader == again.member_id
    assert again.protocol_name == "range"
    if version >= 7:
        assert again.protocol_type == "consumer"
    assert [mm.member_id for mm in again.members] == [again.member_id]
    assert again.members[0].metadata == subscription(TOPIC)
    if version >= 4:
        assert again.member_id == first.member_id


@pytest.mark.parametrize("case, kw, code", [
    ("session below group.min.session.timeout.ms", dict(session=5999), E.INVALID_SESSION_TIMEOUT),
    ("session above group.max.session.timeout.ms", dict(session=1_800_001), E.INVALID_SESSION_TIMEOUT),
    ("empty group id", dict(group=""), E.INVALID_GROUP_ID),
    ("unknown member id of an unknown group", dict(member_id="nobody"), E.UNKNOWN_MEMBER_ID),
    ("empty protocol type", dict(protocol_type=""), E.INCONSISTENT_GROUP_PROTOCOL),
    ("no protocols", dict(protocols=[]), E.INCONSISTENT_GROUP_PROTOCOL),
])
def test_join_refused(w, case, kw, code):
    group = kw.pop("group", gid("refused"))
    member_id = kw.pop("member_id", "")
    resp = join(w, group, member_id, **kw)
    assert resp.error_code == code, case
    assert resp.generation_id == -1
    if group:
        assert describe(w, group).group_state == "Dead", "a refused join leaves no group behind"


@pytest.mark.parametrize("case, kw", [
    ("another protocol type", dict(protocol_type="connect")),
    ("no protocol in common", dict(protocols=[("roundrobin", subscription(TOPIC))])),
])
def test_join_inconsistent_group_protocol(w, case, kw):
    group = gid("inconsistent")
    stable_member(w, group)
    assert join(w, group, "", 5, **kw).error_code == E.INCONSISTENT_GROUP_PROTOCOL, case
    assert describe(w, group).group_state == "Stable", "the refused member did not disturb the group"


def test_rebalance_two_members_and_heartbeat_during_rebalance(node, w):
    """A second member parks in JoinGroup; the first learns of it through REBALANCE_IN_PROGRESS,
    rejoins, and both get the new generation; followers get no member list."""
    group = gid("rebalance")
    a, gen = stable_member(w, group)
    assert heartbeat(w, group, gen, a).error_code == 0
    with Wire(node.port, client_id="second") as w2:
        b_id = join(w2, group).member_id
        parked = w2.send(11, 5, join_req(group, b_id))
        with pytest.raises(socket.timeout):
            w2.recv(parked, timeout=0.5)  # waits for a to rejoin
        assert describe(w, group).group_state == "PreparingRebalance"
        assert heartbeat(w, group, gen, a).error_code == E.REBALANCE_IN_PROGRESS
        ra = join(w, group, a)
        rb = w2.recv(parked, timeout=10)
        assert ra.error_code == rb.error_code == 0
        assert ra.generation_id == rb.generation_id == gen + 1
        assert ra.leader == rb.leader == a, "the leader stays"
        assert sorted(mm.member_id for mm in ra.members) == sorted([a, b_id]) and rb.members == []
        # CompletingRebalance: a follower's SyncGroup waits for the leader's
        parked_sync = w2.send(14, 3, SyncReq(group_id=group, generation_id=gen + 1, member_id=b_id,
                                             group_instance_id=None, assignments=[]))
        assert heartbeat(w, group, gen + 1, a).error_code == 0, "heartbeats are fine while awaiting sync"
        sa = sync(w, group, gen + 1, a, [(a, assignment({TOPIC: [0, 1]})), (b_id, assignment({TOPIC: [2]}))])
        sb = w2.recv(parked_sync, timeout=10)
        assert sa.error_code == sb.error_code == 0
        assert decode_assignment(sa.assignment).partitions == {TOPIC: [0, 1]}
        assert decode_assignment(sb.assignment).partitions == {TOPIC: [2]}
        d = describe(w, group)
        assert d.group_state == "Stable" and d.protocol_data == "range" and len(d.members) == 2


def test_member_that_does_not_rejoin_within_the_rebalance_timeout_is_removed(node, w):
    """Heartbeats keep a member's session but not its place: the rebalance completes without a
    member that does not rejoin within the rebalance timeout."""
    group = gid("slow")
    a, gen = stable_member(w, group, rebalance=1500)
    with Wire(node.port, client_id="newcomer") as w2:
        b_id = join(w2, group, rebalance=1500).member_id
        started = time.monotonic()
        parked = w2.send(11, 5, join_req(group, b_id, rebalance=1500))
        wait_until(lambda: describe(w, group).group_state == "PreparingRebalance", 5, "b's join to arrive")
        while True:  # a stays alive but never rejoins
            code = heartbeat(w, group, gen, a).error_code
            if code != E.REBALANCE_IN_PROGRESS:
                break
            assert time.monotonic() - started < 10, "the rebalance never completed"
            time.sleep(0.2)
        rb = w2.recv(parked, timeout=10)
        took = time.monotonic() - started
        assert code == E.UNKNOWN_MEMBER_ID, "a was removed from the group"
        assert 1.2 <= took <= 6, took
        assert rb.error_code == 0 and rb.generation_id == gen + 1
        assert rb.leader == b_id and [mm.member_id for mm in rb.members] == [b_id]
        assert join(w, group, a).error_code == E.UNKNOWN_MEMBER_ID


def test_commit_while_awaiting_assignment_is_rebalance_in_progress(node, w):
    group = gid("completing")
    a = join_new(w, group)
    assert a.error_code == 0 and describe(w, group).group_state == "CompletingRebalance"
    codes = commit(w, group, {(TOPIC, 0): 1}, a.generation_id, a.member_id)
    assert codes == {(TOPIC, 0): E.REBALANCE_IN_PROGRESS}
    assert sync(w, group, a.generation_id, a.member_id, [(a.member_id, assignment({TOPIC: [0]}))]).error_code == 0
    assert commit(w, group, {(TOPIC, 0): 1}, a.generation_id, a.member_id) == {(TOPIC, 0): 0}


# ---------------------------------------------------------------------------- SyncGroup, Heartbeat

@pytest.mark.parametrize("case, call, code", [
    ("sync: wrong generation", lambda w, g, mid, gen: sync(w, g, gen + 1, mid), E.ILLEGAL_GENERATION),
    ("sync: unknown member", lambda w, g, mid, gen: sync(w, g, gen, "nobody"), E.UNKNOWN_MEMBER_ID),
    ("sync: unknown group", lambda w, g, mid, gen: sync(w, g + "-x", gen, mid), E.UNKNOWN_MEMBER_ID),
    ("sync v5: other protocol name", lambda w, g, mid, gen: sync(w, g, gen, mid, version=5,
                                                                 protocol=("consumer", "roundrobin")),
     E.INCONSISTENT_GROUP_PROTOCOL),
    ("sync v5: other protocol type", lambda w, g, mid, gen: sync(w, g, gen, mid, version=5,
                                                                 protocol=("connect", "range")),
     E.INCONSISTENT_GROUP_PROTOCOL),
    ("heartbeat: unknown member", lambda w, g, mid, gen: heartbeat(w, g, gen, "nobody"), E.UNKNOWN_MEMBER_ID),
    ("heartbeat: wrong generation", lambda w, g, mid, gen: heartbeat(w, g, gen - 1, mid), E.ILLEGAL_GENERATION),
    ("heartbeat: unknown static instance", lambda w, g, mid, gen: heartbeat(w, g, gen, mid, instance="i-none"),
     E.UNKNOWN_MEMBER_ID),
    ("commit: wrong generation", lambda w, g, mid, gen: _commit_code(w, g, gen + 1, mid), E.ILLEGAL_GENERATION),
    ("commit: unknown member", lambda w, g, mid, gen: _commit_code(w, g, gen, "nobody"), E.UNKNOWN_MEMBER_ID),
    ("commit: generation -1 while the group has members", lambda w, g, mid, gen: _commit_code(w, g, -1, ""),
     E.UNKNOWN_MEMBER_ID),
    ("leave v3: unknown member", lambda w, g, mid, gen: _leave_code(w, g, "nobody"), E.UNKNOWN_MEMBER_ID),
])
def test_member_checks(w, case, call, code):
    group = gid("checks")
    mid, gen = stable_member(w, group)
    resp = call(w, group, mid, gen)
    got = resp if isinstance(resp, int) else resp.error_code
    assert got == code, case
    # the group is undisturbed and its member still valid
    assert heartbeat(w, group, gen, mid).error_code == 0
    assert describe(w, group).group_state == "Stable"


def _commit_code(w, group, generation, member_id):
    codes = commit(w, group, {(TOPIC, 0): 5}, generation, member_id)
    return codes[(TOPIC, 0)]


def _leave_code(w, group, member_id):
    resp = w.call(13, 3, m.LeaveGroupRequest(group_id=group, members=[
        m.LeaveGroupRequest.MemberIdentity(member_id=member_id, group_instance_id=None, reason=None)]))
    assert resp.error_code == 0
    return resp.members[0].error_code


def test_static_member_rejoin_fences_the_old_member_id(w):
    group = gid("static")
    old, gen = stable_member(w, group, instance="inst-1")
    new = join(w, group, "", 5, instance="inst-1")
    assert new.error_code == 0 and new.member_id != old
    assert new.generation_id == gen, "a known static member rejoining a Stable group causes no rebalance"
    assert heartbeat(w, group, gen, old, instance="inst-1").error_code == E.FENCED_INSTANCE_ID
    assert heartbeat(w, group, gen, new.member_id, instance="inst-1").error_code == 0
    s = sync(w, group, gen, new.member_id, instance="inst-1")
    assert s.error_code == 0 and decode_assignment(s.assignment).partitions == {TOPIC: [0, 1, 2]}, \
        "the new member id gets the old one's assignment"
    assert _commit_code(w, group, gen, old) == E.UNKNOWN_MEMBER_ID
    d = describe(w, group)
    assert [(mm.member_id, mm.group_instance_id) for mm in d.members] == [(new.member_id, "inst-1")]
    # the group keeps an offset, so the cleanup (every 300 ms here) leaves it alone once it is
    # Empty; an Empty group with no offsets would rightly be removed (Dead) at any moment
    assert _commit_code(w, group, gen, new.member_id) == 0
    # an admin removes static members by instance id (LeaveGroup v3+, KIP-345)
    resp = w.call(13, 4, m.LeaveGroupRequest(group_id=group, members=[
        m.LeaveGroupRequest.MemberIdentity(member_id="", group_instance_id="inst-1", reason=None),
        m.LeaveGroupRequest.MemberIdentity(member_id="", group_instance_id="inst-none", reason=None)]))
    assert resp.error_code == 0
    assert [(x.group_instance_id, x.error_code) for x in resp.members] == \
        [("inst-1", 0), ("inst-none", E.UNKNOWN_MEMBER_ID)]
    assert describe(w, group).group_state == "Empty"
    assert heartbeat(w, group, gen, new.member_id, instance="inst-1").error_code == E.UNKNOWN_MEMBER_ID


# ---------------------------------------------------------------------------- OffsetCommit / OffsetFetch

def test_offset_commit_per_partition_errors(w):
    group = gid("commit")
    mid, gen = stable_member(w, group)
    codes = commit(w, group, {(TOPIC, 0): 10, (TOPIC, 7): 1, ("no-such-topic", 0): 1}, gen, mid)
    assert codes == {(TOPIC, 0): 0, (TOPIC, 7): E.UNKNOWN_TOPIC_OR_PARTITION,
                     ("no-such-topic", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
    ok = commit(w, group, {(TOPIC, 1): 11}, gen, mid, metadata="x" * MAX_METADATA)
    too_big = commit(w, group, {(TOPIC, 2): 12}, gen, mid, metadata="x" * (MAX_METADATA + 1))
    assert ok == {(TOPIC, 1): 0} and too_big == {(TOPIC, 2): E.OFFSET_METADATA_TOO_LARGE}
    got, err = fetch(w, group, {TOPIC: [0, 1, 2], "no-such-topic": [0]})
    assert err == 0
    assert got == {(TOPIC, 0): (10, "", 0), (TOPIC, 1): (11, "x" * MAX_METADATA, 0), (TOPIC, 2): (-1, "", 0),
                   ("no-such-topic", 0): (-1, "", 0)}


def test_offset_commit_without_group_management(w):
    """Generation -1 and no member id: a consumer that assigns itself; an Empty group appears."""
    group = gid("simple")
    assert commit(w, group, {(TOPIC, 0): 3, (OTHER, 1): 4}) == {(TOPIC, 0): 0, (OTHER, 1): 0}
    assert fetch(w, group, None)[0] == {(TOPIC, 0): (3, "", 0), (OTHER, 1): (4, "", 0)}
    listed = list_groups(w)[group]
    assert (listed.group_state, listed.protocol_type) == ("Empty", "")
    assert commit(w, group, {(TOPIC, 0): 5}, generation=1, member_id="x") == {(TOPIC, 0): E.UNKNOWN_MEMBER_ID}


def test_offset_commit_v2_retention_expires_offsets(w):
    """OffsetCommit v2-4 may set a retention per commit; those offsets expire when it ends, and
    a simple group left with no offsets goes away (Kafka's cleanupGroupMetadata)."""
    short, kept = gid("retention"), gid("retention")
    committed_at = time.monotonic()
    assert commit(w, short, {(TOPIC, 0): 1, (TOPIC, 1): 2}, version=2, retention=2500) == {(TOPIC, 0): 0, (TOPIC, 1): 0}
    assert commit(w, kept, {(TOPIC, 0): 3}, version=2, retention=-1) == {(TOPIC, 0): 0}
    assert fetch(w, short, None)[0] == {(TOPIC, 0): (1, "", 0), (TOPIC, 1): (2, "", 0)}
    wait_until(lambda: fetch(w, short, None)[0] == {}, 15, "the offsets to expire", interval=0.2)
    assert time.monotonic() - committed_at >= 2.0, "expired before their retention"
    wait_until(lambda: short not in list_groups(w), 5, "the emptied group to go away", interval=0.2)
    assert fetch(w, kept, None)[0] == {(TOPIC, 0): (3, "", 0)}
    assert kept in list_groups(w)


@pytest.mark.parametrize("version", range(2, 8))
def test_offset_fetch_null_topics_returns_everything(w, version):
    group = gid("fetchall")
    commit(w, group, {(TOPIC, 0): 1, (TOPIC, 2): 3, (OTHER, 0): 7})
    got, err = fetch(w, group, None, version)
    assert err == 0
    assert {k: v[0] for k, v in got.items()} == {(TOPIC, 0): 1, (TOPIC, 2): 3, (OTHER, 0): 7}


def test_offset_fetch_v8_several_groups(w):
    g1, g2, unknown = gid("multi"), gid("multi"), gid("never")
    commit(w, g1, {(TOPIC, 0): 10, (TOPIC, 1): 11})
    commit(w, g2, {(OTHER, 1): 21})
    G = FetchReq.OffsetFetchRequestGroup
    resp = w.call(9, 8, FetchReq(require_stable=False, groups=[
        G(group_id=g1, member_id=None, member_epoch=-1,
          topics=[FetchReq.OffsetFetchRequestTopics(name=TOPIC, partition_indexes=[1, 2])]),
        G(group_id=g2, member_id=None, member_epoch=-1, topics=None),
        G(group_id=unknown, member_id=None, member_epoch=-1, topics=None),
    ]))
    out = {g.group_id: (g.error_code, {(t.name, p.partition_index): p.committed_offset for t in g.topics
                                       for p in t.partitions}) for g in resp.groups}
    assert out == {g1: (0, {(TOPIC, 1): 11, (TOPIC, 2): -1}), g2: (0, {(OTHER, 1): 21}), unknown: (0, {})}
    assert [g.group_id for g in resp.groups] == [g1, g2, unknown], "answered in the order asked"


def test_list_groups_filters(w):
    stable, simple = gid("lst"), gid("lst")
    stable_member(w, stable)
    commit(w, simple, {(TOPIC, 0): 1})
    assert {stable, simple} <= set(list_groups(w, version=3))
    only_empty = list_groups(w, version=4, states=["EMPTY"])
    assert simple in only_empty and stable not in only_empty, "states match case-insensitively"
    resp = w.call(16, 5, m.ListGroupsRequest(states_filter=[], types_filter=["Classic"]))
    assert {stable, simple} <= {g.group_id for g in resp.groups}
    assert {g.group_type for g in resp.groups} == {"classic"}
    resp = w.call(16, 5, m.ListGroupsRequest(states_filter=[], types_filter=["consumer"]))
    assert resp.error_code == 0 and resp.groups == [], "no KIP-848 groups here"


# ---------------------------------------------------------------------------- OffsetDelete, DeleteGroups

def test_offset_delete(w):
    group = gid("odel")
    mid, gen = stable_member(w, group, topics=(TOPIC,))
    assert commit(w, group, {(TOPIC, 0): 5, (OTHER, 0): 6, (OTHER, 1): 7}, gen, mid) == \
        {(TOPIC, 0): 0, (OTHER, 0): 0, (OTHER, 1): 0}
    err, parts = offset_delete(w, group, {TOPIC: [0], OTHER: [0], "no-such-topic": [0]})
    assert err == 0
    assert parts == {(TOPIC, 0): E.GROUP_SUBSCRIBED_TO_TOPIC, (OTHER, 0): 0,
                     ("no-such-topic", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
    got, _ = fetch(w, group, None)
    assert {k: v[0] for k, v in got.items()} == {(TOPIC, 0): 5, (OTHER, 1): 7}

    assert offset_delete(w, gid("never"), {TOPIC: [0]}) == (E.GROUP_ID_NOT_FOUND, {})
    # a live group of another protocol type has no subscriptions to go by
    other = gid("connect")
    resp = join_new(w, other, protocol_type="connect", protocols=[("default", b"\x00\x01")])
    assert sync(w, other, resp.generation_id, resp.member_id, [(resp.member_id, b"x")]).error_code == 0
    assert offset_delete(w, other, {TOPIC: [0]}) == (E.NON_EMPTY_GROUP, {})
    # an Empty group may lose any of its offsets
    simple = gid("simple")
    commit(w, simple, {(TOPIC, 0): 1, (TOPIC, 1): 2})
    assert offset_delete(w, simple, {TOPIC: [0]}) == (0, {(TOPIC, 0): 0})
    assert fetch(w, simple, None)[0] == {(TOPIC, 1): (2, "", 0)}


def test_delete_groups(w):
    live, empty, unknown = gid("live"), gid("empty"), gid("never")
    stable_member(w, live)
    commit(w, empty, {(TOPIC, 0): 9})
    result = delete_groups(w, live, empty, unknown, empty)
    assert result == [(live, E.NON_EMPTY_GROUP), (empty, 0), (unknown, E.GROUP_ID_NOT_FOUND)], \
        "one result per group, duplicates answered once"
    groups = list_groups(w)
    assert empty not in groups and live in groups
    assert fetch(w, empty, {TOPIC: [0]})[0] == {(TOPIC, 0): (-1, "", 0)}, "its offsets went with it"


@pytest.mark.parametrize("how", ["graceful", "kill-9"])
def test_deleted_group_stays_deleted_after_restart(tmp_path, how):
    with SeawayNode(tmp_path, NODE_CONFIG) as node:
        with Wire(node.port) as w:
            create_topics(w, (TOPIC, 3))
            # a consumer group that emptied (it has a metadata record) and a simple one
            managed, simple, kept = "managed", "simple", "kept"
            mid, gen = stable_member(w, managed)
            assert commit(w, managed, {(TOPIC, 0): 4}, gen, mid) == {(TOPIC, 0): 0}
            assert w.call(13, 1, m.LeaveGroupRequest(group_id=managed, member_id=mid)).error_code == 0
            commit(w, simple, {(TOPIC, 1): 5})
            commit(w, kept, {(TOPIC, 2): 6})
            assert describe(w, managed).group_state == "Empty"
            assert delete_groups(w, managed, simple) == [(managed, 0), (simple, 0)]
        if how == "graceful":
            assert node.stop() == 0
        else:
            node.kill()
        node.start()
        with Wire(node.port) as w:
            groups = list_groups(w)
            assert managed not in groups and simple not in groups
            assert groups[kept].group_state == "Empty"
            assert fetch(w, managed, None)[0] == {} and fetch(w, simple, None)[0] == {}
            assert fetch(w, kept, None)[0] == {(TOPIC, 2): (6, "", 0)}
            assert describe(w, managed).group_state == "Dead"
            # and the name can be used again from scratch
            resp = join_new(w, managed)
            assert resp.error_code == 0 and resp.generation_id == 1


def test_offsets_survive_compaction_of_consumer_offsets_and_a_crash(tmp_path):
    """Many commits roll __consumer_offsets segments and the cleaner compacts them; a node
    killed afterwards loads the latest offset of every partition, and deletions stay deleted."""
    config = {**NODE_CONFIG, "offsets.topic.num.partitions": "1", "offsets.topic.segment.bytes": "1024",
              "log.cleaner.backoff.ms": "200"}
    with SeawayNode(tmp_path, config) as node:
        with Wire(node.port) as w:
            create_topics(w, (TOPIC, 3))
            mid, gen = stable_member(w, "busy")
            for i in range(150):
                assert set(commit(w, "busy", {(TOPIC, p): i * 10 + p for p in range(3)}, gen, mid,
                                  metadata=f"m{i}").values()) == {0}
            for i in range(30):
                commit(w, "doomed", {(TOPIC, 0): i})
            assert delete_groups(w, "doomed") == [("doomed", 0)]
            for i in range(30):
                commit(w, "simple", {(TOPIC, 1): 100 + i})
            wait_until(lambda: "compacted" in node.log_path.read_text(), 20,
                       "the cleaner to compact __consumer_offsets")
            segments = list((node.data_dir / "__consumer_offsets-0").glob("*.log"))
            assert len(segments) >= 2
        node.kill()
        node.start()
        with Wire(node.port) as w:
            got, _ = fetch(w, "busy", None)
            assert got == {(TOPIC, p): (1490 + p, "m149", 0) for p in range(3)}
            assert fetch(w, "simple", None)[0] == {(TOPIC, 1): (129, "", 0)}
            assert fetch(w, "doomed", None)[0] == {}
            groups = list_groups(w)
            assert "doomed" not in groups and groups["simple"].group_state == "Empty"
            # the member is still there after the crash, in its generation
            assert groups["busy"].group_state == "Stable"
            assert heartbeat(w, "busy", gen, mid).error_code == 0
            assert commit(w, "busy", {(TOPIC, 0): 7}, gen, mid) == {(TOPIC, 0): 0}


# ---------------------------------------------------------------------------- __consumer_offsets, FindCoordinator

def test_produce_to_consumer_offsets_is_refused(w):
    assert w.call(10, 3, m.FindCoordinatorRequest(key="any", key_type=0)).error_code == 0  # creates the topic
    req = m.ProduceRequest(acks=-1, timeout_ms=5000, transactional_id=None, topic_data=[
        m.ProduceRequest.TopicProduceData(name="__consumer_offsets", partition_data=[
            m.ProduceRequest.PartitionProduceData(index=0, records=build_batch([(b"k", b"v", [], 1000)]))])])
    resp = w.call(0, 9, req)
    assert resp.responses[0].partition_responses[0].error_code == E.INVALID_TOPIC_EXCEPTION


def test_deleting_consumer_offsets_is_refused(w):
    """Deleting it would lose every group's committed offsets at the next restart."""
    assert w.call(10, 3, m.FindCoordinatorRequest(key="any", key_type=0)).error_code == 0
    resp = w.call(20, 6, m.DeleteTopicsRequest(
        topics=[m.DeleteTopicsRequest.DeleteTopicState(name="__consumer_offsets", topic_id=bytes(16))],
        timeout_ms=5000))
    assert resp.responses[0].error_code == E.INVALID_TOPIC_EXCEPTION
    assert "internal" in resp.responses[0].error_message
    meta = w.call(3, 12, m.MetadataRequest(topics=[m.MetadataRequest.MetadataRequestTopic(
        name="__consumer_offsets", topic_id=bytes(16))], allow_auto_topic_creation=False,
        include_topic_authorized_operations=False))
    assert meta.topics[0].error_code == 0 and meta.topics[0].is_internal


def _until_found(ask, timeout: float = 20.0):
    """Ask until no answer says COORDINATOR_NOT_AVAILABLE; every other answer is final."""
    deadline = time.monotonic() + timeout
    while True:
        answers = ask()
        if all(a.error_code != E.COORDINATOR_NOT_AVAILABLE for a in answers) or time.monotonic() > deadline:
            return answers
        time.sleep(0.1)


@pytest.mark.parametrize("version", api_versions(10))
def test_find_coordinator(node, w, version):
    F = m.FindCoordinatorRequest
    if version >= 4:
        resp = w.call(10, version, F(key_type=0, coordinator_keys=["a", "b", gid()]))
        assert [(c.key != "", c.error_code, c.node_id, c.host, c.port) for c in resp.coordinators] == \
            [(True, 0, 1, "127.0.0.1", node.port)] * 3
        # transactional ids: __transaction_state is created by the first lookup, which is
        # told to retry (COORDINATOR_NOT_AVAILABLE) until it exists
        txn = _until_found(lambda: w.call(10, version, F(key_type=1, coordinator_keys=["t1", "t2"])).coordinators)
        assert [(c.key, c.error_code, c.node_id, c.port) for c in txn] == \
            [("t1", 0, 1, node.port), ("t2", 0, 1, node.port)]
        bad = w.call(10, version, F(key_type=7, coordinator_keys=["x"]))
        assert bad.coordinators[0].error_code == E.INVALID_REQUEST
        return
    resp = w.call(10, version, F(key=gid(), key_type=0))
    assert (resp.error_code, resp.node_id, resp.host, resp.port) == (0, 1, "127.0.0.1", node.port)
    if version >= 1:
        txn = _until_found(lambda: [w.call(10, version, F(key="t1", key_type=1))])[0]
        assert (txn.error_code, txn.node_id, txn.port) == (0, 1, node.port)
        assert w.call(10, version, F(key="x", key_type=7)).error_code == E.INVALID_REQUEST


# ---------------------------------------------------------------------------- timing: expiry, shutdown

def test_session_expiry_removes_a_silent_member(node, w):
    """Two members with 6 s sessions; one keeps heartbeating, the other goes silent and must be
    gone after its session, not before; the survivor is told to rejoin and does, alone."""
    group = gid("expiry")
    session = 6000
    with Wire(node.port, client_id="silent") as w2:
        a = join_new(w, group, session=session)
        b_id = join(w2, group, session=session).member_id
        parked_b = w2.send(11, 5, join_req(group, b_id, session=session))
        wait_until(lambda: describe(w, group).group_state == "PreparingRebalance", 5, "b's join to arrive")
        assert heartbeat(w, group, a.generation_id, a.member_id).error_code == E.REBALANCE_IN_PROGRESS
        ra, rb = join(w, group, a.member_id, session=session), w2.recv(parked_b, timeout=10)
        assert ra.error_code == rb.error_code == 0 and ra.generation_id == rb.generation_id
        gen = ra.generation_id
        assignments = [(a.member_id, assignment({TOPIC: [0, 1]})), (b_id, assignment({TOPIC: [2]}))]
        parked_sync = w2.send(14, 3, SyncReq(group_id=group, generation_id=gen, member_id=b_id,
                                             group_instance_id=None, assignments=[]))
        assert sync(w, group, gen, a.member_id, assignments).error_code == 0
        assert w2.recv(parked_sync, timeout=10).error_code == 0
        silent_from = time.monotonic()   # b never sends anything again

        def a_heartbeat():
            return heartbeat(w, group, gen, a.member_id).error_code

        while time.monotonic() - silent_from < 4.0:  # well inside b's session
            assert a_heartbeat() == 0
            time.sleep(0.5)
        assert len(describe(w, group).members) == 2, "b expired before its session timeout"
        code = wait_until(lambda: a_heartbeat() or None, 10, "b's session to expire", interval=0.5)
        expired_after = time.monotonic() - silent_from
        assert code == E.REBALANCE_IN_PROGRESS and 5.0 <= expired_after <= 10.0, (code, expired_after)
        again = join(w, group, a.member_id, session=session)
        assert again.error_code == 0 and again.generation_id == gen + 1
        assert [mm.member_id for mm in again.members] == [a.member_id]
        assert heartbeat(w2, group, gen, b_id).error_code == E.UNKNOWN_MEMBER_ID


def test_members_reloaded_after_a_crash_expire_if_they_never_come_back(tmp_path):
    """A restart brings a group back Stable with its members; one that reconnects carries on,
    one that never does is removed once its session runs out, counted from the restart."""
    with SeawayNode(tmp_path, NODE_CONFIG) as node:
        group = "reloaded"
        with Wire(node.port) as w, Wire(node.port, client_id="gone") as w2:
            create_topics(w, (TOPIC, 3))
            a = join_new(w, group, session=6000)
            b_id = join(w2, group, session=6000).member_id
            parked = w2.send(11, 5, join_req(group, b_id, session=6000))
            wait_until(lambda: describe(w, group).group_state == "PreparingRebalance", 5, "b's join to arrive")
            gen = join(w, group, a.member_id, session=6000).generation_id
            assert w2.recv(parked, timeout=10).error_code == 0
            assert sync(w, group, gen, a.member_id, [(a.member_id, assignment({TOPIC: [0, 1]})),
                                                     (b_id, assignment({TOPIC: [2]}))]).error_code == 0
            assert sync(w2, group, gen, b_id).error_code == 0
        node.kill()
        node.start()
        restarted = time.monotonic()
        with Wire(node.port) as w:
            d = describe(w, group)
            assert d.group_state == "Stable" and sorted(mm.member_id for mm in d.members) == sorted([a.member_id, b_id])
            assert decode_assignment(
                next(mm for mm in d.members if mm.member_id == b_id).member_assignment).partitions == {TOPIC: [2]}
            while time.monotonic() - restarted < 4:
                assert heartbeat(w, group, gen, a.member_id).error_code == 0
                time.sleep(0.5)
            code = wait_until(lambda: heartbeat(w, group, gen, a.member_id).error_code or None, 10,
                              "b to expire", interval=0.5)
            assert code == E.REBALANCE_IN_PROGRESS and time.monotonic() - restarted >= 5
            again = join(w, group, a.member_id, session=6000)
            assert again.error_code == 0 and again.generation_id == gen + 1
            assert [mm.member_id for mm in again.members] == [a.member_id]


def test_parked_requests_are_answered_when_the_node_shuts_down(tmp_path):
    """A JoinGroup and a SyncGroup waiting in the coordinator get NOT_COORDINATOR at a graceful
    shutdown, so that clients look for the coordinator again, and the node does not wait for
    their (60 s) rebalance timeout."""
    with SeawayNode(tmp_path, {**NODE_CONFIG, "shutdown.timeout.ms": "30000"}) as node:
        with Wire(node.port) as w, Wire(node.port) as w_join, Wire(node.port) as w_sync:
            create_topics(w, (TOPIC, 3))
            # group 1: a is Stable; b's join waits for a to rejoin
            g1 = gid("parked-join")
            stable_member(w, g1, rebalance=60_000)
            b_id = join(w_join, g1, rebalance=60_000).member_id
            parked_join = w_join.send(11, 5, join_req(g1, b_id, rebalance=60_000))
            wait_until(lambda: describe(w, g1).group_state == "PreparingRebalance", 5, "b's join to arrive")
            # group 2: c and d joined; d's sync waits for the leader c, who never syncs
            g2 = gid("parked-sync")
            with Wire(node.port) as w_c:
                c = join_new(w_c, g2, rebalance=60_000)
                assert c.error_code == 0
                d_id = join(w_sync, g2, rebalance=60_000).member_id
                parked = w_sync.send(11, 5, join_req(g2, d_id, rebalance=60_000))
                wait_until(lambda: describe(w, g2).group_state == "PreparingRebalance", 5, "d's join to arrive")
                assert join(w_c, g2, c.member_id, rebalance=60_000).error_code == 0
                d = w_sync.recv(parked, timeout=10)
                assert d.error_code == 0
                parked_sync = w_sync.send(14, 3, SyncReq(group_id=g2, generation_id=d.generation_id,
                                                         member_id=d_id, group_instance_id=None, assignments=[]))
                for wire, cid in ((w_join, parked_join), (w_sync, parked_sync)):
                    with pytest.raises(socket.timeout):
                        wire.recv(cid, timeout=0.3)

                answers = {}

                def collect(name, wire, cid):
                    try:
                        answers[name] = wire.recv(cid, timeout=20).error_code
                    except Exception as exc:  # noqa: BLE001 - reported below
                        answers[name] = exc

                threads = [threading.Thread(target=collect, args=("join", w_join, parked_join)),
                           threading.Thread(target=collect, args=("sync", w_sync, parked_sync))]
                for t in threads:
                    t.start()
                started = time.monotonic()
                assert node.stop(timeout=40) == 0
                took = time.monotonic() - started
                for t in threads:
                    t.join(25)
        assert answers == {"join": E.NOT_COORDINATOR, "sync": E.NOT_COORDINATOR}
        assert took < 8, f"shutdown took {took:.1f}s with parked group requests"


# ---------------------------------------------------------------------------- version sweep

SWEEP_APIS = {k: m.API[k].max_version for k in (10, 11, 14, 12, 8, 9, 15, 16, 13, 42, 47)}


@pytest.mark.parametrize("step", range(max(SWEEP_APIS.values()) + 1))
def test_every_version_of_every_group_api(w, step):
    """A whole group life cycle with each API at version min(step, its max): every version
    encodes, decodes and behaves."""
    v = {k: min(step, top) for k, top in SWEEP_APIS.items()}
    group = gid(f"sweep{step}")
    F = m.FindCoordinatorRequest
    if v[10] >= 4:
        assert w.call(10, v[10], F(key_type=0, coordinator_keys=[group])).coordinators[0].error_code == 0
    else:
        assert w.call(10, v[10], F(key=group, key_type=0)).error_code == 0

    joined = join_new(w, group, v[11], session=SESSION, rebalance=20_000)
    assert joined.error_code == 0 and joined.generation_id == 1, joined
    mid, gen = joined.member_id, joined.generation_id
    s = sync(w, group, gen, mid, [(mid, assignment({TOPIC: [0, 1, 2]}))], version=v[14],
             protocol=("consumer", "range") if v[14] >= 5 else (None, None))
    assert s.error_code == 0 and decode_assignment(s.assignment).partitions == {TOPIC: [0, 1, 2]}
    if v[14] >= 5:
        assert (s.protocol_type, s.protocol_name) == ("consumer", "range")
    assert heartbeat(w, group, gen, mid, version=v[12]).error_code == 0

    if v[8] == 0:  # v0 has no generation: it commits for a group without members
        target, gen_, mid_ = gid("sweep-simple"), -1, ""
    else:
        target, gen_, mid_ = group, gen, mid
    assert commit(w, target, {(TOPIC, 0): 40 + step, (TOPIC, 2): 42}, gen_, mid_, version=v[8], metadata="m") == \
        {(TOPIC, 0): 0, (TOPIC, 2): 0}
    got, err = fetch(w, target, {TOPIC: [0, 1, 2]}, version=v[9])
    assert err == 0
    want_epoch_free = {(TOPIC, 0): (40 + step, "m", 0), (TOPIC, 1): (-1, "", 0), (TOPIC, 2): (42, "m", 0)}
    assert {k: (o, md or "", e) for k, (o, md, e) in got.items()} == want_epoch_free

    d = describe(w, group, version=v[15])
    assert (d.error_code, d.group_state, d.protocol_type, d.protocol_data) == (0, "Stable", "consumer", "range")
    assert [(mm.member_id, mm.client_id, mm.client_host) for mm in d.members] == [(mid, "groups-test", "/127.0.0.1")]
    assert decode_assignment(d.members[0].member_assignment).partitions == {TOPIC: [0, 1, 2]}
    assert d.members[0].member_metadata == subscription(TOPIC)
    listed = list_groups(w, version=v[16], states=["stable"] if v[16] >= 4 else ())
    assert listed[group].protocol_type == "consumer"
    if v[16] >= 4:
        assert listed[group].group_state == "Stable"

    if target != group:
        # give the group an offset too: the cleanup (every 300 ms here) removes an Empty group
        # that has none, which would race the Empty and DeleteGroups checks below
        assert commit(w, group, {(TOPIC, 1): 1}, gen, mid) == {(TOPIC, 1): 0}
    if v[13] >= 3:
        leave = w.call(13, v[13], m.LeaveGroupRequest(group_id=group, members=[
            m.LeaveGroupRequest.MemberIdentity(member_id=mid, group_instance_id=None, reason="sweep")]))
        assert leave.error_code == 0 and [(x.member_id, x.error_code) for x in leave.members] == [(mid, 0)]
    else:
        assert w.call(13, v[13], m.LeaveGroupRequest(group_id=group, member_id=mid)).error_code == 0
    assert describe(w, group).group_state == "Empty"
    if target == group:
        assert offset_delete(w, group, {TOPIC: [2]}) == (0, {(TOPIC, 2): 0})
    assert delete_groups(w, group, version=v[42]) == [(group, 0)]
    assert describe(w, group).group_state == "Dead"


def test_admin_removes_members_that_will_never_leave_themselves(node, w):
    """Admin.remove_members (LeaveGroup v3+, as Kafka's removeMembersFromConsumerGroup): a
    member that stopped heartbeating is gone at once, not a session later; an unknown member
    gets its own error, and the group's others are untouched."""
    import anyio

    from core.client import Admin, KafkaClient

    group = gid("rm")
    first, _ = stable_member(w, group)

    async def remove(member_ids):
        async with KafkaClient(f"127.0.0.1:{node.port}") as client:
            admin = Admin(client)
            [described] = (await admin.describe_groups([group])).values()
            wanted = [mbr for mbr in described.members if mbr.member_id in member_ids]
            unknown = [type(described.members[0])("nobody", None, "", "", None)]
            result = await admin.remove_members(group, wanted + unknown, reason="test")
            return result, (await admin.describe_groups([group]))[group]

    result, after = anyio.run(remove, {first})
    assert result[first] is None
    assert result["nobody"].code == E.UNKNOWN_MEMBER_ID
    # Empty, or already Dead: this node expires an empty group without offsets within 300 ms.
    assert after.members == [] and after.state in ("Empty", "Dead"), after
