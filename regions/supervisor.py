"""The platform supervisor: one process that owns every node process and WAN proxy of a
platform and answers commands on a Unix socket in the state directory.

    python -m regions.cli supervise TOPOLOGY --state-dir DIR     # what `regions up` starts

It formats each node's storage the first time (one cluster id per cluster, kept in the state
directory), starts every node as `python -m core.cli node` with its log in the node's
directory, runs the WAN proxies in its own event loop, and the platform's services (the
mirror, `dr serve`, the DR pairs' gateways), and then waits for commands:

    {"cmd": "status"}                      -> {"ok": true, "nodes": {"eu-west-1/1": {...}}, ...}
    {"cmd": "stop", "target": T, "kill": false}    T is a REGION, CLUSTER or CLUSTER/ID
    {"cmd": "start", "target": T}
    {"cmd": "down"}

one JSON object per line each way. A node that exits on its own stays down (an outage is
something to see, not to hide); `start` brings it back. A service that exits is started
again, except a gateway that `stop REGION` stopped with its region's nodes, until `start
REGION`. SIGTERM or `down` stops the services, then the nodes gracefully (each hands its
leaderships over), then the proxies, and removes the socket.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
from anyio.abc import TaskStatus

from core.platform_file import PLATFORM_FILE

from .control import CONTROL_SOCKET, receive_line
from .layout import GatewayLayout, NodeLayout, PlatformLayout, write_gateway_listener, write_properties
from .wan import ProxySpec, WanProxy, wan_proxies

log = logging.getLogger("regions.supervisor")

SUPERVISOR_LOG = "supervisor.log"
MIRROR_LOG = "mirror.log"
DR_LOG = "dr.log"
STOP_GRACE_S = 30.0
REPO = Path(__file__).resolve().parents[1]


def spawn(args: list[str], log_path: Path) -> subprocess.Popen:
    """A child in its own session (a Ctrl-C at the terminal is the supervisor's to handle),
    its output appended to `log_path`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as logf:
        return subprocess.Popen([sys.executable, "-m", *args], cwd=REPO, stdin=subprocess.DEVNULL,
                                stdout=logf, stderr=logf, env=dict(os.environ, PYTHONUNBUFFERED="1"),
                                start_new_session=True)


async def _exited(proc: subprocess.Popen, timeout: float | None) -> bool:
    """Wait until `proc` exits (True) or `timeout` seconds pass (False). A worker thread blocks
    in waitpid() meanwhile; one left behind by the timeout ends when the process does."""
    with anyio.move_on_after(timeout):
        await anyio.to_thread.run_sync(proc.wait, abandon_on_cancel=True)
        return True
    return False


class _Child:
    proc: subprocess.Popen | None = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class NodeProcess(_Child):
    def __init__(self, layout: NodeLayout):
        self.layout = layout
        self.proc = None
        self.started_at: float | None = None
        self.stopping = False

    def start(self) -> None:
        if self.running:
            return
        self.proc = spawn(["core.cli", "node", "--config", str(self.layout.config_path)], self.layout.log_path)
        self.started_at = time.time()
        self.stopping = False
        log.info("started %s (pid %d)", self.layout.key, self.proc.pid)

    async def stop(self, *, kill: bool = False, grace_s: float = STOP_GRACE_S) -> None:
        if not self.running:
            return
        self.stopping = True
        self.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        if not await _exited(self.proc, grace_s):
            log.warning("%s did not stop in %.0fs; killing it", self.layout.key, grace_s)
            self.proc.kill()
            await _exited(self.proc, None)
        log.info("%s stopped (%s, exit %s)", self.layout.key, "kill -9" if kill else "SIGTERM",
                 self.proc.returncode)

    def describe(self) -> dict:
        n = self.layout
        return {"region": n.region, "cluster": n.cluster, "id": n.node.id, "roles": list(n.node.roles),
                "zone": n.node.zone, "running": self.running,
                "pid": self.proc.pid if self.running else None,
                "exit_code": None if self.proc is None or self.running else self.proc.returncode,
                "client_port": n.client_port, "controller_port": n.controller_port,
                "metrics_port": n.metrics_port, "log": str(n.log_path)}


class ServiceProcess(_Child):
    """A platform service (the mirror, `dr serve`): started once the platform is, started
    again if it exits on its own, stopped first on the way down."""

    def __init__(self, name: str, args: list[str], log_path: Path, *, stop_s: float, url: str | None = None):
        self.name, self.args, self.log_path, self.stop_s, self.url = name, args, log_path, stop_s, url
        self.proc = None
        self.held = False       # stopped on purpose (its region's outage): not started again

    def start(self) -> None:
        if self.running:
            return
        self.proc = spawn(self.args, self.log_path)
        log.info("started %s (pid %d)%s", self.name, self.proc.pid, f" on {self.url}" if self.url else "")

    async def stop(self, *, kill: bool = False) -> None:
        if not self.running:
            return
        self.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        if not await _exited(self.proc, self.stop_s):
            self.proc.kill()
            await _exited(self.proc, None)

    def describe(self) -> dict:
        return {"running": self.running, "pid": self.proc.pid if self.running else None,
                "exit_code": None if self.proc is None or self.running else self.proc.returncode,
                "log": str(self.log_path), **({"url": self.url} if self.url else {})}


def mirror_process(state_dir: Path, metrics_port: int | None = None) -> ServiceProcess:
    """`mirror run --platform`: the topology's mirror links, one process for all of them. The
    mirror's own hand-over gives up after 12 s, +3 s to close: it gets 20."""
    return ServiceProcess("the mirror", ["mirror.cli", "run", "--platform", "--state-dir", str(state_dir)],
                          state_dir / MIRROR_LOG, stop_s=20,
                          url=f"http://127.0.0.1:{metrics_port}/metrics" if metrics_port else None)


def dr_serve_process(state_dir: Path, port: int) -> ServiceProcess:
    """`dr serve --platform`: the DR controller's daemon (metrics, JSON API, scheduled drills)."""
    return ServiceProcess("dr serve", ["dr.cli", "--platform", "--state-dir", str(state_dir), "serve",
                                       "--listen", f"127.0.0.1:{port}"],
                          state_dir / DR_LOG, stop_s=10, url=f"http://127.0.0.1:{port}/")


class GatewayProcess(ServiceProcess):
    """`seaway gateway` for one DR pair in one region (regions/gateways.py)."""

    def __init__(self, state_dir: Path, layout: GatewayLayout):
        spec = layout.spec
        args = ["core.cli", "gateway", "--pair", spec.pair]
        for cluster, bootstrap in layout.clusters.items():
            args += ["--cluster", f"{cluster}={bootstrap}"]
        args += ["--listen", f"{layout.host}:{layout.ports[0]}", "--slots", str(len(layout.ports)),
                 "--metrics-port", str(layout.metrics_port)]
        if layout.listener_config is not None and layout.command_config is not None:
            args += ["--listener-config", str(layout.listener_config), "--command-config", str(layout.command_config)]
        super().__init__(f"the gateway of {spec.pair} in {spec.region}", args, state_dir / f"{spec.name}.log",
                         stop_s=10, url=layout.metrics_url)
        self.layout = layout

    def describe(self) -> dict:
        spec = self.layout.spec
        return {**super().describe(), "name": spec.name, "pair": spec.pair, "region": spec.region,
                "bootstrap": self.layout.bootstrap, "held": self.held}


class Supervisor:
    def __init__(self, layout: PlatformLayout, *, topology_path: Path | None = None):
        self.layout = layout
        self.topology_path = topology_path
        self.nodes = {n.key: NodeProcess(n) for n in layout.nodes()}
        self.proxies = self._proxies()
        self.mirror = (mirror_process(layout.state_dir, layout.mirror_metrics_port)
                       if layout.topology.mirrors else None)
        self.dr = dr_serve_process(layout.state_dir, layout.dr_port) if layout.dr_port else None
        self.gateways = [GatewayProcess(layout.state_dir, g) for g in layout.gateways]
        self.done = anyio.Event()
        # Why it stopped: `regions down` (exit status 0) or a signal (128 + its number, as a
        # shell reports it), so that a foreground `regions up` can tell a stop from a failure.
        self.exit_status = 0

    def _proxies(self) -> list[WanProxy]:
        """One pipe per direction of each region pair, shared by every proxy of that pair."""
        links = [(a, b, latency_ms / 1000, None if mbit is None else mbit * 1e6)
                 for a, b, latency_ms, mbit in self.layout.topology.wan_pairs()]
        specs = [ProxySpec(p.listen_port, "127.0.0.1", p.upstream_port, p.client_region, p.server_region)
                 for p in self.layout.proxies]
        return wan_proxies(links, specs, listen_host="127.0.0.1")

    @property
    def socket_path(self) -> Path:
        return self.layout.state_dir / CONTROL_SOCKET

    # ------------------------------------------------------------------ running

    async def run(self, *, task_status: TaskStatus = anyio.TASK_STATUS_IGNORED) -> None:
        self.format_storage()
        self.socket_path.unlink(missing_ok=True)
        listener = await anyio.create_unix_listener(self.socket_path)
        try:
            async with anyio.create_task_group() as tg:
                for proxy in self.proxies:
                    await tg.start(proxy.serve)
                for node in self.nodes.values():
                    node.start()
                self.write_platform_file()
                for gateway in self.gateways if self.layout.security is not None else []:
                    write_gateway_listener(gateway.layout, self.layout.security)
                if self.dr is not None:     # it reads platform.json, written above
                    self.dr.start()
                if self.layout.security is not None:
                    tg.start_soon(self._grant_then_start)
                else:
                    for service in self._granted():
                        service.start()
                tg.start_soon(self._watch)
                tg.start_soon(self._on_signals)
                tg.start_soon(listener.serve, self._handle)
                task_status.started()
                await self.done.wait()
                await self.shutdown()
                tg.cancel_scope.cancel()
        finally:
            await listener.aclose()
            self.socket_path.unlink(missing_ok=True)
            (self.layout.state_dir / PLATFORM_FILE).unlink(missing_ok=True)
            for node in self.nodes.values():     # whatever a cancellation left running
                if node.running:
                    node.proc.kill()
            for child in self._services():
                if child.running:
                    child.proc.kill()

    def _granted(self) -> list[ServiceProcess]:
        """The services that act only as their ACLs allow: the mirror and the gateways."""
        return [*([self.mirror] if self.mirror is not None else []), *self.gateways]

    async def _grant_then_start(self) -> None:
        """On a secured platform the mirror and the gateways may do only what their ACLs
        allow, so these are in place before they start: the admin user creates them on each
        cluster as soon as it answers (the gateways' on the DR pairs' clusters)."""
        from .security import ensure_scram_user, grant_until_created
        security = self.layout.security
        assert security is not None
        paired = {c for g in self.layout.gateways for c in g.clusters}
        for name, cluster in self.layout.clusters.items():
            wanted = security.mirror_acls(name, self.layout.topology.mirror_runs()) if self.mirror else []
            if name in paired:
                wanted += security.gateway_acls()
            if wanted:
                await grant_until_created(name, cluster.bootstrap, wanted, security.admin_security(), log=log)
            if name in paired:
                await ensure_scram_user(name, cluster.bootstrap, security.gateway_user,
                                        security.password(security.gateway_user), security.mechanism,
                                        security.admin_security(), log=log)
        for service in self._granted():
            if not service.held:
                service.start()

    def format_storage(self) -> None:
        for node in self.layout.nodes():
            write_properties(node)
            if (node.data_dir / "meta.properties").exists():
                continue
            cluster_id = self.layout.clusters[node.cluster].cluster_id
            # A secured platform's users go into the metadata log at format time, so that
            # they can log in from the first start (regions/security.py).
            scram = self.layout.security.scram_arguments() if self.layout.security else []
            result = subprocess.run(
                [sys.executable, "-m", "core.cli", "storage", "format", "-c", str(node.config_path),
                 f"--cluster-id={cluster_id}", *scram], cwd=REPO, capture_output=True, text=True)
            if result.returncode != 0:
                raise RuntimeError(f"formatting {node.key} failed: "
                                   f"{(result.stderr or result.stdout).strip()}")

    def write_platform_file(self) -> None:
        layout = self.layout
        clusters = {}
        for name, c in layout.clusters.items():
            clusters[name] = {
                "region": c.region, "cluster_id": c.cluster_id, "bootstrap": c.bootstrap,
                "controller_bootstrap": c.controller_bootstrap, "broker_ids": c.broker_ids,
                "from_regions": {r: layout.wan_bootstrap(name, r) for r in layout.topology.regions},
                "metrics": [f"http://127.0.0.1:{n.metrics_port}/metrics" for n in c.nodes],
            }
        data = {"name": layout.topology.name, "supervisor_pid": os.getpid(), "clusters": clusters,
                "mirror_metrics": (f"http://127.0.0.1:{layout.mirror_metrics_port}/metrics"
                                   if layout.mirror_metrics_port else None),
                # what `mirror run --platform` runs: the mirror takes its links from here
                "mirror_links": layout.mirror_links(),
                "mirror_metrics_port": layout.mirror_metrics_port,
                "dr": layout.dr_url,
                # where applications bootstrap to ride through failovers; `dr` shows them
                "gateways": [{"name": g.spec.name, "pair": g.spec.pair, "region": g.spec.region,
                              "bootstrap": g.bootstrap, "metrics": g.metrics_url, "clusters": g.clusters,
                              **({"listener_config": str(g.listener_config)} if g.listener_config else {})}
                             for g in layout.gateways],
                "topology": str(self.topology_path) if self.topology_path else None,
                "security": self._security_summary(),
                "started_at": time.time()}
        path = layout.state_dir / PLATFORM_FILE
        # Private: on a secured platform the mirror links above carry the mirror's password.
        fd = os.open(path.with_suffix(".tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(data, indent=2) + "\n")
        path.with_suffix(".tmp").replace(path)

    def _security_summary(self) -> dict | None:
        """What a client of a secured platform needs: the CA and each user's client properties
        file (written here, so they exist as soon as the platform does)."""
        security = self.layout.security
        if security is None:
            return None
        files = security.write_client_files()
        return {"mechanism": security.mechanism, "ca": str(security.ca_path), "admin_user": security.admin_user,
                "client_properties": {user: str(path) for user, path in files.items()}}

    def _services(self) -> list[ServiceProcess]:
        """The gateways first: on the way down, applications lose their entry before the
        processes behind it."""
        return [*self.gateways, *(s for s in (self.dr, self.mirror) if s is not None)]

    async def shutdown(self) -> None:
        for service in self._services():
            await service.stop()
        async with anyio.create_task_group() as tg:
            for node in self.nodes.values():
                tg.start_soon(node.stop)
        for proxy in self.proxies:
            proxy.close()
        log.info("platform %s is down", self.layout.topology.name)

    async def _watch(self) -> None:
        """Log nodes that exit on their own; they stay down until `start`. The mirror, `dr
        serve` and the gateways are services, not simulated outages: they are started again."""
        reported: set[str] = set()
        while True:
            # (proc None: not started yet, on a secured platform while its ACLs are made)
            for service in self._services():
                if service.proc is not None and not service.running and not service.held \
                        and not self.done.is_set():
                    log.warning("%s exited with %s; starting it again (see %s)", service.name,
                                service.proc.returncode, service.log_path)
                    await anyio.sleep(1.0)
                    service.start()
            for key, node in self.nodes.items():
                if node.proc is None or node.running:
                    reported.discard(key)
                elif key not in reported and not node.stopping:
                    reported.add(key)
                    log.warning("%s exited with %s; see %s", key, node.proc.returncode,
                                node.layout.log_path)
            await anyio.sleep(0.5)

    async def _on_signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                self.exit_status = 128 + signum
                self.done.set()
                return

    # ------------------------------------------------------------------ commands

    async def _handle(self, stream) -> None:
        async with stream:
            try:
                line = await receive_line(stream)
                reply = await self.command(json.loads(line))
            except (ValueError, UnicodeDecodeError) as exc:
                reply = {"ok": False, "error": f"bad command: {exc}"}
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return
            try:
                await stream.send(json.dumps(reply).encode() + b"\n")
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass

    async def command(self, request: dict) -> dict:
        cmd = request.get("cmd") if isinstance(request, dict) else None
        if cmd == "status":
            return {"ok": True, "name": self.layout.topology.name, "pid": os.getpid(),
                    "nodes": {k: n.describe() for k, n in self.nodes.items()},
                    "mirror": self.mirror.describe() if self.mirror is not None else None,
                    "dr": self.dr.describe() if self.dr is not None else None,
                    "gateways": [g.describe() for g in self.gateways]}
        if cmd == "down":
            self.done.set()
            return {"ok": True}
        if cmd in ("stop", "start"):
            target = request.get("target")
            try:
                selected = self.layout.select(str(target))
            except KeyError:
                return {"ok": False, "error": f"target: no region, cluster or CLUSTER/ID named {target!r}"}
            keys = [n.key for n in selected]
            # A region's outage takes its gateways with it; a cluster's or a node's does not.
            gateways = [g for g in self.gateways if g.layout.spec.region == target]
            kill = bool(request.get("kill"))
            if cmd == "stop":
                async with anyio.create_task_group() as tg:
                    for key in keys:
                        tg.start_soon(lambda k=key: self.nodes[k].stop(kill=kill))
                    for gateway in gateways:
                        gateway.held = True
                        tg.start_soon(lambda g=gateway: g.stop(kill=kill))
            else:
                for key in keys:
                    self.nodes[key].start()
                for gateway in gateways:
                    gateway.held = False
                    gateway.start()
            return {"ok": True, "nodes": keys, "gateways": [g.layout.spec.name for g in gateways]}
        return {"ok": False, "error": f"cmd: unknown command {cmd!r}"}
