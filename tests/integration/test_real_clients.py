"""Real Kafka clients against a Seaway node, and against tansu, a broker nobody here wrote.

Running the same checks against tansu proves the harness (tests/support/clients.py) is
right, so a failure against Seaway points at Seaway.

Every real client produces records with keys, values, headers and timestamps to a
3-partition topic and reads them back with manual assignment; what comes back must match,
in order, per partition. confluent-kafka is also the reference the others are checked against,
in both directions, so that a driver cannot pass by mis-encoding and mis-decoding alike.

tansu quirks that shape these tests (details in tests/support/tansu.py):
- kcat is Debian's, on librdkafka 2.0.2, which cannot parse tansu's ApiVersions v3 response,
  so kcat talks to tansu through a proxy that only empties that response's tagged fields.
- CreateTopics works (confluent AdminClient); tansu also auto-creates unknown topics on Metadata,
  so every test creates its topic explicitly with a unique name.
"""

import time

import pytest

from tests.support.clients import CLIENTS, Record, Unsupported, by_partition, create_topic, unique_topic

pytestmark = pytest.mark.integration

PARTITIONS = 3
T0 = 1_700_000_000_000  # explicit CreateTime base, far from "now"
BLOB = bytes(range(256))


@pytest.fixture(params=list(CLIENTS))
def client(request):
    return CLIENTS[request.param]


@pytest.fixture(params=["seaway", "tansu"])
def broker_kind(request):
    return request.param


@pytest.fixture
def bootstrap(client, broker_kind, request):
    if broker_kind == "seaway":
        return request.getfixturevalue("seaway_broker")
    # Debian's kcat (librdkafka 2.0.2) cannot parse tansu's ApiVersions v3: see tests/support/tansu.py
    return request.getfixturevalue("tansu_broker_kcat" if client.name == "kcat" else "tansu_broker")


def topic_on(bootstrap: str, client) -> str:
    topic = unique_topic(client.name)
    create_topic(bootstrap, topic, PARTITIONS)
    return topic


def records(client, n_per_partition: int = 5, tag: str = "r") -> list[Record]:
    """Keys, values, headers (repeated names kept grouped, so kafkajs can carry them) and
    explicit timestamps where the client can set them, spread over all partitions."""
    out = []
    for i in range(n_per_partition):
        for p in range(PARTITIONS):
            out.append(Record(
                key=f"{tag}-key-{p}-{i}".encode(),
                value=f"{tag}-value-{p}-{i}".encode() * (i + 1),
                headers=[("seq", str(i).encode()), ("dup", b"a"), ("dup", b"b"), ("bin", b"\x01\xff")],
                timestamp=T0 + 1000 * i + p if client.sets_timestamps else None,
                partition=p,
            ))  # fmt: skip
    return out


def assert_round_trip(sent: list[Record], got: list[Record], client, *, start: int = 0, window=None):
    """Each partition holds exactly ``sent`` (in order) at offsets start, start+1, ..."""
    want, have = by_partition(sent), by_partition(got)
    assert sorted(have) == sorted(want), f"partitions: got {sorted(have)}, sent {sorted(want)}"
    for p, rs in want.items():
        assert [r.offset for r in have[p]] == list(range(start, start + len(rs))), f"partition {p} offsets"
        for i, (s, g) in enumerate(zip(rs, have[p])):
            assert (g.key, g.value, g.headers) == (s.key, s.value, s.headers), f"partition {p} record {i}"
            if s.timestamp is not None:
                assert g.timestamp == s.timestamp, f"partition {p} record {i} timestamp"
            elif window is not None:  # the producer stamped it: CreateTime = when produce() ran
                assert window[0] - 5000 <= g.timestamp <= window[1] + 5000, f"partition {p} record {i}"


def assert_produce_metadata(sent: list[Record], acked: list[Record], start: int = 0):
    """Where the client reports partition and offset, they are the ones the records got."""
    assert [a.partition for a in acked if a.partition is not None] == [
        s.partition for s, a in zip(sent, acked) if a.partition is not None
    ]
    next_offset = {p: start for p in range(PARTITIONS)}
    for s, a in zip(sent, acked):
        if a.offset is not None:
            assert a.offset == next_offset[s.partition], f"{s} acked at {a.offset}"
        next_offset[s.partition] += 1


def produce_and_consume(client, bootstrap, topic, sent, **produce_kw):
    before = int(time.time() * 1000)
    acked = client.produce(bootstrap, topic, sent, **produce_kw)
    after = int(time.time() * 1000)
    got = client.consume(bootstrap, topic, range(PARTITIONS), count=len(sent), timeout=20)
    return acked, got, (before, after)


def test_round_trip(client, bootstrap):
    topic = topic_on(bootstrap, client)
    sent = records(client)
    acked, got, window = produce_and_consume(client, bootstrap, topic, sent)
    assert_produce_metadata(sent, acked)
    assert_round_trip(sent, got, client, window=window)


def test_edge_values(client, bootstrap):
    """Null key, tombstone, empty value, every byte value, a 300 KB value, odd headers."""
    ts = (lambda i: T0 + i) if client.sets_timestamps else (lambda i: None)
    headers = [("empty", b""), ("bytes", BLOB if client.binary_header_values else BLOB[1:]),
               ("ünïcode", "värde".encode())]  # fmt: skip
    if client.null_header_values:
        headers.append(("null", None))
    sent = [
        Record(key=None, value=b"no key", partition=0, timestamp=ts(0)),
        Record(key=b"tombstone", value=None, partition=0, timestamp=ts(1)),
        Record(key=b"empty", value=b"", partition=0, timestamp=ts(2)),
        Record(key=BLOB, value=BLOB * 4, partition=1, timestamp=ts(3)),
        Record(key=b"headers", value=b"h", headers=headers, partition=1, timestamp=ts(4)),
        Record(key=b"big", value=bytes(range(251)) * 1200, partition=2, timestamp=ts(5)),
    ]
    if not client.sets_timestamps:
        # kcat sends one message per delimiter: its delimiter must not occur in the data,
        # which Kcat.produce guarantees; also exercise an embedded newline.
        sent.append(Record(key=b"k\nk", value=b"line1\nline2", partition=2))
    topic = topic_on(bootstrap, client)
    acked, got, window = produce_and_consume(client, bootstrap, topic, sent)
    assert_produce_metadata(sent, acked)
    assert_round_trip(sent, got, client, window=window)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compression(client, bootstrap, codec):
    assert codec in client.compressions, f"{client.name} lacks {codec}: reinstall the test extra / npm ci"
    topic = topic_on(bootstrap, client)
    sent = records(client, n_per_partition=4, tag=codec)
    acked, got, window = produce_and_consume(client, bootstrap, topic, sent, compression=codec)
    assert_produce_metadata(sent, acked)
    assert_round_trip(sent, got, client, window=window)


# tansu answers acks=0 Produce requests (Kafka never does); when the client closes its
# connection right after sending, tansu's failed write ends the connection and the produce
# requests still queued behind it are never applied. librdkafka (confluent, kcat) closes at
# once after flush(), so on tansu acks=0 may lose the tail; a broker that follows Kafka must not.
@pytest.mark.parametrize("acks", [0, 1])
def test_acks(client, bootstrap, broker_kind, acks):
    ACKS0_MAY_LOSE = broker_kind == "tansu"
    topic = topic_on(bootstrap, client)
    sent = records(client, n_per_partition=2, tag=f"acks{acks}")
    acked = client.produce(bootstrap, topic, sent, acks=acks)
    if acks == 0:
        assert all(a.offset is None for a in acked), "acks=0 cannot know offsets"
    assert_produce_metadata(sent, acked)
    timeout = 3 if acks == 0 and ACKS0_MAY_LOSE else 20
    got = client.consume(bootstrap, topic, range(PARTITIONS), count=len(sent), timeout=timeout)
    if acks == 0 and ACKS0_MAY_LOSE:  # what did arrive is intact, in order, from offset 0
        have = by_partition(got)
        sent = [r for p, rs in by_partition(sent).items() for r in rs[: len(have.get(p, []))]]
    assert_round_trip(sent, got, client)


def test_consume_from_offset_and_count(client, bootstrap):
    """Start in the middle of a partition (and of a producer batch); stop at ``count``."""
    topic = topic_on(bootstrap, client)
    sent = [r for r in records(client, n_per_partition=6) if r.partition == 1]
    client.produce(bootstrap, topic, sent)
    got = client.consume(bootstrap, topic, {1: 2}, count=len(sent) - 2, timeout=20)
    assert_round_trip(sent[2:], got, client, start=2)
    two = client.consume(bootstrap, topic, {1: 0}, count=2, timeout=20)
    assert [(r.offset, r.key) for r in two] == [(0, sent[0].key), (1, sent[1].key)]
    assert client.consume(bootstrap, topic, {1: len(sent)}, count=1, timeout=1) == []


_REFERENCE: dict[str, tuple[str, list[Record]]] = {}


def reference_topic(bootstrap: str) -> tuple[str, list[Record]]:
    """Written once per broker by confluent-kafka (the reference client), with a null header."""
    if bootstrap not in _REFERENCE:
        topic = unique_topic("reference")
        create_topic(bootstrap, topic, PARTITIONS)
        sent = records(CLIENTS["confluent"], n_per_partition=3, tag="ref")
        sent[0].headers.append(("null", None))
        CLIENTS["confluent"].produce(bootstrap, topic, sent)
        _REFERENCE[bootstrap] = topic, sent
    return _REFERENCE[bootstrap]


def test_reads_what_confluent_wrote(client, bootstrap):
    topic, sent = reference_topic(bootstrap)
    got = client.consume(bootstrap, topic, range(PARTITIONS), count=len(sent), timeout=20)
    assert_round_trip(sent, got, client)


def test_confluent_reads_what_client_wrote(client, bootstrap):
    topic = topic_on(bootstrap, client)
    sent = records(client, n_per_partition=3, tag="x")
    before = int(time.time() * 1000)
    client.produce(bootstrap, topic, sent)
    after = int(time.time() * 1000)
    got = CLIENTS["confluent"].consume(bootstrap, topic, range(PARTITIONS), count=len(sent), timeout=20)
    assert_round_trip(sent, got, CLIENTS["confluent"], window=(before, after))


def test_unsupported_is_explicit():
    """What a client cannot express is refused up front, never silently changed."""
    kafkajs, kcat = CLIENTS["kafkajs"], CLIENTS["kcat"]
    with pytest.raises(Unsupported):  # kafkajs headers are an object: a, b, a cannot be kept
        kafkajs.produce("127.0.0.1:1", "t", [Record(value=b"v", headers=[("a", b"1"), ("b", b""), ("a", b"2")])])
    with pytest.raises(Unsupported):
        kcat.produce("127.0.0.1:1", "t", [Record(value=b"v", timestamp=T0)])
