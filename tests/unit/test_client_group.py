"""A consumer group member's state machine (core/client/group_state.py), without sockets.

Each test feeds MemberCore the responses a coordinator would send (real message objects) and a
fake clock, and checks the step the driver is told to take and the member's state. The
tables follow Java's AbstractCoordinator / ConsumerCoordinator handling of each error code.
"""
from __future__ import annotations

import pytest

from core.client.group_state import NO_GENERATION, MemberCore, MemberState, Step
from core.protocol import messages as m
from core.protocol.errors import ErrorCode as E
from core.protocol.errors import KafkaError

SESSION, HEARTBEAT, REBALANCE, BACKOFF = 10_000, 1_000, 60_000, 100


def core(instance: str | None = None) -> MemberCore:
    return MemberCore("g", group_instance_id=instance, session_timeout_ms=SESSION,
                      heartbeat_interval_ms=HEARTBEAT, rebalance_timeout_ms=REBALANCE, retry_backoff_ms=BACKOFF)


def join_ok(member="m1", generation=4, leader="m1", protocol="range", ptype="consumer", members=()):
    return m.JoinGroupResponse(error_code=0, generation_id=generation, protocol_type=ptype, protocol_name=protocol,
                               leader=leader, member_id=member, members=list(members))


def join_err(code, member=""):
    return m.JoinGroupResponse(error_code=code, generation_id=-1, member_id=member, leader="", members=[])


def sync(code=0, ptype=None, pname=None):
    return m.SyncGroupResponse(error_code=code, protocol_type=ptype, protocol_name=pname, assignment=b"")


def stable(c: MemberCore, now=0.0, **kw) -> MemberCore:
    c.join_sent()
    assert c.on_join_response(join_ok(**kw), 9) is Step.SYNC
    c.joined_at(now)
    assert c.on_sync_response(sync(), 5) is Step.OK
    return c


# ---------------------------------------------------------------------------- joining

def test_kip394_member_id_required_then_join():
    c = core()
    assert c.rejoin_needed and c.state is MemberState.UNJOINED
    c.join_sent()
    assert c.state is MemberState.JOINING and c.rejoin_reason is None
    assert c.on_join_response(join_err(E.MEMBER_ID_REQUIRED, member="m-given"), 9) is Step.REJOIN
    assert c.member_id == "m-given" and c.state is MemberState.UNJOINED
    c.join_sent()
    assert c.on_join_response(join_ok(member="m-given", leader="other", generation=7), 9) is Step.SYNC
    assert (c.state, c.generation, c.is_leader, c.protocol_name) == (MemberState.SYNCING, 7, False, "range")
    assert c.on_sync_response(sync(ptype="consumer", pname="range"), 5) is Step.OK
    assert c.state is MemberState.STABLE and not c.rejoin_needed


def test_leader_is_the_member_the_coordinator_names():
    c = core()
    c.join_sent()
    c.on_join_response(join_ok(member="me", leader="me", members=[
        m.JoinGroupResponse.JoinGroupResponseMember(member_id="me", metadata=b"x")]), 9)
    assert c.is_leader and len(c.members) == 1


JOIN_ERRORS = [
    # code, step, member id kept?, fatal?
    (E.UNKNOWN_MEMBER_ID, Step.REJOIN, False, False),
    (E.ILLEGAL_GENERATION, Step.REJOIN, False, False),
    (E.NOT_COORDINATOR, Step.REDISCOVER, True, False),
    (E.COORDINATOR_NOT_AVAILABLE, Step.REDISCOVER, True, False),
    (E.COORDINATOR_LOAD_IN_PROGRESS, Step.BACKOFF, True, False),
    (E.REBALANCE_IN_PROGRESS, Step.BACKOFF, True, False),
    (E.FENCED_INSTANCE_ID, Step.FATAL, True, True),
    (E.INCONSISTENT_GROUP_PROTOCOL, Step.FAIL, True, False),
    (E.GROUP_MAX_SIZE_REACHED, Step.FAIL, True, False),
    (E.INVALID_SESSION_TIMEOUT, Step.FAIL, True, False),
    (E.GROUP_AUTHORIZATION_FAILED, Step.FAIL, True, False),
]


@pytest.mark.parametrize("code,step,keeps_member,fatal", JOIN_ERRORS, ids=[e[0].name for e in JOIN_ERRORS])
def test_join_errors(code, step, keeps_member, fatal):
    c = stable(core("inst"), member="m1", generation=4)
    c.request_rejoin("test")
    c.join_sent()
    assert c.on_join_response(join_err(code), 9) is step
    assert c.state is MemberState.UNJOINED and c.rejoin_needed
    assert (c.member_id == "m1") is keeps_member
    if not keeps_member:
        assert c.generation == NO_GENERATION
    if step in (Step.FAIL, Step.FATAL):
        err = c.take_error()
        assert isinstance(err, KafkaError) and err.code == code
    assert (c.fatal is not None) is fatal
    if fatal:  # fatal errors stay: every later poll raises them
        assert c.take_error().code == E.FENCED_INSTANCE_ID
        with pytest.raises(KafkaError, match="FENCED_INSTANCE_ID"):
            c.commit_identity(subscribed=True)
    else:
        assert c.take_error() is None


def test_join_with_another_protocol_type_is_refused():
    c = core()
    c.join_sent()
    assert c.on_join_response(join_ok(ptype="connect"), 7) is Step.FAIL
    assert c.take_error().code == E.INCONSISTENT_GROUP_PROTOCOL
    assert c.state is MemberState.UNJOINED
    # before v7 the response carries no protocol type: nothing to check
    c.join_sent()
    assert c.on_join_response(join_ok(ptype=None), 6) is Step.SYNC


SYNC_ERRORS = [
    (E.REBALANCE_IN_PROGRESS, Step.REJOIN, True),
    (E.UNKNOWN_MEMBER_ID, Step.REJOIN, False),
    (E.ILLEGAL_GENERATION, Step.REJOIN, False),
    (E.NOT_COORDINATOR, Step.REDISCOVER, True),
    (E.COORDINATOR_NOT_AVAILABLE, Step.REDISCOVER, True),
    (E.FENCED_INSTANCE_ID, Step.FATAL, True),
    (E.GROUP_AUTHORIZATION_FAILED, Step.FAIL, True),
]


@pytest.mark.parametrize("code,step,keeps_generation", SYNC_ERRORS, ids=[e[0].name for e in SYNC_ERRORS])
def test_sync_errors(code, step, keeps_generation):
    c = core()
    c.join_sent()
    c.on_join_response(join_ok(generation=8), 9)
    assert c.on_sync_response(sync(code), 5) is step
    assert c.state is MemberState.UNJOINED and c.rejoin_needed
    assert (c.generation == 8) is keeps_generation


def test_sync_answer_for_another_protocol_is_refused():
    c = core()
    c.join_sent()
    c.on_join_response(join_ok(protocol="range"), 9)
    assert c.on_sync_response(sync(ptype="consumer", pname="roundrobin"), 5) is Step.FAIL
    assert c.take_error().code == E.INCONSISTENT_GROUP_PROTOCOL and c.rejoin_needed


def test_a_rejoin_requested_during_a_join_survives_it():
    c = core()
    c.join_sent()
    c.request_rejoin("subscription changed")  # while the JoinGroup is parked
    c.on_join_response(join_ok(), 9)
    c.on_sync_response(sync(), 5)
    assert c.state is MemberState.STABLE and c.rejoin_needed


def test_interrupted_join_keeps_member_and_generation():
    c = stable(core(), member="m1", generation=3)
    c.request_rejoin("x")
    c.join_sent()
    c.join_interrupted("connection lost")
    assert (c.state, c.member_id, c.generation, c.rejoin_needed) == (MemberState.UNJOINED, "m1", 3, True)


# ---------------------------------------------------------------------------- heartbeats

def test_heartbeats_only_with_a_generation():
    c = core()
    assert c.time_to_heartbeat(0) is None
    c.join_sent()
    assert c.time_to_heartbeat(0) is None  # JoinGroup parked: nothing to heartbeat for
    c.on_join_response(join_ok(), 9)
    c.joined_at(1000)
    assert c.time_to_heartbeat(1000) == HEARTBEAT  # from SyncGroup on (the leader may be slow)
    c.on_sync_response(sync(), 5)
    assert c.time_to_heartbeat(1000 + HEARTBEAT) == 0
    c.heartbeat_sent(2000)
    assert c.time_to_heartbeat(2500) == 500


def test_session_expires_without_answers_and_answers_extend_it():
    c = stable(core(), now=0)
    assert not c.session_expired(SESSION - 1) and c.session_expired(SESSION)
    assert c.on_heartbeat_response(E.NONE, c.generation, c.member_id, 5000) is Step.OK
    assert not c.session_expired(SESSION + 4999)
    assert c.session_expired(SESSION + 5000)


def test_poll_timeout():
    c = stable(core(), now=0)
    c.polled(0)
    assert not c.poll_expired(REBALANCE - 1) and c.poll_expired(REBALANCE)
    c.polled(REBALANCE - 1)
    assert not c.poll_expired(REBALANCE)


def test_heartbeat_rebalance_in_progress_asks_stable_member_to_rejoin():
    c = stable(core())
    assert c.on_heartbeat_response(E.REBALANCE_IN_PROGRESS, c.generation, c.member_id, 10) is Step.REJOIN
    assert c.rejoin_needed and c.member_id == "m1" and c.generation == 4  # keeps both


def test_heartbeat_rebalance_in_progress_during_sync_is_left_to_the_sync():
    c = core()
    c.join_sent()
    c.on_join_response(join_ok(), 9)
    assert c.on_heartbeat_response(E.REBALANCE_IN_PROGRESS, c.generation, c.member_id, 10) is Step.OK
    assert c.state is MemberState.SYNCING and c.rejoin_reason is None


@pytest.mark.parametrize("code", [E.ILLEGAL_GENERATION, E.UNKNOWN_MEMBER_ID])
def test_heartbeat_generation_errors_reset_the_member(code):
    c = stable(core())
    assert c.on_heartbeat_response(code, 4, "m1", 10) is Step.REJOIN
    assert (c.generation, c.member_id, c.state) == (NO_GENERATION, "", MemberState.UNJOINED)


@pytest.mark.parametrize("code", [E.ILLEGAL_GENERATION, E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID])
def test_heartbeat_answers_about_an_old_generation_are_ignored(code):
    c = stable(core("i"), generation=5)
    assert c.on_heartbeat_response(code, 4, "m1", 10) is Step.OK  # sent before we rejoined
    assert c.generation == 5 and c.state is MemberState.STABLE and c.fatal is None


def test_heartbeat_fenced_is_fatal():
    c = stable(core("inst-1"))
    assert c.on_heartbeat_response(E.FENCED_INSTANCE_ID, 4, "m1", 10) is Step.FATAL
    assert c.fatal.code == E.FENCED_INSTANCE_ID and "inst-1" in str(c.fatal)
    assert c.time_to_heartbeat(10) is None


@pytest.mark.parametrize("code,step", [(E.NOT_COORDINATOR, Step.REDISCOVER),
                                       (E.COORDINATOR_NOT_AVAILABLE, Step.REDISCOVER),
                                       (E.COORDINATOR_LOAD_IN_PROGRESS, Step.BACKOFF),
                                       (E.GROUP_AUTHORIZATION_FAILED, Step.FAIL)])
def test_heartbeat_other_errors(code, step):
    c = stable(core(), now=0)
    assert c.on_heartbeat_response(code, 4, "m1", 10) is step
    assert c.state is MemberState.STABLE and not c.rejoin_needed
    assert not c.session_expired(SESSION - 1) and c.session_expired(SESSION)  # no proof of life


# ---------------------------------------------------------------------------- leaving

def test_dynamic_member_sends_leave_group_and_resets():
    c = stable(core())
    assert c.leave("closing") is True
    assert (c.member_id, c.generation, c.state) == ("", NO_GENERATION, MemberState.UNJOINED)


def test_static_member_never_sends_leave_group():
    c = stable(core("instance-1"))
    assert c.leave("closing") is False
    assert c.state is MemberState.UNJOINED


def test_unjoined_member_has_nothing_to_leave():
    assert core().leave("closing") is False


# ---------------------------------------------------------------------------- commits

def test_commit_identity():
    c = core("inst")
    assert c.commit_identity(subscribed=False) == (NO_GENERATION, "", None)  # simple consumer
    with pytest.raises(KafkaError) as info:
        c.commit_identity(subscribed=True)
    assert info.value.code == E.UNKNOWN_MEMBER_ID
    c.join_sent()
    with pytest.raises(KafkaError) as info:
        c.commit_identity(subscribed=True)
    assert info.value.code == E.REBALANCE_IN_PROGRESS
    c.on_join_response(join_ok(member="m9", generation=11), 9)
    c.on_sync_response(sync(), 5)
    assert c.commit_identity(subscribed=True) == (11, "m9", "inst")


COMMIT_ERRORS = [
    # code, step, resets the member, asks to rejoin
    (E.NOT_COORDINATOR, Step.REDISCOVER, False, False),
    (E.COORDINATOR_NOT_AVAILABLE, Step.REDISCOVER, False, False),
    (E.REQUEST_TIMED_OUT, Step.REDISCOVER, False, False),
    (E.COORDINATOR_LOAD_IN_PROGRESS, Step.BACKOFF, False, False),
    (E.REBALANCE_IN_PROGRESS, Step.FAIL, False, True),
    (E.ILLEGAL_GENERATION, Step.FAIL, True, True),
    (E.UNKNOWN_MEMBER_ID, Step.FAIL, True, True),
    (E.FENCED_INSTANCE_ID, Step.FATAL, False, False),
    (E.OFFSET_METADATA_TOO_LARGE, Step.FAIL, False, False),
    (E.TOPIC_AUTHORIZATION_FAILED, Step.FAIL, False, False),
]


@pytest.mark.parametrize("code,step,resets,rejoins", COMMIT_ERRORS, ids=[e[0].name for e in COMMIT_ERRORS])
def test_commit_errors(code, step, resets, rejoins):
    c = stable(core("inst"), member="m1", generation=4)
    assert c.on_commit_error(code, 4, "m1") is step
    assert (c.generation == NO_GENERATION) is resets
    assert c.rejoin_needed is rejoins or (step is Step.FATAL and c.fatal is not None)


def test_commit_error_of_an_old_generation_does_not_reset():
    c = stable(core(), member="m1", generation=6)
    assert c.on_commit_error(E.ILLEGAL_GENERATION, 5, "m1") is Step.FAIL
    assert c.generation == 6 and not c.rejoin_needed


def test_heartbeat_interval_must_be_below_session_timeout():
    with pytest.raises(ValueError):
        MemberCore("g", session_timeout_ms=3000, heartbeat_interval_ms=3000)


def test_sync_answer_after_a_heartbeat_reset_does_not_make_a_stable_member_without_generation():
    c = core()
    c.join_sent()
    c.on_join_response(join_ok(generation=8), 9)
    c.joined_at(0)
    # the heartbeat (queued behind SyncGroup) says our generation is gone before the sync answers
    assert c.on_heartbeat_response(E.ILLEGAL_GENERATION, 8, "m1", 10) is Step.REJOIN
    assert c.on_sync_response(sync(), 5) is Step.REJOIN
    assert (c.state, c.generation) == (MemberState.UNJOINED, NO_GENERATION)
