"""Replication policies and topic selection, as MirrorMaker 2 names and chooses topics.

Theory of operation
-------------------
A replication policy names the copy of a topic on the target cluster and reads provenance
back out of a name. It follows MM2 (apache/kafka connect/mirror-client: ReplicationPolicy,
DefaultReplicationPolicy, IdentityReplicationPolicy) so that MM2 tooling reads our names:

- `DefaultReplicationPolicy` prefixes the source alias: `orders` from `eu-west-1` becomes
  `eu-west-1.orders`; a second hop prefixes again (`us-east-1.eu-west-1.orders`). The name
  is the provenance chain, newest hop first.
- `IdentityReplicationPolicy` keeps names (for one-way DR and migrations) except for the
  heartbeats topic, which is prefixed like the default policy so that heartbeats still show
  where they came from.

Which topics a link (source -> target) copies is decided by `should_replicate`, after MM2's
MirrorSourceConnector.shouldReplicateTopic, in this order:

1. internal topics never (`is_internal_topic`: MM2's own `*.internal` topics, Kafka's `__*`
   and `.*`, Connect's `*-internal` / `*.internal`);
2. the `TopicFilter` must select the topic (MM2's `topics` / `topics.exclude`: full-match
   regexes), except that heartbeats topics are always selected unless heartbeat
   replication is off (MM2's `heartbeats.replication.enabled`). Heartbeats are *not*
   internal in MM2: replicated heartbeats are how MM2 tools find upstream clusters;
3. no cycle by name: walk the chain `topic_source` / `upstream_topic`; if any hop's source
   is the target, the data came from the target and copying it back would ping-pong
   (MM2's isCycle). `eu-west-1.orders` on us-east-1 is not copied to eu-west-1, nor is
   `us-east-1.eu-west-1.orders` on ap-south-1;
4. no cycle by provenance: a topic in `reverse_link_topics` is not copied. The caller
   passes the topics on the source cluster that must not go to the target: for a pair of
   links, those the link from the target writes on the source; for a chain of links, every
   topic on the source whose data came from the target by any path; for a mesh with
   identity names, every topic any inbound link writes on the source (replicas are then
   not re-exported and each record takes only the direct path - otherwise it would reach a
   cluster along several paths into the same topic).

Rule 4 is Seaway's, for the identity policy: a name does not say where identity-named data
came from. MM2 itself has no cycle protection there (its isCycle stops when the upstream
name equals the topic) and relies on operators choosing disjoint topic sets. Seaway tracks
which topics each link writes and passes the reverse link's set here, so that in an
active-active pair (A -> B and B -> A) a topic the A -> B link writes on B is never copied
back to A. Consequences an operator must know: with identity names, each topic has one home
cluster; records produced on the other cluster into a mirrored topic stay there (they are
never mirrored back); and when both clusters hold a same-named local topic, whichever link
claims it first owns it - the decision and the claim must be serialized (the reverse set
read at decision time), or the topic sets configured disjoint. The rule is harmless for the
default policy, where it only repeats what the name already says.

The patterns are Python regexes matched against the whole name, as Java's
`Pattern.matcher(...).matches()` does; the syntax both share (classes, alternation,
quantifiers) means the same.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Collection, Iterable

__all__ = ["ReplicationPolicy", "DefaultReplicationPolicy", "IdentityReplicationPolicy",
           "TopicFilter", "DEFAULT_TOPICS", "DEFAULT_TOPICS_EXCLUDE", "HEARTBEATS_TOPIC",
           "should_replicate", "why_not_replicated"]

HEARTBEATS_TOPIC = "heartbeats"
DEFAULT_TOPICS = (".*",)
# MM2's DefaultTopicFilter.TOPICS_EXCLUDE_DEFAULT
DEFAULT_TOPICS_EXCLUDE = (r".*[\-\.]internal", r".*\.replica", r"__.*")

# A chain longer than this is not a real replication path but a name full of separators;
# the walk stops there rather than recursing through it.
_MAX_HOPS = 64


class ReplicationPolicy:
    """MM2's ReplicationPolicy interface with its default methods."""

    separator = "."

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        raise NotImplementedError

    def topic_source(self, topic: str) -> str | None:
        """The alias of the cluster the topic was copied from, None for a local topic."""
        raise NotImplementedError

    def upstream_topic(self, topic: str) -> str | None:
        """The topic's name on the cluster it was copied from, None for a local topic."""
        raise NotImplementedError

    def original_topic(self, topic: str) -> str:
        """The name at the start of the chain, however many hops it has."""
        for _ in range(_MAX_HOPS):
            upstream = self.upstream_topic(topic)
            if upstream is None or upstream == topic:
                return topic
            topic = upstream
        return topic

    def heartbeats_topic(self) -> str:
        return HEARTBEATS_TOPIC

    def offset_syncs_topic(self, cluster_alias: str) -> str:
        return f"mm2-offset-syncs.{cluster_alias}.internal"

    def checkpoints_topic(self, cluster_alias: str) -> str:
        return f"{cluster_alias}.checkpoints.internal"

    def is_heartbeats_topic(self, topic: str) -> bool:
        return self.original_topic(topic) == self.heartbeats_topic()

    def is_checkpoints_topic(self, topic: str) -> bool:
        return topic.endswith(".checkpoints.internal")

    def is_mm2_internal_topic(self, topic: str) -> bool:
        return topic.endswith(".internal")

    def is_internal_topic(self, topic: str) -> bool:
        kafka_internal = topic.startswith("__") or topic.startswith(".")
        connect_internal = topic.endswith("-internal") or topic.endswith(".internal")
        return self.is_mm2_internal_topic(topic) or kafka_internal or connect_internal

    def check_alias(self, alias: str) -> None:
        """Refuse an alias that names could not carry without losing the chain."""
        if not alias:
            raise ValueError("cluster alias must not be empty")


class DefaultReplicationPolicy(ReplicationPolicy):
    """`<source alias><separator><topic>` (MM2's replication.policy.separator)."""

    def __init__(self, separator: str = ".", *, internal_topic_separator_enabled: bool = True):
        if not separator:
            raise ValueError("replication.policy.separator must not be empty")
        self.separator = separator
        # MM2 (replication.policy.internal.topic.separator.enabled=false) names its internal
        # topics with "." whatever the separator, for compatibility with older releases.
        self._internal_sep = separator if internal_topic_separator_enabled else "."

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        return f"{source_alias}{self.separator}{topic}"

    def topic_source(self, topic: str) -> str | None:
        parts = _java_split(topic, self.separator)
        return parts[0] if len(parts) >= 2 else None

    def upstream_topic(self, topic: str) -> str | None:
        source = self.topic_source(topic)
        return None if source is None else topic[len(source) + len(self.separator):]

    def offset_syncs_topic(self, cluster_alias: str) -> str:
        return f"mm2-offset-syncs{self._internal_sep}{cluster_alias}{self._internal_suffix}"

    def checkpoints_topic(self, cluster_alias: str) -> str:
        return f"{cluster_alias}{self._checkpoints_suffix}"

    def is_checkpoints_topic(self, topic: str) -> bool:
        return topic.endswith(self._checkpoints_suffix)

    def is_mm2_internal_topic(self, topic: str) -> bool:
        return topic.endswith(self._internal_suffix)

    @property
    def _internal_suffix(self) -> str:
        return f"{self._internal_sep}internal"

    @property
    def _checkpoints_suffix(self) -> str:
        return f"{self._internal_sep}checkpoints{self._internal_suffix}"

    def check_alias(self, alias: str) -> None:
        super().check_alias(alias)
        if self.separator in alias:
            # topic_source() splits at the first separator: such an alias would be read back
            # as a shorter one and cycle detection would miss it.
            raise ValueError(f"cluster alias {alias!r} contains the replication policy "
                             f"separator {self.separator!r}")


class IdentityReplicationPolicy(DefaultReplicationPolicy):
    """Names unchanged, except heartbeats (prefixed as by the default policy).

    `source_cluster_alias` is MM2's `source.cluster.alias`: what `topic_source` answers for
    any other topic, since a name alone cannot tell.
    """

    def __init__(self, separator: str = ".", *, source_cluster_alias: str | None = None,
                 internal_topic_separator_enabled: bool = True):
        super().__init__(separator, internal_topic_separator_enabled=internal_topic_separator_enabled)
        self.source_cluster_alias = source_cluster_alias

    def _looks_like_heartbeats(self, topic: str) -> bool:
        return topic.endswith(self.heartbeats_topic())

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        if self._looks_like_heartbeats(topic):
            return super().format_remote_topic(source_alias, topic)
        return topic

    def topic_source(self, topic: str) -> str | None:
        if self._looks_like_heartbeats(topic):
            return super().topic_source(topic)
        return self.source_cluster_alias

    def upstream_topic(self, topic: str) -> str | None:
        if self._looks_like_heartbeats(topic):
            return super().upstream_topic(topic)
        return topic


def _java_split(text: str, separator: str) -> list[str]:
    """Java's String.split with a quoted separator: trailing empty strings are dropped,
    so `orders.` is one part (local) and `.orders` two (source "")."""
    parts = text.split(separator)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


@dataclass(frozen=True)
class TopicFilter:
    """MM2's `topics` (include) and `topics.exclude` lists of full-match regexes.

    An empty include list selects nothing, as a blank `topics` does in MM2.
    """
    include: tuple[str, ...] = DEFAULT_TOPICS
    exclude: tuple[str, ...] = DEFAULT_TOPICS_EXCLUDE

    def __post_init__(self) -> None:
        object.__setattr__(self, "include", tuple(self.include))
        object.__setattr__(self, "exclude", tuple(self.exclude))
        object.__setattr__(self, "_include", _compile("topics", self.include))
        object.__setattr__(self, "_exclude", _compile("topics.exclude", self.exclude))

    @classmethod
    def from_properties(cls, topics: str | None = None, topics_exclude: str | None = None) -> "TopicFilter":
        """From MM2-style comma-separated property values; None means the default."""
        return cls(DEFAULT_TOPICS if topics is None else _split_list(topics),
                   DEFAULT_TOPICS_EXCLUDE if topics_exclude is None else _split_list(topics_exclude))

    def selects(self, topic: str) -> bool:
        inc: re.Pattern | None = self._include  # type: ignore[attr-defined]
        exc: re.Pattern | None = self._exclude  # type: ignore[attr-defined]
        return inc is not None and inc.fullmatch(topic) is not None \
            and (exc is None or exc.fullmatch(topic) is None)


def _split_list(value: str) -> tuple[str, ...]:
    # Kafka's ConfigDef LIST: comma-separated, surrounding whitespace trimmed, blank = empty.
    value = value.strip()
    return tuple(p.strip() for p in value.split(",")) if value else ()


def _compile(name: str, patterns: Iterable[str]) -> re.Pattern | None:
    patterns = list(patterns)
    if not patterns:
        return None
    for p in patterns:
        try:
            re.compile(p)
        except re.error as exc:
            raise ValueError(f"{name}: invalid regex {p!r}: {exc}") from None
    # Each alternative grouped, so that "a|b" in one entry cannot swallow its neighbours.
    return re.compile("|".join(f"(?:{p})" for p in patterns))


DEFAULT_FILTER = TopicFilter()


def why_not_replicated(topic: str, source_alias: str, target_alias: str,
                       policy: ReplicationPolicy, reverse_link_topics: Collection[str] = frozenset(),
                       *, topic_filter: TopicFilter = DEFAULT_FILTER,
                       heartbeats_replication: bool = True) -> str | None:
    """None if the link source_alias -> target_alias copies `topic`, else the reason."""
    policy.check_alias(source_alias)
    policy.check_alias(target_alias)
    if source_alias == target_alias:
        raise ValueError(f"a mirror link needs two clusters, got {source_alias!r} twice")
    if policy.is_internal_topic(topic):
        return "internal topic"
    if not (topic_filter.selects(topic)
            or (heartbeats_replication and policy.is_heartbeats_topic(topic))):
        return "not selected by topics / topics.exclude"
    hop = _cycle_hop(topic, target_alias, policy)
    if hop is not None:
        return f"came from {target_alias} (as {hop!r}): copying it back would make a cycle"
    if topic in reverse_link_topics:
        return f"written by the mirror link from {target_alias}: copying it back would make a cycle"
    return None


def should_replicate(topic: str, source_alias: str, target_alias: str,
                     policy: ReplicationPolicy, reverse_link_topics: Collection[str] = frozenset(),
                     *, topic_filter: TopicFilter = DEFAULT_FILTER,
                     heartbeats_replication: bool = True) -> bool:
    """Whether the link source_alias -> target_alias copies `topic` (see the module doc)."""
    return why_not_replicated(topic, source_alias, target_alias, policy, reverse_link_topics,
                              topic_filter=topic_filter,
                              heartbeats_replication=heartbeats_replication) is None


def _cycle_hop(topic: str, target_alias: str, policy: ReplicationPolicy) -> str | None:
    """The name in the topic's chain whose source is the target (MM2's isCycle), or None."""
    for _ in range(_MAX_HOPS):
        source = policy.topic_source(topic)
        if source is None:
            return None
        if source == target_alias:
            return topic
        upstream = policy.upstream_topic(topic)
        if upstream is None or upstream == topic:
            return None  # identity names: the chain ends here (rule 4 covers them)
        topic = upstream
    return None
