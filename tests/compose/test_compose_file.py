"""The compose file is the topology's, and nothing else: the committed compose/two-regions.yml is
exactly what `regions compose` writes from the default topology, Docker Compose accepts it, and
every node's properties are ones a Seaway node accepts. What compose cannot express is a
one-line error naming the field."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from core.config import BrokerConfig
from regions.compose import FIRST_WAN_PROXY_PORT, cluster_id_for, compose_file
from regions.topology import DEFAULT_TOPOLOGY, TopologyError, load_topology, parse_topology
from regions.wan import ProxySpec, parse_link, parse_proxy, wan_proxies

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "compose" / "two-regions.yml"


def regions(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "regions.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=60)


def generated() -> str:
    return compose_file(load_topology(DEFAULT_TOPOLOGY))


def test_the_committed_compose_file_is_what_the_generator_writes():
    assert COMMITTED.read_text() == generated(), (
        "compose/two-regions.yml is stale: regenerate it with "
        "`regions compose -f compose/two-regions.yml`")


def test_regions_compose_writes_the_committed_file(tmp_path):
    out = tmp_path / "two-regions.yml"
    done = regions("compose", "-f", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert f"docker compose -f {out} up -d --wait" in done.stdout
    # Written elsewhere, the file points back at compose/ for the alert rules and Grafana's files.
    doc = yaml.safe_load(out.read_text())
    rules = doc["configs"]["alerts"]["file"]
    assert (out.parent / rules).resolve() == REPO / "compose" / "alerts.yml"
    for volume in doc["services"]["grafana"]["volumes"]:
        assert (out.parent / volume.split(":")[0]).resolve().is_dir(), volume
    # The CA path in the admin's properties for the host names the directory pki exports to.
    pki = doc["services"]["pki"]
    export_ca = pki["command"][pki["command"].index("--export-ca") + 1]
    mount = next(v for v in pki["volumes"] if v.endswith(":/export")).split(":/export")[0]
    assert export_ca == f"${{SEAWAY_SECRETS_DIR:-{out.parent}/secrets}}/ca.crt"
    assert mount == "${SEAWAY_SECRETS_DIR:-./secrets}"          # relative to the file: the same place
    assets = rules.removesuffix("/alerts.yml")
    body = lambda text: text.split("\n", 3)[3]    # noqa: E731 — past the header naming the paths
    assert (body(out.read_text()).replace(f"{assets}/", "./").replace(f"{out.parent}/secrets", "compose/secrets")
            == body(COMMITTED.read_text()))


def test_the_grafana_dashboard_and_its_provisioning():
    doc = yaml.safe_load(COMMITTED.read_text())
    grafana = doc["services"]["grafana"]
    assert grafana["profiles"] == ["grafana"]            # only with --profile grafana
    dashboard = json.loads((REPO / "compose" / "grafana" / "dashboards" / "seaway.json").read_text())
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
    assert {r["title"] for r in dashboard["panels"] if r["type"] == "row"} == {
        "Cluster health", "Replication between regions"}
    assert all(t["datasource"]["uid"] == "prometheus" for p in panels for t in p["targets"])
    source = yaml.safe_load((REPO / "compose" / "grafana" / "provisioning" / "datasources"
                             / "prometheus.yml").read_text())
    assert source["datasources"][0]["uid"] == "prometheus"
    assert source["datasources"][0]["url"] == "http://prometheus:9090"
    provider = yaml.safe_load((REPO / "compose" / "grafana" / "provisioning" / "dashboards"
                               / "seaway.yml").read_text())
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"


@pytest.mark.skipif(shutil.which("docker") is None, reason="docker is not installed")
def test_docker_compose_accepts_the_file():
    done = subprocess.run(["docker", "compose", "-f", str(COMMITTED), "config", "--quiet"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.mark.skipif(shutil.which("docker") is None, reason="docker is not installed")
def test_docker_compose_accepts_a_file_with_gateways(tmp_path):
    plaintext = tmp_path / "plaintext.yaml"
    plaintext.write_text(DEFAULT_TOPOLOGY.read_text().replace("enabled: true", "enabled: false"))
    assert regions("compose", str(plaintext), "-f", str(tmp_path / "plaintext.yml")).returncode == 0
    done = subprocess.run(["docker", "compose", "-f", str(tmp_path / "plaintext.yml"), "config", "--quiet"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_the_file_holds_every_node_network_volume_link_and_prometheus():
    doc = yaml.safe_load(COMMITTED.read_text())
    topology = load_topology(DEFAULT_TOPOLOGY)
    services = doc["services"]
    assert set(doc["networks"]) == {"eu-west", "us-east"}
    nodes = {f"{name}-{n.id}": (region, name, n) for region, name, c in topology.clusters() for n in c.nodes}
    for host, (region, cluster, node) in nodes.items():
        service = services[host]
        assert service["hostname"] == host
        assert service["networks"] == [region]
        assert service["volumes"] == [f"{host}-data:/var/lib/seaway", "pki:/etc/seaway/secure:ro"]
        assert f"127.0.0.1:{node.port}:9095" in service["ports"]
        command = service["command"]
        assert command[command.index("--cluster-id") + 1] == cluster_id_for(topology, cluster)
        assert command[command.index("--add-scram-file") + 1] == "/etc/seaway/secure/scram.txt"
        assert service["depends_on"] == {"pki": {"condition": "service_completed_successfully"}}
        props = dict(line.split("=", 1) for line in doc["configs"][host]["content"].splitlines())
        assert props["broker.rack"] == node.zone
        assert props["node.id"] == str(node.id)
        config = BrokerConfig(props, warn_unknown=False)     # a node accepts every property
        assert config.node_id == node.id
        advertised = {listener.name: (listener.host, listener.port) for listener in config.advertised_listeners}
        assert advertised["EXTERNAL"] == ("127.0.0.1", node.port)
        assert advertised["INTERNAL"] == (host, 9092)
        other = "US_EAST" if region == "eu-west" else "EU_WEST"
        assert advertised[f"WAN_{other}"][0] == "wan"
        # Secured as the topology asks: SCRAM over TLS for clients, mTLS between nodes, ACLs.
        assert config.protocol_map == {"EXTERNAL": "SASL_SSL", "INTERNAL": "SASL_SSL", f"WAN_{other}": "SASL_SSL",
                                             "REPLICATION": "SSL", "CONTROLLER": "SSL"}
        assert props["inter.broker.listener.name"] == "REPLICATION"
        assert props["listener.name.replication.ssl.client.auth"] == "required"
        assert props["listener.name.controller.ssl.client.auth"] == "required"
        assert props["ssl.keystore.location"] == f"/etc/seaway/secure/pki/{cluster}-node-{node.id}.pem"
        assert props["allow.everyone.if.no.acl.found"] == "false"
        assert props["super.users"] == f"User:node.{cluster};User:admin"
        # Its certificate names every way it is reached: its container, the WAN, the host.
        pki = services["pki"]["command"]
        assert f"{cluster}/{node.id}={host},wan,127.0.0.1" in pki
    # One cluster id per cluster, stable, and different between clusters.
    assert cluster_id_for(topology, "eu-west-1") != cluster_id_for(topology, "us-east-1")
    assert cluster_id_for(topology, "eu-west-1") == cluster_id_for(load_topology(DEFAULT_TOPOLOGY), "eu-west-1")

    wan = services["wan"]
    assert wan["networks"] == ["eu-west", "us-east"]
    assert wan["command"][wan["command"].index("--link") + 1] == "eu-west,us-east,40,100"

    mirror = services["mirror-eu-west-1-to-us-east-1"]
    assert mirror["networks"] == ["us-east"]          # runs where its target is
    [link] = yaml.safe_load(doc["configs"]["mirror-eu-west-1-to-us-east-1"]["content"])["links"]
    assert link["source_bootstrap"].split(",") == [f"wan:{FIRST_WAN_PROXY_PORT + i}" for i in range(3)]
    assert link["target_bootstrap"] == "us-east-1-1:9092,us-east-1-2:9092,us-east-1-3:9092"
    assert link["rpo_target_s"] == topology.dr.rpo_target_s
    assert link["policy"] == "identity" and link["dr_pair"]
    # The DR pair's link back runs in eu-west, reading us-east-1 through the WAN.
    back = services["mirror-us-east-1-to-eu-west-1"]
    assert back["networks"] == ["eu-west"]
    [link_back] = yaml.safe_load(doc["configs"]["mirror-us-east-1-to-eu-west-1"]["content"])["links"]
    assert (link_back["source_alias"], link_back["target_alias"], link_back["dr_pair"]) == ("us-east-1", "eu-west-1", True)
    assert all(a.startswith("wan:") for a in link_back["source_bootstrap"].split(","))
    # The mirror logs in as its own user, whose password stays on the pki volume, and starts
    # once mirror-acls has granted that user what the link needs, which starts with the nodes.
    assert link["source_properties_file"] == link["target_properties_file"] == "/etc/seaway/secure/clients/mirror.properties"
    assert "source_properties" not in link and "password" not in doc["configs"]["mirror-eu-west-1-to-us-east-1"]["content"]
    assert mirror["depends_on"] == {"mirror-acls": {"condition": "service_completed_successfully"}}
    grant = services["mirror-acls"]
    assert grant["depends_on"] == {host: {"condition": "service_started"} for host in nodes}
    links = [grant["command"][i + 1] for i, arg in enumerate(grant["command"]) if arg == "--link"]
    assert links == ["eu-west-1,us-east-1,identity", "us-east-1,eu-west-1,identity"]    # a DR pair: both ways
    assert services["pki"]["network_mode"] == "none" and services["pki"]["user"] == "root"

    prometheus = yaml.safe_load(doc["configs"]["prometheus"]["content"])
    jobs = {job["job_name"]: job for job in prometheus["scrape_configs"]}
    scraped = {t for group in jobs["seaway-nodes"]["static_configs"] for t in group["targets"]}
    assert scraped == {f"{host}:9094" for host in nodes}
    assert [g["targets"] for g in jobs["seaway-mirror"]["static_configs"]] == [
        ["mirror-eu-west-1-to-us-east-1:9100"], ["mirror-us-east-1-to-eu-west-1:9100"]]
    assert prometheus["rule_files"] == ["/etc/prometheus/rules/*.yml"]
    assert doc["configs"]["alerts"] == {"file": "./alerts.yml"}


def test_every_proxy_joins_a_node_to_the_other_region_through_the_shared_pipes():
    doc = yaml.safe_load(COMMITTED.read_text())
    command = doc["services"]["wan"]["command"]
    specs = [parse_proxy(command[i + 1]) for i, arg in enumerate(command) if arg == "--proxy"]
    links = [parse_link(command[i + 1]) for i, arg in enumerate(command) if arg == "--link"]
    assert len(specs) == 6
    assert {(s.client_region, s.server_region) for s in specs} == {("us-east", "eu-west"), ("eu-west", "us-east")}
    proxies = wan_proxies(links, specs)
    eastbound = [p for s, p in zip(specs, proxies) if s.client_region == "us-east"]
    assert len({id(p.forward_pipe) for p in eastbound}) == 1      # one link, shared bandwidth
    assert eastbound[0].forward_pipe.latency_s == pytest.approx(0.040)
    assert eastbound[0].forward_pipe.bandwidth_bps == pytest.approx(100e6)


BROKER_WITHOUT_PORT = """
name: t
regions:
  a:
    clusters:
      a-1:
        nodes:
          - {id: 1, roles: [broker, controller], zone: z1}
  b:
    clusters:
      b-1:
        nodes:
          - {id: 1, roles: [broker, controller], zone: z1, port: 29092}
"""


def test_a_broker_without_a_port_cannot_be_published(tmp_path):
    with pytest.raises(TopologyError) as err:
        compose_file(parse_topology(BROKER_WITHOUT_PORT))
    assert str(err.value) == ("regions.a.clusters.a-1.nodes[0].port: compose publishes each broker on "
                              "a fixed host port; give the node a `port`")
    path = tmp_path / "t.yaml"
    path.write_text(BROKER_WITHOUT_PORT)
    done = regions("compose", str(path))
    assert done.returncode == 2
    assert done.stderr == ("regions compose: regions.a.clusters.a-1.nodes[0].port: compose publishes each "
                           "broker on a fixed host port; give the node a `port`\n")


def test_the_prometheus_port_is_not_a_node_port():
    text = BROKER_WITHOUT_PORT.replace("zone: z1}", "zone: z1, port: 19092, metrics_port: 9090}", 1)
    with pytest.raises(TopologyError, match=r"^regions\.a\.clusters\.a-1\.nodes\[0\]\.metrics_port: port 9090"):
        compose_file(parse_topology(text))


@pytest.mark.parametrize("old", ["-o", "--output"])
def test_the_old_spelling_of_the_file_flag_still_writes_it_and_says_what_replaces_it(tmp_path, old):
    out = tmp_path / "old.yml"
    done = regions("compose", old, str(out))
    assert done.returncode == 0 and out.exists(), done.stderr
    assert done.stderr == f"regions compose: note: {old} is deprecated and goes in the next release: use -f (--file)\n"


def test_an_unwritable_output_is_one_line(tmp_path):
    done = regions("compose", "-f", str(tmp_path / "no" / "such" / "dir.yml"))
    assert done.returncode == 1
    assert done.stderr.startswith("regions compose: --file: cannot write ")
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("args, message", [
    (["--link", "eu,us,40"], "--link: 'eu,us,40' is not A,B,LATENCY_MS,MBIT with two different regions"),
    (["--link", "eu,eu,40,100"], "--link: 'eu,eu,40,100' is not A,B,LATENCY_MS,MBIT with two different regions"),
    (["--link", "eu,us,soon,100"], "--link: latency 'soon' in 'eu,us,soon,100' is not a number"),
    (["--link", "eu,us,-1,100"], "--link: latency '-1' in 'eu,us,-1,100' is not between 0 and 60000 ms"),
    (["--link", "eu,us,40,0"], "--link: bandwidth '0' in 'eu,us,40,0' is not > 0"),
    (["--link", "eu,us,40,fast"], "--link: bandwidth 'fast' in 'eu,us,40,fast' is not a number or 'unlimited'"),
    (["--link", "eu,us,40,100", "--proxy", "10000=host@us>eu"], "--proxy: '10000=host@us>eu' is not PORT=HOST:PORT@CLIENT>SERVER"),
    (["--link", "eu,us,40,100", "--proxy", "70000=h:1@us>eu"], "--proxy: port 70000 in '70000=h:1@us>eu' is not between 1 and 65535"),
    (["--link", "eu,us,40,100", "--proxy", "10000=h:1@us>us"], "--proxy: '10000=h:1@us>us' needs a host and two different regions"),
    (["--link", "eu,us,40,100", "--proxy", "10000=h:1@ap>eu"], "--proxy: no --link joins ap and eu"),
    (["--link", "eu,us,40,100"], "--proxy: give at least one proxy"),
])
def test_bad_wan_arguments_are_one_line(args, message):
    done = regions("wan", *args)
    assert done.returncode == 1
    assert done.stderr == f"regions wan: {message}\n"


def test_parsed_wan_arguments():
    assert parse_link("eu-west,us-east,40,unlimited") == ("eu-west", "us-east", 0.04, None)
    assert parse_proxy("10003=us-east-1-1:9096@eu-west>us-east") == ProxySpec(
        10003, "us-east-1-1", 9096, "eu-west", "us-east")


def test_the_readme_names_what_the_compose_file_publishes():
    """A newcomer reads addresses in the README, never in the compose file: they must agree."""
    readme = (REPO / "README.md").read_text()
    doc = yaml.safe_load(COMMITTED.read_text())
    section = readme[readme.index("## Containers: docker compose"):]
    section = section[:section.index("\n## ", 5)]
    for region, cluster in (("eu-west", "eu-west-1"), ("us-east", "us-east-1")):
        published = [doc["services"][f"{cluster}-{i}"]["ports"][0].rsplit(":", 1)[0] for i in (1, 2, 3)]
        assert f"| {cluster} (clients on the host) | `{','.join(published)}` |" in section
        for i in (1, 2, 3):
            metrics = doc["services"][f"{cluster}-{i}"]["ports"][1].split(":")[1]
            assert metrics in section
    assert doc["services"]["prometheus"]["ports"] == ["127.0.0.1:9090:9090"]
    assert "`http://127.0.0.1:9090`" in section
    assert doc["services"]["grafana"]["ports"] == ["127.0.0.1:3000:3000"]
    # Compose names the WAN container and the region networks after the project (`name:`).
    assert doc["name"] == "seaway"
    assert "docker network disconnect seaway_eu-west seaway-wan-1" in section
    assert "docker network connect --alias wan seaway_eu-west seaway-wan-1" in section
    assert "bash compose/build-image.sh && docker compose -f compose/two-regions.yml up -d --wait" in readme


def test_each_region_gets_a_gateway_of_each_dr_pair_when_the_topology_is_plaintext():
    topology = parse_topology(DEFAULT_TOPOLOGY.read_text().replace("enabled: true", "enabled: false"))
    text = compose_file(topology)
    doc = yaml.safe_load(text)
    services = doc["services"]
    assert [s for s in services if s.startswith("gateway-")] == ["gateway-eu-west-eu-west-1", "gateway-us-east-eu-west-1"]
    for name, region, first, metrics, reach in (
            ("gateway-eu-west-eu-west-1", "eu-west", 31092, 31190,
             ["eu-west-1=eu-west-1-1:9092,eu-west-1-2:9092,eu-west-1-3:9092", "us-east-1=wan:10003,wan:10004,wan:10005"]),
            ("gateway-us-east-eu-west-1", "us-east", 31192, 31290,
             ["eu-west-1=wan:10000,wan:10001,wan:10002", "us-east-1=us-east-1-1:9092,us-east-1-2:9092,us-east-1-3:9092"])):
        service = services[name]
        command = service["command"]
        assert command[:4] == ["seaway", "gateway", "--pair", "eu-west-1~us-east-1"]
        assert [command[i + 1] for i, arg in enumerate(command) if arg == "--cluster"] == reach   # the primary first
        assert command[command.index("--listen") + 1] == f"0.0.0.0:{first}"
        assert command[command.index("--slots") + 1] == "3"
        assert command[command.index("--advertised-host") + 1] == "127.0.0.1"
        assert command[command.index("--metrics-port") + 1] == str(metrics)
        # Published at the same numbers as inside, so that the addresses it advertises work on the host.
        assert service["ports"] == [f"127.0.0.1:{p}:{p}" for p in (first, first + 1, first + 2, metrics)]
        assert service["networks"] == [region] and service["image"] == services["wan"]["image"]
        assert f"/dev/tcp/127.0.0.1/{metrics} " in service["healthcheck"]["test"][-1]
        assert "GET /health" in service["healthcheck"]["test"][-1]
    prometheus = yaml.safe_load(doc["configs"]["prometheus"]["content"])
    jobs = {job["job_name"]: job for job in prometheus["scrape_configs"]}
    assert jobs["seaway-gateway"]["static_configs"] == [
        {"targets": ["gateway-eu-west-eu-west-1:31190"], "labels": {"region": "eu-west"}},
        {"targets": ["gateway-us-east-eu-west-1:31290"], "labels": {"region": "us-east"}}]
    # `dr status` in the dr container shows them: the host's bootstrap, the metrics over the network.
    [pair] = yaml.safe_load(doc["configs"]["dr"]["content"])["pairs"]
    assert pair["gateways"] == [
        {"region": "eu-west", "bootstrap": "127.0.0.1:31092,127.0.0.1:31093,127.0.0.1:31094",
         "metrics": "http://gateway-eu-west-eu-west-1:31190/metrics"},
        {"region": "us-east", "bootstrap": "127.0.0.1:31192,127.0.0.1:31193,127.0.0.1:31194",
         "metrics": "http://gateway-us-east-eu-west-1:31290/metrics"}]
    assert "no gateway" not in text


def test_a_secured_topologys_gateways_take_tls_and_their_own_login_granted_before_they_start():
    doc = yaml.safe_load(COMMITTED.read_text())
    services = doc["services"]
    gateways = [s for s in services if s.startswith("gateway-")]
    assert gateways == ["gateway-eu-west-eu-west-1", "gateway-us-east-eu-west-1"]
    pki = services["pki"]["command"]
    grant = services["mirror-acls"]["command"]
    assert grant[grant.index("--gateway-user") + 1] == "seaway-gateway"
    assert [grant[i + 1] for i, a in enumerate(grant) if a == "--gateway-cluster"] == ["eu-west-1", "us-east-1"]
    for name in gateways:
        service, command = services[name], services[name]["command"]
        # Its certificate names its container and where it is published (127.0.0.1).
        assert f"{name}={name},127.0.0.1" in [pki[i + 1] for i, a in enumerate(pki) if a == "--gateway"]
        listener = command[command.index("--listener-config") + 1]
        assert service["configs"] == [{"source": f"{name}-listener", "target": listener}]
        props = dict(line.split("=", 1) for line in doc["configs"][f"{name}-listener"]["content"].splitlines())
        assert props == {"ssl.keystore.type": "PEM", "ssl.keystore.location": f"/etc/seaway/secure/pki/{name}.pem",
                         "sasl.enabled.mechanisms": "SCRAM-SHA-512"}
        assert command[command.index("--command-config") + 1] == "/etc/seaway/secure/clients/seaway-gateway.properties"
        assert service["volumes"] == ["pki:/etc/seaway/secure:ro"]
        assert service["depends_on"] == {"mirror-acls": {"condition": "service_completed_successfully"}}
    assert "no gateway" not in COMMITTED.read_text()
