"""Where everything of a platform lives: the ports, directories and node properties that a
topology turns into on this machine. Pure apart from reading and writing the state file and
probing for free ports, so the launcher, the status command and the tests share one answer.

Each broker has a PLAINTEXT listener for clients of its own region (and for the other brokers
of its cluster), a CONTROLLER listener if it votes, and one WAN_<REGION> listener per other
region. A WAN listener is advertised at the address of a WAN proxy run by the supervisor, so
a client in that region that bootstraps from the proxies keeps going through them: Metadata
answers with the addresses of the listener a request arrived on, as Kafka does.

Ports the topology leaves out are picked once and kept in `ports.json` in the state
directory, so a platform keeps its addresses across restarts. The DR pairs' gateways get
theirs as regions/gateways.py says. Picked ports lie outside the system's ephemeral range
(Linux: 32768-60999, ip_local_port_range): a port there is handed to outgoing connections,
so one picked while free could be some node's client connection by the time its owner
binds it. That happened: a 4-cluster platform's gateway found its port taken.
"""
from __future__ import annotations

import json
import random
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path

from .port_ledger import recent_picks
from .gateways import GatewaySpec, fixed_gateway_ports, gateway_specs, ports_are_fixed
from .security import CLIENTS_DIR, PlatformSecurity, gateway_listener_properties
from .topology import Node, Topology

DR_CONSOLE_PORT = 9780          # dr serve's default (dr/serve.py), as compose publishes it
MIRROR_METRICS_PORT = 9781      # the platform's mirror (every link) where the topology fixes ports
PORTS_FILE = "ports.json"
CLUSTER_IDS_FILE = "cluster-ids.json"
GATEWAYS_DIR = "gateways"       # a secured platform's gateways' listener properties


def wan_listener(region: str) -> str:
    return "WAN_" + re.sub(r"[^A-Z0-9]", "_", region.upper())


@dataclass
class NodeLayout:
    region: str
    cluster: str
    node: Node
    directory: Path
    properties: dict[str, str]
    client_port: int | None
    controller_port: int | None
    metrics_port: int
    wan_ports: dict[str, int] = field(default_factory=dict)     # remote region -> listener port
    internal_port: int | None = None   # a secured broker's mTLS listener for its cluster's brokers

    @property
    def key(self) -> str:
        """How commands name the node: CLUSTER/ID."""
        return f"{self.cluster}/{self.node.id}"

    @property
    def config_path(self) -> Path:
        return self.directory / "node.properties"

    @property
    def log_path(self) -> Path:
        return self.directory / "node.log"

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"


@dataclass(frozen=True)
class ProxyLayout:
    """A WAN proxy: clients in `client_region` reach `upstream_port` of a node in
    `server_region` through `listen_port`."""
    client_region: str
    server_region: str
    cluster: str
    node_id: int
    listen_port: int
    upstream_port: int


@dataclass(frozen=True)
class GatewayLayout:
    """A gateway of a DR pair in one region: it reaches each cluster of the pair as clients in
    its region do (directly in its region, through the WAN proxies elsewhere)."""
    spec: GatewaySpec
    clusters: dict[str, str]        # the pair's clusters, primary first -> bootstrap from the region
    ports: list[int]                # one per slot, consecutive
    metrics_port: int
    host: str = "127.0.0.1"
    # Secured platforms: its listener's TLS and SASL, and its own login to the brokers
    # (`seaway gateway --listener-config/--command-config`); the supervisor writes them.
    listener_config: Path | None = None
    command_config: Path | None = None

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{self.host}:{p}" for p in self.ports)

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.metrics_port}/metrics"


@dataclass
class ClusterLayout:
    region: str
    name: str
    cluster_id: str
    nodes: list[NodeLayout]

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{n.node.host}:{n.client_port}" for n in self.nodes if n.node.is_broker)

    @property
    def controller_bootstrap(self) -> str:
        return ",".join(f"{n.node.host}:{n.controller_port}" for n in self.nodes if n.node.is_controller)

    @property
    def broker_ids(self) -> list[int]:
        return sorted(n.node.id for n in self.nodes if n.node.is_broker)


@dataclass
class PlatformLayout:
    topology: Topology
    state_dir: Path
    clusters: dict[str, ClusterLayout]
    proxies: list[ProxyLayout]
    mirror_metrics_port: int | None = None     # the mirror process's /metrics, if it has links
    security: PlatformSecurity | None = None   # the topology's `security:` when enabled
    dr_port: int | None = None                 # `dr serve`'s HTTP (metrics, API), if there are DR pairs
    gateways: list[GatewayLayout] = field(default_factory=list)
    picked_ports: set[int] = field(default_factory=set)   # kept in ports.json (port_ledger.py)

    @property
    def dr_url(self) -> str | None:
        return f"http://127.0.0.1:{self.dr_port}/" if self.dr_port else None

    def nodes(self) -> list[NodeLayout]:
        return [n for c in self.clusters.values() for n in c.nodes]

    def wan_bootstrap(self, cluster: str, client_region: str) -> str:
        """The address clients in `client_region` bootstrap from to reach `cluster`: its own
        brokers from inside its region, the WAN proxies from elsewhere."""
        layout = self.clusters[cluster]
        if layout.region == client_region:
            return layout.bootstrap
        return ",".join(f"127.0.0.1:{p.listen_port}" for p in self.proxies
                        if p.cluster == cluster and p.client_region == client_region)

    def mirror_links(self) -> list[dict]:
        """The configuration of each mirror link the platform runs: a link runs where its
        target is, reading the source through the WAN addresses the target's region sees and
        writing the target directly. The supervisor writes them into platform.json, where
        `mirror run --platform` reads them."""
        links = []
        for m in self.topology.mirror_runs():
            source = self.wan_bootstrap(m.source, self.topology.region_of(m.target))
            link = self.topology.mirror_link_config(m, source, self.clusters[m.target].bootstrap)
            if self.security is not None:   # the mirror logs in as its own user on both sides
                props = self.security.client_properties(self.security.mirror_user)
                link["source_properties"], link["target_properties"] = dict(props), dict(props)
            links.append(link)
        return links

    def select(self, target: str) -> list[NodeLayout]:
        """The nodes a REGION, CLUSTER or CLUSTER/ID names; KeyError names what is unknown."""
        if target in self.topology.regions:
            return [n for n in self.nodes() if n.region == target]
        if target in self.clusters:
            return list(self.clusters[target].nodes)
        for n in self.nodes():
            if n.key == target:
                return [n]
        raise KeyError(target)


def plan(topology: Topology, state_dir: Path, *, cluster_ids: dict[str, str] | None = None) -> PlatformLayout:
    """The platform's layout; picks (and records) the ports the topology leaves out, clear
    of those another platform on this machine picked moments ago (regions/port_ledger.py)."""
    with recent_picks() as (recent, mine):
        layout = _plan(topology, Path(state_dir), cluster_ids, recent)
        mine.update(layout.picked_ports)
    return layout


def _plan(topology: Topology, state_dir: Path, cluster_ids: dict[str, str] | None,
          recent: set[int]) -> PlatformLayout:
    ports = _load_json(state_dir / PORTS_FILE)
    ids = _load_json(state_dir / CLUSTER_IDS_FILE)
    if cluster_ids:
        ids.update(cluster_ids)
    taken = {int(p) for p in ports.values()}
    taken |= {p for _, _, c in topology.clusters() for n in c.nodes
              for p in (n.port, n.controller_port, n.metrics_port) if p is not None}
    fixed_gateways = fixed_gateway_ports(topology) if ports_are_fixed(topology) else {}
    # Picked ports come from the range the fixed gateway ports are in: a port picked before
    # the gateways had theirs is picked again.
    reserved = {p for slots, metrics in fixed_gateways.values() for p in (*slots, metrics)}
    if ports_are_fixed(topology) and topology.dr_pairs():
        reserved.add(DR_CONSOLE_PORT)
    if ports_are_fixed(topology) and topology.mirrors:
        reserved.add(MIRROR_METRICS_PORT)
    taken |= reserved
    taken |= recent - {int(p) for p in ports.values()}

    def port(key: str, fixed: int | None) -> int:
        if fixed is not None:
            return fixed
        if key not in ports or int(ports[key]) in reserved:
            ports[key] = _free_port(taken)
            taken.add(ports[key])
        return int(ports[key])

    sec = topology.security
    security = (PlatformSecurity(state_dir, admin_user=sec.admin_user, mirror_user=sec.mirror_user,
                                 mechanism=sec.mechanism) if sec.enabled else None)
    clusters: dict[str, ClusterLayout] = {}
    proxies: list[ProxyLayout] = []
    for region, name, cluster in topology.clusters():
        remote = [r for r in topology.regions if r != region]
        layouts = []
        for node in cluster.nodes:
            key = f"{name}/{node.id}"
            layout = NodeLayout(
                region, name, node, state_dir / "clusters" / name / f"node-{node.id}", {},
                client_port=port(f"{key}/port", node.port) if node.is_broker else None,
                controller_port=port(f"{key}/controller_port", node.controller_port)
                if node.is_controller else None,
                metrics_port=port(f"{key}/metrics_port", node.metrics_port))
            if node.is_broker and security is not None:
                layout.internal_port = port(f"{key}/internal_port", None)
            if node.is_broker:
                for r in remote:
                    layout.wan_ports[r] = port(f"{key}/wan/{r}", None)
                    proxies.append(ProxyLayout(r, region, name, node.id,
                                               port(f"{key}/wan-proxy/{r}", None), layout.wan_ports[r]))
            layouts.append(layout)
        if name not in ids:
            ids[name] = _random_cluster_id()
        clusters[name] = ClusterLayout(region, name, ids[name], layouts)
        voters = ",".join(f"{n.node.id}@{n.node.host}:{n.controller_port}" for n in layouts
                          if n.node.is_controller)
        for n in layouts:
            n.properties = _properties(n, voters, cluster.config, proxies, security)
    # Fixed beside the console where the topology fixes its brokers' ports (the shipped ones
    # do), so the address is known, and documented, before the platform starts.
    mirror_port = (port("mirror/metrics_port", MIRROR_METRICS_PORT if ports_are_fixed(topology) else None)
                   if topology.mirrors else None)
    # `dr serve` and its console: at dr's own default port (as in compose) where the topology
    # fixes its brokers' ports too, so the console's address is known before the platform starts.
    dr_port = port("dr/port", DR_CONSOLE_PORT if ports_are_fixed(topology) else None) if topology.dr_pairs() else None
    layout = PlatformLayout(topology, state_dir, clusters, proxies, mirror_port, security, dr_port)
    for spec in gateway_specs(topology):
        if spec.name in fixed_gateways:
            slots, metrics = fixed_gateways[spec.name]
        else:
            slots, metrics = _slot_ports(ports, taken, spec), port(f"{spec.name}/metrics_port", None)
        reach = {c: layout.wan_bootstrap(c, spec.region) for c in (spec.first, spec.second)}
        secured = {} if security is None else {
            "listener_config": state_dir / GATEWAYS_DIR / f"{spec.name}.listener.properties",
            "command_config": state_dir / CLIENTS_DIR / f"{security.gateway_user}.properties"}
        layout.gateways.append(GatewayLayout(spec, reach, slots, metrics, **secured))
    layout.picked_ports = {int(p) for p in ports.values()}
    state_dir.mkdir(parents=True, exist_ok=True)
    _save_json(state_dir / PORTS_FILE, ports)
    _save_json(state_dir / CLUSTER_IDS_FILE, ids)
    return layout


def _slot_ports(ports: dict, taken: set[int], spec: GatewaySpec) -> list[int]:
    """A gateway's slot ports, which must be consecutive: the ones kept from an earlier start,
    or a new block (the pair's clusters may have grown since)."""
    keys = [f"{spec.name}/slot/{k}" for k in range(spec.slots)]
    kept = [ports.get(key) for key in keys]
    if all(isinstance(p, int) for p in kept) and kept == list(range(kept[0], kept[0] + spec.slots)):
        return kept
    for key in [k for k in ports if k.startswith(f"{spec.name}/slot/")]:
        del ports[key]
    first = _free_block(taken, spec.slots)
    for key, p in zip(keys, range(first, first + spec.slots)):
        ports[key] = p
        taken.add(p)
    return list(range(first, first + spec.slots))


def _properties(n: NodeLayout, voters: str, cluster_config: dict, proxies: list[ProxyLayout],
                security: PlatformSecurity | None = None) -> dict[str, str]:
    host = n.node.host
    # Plaintext: one PLAINTEXT listener for clients and brokers. Secured (regions/security.py):
    # CLIENT and WAN listeners take SCRAM over TLS, brokers and controllers mTLS.
    client, client_protocol = ("CLIENT", "SASL_SSL") if security else ("PLAINTEXT", "PLAINTEXT")
    inter_broker = "INTERNAL" if security else client
    node_protocol = "SSL" if security else "PLAINTEXT"
    listeners, advertised = [], []
    protocols = [f"CONTROLLER:{node_protocol}", f"{client}:{client_protocol}"]
    if n.node.is_broker:
        listeners.append(f"{client}://{host}:{n.client_port}")
        advertised.append(f"{client}://{host}:{n.client_port}")
        if security:
            listeners.append(f"INTERNAL://{host}:{n.internal_port}")
            advertised.append(f"INTERNAL://{host}:{n.internal_port}")
            protocols.append(f"INTERNAL:{node_protocol}")
        for region, real in n.wan_ports.items():
            name = wan_listener(region)
            proxy = next(p for p in proxies if p.cluster == n.cluster and p.node_id == n.node.id
                         and p.client_region == region)
            listeners.append(f"{name}://{host}:{real}")
            advertised.append(f"{name}://127.0.0.1:{proxy.listen_port}")
            protocols.append(f"{name}:{client_protocol}")
    if n.node.is_controller:
        listeners.append(f"CONTROLLER://{host}:{n.controller_port}")
    props = {
        "node.id": str(n.node.id),
        "process.roles": ",".join(sorted(n.node.roles)),
        "controller.quorum.voters": voters,
        "controller.listener.names": "CONTROLLER",
        "listeners": ",".join(listeners),
        "listener.security.protocol.map": ",".join(protocols),
        "log.dirs": str(n.data_dir),
        "broker.rack": n.node.zone,
        "metrics.port": str(n.metrics_port),
    }
    if advertised:
        props["advertised.listeners"] = ",".join(advertised)
        props["inter.broker.listener.name"] = inter_broker
    if security:
        props.update(security.node_properties(cluster=n.cluster, node_id=n.node.id, host=host,
                                              is_controller=n.node.is_controller))
        props["audit.log.file"] = str(n.directory / "audit.log")
    for source in (cluster_config, n.node.config):
        for key, value in source.items():
            props[key] = str(value).lower() if isinstance(value, bool) else str(value)
    return props


def write_properties(n: NodeLayout) -> None:
    n.directory.mkdir(parents=True, exist_ok=True)
    text = "".join(f"{k}={v}\n" for k, v in n.properties.items())
    n.config_path.write_text("# written by `regions up` from the topology; edits are overwritten\n" + text)


def write_gateway_listener(g: GatewayLayout, security: PlatformSecurity) -> None:
    """A secured platform's gateway listener properties: TLS with a certificate of the
    platform CA for the gateway's host, and the platform's SCRAM mechanism."""
    assert g.listener_config is not None
    identity = security.gateway_identity(g.spec.name, (g.host,))
    props = gateway_listener_properties(keystore=str(identity.keystore), mechanism=security.mechanism)
    g.listener_config.parent.mkdir(parents=True, exist_ok=True)
    g.listener_config.write_text("# written by `regions up`; edits are overwritten\n"
                                 + "".join(f"{k}={v}\n" for k, v in props.items()))


EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PICKED_PORT = 10000      # below it: the well-known and registered ports people fix
MIN_PICK_RANGE = 1000


def pick_range(ephemeral: tuple[int, int] | None = None) -> range:
    """Where picked ports come from: above the ephemeral range if that leaves room (61000-65535
    on Linux's default, above every fixed port the project uses), else below it, else (a
    system that makes nearly every port ephemeral) anywhere from LOWEST_PICKED_PORT up."""
    low, high = ephemeral if ephemeral is not None else _ephemeral_range()
    for room in (range(high + 1, 65536), range(LOWEST_PICKED_PORT, low)):
        if len(room) >= MIN_PICK_RANGE:
            return room
    return range(LOWEST_PICKED_PORT, 65536)


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = (int(x) for x in EPHEMERAL_RANGE_FILE.read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999     # Linux's default; other systems' ranges lie higher still


def _free_port(taken: set[int]) -> int:
    candidates = pick_range()
    for _ in range(2000):
        p = random.choice(candidates)
        if p not in taken and _bindable(p):
            return p
    raise RuntimeError(f"no free port on 127.0.0.1 in {candidates.start}-{candidates.stop - 1}")


def _free_block(taken: set[int], n: int) -> int:
    """The first of n consecutive free ports: a free port picked at random and the ones after
    it (picks are scattered, so the ones after a free one are usually free)."""
    for _ in range(200):
        first = _free_port(taken)
        block = range(first, first + n)
        if block[-1] <= 65535 and not taken & set(block) and all(_bindable(p) for p in block[1:]):
            return first
    raise RuntimeError(f"no {n} consecutive free ports on 127.0.0.1")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _random_cluster_id() -> str:
    import base64
    import uuid
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _load_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _save_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)
