"""Where the gateway sends each request while it follows a DR pair's decision, and the few
answers it gives itself (no I/O).

Theory of operation
-------------------
The gateway serves one cluster of a DR pair at a time, the decision's active cluster, and a
request goes there unchanged. The exception is a move: from the moment the DR controller
fences the old side (`draining`, core/protocol/dr.py) until it has carried the groups'
committed offsets over (`serving`), consumers are moved, and from the moment it records the
new side as active (`switching`) the two clusters hold different parts of a consumer's
state, so each request goes where its part lives (while `draining`, "the new side" below
is still the old one: nothing is writable yet, and producers retry there):

    Produce, Metadata, InitProducerId, admin,    the new side: writes land there at once
    the transaction APIs (AddPartitionsToTxn,    (a transaction is the new side's; one open
    AddOffsetsToTxn, TxnOffsetCommit, EndTxn)    on the old side ends by its timeout there)
    OffsetCommit, OffsetFetch, LeaveGroup,       the old side: a group's commits are made
    FindCoordinator, DescribeGroups, ListGroups,  there, and the controller translates them
    ListOffsets, OffsetForLeaderEpoch, ...        once the group has left
    Heartbeat, SyncGroup                         answered REBALANCE_IN_PROGRESS here
    JoinGroup                                    held here until `serving`; the member
                                                 leaves the old group meanwhile
    Fetch                                        answered here, empty, after its wait

So each consumer, at its next heartbeat, starts a rebalance as after any membership change
(the move starts at the fence, so that heartbeat interval passes while the link drains):
it stops fetching, commits what it consumed (to the old side, where its generation is
valid) and asks to join again. The gateway takes the member out of the old group with a
LeaveGroup of its own, so the group empties as its consumers reach that point, which is
what the controller waits for before it translates the commits (dr/failover.py's
sync-groups). The JoinGroup waits here until the decision says `serving`, and then goes to
the new side as a new member's (member id ""): it gets its partitions there and reads the
translated commits. A consumer therefore neither skips nor re-reads a record, and nothing
about the old cluster survives in its state: its member id, generation and fetch positions
all came from the new side.

A fetch during a move would read the old side at positions the new side does not share, or
reach a broker that does not lead the partition there; an empty answer after the fetch's
own wait (capped) keeps the consumer idle without errors until its heartbeat tells it to
rejoin.

A gateway that never saw the `switching` record (it started, or lost touch, during the
move) goes straight to the new side: its consumers then find their member unknown there,
rejoin, and resume from the translated commits too, re-reading what they consumed since
their last commit (as after any lost membership).

Producers need nothing: the old side's copies are fenced before the move, so a produce that
still reaches them is refused with NOT_LEADER_OR_FOLLOWER (core/protocol/dr.py), and the
producer retries, through the gateway, on the new side.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from core.protocol import messages as m
from core.protocol.api_keys import ApiKey
from core.protocol.codegen import Writer
from core.protocol.dr import DRAINING, SERVING, SWITCHING, Decision
from core.protocol.errors import ErrorCode

_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhi")        # api key, api version, correlation id

# A fetch during a move is answered empty after its own max wait, but never later than this.
MOVE_FETCH_WAIT_MS = 500

# While switching: what stays on the old side (a consumer's reads and its group's commits).
OLD_SIDE_APIS = frozenset({
    ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH, ApiKey.LEAVE_GROUP, ApiKey.FIND_COORDINATOR,
    ApiKey.DESCRIBE_GROUPS, ApiKey.LIST_GROUPS, ApiKey.LIST_OFFSETS, ApiKey.OFFSET_FOR_LEADER_EPOCH,
    ApiKey.OFFSET_DELETE, ApiKey.DELETE_GROUPS,
})


@dataclass(frozen=True)
class View:
    """What the gateway serves: the active cluster; during a move (`switching`) the one the
    groups are still on; and whether consumers are held (from `draining` to `serving`)."""
    active: str
    previous: str | None = None
    epoch: int = 0
    draining: bool = False

    @property
    def moving(self) -> bool:
        """Consumers are being moved: told to rejoin, and their joins held."""
        return self.previous is not None or self.draining

    @property
    def groups_home(self) -> str:
        """Where the groups' commits are made and read meanwhile."""
        return self.previous or self.active


def view_of(decision: Decision | None, clusters: tuple[str, str], current: View) -> View:
    """The view a decision asks for. A decision for a cluster outside the pair, or older than
    what is served, changes nothing."""
    if decision is None or decision.active_cluster not in clusters or decision.epoch < current.epoch:
        return current
    if decision.phase == DRAINING:
        return View(decision.active_cluster, None, decision.epoch, draining=True)
    if decision.phase == SWITCHING:
        # The groups are on the other cluster of the pair, whatever this gateway served
        # before (it may have started in the middle of the move).
        previous = clusters[1] if decision.active_cluster == clusters[0] else clusters[0]
        return View(decision.active_cluster, previous, decision.epoch)
    if decision.phase == SERVING:
        return View(decision.active_cluster, None, decision.epoch)
    return current


@dataclass(frozen=True)
class Forward:
    cluster: str


@dataclass(frozen=True)
class Answer:
    """Answered by the gateway: REBALANCE_IN_PROGRESS, or an empty fetch after `delay_s`."""
    delay_s: float = 0.0


@dataclass(frozen=True)
class HoldJoin:
    leave: str          # the cluster whose group the member leaves while it waits


Route = Forward | Answer | HoldJoin


def route(api_key: int, view: View, *, max_wait_ms: int = 0) -> Route:
    if not view.moving:
        return Forward(view.active)
    if api_key in (ApiKey.HEARTBEAT, ApiKey.SYNC_GROUP):
        return Answer()
    if api_key == ApiKey.JOIN_GROUP:
        return HoldJoin(view.groups_home)
    if api_key == ApiKey.FETCH:
        return Answer(min(max(max_wait_ms, 0), MOVE_FETCH_WAIT_MS) / 1000)
    if api_key in OLD_SIDE_APIS:
        return Forward(view.groups_home)
    return Forward(view.active)


# ------------------------------------------------------------------ frames


@dataclass(frozen=True)
class RequestHead:
    api_key: int
    version: int
    correlation_id: int


def request_head(frame: bytes | bytearray) -> RequestHead | None:
    """The first three fields of a request; None for a frame too short to hold them."""
    if len(frame) < _HEADER.size:
        return None
    return RequestHead(*_HEADER.unpack_from(frame))


def decode_request(head: RequestHead, frame: bytes | bytearray) -> tuple[Any, Any, int]:
    """(header, body, offset of the body). Raises DecodeError for a malformed request."""
    api = m.API[head.api_key]
    header, at = m.REQUEST_HEADER.decode(api.request_header_version(head.version), frame, whole=False)
    body, _ = api.request.decode(head.version, frame, at, whole=False)
    return header, body, at


def encode_request_body(head: RequestHead, frame: bytes | bytearray, body_at: int, body: Any) -> bytearray:
    """The request with a new body and the client's own header bytes (correlation id, client id)."""
    w = Writer()
    w.buf += frame[:body_at]
    m.API[head.api_key].request.encode_into(head.version, body, w)
    return _joined(w.finish())


def encode_request(api_key: int, version: int, correlation_id: int, client_id: str, body: Any) -> bytearray:
    """A request frame of the gateway's own, without its size prefix."""
    api = m.API[api_key]
    w = Writer()
    m.REQUEST_HEADER.encode_into(api.request_header_version(version), m.RequestHeader(
        request_api_key=api_key, request_api_version=version, correlation_id=correlation_id,
        client_id=client_id), w)
    api.request.encode_into(version, body, w)
    return _joined(w.finish())


def decode_response(api_key: int, version: int, frame: bytes | bytearray) -> tuple[int, Any]:
    """(correlation id, body) of a response to a request of this API and version."""
    api = m.API[api_key]
    header, at = m.RESPONSE_HEADER.decode(api.response_header_version(version), frame, whole=False)
    body, _ = api.response.decode(version, frame, at, whole=False)
    return int(getattr(header, "correlation_id")), body


def encode_response(api_key: int, version: int, correlation_id: int, body: Any) -> bytearray:
    """A response frame, without its size prefix."""
    api = m.API[api_key]
    w = Writer()
    m.RESPONSE_HEADER.encode_into(api.response_header_version(version), m.ResponseHeader(correlation_id=correlation_id), w)
    api.response.encode_into(version, body, w)
    return _joined(w.finish())


def size_prefix(frame_len: int) -> bytes:
    return _SIZE.pack(frame_len)


def _joined(parts: list[Any]) -> bytearray:
    out = bytearray()
    for part in parts:
        out += part
    return out


# ------------------------------------------------------------------ the gateway's own answers


def rebalance_answer(head: RequestHead) -> bytearray:
    """Heartbeat or SyncGroup during a move: REBALANCE_IN_PROGRESS, as a coordinator answers a
    member whose group is rebalancing."""
    api = m.API[head.api_key]
    body: Any = api.response.cls()
    body.error_code = ErrorCode.REBALANCE_IN_PROGRESS
    return encode_response(head.api_key, head.version, head.correlation_id, body)


def empty_fetch_answer(head: RequestHead, request: Any) -> bytearray:
    """Every partition asked for, with no records and no error. The offsets the answer
    carries (high watermark, last stable, log start) are -1, "not known", since they would
    belong to either side."""
    F = m.FetchResponse
    topics = []
    for t in request.topics:
        partitions = [F.PartitionData(partition_index=p.partition, error_code=0, high_watermark=-1,
                                      last_stable_offset=-1, log_start_offset=-1, records=b"")
                      for p in t.partitions]
        topics.append(F.FetchableTopicResponse(topic=t.topic, topic_id=t.topic_id, partitions=partitions))
    body = F(throttle_time_ms=0, error_code=0, session_id=0, responses=topics)
    return encode_response(head.api_key, head.version, head.correlation_id, body)


def join_as_new_member(request: Any) -> None:
    """A held JoinGroup goes to the new side as a new member's: its member id means nothing
    there (a static member keeps its group.instance.id, which is what identifies it)."""
    request.member_id = ""


def leave_request(join: Any) -> tuple[int, Any] | None:
    """(version, LeaveGroup request) taking a waiting JoinGroup's member out of its group on
    the old side; None for a member that has no id there yet."""
    if not join.member_id and not join.group_instance_id:
        return None
    L = m.LeaveGroupRequest
    member = L.MemberIdentity(member_id=join.member_id, group_instance_id=join.group_instance_id,
                              reason="moved to the other cluster of its DR pair by the gateway")
    return 5, L(group_id=join.group_id, members=[member])
