"""Where a platform's gateways go (regions/gateways.py with regions/layout.py), read without
starting anything: one per region for each DR pair, reaching the pair's clusters as clients in
its region do, on ports that collide with nothing and stay put."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from cryptography import x509

from regions.gateways import fixed_gateway_ports
from regions.layout import PORTS_FILE, pick_range, plan
from regions.topology import DEFAULT_TOPOLOGY, parse_topology

PAIR = """\
name: t
regions:
  eu:
    clusters:
      eu-1:
        nodes:
          - {id: 1, roles: [broker, controller], zone: a}
          - {id: 2, roles: [broker], zone: b}
  us:
    clusters:
      us-1:
        nodes: [{id: 1, roles: [broker, controller], zone: a}]
  ap:
    clusters:
      ap-1:
        nodes: [{id: 1, roles: [broker, controller], zone: a}]
mirrors: [{source: eu-1, target: us-1, policy: identity}, {source: eu-1, target: ap-1}]
"""


def plaintext_default():
    return parse_topology(DEFAULT_TOPOLOGY.read_text().replace("enabled: true", "enabled: false"))


def test_each_region_gets_a_gateway_of_each_pair_that_reaches_it_as_its_clients_do(tmp_path):
    layout = plan(parse_topology(PAIR), tmp_path)
    assert [(g.spec.name, g.spec.pair, g.spec.region) for g in layout.gateways] == [
        ("gateway-eu-eu-1", "eu-1~us-1", "eu"), ("gateway-us-eu-1", "eu-1~us-1", "us"),
        ("gateway-ap-eu-1", "eu-1~us-1", "ap")]
    for g in layout.gateways:
        assert list(g.clusters) == ["eu-1", "us-1"]         # the primary first: served until a decision
        assert g.clusters == {c: layout.wan_bootstrap(c, g.spec.region) for c in g.clusters}
        assert len(g.ports) == 2 and g.ports[1] == g.ports[0] + 1     # a slot per broker of the larger cluster
        assert g.bootstrap == f"127.0.0.1:{g.ports[0]},127.0.0.1:{g.ports[1]}"
    eu = layout.gateways[0]
    assert eu.clusters["eu-1"] == layout.clusters["eu-1"].bootstrap     # direct inside its region
    assert eu.clusters["us-1"] == layout.wan_bootstrap("us-1", "eu") != layout.clusters["us-1"].bootstrap
    # No port is used twice, and a second start keeps them.
    used = [p for n in layout.nodes() for p in (n.client_port, n.controller_port, n.metrics_port, *n.wan_ports.values())
            if p is not None] + [p.listen_port for p in layout.proxies] + [layout.mirror_metrics_port, layout.dr_port]
    used += [p for g in layout.gateways for p in (*g.ports, g.metrics_port)]
    assert len(used) == len(set(used))
    again = plan(parse_topology(PAIR), tmp_path)
    assert [(g.ports, g.metrics_port) for g in again.gateways] == [(g.ports, g.metrics_port) for g in layout.gateways]


def test_kept_slots_that_are_not_consecutive_any_more_are_picked_again(tmp_path):
    """(A pair's clusters that grew need more slots than were kept.)"""
    before = plan(parse_topology(PAIR), tmp_path).gateways[0]
    ports = json.loads((tmp_path / PORTS_FILE).read_text())
    ports["gateway-eu-eu-1/slot/1"] = before.ports[0] + 7        # no longer consecutive
    (tmp_path / PORTS_FILE).write_text(json.dumps(ports))
    after = plan(parse_topology(PAIR), tmp_path).gateways[0]
    assert after.ports[1] == after.ports[0] + 1


def test_fixed_broker_ports_fix_the_gateways_ports_as_compose_publishes_them(tmp_path):
    layout = plan(plaintext_default(), tmp_path)
    assert [(g.spec.region, g.bootstrap, g.metrics_port) for g in layout.gateways] == [
        ("eu-west", "127.0.0.1:31092,127.0.0.1:31093,127.0.0.1:31094", 31190),
        ("us-east", "127.0.0.1:31192,127.0.0.1:31193,127.0.0.1:31194", 31290)]
    # A port the platform picked before the gateways had theirs is picked again.
    ports = json.loads((tmp_path / PORTS_FILE).read_text())
    ports["mirror/metrics_port"] = 31193
    (tmp_path / PORTS_FILE).write_text(json.dumps(ports))
    assert plan(plaintext_default(), tmp_path).mirror_metrics_port not in (31192, 31193, 31194, 31290)


def test_a_block_holding_a_port_the_topology_names_is_skipped():
    text = DEFAULT_TOPOLOGY.read_text().replace("enabled: true", "enabled: false").replace(
        "metrics_port: 29294", "metrics_port: 31190")
    ports = fixed_gateway_ports(parse_topology(text))
    assert ports == {"gateway-eu-west-eu-west-1": ([31192, 31193, 31194], 31290),
                     "gateway-us-east-eu-west-1": ([31292, 31293, 31294], 31390)}


def test_a_secured_platforms_gateways_get_tls_a_login_of_their_own_and_only_its_acls(tmp_path):
    from core.client.acl_admin import AclOperation, ResourceType
    from core.client.properties import parse_properties
    from regions.layout import write_gateway_listener
    from regions.supervisor import GatewayProcess
    layout = plan(parse_topology(PAIR + "security: {enabled: true}\n"), tmp_path)
    security = layout.security
    assert [g.spec.name for g in layout.gateways] == ["gateway-eu-eu-1", "gateway-us-eu-1", "gateway-ap-eu-1"]
    g = layout.gateways[0]
    write_gateway_listener(g, security)
    listener = parse_properties(g.listener_config.read_text())
    assert listener == {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(tmp_path / "pki" / f"{g.spec.name}.pem"),
                        "sasl.enabled.mechanisms": security.mechanism}
    cert = x509.load_pem_x509_certificate((tmp_path / "pki" / f"{g.spec.name}.crt").read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "127.0.0.1" in {str(ip) for ip in names.get_values_for_type(x509.IPAddress)}
    # Its own login is the platform's gateway user, whose properties sit beside the others'.
    security.write_client_files()
    own = parse_properties(g.command_config.read_text())
    assert own["sasl.username"] == "seaway-gateway" == security.gateway_user
    assert own["sasl.password"] == json.loads((tmp_path / "secrets.json").read_text())["seaway-gateway"]
    assert any("name=seaway-gateway," in a for a in security.scram_arguments())
    args = GatewayProcess(tmp_path, g).args
    assert args[args.index("--listener-config") + 1] == str(g.listener_config)
    assert args[args.index("--command-config") + 1] == str(g.command_config)
    # Exactly: envelopes (ClusterAction) and following the decision record.
    assert sorted((b.resource_type, b.name, b.operation, b.principal) for b in security.gateway_acls()) == sorted([
        (ResourceType.CLUSTER, "kafka-cluster", AclOperation.CLUSTER_ACTION, "User:seaway-gateway"),
        (ResourceType.TOPIC, "__seaway_dr", AclOperation.READ, "User:seaway-gateway"),
        (ResourceType.TOPIC, "__seaway_dr", AclOperation.DESCRIBE, "User:seaway-gateway")])
    # A plaintext platform's gateways take neither file.
    plain = plan(parse_topology(PAIR), tmp_path / "plain").gateways[0]
    assert plain.listener_config is None and "--listener-config" not in GatewayProcess(tmp_path, plain).args


def test_the_readme_names_the_gateways_addresses(tmp_path):
    """A newcomer reads addresses in the README, never in the source: they must agree."""
    readme = (DEFAULT_TOPOLOGY.parents[2] / "README.md").read_text()
    for g in plan(plaintext_default(), tmp_path).gateways:
        assert f"| {g.spec.region} | `{g.bootstrap}` | `{g.metrics_url}` |" in readme
    # The shipped (secured) default gets the same gateways, and the README says how to log in.
    secured = plan(parse_topology(DEFAULT_TOPOLOGY.read_text()), tmp_path / "secured")
    assert [g.bootstrap for g in secured.gateways] == [g.bootstrap for g in plan(plaintext_default(), tmp_path).gateways]
    regions = readme[readme.index("## Regions"):readme.index("## Containers")]
    assert "clients/admin.properties" in regions and "clients/seaway-gateway.properties" in regions
    assert "gets none yet" not in regions and "no gateway" not in regions


def test_picked_ports_lie_outside_the_ephemeral_range(tmp_path):
    """A picked port in the ephemeral range can become some process's outgoing connection
    before its owner binds it (a 4-cluster platform's gateway met that)."""
    layout = plan(parse_topology(PAIR), tmp_path)
    picked = [p for n in layout.nodes() for p in (n.client_port, n.controller_port, n.metrics_port,
                                                  *n.wan_ports.values()) if p is not None]
    picked += [p.listen_port for p in layout.proxies] + [layout.mirror_metrics_port]
    picked += [p for g in layout.gateways for p in (*g.ports, g.metrics_port)]
    low, high = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    assert picked and all(not low <= p <= high for p in picked), sorted(picked)
    assert all(p in pick_range() for p in picked)


@pytest.mark.parametrize("ephemeral, expected", [
    ((32768, 60999), range(61000, 65536)),         # Linux's default: above it
    ((49152, 65535), range(10000, 49152)),         # IANA's (BSD, Windows): nothing above, so below
    ((1024, 65000), range(10000, 65536)),          # nearly everything ephemeral: anywhere
])
def test_where_ports_are_picked(ephemeral, expected):
    assert pick_range(ephemeral) == expected


def test_the_default_platforms_mirror_and_console_are_where_the_readme_says(tmp_path):
    from regions.layout import DR_CONSOLE_PORT, MIRROR_METRICS_PORT
    layout = plan(parse_topology(DEFAULT_TOPOLOGY.read_text()), tmp_path)
    assert (layout.mirror_metrics_port, layout.dr_port) == (MIRROR_METRICS_PORT, DR_CONSOLE_PORT) == (9781, 9780)
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert f"`http://127.0.0.1:{MIRROR_METRICS_PORT}/metrics`" in readme
    assert f"`http://127.0.0.1:{DR_CONSOLE_PORT}/console/`" in readme
    # Without fixed ports the mirror's is picked once and kept.
    picked = plan(parse_topology(PAIR), tmp_path / "p").mirror_metrics_port
    assert picked in pick_range() and plan(parse_topology(PAIR), tmp_path / "p").mirror_metrics_port == picked
