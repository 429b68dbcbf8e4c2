"""Helpers for the replication unit tests: a settable clock, replicas built in a known state,
follower fetches, and picking actions out of a replica's outbox."""
from __future__ import annotations

from typing import Iterable

from core.broker.replication import (BrokerInfo, EpochEntry, FetchedBatch, FetchResponse,
                                     FollowerFetch, PartitionMetadata, PartitionReplica,
                                     ReplicaLog, ReplicationConfig)
from core.protocol.errors import ErrorCode

LEADER = 1
BROKER_EPOCHS = {1: 101, 2: 102, 3: 103, 4: 104, 5: 105}


class Clock:
    def __init__(self, now: int = 1_000):
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


def brokers(ids: Iterable[int] = (1, 2, 3), **overrides: BrokerInfo) -> dict[int, BrokerInfo]:
    found = {i: BrokerInfo(BROKER_EPOCHS[i]) for i in ids}
    for key, info in overrides.items():
        found[int(key.lstrip("b"))] = info
    return found


def metadata(leader: int = LEADER, leader_epoch: int = 5, partition_epoch: int = 10,
             replicas=(1, 2, 3), isr=(1, 2, 3), lrs: int = 0) -> PartitionMetadata:
    return PartitionMetadata(leader, leader_epoch, partition_epoch, tuple(replicas), tuple(isr),
                             lrs)


def replica(broker_id: int = LEADER, *, clock: Clock | None = None, start: int = 0,
            end: int = 0, hw: int = 0, epochs: Iterable[tuple[int, int]] = (),
            **config) -> PartitionReplica:
    log = ReplicaLog(start, end, hw, [EpochEntry(e, o) for e, o in epochs])
    defaults = dict(replica_lag_time_max_ms=10_000, min_insync_replicas=1,
                    replica_fetch_backoff_ms=1_000)
    defaults.update(config)
    return PartitionReplica(broker_id, BROKER_EPOCHS[broker_id], clock=clock or Clock(),
                            config=ReplicationConfig(**defaults), log=log)


def leader(*, end: int = 10, hw: int | None = None, epochs=((3, 0),), isr=(1, 2, 3),
           replicas=(1, 2, 3), leader_epoch: int = 5, partition_epoch: int = 10,
           clock: Clock | None = None, lrs: int = 0, **config) -> PartitionReplica:
    """Broker 1 leading epoch 5 (which starts at `end`) over a log of `end` records."""
    r = replica(LEADER, clock=clock, end=end, hw=end if hw is None else hw, epochs=epochs,
                **config)
    r.apply_metadata(metadata(LEADER, leader_epoch, partition_epoch, replicas, isr, lrs),
                     brokers(replicas))
    r.take_actions()
    return r


def fetch(replica_id: int, offset: int, last_epoch: int = 5, *, epoch: int = 5,
          broker_epoch: int | None = None) -> FollowerFetch:
    return FollowerFetch(replica_id, BROKER_EPOCHS[replica_id] if broker_epoch is None
                         else broker_epoch, epoch, offset, last_epoch, 0)


def catch_up(r: PartitionReplica, *followers: int, offset: int | None = None) -> None:
    """Each follower fetches at `offset` (default: the leader's log end), in our epoch."""
    for follower_id in followers:
        answer = r.on_follower_fetch(fetch(follower_id, r.log_end_offset if offset is None
                                           else offset, epoch=r.leader_epoch))
        assert answer.error == ErrorCode.NONE, answer


def actions_of(r: PartitionReplica, kind: type) -> list:
    return [a for a in r.take_actions() if isinstance(a, kind)]


def batches(*ranges: tuple[int, int, int]) -> tuple[FetchedBatch, ...]:
    return tuple(FetchedBatch(base, last, epoch) for base, last, epoch in ranges)


def response(hw: int, *ranges: tuple[int, int, int], log_start: int = 0,
             error: ErrorCode = ErrorCode.NONE, diverging=None) -> FetchResponse:
    return FetchResponse(error, hw, log_start, batches(*ranges), diverging)
