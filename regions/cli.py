"""`regions`: run a whole multi-region platform on this machine from its topology.

    regions up [TOPOLOGY] [--detach]     start every cluster (and the WAN between regions)
    regions status [--output json]       per region and cluster: nodes up, controller leader,
                                         under-replicated and offline partitions
    regions stop REGION|CLUSTER|CLUSTER/ID [--kill]    an outage, gracefully or kill -9
    regions start REGION|CLUSTER|CLUSTER/ID            the recovery
    regions down                         stop everything (data stays in the state directory)
    regions compose [TOPOLOGY] [-f FILE] the topology as a Docker Compose file
    regions wan --link ... --proxy ...   the WAN between regions on its own (what compose runs)
    regions pki ...                      a secured compose platform's CA, certificates and
                                         passwords (its `pki` service runs it)
    regions grant-mirror-acls ...        the mirror's and gateways' ACLs (its `mirror-acls` service)

The platform runs under a supervisor process (regions/supervisor.py) that outlives `regions up
--detach`; the other commands talk to it through a socket in the state directory
($SEAWAY_STATE_DIR, default ~/.seaway/platform, or --state-dir). Errors are one line.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import anyio

from core.arguments import OneLineParser, deprecated_alias
from core.platform_file import PLATFORM_FILE, default_state_dir, process_alive

from .settings import broker_setting_problem
from .topology import DEFAULT_TOPOLOGY, TopologyError, load_topology

EXIT_ERROR = 1
EXIT_USAGE = 2


class CliError(Exception):
    pass




def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="regions", description=__doc__.split("\n\n")[0])
    parser.add_argument("--state-dir", type=Path, default=None,
                        help="where the platform keeps its data, logs and socket "
                             "($SEAWAY_STATE_DIR, default ~/.seaway/platform)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    up = sub.add_parser("up", help="start the platform and wait until every cluster is healthy")
    up.add_argument("topology", nargs="?", type=Path, default=DEFAULT_TOPOLOGY,
                    help="topology file (default: the two-region topology that ships with Seaway)")
    up.add_argument("--detach", "-d", action="store_true", help="return once healthy, leave it running")
    up.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for health (default 60)")
    status = sub.add_parser("status", help="regions, clusters, nodes and partitions at a glance")
    status.add_argument("--output", "-o", choices=("table", "json"), default="table")
    stop = sub.add_parser("stop", help="stop a region, a cluster or one node (an outage)")
    stop.add_argument("target", help="REGION, CLUSTER or CLUSTER/ID")
    stop.add_argument("--kill", action="store_true", help="kill -9 instead of a graceful stop")
    start = sub.add_parser("start", help="start what `stop` stopped")
    start.add_argument("target", help="REGION, CLUSTER or CLUSTER/ID")
    sub.add_parser("down", help="stop the whole platform")
    compose = sub.add_parser("compose", help="write the topology as a Docker Compose file")
    compose.add_argument("topology", nargs="?", type=Path, default=DEFAULT_TOPOLOGY,
                         help="topology file (default: the two-region topology that ships with Seaway)")
    compose.add_argument("--file", "-f", dest="file", type=Path, default=None,
                         help="where to write it (default: standard output)")
    # -o/--output is the output format in every other command; here it named the file.
    for old in ("--output", "-o"):
        deprecated_alias(compose, old, dest="file", replacement="-f (--file)", prog="regions compose", type=Path)
    wan = sub.add_parser("wan", help="run WAN proxies between regions (the compose file's wan service)")
    wan.add_argument("--link", action="append", default=[], metavar="A,B,LATENCY_MS,MBIT",
                     help="the link between regions A and B: one-way latency and bandwidth per "
                          "direction (MBIT may be 'unlimited'); repeatable")
    wan.add_argument("--proxy", action="append", default=[], metavar="PORT=HOST:PORT@CLIENT>SERVER",
                     help="listen on PORT for clients in region CLIENT and forward to HOST:PORT in "
                          "region SERVER; repeatable")
    wan.add_argument("--metrics-port", type=int, default=None,
                     help="serve /metrics and /health on this port")
    pki = sub.add_parser("pki", help="make a secured compose platform's CA, certificates and passwords "
                         "(what its pki service runs); keeps whatever exists")
    pki.add_argument("--dir", type=Path, required=True, help="where to keep them (the pki volume)")
    pki.add_argument("--mechanism", default="SCRAM-SHA-512", choices=("SCRAM-SHA-256", "SCRAM-SHA-512"))
    pki.add_argument("--admin-user", default="admin")
    pki.add_argument("--mirror-user", default="mirror")
    pki.add_argument("--node", action="append", default=[], metavar="CLUSTER/ID=HOST[,HOST...]",
                     help="a node certificate and the host names it answers to; repeatable")
    pki.add_argument("--gateway", action="append", default=[], metavar="NAME=HOST[,HOST...]",
                     help="a gateway's listener certificate and the host names it answers to; repeatable")
    pki.add_argument("--export", type=Path, default=None,
                     help="also copy the CA and the admin's client properties here (for the host)")
    pki.add_argument("--export-ca", default=None, metavar="PATH",
                     help="the CA's path as clients on the host see it, for the exported properties")
    pki.add_argument("--owner", default=None, metavar="UID:GID", help="hand every file in --dir to this user")
    grant = sub.add_parser("grant-mirror-acls", help="grant the mirror user the ACLs its links need "
                           "(what a secured compose platform's mirror-acls service runs)")
    grant.add_argument("--command-config", type=Path, required=True, help="the admin user's client properties")
    grant.add_argument("--cluster", action="append", default=[], metavar="NAME=BOOTSTRAP",
                       help="a cluster and its bootstrap addresses; repeatable")
    grant.add_argument("--link", action="append", default=[], metavar="SOURCE,TARGET[,POLICY]",
                       help="a mirror link (policy default or identity); repeatable")
    grant.add_argument("--mirror-user", default="mirror")
    grant.add_argument("--gateway-user", default=None, help="also grant this user a gateway's ACLs")
    grant.add_argument("--gateway-cluster", action="append", default=[], metavar="NAME",
                       help="a cluster of a DR pair, where the gateway user gets its ACLs; repeatable")
    grant.add_argument("--timeout", type=float, default=120.0, help="seconds to keep asking (default 120)")
    supervise = sub.add_parser("supervise")   # internal: what `up` runs in the background
    supervise.add_argument("topology", type=Path)
    args = parser.parse_args(argv)
    state_dir = args.state_dir or default_state_dir()
    try:
        return COMMANDS[args.command](args, state_dir)
    except (CliError, TopologyError) as exc:
        print(f"regions {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, TopologyError) else EXIT_ERROR
    except KeyboardInterrupt:
        return 130


# ---------------------------------------------------------------------------- up

def cmd_up(args, state_dir: Path) -> int:
    from .layout import plan
    from .control import send_command
    from .supervisor import SUPERVISOR_LOG
    topology = load_topology(args.topology, check_setting=broker_setting_problem)
    running = anyio.run(send_command, state_dir, {"cmd": "status"}, 5.0)
    if running is not None:
        print(f"platform {running.get('name')!r} is already running (supervisor pid "
              f"{running.get('pid')}, state in {state_dir}); `regions status` shows it")
        return 0
    before = _entries(state_dir)         # None: this start makes the state directory
    try:
        layout = plan(topology, state_dir)
        _check_ports_free(layout)
    except CliError as exc:
        raise CliError(f"{exc}{_clean_failed_start(state_dir, before, started=False)}") from None
    log_path = state_dir / SUPERVISOR_LOG
    with open(log_path, "ab") as logf:
        proc = subprocess.Popen(
            [sys.executable, "-m", "regions.cli", "--state-dir", str(state_dir), "supervise",
             str(Path(args.topology).resolve())],
            stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, start_new_session=True,
            cwd=Path(__file__).resolve().parents[1])
    started = time.monotonic()
    try:
        healths = _wait_healthy(layout, proc, args.timeout, log_path)
        gateways = _wait_gateways(layout, proc, started + args.timeout)
    except BaseException as exc:
        proc.terminate()
        try:
            proc.wait(timeout=60)       # it stops what it started before anything is removed
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if isinstance(exc, CliError):
            raise CliError(f"{exc}{_clean_failed_start(state_dir, before, started=True)}") from None
        raise
    took = time.monotonic() - started
    print(f"platform {topology.name!r} is up in {took:.1f}s (state and logs in {state_dir})")
    for name, c in layout.clusters.items():
        h = healths[name]
        print(f"  {c.region:<10} {name:<12} bootstrap {c.bootstrap}   controller leader "
              f"{h.controller_leader} (epoch {h.controller_epoch})")
        for region in topology.regions:
            if region != c.region:
                print(f"  {'':<10} {'':<12} from {region}: {layout.wan_bootstrap(name, region)} "
                      f"(through the WAN)")
        print(f"  {'':<10} {'':<12} metrics " + " ".join(
            f"http://127.0.0.1:{n.metrics_port}/metrics" for n in c.nodes))
    if layout.dr_url:
        print(f"  console: {layout.dr_url}console/ (dr serve, the DR controller: also /metrics and /api/v1/status)"
              + (f"; log in as {layout.security.admin_user} with the password in its client properties below"
                 if layout.security is not None else ""))
    if layout.mirror_metrics_port:
        print(f"  mirror metrics: {mirror_metrics_url(layout)} (every link, labelled link=\"SOURCE->TARGET\"; "
              f"`mirror status` reads it)")
    for g in layout.gateways:
        print(f"  gateway of {g.spec.pair} in {g.spec.region}: bootstrap {g.bootstrap}   "
              f"{gateways[g.spec.name]}; metrics {g.metrics_url}")
    if layout.security is not None:
        _print_security(layout)
    else:
        print(f"  try: {seaway_command(state_dir)} topics list --cluster {next(iter(layout.clusters))}")
    if args.detach:
        return 0
    print("live status below; Ctrl-C stops the platform")
    header = address_lines(layout)
    if not _show_status_until_interrupted(proc, state_dir, layout, header):
        print("\n".join(["", *header]))
        if proc.returncode == 0:
            print(f"the platform was stopped by `regions down`; its data stays in {state_dir}")
            return 0
        raise CliError(f"the supervisor exited ({_exit_reason(proc.returncode)}); see {log_path}")
    print("\n".join(["", *header, "", "stopping the platform ..."]))
    anyio.run(send_command, state_dir, {"cmd": "down"}, 10.0)
    proc.wait(timeout=120)
    return 0


def _exit_reason(returncode: int) -> str:
    import signal
    if returncode > 128 and returncode - 128 in signal.valid_signals():
        return f"stopped by {signal.Signals(returncode - 128).name}"
    if returncode < 0 and -returncode in signal.valid_signals():
        return f"killed by {signal.Signals(-returncode).name}"
    return f"exit status {returncode}"


def address_lines(layout) -> list[str]:
    """What a user of the running platform needs to see: where its clusters, metrics, console,
    gateways, client properties and state are. Kept above the live view's status, and printed
    again when the view ends."""
    lines = [f"platform {layout.topology.name!r}: state and logs in {layout.state_dir}"]
    for name, c in layout.clusters.items():
        lines.append(f"  {c.region:<10} {name:<12} bootstrap {c.bootstrap}")
        for region in layout.topology.regions:
            if region != c.region:
                lines.append(f"  {'':<10} {'':<12} from {region}: {layout.wan_bootstrap(name, region)}")
        lines.append(f"  {'':<10} {'':<12} metrics " + " ".join(
            f"http://127.0.0.1:{n.metrics_port}/metrics" for n in c.nodes))
    if layout.mirror_metrics_port:
        lines.append(f"  mirror metrics: {mirror_metrics_url(layout)}")
    if layout.dr_url:
        lines.append(f"  console: {layout.dr_url}console/")
    for g in layout.gateways:
        lines.append(f"  gateway of {g.spec.pair} in {g.spec.region}: bootstrap {g.bootstrap}")
    if layout.security is not None:
        lines.append(f"  admin client properties: {layout.security.client_properties_path(layout.security.admin_user)}")
    return lines


def mirror_metrics_url(layout) -> str:
    return f"http://127.0.0.1:{layout.mirror_metrics_port}/metrics"


def _entries(state_dir: Path) -> set[Path] | None:
    """Every file and directory under `state_dir` now, or None if it does not exist."""
    if not state_dir.exists():
        return None
    return set(state_dir.rglob("*"))


def _clean_failed_start(state_dir: Path, before: set[Path] | None, *, started: bool) -> str:
    """Remove what a failed `regions up` made, and say, for the error line, what is left.

    A state directory this start made goes, apart from the logs of processes that ran (they
    say what went wrong). In one that held a platform already, only the files this start made
    go: the data and logs from before stay."""
    import shutil
    if before is None and not started:
        shutil.rmtree(state_dir, ignore_errors=True)
        return f"; removed {state_dir}, which this start had made"
    made = sorted(_entries(state_dir) - (before or set()), key=lambda p: len(p.parts), reverse=True)
    for path in made:
        if path.is_file() and path.suffix != ".log" or path.is_symlink() or path.is_socket():
            path.unlink(missing_ok=True)
    for path in made:              # deepest first: directories left empty go too
        if path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    if before is None:
        if not any(state_dir.rglob("*.log")):
            shutil.rmtree(state_dir, ignore_errors=True)
            return f"; removed {state_dir}, which this start had made"
        return (f"; removed what this start made in {state_dir} except its logs (supervisor.log, "
                f"each node's node.log), which show what went wrong: `rm -r {state_dir}` removes them")
    return (f"; removed the files this start added to {state_dir}, and kept what was there before "
            f"(the platform's data, and the logs this start appended to)")


def seaway_command(state_dir: Path) -> str:
    """`seaway`, with --state-dir when the platform is not where seaway looks by default."""
    import shlex
    return "seaway" if Path(state_dir) == default_state_dir() else f"seaway --state-dir {shlex.quote(str(state_dir))}"


def _print_security(layout) -> None:
    """Where a secured platform's client settings are, and a command that uses them."""
    security = layout.security
    files = security.write_client_files()
    name, first = next(iter(layout.clusters.items()))
    print(f"security: TLS and {security.mechanism} on client listeners, mTLS between nodes, ACLs on "
          f"(CA {security.ca_path})")
    print(f"  admin client properties: {files[security.admin_user]}")
    print(f"  try: kcat -F {files[security.admin_user]} -b {first.bootstrap} -L")
    # --cluster brings the admin properties along (core/cli/common.py resolve_cluster).
    print(f"       {seaway_command(layout.state_dir)} topics list --cluster {name}")
    for g in layout.gateways[:1]:
        # The gateways take the same logins (relayed to the brokers), with TLS of the same CA.
        print(f"  through a gateway, with the same client properties (each user logs in as itself): "
              f"kcat -F {files[security.admin_user]} -b {g.bootstrap} -L")


def _show_status_until_interrupted(proc, state_dir: Path, layout, header: list[str] = ()) -> bool:
    """Refresh the status view every 2 s, under `header` (on a terminal the screen is cleared
    each time, and the addresses must not go with it), until Ctrl-C (True) or the supervisor
    exits (False).

    Ctrl-C sets a flag, checked between refreshes, instead of raising KeyboardInterrupt
    wherever the main thread happens to be: inside a status query it meets asyncio's runner
    and the query's own timeouts and error handling, and once, on a loaded machine, the view
    went on refreshing after Ctrl-C and the platform was never stopped."""
    import signal
    interrupted = []
    previous = signal.signal(signal.SIGINT, lambda *_: interrupted.append(True))
    try:
        while proc.poll() is None:
            for _ in range(20):
                if interrupted:
                    return True
                time.sleep(0.1)
            if sys.stdout.isatty():
                print("\033[2J\033[H" + "\n".join([*header, ""]))
            _print_status(state_dir, layout)
        return bool(interrupted)
    finally:
        signal.signal(signal.SIGINT, previous)


def _check_ports_free(layout) -> None:
    import socket
    wanted = [(n.key, field, n.node.host, port) for n in layout.nodes()
              for field, port in (("port", n.client_port), ("controller_port", n.controller_port),
                                  ("metrics_port", n.metrics_port)) if port is not None]
    wanted += [(g.spec.name, field, g.host, port) for g in layout.gateways
               for field, port in [*(("port", p) for p in g.ports), ("metrics_port", g.metrics_port)]]
    for owner, field, host, port in wanted:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError:
                raise CliError(f"{owner} {field} {port} on {host} is in use "
                               f"(another platform or program?)") from None


def _wait_healthy(layout, proc, timeout: float, log_path: Path) -> dict:
    from .health import cluster_health
    deadline = time.monotonic() + timeout
    healths = {}
    while True:
        if proc.poll() is not None:
            raise CliError(f"the supervisor exited ({proc.returncode}): {_tail(log_path)}")
        healths = anyio.run(_all_health, layout, cluster_health)
        if all(h.healthy for h in healths.values()):
            return healths
        if time.monotonic() > deadline:
            sick = "; ".join(f"{n}: leader {h.controller_leader}, brokers {h.brokers} of "
                             f"{h.expected_brokers}" + (f", {h.error}" if h.error else "")
                             for n, h in healths.items() if not h.healthy)
            raise CliError(f"not healthy within {timeout:g}s ({sick}); node logs are under "
                           f"{layout.state_dir / 'clusters'}")
        time.sleep(0.3)


def _wait_gateways(layout, proc, deadline: float) -> dict[str, str]:
    """Each gateway's answer to /health once all answer 200 (what it serves); the clients it
    is printed for may use it at once."""
    from .health import gateway_health
    answers: dict[str, tuple[bool, str]] = {}
    while True:
        for g in layout.gateways:
            if not answers.get(g.spec.name, (False, ""))[0]:
                answers[g.spec.name] = gateway_health(g.metrics_url)
        if all(ok for ok, _ in answers.values()):
            return {name: text for name, (_, text) in answers.items()}
        if proc.poll() is not None:
            raise CliError(f"the supervisor exited ({proc.returncode}): {_tail(layout.state_dir / 'supervisor.log')}")
        if time.monotonic() > deadline:
            sick = "; ".join(f"{name}: {text} (see {layout.state_dir / (name + '.log')})"
                             for name, (ok, text) in answers.items() if not ok)
            raise CliError(f"gateways not serving in time: {sick}")
        time.sleep(0.3)


async def _all_health(layout, cluster_health, timeout: float = 3.0) -> dict:
    out = {}

    async def one(name, c):
        out[name] = await cluster_health(c, timeout, layout.security)
    async with anyio.create_task_group() as tg:
        for name, c in layout.clusters.items():
            tg.start_soon(one, name, c)
    return {name: out[name] for name in layout.clusters}


def _tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(text[-lines:])


# ---------------------------------------------------------------------------- others

def _layout_of_running(state_dir: Path):
    """The running platform's layout (from the topology it was started with)."""
    from .layout import plan
    from .control import send_command
    status = anyio.run(send_command, state_dir, {"cmd": "status"}, 10.0)
    if status is None:
        raise CliError(f"no platform is running (no supervisor answers in {state_dir}); "
                       f"start one with `regions up`")
    try:
        info = json.loads((state_dir / PLATFORM_FILE).read_text())
        topology = load_topology(Path(info["topology"]))
    except (OSError, ValueError, KeyError) as exc:
        raise CliError(f"cannot read {state_dir / PLATFORM_FILE}: {exc}") from None
    return plan(topology, state_dir), status


def cmd_status(args, state_dir: Path) -> int:
    layout, status = _layout_of_running(state_dir)
    if args.output == "json":
        from .health import cluster_health
        healths = anyio.run(_all_health, layout, cluster_health)
        regions = {}
        for name, c in layout.clusters.items():
            nodes = {k: v for k, v in status["nodes"].items() if v["cluster"] == name}
            regions.setdefault(c.region, {})[name] = dict(
                healths[name].to_dict(), bootstrap=c.bootstrap,
                nodes_up=sum(v["running"] for v in nodes.values()), nodes_total=len(nodes),
                nodes=nodes)
        print(json.dumps({"name": status["name"], "regions": regions, "mirror": status.get("mirror"),
                          "dr": status.get("dr"), "gateways": status.get("gateways") or []},
                         indent=2))
        return 0
    _print_status(state_dir, layout, status)
    return 0


def _print_status(state_dir: Path, layout, status: dict | None = None) -> None:
    from .health import cluster_health
    from .control import send_command
    status = status or anyio.run(send_command, state_dir, {"cmd": "status"}, 10.0) or {"nodes": {}}
    healths = anyio.run(_all_health, layout, cluster_health)
    rows = [["REGION", "CLUSTER", "NODES UP", "CONTROLLER", "BROKERS", "PARTITIONS",
             "UNDER-REPLICATED", "OFFLINE", "STATE"]]
    for name, c in layout.clusters.items():
        h = healths[name]
        nodes = [v for v in status["nodes"].values() if v["cluster"] == name]
        down = [str(v["id"]) for v in nodes if not v["running"]]
        leader = f"{h.controller_leader} (epoch {h.controller_epoch})" if h.controller_leader is not None else "none"
        state = "healthy" if h.healthy else ("down" if len(down) == len(nodes) else "degraded")
        rows.append([c.region, name, f"{len(nodes) - len(down)}/{len(nodes)}"
                     + (f" (down: {','.join(down)})" if down else ""),
                     leader, ",".join(map(str, h.brokers)) or "-", str(h.partitions),
                     str(h.under_replicated), str(h.offline), state])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip())
    mirror = status.get("mirror")
    if mirror is not None:
        links = ", ".join(f"{m.source} -> {m.target}" for m in layout.topology.mirror_runs())
        print(f"mirror ({links}): " + (f"running (pid {mirror['pid']}), metrics {mirror_metrics_url(layout)}"
                                       if mirror["running"]
                                       else f"down (exit {mirror['exit_code']}; see {mirror['log']})"))
    dr = status.get("dr")
    if dr is not None:
        print(f"dr serve ({dr['url']}): " + (f"running (pid {dr['pid']})" if dr["running"]
                                            else f"down (exit {dr['exit_code']}; see {dr['log']})"))
    for g in status.get("gateways") or []:
        state = (f"running (pid {g['pid']})" if g["running"] else "stopped with its region" if g["held"]
                 else f"down (exit {g['exit_code']}; see {g['log']})")
        print(f"gateway of {g['pair']} in {g['region']} ({g['bootstrap']}): {state}")


def cmd_stop_start(args, state_dir: Path) -> int:
    from .control import send_command
    layout, _ = _layout_of_running(state_dir)
    try:
        layout.select(args.target)
    except KeyError:
        raise CliError(f"target: no region, cluster or CLUSTER/ID named {args.target!r} "
                       f"(regions: {', '.join(layout.topology.regions)}; clusters: "
                       f"{', '.join(layout.clusters)})") from None
    request = {"cmd": args.command, "target": args.target, "kill": getattr(args, "kill", False)}
    reply = anyio.run(send_command, state_dir, request, 120.0)
    if reply is None or not reply.get("ok"):
        raise CliError((reply or {}).get("error") or "the supervisor did not answer")
    verb = "stopped" if args.command == "stop" else "started"
    print(f"{verb} {', '.join(reply['nodes'] + reply.get('gateways', []))}")
    return 0


def cmd_down(args, state_dir: Path) -> int:
    from .control import send_command
    try:
        supervisor_pid = json.loads((state_dir / PLATFORM_FILE).read_text()).get("supervisor_pid")
    except (OSError, ValueError):
        supervisor_pid = None
    reply = anyio.run(send_command, state_dir, {"cmd": "down"}, 10.0)
    if reply is None:
        print(f"no platform is running in {state_dir}")
        return 0
    # Done when the supervisor has exited, not merely when it removed platform.json: a
    # script that starts another platform right after must not meet this one's processes.
    deadline = time.monotonic() + 120
    while ((state_dir / PLATFORM_FILE).exists() or process_alive(supervisor_pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    print("platform stopped; its data stays in " + str(state_dir))
    return 0


def cmd_supervise(args, state_dir: Path) -> int:
    import logging

    from .layout import plan
    from .supervisor import Supervisor
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    topology = load_topology(args.topology, check_setting=broker_setting_problem)
    supervisor = Supervisor(plan(topology, state_dir), topology_path=args.topology.resolve())
    anyio.run(supervisor.run)
    return supervisor.exit_status


def cmd_compose(args, state_dir: Path) -> int:
    from .compose import compose_file
    topology = load_topology(args.topology, check_setting=broker_setting_problem)
    source = _relative(args.topology)
    output = _relative(args.file) if args.file else "FILE"
    assets = "."    # compose/ holds the alert rules and Grafana's files; a file elsewhere points back
    if args.file is not None:
        import os
        assets = os.path.relpath(Path(__file__).resolve().parents[1] / "compose",
                                 Path(args.file).resolve().parent)
    secrets_on_host = str(Path(output).parent / "secrets") if args.file else "compose/secrets"
    text = compose_file(topology, source=source, output=output, assets=assets, secrets_on_host=secrets_on_host)
    if args.file is None:
        sys.stdout.write(text)
        return 0
    try:
        Path(args.file).write_text(text)
    except OSError as exc:
        raise CliError(f"--file: cannot write {args.file}: {exc.strerror or exc}") from None
    print(f"wrote {args.file}; start it with: docker compose -f {args.file} up -d --wait")
    return 0


def _relative(path: Path) -> str:
    """A path as the generated file's header shows it: relative to the repository if inside it."""
    repo = Path(__file__).resolve().parents[1]
    try:
        return str(Path(path).resolve().relative_to(repo))
    except ValueError:
        return str(path)


def cmd_wan(args, state_dir: Path) -> int:
    import logging

    from .wan import parse_link, parse_proxy, serve_wan, wan_proxies
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        links = [parse_link(text) for text in args.link]
        specs = [parse_proxy(text) for text in args.proxy]
        if not specs:
            raise ValueError("--proxy: give at least one proxy")
        proxies = wan_proxies(links, specs)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    anyio.run(serve_wan, specs, proxies, "0.0.0.0", args.metrics_port)
    return 0


def cmd_pki(args, state_dir: Path) -> int:
    from .compose_security import make_secrets, parse_gateway, parse_node
    try:
        nodes = dict(parse_node(text) for text in args.node)
        gateways = dict(parse_gateway(text) for text in args.gateway)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    owner = None
    if args.owner is not None:
        uid, sep, gid = args.owner.partition(":")
        if not (sep and uid.isdigit() and gid.isdigit()):
            raise CliError(f"--owner: {args.owner!r} is not UID:GID")
        owner = (int(uid), int(gid))
    if args.export is not None and not args.export.is_dir():
        raise CliError(f"--export: {args.export} is not a directory")
    for line in make_secrets(args.dir, mechanism=args.mechanism, admin_user=args.admin_user,
                             mirror_user=args.mirror_user, nodes=nodes, export=args.export,
                             export_ca=args.export_ca, owner=owner, gateways=gateways):
        print(line)
    return 0


def cmd_grant_mirror_acls(args, state_dir: Path) -> int:
    import logging

    from core.client.properties import PropertiesFileError, read_properties
    from core.client.security import SaslSettingsError, TlsError, security_from_properties

    from .compose_security import grant_mirror_acls, parse_cluster, parse_link
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        clusters = dict(parse_cluster(text) for text in args.cluster)
        links = [parse_link(text) for text in args.link]
    except ValueError as exc:
        raise CliError(str(exc)) from None
    unknown = [c for c in args.gateway_cluster if c not in clusters]
    if unknown:
        raise CliError(f"--gateway-cluster: {unknown[0]!r} is not a --cluster")
    try:
        security = security_from_properties(read_properties(args.command_config))
    except (PropertiesFileError, TlsError, SaslSettingsError) as exc:
        raise CliError(f"--command-config: {exc}") from None
    gateway_login = None
    if args.gateway_user and args.gateway_cluster:
        # Its client properties sit beside the admin's (regions pki writes both).
        path = args.command_config.parent / f"{args.gateway_user}.properties"
        try:
            gateway_login = dict(read_properties(path))
        except PropertiesFileError as exc:
            raise CliError(f"--gateway-user: {exc}") from None
    try:
        granted = anyio.run(lambda: grant_mirror_acls(mirror_user=args.mirror_user, clusters=clusters, links=links,
                                                      client_security=security, timeout=args.timeout,
                                                      gateway_user=args.gateway_user,
                                                      gateway_clusters=tuple(args.gateway_cluster),
                                                      gateway_login=gateway_login))
    except TimeoutError as exc:
        raise CliError(str(exc)) from None
    users = args.mirror_user + (f" and {args.gateway_user}" if args.gateway_user else "")
    print(f"granted {users} {granted} ACLs on {', '.join(clusters)}")
    return 0


COMMANDS = {"up": cmd_up, "status": cmd_status, "stop": cmd_stop_start, "start": cmd_stop_start,
            "down": cmd_down, "supervise": cmd_supervise, "compose": cmd_compose, "wan": cmd_wan,
            "pki": cmd_pki, "grant-mirror-acls": cmd_grant_mirror_acls}


if __name__ == "__main__":
    sys.exit(main())
