"""core/log policies: segment.ms rolls, retention, flush policy, topic configs."""
from __future__ import annotations

import os

import pytest

from core.log import Log, LogConfig, OffsetOutOfRange, retention
from core.log.checkpoint import read_offset
from core.protocol.records import build_batch

T0 = 1_700_000_000_000
HOUR = 3_600_000


class Clock:
    def __init__(self, now: int = T0):
        self.now = now

    def __call__(self) -> int:
        return self.now


def batch(n: int = 1, size: int = 100, ts: int = T0) -> bytes:
    return build_batch([(None, b"x" * size, [], ts)] * n)


def bases(log: Log) -> list[int]:
    return [s.base_offset for s in log.segments]


# ------------------------------------------------------------------ rolling


def test_roll_by_segment_ms(tmp_path):
    clock = Clock()
    log = Log.open(tmp_path / "t-0", LogConfig(segment_ms=1000), clock=clock)
    log.append(batch())
    clock.now += 600
    log.append(batch())
    assert bases(log) == [0]
    clock.now += 600                       # 1200 ms after the segment's first batch
    log.append(batch())
    assert bases(log) == [0, 2]
    clock.now += 5000                      # time alone does not roll; the next append does
    assert bases(log) == [0, 2]
    log.append(batch())
    assert bases(log) == [0, 2, 3]


def test_idle_empty_segment_does_not_roll_on_first_append(tmp_path):
    clock = Clock()
    log = Log.open(tmp_path / "t-0", LogConfig(segment_ms=1000), clock=clock)
    clock.now += 10_000
    log.append(batch())
    clock.now += 500
    log.append(batch())
    assert bases(log) == [0]


def test_roll_by_segment_bytes_and_explicit_roll(tmp_path):
    one = len(batch())
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=3 * one))
    for _ in range(7):
        log.append(batch())
    assert bases(log) == [0, 3, 6]
    assert all(s.size_bytes <= 3 * one for s in log.segments)
    log.roll()
    log.roll()                             # the new active segment is empty: no-op
    assert bases(log) == [0, 3, 6, 7]
    big = batch(size=10 * one)             # bigger than a segment: goes alone into a new one
    log.append(big)
    assert bases(log) == [0, 3, 6, 7] and log.segments[-1].size_bytes == len(big)
    log.append(batch())
    assert bases(log) == [0, 3, 6, 7, 8]


def test_roll_when_index_full(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(index_interval_bytes=0, segment_index_bytes=16))
    for _ in range(10):
        log.append(batch())
    assert len(log.segments) > 2
    for seg in log.segments:
        assert seg.path.with_suffix(".index").stat().st_size <= 16


def test_update_config_applies_from_then_on(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig())
    for _ in range(4):
        log.append(batch())
    assert bases(log) == [0]
    log.update_config(LogConfig.from_properties({"segment.bytes": str(2 * len(batch()))},
                                                log.config))
    log.append(batch())
    log.append(batch())
    assert bases(log) == [0, 4]


# ---------------------------------------------------------------- retention


def test_retention_by_time(tmp_path):
    clock = Clock()
    one = len(batch())
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=2 * one, retention_ms=10 * HOUR),
                   clock=clock)
    for hour in range(8):                  # two batches per segment, one segment per hour
        log.append(batch(ts=T0 + hour * HOUR))
        log.append(batch(ts=T0 + hour * HOUR + 1))
    assert bases(log) == [0, 2, 4, 6, 8, 10, 12, 14]
    first_path = log.segments[0].path
    clock.now = T0 + 12 * HOUR             # segments of hours 0, 1 are past 10 h old
    assert log.apply_retention() == 2
    assert bases(log) == [4, 6, 8, 10, 12, 14] and log.log_start_offset == 4
    assert not first_path.exists() and not first_path.with_suffix(".index").exists()
    with pytest.raises(OffsetOutOfRange):
        log.read(3, 100)
    assert log.read(4, 100).first_offset == 4
    clock.now = T0 + 100 * HOUR            # everything is old, but the active segment stays
    assert log.apply_retention() == 5
    assert bases(log) == [14] and log.log_start_offset == 14
    assert log.read(14, 1 << 20).next_offset == 16
    assert log.apply_retention() == 0


def test_retention_by_time_stops_at_a_younger_segment(tmp_path):
    clock = Clock(T0 + 20 * HOUR)
    one = len(batch())
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=one, retention_ms=HOUR), clock=clock)
    for ts in (T0, T0 + 19 * HOUR + 1, T0, T0):   # a young segment shields the older ones after it
        log.append(batch(ts=ts))
    assert log.apply_retention() == 1
    assert bases(log) == [1, 2, 3]


def test_retention_by_size(tmp_path):
    one = len(batch())
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=2 * one, retention_bytes=5 * one, retention_ms=-1))
    for _ in range(9):
        log.append(batch())
    assert bases(log) == [0, 2, 4, 6, 8] and log.size_bytes == 9 * one
    assert log.apply_retention() == 2      # 9 -> 7 -> 5 segments' worth
    assert bases(log) == [4, 6, 8] and log.size_bytes == 5 * one
    assert log.log_start_offset == 4
    with pytest.raises(OffsetOutOfRange):
        log.read(0, 100)
    assert log.apply_retention() == 0


def test_retention_never_passes_the_high_watermark(tmp_path):
    one = len(batch())
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=one, retention_bytes=0, retention_ms=-1))
    for _ in range(5):
        log.append(batch())
    assert log.apply_retention(high_watermark=2) == 2
    assert bases(log) == [2, 3, 4]
    assert log.apply_retention() == 2
    assert bases(log) == [4]


def test_retention_survives_reopen(tmp_path):
    one = len(batch())
    d = tmp_path / "t-0"
    log = Log.open(d, LogConfig(segment_bytes=2 * one, retention_bytes=3 * one, retention_ms=-1))
    for _ in range(6):
        log.append(batch())
    log.apply_retention()
    start = log.log_start_offset
    assert start == 2
    log._abandon()
    log = Log.open(d, LogConfig(segment_bytes=2 * one))
    assert log.log_start_offset == start and bases(log)[0] == start


@pytest.mark.parametrize("policy", [("compact",), ()])
def test_retention_by_time_and_size_needs_delete_in_cleanup_policy(tmp_path, policy):
    clock = Clock()
    one = len(batch())
    cfg = LogConfig(segment_bytes=2 * one, retention_ms=HOUR, retention_bytes=2 * one,
                    cleanup_policy=policy)
    log = Log.open(tmp_path / "t-0", cfg, clock=clock)
    for _ in range(7):
        log.append(batch(ts=T0))
    assert bases(log) == [0, 2, 4, 6]
    clock.now = T0 + 10 * HOUR             # old and too big, but nothing says "delete"
    assert log.apply_retention() == 0 and bases(log) == [0, 2, 4, 6]
    assert log.delete_records(3) == 3      # DeleteRecords still removes what lies below it
    assert bases(log) == [2, 4, 6] and log.log_start_offset == 3
    log.update_config(LogConfig.from_properties({"cleanup.policy": "compact,delete"}, cfg))
    assert log.apply_retention() == 2 and bases(log) == [6]


def test_retention_below_log_start_ignores_cleanup_policy(tmp_path):
    one = len(batch())
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=2 * one))
    for _ in range(7):
        log.append(batch())
    segs = log._segments
    compact = LogConfig(cleanup_policy=("compact",), retention_ms=0, retention_bytes=0)
    assert retention.condemned(segs, compact, T0 * 2, 7, 0) == 0
    assert retention.condemned(segs, compact, T0 * 2, 7, 4) == 2     # [0, 2) and [2, 4)
    assert retention.condemned(segs, compact, T0 * 2, 3, 4) == 1     # never past the limit
    assert retention.condemned(segs, LogConfig(retention_bytes=0), T0, 7, 0) == 3


# -------------------------------------------------------------------- flush


@pytest.fixture
def syncs(monkeypatch):
    calls = []
    real_fdatasync, real_fsync = os.fdatasync, os.fsync

    def fdatasync(fd):
        calls.append(fd)
        real_fdatasync(fd)

    def fsync(fd):
        calls.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    monkeypatch.setattr(os, "fsync", fsync)
    return calls


def test_flush_messages_counts_records(tmp_path, syncs):
    log = Log.open(tmp_path / "t-0", LogConfig(flush_messages=5))
    syncs.clear()
    log.append(batch(n=2))
    log.append(batch(n=2))
    assert syncs == [] and log.flushed_offset == 0
    log.append(batch(n=2))                 # 6 unflushed records >= 5
    assert syncs and log.flushed_offset == 6
    syncs.clear()
    log.append(batch(n=4))
    assert syncs == [] and log.flushed_offset == 6
    assert not log.maybe_flush() and syncs == []
    log.append(batch(n=1))
    assert syncs and log.flushed_offset == 11


def test_flush_policy_left_to_caller(tmp_path, syncs):
    log = Log.open(tmp_path / "t-0", LogConfig(flush_messages=1))
    syncs.clear()
    log.append(batch(), apply_flush_policy=False)
    assert syncs == [] and log.flush_due()
    assert log.maybe_flush() and syncs and log.flushed_offset == 1
    assert not log.flush_due()


def test_flush_ms_by_age_of_oldest_unflushed_append(tmp_path, syncs):
    clock = Clock()
    log = Log.open(tmp_path / "t-0", LogConfig(flush_ms=1000), clock=clock)
    assert not log.maybe_flush()
    syncs.clear()
    log.append(batch())
    clock.now += 600
    log.append(batch())
    assert not log.maybe_flush() and syncs == [] and log.flushed_offset == 0
    clock.now += 500                       # the first append is now 1100 ms old
    assert log.maybe_flush() and syncs and log.flushed_offset == 2
    syncs.clear()
    clock.now += 5000
    assert not log.maybe_flush() and syncs == []       # nothing unflushed
    log.append(batch())                    # an old enough append is flushed on arrival
    clock.now += 1000
    log.append(batch())
    assert syncs and log.flushed_offset == 4


def test_rolled_segments_are_flushed_by_maybe_flush(tmp_path, syncs):
    one = len(batch())
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=2 * one))
    for _ in range(5):
        log.append(batch())
    syncs.clear()
    assert log.maybe_flush()               # no policy due, but rolled segments get fsynced
    assert syncs and log.flushed_offset == 4
    syncs.clear()
    assert not log.maybe_flush() and syncs == []
    log.flush()
    assert log.flushed_offset == 5


def test_rolled_segments_are_flushed_and_checkpointed_under_the_default_policy(tmp_path, syncs):
    clock = Clock()
    one = len(batch())
    d = tmp_path / "t-0"
    log = Log.open(d, LogConfig(segment_bytes=2 * one), clock=clock)
    assert not log.flush_pending()
    for _ in range(3):
        log.append(batch(), apply_flush_policy=False)
    assert bases(log) == [0, 2]
    # The default policy never asks for an fsync, but the rolled segment needs one.
    assert not log.flush_due() and log.flush_pending()
    rolled_fd = log._segments[0].fd
    syncs.clear()
    assert log.maybe_flush()
    assert rolled_fd in syncs and log._segments[1].fd not in syncs
    assert log.flushed_offset == 2 and read_offset(d / "recovery-point-offset") == 2
    assert not log.flush_pending()
    syncs.clear()
    assert not log.maybe_flush() and syncs == []
    clock.now += 3600_000                  # the active segment's data is left to the policy
    assert not log.flush_pending() and not log.maybe_flush() and syncs == []


def test_recovery_point_checkpoint_written_at_most_every_minute(tmp_path, syncs):
    clock = Clock()
    d = tmp_path / "t-0"
    log = Log.open(d, LogConfig(flush_ms=1000), clock=clock)   # checkpoint written at T0
    log.append(batch(), apply_flush_policy=False)
    clock.now += 1000
    assert log.flush_pending() and log.maybe_flush()
    assert log.flushed_offset == 1 and read_offset(d / "recovery-point-offset") == 0
    assert not log.flush_pending()
    clock.now = T0 + 59_999
    assert not log.flush_pending()
    clock.now = T0 + 60_000                # a minute after the last write, and it moved
    assert log.flush_pending()
    syncs.clear()
    assert log.maybe_flush() and syncs
    assert read_offset(d / "recovery-point-offset") == 1
    assert not log.flush_pending()
    clock.now += 10 * 60_000               # stale, but nothing moved: nothing to write
    syncs.clear()
    assert not log.flush_pending() and not log.maybe_flush() and syncs == []


def test_close_flushes(tmp_path, syncs):
    log = Log.open(tmp_path / "t-0", LogConfig())
    log.append(batch())
    syncs.clear()
    log.close()
    assert len(syncs) >= 2                 # the data, then the clean-shutdown marker


# ------------------------------------------------------------------- config


def test_config_from_kafka_properties():
    cfg = LogConfig.from_properties({
        "segment.bytes": "1048576", "segment.ms": "60000", "retention.bytes": "-1",
        "retention.ms": "-1", "flush.messages": "1", "flush.ms": "1000",
        "index.interval.bytes": "128", "segment.index.bytes": "4096",
        "message.timestamp.type": "LogAppendTime", "cleanup.policy": "delete",
    })
    assert cfg.cleanup_policy == ("delete",) == LogConfig().cleanup_policy
    assert (cfg.segment_bytes, cfg.segment_ms, cfg.retention_bytes, cfg.retention_ms) == (
        1048576, 60000, -1, -1)
    assert (cfg.flush_messages, cfg.flush_ms, cfg.index_interval_bytes,
            cfg.segment_index_bytes, cfg.message_timestamp_type) == (1, 1000, 128, 4096,
                                                                     "LogAppendTime")
    base = LogConfig(segment_bytes=123456)
    assert LogConfig.from_properties({"flush.ms": "5"}, base).segment_bytes == 123456
    assert LogConfig.from_properties({}) == LogConfig()


@pytest.mark.parametrize("raw,policy", [
    ("delete", ("delete",)), ("compact", ("compact",)), (" compact , delete ", ("compact", "delete")),
    ("delete,compact,delete", ("delete", "compact")), ("", ()),
])
def test_cleanup_policy_property(raw, policy):
    cfg = LogConfig.from_properties({"cleanup.policy": raw})
    assert cfg.cleanup_policy == policy
    assert cfg.delete_enabled == ("delete" in policy)


@pytest.mark.parametrize("key,value", [
    ("segment.bytes", "abc"), ("segment.bytes", "13"), ("segment.bytes", str(2**31)),
    ("segment.ms", "0"), ("retention.ms", "-2"), ("flush.messages", "0"),
    ("flush.ms", "-1"), ("index.interval.bytes", "1.5"), ("segment.index.bytes", "3"),
    ("message.timestamp.type", "WallClock"), ("retention.bytes", ""),
    ("cleanup.policy", "remove"), ("cleanup.policy", "delete,"), ("cleanup.policy", "Delete"),
    ("cleanup.policy", "delete;compact"),
])
def test_config_rejects_bad_values_naming_the_key(key, value):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        LogConfig.from_properties({key: value})
