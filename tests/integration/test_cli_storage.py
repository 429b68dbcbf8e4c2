"""`seaway storage`: random-uuid, format and info, as kafka-storage does them, and a node that
starts on formatted directories reports the formatted cluster id."""
from __future__ import annotations

import re

import pytest

from core.protocol import messages as m
from tests.support.cli import seaway
from tests.support.node import SeawayNode
from tests.support.wire import call

pytestmark = pytest.mark.integration

ID_FORM = re.compile(r"^[A-Za-z0-9_-]{22}$")


def test_random_uuid_prints_a_fresh_cluster_id_each_time():
    ids = {seaway("storage", "random-uuid").stdout.strip() for _ in range(3)}
    assert len(ids) == 3 and all(ID_FORM.match(i) for i in ids)


def test_nodes_formatted_with_one_id_start_in_that_cluster(tmp_path):
    cluster_id = seaway("storage", "random-uuid").stdout.strip()
    nodes = [SeawayNode(tmp_path / f"n{i}", node_id=i) for i in (1, 2)]
    for node in nodes:
        assert seaway("storage", "info", "-c", str(node.config_path), check=False).returncode == 1
        out = seaway("storage", "format", "-c", str(node.config_path), "-t", cluster_id).stdout
        assert f"formatted: {node.data_dir} (cluster {cluster_id}, node {node.node_id})" in out
        info = seaway("storage", "info", "-c", str(node.config_path)).stdout
        assert f"cluster {cluster_id}, node {node.node_id}" in info
    for node in nodes:
        with node:
            resp = call(node, 60, 0, m.DescribeClusterRequest(include_cluster_authorized_operations=False))
            assert resp.cluster_id == cluster_id


@pytest.mark.parametrize("args,message", [
    (["-t", "AAAAAAAAAAAAAAAAAAAAAA"], "--cluster-id"),          # the all-zero id
    (["-t", "short"], "--cluster-id"),
    (["-t", "!!!!!!!!!!!!!!!!!!!!!!"], "--cluster-id"),
])
def test_format_refuses_bad_ids(tmp_path, args, message):
    node = SeawayNode(tmp_path)
    proc = seaway("storage", "format", "-c", str(node.config_path), *args, check=False)
    assert proc.returncode == 1 and message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (node.data_dir / "meta.properties").exists()


def test_format_refuses_formatted_dirs_unless_told_and_never_another_cluster(tmp_path):
    node = SeawayNode(tmp_path)
    first, other = (seaway("storage", "random-uuid").stdout.strip() for _ in range(2))
    seaway("storage", "format", "-c", str(node.config_path), "-t", first)
    again = seaway("storage", "format", "-c", str(node.config_path), "-t", first, check=False)
    assert again.returncode == 1 and "already formatted" in again.stderr and "--ignore-formatted" in again.stderr
    skipped = seaway("storage", "format", "-c", str(node.config_path), "-t", first, "--ignore-formatted")
    assert "already formatted" in skipped.stdout
    foreign = seaway("storage", "format", "-c", str(node.config_path), "-t", other, "--ignore-formatted",
                     check=False)
    assert foreign.returncode == 1 and f"formatted for cluster {first}" in foreign.stderr
    # a node whose directories were formatted refuses a config naming another cluster
    node.config_path.write_text(node.config_path.read_text() + f"cluster.id={other}\n")
    with pytest.raises(Exception):
        node.start(timeout=10)
    assert "does not match" in node.log_tail()


def test_format_needs_its_flags():
    proc = seaway("storage", "format", check=False)
    assert proc.returncode == 2 and "--config" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_new_cluster_ids_never_start_with_a_dash():
    # A leading '-' would make `seaway storage format -t <id>` read the id as an option (one
    # id in 64 would); Kafka's Uuid.randomUuid skips such ids for the same reason.
    from core.node.storage import new_cluster_id, parse_cluster_id
    ids = [new_cluster_id() for _ in range(3000)]
    assert not [i for i in ids if i.startswith("-")]
    assert all(parse_cluster_id(i) == i for i in ids)
