"""The group coordinator's commands for interaction scripts (tests/groups/testdata/*.txt).

The format, the runner and the clock are generic: tests/support/interaction.py. This module is
the group environment: one pure Coordinator (core/broker/groups/coordinator.py) and the
consumers of a script, each a name ('a', 'b', ...) that remembers the member id and generation
its answers gave it, as a Kafka client does. Requests go straight to the coordinator; nothing
is queued between them (the coordinator itself parks a JoinGroup or SyncGroup until the
rebalance lets it answer).

    join NAME [group=G] [session=MS] [rebalance=MS] [protocols=range,roundrobin] [instance=ID]
                        a JoinGroup with the consumer's member id ("" the first time)
    sync NAME [assign=a:x,b:y]          a SyncGroup at the consumer's generation; the leader
                                        sends the assignment (consumer name: bytes)
    heartbeat NAME                      a Heartbeat at the consumer's generation
    leave NAME                          a LeaveGroup for the consumer
    tick                                fire the timers due at the clock's time
    describe [G]                        the group's state, protocol and members

Each command prints what the coordinator did: answers as 'a <- Join NONE gen=1 leader=a
members=[a b]', timers as 'timer join g at 3000' or 'timer heartbeat g a cancelled', group
records as 'persist g gen=1 protocol=range leader=a members=[a b]', and then each group whose
state, generation or members changed as 'g: PreparingRebalance gen=1 members=[a b]'. Member
ids print as the consumer's name.
Set SEAWAY_GROUPS_REWRITE=1 to write the actual output back into the scripts.
"""
from __future__ import annotations

from core.broker.groups.coordinator import Coordinator, GroupConfig
from core.broker.groups.events import (CancelTimer, DescribeGroups, DescribeResult, Heartbeat,
                                       HeartbeatResult, JoinGroup, JoinResult, LeaveGroup,
                                       LeaveResult, LeavingMember, PersistGroup, Respond,
                                       ScheduleTimer, SyncGroup, SyncResult)
from tests.support.interaction import ScriptEnv

GROUP = "g"


class Consumer:
    def __init__(self, name: str):
        self.name = name
        self.member_id = ""
        self.generation = -1


class Env(ScriptEnv):
    def __init__(self) -> None:
        super().__init__()
        self.coordinator = Coordinator(GroupConfig(), seed=0)
        self.consumers: dict[str, Consumer] = {}
        self.requests = 0
        self.asked: dict[int, tuple[Consumer, str]] = {}   # request id -> (consumer, request kind)

    # --- names -------------------------------------------------------------------------------

    def consumer(self, name: str) -> Consumer:
        return self.consumers.setdefault(name, Consumer(name))

    def member_name(self, member_id: str) -> str:
        for c in self.consumers.values():
            if c.member_id == member_id and member_id:
                return c.name
        return member_id or "-"

    def _request(self, consumer: Consumer, kind: str) -> int:
        self.requests += 1
        self.asked[self.requests] = (consumer, kind)
        return self.requests

    # --- commands ----------------------------------------------------------------------------

    def cmd_join(self, args: list[str]) -> None:
        (name,), options = self._options(args)
        c = self.consumer(name)
        protocols = tuple((p, f"{name}:{p}".encode()) for p in options.get("protocols", "range").split(","))
        self._handle(JoinGroup(
            request_id=self._request(c, "Join"), now_ms=self.now, group_id=options.get("group", GROUP),
            member_id=c.member_id, protocol_type="consumer", protocols=protocols,
            session_timeout_ms=int(options.get("session", 10_000)),
            rebalance_timeout_ms=int(options.get("rebalance", 30_000)),
            group_instance_id=options.get("instance"), client_id=name))

    def cmd_sync(self, args: list[str]) -> None:
        (name,), options = self._options(args)
        c = self.consumer(name)
        assignments = []
        for pair in filter(None, options.get("assign", "").split(",")):
            member, assignment = pair.split(":", 1)
            assignments.append((self.consumer(member).member_id, assignment.encode()))
        self._handle(SyncGroup(request_id=self._request(c, "Sync"), now_ms=self.now,
                               group_id=options.get("group", GROUP), generation_id=c.generation,
                               member_id=c.member_id, assignments=tuple(assignments)))

    def cmd_heartbeat(self, args: list[str]) -> None:
        (name,), options = self._options(args)
        c = self.consumer(name)
        self._handle(Heartbeat(request_id=self._request(c, "Heartbeat"), now_ms=self.now,
                               group_id=options.get("group", GROUP), generation_id=c.generation,
                               member_id=c.member_id))

    def cmd_leave(self, args: list[str]) -> None:
        (name,), options = self._options(args)
        c = self.consumer(name)
        self._handle(LeaveGroup(request_id=self._request(c, "Leave"), now_ms=self.now,
                                group_id=options.get("group", GROUP),
                                members=(LeavingMember(c.member_id),)))

    def cmd_tick(self, args: list[str]) -> None:
        self._show(self.coordinator.tick(self.now))

    def cmd_describe(self, args: list[str]) -> None:
        group = args[0] if args else GROUP
        self._handle(DescribeGroups(request_id=0, now_ms=self.now, group_ids=(group,)))

    # --- what the coordinator did ------------------------------------------------------------

    def execute(self, line: str) -> list[str]:
        before = self._groups()
        out = super().execute(line)
        changed = [f"{g}: {state} gen={gen} members=[{' '.join(sorted(self.member_name(m) for m in members))}]"
                   for g, (state, gen, members) in sorted(self._groups().items()) if before.get(g) != (state, gen, members)]
        return changed if out == ["ok"] and changed else out + changed

    def _handle(self, event) -> None:
        self._show(self.coordinator.handle(event))

    def _groups(self) -> dict[str, tuple]:
        return {g.group_id: (g.state.value, g.generation_id, tuple(sorted(g.members)))
                for g in self.coordinator.groups.values()}

    def _show(self, actions) -> None:
        # A JoinGroup's answer names the member first, so every line can use its name.
        for action in actions:
            if isinstance(action, Respond) and isinstance(action.result, JoinResult) \
                    and action.result.member_id and action.request_id in self.asked:
                self.asked[action.request_id][0].member_id = action.result.member_id
        for action in actions:
            if isinstance(action, Respond):
                self.out.extend(self._answer(action).splitlines())
            elif isinstance(action, ScheduleTimer):
                self.out.append(f"timer {self._timer(action.key)} at {action.at_ms}")
            elif isinstance(action, CancelTimer):
                self.out.append(f"timer {self._timer(action.key)} cancelled")
            elif isinstance(action, PersistGroup):
                self.out.append(self._record(action))

    def _timer(self, key: tuple) -> str:
        kind, group, *member = key
        return " ".join([kind, group, *(self.member_name(m) for m in member)])

    def _record(self, action: PersistGroup) -> str:
        md = action.metadata
        if md is None:
            return f"persist {action.group_id} deleted"
        members = " ".join(sorted(self.member_name(m.member_id) for m in md.members))
        leader = self.member_name(md.leader) if md.leader else "-"
        return (f"persist {action.group_id} gen={md.generation_id} protocol={md.protocol_name or '-'} "
                f"leader={leader} members=[{members}]")

    def _answer(self, action: Respond) -> str:
        result = action.result
        if isinstance(result, DescribeResult):
            lines = []
            for g in result.groups:
                members = " ".join(sorted(f"{self.member_name(m.member_id)}={m.assignment.decode() or '-'}"
                                          for m in g.members))
                lines.append(f"{g.group_id} {g.state} protocol={g.protocol_name or '-'} members=[{members}]")
            return "\n".join(lines)
        c, kind = self.asked.pop(action.request_id)
        head = f"{c.name} <- {kind} {result.error.name}"
        if isinstance(result, JoinResult):
            if result.member_id:
                c.member_id = result.member_id
            if result.error == 0:
                c.generation = result.generation_id
                members = " ".join(sorted(self.member_name(m.member_id) for m in result.members))
                return (f"{head} gen={result.generation_id} protocol={result.protocol_name} "
                        f"leader={self.member_name(result.leader)}" + (f" members=[{members}]" if members else ""))
            return head
        if isinstance(result, SyncResult):
            return f"{head} assignment={result.assignment.decode() or '-'}" if result.error == 0 else head
        if isinstance(result, LeaveResult):
            return head + "".join(f" {self.member_name(m.member_id)}:{m.error.name}" for m in result.members)
        assert isinstance(result, HeartbeatResult)
        return head
