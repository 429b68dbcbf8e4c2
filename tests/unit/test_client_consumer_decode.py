"""How the consumer turns a Fetch answer's record bytes into records, without a broker.

These are the cases a broker produces but a test cannot easily make one produce: a fetch
that starts mid-batch, a response cut inside its last batch, transaction markers, aborted
transactions under read_committed, and a batch larger than the fetch limits.
"""
from __future__ import annotations

import struct
from types import SimpleNamespace

import pytest

from core.client.consumer import Consumer
from core.protocol.errors import ErrorCode, KafkaError
from core.protocol.records import build_batch

TP = ("t", 0)


class FakeClient:
    retry_backoff_ms = 100

    def __init__(self):
        self.updates = 0

    def request_metadata_update(self):
        self.updates += 1


def batch(base: int, n: int, *, pid: int = -1, txn: bool = False, ts: int = 1000) -> bytes:
    recs = [(b"k%d" % (base + i), b"v%d" % (base + i), [("h", b"x")], ts + i) for i in range(n)]
    return build_batch(recs, base_offset=base, producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                       transactional=txn)


def marker(offset: int, pid: int, commit: bool) -> bytes:
    key = struct.pack(">hh", 0, 1 if commit else 0)
    value = struct.pack(">hi", 0, 0)
    return build_batch([(key, value, [], 1000)], base_offset=offset, producer_id=pid, producer_epoch=0,
                       transactional=True, control=True)


def answer(records: bytes, *, error=0, aborted=None, hw=1000):
    return SimpleNamespace(error_code=error, high_watermark=hw, log_start_offset=0, records=memoryview(records),
                           aborted_transactions=[SimpleNamespace(producer_id=p, first_offset=o)
                                                 for p, o in (aborted or [])])


def consumer(position: int, **kw) -> Consumer:
    c = Consumer(FakeClient(), **kw)
    c.assign([TP])
    c.seek(*TP, position)
    return c


def feed(c: Consumer, records: bytes, **kw):
    c._handle_partition(1, TP, answer(records, **kw), {TP: c._states[TP].position})
    return c._drain(None)


def test_skips_records_before_the_position_inside_the_first_batch():
    c = consumer(105)
    got = feed(c, batch(100, 10) + batch(110, 5))
    assert [r.offset for r in got] == list(range(105, 115))
    assert got[0].key == b"k105" and got[0].value == b"v105" and got[0].headers == [("h", b"x")]
    assert got[0].timestamp == 1005 and got[0].timestamp_type == 0
    assert c._states[TP].position == 115


def test_partial_trailing_batch_is_left_for_the_next_fetch():
    c = consumer(0)
    data = batch(0, 3) + batch(3, 4)
    got = feed(c, data[:-10])
    assert [r.offset for r in got] == [0, 1, 2]
    assert c._states[TP].position == 3


def test_only_a_partial_batch_means_the_batch_is_too_large():
    c = consumer(0, max_partition_fetch_bytes=64)
    assert feed(c, batch(0, 50)[:64]) == []
    with pytest.raises(KafkaError) as info:
        c._raise_partition_errors()
    assert info.value.code == ErrorCode.MESSAGE_TOO_LARGE


def test_control_batches_are_skipped():
    c = consumer(0)
    got = feed(c, batch(0, 3, pid=7, txn=True) + marker(3, 7, commit=True) + batch(4, 2))
    assert [r.offset for r in got] == [0, 1, 2, 4, 5]
    assert c._states[TP].position == 6


def _transactions() -> tuple[bytes, list]:
    data = (batch(0, 3, pid=7, txn=True)           # aborted below
            + marker(3, 7, commit=False)
            + batch(4, 2)                          # not transactional
            + batch(6, 2, pid=8, txn=True)         # committed
            + marker(8, 8, commit=True)
            + batch(9, 1, pid=7, txn=True)         # pid 7 again, a new transaction: committed
            + marker(10, 7, commit=True))
    return data, [(7, 0)]


def test_read_committed_drops_aborted_transactions():
    data, aborted = _transactions()
    c = consumer(0, isolation_level="read_committed")
    got = feed(c, data, aborted=aborted)
    assert [r.offset for r in got] == [4, 5, 6, 7, 9]
    assert c._states[TP].position == 11


def test_read_uncommitted_keeps_aborted_transactions():
    data, aborted = _transactions()
    c = consumer(0)
    got = feed(c, data, aborted=aborted)
    assert [r.offset for r in got] == [0, 1, 2, 4, 5, 6, 7, 9]


def test_fetch_answer_is_dropped_after_a_seek():
    c = consumer(0)
    c._handle_partition(1, TP, answer(batch(0, 3)), {TP: 0})
    c.seek(*TP, 2)
    assert c._drain(None) == []
    # and an answer for an offset we no longer want is ignored on arrival
    c._handle_partition(1, TP, answer(batch(0, 3)), {TP: 0})
    assert c._drain(None) == []


def test_max_records_leaves_the_rest_buffered():
    c = consumer(0)
    c._handle_partition(1, TP, answer(batch(0, 5) + batch(5, 5)), {TP: 0})
    assert [r.offset for r in c._drain(3)] == [0, 1, 2]
    assert [r.offset for r in c._drain(4)] == [3, 4, 5, 6]
    assert [r.offset for r in c._drain(None)] == [7, 8, 9]


def test_offset_out_of_range_resets_by_policy():
    c = consumer(50)
    feed(c, b"", error=ErrorCode.OFFSET_OUT_OF_RANGE)
    st = c._states[TP]
    assert st.position is None and st.reset == -2  # earliest, resolved by ListOffsets on poll

    c = consumer(50, auto_offset_reset="none")
    feed(c, b"", error=ErrorCode.OFFSET_OUT_OF_RANGE)
    with pytest.raises(KafkaError) as info:
        c._raise_partition_errors()
    assert info.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_leader_errors_refresh_metadata_and_back_off():
    c = consumer(0)
    feed(c, b"", error=ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert c.client.updates == 1 and c._states[TP].retry_at > 0
    c._raise_partition_errors()  # nothing raised: retriable


def test_corrupt_batch_raises_from_poll():
    c = consumer(0)
    data = bytearray(batch(0, 3))
    data[-1] ^= 0xFF
    assert feed(c, bytes(data)) == []
    with pytest.raises(KafkaError) as info:
        c._raise_partition_errors()
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE


class FetchingClient(FakeClient):
    """Enough of a client for `_fetch`: one node that records the Fetch it is sent."""

    retry_backoff_ms = 100
    request_timeout_ms = 1000

    def __init__(self):
        super().__init__()
        self.sent = []
        client = self

        class Cluster:
            def topic_id(self, name):
                return None

            def leader_epoch(self, topic, partition):
                return 0

        class Conn:
            def version_for(self, api_key, highest=None):
                return 12 if highest is None else min(12, highest)

            async def send(self, request, **kw):
                client.sent.append(request)
                return SimpleNamespace(error_code=0, session_id=0, responses=[])

        self.cluster, self._conn = Cluster(), Conn()

    async def connection(self, node):
        return self._conn


@pytest.mark.anyio
async def test_a_partition_revoked_before_its_fetch_is_sent_is_left_out():
    # A fetch task is started with the partitions chosen at that moment; a cooperative
    # rebalance can revoke one before the task runs. It once raised KeyError out of the fetch
    # and surfaced as UNKNOWN_SERVER_ERROR from the consumer's next poll.
    client = FetchingClient()
    c = Consumer(client)
    other = ("t", 1)
    c.assign([TP, other])
    c.seek(*TP, 5)
    c.seek(*other, 7)
    c.assign([TP])
    await c._fetch(1, [TP, other])
    [request] = client.sent
    assert [(t.topic, [p.partition for p in t.partitions]) for t in request.topics] == [("t", [0])]
    assert c._states[TP].error is None
