"""Partition replication: leader and follower state, high watermark, ISR, leader epochs.

Theory of operation
===================

One PartitionReplica is this broker's replica of one partition (Kafka's Partition.scala with
the per-partition parts of ReplicaManager and the replica fetcher). It does no I/O and reads no
clock of its own: the driver feeds it inputs, reads its answers, and carries out the actions it
queues, in order, after every call:

    inputs (from the driver)                    answers / actions (to the driver)
    PartitionReplica(broker_id, broker_epoch,   built from the recovered log (ReplicaLog)
        clock=, config=, log=)
    apply_metadata(partition, brokers)          lead, follow or stop, as the image says
    stop(delete)                                StopReplica
    append_as_leader(n, acks=, request_id=,     AppendResult: offsets + epoch to write at, or
        timeout_ms=)                              the error; pending -> CompleteProduce later
    on_follower_fetch(fetch,                    FetchAnswer: what to read, or DivergingEpoch,
        update_fetch_state=)                      or the error
    offset_for_leader_epoch(epoch, current)     OffsetForLeaderEpoch's EpochEndOffset
    leader_offsets(current)                     ListOffsets EARLIEST/LATEST for a replica
    local_log_error(current, require_leader)    KIP-320 epoch check for other requests
    on_alter_partition_response(id, answer)     the controller's answer to SendAlterPartition
    on_fetch_response(id, response)             the leader's answer to our SendFetch
    on_fetch_failed(id)                         a SendFetch/SendListOffsets got no answer
    on_leader_offsets(id, offsets)              the answer to SendListOffsets
    log_start_advanced(offset)                  retention or DeleteRecords moved the log start
    tick()                                      the clock reached next_deadline_ms()

    take_actions() -> [SendFetch, SendListOffsets, SendAlterPartition, AppendAsFollower,
                       TruncateTo, TruncateFullyAndStartAt, CheckpointEpochs,
                       HighWatermarkChanged, LogStartOffsetChanged, CompleteProduce,
                       RecordsLost, UncleanLeadership, StopReplica]

The replica owns the shape of the log (ReplicaLog: log start, log end, high watermark, leader
epoch cache); the driver owns the bytes and keeps them equal to that shape: it writes a produced
batch at the offsets append_as_leader gave, appends a fetched record set on AppendAsFollower,
cuts the log on TruncateTo, writes the epoch checkpoint file on CheckpointEpochs (before the
records that follow it), and rebuilds a PartitionReplica from the recovered log after a restart.
Durability follows Kafka: nothing here waits for fsync; an acknowledged record survives because
every replica of the ISR holds it (DESIGN.md principle 8).

Leader (leader.py, isr.py). On a new leader epoch the leader caches (epoch, log end) in its
epoch cache, so a follower holding later epochs can find where it parts from us, and resets
what it knows of its followers. Each follower Fetch carries the follower's log end (the fetch
offset), the epoch of its last record and its broker epoch; the leader checks the epochs,
answers a DivergingEpoch if the follower's last epoch does not end where it says in our cache
(Fetch v12+), else records from the fetch offset, and records the follower's progress:

    high watermark = min log end over the leader and the *maximal* ISR (a proposed addition
                     counts, a proposed removal still counts) and the caught-up followers
                     eligible to join; it never goes back; it does not move while the ISR is
                     below min.insync.replicas (Kafka 3.7+).
    ISR expansion  = a follower, not fenced, fetching as its current incarnation, whose log end
                     reaches the high watermark and the start of our epoch.
    ISR shrink     = checked every replica.lag.time.max.ms / 2: members not caught up within
                     replica.lag.time.max.ms.

ISR changes are proposals: SendAlterPartition(partition epoch, new ISR with broker epochs), one
at a time, effective only when the controller's answer (or a later metadata image) says so.
acks=all: NOT_ENOUGH_REPLICAS before the append while the ISR is below min.insync.replicas;
otherwise CompleteProduce once the high watermark covers the batch (NONE, or
NOT_ENOUGH_REPLICAS_AFTER_APPEND if the maximal ISR is by then too small),
NOT_LEADER_OR_FOLLOWER if we lose the leadership first, REQUEST_TIMED_OUT at its timeout.

Follower (follower.py). One Fetch in flight, from the log end, naming the last record's epoch.
A DivergingEpoch answer truncates the log to where both logs are known to agree
(AbstractFetcherThread.getOffsetTruncationState); records are appended (their batch epochs go
into the epoch cache) and the high watermark becomes min(leader's, own log end).
OFFSET_OUT_OF_RANGE leads to ListOffsets and a truncation or a fresh start at the leader's log
start. Truncating below our own high watermark loses committed records: possible only after an
unclean election, and reported as RecordsLost; a leader elected uncleanly reports
UncleanLeadership.

Where things live. The state machine, pure: messages.py (inputs, answers, actions), log.py
(ReplicaLog, over core/log/epochs.py's LeaderEpochCache, which the Raft log shares), isr.py
(follower progress, ISR states and rules), leader.py, follower.py, replica.py
(PartitionReplica, ReplicationConfig, Role). Its driver, the
only modules here that do I/O or read a clock: manager.py (ReplicaManager: feeds every
partition's replica and carries out its actions), fetcher.py (one ReplicaFetcher per leader,
over a fetch session), files.py (the checkpoint files), quota.py (the replication throttle) and
selector.py (KIP-392's preferred read replica). This package's __init__ imports only the pure
modules, so importing the state machine never pulls in the driver.
"""
from . import messages as _messages
# `X as X`: re-exported explicitly, since type checkers cannot read the computed __all__ below.
from core.log.epochs import EpochEntry as EpochEntry
from core.log.epochs import LeaderEpochCache as LeaderEpochCache
from core.log.epochs import OffsetAndEpoch as OffsetAndEpoch
from .log import ReplicaLog as ReplicaLog
from .messages import *  # noqa: F401,F403
from .replica import PartitionReplica as PartitionReplica
from .replica import ReplicationConfig as ReplicationConfig
from .replica import Role as Role

__all__ = ["EpochEntry", "LeaderEpochCache", "OffsetAndEpoch", "PartitionReplica",
           "ReplicaLog", "ReplicationConfig", "Role"] + [
    name for name in vars(_messages) if name[:1].isupper()
    and name not in ("ErrorCode", "Hashable", "Union", "EpochEntry")]
