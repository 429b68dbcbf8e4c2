"""The values Raft reasons about: log entries and (offset, epoch) positions."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, NamedTuple

from core.log.epochs import OffsetAndEpoch as OffsetAndEpoch   # shared with replication
from core.protocol.messages import DATA, LeaderChangeMessage

NO_LEADER = -1       # Kafka's sentinel for "no known leader" / "no vote" / "unknown replica"
UNKNOWN_OFFSET = -1  # Kafka's sentinel for an offset nobody knows yet (e.g. an unset HW)


class SnapshotId(NamedTuple):
    """A snapshot covers offsets [0, end_offset); `epoch` is that of the entry at end_offset - 1.

    Kafka names the two fields EndOffset and Epoch in FetchSnapshot and in Fetch's SnapshotId.
    """
    end_offset: int
    epoch: int


@dataclass(frozen=True, slots=True)
class Entry:
    """One entry of the replicated log. `payload` is opaque to Raft (later: a record batch).

    `control` marks entries Raft writes itself, like Kafka's control batches: the LeaderChange
    record a leader appends when its epoch starts. Applications skip them when applying.
    """
    offset: int
    epoch: int
    payload: bytes
    control: bool = False

    @property
    def size(self) -> int:
        return len(self.payload)


def leader_change_payload(leader_id: int, voters: Iterable[int], granting_voters: Iterable[int] = ()) -> bytes:
    """The body of the control entry that opens a leader's epoch: Kafka's LeaderChangeMessage
    (written at schema version 0, as Kafka writes it), naming the leader, the voters and those
    that voted for it. The epoch is the entry's own (its batch's partition leader epoch)."""
    Voter = LeaderChangeMessage.Voter
    return DATA["LeaderChangeMessage"].encode(0, LeaderChangeMessage(
        version=0, leader_id=leader_id,
        voters=[Voter(voter_id=v) for v in sorted(voters)],
        granting_voters=[Voter(voter_id=v) for v in sorted(granting_voters)]))
