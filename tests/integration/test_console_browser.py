"""The console in a real browser (Debian's Chromium, headless) against a real platform: the
shipped two-region topology, secured, started by `regions up`, with the console `dr serve`
serves and no Prometheus (the console scrapes the platform itself).

What a person would check, in order, on one platform:
- logging in as the admin, every tab renders without a console error and the charts draw data;
- killing a node (kill -9) turns its row and its cluster red, in words, within seconds;
- a failover started from the DR tab shows its plan, takes the typed confirmation, shows its
  steps live and completes, and the pair is then active in the other region;
- a user of the platform without rights sees the DR tab but cannot start anything: the
  buttons are disabled and the API refuses with 403.

Screenshots of each step go to tests/artifacts/console/.
"""
from __future__ import annotations

import http.client
import json
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from selenium.webdriver.common.by import By

from regions.topology import DEFAULT_TOPOLOGY
from tests.support.browser import click, console_errors, open_browser, read, screenshot, wait_until
from tests.support.regions import Platform, create, regions, without_fixed_ports

pytestmark = pytest.mark.integration

TABS = ("platform", "cluster", "replication", "dr", "drills", "growth", "alerts")
VIEWER, VIEWER_PASSWORD = "viewer", "viewer-password-1"


def seaway(*args: str) -> str:
    out = subprocess.run(["seaway", *args], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def produce(client: dict, topic: str, n: int) -> None:
    producer = Producer({**client, "linger.ms": 5})
    for i in range(n):
        producer.produce(topic, key=str(i).encode(), value=b"v" * 100)
    assert producer.flush(30) == 0


def login(driver, url: str, user: str, password: str) -> None:
    driver.get(url)
    wait_until(lambda: driver.find_element(By.ID, "login").is_displayed(), 20, "the login form")
    driver.find_element(By.NAME, "user").send_keys(user)
    driver.find_element(By.NAME, "password").send_keys(password)
    driver.find_element(By.CSS_SELECTOR, "#login-form button").click()
    try:
        wait_until(lambda: driver.find_element(By.ID, "whoami").text.startswith(user), 30, f"{user} logged in")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: the page says {driver.find_element(By.ID, 'login-error').text!r}") from None


def show(driver, tab: str) -> None:
    driver.execute_script(f"location.hash = '{tab}'")
    wait_until(lambda: driver.find_element(By.ID, tab.split("/")[0]).is_displayed(), 10, f"the {tab} tab")


def node_row(driver, node: str):
    return driver.find_element(By.CSS_SELECTOR, f'[data-cluster="eu-west-1"] tr[data-node="{node}"]')


def charts_with_data(driver, container: str) -> set[str]:
    return {box.get_attribute("data-chart") for box in driver.find_elements(By.CSS_SELECTOR, f"#{container} .chart")
            if int(box.get_attribute("data-points") or 0) > 0}


def ended_state(driver) -> str | None:
    """The action's state once it is not running; None while it runs. Read in one go inside
    wait_until: the page redraws the title (and the state in it) every second while it runs."""
    state = driver.find_element(By.ID, "action-state").text
    return None if state == "running" else state


def api(port: int, method: str, path: str, cookie: str, body: dict | None = None) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request(method, path, body=json.dumps(body).encode() if body is not None else None,
                 headers={"Cookie": cookie, "Content-Type": "application/json", "X-Seaway-Console": "1"})
    resp = conn.getresponse()
    return resp.status, json.loads(resp.read())


def test_the_console_in_a_browser_shows_the_platform_a_dead_node_and_a_failover_and_guards_its_actions(tmp_path):
    topology = without_fixed_ports(DEFAULT_TOPOLOGY, tmp_path / "topology.yaml")
    with Platform(tmp_path / "platform", topology) as platform:
        console = next(line for line in platform.up_output.splitlines() if "console: http" in line)
        url = console.split("console: ")[1].split()[0]
        port = int(url.split(":")[2].split("/")[0])
        admin = platform.admin_properties
        password = next(line.split("=", 1)[1] for line in Path(admin).read_text().splitlines()
                        if line.startswith("sasl.password="))
        for cluster in ("eu-west-1", "us-east-1"):       # the DR access check wants both to know the user
            seaway("users", "add", VIEWER, "--mechanism", "SCRAM-SHA-512", "--password", VIEWER_PASSWORD,
                   "--command-config", str(admin),
                   "-b", platform.bootstrap(cluster))
        create(platform.client("eu-west-1"), "orders", 3, 2)
        produce(platform.client("eu-west-1"), "orders", 500)

        driver = open_browser()
        try:
            started = time.monotonic()
            login(driver, url, "admin", password)
            wait_until(lambda: driver.find_elements(By.CSS_SELECTOR, '[data-cluster="eu-west-1"][data-health]'), 30,
                       "the platform's clusters")
            page_load_s = time.monotonic() - started
            # ------------------------------------------------ every tab, no console error
            for tab in TABS:
                show(driver, tab)
                if tab == "cluster":
                    wait_until(lambda: {"requests", "latency_p99", "leaders", "replicas"} <=
                               charts_with_data(driver, "cluster-charts"), 90, "the cluster charts' data")
                if tab == "replication":
                    wait_until(lambda: {"link_lag_records", "link_throughput"} <=
                               charts_with_data(driver, "replication-charts"), 60, "the replication charts' data")
                if tab == "growth":
                    wait_until(lambda: {"disk_broker", "disk_topic"} <= charts_with_data(driver, "growth-charts"),
                               60, "the growth charts' data")
                    wait_until(lambda: driver.find_elements(By.CSS_SELECTOR, "#capacity tbody tr"), 20,
                               "the capacity table")
                if tab == "dr":
                    wait_until(lambda: driver.find_elements(By.CSS_SELECTOR, '[data-act="failover:eu-west"]'), 30,
                               "the failover button")
                if tab == "alerts":
                    wait_until(lambda: "Evaluated by the console" in driver.find_element(By.ID, "alerts").text, 20,
                               "the alerts")
                time.sleep(1)
                screenshot(driver, f"{tab}")
                assert console_errors(driver) == [], tab
            # ------------------------------------------------ a dead node turns red
            show(driver, "platform")
            assert read(driver, lambda: node_row(driver, "2").get_attribute("data-health"), "node 2") == "ok"
            killed = time.monotonic()
            out = regions(platform.state_dir, "stop", "eu-west-1/2", "--kill")
            assert out.returncode == 0, out.stderr
            wait_until(lambda: node_row(driver, "2").get_attribute("data-health") == "bad", 20, "node 2 red")
            red_after_s = time.monotonic() - killed
            def cluster_now():
                cluster = driver.find_element(By.CSS_SELECTOR, '[data-cluster="eu-west-1"]')
                return cluster.get_attribute("data-health"), cluster.text, node_row(driver, "2").text
            health, words, row = read(driver, cluster_now, "eu-west-1")
            assert health == "bad"
            assert "node 2 is down" in words and "DOWN" in row
            screenshot(driver, "node-down")
            assert regions(platform.state_dir, "start", "eu-west-1/2").returncode == 0
            wait_until(lambda: node_row(driver, "2").get_attribute("data-health") == "ok", 90, "node 2 back")
            # ------------------------------------------------ a failover from the page
            show(driver, "dr")
            wait_until(lambda: [b for b in driver.find_elements(By.CSS_SELECTOR, '[data-act="failover:eu-west"]')
                                if b.is_enabled()], 60, "an enabled failover button")
            wait_until(lambda: driver.find_element(By.CSS_SELECTOR, "[data-pair]").get_attribute("data-ready") == "true",
                       120, "the pair ready to fail over")
            click(driver, By.CSS_SELECTOR, '[data-act="failover:eu-west"]', "the failover button")
            plan = wait_until(lambda: driver.find_element(By.ID, "plan-text").text, 60, "the plan")
            assert "planned failover of eu-west" in plan and "steps:" in plan, plan
            start = driver.find_element(By.ID, "start-action")
            assert not start.is_enabled()                   # nothing starts before the confirmation
            driver.find_element(By.ID, "confirm").send_keys("eu-west")
            assert start.is_enabled()
            screenshot(driver, "failover-plan")
            start.click()
            ended = wait_until(lambda: ended_state(driver), 180, "the failover's end")
            lines = driver.find_element(By.ID, "action-lines").text
            assert ended == "done", lines
            assert "failover #1 done" in lines and "us-east is active" in lines, lines
            screenshot(driver, "failover-done")
            wait_until(lambda: driver.find_element(By.CSS_SELECTOR, "[data-pair]").get_attribute("data-active-region")
                       == "us-east", 60, "us-east active on the page")
            # ------------------------------------------------ a drill from the page, its report in the page
            click(driver, By.CSS_SELECTOR, '[data-act="drill:us-east"]', "the drill button")
            wait_until(lambda: "dr drill us-east" in driver.find_element(By.ID, "plan-text").text, 30, "the drill")
            driver.find_element(By.ID, "confirm").send_keys("us-east")
            driver.find_element(By.ID, "start-action").click()
            wait_until(lambda: driver.find_element(By.ID, "action-title").text.startswith("drill"), 30, "the drill")
            ended = wait_until(lambda: ended_state(driver), 240, "the drill's end")
            assert ended == "done", \
                driver.find_element(By.ID, "action-lines").text
            show(driver, "drills")
            wait_until(lambda: driver.find_elements(By.CSS_SELECTOR, "[data-drill]"), 30, "the drill's row")
            click(driver, By.CSS_SELECTOR, "[data-drill]", "the drill's link")
            report = wait_until(lambda: driver.find_element(By.ID, "drill-markdown").text, 30, "the drill's report")
            assert "DR drill of us-east" in report and "PASSED" in report, report
            screenshot(driver, "drill-report")
            assert console_errors(driver) == []
            # ------------------------------------------------ a user without rights
            # Logging out stops the page asking for anything more of the session: a request still
            # in flight when it ended would be answered 401 and show as an error below.
            admin_cookie = "seaway_console=" + driver.get_cookie("seaway_console")["value"]
            assert api(port, "GET", "/api/v1/console/session", admin_cookie)[1]["user"] == "admin"
            click(driver, By.ID, "logout", "the log-out button")
            wait_until(lambda: driver.find_element(By.ID, "login").is_displayed(), 20, "the login form")
            wait_until(lambda: api(port, "GET", "/api/v1/console/session", admin_cookie)[1].get("login_required"), 10,
                       "the session ended on the server")
            time.sleep(3)                                   # longer than a refresh: nothing more asks
            assert console_errors(driver) == []
            login(driver, url, VIEWER, VIEWER_PASSWORD)
            assert "read only" in driver.find_element(By.ID, "whoami").text
            show(driver, "dr")
            wait_until(lambda: driver.find_elements(By.ID, "no-rights"), 30, "the no-rights note")
            # The buttons are drawn once the pair has an active region again (the drill just
            # moved its canary over and back; dr serve polls every 5 s).
            wait_until(lambda: driver.find_elements(By.CSS_SELECTOR, "[data-act]"), 30, "the DR buttons")
            enabled = read(driver, lambda: [b.is_enabled() for b in driver.find_elements(By.CSS_SELECTOR, "[data-act]")],
                           "the DR buttons")
            assert enabled and not any(enabled)
            screenshot(driver, "read-only")
            cookie = "seaway_console=" + driver.get_cookie("seaway_console")["value"]
            status, body = api(port, "POST", "/api/v1/console/actions", cookie,
                               {"action": "failback", "region": "eu-west", "confirm": "eu-west"})
            assert status == 403 and "User:viewer may not start" in body["error"], body
            assert console_errors(driver) == []
        finally:
            driver.quit()
        audit = [json.loads(line) for line in (platform.state_dir / "dr" / "console-audit.log").read_text().splitlines()]
        outcomes = [(a["user"], a["what"], a["outcome"]) for a in audit]
        assert ("admin", "failover eu-west", "done") in outcomes
        assert ("viewer", "failback eu-west", "forbidden") in outcomes
        print(f"console: first page in {page_load_s:.2f}s; node red {red_after_s:.1f}s after kill -9")
