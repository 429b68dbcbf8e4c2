"""`seaway gateway` as a person starts it, for tests: the process, and the bootstrap address it
prints."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.node import REPO

BOOTSTRAP = re.compile(r"bootstrap\.servers=(\S+)")
METRICS = re.compile(r"metrics: (http://\S+)/metrics")


def free_ports(n: int) -> int:
    """The first of n consecutive free ports on 127.0.0.1 (a gateway's slots), above the
    ephemeral range (regions/layout.py pick_range): a gateway started again on them after a
    kill must not find one taken by some outgoing connection meanwhile (CI met that)."""
    import random
    import socket

    from regions.layout import pick_range
    from regions.port_ledger import recent_picks
    candidates = pick_range()
    # Clear of what a platform on another worker just picked, and recorded for the next one.
    with recent_picks() as (recent, mine):
        for _ in range(200):
            base = random.randint(candidates.start, candidates.stop - n - 1)
            if recent & set(range(base, base + n)):
                continue
            socks = []
            try:
                for port in range(base, base + n):
                    s = socket.socket()
                    socks.append(s)
                    s.bind(("127.0.0.1", port))
                mine.update(range(base, base + n))
                return base
            except OSError:
                continue
            finally:
                for s in socks:
                    s.close()
    raise RuntimeError(f"no {n} consecutive free ports")


class GatewayProcess:
    def __init__(self, log_dir: Path, pair: str, clusters: list[tuple[str, str]], *, listen: str = "127.0.0.1:0",
                 slots: int = 3, extra: tuple[str, ...] = ()):
        self.args = [sys.executable, "-m", "core.cli", "gateway", "--pair", pair, "--listen", listen,
                     "--slots", str(slots), "--metrics-port", "0", *extra]
        for name, bootstrap in clusters:
            self.args += ["--cluster", f"{name}={bootstrap}"]
        self.log_path = log_dir / "gateway.log"
        self.proc: subprocess.Popen | None = None
        self.bootstrap = ""
        self.metrics_url = ""

    def start(self, timeout: float = 60) -> "GatewayProcess":
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.args, cwd=REPO, stdout=subprocess.PIPE, stderr=self.log,
                                     env=dict(os.environ, PYTHONUNBUFFERED="1"), text=True)
        deadline = time.monotonic() + timeout
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"gateway exited ({self.proc.poll()}): {self.log_path.read_text()[-2000:]}")
            if m := BOOTSTRAP.search(line):
                self.bootstrap = m.group(1)
            if m := METRICS.search(line):
                self.metrics_url = m.group(1)
                return self
        raise RuntimeError("gateway did not print its addresses")

    def metrics(self) -> str:
        import urllib.request
        with urllib.request.urlopen(self.metrics_url + "/metrics", timeout=10) as r:
            return r.read().decode()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
