"""tests/support/jepsen.py on synthetic histories and hand-made replica logs.

Each anomaly the fault run relies on the checker to catch is planted here on its own, and
the checker must name that anomaly (and only it, where the history allows).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.log.log import Log
from core.log.config import LogConfig
from core.protocol.records import build_batch
from tests.support.jepsen import History, Report, check, compare_replicas, log_batches


def acked_history(n: int = 4, partition: int = 0) -> History:
    """n values, all acknowledged at offsets 0..n-1 of one partition."""
    h = History()
    for i in range(n):
        h.invoke(i % 2, f"v{i}")
        h.ok(i % 2, f"v{i}", partition, i)
    return h


def read_all(h: History, values_offsets, reader: int = 0, partition: int = 0) -> None:
    for poll, (value, offset) in enumerate(values_offsets):
        h.read(reader, poll, partition, offset, value)


def anomalies(r: Report) -> set[str]:
    return {a for a in Report.ANOMALIES if getattr(r, a)}


def test_a_clean_history_is_valid():
    h = acked_history()
    h.invoke(5, "maybe")
    h.info(5, "maybe", "timed out")
    h.invoke(6, "no")
    h.fail(6, "no", "MSG_SIZE_TOO_LARGE")
    h.invoke(7, "pending")                     # never completed: indeterminate
    read_all(h, [("v0", 0), ("v1", 1), ("v2", 2), ("v3", 3), ("maybe", 4)])
    h.fault("isolate 1")
    r = check(h)
    assert r.valid, r.summary()
    assert (r.ops, r.acknowledged, r.failed, r.unknown, r.unknown_read, r.faults) == (7, 4, 1, 2, 1, 1)
    assert "VALID" in r.summary() and "lost 0" in r.summary()


def test_an_ack_without_an_offset_must_be_read_but_is_not_placed():
    h = acked_history(2)
    h.invoke(4, "dup-answer")
    h.ok(4, "dup-answer", 0, None)
    read_all(h, [("v0", 0), ("dup-answer", 1), ("v1", 2)])
    assert check(h, high_watermarks={0: 3}).valid is False      # v1 is misplaced: offset 1 was acked
    h2 = acked_history(1)
    h2.invoke(4, "dup-answer")
    h2.ok(4, "dup-answer", 0, None)
    read_all(h2, [("v0", 0), ("dup-answer", 1)])
    assert check(h2, high_watermarks={0: 2}).valid
    h3 = acked_history(1)
    h3.invoke(4, "dup-answer")
    h3.ok(4, "dup-answer", None, None)
    read_all(h3, [("v0", 0)])
    assert check(h3, high_watermarks={0: 1}).lost == ["dup-answer"]


def test_lost():
    h = acked_history()
    read_all(h, [("v0", 0), ("v1", 1), ("v3", 3)])
    r = check(h)
    assert r.lost == ["v2"] and anomalies(r) == {"lost"}
    assert "INVALID" in r.summary() and "lost 1" in r.summary()


def test_lost_above_the_final_high_watermark_is_told_apart():
    h = acked_history()
    read_all(h, [("v0", 0), ("v2", 2)])
    r = check(h, high_watermarks={0: 3})
    assert r.lost == ["v1", "v3"]
    assert r.lost_above_hw == [("v3", 0, 3, 3)]          # acknowledged, then cut from the log
    assert "1 of the lost were acknowledged at or above" in r.summary()


def test_the_history_dumps_as_json_lines(tmp_path):
    h = acked_history(1)
    read_all(h, [("v0", 0)])
    h.fault("kill -9 node 1")
    h.dump(tmp_path / "h.jsonl")
    lines = (tmp_path / "h.jsonl").read_text().splitlines()
    assert [next(iter(json.loads(x))) for x in lines] == ["op", "op", "read", "fault"]


def test_duplicated_at_another_offset():
    h = acked_history(2)
    read_all(h, [("v0", 0), ("v1", 1), ("v0", 2)])
    r = check(h)
    assert r.duplicated == {"v0": 2} and anomalies(r) == {"duplicated"}


def test_duplicate_of_an_unacknowledged_value_counts_too():
    h = acked_history(1)
    h.invoke(3, "retry")
    h.info(3, "retry", "timed out")
    read_all(h, [("v0", 0), ("retry", 1), ("retry", 2)])
    assert check(h).duplicated == {"retry": 2}


def test_reordered_and_misplaced():
    h = acked_history(3)
    read_all(h, [("v0", 0), ("v2", 1), ("v1", 2)])      # v1/v2 swapped in the log
    r = check(h)
    assert r.reordered == [(0, "v2", "v1")]
    assert {m[0] for m in r.misplaced} == {"v1", "v2"}
    assert anomalies(r) == {"reordered", "misplaced"}


def test_misplaced_in_another_partition():
    h = acked_history(2)
    read_all(h, [("v0", 0)])
    h.read(0, 9, 1, 0, "v1")
    r = check(h)
    assert r.misplaced == [("v1", (0, 1), (1, 0))] and anomalies(r) == {"misplaced"}


def test_backwards_offsets_across_polls():
    h = acked_history(3)
    h.read(0, 0, 0, 0, "v0")
    h.read(0, 0, 0, 1, "v1")
    h.read(0, 1, 0, 2, "v2")
    h.read(0, 2, 0, 1, "v1")                            # the reader went back to offset 1
    r = check(h)
    assert r.backwards == [(0, 0, 2, 1)]
    assert "backwards" in anomalies(r)


def test_a_repeated_offset_is_not_progress():
    h = acked_history(2)
    read_all(h, [("v0", 0), ("v1", 1), ("v1", 1)])
    r = check(h)
    assert r.backwards == [(0, 0, 1, 1)] and r.duplicated == {"v1": 2}


def test_readers_and_partitions_are_separate_offset_sequences():
    h = acked_history(2)
    read_all(h, [("v0", 0), ("v1", 1)], reader=0)
    h.invoke(9, "p1")
    h.ok(9, "p1", 1, 0)
    h.read(0, 5, 1, 0, "p1")                            # partition 1 starts at 0: not backwards
    read_all(h, [("v0", 0)], reader=1)                  # another reader starts over
    r = check(h)
    assert r.backwards == []
    assert r.duplicated == {"v0": 2}                    # ...but the value was read twice


def test_phantom_and_failed_present():
    h = acked_history(1)
    h.invoke(2, "refused")
    h.fail(2, "refused", "INVALID_RECORD")
    read_all(h, [("v0", 0), ("refused", 1), ("ghost", 2)])
    r = check(h)
    assert r.phantom == ["ghost"] and r.failed_present == ["refused"]


def test_two_acks_at_one_offset_conflict():
    h = History()
    for v in ("a", "b"):
        h.invoke(0, v)
        h.ok(0, v, 0, 7)                                # an offset handed out twice
    read_all(h, [("a", 7)])
    r = check(h)
    assert r.conflicting_acks == [(0, 7, ["a", "b"])]
    assert "lost" in anomalies(r)


def test_a_malformed_history_is_reported():
    h = History()
    h.ok(0, "x", 0, 0)
    h.invoke(0, "y")
    h.invoke(0, "y")
    assert len(check(h).malformed) == 2


# ---------------------------------------------------------------------- replicas

def write_replica(directory: Path, batches: list[bytes], segment_bytes: int = 400) -> None:
    log = Log.open(directory, LogConfig(segment_bytes=segment_bytes))
    try:
        for b in batches:
            log.append(bytearray(b))
    finally:
        log.close()


def batches(n: int, tag: str = "") -> list[bytes]:
    return [build_batch([(None, f"value-{i}{tag}".encode() * 8, [], 1000 + i)]) for i in range(n)]


def test_identical_replicas_agree_across_segments(tmp_path):
    for name in ("a", "b", "c"):
        write_replica(tmp_path / name, batches(12))
    assert len(list((tmp_path / "a").glob("*.log"))) > 1     # the walk crosses segments
    assert len(log_batches(tmp_path / "a")) == 12
    assert compare_replicas({n: tmp_path / n for n in "abc"}, high_watermark=12) == []


def test_divergence_below_the_high_watermark_is_found(tmp_path):
    write_replica(tmp_path / "a", batches(6))
    write_replica(tmp_path / "b", batches(4) + batches(2, tag="-other"))
    problems = compare_replicas({"a": tmp_path / "a", "b": tmp_path / "b"}, high_watermark=6)
    assert problems == ["replicas a and b differ at the batch at offset 4 / 4"]
    # above the high watermark replicas may differ (uncommitted tails)
    assert compare_replicas({"a": tmp_path / "a", "b": tmp_path / "b"}, high_watermark=4) == []


def test_a_short_replica_is_found(tmp_path):
    write_replica(tmp_path / "a", batches(6))
    write_replica(tmp_path / "b", batches(3))
    problems = compare_replicas({"a": tmp_path / "a", "b": tmp_path / "b"}, high_watermark=6)
    assert "replica b: ends at offset 3, below the high watermark 6" in problems


def test_a_corrupt_batch_is_found(tmp_path):
    for name in ("a", "b"):
        write_replica(tmp_path / name, batches(3), segment_bytes=1 << 20)
    for name in ("a", "b"):                             # same damage on both: bytes agree
        seg = tmp_path / name / "00000000000000000000.log"
        data = bytearray(seg.read_bytes())
        data[-1] ^= 0xFF
        seg.write_bytes(bytes(data))
    problems = compare_replicas({"a": tmp_path / "a", "b": tmp_path / "b"}, high_watermark=3)
    assert problems == [f"replica {n}: batch at offset 2 fails its CRC" for n in "ab"]


@pytest.mark.parametrize("hw", [0, 1])
def test_nothing_to_compare(tmp_path, hw):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    problems = compare_replicas({"a": tmp_path / "a", "b": tmp_path / "b"}, high_watermark=hw)
    assert problems == ([] if hw == 0 else [f"replica {n}: ends at offset 0, below the high "
                                            f"watermark 1" for n in "ab"])


# ---------------------------------------------------------------------- duplicates

def producer_batch(values: list[str], pid: int, epoch: int, seq: int) -> bytes:
    return build_batch([(None, v.encode(), [], 1000) for v in values],
                       producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def duplicated_reads(h: History, layout: list[list[str]]) -> None:
    offset = 0
    for batch in layout:
        for v in batch:
            h.read(0, offset, 0, offset, v)
            offset += 1


def test_duplicates_are_told_apart_by_who_wrote_each_copy(tmp_path):
    from tests.support.jepsen import BROKER_DUPLICATE, CLIENT_RESEND, UNEXPLAINED, explain_duplicates
    layout = [
        (["a", "b"], 7, 0, 0),
        (["a", "b"], 7, 1, 0),        # librdkafka's epoch bump: the same records, new epoch
        (["c"], 7, 1, 2),
        (["c"], 7, 1, 2),             # the same sequence stored twice: the broker's fault
        (["d"], 7, 1, 3),
        (["d"], 7, 1, 4),             # one epoch, two sequences: nothing explains it
        (["e"], -1, -1, -1),
        (["e"], -1, -1, -1),          # not idempotent: no producer fields to judge by
    ]
    write_replica(tmp_path / "p0", [producer_batch(vs, pid, ep, seq) for vs, pid, ep, seq in layout],
                  segment_bytes=1 << 20)
    h = History()
    duplicated_reads(h, [vs for vs, *_ in layout])
    h.read(1, 0, 0, 4, "c")            # a reader repeating an offset adds no stored copy
    r = check(h)
    assert set(r.duplicated) == {"a", "b", "c", "d", "e"}
    causes = explain_duplicates(r.duplicated, h.reads, {0: tmp_path / "p0"})
    assert {c: [v for v, _ in entries] for c, entries in causes.items()} == {
        CLIENT_RESEND: ["a", "b"], BROKER_DUPLICATE: ["c"], UNEXPLAINED: ["d", "e"]}
    a = dict(causes[CLIENT_RESEND])["a"]
    assert a == [(0, 0, (7, 0, 0)), (0, 2, (7, 1, 0))]
    assert dict(causes[CLIENT_RESEND])["b"] == [(0, 1, (7, 0, 1)), (0, 3, (7, 1, 1))]
