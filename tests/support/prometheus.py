"""Run a real Prometheus server (Debian's `prometheus` package) that scrapes Seaway nodes.

    with PrometheusServer(tmp_path, {"1": "127.0.0.1:9101", "2": "127.0.0.1:9102"}) as prom:
        prom.wait_for('up', lambda r: len(r) == 2 and all(s.value == 1 for s in r), 30, "targets up")
        prom.query('sum by (node) (seaway_bytes_in_total)')     # -> [Sample(labels, value), ...]
    assert lint_metrics("http://127.0.0.1:9101/metrics") == ""     # promtool check metrics

Each target is scraped every second under job "seaway" with a `node` label naming it, so a
query can tell the nodes apart. The server listens on a free loopback port, keeps its TSDB in
the given directory and writes its log there; it is always stopped on exit. Queries go through
the HTTP API (/api/v1/query), as a dashboard or an alerting rule would ask.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from .node import free_port

BINARY = "/usr/bin/prometheus"
PROMTOOL = "/usr/bin/promtool"   # same Debian package


class PrometheusError(RuntimeError):
    pass


@dataclass(frozen=True)
class Sample:
    labels: dict[str, str]
    value: float


def lint_metrics(url: str) -> str:
    """promtool's complaints about an exposition ("" if none). The server's scrape is lenient
    (a family exposed twice, for one, is scraped without an error), promtool is not."""
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read()
    done = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, timeout=30)
    return "" if done.returncode == 0 else (done.stdout + done.stderr).decode(errors="replace")


class PrometheusServer:
    def __init__(self, directory: Path, targets: Mapping[str, str], *, scrape_interval: str = "1s",
                 binary: str = BINARY):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.targets = dict(targets)
        self.binary = binary
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config_path = self.directory / "prometheus.yml"
        self.log_path = self.directory / "prometheus.log"
        # JSON is YAML, so the config needs no YAML library.
        self.config_path.write_text(json.dumps({
            "global": {"scrape_interval": scrape_interval, "scrape_timeout": scrape_interval,
                       "evaluation_interval": scrape_interval},
            "scrape_configs": [{
                "job_name": "seaway",
                "static_configs": [{"targets": [address], "labels": {"node": str(name)}}
                                   for name, address in self.targets.items()],
            }],
        }, indent=2))
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 60.0) -> "PrometheusServer":
        if shutil.which(self.binary) is None:
            raise PrometheusError(f"{self.binary} not found: tests/install-deps.sh installs the "
                                  f"Debian package prometheus")
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                [self.binary, f"--config.file={self.config_path}",
                 f"--storage.tsdb.path={self.directory / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise PrometheusError(f"prometheus exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass   # not listening yet, or 503 while the TSDB opens
            time.sleep(0.1)
        self.stop()
        raise PrometheusError(f"prometheus not ready within {timeout}s:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def query(self, expr: str) -> list[Sample]:
        """An instant query at the current time; a scalar comes back as one unlabelled sample."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                body = json.load(r)
        except urllib.error.HTTPError as exc:
            # A bad expression is answered 400 with the reason in the JSON body.
            try:
                body = json.load(exc)
            except ValueError:
                raise PrometheusError(f"{expr}: HTTP {exc.code}") from None
        if body.get("status") != "success":
            raise PrometheusError(f"{expr}: {body.get('errorType')}: {body.get('error')}")
        data = body["data"]
        if data["resultType"] == "vector":
            return [Sample(s["metric"], float(s["value"][1])) for s in data["result"]]
        if data["resultType"] == "scalar":
            return [Sample({}, float(data["result"][1]))]
        raise PrometheusError(f"{expr}: unexpected result type {data['resultType']}")

    def wait_for(self, expr: str, predicate: Callable[[list[Sample]], bool], timeout: float,
                 what: str) -> list[Sample]:
        """Poll `expr` until predicate(result) holds; on timeout fail with the last result.
        Prometheus only knows what it has scraped, so every check of a change waits."""
        deadline = time.monotonic() + timeout
        result: list[Sample] = []
        while True:
            result = self.query(expr)
            if predicate(result):
                return result
            if time.monotonic() >= deadline:
                raise AssertionError(f"{what}: `{expr}` gave {[(s.labels, s.value) for s in result]} "
                                     f"for {timeout}s")
            time.sleep(0.5)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> "PrometheusServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
