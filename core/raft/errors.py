"""Exceptions the Raft node raises to its driver."""
from __future__ import annotations


class NotLeaderError(Exception):
    """propose() on a node that is not the leader; names the leader if it is known."""

    def __init__(self, leader_id: int, epoch: int):
        super().__init__(f"not the leader; leader is {leader_id} in epoch {epoch}")
        self.leader_id = leader_id
        self.epoch = epoch


class RaftStateError(RuntimeError):
    """Something correct peers can never cause: two leaders in one epoch, a truncation below
    the high watermark, a driver breaking the Ready contract. The node must stop."""
