"""A real browser for the console's tests: Debian's Chromium, headless, driven by Selenium
through Debian's chromedriver (tests/install-deps.sh installs both). Screenshots go to
tests/artifacts/console/ (or $SEAWAY_ARTIFACTS), where a person can look at them after a run."""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from tests.support.node import REPO

ARTIFACTS = Path(os.environ.get("SEAWAY_ARTIFACTS") or REPO / "tests" / "artifacts") / "console"


def chromium_paths() -> tuple[str, str]:
    browser = shutil.which("chromium") or "/usr/bin/chromium"
    driver = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    return browser, driver


def open_browser(width: int = 1500, height: int = 1000):
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    browser, driver = chromium_paths()
    options = Options()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={width},{height}", "--lang=en-US"):
        options.add_argument(arg)
    options.binary_location = browser
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver), options=options)


def console_errors(driver) -> list[str]:
    """What the page logged as errors since the last call: script errors, failed loads."""
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def screenshot(driver, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path


def wait_until(predicate, timeout: float, what: str, interval: float = 0.25):
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 — an element replaced mid-read: look again
            last_error = exc
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}" +
                         (f" (last error: {last_error})" if last_error else ""))


def read(driver, probe, what: str, timeout: float = 10):
    """`probe()`'s value, read again if the page redrew what it looked at meanwhile (a stale
    element): pages that refresh replace their elements every few seconds."""
    return wait_until(lambda: (probe(),), timeout, what)[0]


def click(driver, by, value: str, what: str, timeout: float = 10) -> None:
    """Find and click in one go, again if the element was redrawn between the two."""
    wait_until(lambda: driver.find_element(by, value).click() or True, timeout, what)
