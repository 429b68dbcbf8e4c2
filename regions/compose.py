"""A topology as a Docker Compose file: the same regions, clusters, WAN and mirror links that
`regions up` runs on this machine, as containers of one image.

    regions compose [TOPOLOGY] [-f FILE]      # compose/two-regions.yml is the default's output

Theory of operation
-------------------
Every node is a container named after its cluster and id (`eu-west-1-2`), on the network of its
region, with its data on a named volume. Inside the container the ports are the same for every
node, so the file reads the same for all of them:

    9092  INTERNAL     the cluster's own brokers and clients inside the region
    9093  CONTROLLER   the KRaft quorum (controller.quorum.voters names INTERNAL host names)
    9094  metrics      /metrics for Prometheus, /health for the healthcheck
    9095  EXTERNAL     published on the host at the topology's `port` and advertised as
                       HOST:PORT, so clients on the host bootstrap from the same addresses as
                       with `regions up`
    9096+ WAN_<REGION> one per other region, reached only through the WAN container

Cross-region traffic crosses one `wan` container that joins every region's network and runs
`regions wan`: one proxy per (broker, client region), with the same latency and bandwidth model
as `regions up` (regions/wan.py; this kernel has no netem). A broker advertises its
WAN_<REGION> listener at `wan:<proxy port>`, so a client in that region that bootstraps from the
WAN addresses keeps going through the WAN. Disconnecting the wan container from a region's
network (`docker network disconnect`) cuts that region off from the others, as an outage of
the WAN would.

A mirror link runs in its own container in the target's region, reading the source through the
WAN and writing the target directly, as `regions up` runs it.

Each DR pair gets a gateway (`seaway gateway`) in every region, `gateway-<region>-<primary>`,
reaching the pair's clusters as that region's clients do and published on the host at the
same ports as with `regions up` (regions/gateways.py: 31092.. and metrics at 31190 for the
first); it listens inside on those port numbers too, so the addresses it advertises,
127.0.0.1:<port>, are right for clients on the host. The `dr` service's configuration names
them, so `dr status` shows what each serves. On a secured topology the gateways take TLS (a
certificate the `pki` service makes for the container's name, localhost and 127.0.0.1) and
SCRAM, relaying each client's login to the brokers, so clients on the host use the admin's
exported properties (or their own user's) through them; each gateway logs in to the brokers as
the `seaway-gateway` user, whose ACLs the `mirror-acls` service grants.

A secured topology (`security: enabled`, as the shipped one is) gets the same model as `regions
up` (regions/security.py), with its secrets made inside the platform on the first `up` by a
`pki` service and the mirror's ACLs granted by a `mirror-acls` service
(regions/compose_security.py). Listeners then are:

    9091  REPLICATION  SSL, client certificate required: replication between the brokers
    9092  INTERNAL     SASL_SSL: clients inside the region (the mirror writing its target)
    9093  CONTROLLER   SSL, client certificate required
    9095  EXTERNAL     SASL_SSL, published on the host
    9096+ WAN_<REGION> SASL_SSL, through the WAN container (which passes TLS through)

Everything is derived from the topology, deterministically: the cluster id of each cluster is
a UUIDv5 of the platform's and cluster's names, so the committed file is exactly what the
generator writes (a test compares them), and storage is formatted with it on a node's first
start (`seaway node --cluster-id`). What compose cannot express is a TopologyError naming the
field: a broker needs a fixed `port` to publish, for instance.
"""
from __future__ import annotations

import base64
import uuid

import yaml

from . import compose_security as secure
from .gateways import fixed_gateway_ports, gateway_specs
from .layout import wan_listener
from .security import GATEWAY_USER, gateway_listener_properties, secured_node_properties
from .topology import Topology, TopologyError, _dotted

REPLICATION_PORT = 9091
INTERNAL_PORT = 9092
CONTROLLER_PORT = 9093
METRICS_PORT = 9094
EXTERNAL_PORT = 9095
FIRST_WAN_LISTENER_PORT = 9096
FIRST_WAN_PROXY_PORT = 10000
MIRROR_METRICS_PORT = 9100
DR_PORT = 9780              # `dr serve`: /metrics, /health, /api/v1 (published on the host too)
DR_STATE_DIR = "/var/lib/seaway/dr"     # on the dr-state volume, mounted at the image user's home
GATEWAY_HOST = "127.0.0.1"              # where the gateways are published, and what they advertise
PROMETHEUS_PORT = 9090
IMAGE = "${SEAWAY_IMAGE:-seaway:latest}"
PROMETHEUS_IMAGE = "${PROMETHEUS_IMAGE:-prom/prometheus:v2.53.1}"
GRAFANA_IMAGE = "${GRAFANA_IMAGE:-grafana/grafana:11.2.0}"
GRAFANA_PORT = 3000
DATA_DIR = "/var/lib/seaway/data"
NODE_PROPERTIES = "/etc/seaway/node.properties"
# A probe that asks the process itself (GET /health answers from the node's own state: registered,
# unfenced, serving, quorum leader known), in bash so that it costs no interpreter start.
HEALTH_PROBE = ("exec 3<>/dev/tcp/127.0.0.1/{port} && printf 'GET /health HTTP/1.0\\r\\n\\r\\n' >&3 "
                "&& head -n 1 <&3 | grep -q ' 200 '")
# Docker runs a container's first probe one interval after it starts (engines before 25 have no
# start_interval), so the interval bounds the time to healthy; each probe is an exec through
# the Docker daemon, which costs the host CPU. 10 s: healthy in about 12 s, a few % of a core.
HEALTH_INTERVAL_S = 10
SCRAPE_INTERVAL_S = 10
HEADER = """\
# Generated by `regions compose {source}` from the topology; do not edit, regenerate.
# Build the image first (`bash compose/build-image.sh`), then:
#   docker compose -f {output} up -d --wait
"""


def cluster_id_for(topology: Topology, cluster: str) -> str:
    """The cluster id compose formats `cluster`'s storage with: stable across regenerations."""
    ident = uuid.uuid5(uuid.NAMESPACE_URL, f"seaway://{topology.name}/{cluster}")
    return base64.urlsafe_b64encode(ident.bytes).decode().rstrip("=")


def compose_file(topology: Topology, *, source: str = "regions/topologies/two-regions.yaml",
                 output: str = "compose/two-regions.yml", assets: str = ".",
                 secrets_on_host: str = "compose/secrets") -> str:
    """The compose file's text for `topology`; TopologyError names what compose cannot do.
    `assets` is where compose/ (alert rules, Grafana's files) is, relative to the output;
    `secrets_on_host` is its `secrets/` (where a secured platform puts the admin's client
    properties for the host) as a client in the repository's root names it."""
    _check_expressible(topology)
    doc = _ComposeDocument(topology, assets)
    if doc.security is not None:
        doc.add_pki(secrets_on_host)
    for region, name, cluster in topology.clusters():
        for node in cluster.nodes:
            doc.add_node(region, name, cluster, node)
    if doc.wan_ports:
        doc.add_wan()
    if doc.security is not None and topology.mirrors:
        doc.add_mirror_acls()
    for link in topology.mirror_runs():
        doc.add_mirror(link)
    if topology.dr_pairs():
        doc.add_dr()
    doc.add_gateways()
    doc.add_prometheus()
    doc.add_grafana()
    body = yaml.dump(doc.to_dict(), Dumper=_Dumper, sort_keys=False, width=100, default_flow_style=False)
    return HEADER.format(source=source, output=output) + body


class _ComposeDocument:
    """The services, volumes and configs of the file, added one process at a time."""

    def __init__(self, topology: Topology, assets: str):
        self.topology = topology
        self.assets = assets
        self.security = topology.security if topology.security.enabled else None
        self.services: dict = {}
        self.volumes: dict = {}
        self.configs: dict = {}
        self.scrape: dict[str, list[dict]] = {"seaway-nodes": [], "seaway-mirror": [], "seaway-wan": [],
                                              "seaway-dr": [], "seaway-gateway": []}
        # One WAN proxy port per (cluster, broker id, client region), numbered in file order.
        self.wan_ports: dict[tuple[str, int, str], int] = {}
        self.proxies: list[str] = []        # `regions wan --proxy` arguments
        for region, name, cluster in topology.clusters():
            for node in cluster.brokers:
                for i, client_region in enumerate(self._remote(region)):
                    port = FIRST_WAN_PROXY_PORT + len(self.proxies)
                    self.wan_ports[(name, node.id, client_region)] = port
                    self.proxies.append(f"{port}={_host(name, node.id)}:{FIRST_WAN_LISTENER_PORT + i}"
                                        f"@{client_region}>{region}")

    def _remote(self, region: str) -> list[str]:
        return [r for r in self.topology.regions if r != region]

    def add_node(self, region: str, name: str, cluster, node) -> None:
        host = _host(name, node.id)
        secured = self.security is not None
        client_protocol = "SASL_SSL" if secured else "PLAINTEXT"
        listeners, advertised = [], []
        protocols = [f"CONTROLLER:{'SSL' if secured else 'PLAINTEXT'}"]
        ports = [f"{node.host}:{node.metrics_port}:{METRICS_PORT}"] if node.metrics_port else []
        if node.is_broker:
            listeners += [f"INTERNAL://0.0.0.0:{INTERNAL_PORT}", f"EXTERNAL://0.0.0.0:{EXTERNAL_PORT}"]
            advertised += [f"INTERNAL://{host}:{INTERNAL_PORT}", f"EXTERNAL://{node.host}:{node.port}"]
            protocols += [f"INTERNAL:{client_protocol}", f"EXTERNAL:{client_protocol}"]
            if secured:
                listeners.insert(0, f"REPLICATION://0.0.0.0:{REPLICATION_PORT}")
                advertised.insert(0, f"REPLICATION://{host}:{REPLICATION_PORT}")
                protocols.insert(1, "REPLICATION:SSL")
            ports.insert(0, f"{node.host}:{node.port}:{EXTERNAL_PORT}")
            for i, client_region in enumerate(self._remote(region)):
                listener = wan_listener(client_region)
                listeners.append(f"{listener}://0.0.0.0:{FIRST_WAN_LISTENER_PORT + i}")
                advertised.append(f"{listener}://wan:{self.wan_ports[(name, node.id, client_region)]}")
                protocols.append(f"{listener}:{client_protocol}")
        if node.is_controller:
            listeners.append(f"CONTROLLER://0.0.0.0:{CONTROLLER_PORT}")
        props = {
            "node.id": node.id,
            "process.roles": ",".join(sorted(node.roles)),
            "controller.quorum.voters": ",".join(f"{n.id}@{_host(name, n.id)}:{CONTROLLER_PORT}"
                                                 for n in cluster.controllers),
            "controller.listener.names": "CONTROLLER",
            "listeners": ",".join(listeners),
            "listener.security.protocol.map": ",".join(protocols),
            "log.dirs": DATA_DIR,
            "broker.rack": node.zone,
            "metrics.port": METRICS_PORT,
        }
        if advertised:
            props["advertised.listeners"] = ",".join(advertised)
            props["inter.broker.listener.name"] = "REPLICATION" if secured else "INTERNAL"
        command = ["seaway", "node", "--config", NODE_PROPERTIES, "--cluster-id", cluster_id_for(self.topology, name)]
        volume = f"{host}-data"
        volumes = [f"{volume}:/var/lib/seaway"]
        if secured:
            mtls = (("replication",) if node.is_broker else ()) + (("controller",) if node.is_controller else ())
            props.update(secured_node_properties(
                keystore=secure.keystore_path(name, node.id), ca=secure.ca_path(), cluster=name,
                mechanism=self.security.mechanism, admin_user=self.security.admin_user, mtls_listeners=mtls))
            command += ["--add-scram-file", secure.scram_file_path()]
            volumes.append(f"pki:{secure.SECRETS_MOUNT}:ro")
        for extra in (cluster.config, node.config):
            props.update(extra)
        self.configs[host] = {"content": "".join(f"{k}={_property(v)}\n" for k, v in props.items())}
        self.volumes[volume] = None
        self.services[host] = {
            "image": IMAGE,
            "hostname": host,
            "command": command,
            "configs": [{"source": host, "target": NODE_PROPERTIES}],
            "networks": [region],
            "volumes": volumes,
            "ports": ports,
            "healthcheck": _healthcheck(METRICS_PORT),
            "stop_grace_period": "30s",
            "labels": {"io.seaway.region": region, "io.seaway.cluster": name, "io.seaway.node-id": str(node.id)},
        }
        if secured:
            self.services[host]["depends_on"] = {"pki": {"condition": "service_completed_successfully"}}
        _add_target(self.scrape["seaway-nodes"], f"{host}:{METRICS_PORT}", region=region, cluster=name)

    def add_pki(self, secrets_on_host: str) -> None:
        """The one-shot service that makes the secrets (regions/compose_security.py)."""
        assert self.security is not None
        command = ["regions", "pki", "--dir", secure.SECRETS_MOUNT, "--mechanism", self.security.mechanism,
                   "--admin-user", self.security.admin_user, "--mirror-user", self.security.mirror_user,
                   "--owner", "%d:%d" % secure.IMAGE_USER, "--export", secure.EXPORT_MOUNT,
                   "--export-ca", f"${{SEAWAY_SECRETS_DIR:-{secrets_on_host}}}/ca.crt"]
        for _, name, cluster in self.topology.clusters():
            for node in cluster.nodes:
                # The names a node is reached by: its container, the WAN container (clients of
                # other regions), and the host's address its EXTERNAL listener is published at.
                command += ["--node", f"{name}/{node.id}={_host(name, node.id)},wan,{node.host}"]
        for spec, _, _ in self.gateways():
            # Its container's name (inside the region's network) and where it is published.
            command += ["--gateway", f"{spec.name}={spec.name},{GATEWAY_HOST}"]
        self.volumes["pki"] = None
        self.services["pki"] = {
            "image": IMAGE,
            "user": "root",
            "command": command,
            "network_mode": "none",
            "volumes": [f"pki:{secure.SECRETS_MOUNT}", f"${{SEAWAY_SECRETS_DIR:-./secrets}}:{secure.EXPORT_MOUNT}"],
            "labels": {"io.seaway.role": "pki"},
        }

    def add_mirror_acls(self) -> None:
        """The one-shot service that grants the mirror user its ACLs once the nodes are up."""
        assert self.security is not None
        command = ["regions", "grant-mirror-acls", "--command-config",
                   secure.client_properties_path(self.security.admin_user), "--mirror-user", self.security.mirror_user]
        touched = list(dict.fromkeys(c for m in self.topology.mirror_runs() for c in (m.source, m.target)))
        waits_for = {}
        for name in touched:
            brokers = self.topology.cluster(name).brokers
            command += ["--cluster", f"{name}=" + ",".join(f"{_host(name, n.id)}:{INTERNAL_PORT}" for n in brokers)]
            for n in self.topology.cluster(name).nodes:
                # Started, not healthy: it asks again every second until the cluster takes the
                # ACLs, which is sooner than the nodes' first healthcheck (one interval in).
                waits_for[_host(name, n.id)] = {"condition": "service_started"}
        for m in self.topology.mirror_runs():
            command += ["--link", f"{m.source},{m.target},{m.policy}"]
        paired = list(dict.fromkeys(c for spec, _, _ in self.gateways() for c in (spec.first, spec.second)))
        if paired:
            command += ["--gateway-user", GATEWAY_USER]
            for name in paired:
                command += ["--gateway-cluster", name]
        self.services["mirror-acls"] = {
            "image": IMAGE,
            "command": command,
            "networks": sorted({self.topology.region_of(name) for name in touched},
                               key=list(self.topology.regions).index),
            "volumes": [f"pki:{secure.SECRETS_MOUNT}:ro"],
            "depends_on": waits_for,
            "labels": {"io.seaway.role": "mirror-acls"},
        }

    def add_wan(self) -> None:
        command = ["regions", "wan", "--metrics-port", str(METRICS_PORT)]
        for a, b, latency, mbit in self.topology.wan_pairs():
            command += ["--link", f"{a},{b},{latency:g},{'unlimited' if mbit is None else f'{mbit:g}'}"]
        for proxy in self.proxies:
            command += ["--proxy", proxy]
        self.services["wan"] = {
            "image": IMAGE,
            "hostname": "wan",
            "command": command,
            "networks": list(self.topology.regions),
            "healthcheck": _healthcheck(METRICS_PORT),
            "labels": {"io.seaway.role": "wan"},
        }
        _add_target(self.scrape["seaway-wan"], f"wan:{METRICS_PORT}")

    def add_mirror(self, m) -> None:
        """A link runs in its target's region and reads the source through the WAN, as the
        platform runs it (PlatformLayout.mirror_links)."""
        service = f"mirror-{m.source}-to-{m.target}"
        target_region = self.topology.region_of(m.target)
        sources = self.topology.cluster(m.source).brokers
        if self.topology.region_of(m.source) == target_region:
            source_bootstrap = ",".join(f"{_host(m.source, n.id)}:{INTERNAL_PORT}" for n in sources)
        else:
            source_bootstrap = ",".join(f"wan:{self.wan_ports[(m.source, n.id, target_region)]}" for n in sources)
        link = self.topology.mirror_link_config(
            m, source_bootstrap, ",".join(f"{_host(m.target, n.id)}:{INTERNAL_PORT}"
                                          for n in self.topology.cluster(m.target).brokers))
        if self.security is not None:   # its own user on both sides; the password stays on the pki volume
            props = secure.client_properties_path(self.security.mirror_user)
            link["source_properties_file"] = link["target_properties_file"] = props
        self.configs[service] = {"content": yaml.safe_dump({"links": [link]}, sort_keys=False)}
        self.services[service] = {
            "image": IMAGE,
            "hostname": service,
            "command": ["mirror", "run", "--config", f"/etc/seaway/{service}.yml",
                        "--metrics-port", str(MIRROR_METRICS_PORT), "--metrics-host", "0.0.0.0"],
            "networks": [target_region],
            "configs": [{"source": service, "target": f"/etc/seaway/{service}.yml"}],
            "healthcheck": _healthcheck(MIRROR_METRICS_PORT),
            "stop_grace_period": "20s",
            "labels": {"io.seaway.role": "mirror", "io.seaway.link": f"{m.source}->{m.target}"},
        }
        if self.security is not None:
            self.services[service]["volumes"] = [f"pki:{secure.SECRETS_MOUNT}:ro"]
            self.services[service]["depends_on"] = {"mirror-acls": {"condition": "service_completed_successfully"}}
        _add_target(self.scrape["seaway-mirror"], f"{service}:{MIRROR_METRICS_PORT}", region=target_region,
                    cluster=m.target)

    def _reach(self, cluster: str, region: str) -> str:
        """`cluster`'s bootstrap for a client in `region`: its brokers inside their region, the
        WAN's proxies from elsewhere."""
        brokers = self.topology.cluster(cluster).brokers
        if self.topology.region_of(cluster) == region:
            return ",".join(f"{_host(cluster, n.id)}:{INTERNAL_PORT}" for n in brokers)
        return ",".join(f"wan:{self.wan_ports[(cluster, n.id, region)]}" for n in brokers)

    def gateways(self) -> list[tuple]:
        """(spec, slot ports, metrics port) of every gateway."""
        ports = fixed_gateway_ports(self.topology)
        return [(spec, *ports[spec.name]) for spec in gateway_specs(self.topology)]

    def add_gateways(self) -> None:
        for spec, slots, metrics in self.gateways():
            command = ["seaway", "gateway", "--pair", spec.pair]
            for cluster in (spec.first, spec.second):
                command += ["--cluster", f"{cluster}={self._reach(cluster, spec.region)}"]
            command += ["--listen", f"0.0.0.0:{slots[0]}", "--slots", str(len(slots)),
                        "--advertised-host", GATEWAY_HOST, "--metrics-port", str(metrics)]
            service = self.services[spec.name] = {
                "image": IMAGE,
                "hostname": spec.name,
                "command": command,
                "networks": [spec.region],
                "ports": [f"{GATEWAY_HOST}:{p}:{p}" for p in (*slots, metrics)],
                "healthcheck": _healthcheck(metrics),
                "labels": {"io.seaway.role": "gateway", "io.seaway.region": spec.region,
                           "io.seaway.dr-pair": spec.pair},
            }
            if self.security is not None:
                # TLS with its own certificate, SCRAM relayed to the brokers, and its own login
                # (its password stays on the pki volume); started once its ACLs are in place.
                listener = f"/etc/seaway/{spec.name}-listener.properties"
                props = gateway_listener_properties(keystore=secure.gateway_keystore_path(spec.name),
                                                    mechanism=self.security.mechanism)
                self.configs[f"{spec.name}-listener"] = {"content": "".join(f"{k}={v}\n" for k, v in props.items())}
                command += ["--listener-config", listener,
                            "--command-config", secure.client_properties_path(GATEWAY_USER)]
                service["configs"] = [{"source": f"{spec.name}-listener", "target": listener}]
                service["volumes"] = [f"pki:{secure.SECRETS_MOUNT}:ro"]
                service["depends_on"] = {"mirror-acls": {"condition": "service_completed_successfully"}}
            _add_target(self.scrape["seaway-gateway"], f"{spec.name}:{metrics}", region=spec.region)

    def add_dr(self) -> None:
        """`dr serve`, the DR controller's daemon: on every region's network (it must reach both
        clusters of each pair), its history and decisions on a volume, the API on the host."""
        def side(cluster: str) -> dict:
            access = {"cluster": cluster, "region": self.topology.region_of(cluster),
                      "bootstrap": ",".join(f"{_host(cluster, n.id)}:{INTERNAL_PORT}"
                                            for n in self.topology.cluster(cluster).brokers)}
            if self.security is not None:
                access["properties_file"] = secure.client_properties_path(self.security.admin_user)
            return access

        dr = self.topology.dr
        def gateways(m) -> dict:
            # Shown by `dr status` in the dr container: clients on the host bootstrap at the
            # published ports; dr reads the metrics over the region's network.
            mine = [{"region": spec.region, "bootstrap": ",".join(f"{GATEWAY_HOST}:{p}" for p in slots),
                     "metrics": f"http://{spec.name}:{metrics}/metrics"}
                    for spec, slots, metrics in self.gateways() if spec.first == m.source]
            return {"gateways": mine} if mine else {}

        config = {"state_dir": DR_STATE_DIR, "regions": list(self.topology.regions),
                  "rpo_target_s": dr.rpo_target_s, "rto_target_s": dr.rto_target_s,
                  "pairs": [{"first": side(m.source), "second": side(m.target), "topics": list(m.topics),
                             **({"exclude": list(m.exclude)} if m.exclude else {}), **gateways(m)}
                            for m in self.topology.dr_pairs()]}
        if dr.drill_schedule:
            config["drill_schedule"] = dr.drill_schedule
        if dr.auto_failover_after_s is not None:
            config["auto_failover_after_s"] = dr.auto_failover_after_s
        # The console (on the DR port): its charts and alerts from the platform's Prometheus.
        config["console"] = {"prometheus_url": "http://prometheus:9090", "operators": list(dr.operators),
                             "link_capacity_mbit": self.topology.link_capacity_mbit()}
        self.configs["dr"] = {"content": yaml.safe_dump(config, sort_keys=False)}
        self.services["dr"] = {
            "image": IMAGE,
            "hostname": "dr",
            "command": ["dr", "--config", "/etc/seaway/dr.yml", "serve", "--listen", f"0.0.0.0:{DR_PORT}"],
            "networks": list(self.topology.regions),
            "ports": [f"127.0.0.1:{DR_PORT}:{DR_PORT}"],
            "configs": [{"source": "dr", "target": "/etc/seaway/dr.yml"}],
            "volumes": ["dr-state:/var/lib/seaway"],
            "healthcheck": _healthcheck(DR_PORT),
            "labels": {"io.seaway.role": "dr"},
        }
        self.volumes["dr-state"] = None
        if self.security is not None:
            self.services["dr"]["volumes"].append(f"pki:{secure.SECRETS_MOUNT}:ro")
            self.services["dr"]["depends_on"] = {"pki": {"condition": "service_completed_successfully"}}
        _add_target(self.scrape["seaway-dr"], f"dr:{DR_PORT}")

    def add_prometheus(self) -> None:
        self.configs["prometheus"] = {"content": _prometheus_config(self.topology, self.scrape)}
        self.configs["alerts"] = {"file": f"{self.assets}/alerts.yml"}
        self.services["prometheus"] = {
            "image": PROMETHEUS_IMAGE,
            "entrypoint": ["prometheus"],
            "command": ["--config.file=/etc/prometheus/prometheus.yml",
                        "--storage.tsdb.path=/prometheus", "--web.listen-address=:9090"],
            "networks": list(self.topology.regions),
            "ports": [f"127.0.0.1:{PROMETHEUS_PORT}:9090"],
            "configs": [{"source": "prometheus", "target": "/etc/prometheus/prometheus.yml"},
                        {"source": "alerts", "target": "/etc/prometheus/rules/seaway.yml"}],
            "volumes": ["prometheus-data:/prometheus"],
            "labels": {"io.seaway.role": "prometheus"},
        }
        self.volumes["prometheus-data"] = None

    def add_grafana(self) -> None:
        """Grafana cannot run where images cannot be pulled; it is there for those who can
        (`--profile grafana`), with the dashboards and datasource provisioned."""
        self.services["grafana"] = {
            "image": GRAFANA_IMAGE,
            "profiles": ["grafana"],
            "networks": list(self.topology.regions),
            "ports": [f"127.0.0.1:{GRAFANA_PORT}:3000"],
            "environment": {"GF_AUTH_ANONYMOUS_ENABLED": "true", "GF_AUTH_ANONYMOUS_ORG_ROLE": "Viewer"},
            "volumes": [f"{self.assets}/grafana/provisioning:/etc/grafana/provisioning:ro",
                        f"{self.assets}/grafana/dashboards:/var/lib/grafana/dashboards:ro"],
            "depends_on": ["prometheus"],
            "labels": {"io.seaway.role": "grafana"},
        }

    def to_dict(self) -> dict:
        return {
            "name": self.topology.name,
            "services": self.services,
            "networks": {region: {"labels": {"io.seaway.region": region}} for region in self.topology.regions},
            "volumes": self.volumes,
            "configs": self.configs,
        }


def _add_target(groups: list[dict], target: str, **labels: str) -> None:
    """Targets grouped by their labels (region and cluster), so that rules and dashboards can
    aggregate by them."""
    for group in groups:
        if group["labels"] == labels:
            group["targets"].append(target)
            return
    groups.append({"targets": [target], "labels": labels})


def _prometheus_config(topology: Topology, scrape: dict[str, list[dict]]) -> str:
    jobs = [{"job_name": job, "static_configs": groups} for job, groups in scrape.items() if groups]
    doc = {"global": {"scrape_interval": f"{SCRAPE_INTERVAL_S}s", "evaluation_interval": f"{SCRAPE_INTERVAL_S}s",
                      "external_labels": {"platform": topology.name}},
           "rule_files": ["/etc/prometheus/rules/*.yml"],
           "scrape_configs": jobs}
    return yaml.safe_dump(doc, sort_keys=False)


def _healthcheck(port: int) -> dict:
    return {"test": ["CMD", "bash", "-c", HEALTH_PROBE.format(port=port)],
            "interval": f"{HEALTH_INTERVAL_S}s", "timeout": "5s", "retries": 3, "start_period": "60s"}


def _check_expressible(topology: Topology) -> None:
    """What compose cannot do, as a one-line TopologyError naming the field."""
    for region, name, cluster in topology.clusters():
        for i, node in enumerate(cluster.nodes):
            at = ("regions", region, "clusters", name, "nodes", i)
            if node.is_broker and node.port is None:
                raise TopologyError(f"{_dotted(at + ('port',))}: compose publishes each broker on a "
                                    f"fixed host port; give the node a `port`")
            for field in ("port", "metrics_port"):
                value = getattr(node, field)
                for port, owner in ((PROMETHEUS_PORT, "Prometheus'"), (GRAFANA_PORT, "Grafana's")):
                    if value == port:
                        raise TopologyError(f"{_dotted(at + (field,))}: port {value} is {owner} on the host")


def _host(cluster: str, node_id: int) -> str:
    return f"{cluster}-{node_id}"


def _property(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


class _Dumper(yaml.SafeDumper):
    """Block style; multi-line strings (the inline configs) as literal blocks; no aliases."""

    def ignore_aliases(self, data):
        return True


def _str(dumper, data: str):
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


def _none(dumper, data):
    return dumper.represent_scalar("tag:yaml.org,2002:null", "")


_Dumper.add_representer(str, _str)
_Dumper.add_representer(type(None), _none)

