"""Fetch sessions (KIP-227) without I/O: the broker's cache (core/broker/fetch_session.py) and
the fetcher's handler (core/client/fetch_session.py)."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.broker.fetch_session import CachedPartition, FetchSessionCache, next_epoch
from core.client.fetch_session import FetchSessionHandler
from core.protocol.errors import ErrorCode


def entry(offset: int = 0) -> CachedPartition:
    return CachedPartition(offset, 1 << 20, 0, -1, 0)


# --- the broker's cache ---------------------------------------------------------------------

def filled(slots: int, *sizes_and_privilege, now=0) -> FetchSessionCache:
    cache = FetchSessionCache(slots, eviction_ms=1000, rng=random.Random(1))
    for size, privileged in sizes_and_privilege:
        session, evicted = cache.maybe_create(privileged, True, size, now)
        assert session is not None and evicted is None
        for i in range(size):
            session.partitions[("t", i)] = entry()
    return cache


@pytest.mark.parametrize("existing, new, now, evicts", [
    # (size, privileged) of the one session in a full cache; the new one; the time; evicted?
    ((10, False), (5, False), 0, False),      # smaller, same class: no room
    ((10, False), (10, False), 0, False),     # equal: no room (strictly larger only)
    ((10, False), (11, False), 0, True),      # larger, same class
    ((10, False), (1, True), 0, True),        # a follower's session outranks a consumer's
    ((1, True), (100, False), 0, False),      # a consumer never evicts a follower's session
    ((1, True), (2, True), 0, True),          # a larger follower session evicts a smaller one
    ((100, True), (1, False), 1001, True),    # unused longer than the eviction time: anyone
    ((100, True), (1, False), 1000, False),   # not yet stale
])
def test_a_full_cache_evicts_as_kafka_does(existing, new, now, evicts):
    cache = filled(1, existing)
    old = next(iter(cache.sessions.values()))
    session, evicted = cache.maybe_create(new[1], True, new[0], now)
    assert (session is not None) == evicts
    assert (evicted is old or old in cache.expired) == evicts
    assert len(cache) == 1
    assert cache.evictions == int(evicts)
    if evicts:
        assert old.closed and cache.get(old.id) is None


def test_the_stalest_session_goes_first():
    cache = FetchSessionCache(2, eviction_ms=100)
    a, _ = cache.maybe_create(True, True, 50, now_ms=0)
    b, _ = cache.maybe_create(True, True, 50, now_ms=0)
    a.last_used_ms, b.last_used_ms = 500, 300
    c, evicted = cache.maybe_create(False, True, 1, now_ms=450)
    assert cache.expired == [b] and evicted is None and c is not None
    assert sorted(cache.sessions) == sorted([a.id, c.id])


def test_opening_a_session_drops_the_ones_unused_past_the_eviction_time():
    cache = FetchSessionCache(10, eviction_ms=100)
    old, _ = cache.maybe_create(False, True, 1, now_ms=0)
    fresh, _ = cache.maybe_create(False, True, 1, now_ms=90)
    new, evicted = cache.maybe_create(False, True, 1, now_ms=150)
    assert evicted is None and cache.expired == [old] and old.closed
    assert sorted(cache.sessions) == sorted([fresh.id, new.id])


def test_no_slots_means_no_sessions():
    cache = FetchSessionCache(0)
    assert cache.maybe_create(True, True, 10, 0) == (None, None)


def test_session_ids_are_unique_and_never_zero():
    cache = FetchSessionCache(500, rng=random.Random(7))
    ids = {cache.maybe_create(False, True, 1, 0)[0].id for _ in range(500)}
    assert len(ids) == 500 and 0 not in ids


@pytest.mark.parametrize("epoch, expected", [(0, 1), (1, 2), (2**31 - 2, 2**31 - 1), (2**31 - 1, 1)])
def test_epochs_wrap_to_one(epoch, expected):
    assert next_epoch(epoch) == expected


def test_update_adds_changes_and_forgets_and_marks_named_dirty():
    cache = filled(1, (3, False))
    s = next(iter(cache.sessions.values()))
    s.take_dirty()
    s.partitions[("t", 1)].sent_high_watermark = 9
    gone = s.update({("t", 1): entry(42), ("t", 7): entry(5)}, [("t", 0), ("t", 7), ("x", 0)])
    assert [g.fetch_offset for g in gone] == [0]
    assert sorted(s.partitions) == [("t", 1), ("t", 2), ("t", 7)]   # named and forgotten: kept
    assert s.partitions[("t", 1)].fetch_offset == 42
    assert s.partitions[("t", 1)].sent_high_watermark == 9           # what was sent survives
    assert s.take_dirty() == [("t", 1), ("t", 7)]


def test_mark_dirty_wakes_and_ignores_keys_not_held():
    cache = filled(1, (2, False))
    s = next(iter(cache.sessions.values()))
    s.take_dirty()
    woken = []
    s.add_waker(lambda: woken.append(1))
    s.mark_dirty(("other", 0))
    assert woken == [] and s.take_dirty() == []
    s.mark_dirty(("t", 1))
    assert woken == [1] and s.take_dirty() == [("t", 1)]


# --- the fetcher's handler ------------------------------------------------------------------

def test_first_request_is_full_then_incremental_names_only_changes():
    h = FetchSessionHandler()
    for i in range(3):
        h.want(("t", i), (0,))
    plan = h.build()
    assert (plan.session_id, plan.epoch, plan.full) == (0, 0, True)
    assert sorted(plan.partitions) == [("t", 0), ("t", 1), ("t", 2)]
    assert h.handle_response(plan, 0, 77)
    h.want(("t", 0), (0,))            # unchanged: not named
    h.want(("t", 1), (5,))            # moved
    h.drop(("t", 2))
    plan = h.build()
    assert (plan.session_id, plan.epoch, plan.full) == (77, 1, False)
    assert plan.partitions == {("t", 1): (5,)} and plan.forgotten == [("t", 2)]
    assert h.handle_response(plan, 0, 77)
    plan = h.build()
    assert (plan.epoch, plan.partitions, plan.forgotten) == (2, {}, [])


@pytest.mark.parametrize("error, session_after", [
    (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0),     # the broker forgot it: ask for a new one
    (ErrorCode.INVALID_FETCH_SESSION_EPOCH, 77),   # close it (same id, epoch 0) and start over
    (ErrorCode.UNKNOWN_SERVER_ERROR, 77),
])
def test_a_session_error_sends_everything_again(error, session_after):
    h = FetchSessionHandler()
    h.want(("t", 0), (0,))
    h.want(("t", 1), (0,))
    h.handle_response(h.build(), 0, 77)
    h.want(("t", 1), (3,))
    h.drop(("t", 0))
    h.want(("t", 2), (0,))
    plan = h.build()
    assert not h.handle_response(plan, error, 0)
    again = h.build()
    assert (again.session_id, again.epoch) == (session_after, 0)
    assert again.partitions == {("t", 1): (3,), ("t", 2): (0,)}


def test_a_lost_answer_closes_the_session_with_a_full_request():
    h = FetchSessionHandler()
    h.want(("t", 0), (0,))
    h.handle_response(h.build(), 0, 5)
    h.want(("t", 0), (9,))
    h.build()
    h.handle_failure()
    plan = h.build()
    assert (plan.session_id, plan.epoch, plan.partitions) == (5, 0, {("t", 0): (9,)})


def test_a_broker_without_room_keeps_getting_full_requests():
    h = FetchSessionHandler()
    h.want(("t", 0), (0,))
    assert h.handle_response(h.build(), 0, 0)
    plan = h.build()
    assert (plan.session_id, plan.epoch, plan.partitions) == (0, 0, {("t", 0): (0,)})


def test_an_old_broker_gets_sessionless_full_requests():
    h = FetchSessionHandler()
    h.want(("t", 0), (0,))
    plan = h.build(sessions=False)
    assert (plan.session_id, plan.epoch) == (0, -1)
    assert h.handle_response(plan, 0, 0)
    assert h.build(sessions=False).partitions == {("t", 0): (0,)}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["want", "drop", "send", "fail", "lose"]),
                          st.integers(0, 4), st.integers(0, 3)), max_size=60))
def test_the_broker_session_always_ends_up_holding_what_the_fetcher_wants(ops):
    """Play the handler against a model of the broker's session: after every answered
    request, the broker holds exactly the partitions the fetcher wants, with their latest
    parameters, whatever mix of changes, session losses and lost answers came before."""
    h = FetchSessionHandler()
    wanted: dict = {}
    broker: dict | None = None   # the broker's session, None when it has none for us
    broker_id, broker_epoch = 0, 0
    for op, p, value in ops:
        key = ("t", p)
        if op == "want":
            h.want(key, (value,))
            wanted[key] = (value,)
        elif op == "drop":
            h.drop(key)
            wanted.pop(key, None)
        else:
            plan = h.build()
            if plan.full:
                broker, broker_id, broker_epoch = dict(plan.partitions), 99, 1
                error = 0
            elif broker is None or plan.session_id != broker_id:
                error = ErrorCode.FETCH_SESSION_ID_NOT_FOUND
            elif plan.epoch != broker_epoch:
                error = ErrorCode.INVALID_FETCH_SESSION_EPOCH
            else:
                broker.update(plan.partitions)
                for k in plan.forgotten:
                    broker.pop(k, None)
                broker_epoch = next_epoch(broker_epoch)
                error = 0
            if op == "lose":      # the broker restarted: its sessions are gone
                broker = None
                h.handle_response(plan, ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0)
            elif op == "fail":    # the answer never came
                h.handle_failure()
            elif h.handle_response(plan, error, broker_id if plan.full else plan.session_id):
                assert broker == wanted
