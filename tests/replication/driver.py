"""The simulated broker driver: what a broker process does with its PartitionReplica.

This is the part the real anyio driver will do with real I/O, and a reference for it: carry out
take_actions() in order after every call (write produced and fetched records, cut the log, write
the epoch checkpoint, answer produces), send each SendFetch/SendListOffsets/SendAlterPartition
and feed the answers back (on_fetch_response, on_leader_offsets, on_alter_partition_response,
on_fetch_failed on a timeout), resend an AlterPartition until it is answered, hold an empty
follower fetch for a while before answering it again without counting it twice (Kafka's
DelayedFetch, on_follower_fetch(update_fetch_state=False)), tick at next_deadline_ms(), apply
each new metadata image, and rebuild the replica from the disk after a restart.

A mixin of Simulation (it sends, schedules and checks through it).
"""
from __future__ import annotations

from core.broker.replication import (AlterPartitionAnswer, CheckpointEpochs, CompleteProduce,
                                     FetchAnswer, FetchResponse, FollowerFetch, PartitionReplica,
                                     RecordsLost, ReplicaLog, SendAlterPartition, SendFetch,
                                     SendListOffsets, TruncateFullyAndStartAt, TruncateTo,
                                     UncleanLeadership)
from core.broker.replication.messages import (AppendAsFollower, HighWatermarkChanged,
                                              LogStartOffsetChanged, StopReplica)
from core.protocol.errors import ErrorCode as E
from tests.replication.invariants import Record
from tests.replication.nodes import (ALTER_RETRY_MS, CLIENT, CONTROLLER, FETCH_TIMEOUT_MS,
                                     FETCH_WAIT_MS, HEARTBEAT_MS, METADATA_PULL_MS,
                                     PRODUCE_TIMEOUT_MS, REGISTER_RETRY_MS, Message, SimBroker)


class BrokerDriver:
    # --- produce --------------------------------------------------------------------------------

    def _msg_produce(self, message: Message, request_id) -> None:
        sim_broker = self.brokers[message.destination]
        acks, values = self.produces[request_id]
        replica = sim_broker.replica
        if replica is None:
            self._send("produce_response", sim_broker.broker_id, CLIENT, request_id,
                       E.NOT_LEADER_OR_FOLLOWER)
            return
        held = self._held(sim_broker, values)
        if held is not None:
            # The producer state (rebuilt from the log) knows this batch: nothing is written,
            # and it is answered as its first append would have been.
            result = replica.duplicate_as_leader(held, held + len(values) - 1, acks=acks,
                                                 request_id=request_id,
                                                 timeout_ms=PRODUCE_TIMEOUT_MS)
            self.stats[f"duplicate {result.error.name}"] += 1
            self._trace(f"duplicate B{sim_broker.broker_id} {result}")
            if result.error != E.NONE:
                self._send("produce_response", sim_broker.broker_id, CLIENT, request_id,
                           result.error)
            elif not result.pending:
                self._answer_produce(sim_broker, request_id, result.error, result.base_offset)
            self._drain(sim_broker)
            return
        result = replica.append_as_leader(len(values), acks=acks, request_id=request_id,
                                          timeout_ms=PRODUCE_TIMEOUT_MS)
        self.stats[f"append {result.error.name}"] += 1
        if result.error == E.NONE:
            self.next_batch += 1
            records = [(result.leader_epoch, v, self.next_batch) for v in values]
            disk = sim_broker.disk
            if disk.end != result.base_offset:
                self.history.fail(sim_broker, f"append at {result.base_offset} to a disk ending "
                                              f"at {disk.end}")
            self.history.check_append(sim_broker, result.base_offset, records)
            disk.records.extend(records)
            self._trace(f"append B{sim_broker.broker_id} {result}")
            if not result.pending:
                self._answer_produce(sim_broker, request_id, result.error, result.base_offset)
            self._complete_parked(sim_broker)
        else:
            self._send("produce_response", sim_broker.broker_id, CLIENT, request_id,
                       result.error)
        self._drain(sim_broker)

    @staticmethod
    def _held(sim_broker: SimBroker, values: list) -> int | None:
        """Where the broker's log holds this batch (a retry's values), or None."""
        disk = sim_broker.disk
        for i in range(len(disk.records) - 1, -1, -1):
            if disk.records[i][1] == values[0]:
                base = disk.start + i
                held = [disk.record(base + j) for j in range(len(values))]
                if [r[1] if r else None for r in held] == values:
                    return base
                return None
        return None

    def _answer_produce(self, sim_broker: SimBroker, request_id, error: E, base: int) -> None:
        acks, values = self.produces.pop(request_id)
        if error == E.NONE and acks == -1:
            records = [sim_broker.disk.record(base + i) for i in range(len(values))]
            if [r[1] if r else None for r in records] != values:
                self.history.fail(sim_broker, f"acknowledged {values} at {base}, disk has "
                                              f"{records}")
            self.stats["acked"] += 1
            self.history.acknowledged(sim_broker, base, records, self._live_isr(),
                                      self.controller.partition.leader_epoch)
        self.stats[f"produce {error.name}"] += 1
        self._send("produce_response", sim_broker.broker_id, CLIENT, request_id, error)

    # --- carrying out the replica's actions ----------------------------------------------------

    def _drain(self, sim_broker: SimBroker) -> None:
        replica = sim_broker.replica
        if replica is None:
            return
        history = self.history
        for action in replica.take_actions():
            kind = type(action)
            if kind is SendFetch:
                self._send("fetch", sim_broker.broker_id, action.leader_id, action.request_id,
                           action.fetch)
                self._push(self.now + FETCH_TIMEOUT_MS, "fetch_timeout", sim_broker.broker_id,
                           sim_broker.incarnation, action.request_id)
            elif kind is SendListOffsets:
                self.stats["list offsets"] += 1
                self._send("list_offsets", sim_broker.broker_id, action.leader_id,
                           action.request_id, action.current_leader_epoch)
                self._push(self.now + FETCH_TIMEOUT_MS, "fetch_timeout", sim_broker.broker_id,
                           sim_broker.incarnation, action.request_id)
            elif kind is SendAlterPartition:
                if sim_broker.broker_id not in action.request.isr:
                    history.fail(sim_broker, f"AlterPartition without the leader: {action}")
                sim_broker.pending_alter = {action.request_id: action.request}
                self._send_alter(sim_broker, action.request_id)
            elif kind is AppendAsFollower:
                disk = sim_broker.disk
                records = [sim_broker.incoming[o] for o in range(action.base_offset,
                                                                  action.end_offset)]
                if disk.end != action.base_offset:
                    history.fail(sim_broker, f"{action} on a disk ending at {disk.end}")
                history.check_append(sim_broker, action.base_offset, records)
                disk.records.extend(records)
            elif kind is TruncateTo:
                self.stats["truncation"] += 1
                history.check_truncation(sim_broker, action.offset)
                disk = sim_broker.disk
                cut, before = disk.record(action.offset), disk.record(action.offset - 1)
                if cut is not None and before is not None and cut[2] == before[2] and \
                        action.offset > history.retired_below:
                    # Only the leader's log start (after DeleteRecords) may fall inside a batch.
                    history.fail(sim_broker, f"truncation to {action.offset} splits a batch")
                disk.truncate(action.offset)
            elif kind is TruncateFullyAndStartAt:
                self.stats["truncate fully"] += 1
                history.check_truncation(sim_broker, action.offset)
                disk = sim_broker.disk
                disk.records = []
                disk.start = disk.flushed = action.offset
            elif kind is CheckpointEpochs:
                sim_broker.disk.epochs = action.entries
            elif kind is LogStartOffsetChanged:
                disk = sim_broker.disk
                drop = action.log_start_offset - disk.start
                if drop > 0:
                    del disk.records[:drop]
                    disk.start = action.log_start_offset
                    disk.flushed = max(disk.flushed, disk.start)
            elif kind is CompleteProduce:
                self._answer_produce(sim_broker, action.request_id, action.error,
                                     action.base_offset)
            elif kind is RecordsLost:
                self.stats["records lost"] += 1
                history.records_lost(sim_broker, action.start_offset, action.end_offset,
                                      action.leader_epoch)
            elif kind is UncleanLeadership:
                self.stats["unclean leadership"] += 1
            elif kind is HighWatermarkChanged:
                pass
            elif kind is StopReplica:
                history.fail(sim_broker, "stopped, but the assignment never changes")
        history.check_broker(sim_broker)
        deadline = replica.next_deadline_ms()
        if deadline is not None and deadline != sim_broker.tick_at:
            sim_broker.tick_token += 1
            sim_broker.tick_at = deadline
            self._push(max(deadline, self.now), "tick", sim_broker.broker_id,
                       sim_broker.tick_token)

    def _on_tick(self, broker_id: int, token: int) -> None:
        sim_broker = self.brokers[broker_id]
        if sim_broker.replica is None or token != sim_broker.tick_token:
            return
        sim_broker.tick_at = None
        sim_broker.replica.tick()
        self._drain(sim_broker)

    # --- fetching -------------------------------------------------------------------------------

    def _msg_fetch(self, message: Message, request_id: int, fetch: FollowerFetch) -> None:
        sim_broker = self.brokers[message.destination]
        replica = sim_broker.replica
        if replica is None:
            answer = FetchAnswer(E.NOT_LEADER_OR_FOLLOWER)
        else:
            answer = replica.on_follower_fetch(fetch)
        if answer.error == E.NONE and answer.diverging_epoch is None and \
                answer.read_offset == answer.log_end_offset:
            sim_broker.parked.append(message)    # nothing to send yet: hold it a while
            self._push(self.now + FETCH_WAIT_MS, "fetch_wait", sim_broker.broker_id,
                       sim_broker.incarnation, message)
        else:
            self._answer_fetch(sim_broker, message, answer)
        self._drain(sim_broker)

    def _answer_fetch(self, sim_broker: SimBroker, message: Message,
                      answer: FetchAnswer) -> None:
        request_id, fetch = message.data
        batches, payload, previous = (), {}, None
        if answer.error == E.NONE and answer.diverging_epoch is None:
            batches, payload = sim_broker.disk.batches_from(answer.read_offset,
                                                            self.rng.randrange(1, 5))
            previous = sim_broker.disk.record(fetch.fetch_offset - 1)
        elif answer.diverging_epoch is not None:
            self.stats["diverging epoch"] += 1
        else:
            self.stats[f"fetch {answer.error.name}"] += 1
        response = FetchResponse(answer.error, answer.high_watermark, answer.log_start_offset,
                                 tuple(batches), answer.diverging_epoch)
        self._send("fetch_response", sim_broker.broker_id, message.source, request_id,
                   response, payload, previous, fetch.fetch_offset)

    def _complete_parked(self, sim_broker: SimBroker) -> None:
        parked, sim_broker.parked = sim_broker.parked, []
        for message in parked:
            self._answer_parked(sim_broker, message)

    def _answer_parked(self, sim_broker: SimBroker, message: Message) -> None:
        _, fetch = message.data
        replica = sim_broker.replica
        answer = replica.on_follower_fetch(fetch, update_fetch_state=False) \
            if replica is not None else FetchAnswer(E.NOT_LEADER_OR_FOLLOWER)
        self._answer_fetch(sim_broker, message, answer)

    def _on_fetch_wait(self, broker_id: int, incarnation: int, message: Message) -> None:
        sim_broker = self.brokers[broker_id]
        if sim_broker.incarnation != incarnation:
            return
        parked = sim_broker.parked
        for i, held in enumerate(parked):
            if held is message:
                del parked[i]
                self._answer_parked(sim_broker, message)
                return

    def _msg_fetch_response(self, message: Message, request_id: int, response: FetchResponse,
                            payload: dict, previous: Record | None, fetch_offset: int) -> None:
        sim_broker = self.brokers[message.destination]
        replica = sim_broker.replica
        if replica is None:
            return
        follower = replica.follower
        if response.error == E.NONE and response.diverging_epoch is None and \
                follower is not None and follower.in_flight == request_id and \
                replica.log.end_offset == fetch_offset:
            self.history.check_fetched_prefix(sim_broker, fetch_offset, previous)
        sim_broker.incoming = payload
        replica.on_fetch_response(request_id, response)
        self._drain(sim_broker)
        sim_broker.incoming = {}

    def _on_fetch_timeout(self, broker_id: int, incarnation: int, request_id: int) -> None:
        sim_broker = self.brokers[broker_id]
        if sim_broker.incarnation == incarnation and sim_broker.replica is not None:
            sim_broker.replica.on_fetch_failed(request_id)
            self._drain(sim_broker)

    def _msg_list_offsets(self, message: Message, request_id: int, epoch: int) -> None:
        sim_broker = self.brokers[message.destination]
        if sim_broker.replica is None:
            return
        answer = sim_broker.replica.leader_offsets(epoch)
        self._send("list_offsets_response", sim_broker.broker_id, message.source, request_id,
                   answer)

    def _msg_list_offsets_response(self, message: Message, request_id: int, answer) -> None:
        sim_broker = self.brokers[message.destination]
        if sim_broker.replica is not None:
            sim_broker.replica.on_leader_offsets(request_id, answer)
            self._drain(sim_broker)

    # --- AlterPartition -------------------------------------------------------------------------

    def _send_alter(self, sim_broker: SimBroker, request_id: int) -> None:
        request = sim_broker.pending_alter.get(request_id)
        if request is None:
            return
        self._send("alter_partition", sim_broker.broker_id, CONTROLLER, request_id, request)
        self._push(self.now + ALTER_RETRY_MS, "alter_retry", sim_broker.broker_id,
                   sim_broker.incarnation, request_id)

    def _on_alter_retry(self, broker_id: int, incarnation: int, request_id: int) -> None:
        sim_broker = self.brokers[broker_id]
        if sim_broker.up and sim_broker.incarnation == incarnation:
            self._send_alter(sim_broker, request_id)

    def _msg_alter_partition_response(self, message: Message, request_id: int,
                                      answer: AlterPartitionAnswer | None) -> None:
        sim_broker = self.brokers[message.destination]
        if answer is None:
            return   # a top-level error (stale broker epoch): the resend loop retries
        if sim_broker.pending_alter.pop(request_id, None) is None or sim_broker.replica is None:
            return
        self.stats[f"alter {answer.error.name}"] += 1
        sim_broker.replica.on_alter_partition_response(request_id, answer)
        self._drain(sim_broker)

    # --- registration, metadata, flushes --------------------------------------------------------

    def _registered(self, sim_broker: SimBroker, broker_epoch: int) -> None:
        """Registration accepted: rebuild the replica from the disk."""
        disk = sim_broker.disk
        sim_broker.broker_epoch = broker_epoch
        sim_broker.metadata_version = -1
        sim_broker.pending_alter = {}
        sim_broker.parked = []
        log = ReplicaLog(disk.start, disk.end, disk.hw_checkpoint, disk.epochs)
        sim_broker.replica = PartitionReplica(sim_broker.broker_id, broker_epoch,
                                              clock=self._clock, config=self.config, log=log)
        sim_broker.hw_epoch = sim_broker.leader_checked_epoch = -1
        sim_broker.checked_hw = log.high_watermark
        self._trace(f"registered {sim_broker!r} epoch {broker_epoch}")
        self._deliver_metadata(sim_broker)

    def _on_heartbeat(self, broker_id: int) -> None:
        sim_broker = self.brokers[broker_id]
        if sim_broker.up:
            if sim_broker.replica is not None:
                self._send("heartbeat", broker_id, CONTROLLER, sim_broker.broker_epoch)
            else:
                self._send("register", broker_id, CONTROLLER, sim_broker.incarnation)
        self._push(self.now + (HEARTBEAT_MS if sim_broker.replica is not None
                               else REGISTER_RETRY_MS), "heartbeat", broker_id)

    def _msg_registered(self, message: Message, incarnation: int, broker_epoch: int) -> None:
        sim_broker = self.brokers[message.destination]
        if sim_broker.replica is None and sim_broker.incarnation == incarnation:
            self._registered(sim_broker, broker_epoch)

    def _on_metadata_pull(self, broker_id: int) -> None:
        sim_broker = self.brokers[broker_id]
        if sim_broker.up and (CONTROLLER, broker_id) not in self.blocked and \
                (broker_id, CONTROLLER) not in self.blocked:
            self._deliver_metadata(sim_broker)
        self._push(self.now + METADATA_PULL_MS, "metadata_pull", broker_id)

    def _msg_metadata(self, message: Message, version: int) -> None:
        if version == self.controller.version:
            self._deliver_metadata(self.brokers[message.destination])

    def _deliver_metadata(self, sim_broker: SimBroker) -> None:
        replica = sim_broker.replica
        version, image, brokers = self.controller.image()
        if replica is None or sim_broker.metadata_version >= version:
            return
        sim_broker.metadata_version = version
        before = (replica.role, replica.leader_epoch)
        replica.apply_metadata(image, brokers)
        if (replica.role, replica.leader_epoch) != before:
            self.stats[f"become {replica.role.value}"] += 1
            self._trace(f"metadata {sim_broker!r}")
            self._complete_parked(sim_broker)   # DelayedFetch completes on a leader change
        self._drain(sim_broker)

    def _on_flush(self, broker_id: int) -> None:
        sim_broker = self.brokers[broker_id]
        if sim_broker.up:
            disk = sim_broker.disk
            disk.flushed = disk.end
            if sim_broker.replica is not None:
                disk.hw_checkpoint = sim_broker.replica.high_watermark
        self._push(self.now + self.rng.randrange(1, 2 * self.faults.flush_every_ms), "flush",
                   broker_id)
