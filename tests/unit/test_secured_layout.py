"""What a topology's `security:` section turns a platform's node properties and mirror links
into (regions/layout.py with regions/security.py), read without starting anything."""
from __future__ import annotations

from core.config.broker import BrokerConfig
from regions.layout import plan
from regions.topology import parse_topology

TOPOLOGY = """\
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
mirrors: [{source: eu-1, target: us-1}]
security: {enabled: true, mechanism: SCRAM-SHA-256, admin_user: root, mirror_user: copier}
"""


def test_a_secured_node_has_scram_for_clients_and_mtls_between_nodes(tmp_path):
    layout = plan(parse_topology(TOPOLOGY), tmp_path)
    combined, broker = layout.clusters["eu-1"].nodes
    props = combined.properties
    protocols = dict(item.split(":") for item in props["listener.security.protocol.map"].split(","))
    assert protocols == {"CLIENT": "SASL_SSL", "INTERNAL": "SSL", "CONTROLLER": "SSL", "WAN_US": "SASL_SSL"}
    assert props["inter.broker.listener.name"] == "INTERNAL"
    assert props["listener.name.internal.ssl.client.auth"] == "required"
    assert props["listener.name.controller.ssl.client.auth"] == "required"
    assert "listener.name.controller.ssl.client.auth" not in broker.properties   # no controller listener
    assert props["super.users"] == "User:node.eu-1;User:root"
    assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-256"
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert props["audit.log.file"].endswith("node-1/audit.log")
    # The properties are a configuration a node accepts, every key used.
    config = BrokerConfig({k: v for k, v in props.items()}, warn_unknown=False)
    assert not config.unused, config.unused
    assert combined.internal_port not in (combined.client_port, combined.controller_port)


def test_the_mirror_logs_in_as_its_own_user_with_the_acls_of_its_links(tmp_path):
    layout = plan(parse_topology(TOPOLOGY), tmp_path)
    [link] = layout.mirror_links()
    for side in ("source_properties", "target_properties"):
        assert link[side]["sasl.username"] == "copier" and link[side]["security.protocol"] == "SASL_SSL"
    security = layout.security
    source = {(b.resource_type.name, b.name, b.operation.name) for b in security.mirror_acls("eu-1", layout.topology.mirrors)}
    target = {(b.resource_type.name, b.name, b.operation.name) for b in security.mirror_acls("us-1", layout.topology.mirrors)}
    assert ("TOPIC", "*", "READ") in source and ("TOPIC", "*", "WRITE") not in source
    assert ("TOPIC", "eu-1.", "WRITE") in target and ("TOPIC", "*", "WRITE") not in target
    assert all(b.principal == "User:copier" for b in security.mirror_acls("us-1", layout.topology.mirrors))


def test_a_plaintext_topology_is_unchanged(tmp_path):
    layout = plan(parse_topology(TOPOLOGY.replace("enabled: true", "enabled: false")), tmp_path)
    props = layout.clusters["eu-1"].nodes[0].properties
    assert props["listener.security.protocol.map"] == "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,WAN_US:PLAINTEXT"
    assert "authorizer.class.name" not in props and layout.security is None
    assert not (tmp_path / "pki").exists()
