"""Every command line a user types, given something wrong: one line on stderr that names the
command and the mistake, a non-zero exit status, no traceback. Nothing here needs a running
cluster: each mistake is caught before one would be reached (or reaches a port where nothing
listens)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from tests.support.node import REPO

TOPOLOGY_TYPO = """\
name: t
regions:
  eu:
    clusters:
      eu-1:
        config: {auto.create.topic.enable: false}
        nodes: [{id: 1, roles: [broker, controller], zone: a}]
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    made = {
        "not_yaml": "regions: [\n",
        "typo_topology": TOPOLOGY_TYPO,
        "links_typo": "links:\n  - {source_alias: a, source_bootstrap: 'h:1', target_alias: b, "
                      "target_bootstrap: 'h:2', refresh_topic_s: 5}\n",
        "not_json": "{not json",
        "dr_typo": "pairs: []\nprimary_region: eu\n",
    }
    paths = {}
    for name, text in made.items():
        paths[name] = d / f"{name}.txt"
        paths[name].write_text(text)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        paths["closed"] = f"127.0.0.1:{s.getsockname()[1]}"
    paths["empty_state"] = d / "no-platform"
    paths["empty_state"].mkdir()
    return paths


CASES = [
    # seaway
    ("core.cli", ["topics", "list", "--bogus"], "seaway: error: unrecognized arguments: --bogus"),
    ("core.cli", ["topics", "list", "-b"], "seaway: error: topics list: argument --bootstrap-server/-b: "
                                           "expected one argument"),
    ("core.cli", ["--cluster", "nope", "topics", "list"], "seaway: error: --cluster nope: no platform is running"),
    ("core.cli", ["topics", "list", "-b", "{closed}", "--timeout", "3"], "nothing listens there"),
    ("core.cli", ["reassign", "execute", "-b", "{closed}", "--reassignment-json-file", "{not_json}"],
     "not valid JSON"),
    ("core.cli", ["node", "--override", "auto.create.topic.enable=false"],
     "seaway: error: --override auto.create.topic.enable: not a broker setting of Seaway or Kafka "
     "(did you mean auto.create.topics.enable?)"),
    # regions
    ("regions.cli", ["up", "--detatch"], "regions: error: unrecognized arguments: --detatch"),
    ("regions.cli", ["up", "--timeout"], "regions: error: up: argument --timeout: expected one argument"),
    ("regions.cli", ["up", "{not_yaml}"], "not valid YAML"),
    ("regions.cli", ["up", "{typo_topology}"], "did you mean auto.create.topics.enable?"),
    ("regions.cli", ["stop", "eu-1"], "regions stop: no platform is running"),
    ("regions.cli", ["nope"], "regions: error: argument COMMAND: invalid choice: 'nope'"),
    # mirror
    ("mirror.cli", ["run", "--config", "{links_typo}", "--bogus"], "mirror: error: unrecognized arguments: --bogus"),
    ("mirror.cli", ["run", "--config"], "mirror: error: run: argument --config: expected one argument"),
    ("mirror.cli", ["run", "--config", "{not_yaml}"], "not valid YAML"),
    ("mirror.cli", ["run", "--config", "{links_typo}"], "refresh_topic_s"),
    ("mirror.cli", ["status", "--metrics-url", "http://{closed}/metrics"], "cannot read"),
    ("mirror.cli", ["status", "--platform"], "no running platform"),
    ("mirror.cli", ["status"], "start one with `regions up`, or name a mirror's metrics with --metrics-url"),
    # dr
    ("dr.cli", ["status", "--bogus"], "dr: error: unrecognized arguments: --bogus"),
    ("dr.cli", ["failover"], "dr: error: failover: the following arguments are required: REGION"),
    ("dr.cli", ["--config", "{not_yaml}", "status"], "not valid YAML"),
    ("dr.cli", ["--config", "{dr_typo}", "status"], "dr status: {dr_typo}: "),
    ("dr.cli", ["status"], "no-platform"),
]


@pytest.mark.parametrize("module, argv, words", CASES, ids=[f"{c[0].split('.')[0]}:{' '.join(c[1])}" for c in CASES])
def test_a_mistake_is_one_line(files, module, argv, words):
    argv = [a.format(**files) for a in argv]
    env = {k: v for k, v in os.environ.items() if k != "SEAWAY_BOOTSTRAP"}
    env["SEAWAY_STATE_DIR"] = str(files["empty_state"])
    proc = subprocess.run([sys.executable, "-m", module, *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=60, env=env)
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert words.format(**files) in proc.stderr, proc.stderr
