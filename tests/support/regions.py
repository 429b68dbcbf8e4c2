"""`regions` test helpers: run the CLI, strip a topology's fixed ports, bring a whole platform
up and down (Platform), and create a topic once its ISR is full.

A client of a platform takes `Platform.client(cluster)`, a confluent-kafka configuration: the
bootstrap addresses and, on a secured platform (the shipped topologies are), the admin user's
properties from the file `regions up` wrote, as a newcomer would use them."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml
from confluent_kafka.admin import AdminClient, NewTopic

from core.config import load_properties
from tests.support.node import REPO


def regions(state_dir: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "regions.cli", "--state-dir", str(state_dir), *args],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, PYTHONUNBUFFERED="1"))


def without_fixed_ports(source: Path, target: Path) -> Path:
    doc = yaml.safe_load(source.read_text())
    for region in doc["regions"].values():
        for cluster in region["clusters"].values():
            for node in cluster["nodes"]:
                for key in ("port", "controller_port", "metrics_port"):
                    node.pop(key, None)
    target.write_text(yaml.safe_dump(doc))
    return target


class Platform:
    def __init__(self, state_dir: Path, topology: Path):
        self.state_dir, self.topology = state_dir, topology

    def __enter__(self):
        up = regions(self.state_dir, "up", str(self.topology), "--detach", "--timeout", "90")
        assert up.returncode == 0, f"{up.stdout}\n{up.stderr}\n{self._logs()}"
        self.up_output = up.stdout
        self.info = json.loads((self.state_dir / "platform.json").read_text())
        return self

    def __exit__(self, *exc):
        down = regions(self.state_dir, "down")
        assert down.returncode == 0, down.stderr
        assert not (self.state_dir / "platform.json").exists()

    def bootstrap(self, cluster: str, from_region: str | None = None) -> str:
        c = self.info["clusters"][cluster]
        return c["from_regions"][from_region] if from_region else c["bootstrap"]

    def client(self, cluster: str, from_region: str | None = None, user: str | None = None) -> dict:
        """A confluent-kafka configuration for `cluster` (through the WAN from `from_region`),
        logged in as `user` (the admin by default) when the platform is secured."""
        config = {"bootstrap.servers": self.bootstrap(cluster, from_region)}
        security = self.info.get("security")
        if security:
            path = security["client_properties"][user or security["admin_user"]]
            config.update(load_properties(Path(path)))
        return config

    @property
    def admin_properties(self) -> Path | None:
        """The admin user's client properties file, or None on a plaintext platform."""
        security = self.info.get("security")
        return Path(security["client_properties"][security["admin_user"]]) if security else None

    def status(self) -> dict:
        out = regions(self.state_dir, "status", "--output", "json")
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    def _logs(self) -> str:
        tails = []
        for log in sorted(self.state_dir.glob("**/*.log")):
            lines = log.read_text(errors="replace").splitlines()[-8:]
            tails.append(f"--- {log}\n" + "\n".join(lines))
        return "\n".join(tails)


def create(client: dict | str, topic: str, rf: int, min_isr: int = 1) -> None:
    """`client`: a configuration (Platform.client) or a plaintext cluster's bootstrap."""
    admin = AdminClient(client if isinstance(client, dict) else {"bootstrap.servers": client})
    admin.create_topics([NewTopic(topic, 3, rf, config={"min.insync.replicas": str(min_isr)})])[topic].result(30)
    deadline = time.monotonic() + 30
    while True:
        parts = admin.list_topics(topic, timeout=5).topics[topic].partitions.values()
        if parts and all(p.leader >= 0 and len(p.isrs) == rf for p in parts):
            return
        assert time.monotonic() < deadline, f"{topic}: ISR not full"
        time.sleep(0.2)
