"""The replication simulation's safety checks: a History of what the run has seen, grown and
checked as events happen, on the brokers each event touched.

- a leader's high watermark never goes back within its leader epoch (per incarnation);
- the ISR always holds the leader: in the controller's registration, in the leader's committed
  and maximal ISR, in every AlterPartition it sends;
- every acknowledged (acks=all) record is, at its offset, on every live member of the
  controller's ISR when it is acknowledged, on every replica that joins the ISR, and on every
  replica when it starts to lead; no replica ever truncates it;
- committed records (below a replica's high watermark) are the same on every replica: a global
  committed log is extended and compared as high watermarks move;
- log matching: an (offset, epoch) pair names one record and one epoch just before it; and a
  follower that appends what its leader sent holds, just below the fetch offset, the record the
  leader holds there (so after truncating it keeps nothing the leader does not have);
- RecordsLost is reported only after an unclean election.

Loss is allowed only where Kafka allows it: after an unclean election (epoch E), records
acknowledged or committed in an earlier epoch may be gone. The simulation also lets a broker
lose its unflushed tail (power loss); if that broker comes back as the last member of the ISR and
is elected (Kafka without ELR, KIP-966's "last replica standing"), its epoch counts as such an
election too ("lossy"). Records lost either way are moved out of the acknowledged set and
counted, so that the checks continue on what is left.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from tests.support.simulation import InvariantViolation

if TYPE_CHECKING:
    from tests.replication.simulation import SimBroker

Record = tuple[int, int, int]       # (epoch, value, batch id) at an offset


class History:
    def __init__(self, clock: Callable[[], int]):
        self._clock = clock
        # offset -> (record epoch, value, leader epoch in which it was acknowledged)
        self.acked: dict[int, tuple[int, int, int]] = {}
        self.lost: dict[int, tuple[int, int, int]] = {}
        # offset -> (record epoch, value, leader epoch of the replica that saw it committed)
        self.committed: dict[int, tuple[int, int, int]] = {}
        self.facts: dict[tuple[int, int], tuple[int, int]] = {}   # (offset, epoch) -> ...
        self.unclean_epochs: set[int] = set()
        self.lossy_epochs: set[int] = set()
        self.retired_below = 0        # the leader deleted records below this (retention)

    def fail(self, broker: SimBroker | None, what: str) -> None:
        who = f"broker {broker.broker_id}: " if broker is not None else ""
        raise InvariantViolation(f"t={self._clock()} {who}{what}")

    # --- when loss is allowed ---------------------------------------------------------------

    def loss_allowed(self, since_epoch: int, until_epoch: int) -> bool:
        """An unclean (or lossy) election in (since_epoch, until_epoch]."""
        return any(since_epoch < e <= until_epoch
                   for e in self.unclean_epochs | self.lossy_epochs)

    def _lose(self, offset: int) -> None:
        self.lost[offset] = self.acked.pop(offset)

    # --- per broker, after every event that touched it ----------------------------------------

    def check_broker(self, broker: SimBroker) -> None:
        replica = broker.replica
        log = replica.log
        disk = broker.disk
        if (log.start_offset, log.end_offset) != (disk.start, disk.end):
            self.fail(broker, f"replica log {log!r} differs from the disk "
                              f"[{disk.start}, {disk.end})")
        if not log.start_offset <= log.high_watermark <= log.end_offset:
            self.fail(broker, f"high watermark outside the log: {log!r}")
        if replica.is_leader:
            epoch = replica.leader_epoch
            if broker.hw_epoch == epoch and log.high_watermark < broker.leader_hw:
                self.fail(broker, f"leader high watermark went back from {broker.leader_hw} to "
                                  f"{log.high_watermark} in epoch {epoch}")
            broker.hw_epoch, broker.leader_hw = epoch, log.high_watermark
            if broker.broker_id not in replica.isr or \
                    broker.broker_id not in replica.maximal_isr:
                self.fail(broker, f"leader not in its own ISR {sorted(replica.isr)}")
            if broker.leader_checked_epoch != epoch:
                broker.leader_checked_epoch = epoch
                self.check_new_leader(broker)
        hw = log.high_watermark
        if hw > broker.checked_hw:
            self._check_committed(broker, broker.checked_hw, hw)
        broker.checked_hw = hw

    def check_new_leader(self, broker: SimBroker) -> None:
        """A replica that starts to lead holds every acknowledged record."""
        disk = broker.disk
        epoch = broker.replica.leader_epoch
        for offset, (record_epoch, value, acked_in) in list(self.acked.items()):
            if offset < max(disk.start, self.retired_below):
                continue
            record = disk.record(offset)
            if record is None or record[:2] != (record_epoch, value):
                if self.loss_allowed(acked_in, epoch):
                    self._lose(offset)
                else:
                    self.fail(broker, f"new leader of epoch {epoch} lacks acknowledged record "
                                      f"{offset} {(record_epoch, value)}: has {record}")

    def _check_committed(self, broker: SimBroker, old_hw: int, new_hw: int) -> None:
        disk = broker.disk
        epoch = broker.replica.leader_epoch
        committed = self.committed
        for offset in range(max(old_hw, disk.start), new_hw):
            record_epoch, value, _ = disk.record(offset)
            known = committed.get(offset)
            if known is None:
                committed[offset] = (record_epoch, value, epoch)
            elif known[:2] != (record_epoch, value):
                seen = known[2]
                if not self.loss_allowed(min(seen, epoch), max(seen, epoch)):
                    self.fail(broker, f"committed record {offset} is {(record_epoch, value)} "
                                      f"here, {known[:2]} elsewhere")
                if epoch > seen:
                    committed[offset] = (record_epoch, value, epoch)

    # --- acknowledgements and the ISR ---------------------------------------------------------

    def acknowledged(self, leader: SimBroker, base: int, records: list[Record],
                     isr_members: list[SimBroker], isr_epoch: int) -> None:
        """`isr_members`: the live members of the controller's ISR, of leader epoch
        `isr_epoch`. (A deposed leader that has not heard of an unclean election since its
        epoch may still acknowledge records, that the new lineage does not have.)"""
        epoch = leader.replica.leader_epoch
        for i, (record_epoch, value, _) in enumerate(records):
            self.acked[base + i] = (record_epoch, value, epoch)
        for member in isr_members:
            self.check_holds_acked(member, f"ISR member at the acknowledgement of {base}",
                                   isr_epoch, range(base, base + len(records)))

    def check_holds_acked(self, broker: SimBroker, why: str, isr_epoch: int,
                          offsets=None) -> None:
        disk = broker.disk
        floor = max(disk.start, self.retired_below)
        for offset in (list(self.acked) if offsets is None else offsets):
            known = self.acked.get(offset)
            if known is None or offset < floor or self.loss_allowed(known[2], isr_epoch):
                continue
            record = disk.record(offset)
            if record is None or record[:2] != known[:2]:
                self.fail(broker, f"{why}: lacks acknowledged record {offset} {known[:2]}, "
                                  f"has {record}")

    def check_truncation(self, broker: SimBroker, offset: int) -> None:
        """No replica drops an acknowledged record (unless an unclean election allowed it)."""
        disk = broker.disk
        epoch = broker.replica.leader_epoch
        for o in range(max(offset, disk.start, self.retired_below), disk.end):
            known = self.acked.get(o)
            if known is None:
                continue
            if disk.record(o)[:2] == known[:2]:
                if self.loss_allowed(known[2], epoch):
                    self._lose(o)
                else:
                    self.fail(broker, f"truncated acknowledged record {o} {known[:2]} "
                                      f"(truncation to {offset})")

    def records_lost(self, broker: SimBroker, start: int, end: int, epoch: int) -> None:
        if not any(e <= epoch for e in self.unclean_epochs | self.lossy_epochs):
            self.fail(broker, f"reported committed records [{start}, {end}) lost in epoch "
                              f"{epoch} without an unclean election")

    # --- the disk ---------------------------------------------------------------------------

    def check_append(self, broker: SimBroker, offset: int, records: list[Record]) -> None:
        """Log matching, over the whole run."""
        disk = broker.disk
        # Below the leader's log start, a follower may keep records the leader no longer
        # describes (its epoch cache starts there; LeaderEpochFileCache.endOffsetFor).
        previous = disk.record(offset - 1) if offset > self.retired_below else None
        previous_epoch = previous[0] if previous is not None else None
        facts = self.facts
        for i, (epoch, value, _) in enumerate(records):
            key = (offset + i, epoch)
            fact = (value, previous_epoch)
            known = facts.setdefault(key, fact)
            if known[0] != value or (previous_epoch is not None and known[1] is not None
                                     and known[1] != previous_epoch):
                self.fail(broker, f"record {key} is {fact}, elsewhere {known}")
            if known[1] is None and previous_epoch is not None:
                facts[key] = fact
            previous_epoch = epoch

    def check_fetched_prefix(self, broker: SimBroker, fetch_offset: int,
                             leader_previous: Record | None) -> None:
        """The leader accepted our (fetch offset, last epoch): below the fetch offset we hold
        what it holds."""
        if leader_previous is None:
            return
        mine = broker.disk.record(fetch_offset - 1)
        if mine is not None and mine[:2] != leader_previous[:2]:
            self.fail(broker, f"appending at {fetch_offset} after {mine}, but the leader has "
                              f"{leader_previous} at {fetch_offset - 1}")
