"""Run a real Seaway node as a subprocess, the way an operator would.

    with SeawayNode(tmp_path, {"num.partitions": "3"}) as node:
        use(node.bootstrap)                 # "127.0.0.1:PORT"
        node.kill()                         # kill -9
        node.start()                        # same port, same data directory

The node keeps its port across restarts so clients can reconnect to the same address.
Its stderr goes to a log file whose tail is shown when a test fails.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class NodeError(RuntimeError):
    pass


class SeawayNode:
    def __init__(self, directory: Path, overrides: dict[str, str] | None = None, *, port: int | None = None,
                 node_id: int = 1):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.node_id = node_id
        self.data_dir = self.directory / "data"
        self.config_path = self.directory / "node.properties"
        self.log_path = self.directory / "node.log"
        props = {
            "node.id": str(node_id),
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": str(self.data_dir),
            "num.partitions": "1",
            "log.flush.scheduler.interval.ms": "200",
        }
        props.update(overrides or {})
        self.single_node = not props.get("controller.quorum.voters")
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> "SeawayNode":
        if self.proc is not None and self.proc.poll() is None:
            raise NodeError("node already running")
        if self.proc is not None and self.proc.stdout:
            self.proc.stdout.close()
        log = open(self.log_path, "ab")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "core.cli", "node", "--config", str(self.config_path)],
            cwd=REPO, stdout=subprocess.PIPE, stderr=log, env=env)
        log.close()
        deadline = time.monotonic() + timeout
        line = b""
        # A one-node cluster serves moments after it listens: wait for that, so a test's first
        # request never meets a broker still catching up with its own metadata log. A node of
        # a bigger quorum may wait for the others, so listening is enough there.
        ready = b"serving clients" if self.single_node else b"listening on"
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if ready in line:
                break
            if not line and self.proc.poll() is not None:
                raise NodeError(f"node exited with {self.proc.returncode}:\n{self.log_tail()}")
        else:
            self.kill()
            raise NodeError(f"node did not report readiness in {timeout}s:\n{self.log_tail()}")
        self._wait_port(deadline)
        return self

    def _wait_port(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.05)
        raise NodeError("node port never accepted a connection")

    def stop(self, timeout: float = 30.0) -> int:
        """Graceful stop (SIGTERM); returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise NodeError(f"node did not stop within {timeout}s of SIGTERM:\n{self.log_tail()}")

    def kill(self) -> None:
        """kill -9: no chance to flush or close anything."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def pause(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGCONT)

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> "SeawayNode":
        return self.start()

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.stop(timeout=15)
            except NodeError:
                pass
        if self.proc is not None and self.proc.stdout:
            self.proc.stdout.close()


def start_failure(directory: Path, props: dict) -> str:
    """Start `seaway node` with these properties (log.dirs under `directory`), expecting it to
    refuse: the last line of its stderr, checked to be an error and not a traceback."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    config = Path(directory) / "node.properties"
    values = {"log.dirs": Path(directory) / "data", **props}
    config.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    proc = subprocess.run([sys.executable, "-m", "core.cli", "node", "--config", str(config)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0, "the node started"
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.stderr.strip().splitlines()[-1]

