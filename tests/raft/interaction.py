"""The Raft commands of interaction scripts (etcd-raft's testdata style).

A script is a sequence of blocks:

    # comments start with '#'
    command arg key=value ...
    ----
    expected output lines
    (a blank line ends the block)

The format, the runner and the message commands (clock, deliver, drop, pending, stabilize) are
generic: tests/support/interaction.py. This module is the Raft environment.

Commands (node ids are ints; messages wait in one FIFO queue until delivered):

    cluster voters=1,2,3 [observers=4] [fetch-max-bytes=N] [snapshot-chunk-bytes=N]
    restore ID [epoch=E] [leader=L] [voted=V] [log=E,E,...] [snapshot=END@EPOCH]
                      rebuild a node from a given disk: log=1,1,2 holds offsets from the
                      snapshot end (or 0) with those epochs; payloads are 'o<offset>e<epoch>'
    timeout ID        move the clock to the node's next deadline and tick it
    clock +MS         move the clock; nobody is ticked
    tick ID...        tick these nodes now
    deliver [from=ID] [to=ID] [type=Name]   deliver the matching queued messages, in order
    stabilize [verbose]                     deliver until no message is left
    drop [from=ID] [to=ID] [type=Name]      drop them
    pending           list queued messages
    propose ID PAYLOAD...
    resign ID
    snapshot ID [end=OFFSET]                the node's application snapshots what it applied
    crash ID / restart ID                   lose what was not persisted / rebuild from disk
    inject FROM->TO [cid=inflight|N] EXPR   queue a hand-made message (EXPR is a Python call)
    status [ID...]  log ID  describe ID

Each command prints what the nodes did (what their Readies asked for), one line each:
'2: persist ...', '2: append ...', '1->2 VoteRequest(...)', role changes, high watermarks.
Set SEAWAY_RAFT_REWRITE=1 to write the actual output back into the scripts.
"""
from __future__ import annotations

import dataclasses
import random

from core.protocol.errors import ErrorCode
from core.raft import messages as raft_messages
from core.raft.config import QuorumConfig
from core.raft.entries import NO_LEADER, Entry, SnapshotId
from core.raft.errors import NotLeaderError
from core.raft.log import RaftLog
from core.raft.messages import RaftMessage
from core.raft.node import RaftNode
from core.raft.ready import Ready, Snapshot
from core.raft.state import QuorumState
from tests.raft.formatting import format_entries, format_message, format_value
from tests.support.interaction import ScriptEnv

CLUSTER_ID = "test-cluster"


# --- the environment ----------------------------------------------------------------------------

@dataclasses.dataclass
class Disk:
    quorum_state: QuorumState = dataclasses.field(default_factory=QuorumState)
    snapshot: Snapshot | None = None
    entries: list[Entry] = dataclasses.field(default_factory=list)


class Env(ScriptEnv):
    def __init__(self) -> None:
        super().__init__()
        self.config = QuorumConfig()
        self.voters: tuple[int, ...] = ()
        self.nodes: dict[int, RaftNode | None] = {}
        self.disks: dict[int, Disk] = {}
        self.apps: dict[int, bytearray] = {}
        self.queue: list[RaftMessage] = []

    # --- plumbing ---------------------------------------------------------------------------

    def _build(self, node_id: int) -> None:
        disk = self.disks[node_id]
        snapshot = disk.snapshot
        start = snapshot.snapshot_id.end_offset if snapshot else 0
        log = RaftLog(snapshot.snapshot_id if snapshot else None,
                      [e for e in disk.entries if e.offset >= start])
        self.nodes[node_id] = RaftNode(node_id, self.voters, cluster_id=CLUSTER_ID,
                                       clock=self._clock, rng=random.Random(node_id),
                                       config=self.config, quorum_state=disk.quorum_state,
                                       log=log, snapshot=snapshot)
        self.apps[node_id] = bytearray(snapshot.data if snapshot else b"")
        self._drain(node_id)

    def node(self, node_id: int) -> RaftNode:
        node = self.nodes.get(node_id)
        if node is None:
            raise ValueError(f"node {node_id} is not running")
        return node

    def _summary(self, node: RaftNode) -> tuple:
        return (node.role, node.epoch, node.leader_id)

    def _drain(self, node_id: int) -> None:
        node = self.node(node_id)
        disk = self.disks[node_id]
        while node.has_ready():
            ready = node.ready()
            self._persist(node_id, disk, ready)
            for message in ready.messages:
                self.out.append(self.message_text(message))
                self.queue.append(message)
            if ready.committed_entries:
                entries = ready.committed_entries
                self.out.append(f"{node_id}: apply {format_entries(entries)}")
                for entry in entries:
                    if not entry.control:
                        self.apps[node_id] += entry.payload + b";"
            node.advance(ready)

    def _persist(self, node_id: int, disk: Disk, ready: Ready) -> None:
        say = self.out.append
        if ready.snapshot is not None:
            sid = ready.snapshot.snapshot_id
            say(f"{node_id}: install snapshot {format_value(sid)} "
                f"({len(ready.snapshot.data)} bytes)")
            disk.snapshot = ready.snapshot
            disk.entries = []
            self.apps[node_id] = bytearray(ready.snapshot.data)
        if ready.quorum_state is not None:
            qs = ready.quorum_state
            say(f"{node_id}: persist epoch={qs.leader_epoch} leader={qs.leader_id} "
                f"voted={qs.voted_id}")
            disk.quorum_state = qs
        if ready.truncate_to is not None:
            say(f"{node_id}: truncate to {ready.truncate_to}")
            disk.entries = [e for e in disk.entries if e.offset < ready.truncate_to]
        if ready.entries:
            say(f"{node_id}: append {format_entries(ready.entries)}")
            disk.entries.extend(ready.entries)
        if ready.log_start_offset is not None:
            say(f"{node_id}: log start {ready.log_start_offset}")
            disk.entries = [e for e in disk.entries if e.offset >= ready.log_start_offset]

    def _run(self, action) -> None:
        """Do something to the nodes, then report role and high watermark changes."""
        before = {i: (self._summary(n), n.high_watermark)
                  for i, n in self.nodes.items() if n is not None}
        action()
        for node_id in sorted(self.nodes):
            node = self.nodes[node_id]
            if node is None or node_id not in before:
                continue
            summary, hw = before[node_id]
            if self._summary(node) != summary:
                self.out.append(f"{node_id}: {node.role.value} epoch={node.epoch} "
                                f"leader={node.leader_id}")
            if node.high_watermark != hw:
                self.out.append(f"{node_id}: hw {hw} -> {node.high_watermark}")

    # --- messages, for the generic deliver, drop, pending and stabilize --------------------

    def message_route(self, message: RaftMessage) -> tuple[int, int]:
        return message.source_id, message.destination_id

    def message_type(self, message: RaftMessage) -> str:
        return type(message.data).__name__

    def message_text(self, message: RaftMessage) -> str:
        return (f"{message.source_id}->{message.destination_id} "
                f"{format_message(message.data, CLUSTER_ID)}")

    def deliver_message(self, message: RaftMessage) -> None:
        node = self.nodes.get(message.destination_id)
        if node is not None:
            self._run(lambda: (node.step(message), self._drain(message.destination_id)))

    def node_states(self) -> dict[int, tuple]:
        return {i: (self._summary(n), n.high_watermark, n.log.end_offset)
                for i, n in self.nodes.items() if n is not None}

    def settled_line(self, node_id: int) -> str:
        node = self.node(node_id)
        return (f"{node_id}: {node.role.value} epoch={node.epoch} leader={node.leader_id} "
                f"hw={node.high_watermark} log=[{node.log.start_offset},{node.log.end_offset})")

    # --- commands ---------------------------------------------------------------------------

    def cmd_cluster(self, args: list[str]) -> None:
        _, options = self._options(args)
        self.voters = tuple(int(v) for v in options["voters"].split(","))
        observers = tuple(int(v) for v in options.get("observers", "").split(",") if v)
        self.config = QuorumConfig(
            fetch_max_bytes=int(options.get("fetch-max-bytes", 8 * 1024 * 1024)),
            fetch_snapshot_max_bytes=int(options.get("snapshot-chunk-bytes", 8 * 1024 * 1024)))
        for node_id in self.voters + observers:
            self.disks[node_id] = Disk()
        for node_id in self.voters + observers:
            self._run(lambda: self._build(node_id))

    def cmd_restore(self, args: list[str]) -> None:
        positional, options = self._options(args)
        node_id = int(positional[0])
        snapshot = None
        start = 0
        if "snapshot" in options:
            end, epoch = (int(x) for x in options["snapshot"].split("@"))
            snapshot = Snapshot(SnapshotId(end, epoch), self._state_up_to(node_id, end))
            start = end
        epochs = [int(e) for e in options.get("log", "").split(",") if e]
        entries = [Entry(start + i, epoch, b"o%de%d" % (start + i, epoch))
                   for i, epoch in enumerate(epochs)]
        qs = QuorumState(int(options.get("epoch", 0)), int(options.get("leader", NO_LEADER)),
                         int(options.get("voted", NO_LEADER)))
        self.disks[node_id] = Disk(qs, snapshot, entries)
        self.queue = [m for m in self.queue if m.destination_id != node_id]
        self._build(node_id)

    def _state_up_to(self, node_id: int, end: int) -> bytes:
        return b"snapshot-of-%d-entries" % end

    def cmd_timeout(self, args: list[str]) -> None:
        node_id = int(args[0])
        deadline = self.node(node_id).next_deadline_ms()
        if deadline is not None and deadline > self.now:
            self.now = deadline
        self.out.append(f"t={self.now}")
        self._run(lambda: self._tick(node_id))

    def _tick(self, node_id: int) -> None:
        self.node(node_id).tick()
        self._drain(node_id)

    def cmd_tick(self, args: list[str]) -> None:
        for node_id in (int(a) for a in args):
            self._run(lambda: self._tick(node_id))

    def cmd_propose(self, args: list[str]) -> None:
        node_id = int(args[0])
        payloads = [a.encode() for a in args[1:]]

        def propose() -> None:
            try:
                position = self.node(node_id).propose(payloads)
            except NotLeaderError as e:
                self.out.append(f"{node_id}: NotLeaderError: {e}")
                return
            self.out.append(f"{node_id}: proposed, end {format_value(position)}")
            self._drain(node_id)
        self._run(propose)

    def cmd_resign(self, args: list[str]) -> None:
        node_id = int(args[0])
        self._run(lambda: (self.node(node_id).resign(), self._drain(node_id)))

    def cmd_snapshot(self, args: list[str]) -> None:
        positional, options = self._options(args)
        node_id = int(positional[0])
        node = self.node(node_id)
        end = int(options.get("end", node.applied_offset))
        data = bytes(self.apps[node_id]) if end == node.applied_offset else \
            self._state_up_to(node_id, end)

        def take() -> None:
            snapshot_id = node.snapshot_created(end, data)
            self.disks[node_id].snapshot = Snapshot(snapshot_id, data)
            self.out.append(f"{node_id}: snapshot {format_value(snapshot_id)} "
                            f"({len(data)} bytes)")
            self._drain(node_id)
        self._run(take)

    def cmd_crash(self, args: list[str]) -> None:
        node_id = int(args[0])
        self.nodes[node_id] = None
        self.queue = [m for m in self.queue if m.destination_id != node_id]
        self.out.append(f"{node_id}: crashed")

    def cmd_restart(self, args: list[str]) -> None:
        node_id = int(args[0])
        self._build(node_id)
        node = self.node(node_id)
        self.out.append(f"{node_id}: {node.role.value} epoch={node.epoch} "
                        f"leader={node.leader_id}")

    def cmd_inject(self, args: list[str]) -> None:
        route, rest = args[0], args[1:]
        source, destination = (int(x) for x in route.split("->"))
        correlation_id = None
        if rest and rest[0].startswith("cid="):
            value = rest.pop(0)[4:]
            if value == "inflight":
                state = self.node(destination).state
                correlation_id = state.in_flight_correlation_id  # type: ignore[attr-defined]
            else:
                correlation_id = int(value)
        namespace = {name: getattr(raft_messages, name) for name in dir(raft_messages)
                     if not name.startswith("_")}
        namespace.update(Entry=Entry, SnapshotId=SnapshotId, ErrorCode=ErrorCode)
        data = eval(" ".join(rest), namespace)  # test scripts only
        self.queue.append(RaftMessage(source, destination,
                                      correlation_id if correlation_id is not None else 0, data))
        self.out.append(f"queued {source}->{destination} {format_message(data, CLUSTER_ID)}")

    def cmd_status(self, args: list[str]) -> None:
        ids = [int(a) for a in args] or sorted(self.nodes)
        for node_id in ids:
            node = self.nodes.get(node_id)
            if node is None:
                self.out.append(f"{node_id}: down")
                continue
            log = node.log
            self.out.append(
                f"{node_id}: {node.role.value} epoch={node.epoch} leader={node.leader_id} "
                f"voted={node.quorum_state.voted_id} hw={node.high_watermark} "
                f"log=[{log.start_offset},{log.end_offset}) last_epoch={log.last_epoch}")

    def cmd_log(self, args: list[str]) -> None:
        node = self.node(int(args[0]))
        log = node.log
        entries = log.slice(log.start_offset, log.end_offset)
        self.out.append(f"start={log.start_offset} {format_entries(entries)}")

    def cmd_describe(self, args: list[str]) -> None:
        node = self.node(int(args[0]))
        response = node.describe_quorum()
        self.out.append(format_message(response, CLUSTER_ID))

