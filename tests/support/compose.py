"""The compose platform under test: Seaway's images built here without pulling anything, and
`docker compose` driven on the committed compose/two-regions.yml under a project name of its
own, so that it never touches a platform someone else runs.

    with ComposePlatform() as platform:          # builds the images; removes everything after
        took = platform.up()                     # up -d --wait; seconds to healthy
        platform.compose("kill", "eu-west-1-2")
        platform.disconnect("eu-west", "wan")    # cut the WAN on eu-west's side
        platform.prometheus_query('ALERTS{alertstate="firing"}')

The platform is secured, as the default topology is: clients on the host log in with the admin
properties its `pki` service exports, here to a directory of this run ($SEAWAY_SECRETS_DIR):
`platform.client(bootstrap)` is a confluent-kafka configuration that does.

Images: `seaway-test:<id>` and `seaway-test-prometheus:<id>` (compose/build-image.sh), removed
on exit, as is the Debian base image if this run had to make it. Containers, networks and
volumes go with `down -v`; whatever of the project is left after that (a test that failed half
way) is removed by its label.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

from .fixed_ports import DefaultPorts

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "compose" / "two-regions.yml"
BASE_IMAGE = "seaway-base:bookworm"
PROMETHEUS_URL = "http://127.0.0.1:9090"


class ComposeError(RuntimeError):
    pass


def run(args: list[str], *, timeout: float = 300, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env)
    if check and done.returncode != 0:
        raise ComposeError(f"{' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done


def image_exists(name: str) -> bool:
    return run(["docker", "image", "inspect", name], check=False).returncode == 0


class ComposePlatform:
    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:8]
        self.project = f"seaway-test-{tag}"
        self.image = f"seaway-test:{tag}"
        self.prometheus_image = f"seaway-test-prometheus:{tag}"
        self.made_base = False
        self.volumes_before: set[str] = set()
        self.build_s: float | None = None
        self.build_log = ""
        self.secrets = Path(tempfile.mkdtemp(prefix=f"{self.project}-secrets-"))
        self.ports = DefaultPorts()
        self.env = dict(os.environ, SEAWAY_IMAGE=self.image, PROMETHEUS_IMAGE=self.prometheus_image,
                        SEAWAY_PROMETHEUS_IMAGE=self.prometheus_image, SEAWAY_BASE_IMAGE=BASE_IMAGE,
                        SEAWAY_SECRETS_DIR=str(self.secrets))

    @property
    def admin_properties(self) -> Path:
        """What the pki service exported for clients on the host (after the first `up`)."""
        return self.secrets / "admin.properties"

    def client(self, bootstrap: str) -> dict:
        """A confluent-kafka configuration for `bootstrap`, logged in as the admin user."""
        from core.config import load_properties
        return {"bootstrap.servers": bootstrap, **load_properties(self.admin_properties)}

    # ---------------------------------------------------------------- images

    def build(self) -> None:
        """compose/build-image.sh under this run's tags; its step lines stay in build_log."""
        self.volumes_before = set(run(["docker", "volume", "ls", "-q"]).stdout.split())
        self.made_base = not image_exists(BASE_IMAGE)
        started = time.monotonic()
        done = run(["bash", "compose/build-image.sh"], timeout=900, env=self.env)
        self.build_s = time.monotonic() - started
        self.build_log = done.stderr

    def image_size(self) -> int:
        out = run(["docker", "image", "inspect", "--format", "{{.Size}}", self.image]).stdout
        return int(out.strip())

    # ---------------------------------------------------------------- compose

    def compose(self, *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
        return run(["docker", "compose", "-p", self.project, "-f", str(COMPOSE_FILE), *args],
                   timeout=timeout, check=check, env=self.env)

    def up(self, timeout: float = 180) -> float:
        self.ports.acquire()        # published on the host: see tests/support/fixed_ports.py
        started = time.monotonic()
        self.compose("up", "-d", "--wait", "--wait-timeout", str(int(timeout)), timeout=timeout + 60)
        return time.monotonic() - started

    def container(self, service: str) -> str:
        out = self.compose("ps", "-a", "-q", service).stdout.split()
        if len(out) != 1:
            raise ComposeError(f"expected one container for {service}, found {out}")
        return out[0]

    def network(self, name: str) -> str:
        return f"{self.project}_{name}"

    def disconnect(self, network: str, service: str) -> None:
        run(["docker", "network", "disconnect", self.network(network), self.container(service)])

    def connect(self, network: str, service: str) -> None:
        run(["docker", "network", "connect", "--alias", service, self.network(network), self.container(service)])

    def health(self, service: str) -> str:
        return run(["docker", "inspect", "--format", "{{.State.Health.Status}}", self.container(service)]).stdout.strip()

    def wait_healthy(self, services: list[str], timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while True:
            states = {s: self.health(s) for s in services}
            if all(v == "healthy" for v in states.values()):
                return
            if time.monotonic() > deadline:
                raise ComposeError(f"not healthy within {timeout:g}s: {states}")
            time.sleep(1)

    def leftovers(self) -> dict[str, list[str]]:
        """The project's containers, networks and volumes; volumes include any that appeared
        since the platform was built, labelled or not (an anonymous volume has no label)."""
        label = f"label=com.docker.compose.project={self.project}"
        found = {kind: run(["docker", kind, "ls", "-q", "--filter", label] + (["-a"] if kind == "container" else [])).stdout.split()
                 for kind in ("container", "network", "volume")}
        new = set(run(["docker", "volume", "ls", "-q"]).stdout.split()) - self.volumes_before
        found["volume"] = sorted(set(found["volume"]) | new)
        return found

    def logs(self, tail: int = 40) -> str:
        return self.compose("logs", "--no-color", "--tail", str(tail), check=False, timeout=60).stdout

    # ---------------------------------------------------------------- prometheus

    def prometheus_query(self, expr: str) -> list[dict]:
        url = f"{PROMETHEUS_URL}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.load(response)
        if body.get("status") != "success":
            raise ComposeError(f"query {expr!r}: {body}")
        return body["data"]["result"]

    # ---------------------------------------------------------------- lifetime

    def cleanup(self) -> None:
        self.compose("down", "-v", "--remove-orphans", "--timeout", "5", check=False, timeout=180)
        for kind, ids in self.leftovers().items():
            if ids:
                run(["docker", kind, "rm", "-f", *ids] if kind == "container" else ["docker", kind, "rm", *ids],
                    check=False)
        images = [self.image, self.prometheus_image] + ([BASE_IMAGE] if self.made_base else [])
        run(["docker", "image", "rm", "-f", *images], check=False)
        run(["docker", "image", "prune", "-f", "--filter", "label=io.seaway.stage=build"], check=False)
        shutil.rmtree(self.secrets, ignore_errors=True)
        self.ports.release()

    def __enter__(self) -> "ComposePlatform":
        try:
            self.build()
        except BaseException:
            self.cleanup()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.cleanup()
