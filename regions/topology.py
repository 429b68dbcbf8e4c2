"""The platform topology: regions, their clusters and nodes, the WAN between regions, mirror
links and DR settings, from one YAML file validated by pydantic.

    topology = load_topology(Path("regions/topologies/two-regions.yaml"))

Every error is a TopologyError whose one line names the file, the line and the field:

    two-regions.yaml:14: regions.eu-west.clusters.eu-west-1.nodes[2].roles[0]: Input should
    be 'broker' or 'controller'

The model checks each field (pydantic) and then what no single field can say: names unique
across the platform (a cluster is named without its region in mirror links and commands),
node ids unique within a cluster, a controller and a broker in every cluster, no port used
twice on one host, mirror links and WAN links that name clusters and regions that exist.

A port left out is chosen by the launcher when the platform first starts and kept in its
state directory, so topologies for tests need no fixed ports; the shipped default names its
ports so that its bootstrap addresses are known in advance.
"""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterator, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from core.client.acl_admin import checked_user_principals

NAME_PATTERN = r"^[a-z][a-z0-9-]{0,47}$"
USER_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"   # SCRAM user names the platform makes
DEFAULT_TOPOLOGY = Path(__file__).parent / "topologies" / "two-regions.yaml"
# Properties every node gets from the launcher; a topology setting them would break it.
RESERVED_PROPERTIES = frozenset({
    "node.id", "process.roles", "listeners", "advertised.listeners", "controller.quorum.voters",
    "controller.listener.names", "listener.security.protocol.map", "inter.broker.listener.name",
    "log.dirs", "metadata.log.dir", "broker.rack", "metrics.port",
})

Scalar = str | int | float | bool


class TopologyError(Exception):
    """One line: where (file:line), which field, what is wrong."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


Port = Field(default=None, ge=1, le=65535)


class Node(_Strict):
    id: int = Field(ge=0, le=2_147_483_647)
    roles: list[Literal["broker", "controller"]] = Field(min_length=1, max_length=2)
    zone: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._-]+$")
    host: str = Field(default="127.0.0.1", min_length=1, max_length=253)
    port: int | None = Port               # the client listener (brokers)
    controller_port: int | None = Port    # the quorum listener (controllers)
    metrics_port: int | None = Port
    config: dict[str, Scalar] = Field(default_factory=dict)

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles


class Cluster(_Strict):
    nodes: list[Node] = Field(min_length=1, max_length=64)
    # Broker properties every node of the cluster gets (Kafka's server.properties keys).
    config: dict[str, Scalar] = Field(default_factory=dict)

    @property
    def brokers(self) -> list[Node]:
        return [n for n in self.nodes if n.is_broker]

    @property
    def controllers(self) -> list[Node]:
        return [n for n in self.nodes if n.is_controller]


class Region(_Strict):
    clusters: dict[str, Cluster] = Field(min_length=1)


class WanLink(_Strict):
    """One pair's settings; what it leaves out comes from the platform-wide ones."""
    between: tuple[str, str]
    latency_ms: float | None = Field(default=None, ge=0, le=60_000)
    bandwidth_mbit: float | None = Field(default=None, gt=0)


class Wan(_Strict):
    """Every pair of regions is joined by a link with this one-way latency and bandwidth
    (per direction), unless `links` names the pair."""
    latency_ms: float = Field(default=40.0, ge=0, le=60_000)
    bandwidth_mbit: float | None = Field(default=100.0, gt=0)
    links: list[WanLink] = Field(default_factory=list)


class MirrorLink(_Strict):
    source: str
    target: str
    topics: list[str] = Field(default_factory=lambda: [".*"], min_length=1)
    exclude: list[str] = Field(default_factory=list)
    policy: Literal["default", "identity"] = "default"
    # Commit translated offsets into the target's idle groups, so that consumers failing over
    # to the target resume where they were (MM2's sync.group.offsets.enabled, off by default).
    sync_group_offsets: bool = False
    checkpoint_interval_s: float = Field(default=5.0, gt=0)
    refresh_topics_s: float = Field(default=5.0, gt=0)
    # Keep target topics' configs in line with their sources' (MM2's sync.topic.configs.*).
    sync_topic_configs: bool = True
    sync_topic_configs_interval_s: float = Field(default=60.0, gt=0)

    @field_validator("topics", "exclude")
    @classmethod
    def _patterns_compile(cls, patterns: list[str]) -> list[str]:
        for p in patterns:
            try:
                re.compile(p)
            except re.error as exc:
                raise ValueError(f"{p!r} is not a regular expression: {exc}") from None
        return patterns


class DrSettings(_Strict):
    primary: str | None = None               # the region that serves producers normally
    drill_schedule: str | None = None        # cron, e.g. "0 3 * * 0"
    rpo_target_s: float = Field(default=60.0, gt=0)
    rto_target_s: float = Field(default=300.0, gt=0)
    # dr serve fails the active region over by itself once it has been unreachable this long,
    # from the controller and from the partner region (dr/autofailover.py); None: never (people
    # decide).
    auto_failover_after_s: float | None = Field(default=None, ge=10)
    # Principals besides the clusters' super users that may start a failover from the console.
    operators: list[str] = Field(default_factory=list)

    _operators_are_principals = field_validator("operators")(checked_user_principals)


class Security(_Strict):
    """TLS, SCRAM and ACLs on every cluster of the platform (regions/security.py). Off, every
    listener is PLAINTEXT: for quick experiments on a machine of one's own."""
    enabled: bool = False
    mechanism: Literal["SCRAM-SHA-256", "SCRAM-SHA-512"] = "SCRAM-SHA-512"
    admin_user: str = Field(default="admin", pattern=USER_PATTERN)     # a super user of every cluster
    mirror_user: str = Field(default="mirror", pattern=USER_PATTERN)   # the mirror's own principal


class Topology(_Strict):
    name: str = Field(default="seaway", pattern=NAME_PATTERN)
    regions: dict[str, Region] = Field(min_length=1)
    wan: Wan = Field(default_factory=Wan)
    mirrors: list[MirrorLink] = Field(default_factory=list)
    dr: DrSettings = Field(default_factory=DrSettings)
    security: Security = Field(default_factory=Security)

    def clusters(self) -> Iterator[tuple[str, str, Cluster]]:
        """(region, cluster name, cluster) for every cluster, in file order."""
        for region_name, region in self.regions.items():
            for cluster_name, cluster in region.clusters.items():
                yield region_name, cluster_name, cluster

    def region_of(self, cluster_name: str) -> str:
        for region_name, name, _ in self.clusters():
            if name == cluster_name:
                return region_name
        raise KeyError(cluster_name)

    def cluster(self, cluster_name: str) -> Cluster:
        return self.regions[self.region_of(cluster_name)].clusters[cluster_name]

    def dr_pairs(self) -> list[MirrorLink]:
        """The DR pairs: the identity links, as the topology lists them (primary first)."""
        return [m for m in self.mirrors if m.policy == "identity"]

    def mirror_runs(self) -> list[MirrorLink]:
        """Every directed link the platform runs: the topology's links and, for a DR pair, its
        reverse too. Both directions of a pair always run; the topics' roles decide which one
        copies (core/protocol/dr.py), so a failover starts and stops no process."""
        runs = list(self.mirrors)
        for m in self.dr_pairs():
            runs.append(m.model_copy(update={"source": m.target, "target": m.source}))
        return runs

    def mirror_link_config(self, m: MirrorLink, source_bootstrap: str, target_bootstrap: str) -> dict:
        """The configuration the mirror runs link `m` with, in the mirror's own terms (mirror
        run --config's fields), given the addresses it reaches the two clusters at. regions
        hands it to the mirror (platform.json, the compose file's configs); the mirror never
        reads a topology."""
        link = {"source_alias": m.source, "source_bootstrap": source_bootstrap,
                "target_alias": m.target, "target_bootstrap": target_bootstrap,
                "topics": list(m.topics), "policy": m.policy,
                "sync_group_offsets": m.sync_group_offsets, "dr_pair": m.policy == "identity",
                "checkpoint_interval_s": m.checkpoint_interval_s, "refresh_topics_s": m.refresh_topics_s,
                "sync_topic_configs": m.sync_topic_configs,
                "sync_topic_configs_interval_s": m.sync_topic_configs_interval_s,
                "rpo_target_s": self.dr.rpo_target_s}
        if m.exclude:      # otherwise the mirror's default exclusions apply
            link["exclude"] = list(m.exclude)
        return link

    def wan_pairs(self) -> Iterator[tuple[str, str, float, float | None]]:
        """Every pair of regions once, in file order: (a, b, one-way latency ms, bandwidth
        Mbit/s or None for unlimited)."""
        regions = list(self.regions)
        for i, a in enumerate(regions):
            for b in regions[i + 1:]:
                yield (a, b, *self.wan_link(a, b))

    def link_capacity_mbit(self) -> dict[str, float]:
        """Each mirror link that crosses the WAN (source->target, as the mirror names it), and
        the bandwidth it shares there, Mbit/s per direction; unlimited links are left out."""
        out = {}
        for m in self.mirror_runs():
            a, b = self.region_of(m.source), self.region_of(m.target)
            mbit = self.wan_link(a, b)[1] if a != b else None
            if mbit is not None:
                out[f"{m.source}->{m.target}"] = mbit
        return out

    def wan_link(self, a: str, b: str) -> tuple[float, float | None]:
        """(one-way latency ms, bandwidth Mbit/s or None for unlimited) between regions a and b."""
        latency, bandwidth = self.wan.latency_ms, self.wan.bandwidth_mbit
        for link in self.wan.links:
            if set(link.between) == {a, b}:
                latency = link.latency_ms if link.latency_ms is not None else latency
                bandwidth = link.bandwidth_mbit if link.bandwidth_mbit is not None else bandwidth
        return latency, bandwidth


# ---------------------------------------------------------------------------- checks

Problem = tuple[tuple, str]     # (path into the document, message)


def _cross_field_problems(t: Topology, check_setting: SettingCheck | None = None) -> Iterator[Problem]:
    seen_names: dict[str, tuple] = {}
    for region_name in t.regions:
        if not re.match(NAME_PATTERN, region_name):
            yield ("regions", region_name), "a region name is lower-case letters, digits and '-'"
        seen_names[region_name] = ("regions", region_name)
    ports: dict[tuple[str, int], tuple] = {}
    for region_name, cluster_name, cluster in t.clusters():
        at = ("regions", region_name, "clusters", cluster_name)
        if not re.match(NAME_PATTERN, cluster_name):
            yield at, "a cluster name is lower-case letters, digits and '-'"
        if cluster_name in seen_names:
            yield at, f"the name {cluster_name!r} is already used at {_dotted(seen_names[cluster_name])}"
        seen_names.setdefault(cluster_name, at)
        yield from _properties_problems(at + ("config",), cluster.config, check_setting)
        if not cluster.controllers:
            yield at + ("nodes",), "a cluster needs at least one node with the controller role"
        if not cluster.brokers:
            yield at + ("nodes",), "a cluster needs at least one node with the broker role"
        ids: set[int] = set()
        for i, node in enumerate(cluster.nodes):
            node_at = at + ("nodes", i)
            if node.id in ids:
                yield node_at + ("id",), f"node id {node.id} is used twice in cluster {cluster_name}"
            ids.add(node.id)
            if len(set(node.roles)) != len(node.roles):
                yield node_at + ("roles",), "a role is listed twice"
            if node.port is not None and not node.is_broker:
                yield node_at + ("port",), "only a node with the broker role has a client port"
            if node.controller_port is not None and not node.is_controller:
                yield node_at + ("controller_port",), "only a node with the controller role has a controller port"
            yield from _properties_problems(node_at + ("config",), node.config, check_setting)
            for field in ("port", "controller_port", "metrics_port"):
                port = getattr(node, field)
                if port is None:
                    continue
                key = (node.host, port)
                if key in ports:
                    yield node_at + (field,), f"port {port} on {node.host} is already used at {_dotted(ports[key])}"
                ports.setdefault(key, node_at + (field,))
    for i, link in enumerate(t.wan.links):
        for j, region_name in enumerate(link.between):
            if region_name not in t.regions:
                yield ("wan", "links", i, "between", j), f"no region named {region_name!r}"
        if link.between[0] == link.between[1]:
            yield ("wan", "links", i, "between"), "a WAN link joins two different regions"
    clusters = {name for _, name, _ in t.clusters()}
    for i, link in enumerate(t.mirrors):
        for field in ("source", "target"):
            if getattr(link, field) not in clusters:
                yield ("mirrors", i, field), f"no cluster named {getattr(link, field)!r}"
        if link.source == link.target:
            yield ("mirrors", i, "target"), "a mirror link copies between two different clusters"
    pairs = Counter((m.source, m.target) for m in t.mirrors)
    for i, link in enumerate(t.mirrors):
        if pairs[(link.source, link.target)] > 1:
            yield ("mirrors", i), f"the link {link.source} -> {link.target} is listed twice"
            break
    for i, link in enumerate(t.mirrors):
        reverse = pairs[(link.target, link.source)]
        if reverse and (link.policy == "identity" or any(
                m.policy == "identity" for m in t.mirrors if (m.source, m.target) == (link.target, link.source))):
            yield ("mirrors", i), (f"an identity link is a DR pair, which runs both ways: drop "
                                   f"{link.source} -> {link.target} or the link back")
            break
    in_pairs = Counter(c for m in t.dr_pairs() for c in (m.source, m.target))
    for i, link in enumerate(t.mirrors):
        for field in ("source", "target"):
            if link.policy == "identity" and in_pairs[getattr(link, field)] > 1:
                yield ("mirrors", i, field), (f"cluster {getattr(link, field)} is in two DR pairs; "
                                              f"a cluster fails over with one partner")
                return
    if t.dr.primary is not None and t.dr.primary not in t.regions:
        yield ("dr", "primary"), f"no region named {t.dr.primary!r}"


# Judges one broker setting of a topology's `config` maps: None, or what is wrong with it.
# regions/settings.py has the one `regions` uses (it knows the nodes' settings); readers that
# only need the topology's shape (dr/) load it without one.
SettingCheck = Callable[[str, Any], "str | None"]


def _properties_problems(at: tuple, config: dict, check_setting: SettingCheck | None) -> Iterator[Problem]:
    for key, value in config.items():
        if key in RESERVED_PROPERTIES:
            yield at + (key,), f"{key} is set by the launcher from the topology"
        elif check_setting is not None and (problem := check_setting(key, value)):
            yield at + (key,), problem


# ---------------------------------------------------------------------------- loading

def load_topology(path: Path, *, check_setting: SettingCheck | None = None) -> Topology:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise TopologyError(f"{path}: cannot read the topology: {exc.strerror or exc}") from None
    return parse_topology(text, str(path), check_setting=check_setting)


def parse_topology(text: str, source: str = "<topology>", *, check_setting: SettingCheck | None = None) -> Topology:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise TopologyError(f"{where}: not valid YAML: {what}") from None
    if root is None:
        raise TopologyError(f"{source}: the topology is empty")
    lines: dict[tuple, int] = {}
    duplicate = _index_lines(root, (), lines)
    if duplicate is not None:
        path, line = duplicate
        raise TopologyError(f"{source}:{line}: {_dotted(path)}: the key is given twice")
    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise TopologyError(f"{source}:1: the topology is a mapping with a `regions` key")
    try:
        topology = Topology.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        path = tuple(first["loc"])
        raise TopologyError(_say(source, lines, path, _message(first))) from None
    for path, message in _cross_field_problems(topology, check_setting):
        raise TopologyError(_say(source, lines, path, message))
    return topology


def _message(error: dict) -> str:
    msg = error["msg"]
    if error["type"] == "missing":
        return "required field missing"
    if error["type"] == "extra_forbidden":
        return "unknown field"
    return msg.removeprefix("Value error, ")


def _say(source: str, lines: dict[tuple, int], path: tuple, message: str) -> str:
    line = None
    for n in range(len(path), -1, -1):
        line = lines.get(path[:n])
        if line is not None:
            break
    where = f"{source}:{line}" if line is not None else source
    return f"{where}: {_dotted(path) or 'topology'}: {message}"


def _dotted(path: tuple) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _index_lines(node, path: tuple, lines: dict[tuple, int]):
    """Record the (1-based) line of every key and item; the first duplicate key found, if any."""
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        keys = set()
        for key_node, value_node in node.value:
            key = key_node.value
            child = path + (key,)
            if key in keys:
                return child, key_node.start_mark.line + 1
            keys.add(key)
            lines[child] = key_node.start_mark.line + 1
            found = _index_lines(value_node, child, lines)
            if found is not None:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            found = _index_lines(item, path + (i,), lines)
            if found is not None:
                return found
    return None
