"""One consumer group member's state (classic protocol), without I/O.

The driver (group.py) sends JoinGroup, SyncGroup, Heartbeat, LeaveGroup and OffsetCommit and
feeds each answer in here. Every `on_*` method updates the member and returns the Step the
driver takes next, so the error handling of Kafka's AbstractCoordinator lives in one place
that tests drive with plain response objects and a fake clock (milliseconds).

States follow Java's MemberState: UNJOINED -> JOINING (JoinGroup sent) -> SYNCING (joined,
SyncGroup pending) -> STABLE. Heartbeats run in SYNCING and STABLE only: while a JoinGroup is
parked at the coordinator the member has no generation to heartbeat for.

Errors come in three weights:
- retried by the driver (Step BACKOFF / REDISCOVER / REJOIN);
- raised once from poll (Step FAIL, `take_error()`); the member stays able to rejoin;
- fatal (Step FATAL, `fatal`): FENCED_INSTANCE_ID, another process uses our static identity;
  every later poll raises it, as Java's consumer does.

Responses about a generation we have left since (a heartbeat answer that crossed a rejoin)
are ignored, so that they cannot reset the member a second time.
"""
from __future__ import annotations

import enum

from core.protocol.consumer_protocol import PROTOCOL_TYPE
from core.protocol.errors import ErrorCode as E
from core.protocol.errors import KafkaError

__all__ = ["MemberState", "Step", "MemberCore", "NO_GENERATION"]

NO_GENERATION = -1
_COORDINATOR_MOVED = frozenset({E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR})


class MemberState(enum.Enum):
    UNJOINED = "unjoined"
    JOINING = "joining"
    SYNCING = "syncing"
    STABLE = "stable"


class Step(enum.Enum):
    OK = "ok"                   # carry on
    SYNC = "sync"               # joined: send SyncGroup (with assignments if leader)
    REJOIN = "rejoin"           # send JoinGroup again now
    BACKOFF = "backoff"         # retry the same request after retry_backoff_ms
    REDISCOVER = "rediscover"   # forget the coordinator, find it again, then retry
    FAIL = "fail"               # raise take_error() from poll; rejoin on a later poll
    FATAL = "fatal"             # raise `fatal` from every poll from now on


class MemberCore:
    def __init__(self, group_id: str, *, group_instance_id: str | None = None,
                 session_timeout_ms: int = 45000, rebalance_timeout_ms: int = 300000,
                 heartbeat_interval_ms: int = 3000, retry_backoff_ms: int = 100):
        if heartbeat_interval_ms >= session_timeout_ms:
            raise ValueError("heartbeat_interval_ms must be lower than session_timeout_ms")
        self.group_id = group_id
        self.group_instance_id = group_instance_id
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.state = MemberState.UNJOINED
        self.member_id = ""
        self.generation = NO_GENERATION
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: list = []            # the JoinGroup response's members (leader only)
        self.skip_assignment = False
        self.rejoin_reason: str | None = "not joined yet"
        self.fatal: KafkaError | None = None
        self._error: KafkaError | None = None
        # heartbeat timers, in ms of the caller's monotonic clock
        self.next_heartbeat_at = 0.0
        self.session_deadline = float("inf")
        self.poll_deadline = float("inf")

    # ------------------------------------------------------------------ queries

    @property
    def is_leader(self) -> bool:
        return self.member_id != "" and self.member_id == self.leader_id

    @property
    def rejoin_needed(self) -> bool:
        return self.state is MemberState.UNJOINED or self.rejoin_reason is not None

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def in_generation(self, generation: int, member_id: str) -> bool:
        """Whether an answer about (generation, member_id) still concerns us."""
        return generation == self.generation and member_id == self.member_id

    def take_error(self) -> KafkaError | None:
        error, self._error = self._error, None
        return error or self.fatal

    # ------------------------------------------------------------------ transitions

    def request_rejoin(self, reason: str) -> None:
        if self.rejoin_reason is None:
            self.rejoin_reason = reason

    def reset(self, reason: str, *, reset_member_id: bool = True) -> None:
        """Forget the generation (and member id): the next join starts over. Partitions
        owned until now are lost, not revoked: they may already belong to someone else."""
        self.generation = NO_GENERATION
        if reset_member_id:
            self.member_id = ""
        self.leader_id = None
        self.protocol_name = None
        self.members = []
        self.state = MemberState.UNJOINED
        self.request_rejoin(reason)

    def _fail(self, code: int, message: str) -> Step:
        self._error = KafkaError(code, message)
        if self.state is not MemberState.STABLE:
            self.state = MemberState.UNJOINED
        self.request_rejoin(f"after {self._error}")
        return Step.FAIL

    def _fence(self, what: str) -> Step:
        self.fatal = KafkaError(E.FENCED_INSTANCE_ID,
                                f"{what}: another consumer of group {self.group_id!r} uses "
                                f"group.instance.id {self.group_instance_id!r}")
        self.state = MemberState.UNJOINED
        return Step.FATAL

    def join_sent(self) -> None:
        self.state = MemberState.JOINING
        # cleared now, not on success: a reason raised while this join is pending (the
        # subscription changed) must cause one more round
        self.rejoin_reason = None

    def on_join_response(self, resp, version: int) -> Step:
        code = resp.error_code
        if code == E.NONE:
            if version >= 7 and resp.protocol_type not in (None, PROTOCOL_TYPE):
                return self._fail(E.INCONSISTENT_GROUP_PROTOCOL,
                                  f"JoinGroup answered protocol type {resp.protocol_type!r}")
            self.member_id = resp.member_id
            self.generation = resp.generation_id
            self.protocol_name = resp.protocol_name
            self.leader_id = resp.leader
            self.members = list(resp.members)
            self.skip_assignment = bool(resp.skip_assignment)
            self.state = MemberState.SYNCING
            return Step.SYNC
        self.state = MemberState.UNJOINED
        if code == E.MEMBER_ID_REQUIRED:   # KIP-394: join again with the id we were given
            self.member_id = resp.member_id
            return Step.REJOIN
        if code in (E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION):
            self.reset(f"JoinGroup answered {E(code).name}")
            return Step.REJOIN
        if code in _COORDINATOR_MOVED:
            self.request_rejoin("coordinator moved")
            return Step.REDISCOVER
        if code in (E.COORDINATOR_LOAD_IN_PROGRESS, E.REBALANCE_IN_PROGRESS):
            return Step.BACKOFF
        if code == E.FENCED_INSTANCE_ID:
            return self._fence("JoinGroup")
        return self._fail(code, f"JoinGroup of group {self.group_id!r}")

    def on_sync_response(self, resp, version: int) -> Step:
        if self.state is not MemberState.SYNCING:
            return Step.FATAL if self.fatal else Step.REJOIN  # a heartbeat reset us meanwhile
        code = resp.error_code
        if code == E.NONE:
            if version >= 5 and ((resp.protocol_type not in (None, PROTOCOL_TYPE))
                                 or resp.protocol_name not in (None, self.protocol_name)):
                return self._fail(E.INCONSISTENT_GROUP_PROTOCOL,
                                  f"SyncGroup answered {resp.protocol_type}/{resp.protocol_name}, "
                                  f"joined with {PROTOCOL_TYPE}/{self.protocol_name}")
            self.state = MemberState.STABLE
            return Step.OK
        self.state = MemberState.UNJOINED
        if code == E.REBALANCE_IN_PROGRESS:
            self.request_rejoin("SyncGroup: rebalance in progress")
            return Step.REJOIN
        if code in (E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION):
            self.reset(f"SyncGroup answered {E(code).name}")
            return Step.REJOIN
        if code in _COORDINATOR_MOVED:
            self.request_rejoin("coordinator moved")
            return Step.REDISCOVER
        if code == E.FENCED_INSTANCE_ID:
            return self._fence("SyncGroup")
        return self._fail(code, f"SyncGroup of group {self.group_id!r}")

    # ------------------------------------------------------------------ heartbeats

    def joined_at(self, now: float) -> None:
        """JoinGroup answered: the session runs from now and heartbeats start."""
        self.session_deadline = now + self.session_timeout_ms
        self.next_heartbeat_at = now + self.heartbeat_interval_ms

    def polled(self, now: float) -> None:
        self.poll_deadline = now + self.rebalance_timeout_ms

    def heartbeats_enabled(self) -> bool:
        return self.state in (MemberState.SYNCING, MemberState.STABLE) and self.fatal is None

    def time_to_heartbeat(self, now: float) -> float | None:
        """ms until the next heartbeat is due (0: now); None while heartbeats are off."""
        if not self.heartbeats_enabled():
            return None
        return max(0.0, self.next_heartbeat_at - now)

    def session_expired(self, now: float) -> bool:
        return self.heartbeats_enabled() and now >= self.session_deadline

    def poll_expired(self, now: float) -> bool:
        return self.heartbeats_enabled() and now >= self.poll_deadline

    def heartbeat_sent(self, now: float) -> None:
        self.next_heartbeat_at = now + self.heartbeat_interval_ms

    def on_heartbeat_response(self, code: int, generation: int, member_id: str, now: float) -> Step:
        current = self.in_generation(generation, member_id)
        if code in (E.NONE, E.REBALANCE_IN_PROGRESS):
            # any answer from the coordinator proves the session alive
            self.session_deadline = now + self.session_timeout_ms
        if code == E.NONE:
            return Step.OK
        if code == E.REBALANCE_IN_PROGRESS:
            if current and self.state is MemberState.STABLE:
                self.request_rejoin("the group is rebalancing")
                return Step.REJOIN
            return Step.OK  # a SyncGroup in flight will see it
        if code in _COORDINATOR_MOVED:
            return Step.REDISCOVER
        self.next_heartbeat_at = now + self.retry_backoff_ms
        if code in (E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION):
            if not current or self.state is MemberState.JOINING:
                return Step.OK
            self.reset(f"Heartbeat answered {E(code).name}")
            return Step.REJOIN
        if code == E.FENCED_INSTANCE_ID:
            return self._fence("Heartbeat") if current else Step.OK
        if code in E._value2member_map_ and E(code).retriable:
            return Step.BACKOFF
        self._error = KafkaError(code, f"Heartbeat of group {self.group_id!r}")
        return Step.FAIL

    def heartbeat_failed(self, now: float) -> None:
        """No answer (the connection failed): try again after the backoff."""
        self.next_heartbeat_at = now + self.retry_backoff_ms

    # ------------------------------------------------------------------ leaving

    def leave(self, reason: str) -> bool:
        """Leave the group; True if a LeaveGroup should be sent. Static members never send
        one (their membership ends with the session timeout, KIP-345), as in Java."""
        send = (not self.is_static and self.member_id != ""
                and self.state is not MemberState.UNJOINED)
        self.reset(reason)
        return send

    # ------------------------------------------------------------------ commits

    def commit_identity(self, subscribed: bool) -> tuple[int, str, str | None]:
        """(generation, member id, group instance id) for an OffsetCommit. A subscribed
        member may commit only in a stable generation (Java's generationIfStable); an
        assign()ed consumer commits as a "simple consumer": generation -1, no member id."""
        if self.fatal is not None:
            raise self.fatal
        if not subscribed:
            return NO_GENERATION, "", None
        if self.state is not MemberState.STABLE:
            if self.state is MemberState.UNJOINED and self.member_id == "":
                raise KafkaError(E.UNKNOWN_MEMBER_ID,
                                 f"cannot commit: not a member of group {self.group_id!r} (yet); poll() joins")
            raise KafkaError(E.REBALANCE_IN_PROGRESS,
                             f"cannot commit while group {self.group_id!r} rebalances; poll() completes it")
        return self.generation, self.member_id, self.group_instance_id

    def bad_assignment(self, message: str) -> Step:
        """The leader's assignment did not decode."""
        self.state = MemberState.UNJOINED
        return self._fail(E.INCONSISTENT_GROUP_PROTOCOL, message)

    def join_interrupted(self, reason: str) -> None:
        """The JoinGroup or SyncGroup got no answer (the connection failed): join again,
        keeping member id and generation, which the coordinator may still know."""
        if self.state in (MemberState.JOINING, MemberState.SYNCING):
            self.state = MemberState.UNJOINED
        self.request_rejoin(reason)

    def on_commit_error(self, code: int, generation: int, member_id: str) -> Step:
        if code in _COORDINATOR_MOVED or code == E.REQUEST_TIMED_OUT:
            return Step.REDISCOVER
        if code in (E.COORDINATOR_LOAD_IN_PROGRESS, E.UNSTABLE_OFFSET_COMMIT):
            return Step.BACKOFF
        current = self.in_generation(generation, member_id)
        if code == E.REBALANCE_IN_PROGRESS:
            if current and self.state is MemberState.STABLE:
                self.request_rejoin("OffsetCommit: the group is rebalancing")
            return Step.FAIL
        if code in (E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION):
            if current and generation != NO_GENERATION:
                self.reset(f"OffsetCommit answered {E(code).name}")
            return Step.FAIL
        if code == E.FENCED_INSTANCE_ID:
            return self._fence("OffsetCommit")
        return Step.FAIL
