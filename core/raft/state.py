"""QuorumState: the election facts a voter must never forget (Kafka's quorum-state file).

A voter that forgot its epoch could be fooled by a stale leader; one that forgot its vote could
vote twice in an epoch and elect two leaders. So these are durable BEFORE any message that relies
on them leaves the node: the Ready that carries a new QuorumState also carries those messages,
and the driver persists before it sends.
"""
from __future__ import annotations

from dataclasses import dataclass

from core.raft.entries import NO_LEADER


@dataclass(frozen=True, slots=True)
class QuorumState:
    leader_epoch: int = 0
    leader_id: int = NO_LEADER   # the leader of leader_epoch, once known
    voted_id: int = NO_LEADER    # whom this voter voted for in leader_epoch

    def __post_init__(self) -> None:
        if self.leader_epoch < 0:
            raise ValueError(f"negative epoch {self.leader_epoch}")

    @property
    def has_leader(self) -> bool:
        return self.leader_id != NO_LEADER

    @property
    def has_voted(self) -> bool:
        return self.voted_id != NO_LEADER
