"""The console's JSON API (dr/console/app.py) over real HTTP, against real /metrics endpoints
served by this test: its shape, its errors, its authentication and the actions' plumbing.

The nodes are three HTTP endpoints serving Prometheus text a test can change or silence; the
console scrapes them as it scrapes a platform's (no Prometheus). Logins are checked against a
stand-in for the clusters' SCRAM (check_login is replaced: the real one is exercised by the
browser test against a secured platform)."""
from __future__ import annotations

import http.client
import http.server
import json
import sys
import threading
import time
from pathlib import Path

import anyio
import pytest

from core.metrics_http import MAX_BODY_BYTES, serve_http
from dr.config import DrConfig
from dr.console import app as console_app
from dr.console.actions import Actions
from dr.console.app import Console
from dr.console.auth import LoginRefused

NODE_TEXT = """# TYPE seaway_node_info gauge
seaway_node_info{{node_id="{id}",roles="broker,controller",rack="z{id}"}} 1
# TYPE seaway_controller_leader gauge
seaway_controller_leader 3
# TYPE seaway_controller_epoch gauge
seaway_controller_epoch 5
# TYPE seaway_active_controller gauge
seaway_active_controller {active}
# TYPE seaway_active_brokers gauge
seaway_active_brokers 3
# TYPE seaway_fenced_brokers gauge
seaway_fenced_brokers 0
# TYPE seaway_offline_partitions gauge
seaway_offline_partitions 0
# TYPE seaway_leader_partitions gauge
seaway_leader_partitions 2
# TYPE seaway_replica_partitions gauge
seaway_replica_partitions 6
# TYPE seaway_under_replicated_partitions gauge
seaway_under_replicated_partitions 0
# TYPE seaway_under_min_isr_partitions gauge
seaway_under_min_isr_partitions 0
# TYPE seaway_at_min_isr_partitions gauge
seaway_at_min_isr_partitions 0
# TYPE seaway_metadata_applied_offset gauge
seaway_metadata_applied_offset 100
# TYPE seaway_requests counter
seaway_requests_total{{api="Produce"}} {requests}
# TYPE seaway_partition_size_bytes gauge
seaway_partition_size_bytes{{topic="orders",partition="0"}} {size}
"""


class Nodes:
    """Three /metrics endpoints; `down` ones answer 503 (a scrape failure, as a dead node's)."""

    def __init__(self):
        self.requests = 0
        self.down: set[int] = set()
        nodes = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):   # noqa: N802
                node = int(self.path.strip("/").split("/")[0])
                if node in nodes.down:
                    self.send_response(503)
                    self.end_headers()
                    return
                body = NODE_TEXT.format(id=node, active=1 if node == 3 else 0, requests=nodes.requests,
                                        size=1000 * node).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.port = self.server.server_address[1]

    def targets(self) -> list[dict]:
        return [{"url": f"http://127.0.0.1:{self.port}/{i}/metrics",
                 "labels": {"job": "seaway-nodes", "instance": f"n{i}", "region": "eu-west", "cluster": "eu-west-1"}}
                for i in (1, 2, 3)]


class Client:
    def __init__(self, port: int):
        self.port = port
        self.cookie: str | None = None

    def call(self, method: str, path: str, body=None, *, header: bool = True, content_type="application/json",
             raw: bytes | None = None) -> tuple[int, dict]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        headers = {}
        if self.cookie:
            headers["Cookie"] = self.cookie
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        if data is not None:
            headers["Content-Type"] = content_type
        if header and method == "POST":
            headers["X-Seaway-Console"] = "1"
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        payload = resp.read()
        cookie = resp.getheader("Set-Cookie")
        if cookie:
            self.cookie = cookie.split(";")[0]
        conn.close()
        try:
            return resp.status, json.loads(payload)
        except ValueError:
            return resp.status, {"text": payload.decode(errors="replace")}


class ScriptedActions(Actions):
    """The dr command replaced by a script that prints steps slowly: the plumbing under test is
    the console's (the lines live, the state, one at a time), not dr's."""

    def command(self, *args: str) -> list[str]:
        code = ("import sys, time\nfor i in range(3):\n    print(f'step {i + 1} of " + " ".join(args) +
                "', flush=True)\n    time.sleep(0.3)\nsys.exit(0 if 'us-east' not in sys.argv else 3)")
        return [sys.executable, "-c", code, *args]


def make_console(tmp_path: Path, nodes: Nodes, **console) -> Console:
    config = DrConfig.model_validate({"state_dir": str(tmp_path / "dr"), "regions": ["eu-west", "us-east"],
                                      "console": {"targets": nodes.targets(), **console}})
    return Console(config, dr_snapshot=lambda: {"pairs": [], "polled_at": None},
                   history=lambda: {"failovers": [], "drills": []}, own_metrics=lambda: "",
                   actions=ScriptedActions([]), interval_s=0.5)


@pytest.fixture
def nodes():
    n = Nodes()
    yield n
    n.server.shutdown()


def serve(console: Console):
    """The console's loop on a thread of its own, as dr serve runs it, and its HTTP server."""
    started = threading.Event()

    async def main():
        async with anyio.create_task_group() as tg:
            await tg.start(console.run)
            started.set()

    threading.Thread(target=anyio.run, args=(main,), daemon=True).start()
    assert started.wait(10)
    from prometheus_client import CollectorRegistry
    return Client(serve_http(CollectorRegistry(), 0, "127.0.0.1", routes=console.route))


def wait_for(predicate, timeout=20.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_overview_shows_regions_clusters_and_nodes_and_a_dead_node_turns_red(tmp_path, nodes):
    client = serve(make_console(tmp_path, nodes))
    status, overview = wait_for(lambda: (r := client.call("GET", "/api/v1/console/overview"))[0] == 200 and r,
                                what="a first overview")
    assert overview["mode"] == "local"
    regions = {r["name"]: r for r in overview["platform"]["regions"]}
    assert list(regions) == ["eu-west", "us-east"]
    [cluster] = regions["eu-west"]["clusters"]
    assert (cluster["name"], cluster["health"], cluster["controller"]) == ("eu-west-1", "ok", {"leader": 3, "epoch": 5})
    assert [(n["node_id"], n["rack"], n["up"], n["leaders"]) for n in cluster["nodes"]] == \
        [("1", "z1", True, 2), ("2", "z2", True, 2), ("3", "z3", True, 2)]
    assert cluster["partitions"]["replicas"] == 18
    assert regions["us-east"]["health"] == "bad"            # nothing of it is scraped here
    assert overview["alerts"] == {"firing": 0, "pending": 0} or overview["alerts"]["firing"] >= 0

    nodes.down.add(2)
    started = time.monotonic()

    def node2():
        overview = client.call("GET", "/api/v1/console/overview")[1]
        cluster = overview["platform"]["regions"][0]["clusters"][0]
        return cluster if cluster["health"] == "bad" else None
    cluster = wait_for(node2, what="node 2 red")
    assert time.monotonic() - started < 5
    assert cluster["problems"] == ["node 2 is down"]
    assert [n["health"] for n in cluster["nodes"]] == ["ok", "bad", "ok"]


def test_charts_hold_an_hour_on_a_grid_and_a_page_is_computed_when_first_asked(tmp_path, nodes):
    client = serve(make_console(tmp_path, nodes))

    def requests_chart():
        nodes.requests += 10
        status, page = client.call("GET", "/api/v1/console/charts/cluster?cluster=eu-west-1")
        assert status == 200, page
        chart = next(c for c in page["charts"] if c["id"] == "requests")
        return (page, chart) if chart["series"] and sum(v is not None for v in chart["series"][0]["values"]) >= 2 \
            else None
    page, chart = wait_for(requests_chart, what="a rate with two points")
    assert len(page["t"]) == 241 and page["step"] == 15
    assert page["t"][-1] >= page["at"] > page["t"][-2]          # the newest sample is on the grid
    assert {c["id"] for c in page["charts"]} >= {"requests", "latency_p99", "bytes_in", "isr", "leaders", "replicas"}
    [series] = chart["series"]
    assert series["name"] == "Produce" and all(len(s["values"]) == 241 for s in chart["series"])
    assert [v for v in series["values"] if v is not None][-1] > 0
    leaders = next(c for c in page["charts"] if c["id"] == "leaders")
    assert sorted(s["name"] for s in leaders["series"]) == ["node 1", "node 2", "node 3"]
    # Another cluster's page has the page's charts but none of this cluster's series.
    other = client.call("GET", "/api/v1/console/charts/cluster?cluster=us-east-1")[1]
    assert all(not c["series"] for c in other["charts"])
    growth = wait_for(lambda: (g := client.call("GET", "/api/v1/console/charts/growth")[1]).get("capacity") and g,
                      what="the growth table")
    assert sorted(r["used_bytes"] for r in growth["capacity"]) == [1000, 2000, 3000]


@pytest.mark.parametrize("method, path, status, says", [
    ("GET", "/api/v1/console/charts/nothing", 404, "one of cluster, replication, growth"),
    ("GET", "/api/v1/console/nothing", 404, "no such resource"),
    ("DELETE", "/api/v1/console/overview", 405, "DELETE is not served"),
    ("GET", "/api/v1/console/drills/12", 404, "no report for drill 12"),
    ("GET", "/api/v1/console/actions/99", 404, "no action 99"),
    ("GET", "/api/v1/console/actions/1?since=x", 404, "no action 1"),
    ("GET", "/api/v1/console/login", 405, "POST a login"),
])
def test_what_is_not_there_gets_a_json_error_that_says_so(tmp_path, nodes, method, path, status, says):
    client = serve(make_console(tmp_path, nodes))
    got, body = client.call(method, path)
    assert got == status and says in body["error"]


def test_the_page_and_its_scripts_ship_inside_the_package(tmp_path, nodes):
    client = serve(make_console(tmp_path, nodes))
    for path, kind in (("/console/", "text/html"), ("/console/static/console.js", "text/javascript"),
                       ("/console/static/uplot/uPlot.iife.min.js", "text/javascript"),
                       ("/console/static/uplot/uPlot.min.css", "text/css")):
        conn = http.client.HTTPConnection("127.0.0.1", client.port, timeout=10)
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read()
        assert resp.status == 200 and resp.getheader("Content-Type").startswith(kind) and body, path
    html = client.call("GET", "/console/")[1]["text"]
    assert "http://" not in html and "https://" not in html     # nothing from a CDN
    for path in ("/console/../app.py", "/console/static/../../app.py", "/console/%2e%2e/app.py", "/console/nope.js"):
        assert client.call("GET", path)[0] == 404, path


@pytest.fixture
def secured(monkeypatch):
    """Security on, with two users: admin (a super user) and viewer (nobody)."""
    async def check_login(sides, user, password):
        if (user, password) not in (("admin", "s3cret"), ("viewer", "v1ew")):
            raise LoginRefused("wrong user name or password")
        return {"User:admin", "User:node.eu-west-1"}
    monkeypatch.setattr(console_app, "check_login", check_login)


def secured_console(tmp_path, nodes, **console) -> Console:
    c = make_console(tmp_path, nodes, **console)
    c.secured = True
    return c


def test_with_security_on_everything_but_the_login_needs_a_session(tmp_path, nodes, secured):
    client = serve(secured_console(tmp_path, nodes))
    assert client.call("GET", "/api/v1/console/session") == (200, {"user": None, "login_required": True,
                                                                  "security": True})
    for path in ("/api/v1/console/overview", "/api/v1/console/charts/cluster", "/api/v1/console/dr",
                 "/api/v1/console/alerts"):
        status, body = client.call("GET", path)
        assert status == 401 and "log in first" in body["error"], path
    assert client.call("POST", "/api/v1/console/plan", {"action": "failover", "region": "eu-west"})[0] == 401
    assert client.call("POST", "/api/v1/console/login", {"user": "admin", "password": "wrong"}) == \
        (401, {"error": "wrong user name or password"})
    assert client.cookie is None
    status, body = client.call("POST", "/api/v1/console/login", {"user": "admin", "password": "s3cret"})
    assert (status, body) == (200, {"user": "admin", "may_act": True, "security": True})
    assert client.cookie and client.cookie.startswith("seaway_console=")
    assert client.call("GET", "/api/v1/console/session")[1]["user"] == "admin"
    assert client.call("GET", "/api/v1/console/dr")[0] == 200
    client.call("POST", "/api/v1/console/logout", {})
    assert client.call("GET", "/api/v1/console/dr")[0] == 401
    forged = Client(client.port)
    forged.cookie = "seaway_console=" + "A" * 43
    assert forged.call("GET", "/api/v1/console/dr")[0] == 401
    audit = [json.loads(line) for line in (tmp_path / "dr" / "console-audit.log").read_text().splitlines()]
    assert [(a["user"], a["what"], a["outcome"]) for a in audit] == [("admin", "login", "refused"),
                                                                      ("admin", "login", "ok")]


def test_only_a_super_user_or_an_operator_may_act_and_the_refusal_is_audited(tmp_path, nodes, secured):
    viewer = serve(secured_console(tmp_path, nodes))
    assert viewer.call("POST", "/api/v1/console/login", {"user": "viewer", "password": "v1ew"})[1]["may_act"] is False
    status, body = viewer.call("POST", "/api/v1/console/actions",
                               {"action": "failover", "region": "eu-west", "confirm": "eu-west"})
    assert status == 403 and "User:viewer may not start a failover" in body["error"]
    assert viewer.call("POST", "/api/v1/console/plan", {"action": "failover", "region": "eu-west"})[0] == 403
    assert viewer.call("GET", "/api/v1/console/dr")[1]["actions"] == []
    audit = (tmp_path / "dr" / "console-audit.log").read_text()
    assert '"outcome": "forbidden"' in audit and '"what": "failover eu-west"' in audit
    operator = serve(secured_console(tmp_path / "2", nodes, operators=["User:viewer"]))
    assert operator.call("POST", "/api/v1/console/login", {"user": "viewer", "password": "v1ew"})[1]["may_act"] is True


@pytest.mark.parametrize("body, status, says", [
    ({"action": "reboot", "region": "eu-west"}, 400, "action: one of failover, failback, drill"),
    ({"action": "failover", "region": "mars"}, 400, "region: 'mars' is not a region of the platform"),
    ({"action": "failover", "region": "eu-west", "force": "yes"}, 400, "force: true or false"),
    ({"action": "failover", "region": "eu-west"}, 400, "confirm: type the region's name (eu-west)"),
    ({"action": "failover", "region": "eu-west", "confirm": "us-east"}, 400, "confirm: type the region's name"),
    (["failover"], 400, "the body is a JSON object"),
])
def test_a_bad_action_gets_a_400_that_names_the_field(tmp_path, nodes, secured, body, status, says):
    client = serve(secured_console(tmp_path, nodes))
    client.call("POST", "/api/v1/console/login", {"user": "admin", "password": "s3cret"})
    got, answer = client.call("POST", "/api/v1/console/actions", body)
    assert got == status and says in answer["error"]


def test_bad_requests_are_refused_before_anything_is_read_or_done(tmp_path, nodes, secured):
    client = serve(secured_console(tmp_path, nodes))
    client.call("POST", "/api/v1/console/login", {"user": "admin", "password": "s3cret"})
    good = {"action": "failover", "region": "eu-west", "confirm": "eu-west"}
    status, body = client.call("POST", "/api/v1/console/actions", good, header=False)
    assert status == 403 and "X-Seaway-Console" in body["error"].replace("x-seaway-console", "X-Seaway-Console")
    assert client.call("POST", "/api/v1/console/actions", raw=b"{not json")[0] == 400
    assert client.call("POST", "/api/v1/console/actions", good, content_type="text/plain")[0] == 415
    status, body = client.call("POST", "/api/v1/console/actions", raw=b"x" * (MAX_BODY_BYTES + 1))
    assert status == 413 and str(MAX_BODY_BYTES) in body["error"]
    assert client.call("POST", "/api/v1/console/login", {"user": "", "password": "x"})[0] == 400
    assert client.call("POST", "/api/v1/console/login", {"user": "a" * 300, "password": "x"})[0] == 400
    assert client.call("GET", "/api/v1/console/dr")[1]["actions"] == []


def test_an_action_runs_once_at_a_time_its_lines_arrive_live_and_its_end_is_audited(tmp_path, nodes, secured):
    client = serve(secured_console(tmp_path, nodes))
    client.call("POST", "/api/v1/console/login", {"user": "admin", "password": "s3cret"})
    start = {"action": "failover", "region": "eu-west", "confirm": "eu-west"}
    status, action = client.call("POST", "/api/v1/console/actions", start)
    assert status == 202 and action["state"] == "running" and action["user"] == "admin"
    status, body = client.call("POST", "/api/v1/console/actions", start)
    assert status == 409 and "still running" in body["error"]
    seen: list[str] = []

    def follow():
        update = client.call("GET", f"/api/v1/console/actions/{action['id']}?since={len(seen)}")[1]
        seen.extend(update["lines"])
        return update if update["state"] != "running" else None
    def first_line():
        update = follow()
        assert update is None or seen, "the action ended before its first line was seen"
        return seen
    assert wait_for(first_line, what="a first line")[:1] == ["step 1 of failover eu-west"]
    assert len(seen) < 3            # seen while it ran, not at its end
    done = wait_for(follow, what="the end")
    assert (done["state"], done["exit_code"]) == ("done", 0)
    assert seen == [f"step {i} of failover eu-west" for i in (1, 2, 3)]
    # A failing one ends failed, with its exit code; both ends are in the audit log.
    status, action = client.call("POST", "/api/v1/console/actions",
                                 {"action": "failback", "region": "us-east", "confirm": "us-east"})
    done = wait_for(lambda: (u := client.call("GET", f"/api/v1/console/actions/{action['id']}")[1])["state"]
                    != "running" and u, what="the second end")
    assert (done["state"], done["exit_code"]) == ("failed", 3)
    outcomes = [(a["what"], a["outcome"]) for a in client.call("GET", "/api/v1/console/dr")[1]["audit"]]
    assert outcomes[:4] == [("failback us-east", "failed"), ("failback us-east", "started"),
                            ("failover eu-west", "done"), ("failover eu-west", "started")]
