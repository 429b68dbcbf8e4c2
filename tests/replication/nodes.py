"""The simulation's pieces of state: how hostile a run is (Faults), a broker's disk, a message
on the simulated network, and a broker process (SimBroker) with its replica."""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from core.broker.replication import AlterPartitionRequest, FetchedBatch, PartitionReplica
from tests.replication.invariants import Record

CONTROLLER = 0               # node ids: the controller, the client, brokers from 1
CLIENT = -1

# Timing of a run (virtual ms), Kafka's properties scaled down.
LAG_MS = 400                 # replica.lag.time.max.ms
FETCH_BACKOFF_MS = 60        # replica.fetch.backoff.ms
FETCH_WAIT_MS = 120          # replica.fetch.wait.max.ms: how long an empty fetch is held
FETCH_TIMEOUT_MS = 300       # a Fetch or ListOffsets without an answer has failed
SESSION_TIMEOUT_MS = 700     # broker.session.timeout.ms
HEARTBEAT_MS = 150           # broker.heartbeat.interval.ms
METADATA_PULL_MS = 100       # how often a broker catches up with the metadata
REGISTER_RETRY_MS = 150
ALTER_RETRY_MS = 200         # resend an unanswered AlterPartition
PRODUCE_TIMEOUT_MS = 1_500   # the produce request's timeout
CONTROLLER_CHECK_MS = 50     # session expiry and unclean election checks
LIVENESS_BOUND_MS = 8_000    # after healing, full replication within this (seen: < 2 s)


@dataclass
class Faults:
    """How hostile one run is; drawn from the seed."""
    drop: float
    slow: float                  # share of messages delayed a lot (which reorders them)
    crash_every_ms: int          # mean time between crashes, 0 for none
    power_loss: float            # share of crashes that lose the unflushed tail
    leader_crash: float          # share of crashes aimed at the leader
    isr_wipe_every_ms: int       # mean time between kills of the whole ISR, 0 for none
    partition_every_ms: int
    retention_every_ms: int
    flush_every_ms: int
    unclean: bool                # unclean.leader.election.enable
    chaos_ms: int

    @classmethod
    def draw(cls, rng: random.Random) -> Faults:
        calm = rng.random() < 0.15
        return cls(drop=0.0 if calm else rng.choice([0.0, 0.01, 0.05]),
                   slow=0.0 if calm else rng.choice([0.0, 0.05, 0.2]),
                   crash_every_ms=0 if calm else rng.choice([0, 700, 1500]),
                   power_loss=rng.choice([0.0, 0.0, 0.3, 1.0]),
                   leader_crash=rng.choice([0.0, 0.5, 0.9]),
                   isr_wipe_every_ms=0 if calm else rng.choice([0, 0, 2500]),
                   partition_every_ms=0 if calm else rng.choice([0, 800, 2000]),
                   retention_every_ms=rng.choice([0, 0, 1200]),
                   flush_every_ms=rng.choice([40, 300, 1000]),
                   unclean=rng.random() < 0.25,
                   chaos_ms=rng.randrange(2000, 5000))


@dataclass
class Disk:
    """What a broker's log directory holds."""
    start: int = 0
    records: list[Record] = field(default_factory=list)   # records[i] is offset start + i
    flushed: int = 0
    epochs: tuple = ()
    hw_checkpoint: int = 0

    @property
    def end(self) -> int:
        return self.start + len(self.records)

    def record(self, offset: int) -> Record | None:
        if self.start <= offset < self.end:
            return self.records[offset - self.start]
        return None

    def batches_from(self, offset: int, limit: int) -> tuple[list[FetchedBatch], dict]:
        """Up to `limit` whole batches from `offset` (a batch boundary)."""
        batches: list[FetchedBatch] = []
        payload = {}
        o = offset
        while o < self.end and len(batches) < limit:
            epoch, _, batch_id = self.records[o - self.start]
            base = o
            while o < self.end and self.records[o - self.start][2] == batch_id:
                payload[o] = self.records[o - self.start]
                o += 1
            batches.append(FetchedBatch(base, o - 1, epoch))
        return batches, payload

    def truncate(self, offset: int) -> None:
        """Drop everything from `offset`; below the log start the log restarts there."""
        del self.records[max(0, offset - self.start):]
        self.start = min(self.start, offset)
        self.flushed = min(self.flushed, self.end)


@dataclass
class Message:
    kind: str
    source: int
    destination: int
    incarnation: int             # the destination's incarnation when sent (else dropped)
    data: tuple


class SimBroker:
    def __init__(self, broker_id: int):
        self.broker_id = broker_id
        self.disk = Disk()
        self.up = False
        self.incarnation = 0
        self.replica: PartitionReplica | None = None
        self.broker_epoch = -1
        self.metadata_version = -1
        self.tick_token = 0
        self.tick_at: int | None = None
        self.pending_alter: dict[int, AlterPartitionRequest] = {}
        self.parked: list[Message] = []          # empty follower fetches held (leader side)
        self.incoming: dict[int, Record] = {}    # records of the fetch response being applied
        self.tainted = False                     # lost its unflushed tail since it last synced
        # invariant bookkeeping
        self.hw_epoch = -1
        self.leader_hw = 0
        self.leader_checked_epoch = -1
        self.checked_hw = 0

    def __repr__(self) -> str:
        state = repr(self.replica) if self.replica is not None else (
            "unregistered" if self.up else "down")
        return f"B{self.broker_id}#{self.incarnation} {state}"
