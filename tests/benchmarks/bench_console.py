"""What the console costs: page load times in a real browser, the CPU of `dr serve` with and
without a browser attached, and the memory of its hour of history, on the default platform.

    python tests/benchmarks/bench_console.py                 # about 6 minutes
    python tests/benchmarks/bench_console.py --window 30     # shorter CPU windows

The shipped two-region topology (secured, its ports freed) runs under `regions up`, idle apart
from the platform's own traffic (the mirror's heartbeats and checkpoints, the gateways, dr's
polls). dr serve's console scrapes the 6 nodes, the mirror and the 2 gateways every 5 s (no
Prometheus). Measured:

- page load: Chromium headless (Debian's), logged in, from navigation to the platform's
  clusters drawn, and to the cluster tab's charts drawn with data; median of 5;
- dr serve's CPU (user + system, /proc) over --window seconds: nobody watching, then a browser
  on the platform tab, then on the cluster tab (its 7 charts refreshed every 5 s);
- memory: the history's sample arrays (the console's own count: rings are allocated whole, so
  an hour costs what a minute does for the same series), the series kept, and dr serve's RSS.

The figures go in tests/benchmarks/README.md by hand.
"""
from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from selenium.webdriver.common.by import By  # noqa: E402

from regions.topology import DEFAULT_TOPOLOGY  # noqa: E402
from tests.support.browser import open_browser, screenshot, wait_until  # noqa: E402
from tests.support.procstat import cpu_seconds, rss_bytes  # noqa: E402
from tests.support.regions import Platform, without_fixed_ports  # noqa: E402



def cpu_share(pid: int, seconds: float) -> float:
    before, started = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(pid) - before) / (time.monotonic() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--window", type=float, default=60.0, help="seconds per CPU measurement (default 60)")
    parser.add_argument("--settle", type=float, default=60.0, help="seconds of history before measuring")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-console-") as tmp:
        topology = without_fixed_ports(DEFAULT_TOPOLOGY, Path(tmp) / "topology.yaml")
        with Platform(Path(tmp) / "platform", topology) as platform:
            pid = platform.status()["dr"]["pid"]
            url = next(line for line in platform.up_output.splitlines() if "console: http" in line) \
                .split("console: ")[1].split()[0]
            password = next(line.split("=", 1)[1] for line in Path(platform.admin_properties).read_text().splitlines()
                            if line.startswith("sasl.password="))
            time.sleep(args.settle)
            idle = cpu_share(pid, args.window)
            driver = open_browser()
            try:
                driver.get(url)
                wait_until(lambda: driver.find_element(By.ID, "login").is_displayed(), 20, "the login form")
                driver.find_element(By.NAME, "user").send_keys("admin")
                driver.find_element(By.NAME, "password").send_keys(password)
                driver.find_element(By.CSS_SELECTOR, "#login-form button").click()
                wait_until(lambda: driver.find_elements(By.CSS_SELECTOR, "[data-cluster][data-health]"), 30, "clusters")
                platform_loads, cluster_loads = [], []
                # Each load from a blank page: the HTML, scripts, styles, session and overview
                # asked again (a hash change alone would reload nothing).
                for _ in range(5):
                    driver.get("about:blank")
                    started = time.monotonic()
                    driver.get(url + "#platform")
                    wait_until(lambda: len(driver.find_elements(By.CSS_SELECTOR, "[data-cluster][data-health]")) == 2,
                               30, "clusters", interval=0.01)
                    platform_loads.append(time.monotonic() - started)
                for _ in range(5):
                    driver.get("about:blank")
                    started = time.monotonic()
                    driver.get(url + "#cluster")
                    wait_until(lambda: sum(int(b.get_attribute("data-points") or 0) > 0 for b in
                                           driver.find_elements(By.CSS_SELECTOR, "#cluster-charts .chart")) >= 5,
                               30, "charts", interval=0.01)
                    cluster_loads.append(time.monotonic() - started)
                driver.get(url + "#platform")
                time.sleep(5)
                watching = cpu_share(pid, args.window)
                driver.get(url + "#cluster")
                time.sleep(5)
                charting = cpu_share(pid, args.window)
                screenshot(driver, "bench-cluster")         # the charts after the bench's minutes
                cookie = "seaway_console=" + driver.get_cookie("seaway_console")["value"]
            finally:
                driver.quit()
            port = int(url.split(":")[2].split("/")[0])
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("GET", "/api/v1/console/overview", headers={"Cookie": cookie})
            console = json.loads(conn.getresponse().read())["console"]
            rss = rss_bytes(pid)
    print(f"page load, platform tab: median {statistics.median(platform_loads):.2f} s "
          f"(min {min(platform_loads):.2f}, max {max(platform_loads):.2f})")
    print(f"page load, cluster tab with charts: median {statistics.median(cluster_loads):.2f} s "
          f"(min {min(cluster_loads):.2f}, max {max(cluster_loads):.2f})")
    print(f"dr serve CPU: {100 * idle:.1f}% of a core with nobody watching, {100 * watching:.1f}% with a browser on "
          f"the platform tab, {100 * charting:.1f}% on the cluster tab ({args.window:g} s each)")
    print(f"history: {console['series']} series, {console['memory_bytes'] / 1e6:.2f} MB of samples for the hour; "
          f"dr serve RSS {rss / 1e6:.0f} MB; one refresh {1000 * (console['refresh_cpu_s'] or 0):.0f} ms of CPU")


if __name__ == "__main__":
    main()
