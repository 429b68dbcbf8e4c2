"""DescribeLogDirs on a real node with two log directories, through kafka-python's admin
client and raw requests of every version: each directory lists the partitions it holds with
their size, a topic filter narrows the list, and v4 gives the volume's bytes."""
from __future__ import annotations

import os
import time

import pytest
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

from core.protocol import messages as m
from tests.support.node import SeawayNode
from tests.support.wire import call

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    base = tmp_path_factory.mktemp("dirs")
    with SeawayNode(base / "node", {"log.dirs": f"{base / 'a'},{base / 'b'}"}) as n:
        n.dirs = [str((base / d).resolve()) for d in ("a", "b")]
        admin = KafkaAdminClient(bootstrap_servers=n.bootstrap)
        admin.create_topics([NewTopic("spread", 4, 1), NewTopic("other", 1, 1)])
        producer = KafkaProducer(bootstrap_servers=n.bootstrap, acks="all")
        deadline = time.monotonic() + 20
        while len(producer.partitions_for("spread") or ()) < 4:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        for i in range(40):
            producer.send("spread", b"x" * 1000, partition=i % 4)
        producer.flush()
        producer.close()
        n.admin = admin
        yield n
        admin.close()


def _held(results) -> dict[str, dict[tuple[str, int], int]]:
    """log dir -> {(topic, partition): size}"""
    return {r["log_dir"]: {(t["name"], p["partition_index"]): p["partition_size"]
                           for t in r["topics"] for p in t["partitions"]} for r in results}


def test_each_directory_lists_its_partitions(node):
    [answer] = node.admin.describe_log_dirs()
    held = _held(answer["log_dirs"])
    assert sorted(held) == sorted(node.dirs)
    spread = {key: size for partitions in held.values() for key, size in partitions.items() if key[0] == "spread"}
    assert sorted(spread) == [("spread", i) for i in range(4)], "every partition, once"
    assert all(size > 10 * 1000 for size in spread.values()), spread
    assert all(len([k for k in partitions if k[0] == "spread"]) == 2 for partitions in held.values()), \
        "new partitions go to the directory holding the fewest"
    for directory, partitions in held.items():
        for topic, index in partitions:
            assert os.path.isdir(os.path.join(directory, f"{topic}-{index}"))
    volume = answer["log_dirs"][0]
    assert volume["total_bytes"] > volume["usable_bytes"] > 0


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_a_filter_narrows_the_list_in_every_version(node, version):
    req = m.DescribeLogDirsRequest(topics=[
        m.DescribeLogDirsRequest.DescribableLogDirTopic(topic="spread", partitions=[1, 9]),
        m.DescribeLogDirsRequest.DescribableLogDirTopic(topic="no-such-topic", partitions=[0])])
    response = call(node, 35, version, req)
    assert sorted(r.log_dir for r in response.results) == sorted(node.dirs)
    listed = [(t.name, p.partition_index) for r in response.results for t in r.topics for p in t.partitions]
    assert listed == [("spread", 1)], "partition 9 and the unknown topic are left out, as Kafka does"
    if version >= 4:
        assert all(r.total_bytes > 0 for r in response.results)
