"""The mirror is a general Kafka mirror: tansu (a broker no one here wrote) as its source and
as its target, every record checked."""
from __future__ import annotations

import signal

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.mirror import produce, read_all, start_mirror
from tests.support.node import SeawayNode
from tests.support.tansu import TansuBroker

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("direction", ["tansu-to-seaway", "seaway-to-tansu"])
def test_the_mirror_works_with_tansu(tmp_path, direction):
    seaway = SeawayNode(tmp_path / "seaway").start()
    try:
        with TansuBroker(tmp_path) as tansu:
            src, tgt = (tansu, seaway) if direction == "tansu-to-seaway" else (seaway, tansu)
            admin = AdminClient({"bootstrap.servers": src.bootstrap})
            admin.create_topics([NewTopic("orders", 3, 1)])["orders"].result(10)
            placed = produce(src.bootstrap, "orders", 0, 3000)
            mirror = start_mirror(tmp_path, src, tgt)
            try:
                got = read_all(tgt.bootstrap, "src.orders", 3000)
            finally:
                mirror.send_signal(signal.SIGTERM)
                assert mirror.wait(30) == 0, (tmp_path / "mirror.log").read_text()[-2000:]
            values = [g[2] for g in got]
            assert sorted(values) == sorted(placed) and len(values) == len(set(values))
            for partition, _, value, key, headers, ts in got:
                i = int(value[1:])
                assert (partition, key, headers, ts) == (i % 3, b"k%d" % i, [("i", b"%d" % i)],
                                                          (1, 1_700_000_000_000 + i))
    finally:
        seaway.stop()
