"""The KRaft controller quorum as real processes: election, failover under kill -9, catch-up
from the log and from a snapshot, a 5-voter quorum losing 2, a full restart.

Admin writes go to the active controller (CreateTopics, the request brokers forward), and a
write counts only when the controller answers it after the record committed. A broker-only
node is in every cluster so that topics have somewhere to be placed; it registers, heartbeats
and is unfenced like any broker.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from core.client.errors import KafkaError
from core.protocol.errors import ErrorCode
from tests.support.cluster import (KRaftCluster, ask_controller, create_topics_request, image_of,
                                   read_metadata_log)
from tests.support.node import NodeError


def create(cluster, *names, timeout: float = 10.0) -> dict[str, ErrorCode]:
    response = ask_controller(cluster, 19, create_topics_request(names), timeout=timeout)
    return {t.name: ErrorCode(t.error_code) for t in response.topics}


def create_until_ok(cluster, name: str, within: float) -> float:
    """Seconds until the active controller creates `name` (retrying as a client would)."""
    start = time.monotonic()
    last = None
    while time.monotonic() - start < within:
        try:
            code = create(cluster, name, timeout=2.0)[name]
            if code in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                return time.monotonic() - start
            last = code
        except (NodeError, KafkaError, OSError) as exc:
            last = exc
        time.sleep(0.05)
    raise AssertionError(f"{name} not created within {within}s (last: {last})\n{cluster.log_tails()}")


def wait_broker_unfenced(cluster, within: float = 20.0) -> None:
    # A topic can be placed once the broker is registered and unfenced.
    create_until_ok(cluster, "probe", within)


def leo(cluster, node_id: int) -> int | None:
    d = cluster.describe()
    if d is None:
        return None
    for r in (*d.current_voters, *d.observers):
        if r.replica_id == node_id:
            return r.log_end_offset
    return None


def wait_caught_up(cluster, node_id: int, within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        d = cluster.describe()
        if d is not None:
            ends = {r.replica_id: r.log_end_offset for r in (*d.current_voters, *d.observers)}
            if ends.get(node_id) == ends.get(d.leader_id) and ends.get(node_id, -1) >= d.high_watermark:
                return
        time.sleep(0.1)
    raise AssertionError(f"node {node_id} did not catch up within {within}s\n{cluster.log_tails()}")


def seaway(*args):
    import subprocess
    import sys

    from tests.support.node import REPO
    return subprocess.run([sys.executable, "-m", "core.cli", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=60)


def check_quorum_cli(cluster, leader: int, epoch: int) -> None:
    """`seaway quorum describe`, through a controller and through a broker, as
    kafka-metadata-quorum shows it."""
    import json
    one_controller = f"127.0.0.1:{cluster.controller_ports[(leader % 3) + 1]}"  # not the leader
    for where in (["-C", one_controller], ["-b", cluster.bootstrap]):
        status = json.loads(seaway("quorum", "describe", *where, "--status", "-o", "json").stdout)
        assert status["leader_id"] == leader and status["leader_epoch"] == epoch
        assert status["current_voters"] == [1, 2, 3] and status["current_observers"] == [101]
        assert status["cluster_id"] == cluster.cluster_id and status["high_watermark"] > 0
        rows = json.loads(seaway("quorum", "describe", *where, "--replication", "-o", "json").stdout)
        assert [(r["node_id"], r["status"]) for r in rows][0] == (leader, "Leader")
        assert sorted(r["node_id"] for r in rows) == [1, 2, 3, 101]
        assert {r["status"] for r in rows if r["node_id"] == 101} == {"Observer"}
    text = seaway("quorum", "describe", "-C", cluster.controller_bootstrap).stdout
    assert f"LeaderId:               {leader}" in text and "CurrentVoters:          [1,2,3]" in text


def test_three_controllers_elect_and_a_new_leader_serves_within_5s_of_kill_9(tmp_path):
    with KRaftCluster(tmp_path, controllers=3, brokers=1) as cluster:
        leader, epoch = cluster.wait_for_leader()
        wait_broker_unfenced(cluster)
        assert create(cluster, "before") == {"before": ErrorCode.NONE}
        d = cluster.describe()
        assert sorted(v.replica_id for v in d.current_voters) == [1, 2, 3]
        assert [o.replica_id for o in d.observers] == [101]
        check_quorum_cli(cluster, leader, epoch)

        cluster.kill(leader)
        took = create_until_ok(cluster, "after", within=15.0)
        new_leader, new_epoch = cluster.wait_for_leader()
        assert new_leader != leader and new_epoch > epoch
        assert took < 5.0, f"admin writes resumed only after {took:.1f}s"
        # What the old leader committed is still there.
        assert create(cluster, "before") == {"before": ErrorCode.TOPIC_ALREADY_EXISTS}

        # The killed voter comes back, catches up from the log and follows.
        cluster.nodes[leader].start()
        wait_caught_up(cluster, leader)
        assert cluster.wait_for_leader()[0] == new_leader


def test_a_restarted_voter_far_behind_catches_up_from_a_snapshot(tmp_path):
    overrides = {"metadata.log.max.record.bytes.between.snapshots": "2000"}
    with KRaftCluster(tmp_path, controllers=3, brokers=1, overrides=overrides) as cluster:
        cluster.wait_for_leader()
        wait_broker_unfenced(cluster)
        leader, _ = cluster.wait_for_leader()
        lagger = next(i for i in (1, 2, 3) if i != leader)
        behind = leo(cluster, lagger)
        cluster.kill(lagger)
        names = [f"t{i}" for i in range(40)]
        assert set(create(cluster, *names).values()) == {ErrorCode.NONE}
        # The leader snapshotted and let its log start pass where the lagger stopped, so the
        # lagger cannot catch up from the log alone.
        leader_dir = Path(cluster.nodes[leader].data_dir) / "__cluster_metadata-0"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            snaps = sorted(leader_dir.glob("*.checkpoint"))
            start = leader_dir / "log-start-offset"
            if snaps and start.exists() and int(start.read_text().split()[-1]) > behind:
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"leader wrote no snapshot past offset {behind}: {list(leader_dir.iterdir())}")

        cluster.nodes[lagger].start()
        wait_caught_up(cluster, lagger)
        lagger_dir = Path(cluster.nodes[lagger].data_dir) / "__cluster_metadata-0"
        assert any(int(p.name.split("-")[0]) > behind for p in lagger_dir.glob("*.checkpoint")), \
            "the lagger caught up without installing a snapshot"
        # It serves as a full voter again: the others can fail and it can lead.
        for other in (1, 2, 3):
            if other not in (lagger,) and other == cluster.wait_for_leader()[0]:
                cluster.kill(other)
                break
        create_until_ok(cluster, "after-snapshot", within=15.0)
        assert create(cluster, *names)[names[-1]] == ErrorCode.TOPIC_ALREADY_EXISTS


def test_five_voters_tolerate_two_failures_but_not_three(tmp_path):
    with KRaftCluster(tmp_path, controllers=5, brokers=1) as cluster:
        leader, _ = cluster.wait_for_leader()
        wait_broker_unfenced(cluster)
        down = [leader, next(i for i in range(1, 6) if i != leader)]
        for node_id in down:
            cluster.kill(node_id)
        create_until_ok(cluster, "with-three-voters", within=15.0)
        third = cluster.wait_for_leader()[0]
        cluster.kill(third)
        # Two voters of five are no majority: nothing commits.
        time.sleep(3)
        with pytest.raises((NodeError, KafkaError, AssertionError)):
            result = create(cluster, "without-majority", timeout=3.0)
            assert result["without-majority"] == ErrorCode.NONE
        cluster.nodes[third].start()
        create_until_ok(cluster, "majority-again", within=20.0)


def test_all_metadata_survives_a_full_cluster_restart(tmp_path):
    with KRaftCluster(tmp_path, controllers=3, brokers=1) as cluster:
        cluster.wait_for_leader()
        wait_broker_unfenced(cluster)
        names = [f"keep-{i}" for i in range(10)]
        assert set(create(cluster, *names).values()) == {ErrorCode.NONE}
        epoch_before = cluster.describe().leader_epoch
        hw_before = cluster.describe().high_watermark
        cluster.stop()
        cluster.start()
        leader, epoch = cluster.wait_for_leader()
        assert epoch > epoch_before
        assert cluster.describe().high_watermark >= hw_before
        assert set(create(cluster, *names).values()) == {ErrorCode.TOPIC_ALREADY_EXISTS}


def test_acknowledged_metadata_survives_pauses_and_kill_9_of_every_node(tmp_path):
    """SIGSTOP the active controller (a new one takes over; the old one, resumed, follows),
    then kill -9 every node at once right after a write was acknowledged. After a restart every
    acknowledged write is there, and every node's log on disk holds the same entries and
    describes the same image (checked by reading the files back)."""
    with KRaftCluster(tmp_path, controllers=3, brokers=1) as cluster:
        leader, epoch = cluster.wait_for_leader()
        wait_broker_unfenced(cluster)
        acknowledged = ["probe"]
        assert create(cluster, "a1", "a2") == {"a1": ErrorCode.NONE, "a2": ErrorCode.NONE}
        acknowledged += ["a1", "a2"]

        cluster.nodes[leader].pause()
        try:
            create_until_ok(cluster, "b1", within=15.0)
            acknowledged.append("b1")
            second, second_epoch = cluster.wait_for_leader(not_in=(leader,))
            assert second_epoch > epoch
        finally:
            cluster.nodes[leader].resume()
        # Resumed, the old leader still believes it leads its old epoch until it hears of the
        # new one (a deposed Raft leader always does; nothing it writes can commit meanwhile).
        # Wait until the node answering DescribeQuorum knows the new epoch, then for catch-up.
        cluster.wait_for_leader(min_epoch=second_epoch)
        wait_caught_up(cluster, leader)

        assert create(cluster, "c1") == {"c1": ErrorCode.NONE}
        acknowledged.append("c1")
        for node_id in list(cluster.nodes):
            cluster.kill(node_id)

        cluster.start()
        cluster.wait_for_leader()
        wait_broker_unfenced(cluster)
        codes = create(cluster, *acknowledged)
        assert set(codes.values()) == {ErrorCode.TOPIC_ALREADY_EXISTS}, codes

        for node_id in cluster.nodes:
            wait_caught_up(cluster, node_id)
        cluster.stop()

    logs = {node_id: read_metadata_log(node) for node_id, node in cluster.nodes.items()}
    ends = {node_id: entries[-1].offset + 1 for node_id, (_, entries) in logs.items()}
    assert len(set(ends.values())) == 1, f"logs of different lengths after a clean stop: {ends}"
    reference = logs[1][1]
    for node_id, (snapshot, entries) in logs.items():
        assert snapshot is None   # (no snapshots at the default threshold)
        assert [(e.offset, e.epoch, e.control, e.payload) for e in entries] == \
            [(e.offset, e.epoch, e.control, e.payload) for e in reference], f"node {node_id} differs"
    image = image_of(None, reference)
    assert set(acknowledged) <= set(image.topic_ids)
    assert image.brokers[101].fenced in (True, False) and set(image.brokers) == {101}
