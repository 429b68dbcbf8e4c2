"""The alert rules shipped in compose/ are valid (`promtool check rules`) and each behaves as its
unit tests in tests/compose/alerts_test.yml say (`promtool test rules`): it fires on the
condition it names, after its `for`, and stays quiet on the healthy neighbour."""
from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", *args], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_the_rules_are_valid():
    done = promtool("check", "rules", "compose/alerts.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 15 rules found" in done.stdout + done.stderr


def test_every_rule_passes_its_unit_tests():
    done = promtool("test", "rules", "tests/compose/alerts_test.yml")
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_has_a_unit_test():
    import yaml
    rules = yaml.safe_load((REPO / "compose" / "alerts.yml").read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    tests = yaml.safe_load((REPO / "tests" / "compose" / "alerts_test.yml").read_text())
    tested = {t["alertname"] for case in tests["tests"] for t in case["alert_rule_test"]}
    assert alerts == tested
