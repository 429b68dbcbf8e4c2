"""The topology file: the shipped topologies load, and every bad input gets one line naming
the file, the line and the field."""
from __future__ import annotations

from pathlib import Path

import pytest

from regions.topology import DEFAULT_TOPOLOGY, TopologyError, load_topology, parse_topology

TOPOLOGIES = Path(DEFAULT_TOPOLOGY).parent

GOOD = """\
name: t
regions:
  eu-west:
    clusters:
      eu-1:
        nodes:
          - {id: 1, roles: [broker, controller], zone: a}
          - {id: 2, roles: [broker], zone: b, port: 9100}
  us-east:
    clusters:
      us-1:
        nodes:
          - {id: 1, roles: [broker, controller], zone: a}
mirrors:
  - {source: eu-1, target: us-1}
wan:
  links:
    - {between: [eu-west, us-east], latency_ms: 70}
dr: {primary: eu-west}
"""


def test_the_default_topology_is_two_regions_of_three_nodes_over_three_zones():
    t = load_topology(DEFAULT_TOPOLOGY)
    assert list(t.regions) == ["eu-west", "us-east"]
    for region, name, cluster in t.clusters():
        assert len(cluster.nodes) == 3
        assert all(set(n.roles) == {"broker", "controller"} for n in cluster.nodes)
        assert len({n.zone for n in cluster.nodes}) == 3
        assert cluster.config["min.insync.replicas"] == 2
    assert t.wan_link("eu-west", "us-east") == (40.0, 100.0)
    assert [(m.source, m.target, m.policy) for m in t.mirrors] == [("eu-west-1", "us-east-1", "identity")]
    assert [(m.source, m.target) for m in t.mirror_runs()] == [("eu-west-1", "us-east-1"), ("us-east-1", "eu-west-1")]
    assert t.mirrors[0].sync_group_offsets     # consumers can fail over to us-east-1


def test_the_second_shipped_topology_has_two_clusters_in_one_region():
    t = load_topology(TOPOLOGIES / "two-clusters-one-region.yaml")
    assert list(t.regions["eu-west"].clusters) == ["orders", "analytics"]
    assert t.region_of("analytics") == "eu-west"
    assert all(n.port is None for _, _, c in t.clusters() for n in c.nodes)


def test_a_good_topology_and_its_lookups():
    t = parse_topology(GOOD)
    assert t.cluster("us-1").brokers[0].id == 1
    assert [n.id for n in t.cluster("eu-1").controllers] == [1]
    assert t.wan_link("us-east", "eu-west") == (70.0, 100.0)     # the pair's override, either order
    assert t.mirrors[0].topics == [".*"] and t.mirrors[0].policy == "default"
    assert not t.mirrors[0].sync_group_offsets and t.mirrors[0].checkpoint_interval_s == 5.0


def edit(old: str, new: str) -> str:
    assert old in GOOD, old
    return GOOD.replace(old, new, 1)


# (what is wrong, the document, the line, the field, words of the message)
BAD = [
    ("bad role", edit("roles: [broker], zone: b", "roles: [borker], zone: b"),
     8, "regions.eu-west.clusters.eu-1.nodes[1].roles[0]", "'broker' or 'controller'"),
    ("unknown field", edit("zone: b, port: 9100", "zone: b, prot: 9100"),
     8, "regions.eu-west.clusters.eu-1.nodes[1].prot", "unknown field"),
    ("missing zone", edit("{id: 2, roles: [broker], zone: b, port: 9100}", "{id: 2, roles: [broker], port: 9100}"),
     8, "regions.eu-west.clusters.eu-1.nodes[1].zone", "required field missing"),
    ("port out of range", edit("port: 9100", "port: 70000"),
     8, "regions.eu-west.clusters.eu-1.nodes[1].port", "less than or equal to 65535"),
    ("port is text", edit("port: 9100", "port: lots"),
     8, "regions.eu-west.clusters.eu-1.nodes[1].port", "integer"),
    ("negative latency", edit("latency_ms: 70", "latency_ms: -1"),
     18, "wan.links[0].latency_ms", "greater than or equal to 0"),
    ("no regions", "name: t\n", 1, "regions", "required field missing"),
    ("regions is a list", "regions: [a, b]\n", 1, "regions", "dictionary"),
    ("duplicate node id", edit("{id: 2, roles: [broker]", "{id: 1, roles: [broker]"),
     8, "regions.eu-west.clusters.eu-1.nodes[1].id", "used twice"),
    ("no controller", edit("{id: 1, roles: [broker, controller], zone: a}\n          - {id: 2",
                           "{id: 1, roles: [broker], zone: a}\n          - {id: 2"),
     6, "regions.eu-west.clusters.eu-1.nodes", "controller role"),
    ("cluster name reused", edit("      us-1:", "      eu-1:").replace("target: us-1", "target: eu-1"),
     11, "regions.us-east.clusters.eu-1", "already used"),
    ("bad cluster name", edit("      us-1:", "      US_1:").replace("target: us-1", "target: US_1"),
     11, "regions.us-east.clusters.US_1", "lower-case"),
    ("port used twice", edit("zone: a}\nmirrors", "zone: a, port: 9100}\nmirrors"),
     13, "regions.us-east.clusters.us-1.nodes[0].port",
     "port 9100 on 127.0.0.1 is already used at regions.eu-west.clusters.eu-1.nodes[1].port"),
    ("mirror to nowhere", edit("target: us-1", "target: ap-1"),
     15, "mirrors[0].target", "no cluster named 'ap-1'"),
    ("mirror onto itself", edit("target: us-1", "target: eu-1"),
     15, "mirrors[0].target", "two different clusters"),
    ("bad topic pattern", edit("target: us-1}", "target: us-1, topics: ['(']}"),
     15, "mirrors[0].topics", "not a regular expression"),
    ("unknown policy", edit("target: us-1}", "target: us-1, policy: rename}"),
     15, "mirrors[0].policy", "'default' or 'identity'"),
    ("checkpoints never", edit("target: us-1}", "target: us-1, checkpoint_interval_s: 0}"),
     15, "mirrors[0].checkpoint_interval_s", "greater than 0"),
    ("config syncs never", edit("target: us-1}", "target: us-1, sync_topic_configs_interval_s: 0}"),
     15, "mirrors[0].sync_topic_configs_interval_s", "greater than 0"),
    ("dr pair listed both ways", edit("  - {source: eu-1, target: us-1}", "  - {source: eu-1, target: us-1, policy: identity}\n"
                                       "  - {source: us-1, target: eu-1}"),
     15, "mirrors[0]", "runs both ways"),
    ("a cluster in two dr pairs",
     edit("          - {id: 1, roles: [broker, controller], zone: a}\nmirrors",
          "          - {id: 1, roles: [broker, controller], zone: a}\n      us-2:\n        nodes:\n"
          "          - {id: 1, roles: [broker, controller], zone: a}\nmirrors")
     .replace("  - {source: eu-1, target: us-1}", "  - {source: eu-1, target: us-1, policy: identity}\n"
              "  - {source: eu-1, target: us-2, policy: identity}"),
     18, "mirrors[0].source", "in two DR pairs"),
    ("wan link to nowhere", edit("between: [eu-west, us-east]", "between: [eu-west, mars]"),
     18, "wan.links[0].between[1]", "no region named 'mars'"),
    ("dr primary unknown", edit("primary: eu-west", "primary: mars"),
     19, "dr.primary", "no region named 'mars'"),
    ("automatic failover in a hurry", edit("primary: eu-west", "primary: eu-west, auto_failover_after_s: 2"),
     19, "dr.auto_failover_after_s", "greater than or equal to 10"),
    ("a console operator that is not a principal", edit("primary: eu-west", "primary: eu-west, operators: [ops]"),
     19, "dr.operators", "'ops' is not a principal such as User:ops"),
    ("reserved property", edit("        nodes:\n          - {id: 1, roles: [broker, controller], zone: a}\n          - {id: 2",
                               "        config: {node.id: 7}\n        nodes:\n          - {id: 1, roles: [broker, controller], zone: a}\n          - {id: 2"),
     6, "regions.eu-west.clusters.eu-1.config.node.id", "set by the launcher"),
    ("duplicate key", edit("  us-east:\n", "  eu-west:\n"),
     9, "regions.eu-west", "given twice"),
    ("not yaml", "regions: {a: [1, 2}\n", 1, None, "not valid YAML"),
    ("empty", "", None, None, "empty"),
    ("a list at the top", "- 1\n- 2\n", 1, None, "mapping"),
    ("controller port on a broker", edit("port: 9100", "controller_port: 9100"),
     8, "regions.eu-west.clusters.eu-1.nodes[1].controller_port", "controller role"),
    ("plain mechanism on the platform", GOOD + "security: {enabled: true, mechanism: PLAIN}\n",
     GOOD.count("\n") + 1, "security.mechanism", "'SCRAM-SHA-256' or 'SCRAM-SHA-512'"),
    ("admin user with a space", GOOD + "security: {enabled: true, admin_user: 'my admin'}\n",
     GOOD.count("\n") + 1, "security.admin_user", "pattern"),
    ("security switch is text", GOOD + "security: {enabled: maybe}\n",
     GOOD.count("\n") + 1, "security.enabled", "boolean"),
]


@pytest.mark.parametrize("what,doc,line,field,words", BAD, ids=[b[0] for b in BAD])
def test_bad_topologies_get_one_line_naming_the_field(what, doc, line, field, words):
    with pytest.raises(TopologyError) as err:
        parse_topology(doc, "topo.yaml")
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"topo.yaml:{line}:" if line is not None else "topo.yaml"), message
    if field is not None:
        assert f" {field}" in message or message.split(": ")[1].endswith(field), message
    assert words in message, message


def test_an_identity_link_is_a_dr_pair_that_runs_both_ways():
    t = parse_topology(GOOD.replace("{source: eu-1, target: us-1}", "{source: eu-1, target: us-1, policy: identity}"))
    assert [(m.source, m.target) for m in t.dr_pairs()] == [("eu-1", "us-1")]
    assert [(m.source, m.target, m.policy) for m in t.mirror_runs()] == [
        ("eu-1", "us-1", "identity"), ("us-1", "eu-1", "identity")]
    forward, back = (t.mirror_link_config(m, "s:1", "t:1") for m in t.mirror_runs())
    assert forward["dr_pair"] and back["dr_pair"]
    assert (back["source_alias"], back["target_alias"]) == ("us-1", "eu-1")
    # A renaming link is no DR pair: it runs the way it is written, and no other.
    plain = parse_topology(GOOD)
    assert plain.dr_pairs() == [] and len(plain.mirror_runs()) == 1
    assert not plain.mirror_link_config(plain.mirrors[0], "s:1", "t:1")["dr_pair"]


def test_a_links_topic_config_sync_reaches_the_mirror():
    """On by default, as in MM2; the topology's settings are what the mirror runs with."""
    from mirror.link import LinkConfig
    t = parse_topology(GOOD)
    default = LinkConfig.model_validate(t.mirror_link_config(t.mirrors[0], "s:1", "t:1"))
    assert default.sync_topic_configs and default.sync_topic_configs_interval_s == 60.0
    t = parse_topology(edit("target: us-1}", "target: us-1, sync_topic_configs: false, "
                                              "sync_topic_configs_interval_s: 30}"))
    link = LinkConfig.model_validate(t.mirror_link_config(t.mirrors[0], "s:1", "t:1"))
    assert not link.sync_topic_configs and link.sync_topic_configs_interval_s == 30.0


def test_a_missing_file_is_one_line(tmp_path):
    with pytest.raises(TopologyError, match=r"^.*nope.yaml: cannot read the topology"):
        load_topology(tmp_path / "nope.yaml")
