"""A DR pair: identity links both ways (`dr_pair: true`) between two Seaway nodes, walked through
a planned failover by hand, one topic config at a time, as the DR controller will do it
(the table in core/protocol/dr.py). What must hold at every step:

- the mirror creates the target copy as a read-only replica, and applications cannot write it;
- fencing the primary stops applications but not the drain;
- after the promotion neither link copies, so no record goes back where it came from;
- pointed back (the old primary made a replica of the new one), the reverse link starts where
  the offset sync the controller wrote says, and copies exactly the records written since:
  every record once, none twice, in order per partition."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from core.protocol.dr import FENCED, REPLICA_OF
from mirror.records import OffsetSync, encode_offset_sync
from tests.support.mirror import (alter_topic_configs, read_all, start_dr_links, stop_mirror, topic_configs,
                                  wait_for_configs)
from tests.support.node import SeawayNode

pytestmark = pytest.mark.integration

PARTITIONS = 3


@pytest.fixture
def pair(tmp_path):
    eu = SeawayNode(tmp_path / "eu").start()
    us = SeawayNode(tmp_path / "us").start()
    mirror = start_dr_links(tmp_path, ("eu", eu.bootstrap), ("us", us.bootstrap), sync_topic_configs_interval_s=0.5)
    try:
        yield eu, us
    finally:
        try:
            stop_mirror(mirror)
        finally:
            eu.stop()
            us.stop()


def write(bootstrap: str, prefix: str, n: int, timeout_ms: int = 30_000) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                  "message.timeout.ms": timeout_ms})
    failed = []
    for i in range(n):
        p.produce("orders", b"%s%d" % (prefix.encode(), i), partition=i % PARTITIONS,
                  on_delivery=lambda err, msg: failed.append(err) if err else None)
    assert p.flush(timeout_ms / 1000 + 10) == 0
    if failed:
        raise KafkaException(failed[0])


def role(bootstrap: str, topic: str = "orders") -> str:
    resource = ConfigResource("topic", topic)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = admin.describe_configs([resource])[resource].result(10)
    return entries[REPLICA_OF].value or ""


def set_role(bootstrap: str, value: str | None) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry
    op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    resource = ConfigResource("topic", "orders", incremental_configs=[
        ConfigEntry(REPLICA_OF, value or "", incremental_operation=op)])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.incremental_alter_configs([resource])[resource].result(10)


def ends(bootstrap: str) -> list[int]:
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "ends"})
    try:
        return [c.get_watermark_offsets(TopicPartition("orders", p), timeout=10)[1] for p in range(PARTITIONS)]
    finally:
        c.close()


def values(bootstrap: str, at_least: int, timeout: float = 60) -> dict[int, list[str]]:
    by_partition: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    for partition, _, value, *_ in sorted(read_all(bootstrap, "orders", at_least, timeout=timeout)):
        by_partition[partition].append(value)
    return by_partition


def test_a_planned_failover_by_hand_copies_every_record_once_each_way(pair):
    eu, us = pair
    admin = AdminClient({"bootstrap.servers": eu.bootstrap})
    admin.create_topics([NewTopic("orders", PARTITIONS, 1)])["orders"].result(10)
    write(eu.bootstrap, "o", 300)
    expected = {p: [f"o{i}" for i in range(p, 300, PARTITIONS)] for p in range(PARTITIONS)}
    assert values(us.bootstrap, 300) == expected
    assert (role(eu.bootstrap), role(us.bootstrap)) == ("", "eu")
    with pytest.raises(KafkaException, match="Invalid topic"):
        write(us.bootstrap, "stray", 1)        # an application on the replica

    # 1. Fence the primary: applications stop, the forward link drains (here: nothing left).
    #    A fenced copy refuses applications with a retriable error (NOT_LEADER_OR_FOLLOWER):
    #    the producer retries until its delivery timeout, and nothing is appended.
    set_role(eu.bootstrap, FENCED)
    with pytest.raises(KafkaException, match="timed out"):
        write(eu.bootstrap, "late", 1, timeout_ms=2000)
    eu_ends, us_ends = ends(eu.bootstrap), ends(us.bootstrap)
    assert sum(us_ends) == 300

    # 2. Promote the replica: applications write there; neither link copies.
    set_role(us.bootstrap, None)
    write(us.bootstrap, "n", 90)
    time.sleep(2.5)      # several discovery rounds of both links
    assert ends(eu.bootstrap) == eu_ends
    assert sum(ends(us.bootstrap)) == 390

    # 3. Point the old primary back: the controller records where the promoted side stood,
    #    then makes the old primary a replica of it.
    p = Producer({"bootstrap.servers": us.bootstrap})
    for partition in range(PARTITIONS):
        key, value = encode_offset_sync(OffsetSync("orders", partition, us_ends[partition], eu_ends[partition], 0))
        p.produce("mm2-offset-syncs.eu.internal", value=value, key=key, partition=0)
    assert p.flush(10) == 0
    set_role(eu.bootstrap, "us")
    for partition in range(PARTITIONS):
        expected[partition] += [f"n{i}" for i in range(partition, 90, PARTITIONS)]
    deadline = time.monotonic() + 60
    while sum(ends(eu.bootstrap)) < 390:
        assert time.monotonic() < deadline, ends(eu.bootstrap)
        time.sleep(0.3)
    time.sleep(1.5)      # anything extra would have arrived by now
    assert values(eu.bootstrap, 390) == expected
    assert values(us.bootstrap, 390) == expected
    # Each cluster keeps its own heartbeats, neither a replica of the other's, and gets the
    # other's as `<alias>.heartbeats`, no DR topic either: how the surviving region of an
    # outage tells that it no longer hears from the other (dr/autofailover.py).
    assert role(eu.bootstrap, "heartbeats") == role(us.bootstrap, "heartbeats") == ""
    assert role(us.bootstrap, "eu.heartbeats") == role(eu.bootstrap, "us.heartbeats") == ""


def test_topic_configs_follow_into_the_replica_and_its_role_survives(pair, tmp_path):
    """The replica gets the primary's config changes and deletions, and keeps its
    `seaway.replica.of` through every sync. Once it is promoted, the primary's changes no longer
    reach it (neither link copies the topic), and nothing travels back."""
    eu, us = pair
    log = tmp_path / "mirror.log"
    admin = AdminClient({"bootstrap.servers": eu.bootstrap})
    admin.create_topics([NewTopic("orders", PARTITIONS, 1, config={"retention.ms": "86400000"})])["orders"].result(10)
    write(eu.bootstrap, "o", 30)
    wait_for_configs(us.bootstrap, "orders", lambda c: c.get(REPLICA_OF) == "eu", log=log)

    alter_topic_configs(eu.bootstrap, "orders", {"retention.ms": "3600000", "cleanup.policy": "compact,delete"})
    got = wait_for_configs(us.bootstrap, "orders", lambda c: c.get("retention.ms") == "3600000", log=log)
    assert got == {"retention.ms": "3600000", "cleanup.policy": "compact,delete", REPLICA_OF: "eu"}
    alter_topic_configs(eu.bootstrap, "orders", {"retention.ms": None})
    got = wait_for_configs(us.bootstrap, "orders", lambda c: "retention.ms" not in c, log=log)
    assert got == {"cleanup.policy": "compact,delete", REPLICA_OF: "eu"}
    assert values(us.bootstrap, 30) == {p: [f"o{i}" for i in range(p, 30, PARTITIONS)] for p in range(PARTITIONS)}

    # Promoted (the primary fenced, the replica writable): the links copy neither way, and
    # neither copy's configs are the other's business any more.
    set_role(eu.bootstrap, FENCED)
    set_role(us.bootstrap, None)
    time.sleep(1.5)      # discovery (0.5 s) has retired the copiers
    alter_topic_configs(eu.bootstrap, "orders", {"retention.ms": "7200000"})
    alter_topic_configs(us.bootstrap, "orders", {"max.message.bytes": "2000000"})
    time.sleep(2.5)      # several sync rounds of both links
    assert topic_configs(us.bootstrap, "orders") == {"cleanup.policy": "compact,delete", "max.message.bytes": "2000000"}
    assert topic_configs(eu.bootstrap, "orders") == {"retention.ms": "7200000", "cleanup.policy": "compact,delete",
                                                     REPLICA_OF: FENCED}
    assert "not synced" not in log.read_text()
