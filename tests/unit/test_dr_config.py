"""dr's configuration: a DR config file or the running platform; every mistake is one line
naming the file and the field."""
from __future__ import annotations

import json

import pytest

from dr.config import DrConfigError, load_config, platform_config


def write(tmp_path, text: str):
    path = tmp_path / "dr.yaml"
    path.write_text(text)
    return path


GOOD = """\
state_dir: {state}
regions: [eu-west, us-east]
pairs:
  - first:  {{cluster: eu-1, region: eu-west, bootstrap: "127.0.0.1:1"}}
    second: {{cluster: us-1, region: us-east, bootstrap: "127.0.0.1:2"}}
"""


def test_a_good_configuration_names_its_pairs(tmp_path):
    config = load_config(write(tmp_path, GOOD.format(state=tmp_path / "s")))
    [pair] = config.pairs
    assert (pair.pair.name, pair.pair.region_of("us-1")) == ("eu-1~us-1", "us-east")
    assert pair.topics == [".*"] and config.drain_timeout_s == 60


@pytest.mark.parametrize("text, words", [
    ("pairs: 3\n", "state_dir: required field missing"),
    (GOOD.replace("region: us-east", "region: eu-west"), "two different regions"),
    (GOOD.replace("cluster: us-1", "cluster: eu-1"), "two different clusters"),
    (GOOD.replace("regions: [eu-west, us-east]", "regions: [eu-west]"), "region 'us-east' is not in regions"),
    (GOOD + "    topics: ['(']\n", "invalid regex '('"),
    (GOOD + "drain_timeout_s: 0\n", "drain_timeout_s: Input should be greater than 0"),
    (GOOD + "auto_failover_after_s: 1\n", "auto_failover_after_s: Input should be greater than or equal to 10"),
    (GOOD + "surprise: 1\n", "surprise: unknown field"),
    (GOOD + "console: {{prometheus_url: 'prometheus:9090'}}\n",
     "console.prometheus_url: 'prometheus:9090' is not an http://host:port URL"),
    (GOOD + "console: {{operators: [ops]}}\n", "console.operators: 'ops' is not a principal such as User:ops"),
    (GOOD + "console: {{targets: [{{url: 'ftp://x/metrics'}}]}}\n",
     "console.targets.0.url: 'ftp://x/metrics' is not an http:// URL"),
    (GOOD + "    gateways: [{{region: eu-west, bootstrap: 'g:1', metrics: 'g:2'}}]\n",
     "pairs.0.gateways.0.metrics: 'g:2' is not the http:// URL of the gateway's /metrics"),
    (GOOD + "    gateways: [{{region: ap, bootstrap: 'g:1', metrics: 'http://g:2/metrics'}}]\n",
     "pairs[0].gateways[0]: region 'ap' is not in regions"),
    ("- a list\n", "a mapping with a `pairs` key"),
    ("pairs: [\n", "not valid YAML"),
])
def test_mistakes_get_one_line(tmp_path, text, words):
    with pytest.raises(DrConfigError) as raised:
        load_config(write(tmp_path, text.format(state=tmp_path / "s") if "{state}" in text else text))
    assert words in str(raised.value) and "\n" not in str(raised.value), str(raised.value)
    assert str(raised.value).startswith(str(tmp_path / "dr.yaml"))


def test_a_pairs_gateways_are_optional_and_the_platform_names_its_own(tmp_path):
    assert load_config(write(tmp_path, GOOD.format(state=tmp_path / "s"))).pairs[0].gateways == []
    topology = tmp_path / "t.yaml"
    topology.write_text("regions:\n  eu-west: {clusters: {eu-1: {nodes: [{id: 1, roles: [broker, controller], zone: a}]}}}\n"
                        "  us-east: {clusters: {us-1: {nodes: [{id: 1, roles: [broker, controller], zone: a}]}}}\n"
                        "mirrors: [{source: eu-1, target: us-1, policy: identity}]\n")
    gateway = {"name": "gateway-eu-west-eu-1", "pair": "eu-1~us-1", "region": "eu-west", "bootstrap": "127.0.0.1:3",
               "metrics": "http://127.0.0.1:4/metrics", "clusters": {}}
    (tmp_path / "platform.json").write_text(json.dumps({
        "topology": str(topology), "security": None, "gateways": [gateway],
        "clusters": {"eu-1": {"region": "eu-west", "bootstrap": "127.0.0.1:1"},
                     "us-1": {"region": "us-east", "bootstrap": "127.0.0.1:2"}}}))
    [pair] = platform_config(tmp_path).pairs
    assert [(g.region, g.bootstrap, g.metrics) for g in pair.gateways] == [
        ("eu-west", "127.0.0.1:3", "http://127.0.0.1:4/metrics")]


def test_no_platform_says_how_to_start_one(tmp_path):
    with pytest.raises(DrConfigError, match=r"no running platform in .* \(start one with `regions up`"):
        platform_config(tmp_path)
    (tmp_path / "platform.json").write_text(json.dumps(["not", "a", "platform"]))
    with pytest.raises(DrConfigError, match="no running platform"):
        platform_config(tmp_path)


def test_status_of_a_pair_without_topics_says_so():
    from dr.cli import render_status
    pair = {"pair": "eu-1~us-1", "active_region": None, "active_for": {"eu-west": 0, "us-east": 0},
            "unsettled": [], "ready": False, "clusters": {},
            "rpo_at_risk": {"records": 0, "bytes": 0, "bytes_estimated": False, "seconds": 0.0},
            "checkpoints": {"age_seconds": None, "groups": [], "errors": {}},
            "lag": [], "checks": [], "last_failover": None}
    assert "active none: no DR topics yet" in render_status([pair])
    assert "RPO at risk: 0 records, 0 bytes, 0.0 s" in render_status([pair])
    assert "checkpoints: none yet; 0 of 0 groups synced" in render_status([pair])
    assert "half way" in render_status([{**pair, "unsettled": ["orders"]}])
    assert "split by topic: eu-west for 2, us-east for 1" in render_status(
        [{**pair, "active_for": {"eu-west": 2, "us-east": 1}}])
