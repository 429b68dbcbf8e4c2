"""`dr failover` between two Seaway nodes joined by a DR pair (identity links both ways, run by
`mirror run`), with real clients: a planned failover moves every record and the consumer
group's position exactly, the link turns round, and failing back is the same command the
other way. The commands are run as a person runs them (`dr --config dr.yaml ...`)."""
from __future__ import annotations

import json
import os
from contextlib import contextmanager
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
import yaml
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from core.protocol.dr import REPLICA_OF
from tests.support.mirror import dr_pair
from tests.support.node import REPO, SeawayNode

pytestmark = pytest.mark.integration

PARTITIONS = 3


def dr(config: Path, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "dr.cli", "--config", str(config), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


@pytest.fixture
def pair(tmp_path):
    with dr_pair(tmp_path) as (eu, us, config):
        yield eu, us, config


def write(bootstrap: str, values: list[str]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5})
    failed = []
    for i, v in enumerate(values):
        p.produce("orders", v.encode(), partition=i % PARTITIONS,
                  on_delivery=lambda err, msg: failed.append(err) if err else None)
    assert p.flush(30) == 0
    if failed:
        raise KafkaException(failed[0])


def role(bootstrap: str) -> str:
    resource = ConfigResource("topic", "orders")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.describe_configs([resource])[resource].result(10)[REPLICA_OF].value or ""


def total(bootstrap: str) -> int:
    """Records in orders (every partition); -1 until the topic is there."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "ends"})
    try:
        partitions = c.list_topics("orders", timeout=10).topics["orders"].partitions
        return sum(c.get_watermark_offsets(TopicPartition("orders", p), timeout=10)[1] for p in partitions)
    except KafkaException:
        return -1
    finally:
        c.close()


def wait_for(what, predicate, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def consume(bootstrap: str, group: str, n: int, timeout: float = 30) -> list[str]:
    """n records as member of `group`, committed (synchronously), then leave the group."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe(["orders"])
    got: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < n and time.monotonic() < deadline:
            for msg in c.consume(n - len(got), timeout=0.5):
                if not msg.error():
                    got.append(msg.value().decode())
        if got:
            c.commit(asynchronous=False)
    finally:
        c.close()
    return got


def test_a_planned_failover_and_back_moves_every_record_and_the_group_exactly(pair):
    eu, us, config = pair
    admin = AdminClient({"bootstrap.servers": eu.bootstrap})
    admin.create_topics([NewTopic("orders", PARTITIONS, 1)])["orders"].result(10)
    write(eu.bootstrap, [f"a{i}" for i in range(300)])
    wait_for("us-1 has every record", lambda: total(us.bootstrap) == 300)

    status = json.loads(dr(config, "status", "-o", "json").stdout)
    [p] = status["pairs"]
    assert (p["active_region"], p["ready"], status["ready"]) == ("eu-west", True, True)

    plan = dr(config, "plan", "failover", "eu-west").stdout
    assert "planned failover of eu-west (eu-1) to us-east (us-1)" in plan
    assert "expected: RPO 0 records" in plan
    assert (role(eu.bootstrap), role(us.bootstrap)) == ("", "eu-1")        # the plan changed nothing

    # A group reads part of the topic on eu-west and stops.
    first = consume(eu.bootstrap, "billing", 150)
    assert len(first) == 150

    out = dr(config, "failover", "eu-west").stdout
    for step in ("take-epoch", "fence", "drain", "record-syncs", "promote", "switch-clients", "sync-groups",
                 "reverse"):
        assert f"] {step}:" in out, out
    assert "us-east is active" in out
    assert (role(eu.bootstrap), role(us.bootstrap)) == ("us-1", "")
    properties = Path(yaml.safe_load(config.read_text())["state_dir"]) / "active" / "eu-1~us-1.properties"
    assert f"bootstrap.servers={us.bootstrap}" in properties.read_text()
    # kcat follows it as the README shows (here without the platform's login).
    listed = subprocess.run(["bash", "-c", f'kcat -X "$(grep ^bootstrap.servers {properties})" -L'],
                            capture_output=True, text=True, timeout=30)
    assert listed.returncode == 0 and f"broker 1 at {us.bootstrap}" in listed.stdout, listed.stdout + listed.stderr

    # The old side refuses writes; the new one takes them, and they flow back.
    with pytest.raises(KafkaException, match="Invalid topic"):
        write(eu.bootstrap, ["late"])
    write(us.bootstrap, [f"b{i}" for i in range(90)])
    wait_for("eu-1 has the records written on us-1", lambda: total(eu.bootstrap) == 390)

    # The group resumes on us-east exactly where it stopped: nothing skipped, nothing re-read.
    rest = consume(us.bootstrap, "billing", 240)
    assert sorted(first + rest) == sorted([f"a{i}" for i in range(300)] + [f"b{i}" for i in range(90)])

    history = dr(config, "history").stdout
    assert "#1" in history and "planned eu-1 -> us-1 (epoch 1): done" in history

    # Failing back is the same command the other way.
    dr(config, "failover", "us-east")
    assert (role(eu.bootstrap), role(us.bootstrap)) == ("", "eu-1")
    write(eu.bootstrap, [f"c{i}" for i in range(30)])
    wait_for("us-1 has the records written after failing back", lambda: total(us.bootstrap) == 420)
    assert total(eu.bootstrap) == 420


def test_bad_requests_get_one_line_and_change_nothing(pair):
    eu, us, config = pair
    admin = AdminClient({"bootstrap.servers": eu.bootstrap})
    admin.create_topics([NewTopic("orders", 1, 1)])["orders"].result(10)
    write(eu.bootstrap, ["x"])
    wait_for("us-1 has the record", lambda: total(us.bootstrap) == 1)
    for args, status, words in [
        (["failover", "mars"], 2, "dr failover: REGION: no region named 'mars' (regions: eu-west, us-east)"),
        (["failover", "eu-west", "--to", "eu-west"], 2, "dr failover: --to: no DR pair joins eu-west and eu-west"),
        (["failover", "us-east"], 2, "dr failover: REGION: eu-west is already the active region"),
        (["plan", "failover", "ap-south"], 2, "dr plan: REGION: no region named 'ap-south'"),
    ]:
        proc = dr(config, *args, check=False)
        assert proc.returncode == status, proc.stdout + proc.stderr
        assert proc.stderr.startswith(words) and proc.stderr.count("\n") == 1, proc.stderr
        assert "Traceback" not in proc.stderr
    assert (role(eu.bootstrap), role(us.bootstrap)) == ("", "eu-1")

    # A failover while another runs from the same state directory: refused at once.
    hold = config.parent / "hold"
    first = subprocess.Popen([sys.executable, "-m", "dr.cli", "--config", str(config), "failover", "eu-west"],
                             cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "SEAWAY_DR_HOLD_FILE": str(hold)})
    try:
        state = Path(yaml.safe_load(config.read_text())["state_dir"])
        wait_for("the first failover began", lambda: _failovers(state) > 0, timeout=30)
        second = dr(config, "failover", "eu-west", check=False)
        assert second.returncode == 1
        assert second.stderr.startswith("dr failover: a failover is in progress: another dr holds "), second.stderr
    finally:
        hold.touch()
        assert first.wait(60) == 0, first.communicate()
    assert (role(eu.bootstrap), role(us.bootstrap)) == ("us-1", "")

    # A history database that cannot be read: one line, nothing done.
    (state / "history.db").write_bytes(b"this is not SQLite" * 100)
    for args in (["status"], ["failover", "us-east"], ["history"]):
        broken = dr(config, *args, check=False)
        assert broken.returncode == 1, broken.stdout + broken.stderr
        assert f"the DR history {state / 'history.db'} cannot be used" in broken.stderr
        assert broken.stderr.count("\n") == 1 and "Traceback" not in broken.stderr
    assert (role(eu.bootstrap), role(us.bootstrap)) == ("us-1", "")


@contextmanager
def mirror_paused(tmp_path: Path):
    """The fixture's mirror stopped (SIGSTOP) for the block: the link copies nothing."""
    subprocess.run(["pkill", "-STOP", "-f", f"mirror.cli run --config {tmp_path}"], check=True)
    try:
        yield
    finally:
        subprocess.run(["pkill", "-CONT", "-f", f"mirror.cli run --config {tmp_path}"], check=False)


def _failovers(state: Path) -> int:
    """Rows in the controller's history (0 before it has one)."""
    import sqlite3
    try:
        with sqlite3.connect(state / "history.db") as db:
            return db.execute("select count(*) from failovers").fetchone()[0]
    except sqlite3.Error:
        return 0


def _start(eu, us, config):
    admin = AdminClient({"bootstrap.servers": eu.bootstrap})
    admin.create_topics([NewTopic("orders", PARTITIONS, 1)])["orders"].result(10)
    write(eu.bootstrap, [f"a{i}" for i in range(60)])
    wait_for("us-1 has every record", lambda: total(us.bootstrap) == 60)
    wait_for("dr status sees the link caught up", lambda: lag(config) == 0)


def lag(config: Path) -> int:
    """The records `dr status` says the active link has yet to copy."""
    return json.loads(dr(config, "status", "-o", "json", check=False).stdout)["pairs"][0]["rpo_at_risk"]["records"]


def test_two_controllers_racing_to_fail_over_exactly_one_wins(pair, tmp_path):
    eu, us, config = pair
    _start(eu, us, config)
    rival = tmp_path / "rival.yaml"      # another controller: its own state directory and history
    rival.write_text(config.read_text().replace("dr-state", "rival-state"))
    go = tmp_path / "go"        # both plan, then both wait for this file before their first step
    racers = [subprocess.Popen([sys.executable, "-m", "dr.cli", "--config", str(c), "failover", "eu-west"],
                               cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "SEAWAY_DR_HOLD_FILE": str(go)})
              for c in (config, rival)]
    for state in ("dr-state", "rival-state"):     # each has begun its failover in its history
        wait_for(f"{state} planned", lambda s=state: (tmp_path / s / "history.db").exists())
    time.sleep(1)
    go.touch()
    results = [(r.wait(120), *r.communicate()) for r in racers]
    assert sorted(code for code, _, _ in results) == [0, 1], results
    [(_, _, lost)] = [r for r in results if r[0] == 1]
    assert "take-epoch: another DR controller holds epoch 1 on eu-1" in lost, lost
    assert "nothing was changed" in lost
    assert lost.count("\n") == 1, lost
    assert (role(eu.bootstrap), role(us.bootstrap)) == ("us-1", "")
    # The loser, run again, sees the winner's decision: nothing to fail over.
    again = dr(rival, "failover", "eu-west", check=False)
    assert again.returncode == 2 and "us-east is already the active region" in again.stderr


STEPS = ["take-epoch", "fence", "drain", "record-syncs", "promote", "switch-clients", "sync-groups", "reverse"]


def test_a_controller_killed_at_any_step_finishes_when_run_again(pair):
    """For each step in turn: the controller dies right after the step's changes (SIGKILL,
    before its history records the step), runs again, finishes, and the link back copies
    exactly what is written next; then the pair fails back for the next step's turn."""
    eu, us, config = pair
    _start(eu, us, config)
    written = 60
    for number, step in enumerate(STEPS, 1):
        crashed = subprocess.run([sys.executable, "-m", "dr.cli", "--config", str(config), "failover", "eu-west"],
                                 cwd=REPO, capture_output=True, text=True, timeout=120,
                                 env={**os.environ, "SEAWAY_DR_CRASH_AT": step})
        assert crashed.returncode == -9, (step, crashed.stdout + crashed.stderr)
        resumed = dr(config, "failover", "eu-west").stdout
        assert f"resuming failover #{2 * number - 1}" in resumed, (step, resumed)
        assert (role(eu.bootstrap), role(us.bootstrap)) == ("us-1", ""), step
        write(us.bootstrap, [f"{step}-{i}" for i in range(6)])
        written += 6
        wait_for(f"the link back runs after a crash at {step}", lambda: total(eu.bootstrap) == written)
        assert total(us.bootstrap) == written, step
        dr(config, "failover", "us-east")               # back, for the next step's turn
        wait_for("dr status sees the link caught up", lambda: lag(config) == 0)
    history = dr(config, "history").stdout
    assert history.count(": done") == 2 * len(STEPS), history


def test_a_failover_that_cannot_drain_is_rolled_back(pair, tmp_path):
    eu, us, config = pair
    _start(eu, us, config)
    # The link stops: nothing more reaches us-1, so a drain cannot finish.
    with mirror_paused(tmp_path):
        write(eu.bootstrap, [f"late{i}" for i in range(9)])
        assert lag(config) == 9          # what dr status puts at risk
        quick = tmp_path / "quick.yaml"
        quick.write_text(config.read_text().replace("drain_timeout_s: 30", "drain_timeout_s: 2"))
        failed = dr(quick, "failover", "eu-west", check=False)
        assert failed.returncode == 1
        assert "drain: the link to us-1 did not catch up within 2s: 9 records behind" in failed.stderr, failed.stderr
        assert "rolled back" in failed.stderr
        assert (role(eu.bootstrap), role(us.bootstrap)) == ("", "eu-1")
        write(eu.bootstrap, ["after"])            # eu-west takes writes again
    wait_for("the link catches up", lambda: total(us.bootstrap) == 70)
    assert "rolled-back" in dr(config, "history").stdout


def log_bytes(node: SeawayNode, topic: str = "orders") -> int:
    """The bytes of `topic`'s log segments on `node`'s disk: what its batches take."""
    return sum(f.stat().st_size for f in node.data_dir.glob(f"{topic}-*/*.log"))


def status_of(config: Path) -> tuple[int, dict, str]:
    """`dr status`: its exit status, the pair as JSON, and the table."""
    as_json = dr(config, "status", "-o", "json", check=False)
    table = dr(config, "status", check=False)
    return as_json.returncode, json.loads(as_json.stdout)["pairs"][0], table.stdout


def test_dr_status_counts_the_backlogs_bytes_and_knows_which_groups_are_synced(pair, tmp_path):
    eu, us, config = pair
    _start(eu, us, config)
    code, st, _ = status_of(config)
    assert code == 0 and st["checkpoints"] == {"age_seconds": None, "groups": [], "errors": {}}, st["checkpoints"]
    assert (st["rpo_at_risk"]["bytes"], st["rpo_at_risk"]["bytes_estimated"]) == (0, False)
    assert len(consume(eu.bootstrap, "billing", 30)) == 30

    def billing_synced() -> bool:
        code, st, _ = status_of(config)
        return code == 0 and [g["group"] for g in st["checkpoints"]["groups"] if g["synced"]] == ["billing"]
    wait_for("billing's checkpoint reaches us-1", billing_synced, 30)
    with mirror_paused(tmp_path):
        # A group that commits while the link (and so its checkpoints) stand still has none.
        assert len(consume(eu.bootstrap, "audit", 20)) == 20
        code, st, table = status_of(config)
        assert code == 1, table
        assert {g["group"]: g["synced"] for g in st["checkpoints"]["groups"]} == {"audit": False, "billing": True}
        [audit] = [g for g in st["checkpoints"]["groups"] if g["group"] == "audit"]
        assert audit["missing"] and audit["age_seconds"] is None
        assert "WARN  groups: 1 of 2 groups not synced to us-1" in table and "audit has no checkpoint on us-1" in table
        assert "checkpoints: newest " in table and "1 of 2 groups synced" in table, table
        assert 0 <= st["checkpoints"]["age_seconds"] < 60
        # The backlog's bytes are what its batches took on eu-1's disk, exactly.
        before = log_bytes(eu)
        write(eu.bootstrap, [f"late{i}-" + "x" * 200 for i in range(9)])
        grown = log_bytes(eu) - before
        code, st, table = status_of(config)
        assert st["rpo_at_risk"]["records"] == 9 and grown > 9 * 200
        assert (st["rpo_at_risk"]["bytes"], st["rpo_at_risk"]["bytes_estimated"]) == (grown, False), st["lag"]
        assert sum(lag["bytes"] for lag in st["lag"]) == grown
        assert f"RPO at risk: 9 records, {grown} bytes, " in table, table
    wait_for("the link catches up and audit's checkpoint is written", lambda: status_of(config)[0] == 0, 60)
    code, st, table = status_of(config)
    assert {g["group"]: g["synced"] for g in st["checkpoints"]["groups"]} == {"audit": True, "billing": True}
    assert "ok    groups: 2 groups synced" in table, table
    assert st["rpo_at_risk"]["bytes"] == 0


def test_an_unplanned_failover_needs_force_and_expects_the_lag_it_last_saw(pair, tmp_path):
    eu, us, config = pair
    _start(eu, us, config)
    with mirror_paused(tmp_path):
        write(eu.bootstrap, [f"unsent{i}" for i in range(9)])
        assert lag(config) == 9               # seen, and kept in the history
        eu.kill()                             # the whole region is gone (kill -9)
        refused = dr(config, "--timeout", "2", "failover", "eu-west", check=False)
        assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
        assert "not started, nothing changed: force: eu-1 does not answer" in refused.stderr
        assert "add --force" in refused.stderr
        assert role(us.bootstrap) == "eu-1"
        plan = dr(config, "--timeout", "2", "plan", "failover", "eu-west", "--force").stdout
        assert "unplanned failover of eu-west (eu-1) to us-east (us-1)" in plan
        assert "expected: RPO 9 records" in plan
        out = dr(config, "--timeout", "2", "failover", "eu-west", "--force").stdout
        assert "us-east is active" in out and "RPO 9 records" in out and "expected" in out
        assert role(us.bootstrap) == ""
        write(us.bootstrap, ["after"])        # applications carry on in us-east
        status = json.loads(dr(config, "--timeout", "2", "status", "-o", "json", check=False).stdout)["pairs"][0]
        assert status["active_region"] == "us-east"
        assert not status["clusters"]["eu-1"]["reachable"]


@pytest.mark.parametrize("step, then", [
    ("take-epoch", "no role was changed"),
    ("reverse", "run dr failover again to go on from this step"),
])
def test_a_step_that_fails_says_what_state_it_left(pair, step, then):
    eu, us, config = pair
    _start(eu, us, config)
    failed = subprocess.run([sys.executable, "-m", "dr.cli", "--config", str(config), "failover", "eu-west"],
                            cwd=REPO, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "SEAWAY_DR_FAIL_AT": step})
    assert failed.returncode == 1 and failed.stderr.count("\n") == 1, failed.stderr
    assert f"dr failover: {step}: failed on purpose" in failed.stderr and then in failed.stderr
    again = dr(config, "failover", "eu-west").stdout
    # Nothing changed: a new failover (the epoch taken before is spent). Half done: finished.
    assert ("resuming failover #1" in again) is (step == "reverse"), again
    assert (role(eu.bootstrap), role(us.bootstrap)) == ("us-1", "")
    history = dr(config, "history").stdout
    if step == "take-epoch":     # failed before taking it: the next failover asks for it again
        assert "#1" in history and "(epoch 1): failed" in history and "(epoch 1): done" in history, history
    else:                        # finished as the same failover
        assert "(epoch 1): done" in history and "#2" not in history, history


def records(bootstrap: str, topic: str = "orders") -> list[tuple[int, int, str, dict]]:
    """Every record of `topic`: (partition, offset, value, headers)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False})
    try:
        partitions = c.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
        c.assign([TopicPartition(topic, p, 0) for p in partitions])
        got: list[tuple[int, int, str, dict]] = []
        deadline = time.monotonic() + 30
        while len(got) < sum(ends.values()) and time.monotonic() < deadline:
            for msg in c.consume(100, timeout=0.5):
                if not msg.error():
                    got.append((msg.partition(), msg.offset(), msg.value().decode(), dict(msg.headers() or [])))
        return sorted(got)
    finally:
        c.close()


@pytest.mark.parametrize("republish", [False, True], ids=["kept", "republished"])
def test_failback_after_an_unplanned_failover_keeps_every_stranded_record(pair, tmp_path, republish):
    """eu-west dies with 9 acknowledged records the link never copied. After the unplanned
    failover and failback: the 9 are counted exactly (the failover's RPO), none vanished (kept
    in orders.stranded, or re-published in us-east with their origin), eu-west's log was never
    truncated, and eu-west is active again with what us-east took meanwhile."""
    eu, us, config = pair
    _start(eu, us, config)
    flags = ["--republish-stranded"] if republish else []
    with mirror_paused(tmp_path):
        write(eu.bootstrap, [f"unsent{i}" for i in range(9)])
        assert lag(config) == 9
        before = records(eu.bootstrap)
        eu.kill()
        dr(config, "--timeout", "2", "failover", "eu-west", "--force")
    write(us.bootstrap, [f"after{i}" for i in range(6)])
    eu.start()
    # Back, and writable on both sides: a failover is refused and says to fail back.
    refused = dr(config, "failover", "eu-west", check=False)
    assert refused.returncode == 1 and "dr failback REGION" in refused.stderr, refused.stderr
    plan = dr(config, "plan", "failback", "eu-west", *flags).stdout
    assert "failback of eu-west (eu-1), us-east (us-1) active meanwhile" in plan, plan
    assert ("republish-stranded" in plan) is republish and ("orders.stranded on eu-1" in plan) is not republish
    out = dr(config, "failback", "eu-west", *flags).stdout
    assert "9 stranded records on eu-1 (the exact RPO of the unplanned failover)" in out, out
    assert "eu-west is active" in out, out
    history = json.loads(dr(config, "history", "-o", "json").stdout)["failovers"]
    [unplanned] = [r for r in history if r["kind"] == "unplanned"]
    assert (unplanned["rpo_records"], unplanned["rpo_exact"]) == (9, 1)

    after = records(eu.bootstrap)
    assert all(r in after for r in before)          # never truncated: each record at its offset
    mirrored_back = sorted(v for _, _, v, _ in after if v.startswith("after"))
    unsent = [f"unsent{i}" for i in range(9)]
    origins = {h["seaway.stranded.origin"].decode() for _, _, v, h in records(
        us.bootstrap if republish else eu.bootstrap, "orders" if republish else "orders.stranded")
        if "seaway.stranded.origin" in h}
    stranded_at = {f"eu-1:orders:{p}:{o}" for p, o, v, _ in before if v.startswith("unsent")}
    assert origins == stranded_at, (origins, stranded_at)
    on_us = sorted(v for _, _, v, _ in records(us.bootstrap))
    if republish:
        assert sorted(v for v in on_us if v.startswith("unsent")) == unsent
        # ... and the link back brought the re-published copies to eu-west too
        assert sorted(v for _, _, v, h in after if "seaway.stranded.origin" in h) == unsent
    else:
        assert not [v for v in on_us if v.startswith("unsent")]
        assert sorted(v for _, _, v, _ in records(eu.bootstrap, "orders.stranded")) == unsent
    assert mirrored_back == [f"after{i}" for i in range(6)]
    assert (role(eu.bootstrap), role(us.bootstrap)) == ("", "eu-1")
    write(eu.bootstrap, ["home"])
    wait_for("the link runs forward again", lambda: "home" in [v for _, _, v, _ in records(us.bootstrap)])
    again = dr(config, "failback", "eu-west", check=False)
    assert again.returncode == 2 and "eu-west is already the active region" in again.stderr, again.stderr


def test_a_drill_moves_only_the_canary_over_and_back_under_traffic_and_reports_it(pair):
    eu, us, config = pair
    _start(eu, us, config)
    out = dr(config, "drill", "eu-west", "--rate", "100", "--hold", "1", timeout=240).stdout
    assert "drill PASSED" in out and "0 lost, 0 duplicated, 0 partitions reordered, 0 skipped, 0 re-read" in out, out
    state = config.parent / "dr-state"
    report = json.loads((state / "drills" / "drill-1.json").read_text())
    assert report["passed"] and report["acknowledged"] > 100 and report["in_log"] == report["acknowledged"]
    assert [(p["name"], p["source"], p["target"], p["rpo_records"]) for p in report["phases"]] == [
        ("failover", "eu-1", "us-1", 0), ("failback", "us-1", "eu-1", 0)]
    for phase in report["phases"]:      # the canary clients moved and carried on, within bounds
        assert 0 < phase["rto_writes_s"] < 30 and 0 < phase["rto_reads_s"] < 60, phase
    assert (state / "drills" / "drill-1.md").read_text().startswith("# DR drill of eu-west (eu-1~us-1)")
    # Applications' topics and decision were never touched.
    assert (role(eu.bootstrap), role(us.bootstrap)) == ("", "eu-1")
    assert not (state / "active" / "eu-1~us-1.json").exists()
    history = dr(config, "history").stdout
    assert "drill 1" in history and "(canary): passed" in history and history.count("[drill 1]") == 2, history


def _get(url: str) -> tuple[int, bytes]:
    import urllib.error
    import urllib.request
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_dr_serve_exports_the_pair_serves_the_api_and_runs_the_drill_schedule(pair, tmp_path):
    eu, us, config = pair
    _start(eu, us, config)
    served = tmp_path / "served.yaml"
    served.write_text(yaml.safe_dump({**yaml.safe_load(config.read_text()), "drill_schedule": "*/15 * * * * *"}))
    daemon = subprocess.Popen([sys.executable, "-m", "dr.cli", "--config", str(served), "serve", "--listen",
                               "127.0.0.1:0", "--poll-interval", "0.5"], cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        first = daemon.stdout.readline()
        assert first.startswith("dr serve: http://127.0.0.1:"), first + daemon.stderr.read()
        base = first.split()[2].rstrip("/")
        assert "drills: */15 * * * * *, next at" in daemon.stdout.readline()
        wait_for("/health says ok", lambda: _get(base + "/health")[0] == 200, 30)
        status = json.loads(_get(base + "/api/v1/status")[1])
        assert status["pairs"][0]["active_region"] == "eu-west" and status["ready"], status

        def metric(line: str) -> bool:
            return line in _get(base + "/metrics")[1].decode()
        assert metric('seaway_dr_active_region{pair="eu-1~us-1",region="eu-west"} 1.0')
        assert metric('seaway_dr_ready{pair="eu-1~us-1"} 1.0')
        assert metric('seaway_dr_groups_unsynced{pair="eu-1~us-1"} 0.0')
        assert "seaway_dr_checkpoint_age_seconds{" not in _get(base + "/metrics")[1].decode()    # none yet
        with mirror_paused(tmp_path):       # the RPO at risk follows the link's lag
            before = log_bytes(eu)
            write(eu.bootstrap, [f"late{i}" for i in range(5)])
            grown = log_bytes(eu) - before
            wait_for("the RPO at risk is exported", lambda: metric(
                'seaway_dr_rpo_at_risk_records{pair="eu-1~us-1",topic="orders"} 5.0'), 30)
            wait_for("in bytes too", lambda: metric(
                f'seaway_dr_rpo_at_risk_bytes{{pair="eu-1~us-1",topic="orders"}} {float(grown)}'), 30)
            consume(eu.bootstrap, "audit", 3)       # committed while the checkpoints stand still
            wait_for("the group without a checkpoint is exported", lambda: metric(
                'seaway_dr_groups_unsynced{pair="eu-1~us-1"} 1.0'), 30)
        wait_for("and falls back to 0", lambda: metric(
            'seaway_dr_rpo_at_risk_records{pair="eu-1~us-1",topic="orders"} 0.0'), 30)
        wait_for("the group's checkpoint is written", lambda: metric('seaway_dr_groups_unsynced{pair="eu-1~us-1"} 0.0'))
        assert "seaway_dr_checkpoint_age_seconds{pair=\"eu-1~us-1\"}" in _get(base + "/metrics")[1].decode()

        def drilled() -> bool:
            drills = json.loads(_get(base + "/api/v1/history")[1])["drills"]
            return any(d["state"] == "passed" for d in drills)
        wait_for("a scheduled drill passes", drilled, 150)
        report = json.loads(_get(base + "/api/v1/drills/1")[1])
        assert report["passed"] and [p["name"] for p in report["phases"]] == ["failover", "failback"]
        assert _get(base + "/api/v1/drills/1.md")[1].decode().startswith("# DR drill of eu-west")
        canary = json.loads(_get(base + "/api/v1/decisions/eu-1~us-1.canary")[1])
        assert canary["active_region"] == "eu-west" and canary["phase"] == "serving"
        missing = _get(base + "/api/v1/decisions/nope")
        assert missing[0] == 404 and b"no decision for 'nope' yet" in missing[1]
        wait_for("the drill's figures are exported", lambda: metric('seaway_dr_last_drill_passed{pair="eu-1~us-1"} 1.0'))
        assert "(canary): passed" in dr(served, "history").stdout
    finally:
        daemon.terminate()
        daemon.wait(30)


def test_dr_serve_and_drill_refuse_bad_input_in_one_line(tmp_path):
    config = tmp_path / "dr.yaml"        # checked before any cluster is asked
    config.write_text(yaml.safe_dump({
        "state_dir": str(tmp_path / "dr-state"), "regions": ["eu-west", "us-east"],
        "pairs": [{"first": {"cluster": "eu-1", "region": "eu-west", "bootstrap": "127.0.0.1:1"},
                   "second": {"cluster": "us-1", "region": "us-east", "bootstrap": "127.0.0.1:2"}}]}))
    for args, message in [
        (["serve", "--listen", "nowhere"], "dr serve: --listen: 'nowhere' is not HOST:PORT"),
        (["serve", "--poll-interval", "0"], "dr serve: --poll-interval: 0 is not between 0.1 and 3600 seconds"),
        (["drill", "eu-west", "--rate", "-1"], "dr drill: --rate: -1 is not between 0 and 100000"),
        (["drill", "eu-west", "--full"], "dr drill: --full: only on a local platform (dr --platform)"),
    ]:
        refused = dr(config, *args, check=False)
        assert refused.returncode == 2 and refused.stderr.startswith(message), (args, refused.stderr)
        assert refused.stderr.count("\n") == 1
    assert not (tmp_path / "dr-state").exists()         # nothing changed, not even a history made
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**yaml.safe_load(config.read_text()), "drill_schedule": "at noon"}))
    refused = dr(bad, "serve", check=False)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert f"{bad}: drill_schedule: 'at noon' has 2 fields; cron has 5" in refused.stderr, refused.stderr


async def _write_with_new_producers(bootstrap: str, tag: str, producers: int, each: int) -> list[int]:
    """`producers` idempotent producers, one after another, each with a producer id of its own
    from the cluster's allocator, each writing `each` records (sequence numbers 0..each-1)."""
    from core.client import KafkaClient
    from core.client import Producer as OurProducer
    pids = []
    for i in range(producers):
        async with KafkaClient(bootstrap) as client:
            async with OurProducer(client, acks=-1, enable_idempotence=True) as producer:
                sent = [await producer.send("orders", value=f"{tag}-{i}-{j}".encode(), partition=i % PARTITIONS)
                        for j in range(each)]
                for delivery in sent:
                    await delivery
                pids.append(producer.producer_id_and_epoch[0])
    return pids


def test_producer_ids_handed_out_after_a_failover_never_meet_mirrored_idempotence_state(pair):
    """The DR links keep applications' producer ids on what they copy (so that a producer the
    gateway moves continues its sequence). Were both clusters' allocators to start from the
    same numbers, producers on the promoted side would get ids that producers on the old side
    had, with the same sequence numbers, and the promoted side would take the new records
    for duplicates of mirrored ones and drop them (a shipping product lost data this way).
    Each cluster allocates from a range of its own: the ids never meet, nothing is dropped."""
    eu, us, config = pair
    _start(eu, us, config)
    eu_pids = anyio.run(_write_with_new_producers, eu.bootstrap, "eu", 5, 20)
    wait_for("us-1 has eu-west's records", lambda: total(us.bootstrap) == 160)
    dr(config, "failover", "eu-west")
    us_pids = anyio.run(_write_with_new_producers, us.bootstrap, "us", 8, 20)
    assert not set(eu_pids) & set(us_pids), (eu_pids, us_pids)  # each side's ids are its own
    wait_for("eu-1 has us-east's records", lambda: total(eu.bootstrap) == 320)
    dr(config, "failover", "us-east")
    anyio.run(_write_with_new_producers, eu.bootstrap, "back", 8, 20)   # the returning side too
    wait_for("us-1 has every record", lambda: total(us.bootstrap) == 480)
    wanted = [f"a{i}" for i in range(60)] + [f"{tag}-{i}-{j}" for tag, n in (("eu", 5), ("us", 8), ("back", 8))
                                             for i in range(n) for j in range(20)]
    for bootstrap in (eu.bootstrap, us.bootstrap):
        values = sorted(v for _, _, v, _ in records(bootstrap))
        assert values == sorted(wanted), f"{len(values)} records, {len(set(wanted) - set(values))} dropped"
