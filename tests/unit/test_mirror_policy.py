"""Replication policies and topic selection (mirror/policy.py), against MM2's behaviour.

Expected names and answers are MM2's (apache/kafka connect/mirror-client
DefaultReplicationPolicy, IdentityReplicationPolicy, ReplicationPolicy; connect/mirror
DefaultTopicFilter, MirrorSourceConnector.shouldReplicateTopic / isCycle). The last part
runs mirror links between simulated clusters - active-active pairs and a three-cluster mesh,
under both policies - until nothing changes, and checks that no topic and no record ever
comes back to where it came from.
"""
from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field

import pytest

from mirror.policy import (
    DEFAULT_TOPICS_EXCLUDE, DefaultReplicationPolicy, IdentityReplicationPolicy, ReplicationPolicy,
    TopicFilter, should_replicate, why_not_replicated)

DEFAULT = DefaultReplicationPolicy()
IDENTITY = IdentityReplicationPolicy()

# --------------------------------------------------------------------------- names


@pytest.mark.parametrize("policy, alias, topic, remote", [
    (DEFAULT, "eu-west-1", "orders", "eu-west-1.orders"),
    (DEFAULT, "us-east-1", "eu-west-1.orders", "us-east-1.eu-west-1.orders"),
    (DefaultReplicationPolicy("_"), "eu", "orders", "eu_orders"),
    (IDENTITY, "eu-west-1", "orders", "orders"),
    (IDENTITY, "eu-west-1", "eu-west-1.orders", "eu-west-1.orders"),
    (IDENTITY, "eu-west-1", "heartbeats", "eu-west-1.heartbeats"),
    (IDENTITY, "us", "eu.heartbeats", "us.eu.heartbeats"),
])
def test_format_remote_topic(policy, alias, topic, remote):
    assert policy.format_remote_topic(alias, topic) == remote


@pytest.mark.parametrize("policy, topic, source, upstream, original", [
    (DEFAULT, "orders", None, None, "orders"),
    (DEFAULT, "eu-west-1.orders", "eu-west-1", "orders", "orders"),
    (DEFAULT, "us-east-1.eu-west-1.orders", "us-east-1", "eu-west-1.orders", "orders"),
    (DEFAULT, "a.b.c.d", "a", "b.c.d", "d"),
    (DEFAULT, "orders.", None, None, "orders."),        # Java's split drops trailing empties
    (DEFAULT, ".orders", "", "orders", "orders"),
    (DEFAULT, "a..b", "a", ".b", "b"),
    (DefaultReplicationPolicy("_"), "eu_orders.v1", "eu", "orders.v1", "orders.v1"),
    (DefaultReplicationPolicy("::"), "eu::us::t", "eu", "us::t", "t"),
    (IDENTITY, "orders", None, "orders", "orders"),
    (IDENTITY, "eu-west-1.orders", None, "eu-west-1.orders", "eu-west-1.orders"),
    (IdentityReplicationPolicy(source_cluster_alias="eu"), "orders", "eu", "orders", "orders"),
    (IDENTITY, "eu.heartbeats", "eu", "heartbeats", "heartbeats"),
    (IDENTITY, "us.eu.heartbeats", "us", "eu.heartbeats", "heartbeats"),
    (IDENTITY, "heartbeats", None, None, "heartbeats"),
])
def test_provenance_read_from_names(policy, topic, source, upstream, original):
    assert policy.topic_source(topic) == source
    assert policy.upstream_topic(topic) == upstream
    assert policy.original_topic(topic) == original


@pytest.mark.parametrize("policy, alias, offset_syncs, checkpoints", [
    (DEFAULT, "eu", "mm2-offset-syncs.eu.internal", "eu.checkpoints.internal"),
    (IDENTITY, "eu", "mm2-offset-syncs.eu.internal", "eu.checkpoints.internal"),
    (DefaultReplicationPolicy("_"), "eu", "mm2-offset-syncs_eu_internal", "eu_checkpoints_internal"),
    (DefaultReplicationPolicy("_", internal_topic_separator_enabled=False), "eu",
     "mm2-offset-syncs.eu.internal", "eu.checkpoints.internal"),
])
def test_mm2_internal_topic_names(policy, alias, offset_syncs, checkpoints):
    assert policy.offset_syncs_topic(alias) == offset_syncs
    assert policy.checkpoints_topic(alias) == checkpoints
    assert policy.is_checkpoints_topic(checkpoints) and not policy.is_checkpoints_topic(offset_syncs)
    assert policy.is_internal_topic(offset_syncs) and policy.is_internal_topic(checkpoints)
    assert policy.heartbeats_topic() == "heartbeats"


@pytest.mark.parametrize("topic, internal", [
    ("mm2-offset-syncs.eu.internal", True),
    ("eu.checkpoints.internal", True),
    ("us.eu.checkpoints.internal", True),
    ("mm2-configs.eu.internal", True),       # MM2's Connect topics
    ("connect-offsets-internal", True),      # Connect's default *-internal
    ("__consumer_offsets", True),
    ("__transaction_state", True),
    ("__cluster_metadata", True),
    (".hidden", True),
    ("heartbeats", False),                   # MM2 replicates heartbeats on purpose
    ("eu.heartbeats", False),
    ("orders", False),
    ("internal", False),
    ("orders_internal", False),
    ("_schemas", False),
    ("eu.orders", False),
])
def test_internal_topics_as_mm2(topic, internal):
    assert DEFAULT.is_internal_topic(topic) is internal
    assert IDENTITY.is_internal_topic(topic) is internal


def test_custom_separator_internal_suffix():
    policy = DefaultReplicationPolicy("_")
    assert policy.is_internal_topic("mm2-offset-syncs_eu_internal")
    assert policy.is_internal_topic("x.internal") and policy.is_internal_topic("x-internal")
    assert not DEFAULT.is_internal_topic("x_internal")


@pytest.mark.parametrize("topic, heartbeats", [
    ("heartbeats", True), ("eu.heartbeats", True), ("us.eu.heartbeats", True),
    ("heartbeats2", False), ("eu.orders", False),
])
def test_heartbeats_topics(topic, heartbeats):
    assert DEFAULT.is_heartbeats_topic(topic) is heartbeats
    assert IDENTITY.is_heartbeats_topic(topic) is heartbeats


def test_base_policy_is_an_interface():
    with pytest.raises(NotImplementedError):
        ReplicationPolicy().format_remote_topic("a", "t")


def test_empty_separator_refused():
    with pytest.raises(ValueError, match="separator"):
        DefaultReplicationPolicy("")


# --------------------------------------------------------------------------- topic filter


@pytest.mark.parametrize("include, exclude, topic, selected", [
    (None, None, "orders", True),
    (None, None, "eu.orders", True),
    (None, None, "orders-internal", False),
    (None, None, "orders.internal", False),
    (None, None, "orders.replica", False),
    (None, None, "__consumer_offsets", False),
    ("orders,payments", None, "orders", True),
    ("orders,payments", None, "payments", True),
    ("orders,payments", None, "orders2", False),        # full match, not search
    ("orders,payments", None, "my-orders", False),
    ("orders.*", "orders\\.audit", "orders.audit", False),
    ("orders.*", "orders\\.audit", "orders.audit2", True),
    (" orders , pay.* ", "", "payments", True),          # whitespace trimmed; blank exclude
    ("", None, "orders", False),                         # blank topics selects nothing
    ("a|b, c", None, "b", True),                         # an entry may hold an alternation
    ("a|b, c", None, "bc", False),
])
def test_topic_filter(include, exclude, topic, selected):
    assert TopicFilter.from_properties(include, exclude).selects(topic) is selected


def test_topic_filter_defaults_are_mm2s():
    assert TopicFilter() == TopicFilter((".*",), DEFAULT_TOPICS_EXCLUDE)
    assert DEFAULT_TOPICS_EXCLUDE == (r".*[\-\.]internal", r".*\.replica", r"__.*")


def test_bad_regex_names_the_property():
    with pytest.raises(ValueError, match=r"topics.exclude: invalid regex '\(orders'"):
        TopicFilter(exclude=["(orders"])


# --------------------------------------------------------------------------- should_replicate


@dataclass
class Decision:
    topic: str
    source: str
    target: str
    policy: ReplicationPolicy
    replicate: bool
    reason: str = ""                 # a fragment of why_not_replicated's answer
    reverse: frozenset = frozenset()
    topic_filter: TopicFilter = field(default_factory=TopicFilter)
    heartbeats: bool = True


DECISIONS = [
    # default policy: names carry the chain
    Decision("orders", "us-east-1", "eu-west-1", DEFAULT, True),
    Decision("eu-west-1.orders", "us-east-1", "eu-west-1", DEFAULT, False, "came from eu-west-1"),
    Decision("us-east-1.eu-west-1.orders", "ap-south-1", "eu-west-1", DEFAULT, False, "came from eu-west-1"),
    Decision("us-east-1.eu-west-1.orders", "ap-south-1", "us-east-1", DEFAULT, False, "came from us-east-1"),
    Decision("eu-west-1.orders", "us-east-1", "ap-south-1", DEFAULT, True),       # a forward hop
    Decision("eu-west-1.heartbeats", "us-east-1", "eu-west-1", DEFAULT, False, "came from eu-west-1"),
    Decision("heartbeats", "us-east-1", "eu-west-1", DEFAULT, True),
    Decision("eu-west-1.heartbeats", "us-east-1", "ap-south-1", DEFAULT, True),
    # internal topics and the filter
    Decision("__consumer_offsets", "a", "b", DEFAULT, False, "internal topic"),
    Decision("mm2-offset-syncs.b.internal", "a", "b", DEFAULT, False, "internal topic"),
    Decision("a.checkpoints.internal", "b", "c", DEFAULT, False, "internal topic"),
    Decision("orders.replica", "a", "b", DEFAULT, False, "not selected"),
    Decision("payments", "a", "b", DEFAULT, False, "not selected", topic_filter=TopicFilter(["orders"])),
    # heartbeats follow heartbeats.replication.enabled, not the filter
    Decision("heartbeats", "a", "b", DEFAULT, True, topic_filter=TopicFilter(["orders"])),
    Decision("c.heartbeats", "a", "b", DEFAULT, True, topic_filter=TopicFilter(["orders"])),
    Decision("heartbeats", "a", "b", DEFAULT, False, "not selected", topic_filter=TopicFilter(["orders"]),
             heartbeats=False),
    Decision("heartbeats", "a", "b", DEFAULT, True, heartbeats=False),           # selected by ".*"
    # identity policy: names say nothing, provenance does
    Decision("orders", "b", "a", IDENTITY, True),
    Decision("orders", "b", "a", IDENTITY, False, "written by the mirror link from a", frozenset({"orders"})),
    Decision("payments", "b", "a", IDENTITY, True, reverse=frozenset({"orders"})),
    Decision("a.heartbeats", "b", "a", IDENTITY, False, "came from a"),
    Decision("heartbeats", "b", "a", IDENTITY, True),
    Decision("orders", "b", "a", IdentityReplicationPolicy(source_cluster_alias="a"), False, "came from a"),
    Decision("orders", "b", "a", IdentityReplicationPolicy(source_cluster_alias="b"), True),
    # provenance applies to the default policy too
    Decision("orders", "b", "a", DEFAULT, False, "written by the mirror link", frozenset({"orders"})),
]


@pytest.mark.parametrize("d", DECISIONS,
                         ids=lambda d: f"{type(d.policy).__name__}:{d.source}->{d.target}:{d.topic}")
def test_should_replicate(d: Decision):
    kwargs = dict(topic_filter=d.topic_filter, heartbeats_replication=d.heartbeats)
    assert should_replicate(d.topic, d.source, d.target, d.policy, d.reverse, **kwargs) is d.replicate
    reason = why_not_replicated(d.topic, d.source, d.target, d.policy, d.reverse, **kwargs)
    if d.replicate:
        assert reason is None
    else:
        assert d.reason in reason


@pytest.mark.parametrize("source, target, message", [
    ("us.east", "eu", "contains the replication policy separator '.'"),
    ("us", "eu.west", "contains the replication policy separator '.'"),
    ("", "eu", "must not be empty"),
    ("eu", "eu", "needs two clusters"),
])
def test_bad_aliases_are_refused(source, target, message):
    with pytest.raises(ValueError, match=message):
        should_replicate("orders", source, target, DEFAULT)


# --------------------------------------------------------------------------- running links


@dataclass
class Cluster:
    alias: str
    topics: dict[str, list[str]] = field(default_factory=dict)   # topic -> record ids, in order

    def produce(self, topic: str, *records: str) -> None:
        self.topics.setdefault(topic, []).extend(records)


@dataclass
class Link:
    """One direction of mirroring, as the mirror runs it: decide per topic, copy new records,
    and remember which target topics it writes (the reverse link's provenance set)."""
    source: Cluster
    target: Cluster
    policy: ReplicationPolicy
    written: set[str] = field(default_factory=set)
    positions: dict[str, int] = field(default_factory=dict)

    def run_once(self, reverse_written: set[str]) -> bool:
        changed = False
        for topic in sorted(self.source.topics):
            if not should_replicate(topic, self.source.alias, self.target.alias, self.policy,
                                    frozenset(reverse_written)):
                continue
            remote = self.policy.format_remote_topic(self.source.alias, topic)
            self.written.add(remote)
            records = self.source.topics[topic]
            new = records[self.positions.get(topic, 0):]
            if new:
                self.target.produce(remote, *new)
                self.positions[topic] = len(records)
                changed = True
        return changed


def run_links(clusters: dict[str, Cluster], pairs: list[tuple[str, str]], policy, *,
              provenance: str = "reverse", rounds: int = 20, links: dict | None = None) -> dict:
    """Run every link until nothing moves. `provenance` is what the mirror passes as
    reverse_link_topics: "reverse", the topics the link from the target writes on the source
    (an active-active pair), or "inbound", every topic any link writes on the source (a mesh
    with identity names: replicas are not re-exported, each record takes the direct path)."""
    if links is None:
        links = {(s, t): Link(clusters[s], clusters[t], policy) for s, t in pairs}
    for _ in range(rounds):
        changed = False
        for (s, t), link in links.items():
            writers = [w for (s2, t2), w in links.items()
                       if t2 == s and (s2 == t or provenance == "inbound")]
            changed |= link.run_once(set().union(*(w.written for w in writers)))
        if not changed:
            return links
    pytest.fail(f"mirroring did not settle in {rounds} rounds: records keep moving (a cycle)")


def all_records(clusters) -> dict[str, list[str]]:
    return {a: sorted(r for recs in c.topics.values() for r in recs) for a, c in clusters.items()}


def seed(*aliases: str) -> dict[str, Cluster]:
    clusters = {a: Cluster(a) for a in aliases}
    for a, c in clusters.items():
        c.produce(f"orders-{a}", f"{a}:o1", f"{a}:o2")
        c.produce("heartbeats", f"{a}:hb")
        c.produce("__consumer_offsets", f"{a}:internal")
    return clusters


def test_active_active_default_policy_no_ping_pong():
    clusters = seed("us-east-1", "eu-west-1")
    run_links(clusters, [("us-east-1", "eu-west-1"), ("eu-west-1", "us-east-1")], DEFAULT)
    us, eu = clusters["us-east-1"].topics, clusters["eu-west-1"].topics
    assert sorted(us) == ["__consumer_offsets", "eu-west-1.heartbeats", "eu-west-1.orders-eu-west-1",
                          "heartbeats", "orders-us-east-1"]
    assert sorted(eu) == ["__consumer_offsets", "heartbeats", "orders-eu-west-1", "us-east-1.heartbeats",
                          "us-east-1.orders-us-east-1"]
    # every data record is on both clusters exactly once; nothing came back to its origin
    for alias, records in all_records(clusters).items():
        assert len(records) == len(set(records)), f"{alias} holds a record twice"
    for c in clusters.values():
        for topic in c.topics:
            assert c.alias not in topic.split(".")[:-1], f"{topic} on {c.alias} came back home"
    assert us["eu-west-1.orders-eu-west-1"] == ["eu-west-1:o1", "eu-west-1:o2"]
    assert eu["us-east-1.orders-us-east-1"] == ["us-east-1:o1", "us-east-1:o2"]
    home_records_once(clusters)


def test_active_active_identity_policy_no_ping_pong():
    clusters = seed("a", "b")
    clusters["a"].produce("shared", "a:s1")      # the same name local on both sides
    clusters["b"].produce("shared", "b:s1")
    links = run_links(clusters, [("a", "b"), ("b", "a")], IDENTITY)
    a, b = clusters["a"].topics, clusters["b"].topics
    assert a["orders-b"] == ["b:o1", "b:o2"] and b["orders-a"] == ["a:o1", "a:o2"]
    assert a["b.heartbeats"] == ["b:hb"] and b["a.heartbeats"] == ["a:hb"]
    # No topic is written in both directions: each has one home.
    assert not links[("a", "b")].written & links[("b", "a")].written
    # The shared name was claimed by the link that ran first (a -> b): b's own records in it
    # stay on b; a's reach b once; nothing returns to a.
    assert a["shared"] == ["a:s1"]
    assert b["shared"] == ["b:s1", "a:s1"]
    for alias, records in all_records(clusters).items():
        assert len(records) == len(set(records)), f"{alias} holds a record twice"
    # Later writes keep flowing one way only.
    clusters["a"].produce("orders-a", "a:o3")
    clusters["b"].produce("orders-a", "b:local")  # written on b into a's replica
    run_links(clusters, [("a", "b"), ("b", "a")], IDENTITY, links=links)
    assert a["orders-a"] == ["a:o1", "a:o2", "a:o3"]
    assert b["orders-a"] == ["a:o1", "a:o2", "b:local", "a:o3"]
    home_records_once(clusters)


def test_identity_policy_without_provenance_would_ping_pong():
    # Why rule 4 exists: MM2's name-based isCycle cannot stop identity-named topics.
    assert should_replicate("orders", "b", "a", IDENTITY)   # nothing in the name
    a, b = Cluster("a"), Cluster("b")
    a.produce("orders", "r1")
    ab, ba = Link(a, b, IDENTITY), Link(b, a, IDENTITY)
    for _ in range(3):
        ab.run_once(set())
        ba.run_once(set())
    assert a.topics["orders"].count("r1") > 1


def home_records_once(clusters) -> None:
    """A record produced on a cluster is there once: had it come back, it would be twice."""
    for c in clusters.values():
        home = Counter(r for recs in c.topics.values() for r in recs if r.startswith(f"{c.alias}:"))
        assert all(n == 1 for n in home.values()), f"records came back to {c.alias}: {home}"


@pytest.mark.parametrize("policy, provenance", [(DEFAULT, "reverse"), (IDENTITY, "inbound")],
                         ids=["default", "identity"])
def test_three_cluster_mesh_settles_and_never_returns_home(policy, provenance):
    aliases = ("a", "b", "c")
    clusters = seed(*aliases)
    pairs = list(itertools.permutations(aliases, 2))
    run_links(clusters, pairs, policy, provenance=provenance)
    home_records_once(clusters)
    for c in clusters.values():
        for topic in c.topics:
            chain, t = [], topic
            while (src := DEFAULT.topic_source(t)) is not None:
                chain.append(src)
                t = DEFAULT.upstream_topic(t)
            assert c.alias not in chain and len(chain) == len(set(chain)), f"{topic} on {c.alias}"
    for s, t in pairs:
        got = Counter(r for recs in clusters[t].topics.values() for r in recs)
        if policy is IDENTITY:
            assert got[f"{s}:o1"] == 1          # direct path only
        else:
            # MM2's default policy also takes the two-hop path in a full mesh: a second copy
            # under a longer name (b.a.orders-a on c), never a cycle.
            assert got[f"{s}:o1"] == 2
            third = next(x for x in aliases if x not in (s, t))
            assert clusters[t].topics[f"{third}.{s}.orders-{s}"] == [f"{s}:o1", f"{s}:o2"]
