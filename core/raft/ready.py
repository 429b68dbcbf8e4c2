"""Ready: everything the driver must do for the node, in order, before calling advance().

The contract (etcd-raft's, with Kafka's data):

1. `snapshot`: install it (replace the whole local log by it; the log now starts at its end).
2. `quorum_state`: write it durably (Kafka's quorum-state file).
3. `truncate_to`, then `entries`: drop the log from that offset, append these; flush.
4. `log_start_offset`: entries below it are covered by a snapshot and may be deleted.
5. `messages`: only now send them. They may rely on everything above being durable: a granted
   vote on the persisted vote, a Fetch's offset on the flushed log.
6. `committed_entries`: apply them (offset < high watermark), in order. `snapshot`, if any,
   is the state to apply them on.
7. call node.advance(ready). The node must not be stepped or ticked in between.

A crash anywhere before advance() is safe as long as the steps that did happen happened in this
order: the node is rebuilt from what is durable and nothing sent relied on what was lost.
"""
from __future__ import annotations

from dataclasses import dataclass

from core.raft.entries import Entry, SnapshotId
from core.raft.messages import LeaderIdAndEpoch, RaftMessage
from core.raft.state import QuorumState


@dataclass(frozen=True, slots=True)
class Snapshot:
    snapshot_id: SnapshotId
    data: bytes


@dataclass(frozen=True, slots=True)
class Ready:
    quorum_state: QuorumState | None
    snapshot: Snapshot | None
    truncate_to: int | None
    entries: tuple[Entry, ...]
    log_start_offset: int | None
    messages: tuple[RaftMessage, ...]
    committed_entries: tuple[Entry, ...]
    high_watermark: int
    # Who leads now, for listeners (Kafka's handleLeaderChange); informational, nothing to do.
    leader: LeaderIdAndEpoch
