"""A deterministic, seeded simulation of one partition replicated over 3-5 brokers, built from
core.broker.replication's PartitionReplica, a simulated KRaft controller and a hostile network.

Everything runs on one virtual clock and one random generator seeded from the seed, so a seed
replays exactly.

- Brokers (nodes.py, driver.py): each holds a replica. Its disk keeps the records (epoch, value,
  batch id) by offset, a flush point, the leader epoch checkpoint (written when the replica
  asks) and the high watermark checkpoint (written at flushes). The simulated driver carries out
  the replica's actions on the disk, sends its Fetch/ListOffsets/AlterPartition requests,
  resends an AlterPartition until it is answered, times out fetches, and holds an empty
  follower fetch for a while (Kafka's long poll) before answering it again.
- Crashes: a kill keeps the disk (the page cache survives); a power loss also loses everything
  after the flush point. A restarted broker registers with a new broker epoch once its previous
  session has expired (the controller fences it then, taking it out of the ISR), and rebuilds its
  replica from the disk. "ISR wipe" kills the leader and the whole ISR at once.
- Controller (controller.py): broker registrations, heartbeats, session expiry (fencing),
  unfencing, leader elections from the ISR with core.controller.election (unclean when the seed
  enables it), AlterPartition with Kafka's validation, and metadata images pushed to and pulled
  by the brokers.
- Network: drops, delays, reordering, and partitions (groups cut off both ways, or single links
  one way), between brokers and between brokers and the controller.
- Client: produces batches (mostly acks=all) to whoever the metadata says leads, sometimes to
  anyone. Retention moves the leader's log start.

After every event the brokers it touched are checked against the run's History
(invariants.py). After the chaos phase the network heals and every broker restarts; the
partition must then be fully replicated, every replica in the ISR, and an acks=all produce
acknowledged within LIVENESS_BOUND_MS.
"""
from __future__ import annotations

from core.broker.replication import AlterPartitionRequest, ReplicationConfig
from core.controller.image import NO_LEADER
from core.protocol.errors import ErrorCode as E
from tests.replication.controller import SimController
from tests.replication.driver import BrokerDriver
from tests.replication.invariants import History
from tests.replication.nodes import (CLIENT, CONTROLLER, CONTROLLER_CHECK_MS, FETCH_BACKOFF_MS,
                                     HEARTBEAT_MS, LAG_MS, LIVENESS_BOUND_MS, METADATA_PULL_MS,
                                     PRODUCE_TIMEOUT_MS, SESSION_TIMEOUT_MS, Faults, Message,
                                     SimBroker)
from tests.support.simulation import EventLoop, InvariantViolation, Network

NETWORK = Network(delay_ms=(1, 6), slow_ms=(10, 300))


class Simulation(BrokerDriver, EventLoop):
    """The event loop, the clock, the network's misbehaviour and the trace are the generic
    EventLoop's (tests/support/simulation.py); the brokers' driver is BrokerDriver's."""
    network = NETWORK

    def __init__(self, seed: int, trace: bool = False):
        super().__init__(seed, trace)
        rng = self.rng
        self.faults = Faults.draw(rng)
        count = rng.choice([3, 3, 3, 4, 5])
        self.broker_ids = tuple(range(1, count + 1))
        self.min_isr = rng.choice([1, 2, 2, 2, 3])
        self.config = ReplicationConfig(replica_lag_time_max_ms=LAG_MS,
                                        min_insync_replicas=self.min_isr,
                                        replica_fetch_backoff_ms=FETCH_BACKOFF_MS,
                                        hw_requires_min_isr=rng.random() < 0.85)
        self.brokers = {i: SimBroker(i) for i in self.broker_ids}
        self.history = History(self._clock)
        self.controller = SimController(
            tuple(rng.sample(self.broker_ids, count)), unclean=self.faults.unclean,
            session_timeout_ms=SESSION_TIMEOUT_MS, clock=self._clock, history=self.history,
            stats=self.stats, trace=self._trace, publish=self._publish_metadata,
            is_tainted=lambda broker_id: self.brokers[broker_id].tainted)
        # the client
        self.next_value = 0
        self.next_batch = 0
        self.next_produce = 0
        self.produces: dict[tuple, tuple[int, list]] = {}   # request id -> (acks, values)
        self.sent: dict[tuple, tuple[int, list]] = {}       # the client's copy, for retries
        # The topic was just created: every replica starts registered and in the ISR.
        for sim_broker in self.brokers.values():
            sim_broker.up = True
            sim_broker.incarnation = 1
        for broker_id, sim_broker in self.brokers.items():
            self._registered(sim_broker, self.controller.register(broker_id, 1, fenced=False))

    # --- the run -------------------------------------------------------------------------------

    def run(self) -> None:
        faults, rng = self.faults, self.rng
        self._push(rng.randrange(10, 60), "client")
        self._push(CONTROLLER_CHECK_MS, "controller_check")
        for broker_id in self.broker_ids:
            self._push(rng.randrange(HEARTBEAT_MS), "heartbeat", broker_id)
            self._push(rng.randrange(METADATA_PULL_MS), "metadata_pull", broker_id)
            self._push(rng.randrange(faults.flush_every_ms), "flush", broker_id)
        if faults.crash_every_ms:
            self._push(rng.randrange(faults.crash_every_ms * 2), "crash")
        if faults.isr_wipe_every_ms:
            self._push(rng.randrange(faults.isr_wipe_every_ms * 2), "isr_wipe")
        if faults.partition_every_ms:
            self._push(rng.randrange(faults.partition_every_ms * 2), "partition")
        if faults.retention_every_ms:
            self._push(rng.randrange(faults.retention_every_ms * 2), "retention")
        self._push(faults.chaos_ms, "heal_all")
        self._run_until(faults.chaos_ms)
        self._check_liveness()

    # --- the network ----------------------------------------------------------------------------

    def _incarnation(self, node: int) -> int:
        return self.brokers[node].incarnation if node > 0 else 0

    def _send(self, kind: str, source: int, destination: int, *data) -> None:
        for delay in self._transit(source, destination):
            self._push(self.now + delay, "deliver",
                       Message(kind, source, destination, self._incarnation(destination), data))

    def _on_deliver(self, message: Message) -> None:
        if (message.source, message.destination) in self.blocked:
            return
        destination = message.destination
        if destination > 0:
            sim_broker = self.brokers[destination]
            if not sim_broker.up or sim_broker.incarnation != message.incarnation:
                return   # the connection died with the process
        self.stats[message.kind] += 1
        getattr(self, "_msg_" + message.kind)(message, *message.data)

    # --- the client -----------------------------------------------------------------------------

    def _on_client(self) -> None:
        rng = self.rng
        leader = self.controller.partition.leader
        if leader != NO_LEADER and rng.random() < 0.85:
            target = leader
        else:
            target = rng.choice(self.broker_ids)
        acks = -1 if rng.random() < 0.9 else 1
        values = []
        for _ in range(rng.randrange(1, 4)):
            self.next_value += 1
            values.append(self.next_value)
        self._produce(target, acks, values)
        if self.chaos:
            self._push(self.now + rng.randrange(20, 90), "client")

    def _produce(self, target: int, acks: int, values: list) -> None:
        self.next_produce += 1
        request_id = ("p", self.next_produce)
        self.produces[request_id] = (acks, values)
        self.sent[request_id] = (acks, values)
        self._send("produce", CLIENT, target, request_id)

    def _msg_produce_response(self, message: Message, request_id, error) -> None:
        self.stats[f"client {error.name}"] += 1
        acks, values = self.sent.pop(request_id, (None, None))
        if values is not None and error != E.NONE and self.chaos and self.rng.random() < 0.6:
            # An idempotent producer resends the same batch (same sequence): a broker whose
            # log holds it answers it as a duplicate (the driver), maybe one that was deposed
            # and still believes it leads, as clients can reach it (found by the fault run).
            self._push(self.now + self.rng.randrange(1, 40), "retry", acks, values)

    def _on_retry(self, acks: int, values: list) -> None:
        leader = self.controller.partition.leader
        target = leader if leader != NO_LEADER and self.rng.random() < 0.5 \
            else self.rng.choice(self.broker_ids)
        self.stats["client retry"] += 1
        self._produce(target, acks, values)

    def _live_isr(self) -> list[SimBroker]:
        """The controller's ISR members running as the incarnation it registered."""
        live = []
        for broker_id in self.controller.partition.isr:
            sim_broker = self.brokers[broker_id]
            registration = self.controller.registrations.get(broker_id)
            if sim_broker.up and sim_broker.replica is not None and registration is not None \
                    and registration.incarnation == sim_broker.incarnation:
                live.append(sim_broker)
        return live

    # --- brokers: crashes and restarts ----------------------------------------------------------

    def _crash(self, sim_broker: SimBroker, power_loss: bool) -> None:
        self._trace(f"{'power loss' if power_loss else 'kill'} {sim_broker!r}")
        self.stats["power loss" if power_loss else "kill"] += 1
        if power_loss:
            disk = sim_broker.disk
            if disk.flushed < disk.end:
                self.stats["lost unflushed"] += 1
                sim_broker.tainted = True
            disk.truncate(disk.flushed)
        sim_broker.up = False
        sim_broker.replica = None
        sim_broker.parked = []
        sim_broker.pending_alter = {}
        sim_broker.tick_token += 1
        self._push(self.now + self.rng.randrange(100, 1500), "restart", sim_broker.broker_id)

    def _start(self, sim_broker: SimBroker) -> None:
        sim_broker.up = True
        sim_broker.incarnation += 1
        sim_broker.tick_at = None
        self._trace(f"start {sim_broker!r}")
        self._send("register", sim_broker.broker_id, CONTROLLER, sim_broker.incarnation)

    def _on_restart(self, broker_id: int) -> None:
        sim_broker = self.brokers[broker_id]
        if not sim_broker.up:
            self._start(sim_broker)

    # --- faults ---------------------------------------------------------------------------------

    def _on_crash(self) -> None:
        if not self.chaos:
            return
        rng = self.rng
        up = [b for b in self.brokers.values() if b.up]
        leader = self.brokers.get(self.controller.partition.leader)
        if leader is not None and leader.up and rng.random() < self.faults.leader_crash:
            target = leader
        else:
            target = rng.choice(up) if up else None
        if target is not None:
            self._crash(target, rng.random() < self.faults.power_loss)
        self._push(self.now + rng.randrange(self.faults.crash_every_ms * 2), "crash")

    def _on_isr_wipe(self) -> None:
        if not self.chaos:
            return
        self.stats["isr wipe"] += 1
        for broker_id in self.controller.partition.isr:
            sim_broker = self.brokers[broker_id]
            if sim_broker.up:
                self._crash(sim_broker, self.rng.random() < self.faults.power_loss)
        self._push(self.now + self.rng.randrange(self.faults.isr_wipe_every_ms * 2), "isr_wipe")

    def _on_partition(self) -> None:
        if not self.chaos:
            return
        rng = self.rng
        self.blocked = self._cut_links([CONTROLLER, *self.broker_ids])
        self.stats["partition"] += 1
        self._trace(f"partition {sorted(self.blocked)}")
        self._push(self.now + rng.randrange(200, 2000), "heal")
        self._push(self.now + rng.randrange(self.faults.partition_every_ms * 2), "partition")

    def _on_retention(self) -> None:
        if not self.chaos:
            return
        leader = self.brokers.get(self.controller.partition.leader)
        replica = leader.replica if leader is not None else None
        if replica is not None and replica.is_leader and \
                replica.high_watermark > replica.log_start_offset:
            disk = leader.disk
            offset = self.rng.randrange(replica.log_start_offset + 1, replica.high_watermark + 1)
            while offset < disk.end and disk.record(offset - 1) is not None and \
                    disk.record(offset)[2] == disk.record(offset - 1)[2]:
                offset -= 1   # start at a batch boundary
            if offset > replica.log_start_offset:
                self.stats["retention"] += 1
                self._trace(f"retention B{leader.broker_id} start {offset}")
                self.history.retired_below = max(self.history.retired_below, offset)
                replica.log_start_advanced(offset)
                self._drain(leader)
        self._push(self.now + self.rng.randrange(self.faults.retention_every_ms * 2),
                   "retention")

    def _on_heal_all(self) -> None:
        self.chaos = False
        self.blocked = set()
        self._trace("heal all")
        for sim_broker in self.brokers.values():
            if not sim_broker.up:
                self._start(sim_broker)

    # --- the controller's messages ---------------------------------------------------------------

    def _publish_metadata(self) -> None:
        for broker_id in self.broker_ids:
            self._send("metadata", CONTROLLER, broker_id, self.controller.version)

    def _msg_register(self, message: Message, incarnation: int) -> None:
        broker_epoch = self.controller.register(message.source, incarnation)
        if broker_epoch is not None:
            self._send("registered", CONTROLLER, message.source, incarnation, broker_epoch)

    def _msg_heartbeat(self, message: Message, broker_epoch: int) -> None:
        self.controller.heartbeat(message.source, broker_epoch)

    def _on_controller_check(self) -> None:
        self.controller.check()
        self._push(self.now + CONTROLLER_CHECK_MS, "controller_check")

    def _msg_alter_partition(self, message: Message, request_id: int,
                             request: AlterPartitionRequest) -> None:
        answer, joined = self.controller.alter_partition(request)
        for broker_id in joined:
            member = self.brokers[broker_id]
            member.tainted = False    # back in sync: it holds what the ISR holds
            if member in self._live_isr():
                self.history.check_holds_acked(member, "joined the ISR",
                                               self.controller.partition.leader_epoch)
        self._send("alter_partition_response", CONTROLLER, message.source, request_id, answer)

    # --- liveness ---------------------------------------------------------------------------------

    def _check_liveness(self) -> None:
        """Healed, everyone up: every replica back in the ISR, an acks=all produce acknowledged
        and replicated everywhere."""
        healed_at = self.now
        marker = None

        def progressed() -> bool:
            nonlocal marker
            part = self.controller.partition
            leader = self.brokers.get(part.leader)
            if leader is None or leader.replica is None or not leader.replica.is_leader or \
                    leader.replica.leader_epoch != part.leader_epoch or \
                    set(part.isr) != set(part.replicas):
                return False
            if marker is None or (self.stats["acked"] == marker[1]
                                  and self.now - marker[0] >= PRODUCE_TIMEOUT_MS):
                # (again, if the last one failed, e.g. before the leader saw the ISR grow back)
                marker = (self.now, self.stats["acked"])
                self._on_client_marker(leader)
                return False
            end = leader.replica.log_end_offset
            return self.stats["acked"] > marker[1] and all(
                b.replica is not None and b.replica.log_end_offset == end
                and b.replica.high_watermark == end for b in self.brokers.values())

        if self._settle(LIVENESS_BOUND_MS, 50, progressed):
            self.stats["liveness ms"] = max(self.stats["liveness ms"], self.now - healed_at)
            return
        states = ", ".join(repr(b) for b in self.brokers.values())
        raise InvariantViolation(f"no progress within {LIVENESS_BOUND_MS} ms after healing at "
                                 f"t={healed_at}: {states}; controller {self.controller.partition}")

    def _on_client_marker(self, leader: SimBroker) -> None:
        self.next_value += 1
        self.next_produce += 1
        request_id = ("p", self.next_produce)
        self.produces[request_id] = (-1, [self.next_value])
        self._send("produce", CLIENT, leader.broker_id, request_id)


def run_seed(seed: int, trace: bool = False) -> Simulation:
    simulation = Simulation(seed, trace=trace)
    simulation.run()
    return simulation
