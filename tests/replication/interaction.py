"""The replication commands of interaction scripts (tests/replication/testdata/*.txt).

The format, the runner and the message commands (clock, deliver, drop, pending, stabilize) are
generic: tests/support/interaction.py. This module is the replication environment: one
partition, a PartitionReplica per broker carried out by hand, and the simulation's controller
(controller.py: registrations, AlterPartition with Kafka's validation, elections), whose
decisions reach the brokers as Metadata messages. The controller is node 'c'; brokers are ints.

    cluster replicas=1,2,3 [min-isr=N] [lag-ms=N] [hw-requires-min-isr=false]
                      register the brokers, unfenced, and give each the first metadata image:
                      the first replica leads epoch 0, every replica is in the ISR
    produce ID COUNT [acks=all|1]           a client's batch of COUNT records (v1, v2, ...)
    timeout ID        move the clock to the replica's next deadline and tick it
    tick ID...        tick these replicas now
    release ID        the leader answers the fetches it holds (their long poll is over)
    crash ID          the broker stops: it sends nothing, what is queued for it is lost
    status [ID...]  log ID

A leader holds a fetch with nothing to read (Kafka's DelayedFetch) until it has records to send,
a new epoch, or `release`. Each command prints what the replicas did with their actions, one
line each: '2->1 Fetch(...)', '2: append 0@0:v1', '1: checkpoint epochs [0@0]',
'1: produce p1 NONE', the controller's decisions, role or ISR changes and high watermarks.
Set SEAWAY_REPLICATION_REWRITE=1 to write the actual output back into the scripts.
"""
from __future__ import annotations

from collections import Counter

from core.broker.replication import (AlterPartitionAnswer, CheckpointEpochs, CompleteProduce,
                                     FetchAnswer, FetchResponse, PartitionReplica, RecordsLost,
                                     ReplicaLog, ReplicationConfig, SendAlterPartition,
                                     SendFetch, SendListOffsets, TruncateFullyAndStartAt,
                                     TruncateTo, UncleanLeadership)
from core.broker.replication.messages import (AppendAsFollower, HighWatermarkChanged,
                                              LogStartOffsetChanged, StopReplica)
from core.protocol.errors import ErrorCode as E
from tests.replication.controller import SimController
from tests.replication.invariants import History, Record
from tests.replication.nodes import CONTROLLER, Disk, Message
from tests.support.interaction import ScriptEnv

PRODUCE_TIMEOUT_MS = 30_000
SESSION_TIMEOUT_MS = 18_000
TYPES = {"fetch": "Fetch", "fetch_response": "FetchResponse", "list_offsets": "ListOffsets",
         "list_offsets_response": "ListOffsetsResponse", "alter_partition": "AlterPartition",
         "alter_partition_response": "AlterPartitionResponse", "metadata": "Metadata"}


def node_name(node: int):
    return "c" if node == CONTROLLER else node


def format_ids(ids) -> str:
    return "[" + " ".join(str(i) for i in sorted(ids)) + "]"


def format_records(base: int, records: list[Record]) -> str:
    return " ".join(f"{base + i}@{epoch}:v{value}" for i, (epoch, value, _) in enumerate(records))


def format_batches(batches) -> str:
    return "[" + " ".join(f"{b.base_offset}-{b.last_offset}@{b.leader_epoch}"
                          if b.last_offset > b.base_offset else
                          f"{b.base_offset}@{b.leader_epoch}" for b in batches) + "]"


class Env(ScriptEnv):
    def __init__(self) -> None:
        super().__init__()
        self.replicas: dict[int, PartitionReplica | None] = {}
        self.disks: dict[int, Disk] = {}
        self.parked: dict[int, list[Message]] = {}
        self.incoming: dict[int, Record] = {}   # the records of the fetch response being applied
        self.controller: SimController | None = None
        self.publishing = False
        self.next_value = 0
        self.next_batch = 0
        self.next_produce = 0

    # --- plumbing ---------------------------------------------------------------------------

    def replica(self, broker_id: int) -> PartitionReplica:
        replica = self.replicas.get(broker_id)
        if replica is None:
            raise ValueError(f"broker {broker_id} is not running")
        return replica

    def _send(self, kind: str, source: int, destination: int, *data) -> None:
        message = Message(kind, source, destination, 0, data)
        self.queue.append(message)
        self.out.append(self.message_text(message))

    def _publish(self) -> None:
        if self.publishing:
            version, image, brokers = self.controller.image()
            for broker_id in self.replicas:
                self._send("metadata", CONTROLLER, broker_id, version, image, brokers)

    def _summary(self, replica: PartitionReplica) -> tuple:
        return (replica.role, replica.leader_epoch, replica.leader_id,
                tuple(sorted(replica.isr)), tuple(sorted(replica.maximal_isr)))

    def _role_line(self, broker_id: int) -> str:
        replica = self.replica(broker_id)
        line = (f"{broker_id}: {replica.role.value} epoch={replica.leader_epoch} "
                f"leader={replica.leader_id} isr={format_ids(replica.isr)}")
        if replica.maximal_isr != replica.isr:
            line += f" maximal={format_ids(replica.maximal_isr)}"
        return line

    def _run(self, action) -> None:
        """Do something to the replicas, then report role, ISR and high watermark changes."""
        before = {i: (self._summary(r), r.high_watermark)
                  for i, r in self.replicas.items() if r is not None}
        action()
        for broker_id in sorted(self.replicas):
            replica = self.replicas[broker_id]
            if replica is None or broker_id not in before:
                continue
            summary, hw = before[broker_id]
            if self._summary(replica) != summary:
                self.out.append(self._role_line(broker_id))
            if replica.high_watermark != hw:
                self.out.append(f"{broker_id}: hw {hw} -> {replica.high_watermark}")

    def _drain(self, broker_id: int) -> None:
        """Carry out the replica's actions in order, as the broker's driver does."""
        replica = self.replicas[broker_id]
        if replica is None:
            return
        disk = self.disks[broker_id]
        say = self.out.append
        for action in replica.take_actions():
            kind = type(action)
            if kind is SendFetch:
                self._send("fetch", broker_id, action.leader_id, action.request_id, action.fetch)
            elif kind is SendListOffsets:
                self._send("list_offsets", broker_id, action.leader_id, action.request_id,
                           action.current_leader_epoch)
            elif kind is SendAlterPartition:
                self._send("alter_partition", broker_id, CONTROLLER, action.request_id,
                           action.request)
            elif kind is AppendAsFollower:
                records = [self.incoming[o] for o in range(action.base_offset,
                                                           action.end_offset)]
                say(f"{broker_id}: append {format_records(action.base_offset, records)}")
                disk.records.extend(records)
            elif kind is TruncateTo:
                say(f"{broker_id}: truncate to {action.offset}")
                disk.truncate(action.offset)
            elif kind is TruncateFullyAndStartAt:
                say(f"{broker_id}: truncate fully, start at {action.offset}")
                disk.records = []
                disk.start = disk.flushed = action.offset
            elif kind is CheckpointEpochs:
                say(f"{broker_id}: checkpoint epochs "
                    f"[{' '.join(f'{e.epoch}@{e.start_offset}' for e in action.entries)}]")
                disk.epochs = action.entries
            elif kind is LogStartOffsetChanged:
                say(f"{broker_id}: log start {action.log_start_offset}")
                drop = action.log_start_offset - disk.start
                if drop > 0:
                    del disk.records[:drop]
                    disk.start = action.log_start_offset
            elif kind is CompleteProduce:
                say(f"{broker_id}: produce {action.request_id} {action.error.name}")
            elif kind is RecordsLost:
                say(f"{broker_id}: records lost [{action.start_offset},{action.end_offset}) "
                    f"in epoch {action.leader_epoch}")
            elif kind is UncleanLeadership:
                say(f"{broker_id}: unclean leadership in epoch {action.leader_epoch}")
            elif kind is StopReplica:
                say(f"{broker_id}: stop")
            elif kind is not HighWatermarkChanged:   # (reported as 'hw a -> b')
                raise AssertionError(f"unexpected action {action}")

    # --- messages, for the generic deliver, drop, pending and stabilize --------------------

    def message_route(self, message: Message) -> tuple:
        return node_name(message.source), node_name(message.destination)

    def message_type(self, message: Message) -> str:
        return TYPES[message.kind]

    def message_text(self, message: Message) -> str:
        kind, data = message.kind, message.data
        if kind == "fetch":
            fetch = data[1]
            text = (f"Fetch(offset={fetch.fetch_offset}, last_epoch={fetch.last_fetched_epoch}, "
                    f"leader_epoch={fetch.current_leader_epoch})")
        elif kind == "fetch_response":
            response = data[1]
            parts = [] if response.error == E.NONE else [response.error.name]
            parts.append(f"hw={response.high_watermark}")
            if response.log_start_offset > 0:
                parts.append(f"log_start={response.log_start_offset}")
            if response.batches:
                parts.append(f"batches={format_batches(response.batches)}")
            if response.diverging_epoch is not None:
                diverging = response.diverging_epoch
                parts.append(f"diverging=epoch {diverging.epoch} ends at {diverging.end_offset}")
            text = f"FetchResponse({', '.join(parts)})"
        elif kind == "list_offsets":
            text = f"ListOffsets(leader_epoch={data[1]})"
        elif kind == "list_offsets_response":
            answer = data[1]
            text = (f"ListOffsetsResponse({answer.error.name}, start={answer.log_start_offset}, "
                    f"end={answer.log_end_offset})")
        elif kind == "alter_partition":
            request = data[1]
            text = (f"AlterPartition(isr={format_ids(request.isr)}, "
                    f"leader_epoch={request.leader_epoch}, "
                    f"partition_epoch={request.partition_epoch})")
        elif kind == "alter_partition_response":
            answer: AlterPartitionAnswer | None = data[1]
            text = "AlterPartitionResponse(STALE_BROKER_EPOCH)" if answer is None else (
                f"AlterPartitionResponse({answer.error.name}, isr={format_ids(answer.isr)}, "
                f"leader={answer.leader_id}, leader_epoch={answer.leader_epoch}, "
                f"partition_epoch={answer.partition_epoch})")
        else:
            version, image = data[0], data[1]
            text = (f"Metadata(v{version} leader={image.leader} "
                    f"leader_epoch={image.leader_epoch} "
                    f"partition_epoch={image.partition_epoch} isr={format_ids(image.isr)})")
        source, destination = self.message_route(message)
        return f"{source}->{destination} {text}"

    def deliver_message(self, message: Message) -> None:
        if message.destination == CONTROLLER:
            self._run(lambda: self._to_controller(message))
            return
        if self.replicas.get(message.destination) is None:
            return   # the connection died with the process
        self._run(lambda: getattr(self, "_msg_" + message.kind)(message, *message.data))

    def node_states(self) -> dict[int, tuple]:
        return {i: (self._summary(r), r.high_watermark, r.log_end_offset)
                for i, r in self.replicas.items() if r is not None}

    def settled_line(self, broker_id: int) -> str:
        return self._status_line(broker_id)

    # --- what brokers receive ---------------------------------------------------------------

    def _msg_fetch(self, message: Message, request_id: int, fetch) -> None:
        leader_id = message.destination
        answer = self.replicas[leader_id].on_follower_fetch(fetch)
        if answer.error == E.NONE and answer.diverging_epoch is None and \
                answer.read_offset == answer.log_end_offset:
            self.parked[leader_id].append(message)   # nothing to send yet: hold it
            self.out.append(f"{leader_id}: hold {message.source}'s fetch at "
                            f"{fetch.fetch_offset}: nothing to read")
        else:
            self._answer_fetch(leader_id, message, answer)
        self._drain(leader_id)

    def _answer_fetch(self, leader_id: int, message: Message, answer: FetchAnswer) -> None:
        request_id, _ = message.data
        batches, payload = (), {}
        if answer.error == E.NONE and answer.diverging_epoch is None:
            batches, payload = self.disks[leader_id].batches_from(answer.read_offset, 1000)
        response = FetchResponse(answer.error, answer.high_watermark, answer.log_start_offset,
                                 tuple(batches), answer.diverging_epoch)
        self._send("fetch_response", leader_id, message.source, request_id, response, payload)

    def _release(self, leader_id: int) -> None:
        """Answer the fetches the leader holds, without counting them again (DelayedFetch)."""
        parked, self.parked[leader_id] = self.parked[leader_id], []
        replica = self.replicas[leader_id]
        for message in parked:
            answer = replica.on_follower_fetch(message.data[1], update_fetch_state=False)
            self._answer_fetch(leader_id, message, answer)

    def _msg_fetch_response(self, message: Message, request_id: int, response: FetchResponse,
                            payload: dict) -> None:
        broker_id = message.destination
        self.incoming = payload
        self.replicas[broker_id].on_fetch_response(request_id, response)
        self._drain(broker_id)
        self.incoming = {}

    def _msg_list_offsets(self, message: Message, request_id: int, epoch: int) -> None:
        answer = self.replicas[message.destination].leader_offsets(epoch)
        self._send("list_offsets_response", message.destination, message.source, request_id,
                   answer)

    def _msg_list_offsets_response(self, message: Message, request_id: int, answer) -> None:
        self.replicas[message.destination].on_leader_offsets(request_id, answer)
        self._drain(message.destination)

    def _msg_alter_partition_response(self, message: Message, request_id: int,
                                      answer: AlterPartitionAnswer | None) -> None:
        if answer is not None:
            self.replicas[message.destination].on_alter_partition_response(request_id, answer)
            self._drain(message.destination)

    def _msg_metadata(self, message: Message, version: int, image, brokers) -> None:
        broker_id = message.destination
        replica = self.replicas[broker_id]
        before = (replica.role, replica.leader_epoch)
        replica.apply_metadata(image, brokers)
        if (replica.role, replica.leader_epoch) != before and self.parked.get(broker_id):
            self._release(broker_id)   # DelayedFetch completes on a leader change
        self._drain(broker_id)

    def _to_controller(self, message: Message) -> None:
        if message.kind != "alter_partition":
            raise AssertionError(f"the controller got {message}")
        request_id, request = message.data
        answer, _ = self.controller.alter_partition(request)
        self._send("alter_partition_response", CONTROLLER, message.source, request_id, answer)

    # --- commands ---------------------------------------------------------------------------

    def cmd_cluster(self, args: list[str]) -> None:
        _, options = self._options(args)
        ids = tuple(int(i) for i in options["replicas"].split(","))
        config = ReplicationConfig(
            replica_lag_time_max_ms=int(options.get("lag-ms", 10_000)),
            min_insync_replicas=int(options.get("min-isr", 1)),
            hw_requires_min_isr=options.get("hw-requires-min-isr", "true") == "true")
        stats: Counter[str] = Counter()
        self.controller = SimController(
            ids, unclean=False, session_timeout_ms=SESSION_TIMEOUT_MS, clock=self._clock,
            history=History(self._clock), stats=stats, trace=self._controller_says,
            publish=self._publish, is_tainted=lambda broker_id: False)
        for broker_id in ids:
            self.disks[broker_id] = Disk()
            self.parked[broker_id] = []
            self.replicas[broker_id] = None
            broker_epoch = self.controller.register(broker_id, 1, fenced=False)
            self.replicas[broker_id] = PartitionReplica(
                broker_id, broker_epoch, clock=self._clock, config=config,
                log=ReplicaLog(0, 0, 0, ()))
        version, image, brokers = self.controller.image()
        for broker_id in ids:
            self.replicas[broker_id].apply_metadata(image, brokers)
            self.out.append(self._role_line(broker_id))
            self._drain(broker_id)
        self.publishing = True

    def _controller_says(self, line: str) -> None:
        if self.publishing:   # (not while the cluster is set up)
            self.out.append(line)

    def cmd_produce(self, args: list[str]) -> None:
        positional, options = self._options(args)
        broker_id, count = int(positional[0]), int(positional[1])
        acks = {"all": -1, "1": 1}[options.get("acks", "all")]
        self.next_produce += 1
        request_id = f"p{self.next_produce}"

        def produce() -> None:
            replica = self.replica(broker_id)
            result = replica.append_as_leader(count, acks=acks, request_id=request_id,
                                              timeout_ms=PRODUCE_TIMEOUT_MS)
            if result.error == E.NONE:
                self.next_batch += 1
                records = [(result.leader_epoch, self.next_value + 1 + i, self.next_batch)
                           for i in range(count)]
                self.next_value += count
                self.disks[broker_id].records.extend(records)
                self.out.append(f"{broker_id}: append "
                                f"{format_records(result.base_offset, records)}")
            self.out.append(f"{broker_id}: produce {request_id} "
                            f"{'waits for the ISR' if result.pending else result.error.name}")
            if result.error == E.NONE:
                self._release(broker_id)
            self._drain(broker_id)
        self._run(produce)

    def cmd_timeout(self, args: list[str]) -> None:
        broker_id = int(args[0])
        deadline = self.replica(broker_id).next_deadline_ms()
        if deadline is not None and deadline > self.now:
            self.now = deadline
        self.out.append(f"t={self.now}")
        self._run(lambda: self._tick(broker_id))

    def _tick(self, broker_id: int) -> None:
        self.replica(broker_id).tick()
        self._drain(broker_id)

    def cmd_tick(self, args: list[str]) -> None:
        for broker_id in (int(a) for a in args):
            self._run(lambda: self._tick(broker_id))

    def cmd_release(self, args: list[str]) -> None:
        broker_id = int(args[0])
        self._run(lambda: (self._release(broker_id), self._drain(broker_id)))

    def cmd_crash(self, args: list[str]) -> None:
        broker_id = int(args[0])
        self.replicas[broker_id] = None
        self.parked[broker_id] = []
        self.queue = [m for m in self.queue if m.destination != broker_id]
        self.out.append(f"{broker_id}: crashed")

    def _status_line(self, broker_id: int) -> str:
        replica = self.replicas.get(broker_id)
        if replica is None:
            return f"{broker_id}: down"
        log = replica.log
        return (f"{broker_id}: {replica.role.value} epoch={replica.leader_epoch} "
                f"leader={replica.leader_id} isr={format_ids(replica.isr)} "
                f"hw={log.high_watermark} log=[{log.start_offset},{log.end_offset})")

    def cmd_status(self, args: list[str]) -> None:
        for broker_id in [int(a) for a in args] or sorted(self.replicas):
            self.out.append(self._status_line(broker_id))

    def cmd_log(self, args: list[str]) -> None:
        broker_id = int(args[0])
        disk = self.disks[broker_id]
        self.out.append(f"start={disk.start} {format_records(disk.start, disk.records)}")

