"""Log compaction (core/log/cleaner.py)."""
from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.log import Log, LogConfig
from core.log import cleaner
from core.log.recovery import CLEANER_CHECKPOINT_FILE
from core.protocol.compression import Compression
from core.protocol.records import build_batch, iter_batch_headers, iter_records

T0 = 1_000_000_000


class Clock:
    def __init__(self, t: int = T0):
        self.t = t

    def __call__(self) -> int:
        return self.t


def config(**kw) -> LogConfig:
    base = dict(segment_bytes=400, cleanup_policy=("compact",), delete_retention_ms=10_000,
                index_interval_bytes=50)
    base.update(kw)
    return LogConfig(**base)


def open_log(d, cfg=None, clock=None) -> Log:
    return Log.open(d, cfg or config(), clock=clock or Clock())


def put(log: Log, key: bytes | None, value: bytes | None, ts: int | None = None, **kw):
    ts = log._clock() if ts is None else ts
    return log.append(build_batch([(key, value, [], ts)], **kw))


def read_all(log: Log, start: int | None = None) -> list:
    """Every record from `start` (default: the log start), via Log.read."""
    off = log.log_start_offset if start is None else start
    out = []
    while off < log.log_end_offset:
        r = log.read(off, 1 << 20)
        if not r.data:
            break
        for rec in iter_records(bytes(r.data)):
            if rec.offset >= off:
                out.append(rec)
        off = r.next_offset
    return out


def latest(records) -> dict:
    m = {}
    for rec in records:
        m[rec.key] = (rec.offset, rec.value)
    return m


def check_consistent(log: Log, model: dict, uncleaned_from: int | None = None) -> None:
    recs = read_all(log)
    offs = [r.offset for r in recs]
    assert offs == sorted(set(offs)), "offsets increase strictly"
    got = latest(recs)
    for key, (off, value) in model.items():
        if value is None:
            # a tombstone may be gone, but then so is every value of the key
            assert got.get(key, (off, None)) == (off, None)
        else:
            assert got[key] == (off, value)
    assert set(got) <= set(model)
    # every offset is a valid read position and lands on the next surviving record
    # (a read may return a batch with nothing at or after the offset; a consumer goes on
    # from its next_offset, as with Kafka)
    for target in range(log.log_start_offset, log.log_end_offset):
        later = [o for o in offs if o >= target]
        assert [r.offset for r in read_all(log, target)] == later


# ------------------------------------------------------------------ config


def test_config_parses_compaction_keys():
    cfg = LogConfig.from_properties({"delete.retention.ms": "5", "min.cleanable.dirty.ratio": "0.25",
                                     "min.compaction.lag.ms": "7", "max.compaction.lag.ms": "9",
                                     "cleanup.policy": "compact,delete"})
    assert (cfg.delete_retention_ms, cfg.min_cleanable_dirty_ratio, cfg.min_compaction_lag_ms,
            cfg.max_compaction_lag_ms) == (5, 0.25, 7, 9)
    assert cfg.compact_enabled and cfg.delete_enabled
    for bad in ({"min.cleanable.dirty.ratio": "1.5"}, {"min.cleanable.dirty.ratio": "x"},
                {"delete.retention.ms": "-1"}, {"max.compaction.lag.ms": "0"}):
        with pytest.raises(ValueError):
            LogConfig.from_properties(bad)
    assert LogConfig().delete_retention_ms == 86_400_000


# ------------------------------------------------------------------ basics


def test_keeps_last_value_of_every_key_and_offsets(tmp_path):
    log = open_log(tmp_path)
    model = {}
    for i in range(60):
        key = b"k%d" % (i % 7)
        r = put(log, key, b"v%d" % i)
        model[key] = (r.base_offset, b"v%d" % i)
    before = len(log.segments)
    res = cleaner.clean(log, T0)
    assert res.cleaned and res.records_removed > 0
    assert len(log.segments) < before
    check_consistent(log, model)
    log.close()
    log = open_log(tmp_path)
    check_consistent(log, model)


def test_not_compacted_topic_is_skipped(tmp_path):
    log = open_log(tmp_path, config(cleanup_policy=("delete",)))
    for i in range(30):
        put(log, b"k", b"v%d" % i)
    res = cleaner.clean(log, T0)
    assert res.skipped and not res.cleaned
    assert len(read_all(log)) == 30


def test_compact_delete_policy_is_cleaned(tmp_path):
    log = open_log(tmp_path, config(cleanup_policy=("compact", "delete")))
    for i in range(30):
        put(log, b"k", b"v%d" % i)
    assert cleaner.clean(log, T0).cleaned


def test_active_segment_untouched(tmp_path):
    log = open_log(tmp_path, config(segment_bytes=10_000))
    for i in range(20):
        put(log, b"k", b"v%d" % i)
    assert len(log.segments) == 1
    res = cleaner.clean(log, T0)
    assert res.skipped == "no closed segment"
    log.roll()
    put(log, b"k", b"last")
    active = log.segments[-1]
    data = active.path.read_bytes()
    res = cleaner.clean(log, T0)
    assert res.cleaned
    assert log.segments[-1].path.read_bytes() == data
    recs = read_all(log)
    assert [r.value for r in recs] == [b"v19", b"last"]   # the active one keeps its duplicate


def test_min_compaction_lag_respected(tmp_path):
    clock = Clock()
    log = open_log(tmp_path, config(min_compaction_lag_ms=5_000), clock)
    for i in range(10):
        put(log, b"k", b"old%d" % i, ts=T0 - 10_000)
    log.roll()
    for i in range(10):
        put(log, b"k", b"new%d" % i, ts=T0)
    log.roll()
    put(log, b"x", b"active")
    res = cleaner.clean(log, T0)
    # the second segment is too new: neither mapped nor rewritten
    recs = read_all(log)
    assert [r.value for r in recs if r.value.startswith(b"new")] == [b"new%d" % i for i in range(10)]
    assert [r.value for r in recs if r.value.startswith(b"old")] == [b"old9"]
    assert res.end_offset == 10
    res = cleaner.clean(log, T0 + 6_000)
    recs = read_all(log)
    assert [r.value for r in recs] == [b"new9", b"active"]


def test_tombstones_kept_then_removed_after_delete_retention(tmp_path):
    clock = Clock()
    log = open_log(tmp_path, config(delete_retention_ms=10_000), clock)
    put(log, b"a", b"1")
    put(log, b"b", b"1")
    put(log, b"a", None)
    log.roll()
    put(log, b"c", b"active")
    cleaner.clean(log, T0)
    recs = read_all(log)
    assert [(r.key, r.value) for r in recs] == [(b"b", b"1"), (b"a", None), (b"c", b"active")]
    # delete.retention.ms not yet over: still there
    cleaner.clean(log, T0 + 9_000)
    assert (b"a", None) in [(r.key, r.value) for r in read_all(log)]
    res = cleaner.clean(log, T0 + 10_001)
    assert res.tombstones_removed == 1
    assert [(r.key, r.value) for r in read_all(log)] == [(b"b", b"1"), (b"c", b"active")]


def test_fresh_tombstone_survives_first_clean_even_if_old(tmp_path):
    # a tombstone must be seen by one clean (lie below the checkpoint) before it may go
    log = open_log(tmp_path)
    put(log, b"a", b"1", ts=1)
    put(log, b"a", None, ts=2)
    log.roll()
    put(log, b"z", b"z")
    cleaner.clean(log, T0)
    assert [(r.key, r.value) for r in read_all(log)][0] == (b"a", None)
    cleaner.clean(log, T0)
    assert [(r.key, r.value) for r in read_all(log)] == [(b"z", b"z")]


def test_null_keys_dropped(tmp_path):
    log = open_log(tmp_path)
    put(log, None, b"x")
    put(log, b"k", b"v")
    log.roll()
    put(log, b"z", b"z")
    cleaner.clean(log, T0)
    assert [r.key for r in read_all(log)] == [b"k", b"z"]


def test_partial_batch_keeps_offsets_producer_fields_and_compression(tmp_path):
    log = open_log(tmp_path, config(segment_bytes=100_000))
    recs = [(b"k%d" % (i % 3), b"v%d" % i, [("h", b"x")], T0 + i) for i in range(9)]
    log.append(build_batch(recs, compression=Compression.GZIP, producer_id=7,
                           producer_epoch=2, base_sequence=100))
    put(log, b"k0", b"newer")
    log.roll()
    put(log, b"z", b"z")
    before = next(iter_batch_headers(log.read(0, 1 << 20).data))
    assert before.records_count == 9
    cleaner.clean(log, T0)
    data = bytes(log.read(0, 1 << 20).data)
    after = next(iter_batch_headers(data))
    assert after.base_offset == 0 and after.last_offset_delta == 8
    assert (after.producer_id, after.producer_epoch, after.base_sequence) == (7, 2, 100)
    assert after.compression == Compression.GZIP and after.records_count == 2
    got = [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in iter_records(data)]
    assert got[:2] == [(7, b"k1", b"v7", [("h", b"x")], T0 + 7),
                       (8, b"k2", b"v8", [("h", b"x")], T0 + 8)]
    assert after.max_timestamp == T0 + 8


def test_last_batch_of_producer_kept_empty(tmp_path):
    log = open_log(tmp_path)
    put(log, b"a", b"1", producer_id=5, producer_epoch=0, base_sequence=0)
    put(log, b"a", b"2")   # supersedes the producer's only record
    log.roll()
    put(log, b"z", b"z")
    cleaner.clean(log, T0)
    data = bytes(log.read(0, 1 << 20).data)
    headers = list(iter_batch_headers(data))
    assert headers[0].producer_id == 5 and headers[0].records_count == 0
    assert headers[0].base_offset == 0
    assert [r.value for r in read_all(log)] == [b"2", b"z"]
    log.close()
    log = open_log(tmp_path)   # the empty batch passes recovery
    assert [r.value for r in read_all(log)] == [b"2", b"z"]


def test_rerun_is_noop(tmp_path):
    log = open_log(tmp_path)
    for i in range(80):
        put(log, b"k%d" % (i % 9), b"value-%d" % i)
    cleaner.clean(log, T0)
    files = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    res = cleaner.clean(log, T0)
    assert not res.cleaned and res.groups_swapped == 0
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == files


def test_a_dedupe_buffer_too_small_for_one_batch_cleans_nothing_and_says_so(tmp_path, caplog):
    log = open_log(tmp_path, config(segment_bytes=100_000))
    for _ in range(2):
        log.append(build_batch([(b"k%d" % i, b"v", [], T0) for i in range(3)]))
    log.roll()
    put(log, b"z", b"z")
    before = read_all(log)
    buf = 24 * 2 * 10 // 9 + 1   # room for 2 keys; each batch holds 3
    assert cleaner.max_map_entries(buf) == 2
    with caplog.at_level("WARNING", logger="core.log.cleaner"):
        res = cleaner.clean(log, T0, dedupe_buffer_size=buf)
    assert res.map_full and res.end_offset == 0 and not res.cleaned
    assert "cannot hold one batch" in caplog.text
    assert [(r.offset, r.key) for r in read_all(log)] == [(r.offset, r.key) for r in before]


def test_small_dedupe_buffer_cleans_a_prefix(tmp_path):
    log = open_log(tmp_path, config(segment_bytes=100_000))
    for i in range(60):
        put(log, b"k%d" % i, b"a")
    for i in range(60):
        put(log, b"k%d" % i, b"b")
    log.roll()
    put(log, b"z", b"z")
    model = latest(read_all(log))
    buf = 24 * 50 * 10 // 9 + 1   # room for 50 keys
    assert cleaner.max_map_entries(buf) == 50
    res = cleaner.clean(log, T0, dedupe_buffer_size=buf)
    assert res.map_full and res.end_offset == 50
    assert len(read_all(log)) == 121   # keys 0..49 are new in the mapped prefix
    runs = 1
    while res.end_offset < 120:
        res = cleaner.clean(log, T0, dedupe_buffer_size=buf)
        runs += 1
        assert runs < 10
    assert sorted(r.value for r in read_all(log)) == [b"b"] * 60 + [b"z"]
    check_consistent(log, model)


def test_commit_aborts_if_log_changed(tmp_path):
    log = open_log(tmp_path)
    for i in range(40):
        put(log, b"k", b"v%d" % i)
    plan = cleaner.prepare(log, T0)
    assert any(p.exists() for p in plan.paths)
    log.truncate_to(5)
    res = cleaner.commit(plan)
    assert res.aborted and not res.cleaned
    assert not list(tmp_path.glob("*.cleaned"))
    assert [r.value for r in read_all(log)] == [b"v%d" % i for i in range(5)]
    assert not (tmp_path / CLEANER_CHECKPOINT_FILE).exists()


def test_needs_cleaning(tmp_path):
    clock = Clock()
    log = open_log(tmp_path, config(min_cleanable_dirty_ratio=0.5), clock)
    assert not cleaner.needs_cleaning(log, T0)
    for i in range(40):
        put(log, b"k", b"v%d" % i)
    assert cleaner.needs_cleaning(log, T0)
    cleaner.clean(log, T0)
    assert not cleaner.needs_cleaning(log, T0)
    log.update_config(config(min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=1000))
    for i in range(8):
        put(log, b"k", b"w%d" % i)
    assert cleaner.dirty_ratio(log, T0) < 0.99
    assert not cleaner.needs_cleaning(log, T0)
    assert cleaner.needs_cleaning(log, T0 + 2000)


# ------------------------------------------------------------------ crashes


class Crash(Exception):
    pass


# (step, which occurrence): the commit swaps several groups, so crash in the first and
# in a later one; "cleaned" happens once per clean (after prepare), "checkpoint" once.
CRASHES = [("cleaned", 1), ("swap", 1), ("swap", 2), ("deleted", 1), ("deleted", 2),
           ("renamed", 1), ("renamed", 2), ("checkpoint", 1)]


@pytest.mark.parametrize("step,nth", CRASHES)
def test_crash_at_each_step_recovers(tmp_path, step, nth):
    cfg = config()
    log = open_log(tmp_path, cfg)
    model = {}
    for i in range(70):
        key = b"k%d" % (i // 2 % 30)   # neighbours share keys: every segment changes
        value = None if i % 13 == 12 else b"v%d" % i
        r = put(log, key, value)
        model[key] = (r.base_offset, value)
    original = {r.offset: (r.key, r.value) for r in read_all(log)}
    leo = log.log_end_offset
    # force two groups so "nth" can crash in the middle of a multi-group commit
    log.update_config(config(segment_bytes=250))
    seen = []

    def hook(s):
        seen.append(s)
        if s == step and seen.count(s) == nth:
            raise Crash(s)

    with pytest.raises(Crash):
        cleaner.clean(log, T0, hook=hook)
    if step == "cleaned":
        assert list(tmp_path.glob("*.log.cleaned"))
    elif step in ("swap", "deleted"):
        assert list(tmp_path.glob("*.log.swap"))
    log._abandon()
    log = open_log(tmp_path, cfg)
    assert not list(tmp_path.glob("*.cleaned")) and not list(tmp_path.glob("*.swap"))
    assert log.log_end_offset == leo
    recs = read_all(log)
    for rec in recs:   # nothing invented: every surviving record is an original one
        assert original[rec.offset] == (rec.key, rec.value)
    check_consistent(log, model)
    # a later clean finishes the job
    cleaner.clean(log, T0)
    check_consistent(log, model)
    log.close()
    log = open_log(tmp_path, cfg)
    check_consistent(log, model)


def test_swap_recovery_with_missing_index_swap(tmp_path):
    # crash after the index swaps were renamed into place but before the log's
    cfg = config()
    log = open_log(tmp_path, cfg)
    model = {}
    for i in range(40):
        r = put(log, b"k%d" % (i % 3), b"v%d" % i)
        model[b"k%d" % (i % 3)] = (r.base_offset, b"v%d" % i)
    plan = cleaner.prepare(log, T0)
    stem = "%020d" % 0
    for kind in ("index", "timeindex"):
        os.replace(tmp_path / f"{stem}.{kind}.cleaned", tmp_path / f"{stem}.{kind}")
    os.replace(tmp_path / f"{stem}.log.cleaned", tmp_path / f"{stem}.log.swap")
    log._abandon()
    log = open_log(tmp_path, cfg)
    check_consistent(log, model)
    assert plan.groups


# ------------------------------------------------------------------ model


ops = st.lists(st.tuples(st.integers(0, 8), st.one_of(st.none(), st.binary(min_size=0, max_size=12)),
                         st.integers(1, 4)),
               min_size=1, max_size=80)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(stream=ops, cleans=st.lists(st.integers(0, 79), max_size=4),
       advance=st.integers(0, 20_000), segment_bytes=st.sampled_from([150, 400, 2000]),
       compressed=st.booleans(), idempotent=st.booleans())
def test_model(tmp_path_factory, stream, cleans, advance, segment_bytes, compressed,
               idempotent):
    d = tmp_path_factory.mktemp("m")
    clock = Clock()
    cfg = config(segment_bytes=segment_bytes)
    log = open_log(d, cfg, clock)
    model: dict = {}
    for i, (k, v, n) in enumerate(stream):
        batch = []
        for j in range(n):
            key = b"key%d" % ((k + j) % 9)
            batch.append((key, v, [], clock.t))
        extra = dict(producer_id=1, producer_epoch=0, base_sequence=i * 10) if idempotent else {}
        r = log.append(build_batch(batch, compression=Compression.GZIP if compressed and i % 2
                                   else Compression.NONE, **extra))
        for j, (key, value, _h, _t) in enumerate(batch):
            model[key] = (r.base_offset + j, value)
        if i in cleans:
            cleaner.clean(log, clock.t)
        clock.t += 1
    check_consistent(log, model)
    log.roll()
    cleaner.clean(log, clock.t)
    check_consistent(log, model)
    clock.t += advance
    cleaner.clean(log, clock.t)
    check_consistent(log, model)
    if advance > cfg.delete_retention_ms:
        got = latest(read_all(log))
        assert all(v is not None for _o, v in got.values()), "expired tombstones removed"
        assert set(got) == {k for k, (_o, v) in model.items() if v is not None}
    files = {p.name: p.read_bytes() for p in d.iterdir()}
    res = cleaner.clean(log, clock.t)
    assert not res.cleaned
    assert {p.name: p.read_bytes() for p in d.iterdir()} == files
    if idempotent:   # the producer's last batch is still there, maybe empty
        heads = []
        off = 0
        while off < log.log_end_offset:
            r = log.read(off, 1 << 20)
            heads += list(iter_batch_headers(bytes(r.data)))
            off = r.next_offset
        assert heads[-1].producer_id == 1
        assert heads[-1].base_sequence == (len(stream) - 1) * 10
    log.close()
    log = open_log(d, cfg, clock)
    check_consistent(log, model)
    log.close()


def test_truncation_lowers_cleaner_checkpoint(tmp_path):
    log = open_log(tmp_path)
    put(log, b"a", b"1")
    for i in range(30):
        put(log, b"k", b"v%d" % i)
    cleaner.clean(log, T0)
    cp = cleaner.first_dirty_offset(log)
    assert cp > 10
    log.truncate_to(5)
    assert cleaner.first_dirty_offset(log) == 5
    # new data past the old checkpoint is dirty again: a tombstone then a value must not
    # both be taken for already-cleaned data
    for i in range(40):
        put(log, b"a", None if i == 0 else b"x%d" % i)
    model = latest(read_all(log))
    cleaner.clean(log, T0 + 100_000)
    cleaner.clean(log, T0 + 100_000)
    check_consistent(log, model)
    log.truncate_fully_and_start_at(3)
    assert cleaner.first_dirty_offset(log) == 3


def test_prepare_in_a_thread_while_appending_and_reading(tmp_path):
    import threading
    log = open_log(tmp_path)
    model = {}
    for i in range(60):
        key = b"k%d" % (i % 5)
        model[key] = (put(log, key, b"v%d" % i).base_offset, b"v%d" % i)
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("plan", cleaner.prepare(log, T0)))
    t.start()
    for i in range(60, 120):   # the owner keeps appending and reading meanwhile
        key = b"k%d" % (i % 5)
        model[key] = (put(log, key, b"v%d" % i).base_offset, b"v%d" % i)
        read_all(log, max(0, log.log_end_offset - 3))
    t.join()
    res = cleaner.commit(box["plan"])
    assert res.cleaned and not res.aborted
    check_consistent(log, model)
    cleaner.clean(log, T0)
    check_consistent(log, model)


def test_upper_bound_offset_high_watermark(tmp_path):
    log = open_log(tmp_path, config(segment_bytes=100_000))
    for i in range(10):
        put(log, b"k", b"a%d" % i)
    log.roll()
    for i in range(10):
        put(log, b"k", b"b%d" % i)
    log.roll()
    put(log, b"z", b"z")
    res = cleaner.clean(log, T0, upper_bound_offset=15)   # the second segment is above it
    assert res.end_offset == 10
    assert [r.value for r in read_all(log)] == [b"a9"] + [b"b%d" % i for i in range(10)] + [b"z"]
    cleaner.clean(log, T0)
    assert [r.value for r in read_all(log)] == [b"b9", b"z"]
