"""KRaft: Kafka's Raft (KIP-595, KIP-996 pre-vote, KIP-630 snapshots) as a pure state machine.

RaftNode (node.py) is the entry point; its module docstring explains how it works and how a
driver uses it. Nothing here does I/O or reads a clock: the driver persists, sends and applies
what each Ready asks for.
"""
from core.raft.config import QuorumConfig
from core.raft.entries import NO_LEADER, Entry, OffsetAndEpoch, SnapshotId
from core.raft.errors import NotLeaderError, RaftStateError
from core.raft.log import RaftLog
from core.raft.node import RaftNode
from core.raft.ready import Ready, Snapshot
from core.raft.roles import Role
from core.raft.state import QuorumState

__all__ = ["NO_LEADER", "Entry", "NotLeaderError", "OffsetAndEpoch", "QuorumConfig",
           "QuorumState", "RaftLog", "RaftNode", "RaftStateError", "Ready", "Role", "Snapshot",
           "SnapshotId"]
