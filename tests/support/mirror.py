"""Mirror test helpers: start `mirror run` between two clusters, write records with
confluent-kafka (all at once or at a steady rate) and read them back, read the mirror's internal
topics, and check a group that failed over to the target."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.node import REPO


def start_mirror(tmp_path: Path, src, tgt, name: str = "mirror", *extra: str, **settings) -> subprocess.Popen:
    """`mirror run` with one link src -> tgt; `settings` are the link's other fields (or
    replace these)."""
    import yaml
    config = tmp_path / "links.yaml"
    link = {"source_alias": "src", "source_bootstrap": src.bootstrap, "target_alias": "tgt",
            "target_bootstrap": tgt.bootstrap, "refresh_topics_s": 1, **settings}
    config.write_text(yaml.safe_dump({"links": [link]}))
    log = open(tmp_path / f"{name}.log", "ab")
    return subprocess.Popen([sys.executable, "-m", "mirror.cli", "run", "--config", str(config), *extra],
                            cwd=REPO, stderr=log, stdout=log, env=dict(os.environ, PYTHONUNBUFFERED="1"))


def start_dr_links(tmp_path: Path, first: tuple[str, str], second: tuple[str, str], **settings) -> subprocess.Popen:
    """`mirror run` with a DR pair's two links, identity names, both ways, between (alias,
    bootstrap) `first` and `second`; `settings` are the links' other fields."""
    import yaml

    def link(a, b):
        return {"source_alias": a[0], "source_bootstrap": a[1], "target_alias": b[0], "target_bootstrap": b[1],
                "policy": "identity", "dr_pair": True, "refresh_topics_s": 0.5, **settings}
    config = tmp_path / "links.yaml"
    config.write_text(yaml.safe_dump({"links": [link(first, second), link(second, first)]}))
    return subprocess.Popen([sys.executable, "-m", "mirror.cli", "run", "--config", str(config)], cwd=REPO,
                            stderr=open(tmp_path / "mirror.log", "ab"))


def stop_mirror(mirror: subprocess.Popen) -> None:
    mirror.send_signal(signal.SIGTERM)
    assert mirror.wait(30) == 0


@contextmanager
def dr_pair(tmp_path: Path, **dr_settings):
    """Two nodes, eu-1 (eu-west) and us-1 (us-east), joined by a DR pair's links (`mirror run`,
    checkpoints every second), with the dr.yaml that `dr --config` reads (`dr_settings`: more
    of its keys): yields (eu, us, config path)."""
    from tests.support.node import SeawayNode
    eu = SeawayNode(tmp_path / "eu").start()
    us = SeawayNode(tmp_path / "us").start()
    config = write_dr_config(tmp_path, eu, us, **{"groups_timeout_s": 10, **dr_settings})
    mirror = start_dr_links(tmp_path, ("eu-1", eu.bootstrap), ("us-1", us.bootstrap), checkpoint_interval_s=1)
    try:
        yield eu, us, config
    finally:
        try:
            stop_mirror(mirror)
        finally:
            eu.stop()
            us.stop()


def produce(bootstrap: str, topic: str, start: int, n: int) -> dict[str, tuple[int, int]]:
    """Values v<i> with key, header and timestamp derived from i; value -> (partition, offset)."""
    placed: dict[str, tuple[int, int]] = {}

    def delivered(err, msg):
        assert err is None, err
        placed[msg.value().decode()] = (msg.partition(), msg.offset())
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    for i in range(start, start + n):
        p.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % 3, headers=[("i", b"%d" % i)],
                  timestamp=1_700_000_000_000 + i, on_delivery=delivered)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(30) == 0
    return placed


def read_all(bootstrap: str, topic: str, until: int, timeout: float = 60) -> list:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        md = c.list_topics(timeout=5)
        if topic in md.topics and md.topics[topic].partitions:
            break
        time.sleep(0.5)
    c.assign([TopicPartition(topic, p, 0) for p in md.topics[topic].partitions])
    out = []
    try:
        while time.monotonic() < deadline and len({m[2] for m in out}) < until:
            for msg in c.consume(2000, timeout=0.5):
                if not msg.error():
                    out.append((msg.partition(), msg.offset(), msg.value().decode(), msg.key(),
                                msg.headers(), msg.timestamp()))
    finally:
        c.close()
    return out


def as_client(bootstrap: str | dict) -> dict:
    """A confluent-kafka configuration from a plaintext bootstrap or a whole configuration
    (a secured cluster's, with its login)."""
    return dict(bootstrap) if isinstance(bootstrap, dict) else {"bootstrap.servers": bootstrap}


def read_offset_syncs(bootstrap: str | dict, topic: str) -> list:
    """Every offset sync in `topic`, with Seaway's extent header."""
    from mirror.records import decode_offset_sync
    return read_internal(bootstrap, topic, decode_offset_sync, headers=True)


def read_internal(bootstrap: str | dict, topic: str, decode, *, headers: bool = False) -> list:
    """Every record of partition 0 of an internal topic, decoded (with its headers as a third
    argument when `headers`); by offset, since a compacted topic may have gaps."""
    c = Consumer({**as_client(bootstrap), "group.id": f"read-{topic}", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        _, end = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        out, position, deadline = [], 0, time.monotonic() + 30
        while position < end:
            assert time.monotonic() < deadline, f"read {position} of {end} of {topic}"
            for msg in c.consume(1000, timeout=1):
                if not msg.error():
                    out.append(decode(msg.key(), msg.value(), msg.headers() or []) if headers
                               else decode(msg.key(), msg.value()))
                    position = msg.offset() + 1
        return out
    finally:
        c.close()


class SteadyWriter(threading.Thread):
    """About 8,000 records/s into a 3-partition topic, so a stop lands mid-stream; `placed`
    maps each value to its (partition, offset)."""

    def __init__(self, bootstrap: str, topic: str, total: int):
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.total = bootstrap, topic, total
        self.placed: dict[str, tuple[int, int]] = {}

    @classmethod
    def into_new_topic(cls, bootstrap: str, topic: str, total: int) -> "SteadyWriter":
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(10)
        writer = cls(bootstrap, topic, total)
        writer.start()
        return writer

    def run(self) -> None:
        def delivered(err, msg):
            assert err is None, err
            self.placed[msg.value().decode()] = (msg.partition(), msg.offset())
        p = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5, "enable.idempotence": True})
        for i in range(self.total):
            p.produce(self.topic, value=b"v%d" % i, partition=i % 3, on_delivery=delivered)
            if i % 400 == 399:
                p.poll(0)
                time.sleep(0.05)
        assert p.flush(30) == 0


def copies_after_a_restart(tmp_path: Path, src, tgt, total: int) -> dict[str, int]:
    """Start the mirror again and read src.events on the target until `total` distinct
    values are there; how many copies of each value it holds."""
    mirror = start_mirror(tmp_path, src, tgt, "mirror2")
    try:
        got = read_all(tgt.bootstrap, "src.events", total, timeout=90)
    finally:
        mirror.send_signal(signal.SIGTERM)
        assert mirror.wait(30) == 0
    copies: dict[str, int] = {}
    for _, _, value, *_ in got:
        copies[value] = copies.get(value, 0) + 1
    return copies


def resume_on_target(bootstrap: str | dict, group: str, topic: str, wanted: set[bytes], bound: int,
                     timeout: float = 90) -> None:
    """The group, failed over to the target, reads until it has every value in `wanted`: none
    skipped, and no more than `bound` values it had consumed before read again."""
    rest: list[bytes] = []
    g = Consumer({**as_client(bootstrap), "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    try:
        g.subscribe([topic])
        deadline = time.monotonic() + timeout
        while not wanted <= set(rest) and time.monotonic() < deadline:
            for msg in g.consume(1000, timeout=0.5):
                if not msg.error():
                    rest.append(msg.value())
    finally:
        g.close()
    assert wanted <= set(rest), f"skipped {len(wanted - set(rest))} records"
    redelivered = [v for v in rest if v not in wanted]
    assert len(redelivered) <= bound, (len(redelivered), bound)


def topic_configs(bootstrap: str, topic: str) -> dict[str, str | None]:
    """The topic's own configs (DescribeConfigs' dynamic topic configs), through our Admin."""
    import anyio

    from core.client import Admin, KafkaClient
    from core.client.admin import ConfigResource

    async def run():
        async with KafkaClient(bootstrap) as client:
            return (await Admin(client).describe_configs(ConfigResource.topic(topic)))[ConfigResource.topic(topic)]
    entries = anyio.run(run)
    if not isinstance(entries, dict):
        raise entries
    return {name: e.value for name, e in entries.items() if e.source == 1}


def alter_topic_configs(bootstrap: str, topic: str, changes: dict[str, str | None]) -> None:
    """IncrementalAlterConfigs through our Admin: a value sets, None deletes."""
    import anyio

    from core.client import Admin, KafkaClient
    from core.client.admin import ConfigResource

    async def run():
        async with KafkaClient(bootstrap) as client:
            return await Admin(client).incremental_alter_configs({ConfigResource.topic(topic): changes})
    error = anyio.run(run)[ConfigResource.topic(topic)]
    if error is not None:
        raise error


def wait_for_configs(bootstrap: str, topic: str, wanted, timeout: float = 30, log: Path | None = None
                     ) -> dict[str, str | None]:
    """Until the topic's own configs satisfy `wanted` (a predicate on them); they are returned."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            configs = topic_configs(bootstrap, topic)
        except Exception:       # noqa: BLE001 — the topic may not exist yet
            configs = None
        if configs is not None and wanted(configs):
            return configs
        assert time.monotonic() < deadline, (topic, configs, log.read_text()[-3000:] if log else "")
        time.sleep(0.2)


def write_dr_config(directory: Path, eu, us, *, drain_timeout_s: float = 30, groups_timeout_s: float = 30,
                    **settings) -> Path:
    """dr.yaml for the DR pair eu-1 (eu-west) ~ us-1 (us-east) of two nodes, as `dr --config`
    reads it, its state under `directory`; `settings` are more of dr.yaml's top-level keys."""
    import yaml
    config = directory / "dr.yaml"
    config.write_text(yaml.safe_dump({
        "state_dir": str(directory / "dr-state"), "regions": ["eu-west", "us-east"],
        "drain_timeout_s": drain_timeout_s, "groups_timeout_s": groups_timeout_s, **settings,
        "pairs": [{"first": {"cluster": "eu-1", "region": "eu-west", "bootstrap": eu.bootstrap},
                   "second": {"cluster": "us-1", "region": "us-east", "bootstrap": us.bootstrap}}]}))
    return config
