"""`seaway groups reset-offsets` planning: kafka-consumer-groups' rules as a pure function.

Every case is (partitions, committed, log start, log end, strategy) -> new offsets; the
strategies clamp to [log start, log end] the way ConsumerGroupCommand.checkOffsetsRange does.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from core.cli.reset_plan import (ResetSpec, parse_datetime, parse_duration, parse_reset_spec,
                                 parse_topic_partitions, plan_reset)

A0, A1, B0 = ("a", 0), ("a", 1), ("b", 0)
START = {A0: 10, A1: 0, B0: 5}
END = {A0: 100, A1: 50, B0: 5}          # b-0 is empty above its start (start == end)
COMMITTED = {A0: 40, A1: 50, B0: None}


@pytest.mark.parametrize("spec, expected, clamped", [
    (ResetSpec("earliest"), {A0: 10, A1: 0, B0: 5}, 0),
    (ResetSpec("latest"), {A0: 100, A1: 50, B0: 5}, 0),
    (ResetSpec("offset", 30), {A0: 30, A1: 30, B0: 5}, 1),       # b-0: 30 > end 5
    (ResetSpec("offset", 0), {A0: 10, A1: 0, B0: 5}, 2),         # a-0 below start 10, b-0 below 5
    (ResetSpec("offset", 10_000), {A0: 100, A1: 50, B0: 5}, 3),  # all above their ends
    (ResetSpec("offset", 10), {A0: 10, A1: 10, B0: 5}, 1),       # exactly the start: no clamp
])
def test_absolute_strategies(spec, expected, clamped):
    plan = plan_reset([A0, A1, B0], spec, committed=COMMITTED, log_start=START, log_end=END)
    assert plan.offsets == expected
    assert len(plan.notes) == clamped


@pytest.mark.parametrize("shift, expected", [
    (0, {A0: 40, A1: 50}),
    (-5, {A0: 35, A1: 45}),
    (+5, {A0: 45, A1: 50}),      # a-1 committed at its end: +5 is clamped to 50
    (-35, {A0: 10, A1: 15}),     # a-0 would be 5, below its start 10
    (-1000, {A0: 10, A1: 0}),
    (1000, {A0: 100, A1: 50}),
])
def test_shift_by_moves_from_the_committed_offset_and_clamps(shift, expected):
    plan = plan_reset([A0, A1], ResetSpec("shift", shift), committed=COMMITTED, log_start=START, log_end=END)
    assert plan.offsets == expected


def test_shift_needs_a_committed_offset():
    with pytest.raises(ValueError, match=r"--shift-by.*b-0"):
        plan_reset([A0, B0], ResetSpec("shift", 1), committed=COMMITTED, log_start=START, log_end=END)


def test_timestamp_uses_the_lookup_and_falls_back_to_the_end():
    found = {A0: 42, A1: -1, B0: None}   # -1 / None: no record that recent
    plan = plan_reset([A0, A1, B0], ResetSpec("timestamp", 1_700_000_000_000), committed=COMMITTED,
                      log_start=START, log_end=END, offsets_for_time=found)
    assert plan.offsets == {A0: 42, A1: 50, B0: 5}
    assert len(plan.notes) == 2 and all("log end" in n for n in plan.notes)


def test_plan_is_sorted_and_deduplicated():
    plan = plan_reset([B0, A1, A0, A1], ResetSpec("earliest"), committed={}, log_start=START, log_end=END)
    assert list(plan.offsets) == [A0, A1, B0]


def test_partitions_without_commit_get_absolute_resets():
    plan = plan_reset([B0], ResetSpec("latest"), committed={}, log_start=START, log_end=END)
    assert plan.offsets == {B0: 5}


# ------------------------------------------------------------------------- parsing the flags

NOW = 1_700_000_000_000


def opts(**given):
    base = dict.fromkeys(["to_earliest", "to_latest", "to_offset", "shift_by", "to_datetime", "by_duration"])
    base.update(given)
    return base


@pytest.mark.parametrize("given, expected", [
    (dict(to_earliest=True), ResetSpec("earliest")),
    (dict(to_latest=True), ResetSpec("latest")),
    (dict(to_offset="17"), ResetSpec("offset", 17)),
    (dict(shift_by="-3"), ResetSpec("shift", -3)),
    (dict(shift_by="+4"), ResetSpec("shift", 4)),
    (dict(by_duration="PT10M"), ResetSpec("timestamp", NOW - 600_000)),
    (dict(to_datetime="2023-11-14T22:13:20Z"), ResetSpec("timestamp", 1_700_000_000_000)),
])
def test_parse_reset_spec(given, expected):
    assert parse_reset_spec(opts(**given), NOW) == expected


@pytest.mark.parametrize("given, needle", [
    (dict(), "give one of"),
    (dict(to_earliest=True, to_latest=True), "only one of"),
    (dict(to_offset="5", shift_by="1"), "only one of"),
    (dict(to_offset="abc"), "--to-offset"),
    (dict(to_offset="-1"), "--to-offset"),
    (dict(to_offset="1.5"), "--to-offset"),
    (dict(shift_by="x"), "--shift-by"),
    (dict(to_datetime="yesterday"), "--to-datetime"),
    (dict(to_datetime="2024-13-01T00:00:00"), "--to-datetime"),
    (dict(by_duration="10m"), "--by-duration"),
    (dict(by_duration="PT"), "--by-duration"),
    (dict(by_duration="P1DT"), "--by-duration"),
])
def test_bad_flags_name_the_flag(given, needle):
    with pytest.raises(ValueError, match=needle):
        parse_reset_spec(opts(**given), NOW)


@pytest.mark.parametrize("text, ms", [
    ("PT10M", 600_000), ("PT1H30M", 5_400_000), ("P1D", 86_400_000), ("P1DT2H", 93_600_000),
    ("PT0.5S", 500), ("pt45s", 45_000), ("PT1M0.25S", 60_250),
])
def test_parse_duration(text, ms):
    assert parse_duration(text) == ms


def test_parse_datetime_zones_and_local_time():
    assert parse_datetime("2023-11-14T22:13:20.000+00:00") == 1_700_000_000_000
    assert parse_datetime("2023-11-14T23:13:20+01:00") == 1_700_000_000_000
    local = datetime(2024, 5, 1, 12, 0, 0)   # no zone: local time, as Kafka reads it
    assert parse_datetime("2024-05-01T12:00:00") == int(local.timestamp() * 1000)
    utc = datetime(2024, 5, 1, tzinfo=timezone.utc) + timedelta(milliseconds=123)
    assert parse_datetime("2024-05-01T00:00:00.123Z") == int(utc.timestamp() * 1000)


@pytest.mark.parametrize("spec, expected", [
    ("orders", ("orders", None)),
    ("orders:0", ("orders", [0])),
    ("orders:2,0,2", ("orders", [0, 2])),
    ("my.topic-1: 1 , 3", ("my.topic-1", [1, 3])),
])
def test_parse_topic_partitions(spec, expected):
    assert parse_topic_partitions(spec) == expected


@pytest.mark.parametrize("spec", [":0", "orders:", "orders:a", "orders:-1", "orders:1,,2"])
def test_bad_topic_specs(spec):
    with pytest.raises(ValueError, match="--topic"):
        parse_topic_partitions(spec)
