"""Carrying out a failover plan (dr/plan.py) against the pair's clusters, step by step, with
every step's progress and timing reported and kept in the history.

Each step is safe to run again: a controller that died midway runs `dr failover` again, finds
its failover still `running` in its history, and goes on from the step it was in with the
epoch it had taken. Any other controller is stopped by the epoch: its role changes need an
epoch at least the clusters' (core/controller/dr_epochs.py).

A planned failover that cannot drain (the link does not catch up within drain_timeout_s) is
rolled back: the old active copies are made writable again, at the same epoch, and nothing
was promoted. Once anything is promoted, the failover only goes forward.
"""
from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import anyio

from core.client import Admin, KafkaClient, Producer
from core.client.consumer import read_to_end
from core.client.admin import ConfigResource, NewTopic
from core.client.errors import KafkaError
from core.protocol.dr import (DR_EPOCH, DR_STATE_TOPIC, FENCED, REPLICA_OF, STRANDED_SUFFIX, UNPLANNED_FROM,
                              txn_decisions_topic)
from core.protocol import messages as m
from core.protocol.errors import ErrorCode
from mirror.records import OffsetSync, encode_offset_sync, offset_sync_headers

from .config import DrConfig
from .decision import DRAINING, SERVING, SWITCHING, Decision, ensure_compacted_topic, publish, write_files
from .history import History
from .observe import POLICY, PairClients, dr_epoch, positions, read_checkpoints, sync_store
from .plan import Plan, count
from .stranded import NotCaughtUp, caught_up_ends, copy_stranded, stranded_boundary, stranded_range

Report = Callable[[str, str], None]       # (step, line)
# A fault hook for the tests: the controller kills itself (SIGKILL) right after this step's
# changes, before the history records the step, which is the worst moment to die.
CRASH_AT_ENV = "SEAWAY_DR_CRASH_AT"
# And: this step fails (FailoverError) before it changes anything, as a cluster error would.
FAIL_AT_ENV = "SEAWAY_DR_FAIL_AT"
# Another: before its first step the controller waits until this file exists, so that a test
# can start two controllers' failovers at the same moment.
HOLD_FILE_ENV = "SEAWAY_DR_HOLD_FILE"
ROLE_STEPS = ("fence", "seal", "promote", "reverse")     # the steps that change topics' roles
PROPAGATION_TIMEOUT_S = 15.0     # for every broker of a cluster to show a role change
TOPIC_RESOURCE = 2
IDLE_GROUP_STATES = {"Empty", "Dead"}


class FailoverError(Exception):
    """One line: why the failover stopped, and in what state it left the pair."""


@dataclass
class Outcome:
    failover_id: int
    plan: Plan
    rto_writes_s: float          # from the first step until the promoted side took writes
    rpo_records: int
    rpo_seconds: float
    duration_s: float
    properties_file: str


class Failover:
    def __init__(self, config: DrConfig, clients: PairClients, history: History, *,
                 controller: str, report: Report):
        self.config = config
        self.clients = clients
        self.history = history
        self.controller = controller
        self.report = report

    async def run(self, plan: Plan, *, resume: dict | None = None, context_extra: dict | None = None) -> Outcome:
        """Carry out `plan`, or (`resume`: the history's running row) finish it."""
        if resume is None:
            context = {"done": [], **(context_extra or {})}
            failover_id = self.history.begin(pair=plan.pair.name, kind=plan.kind, source=plan.source,
                                             target=plan.target, epoch=plan.epoch,
                                             controller=self.controller, context=context)
        else:
            failover_id, context = resume["id"], resume["context"]
            context["resumed"] = True
        self.failover_id, self.plan, self.context = failover_id, plan, context
        hold = os.environ.get(HOLD_FILE_ENV)
        while hold and not os.path.exists(hold):
            await anyio.sleep(0.01)
        started = time.monotonic() - context.get("elapsed", 0.0)
        for index, step in enumerate(plan.steps, 1):
            if step.name in context["done"]:
                continue
            self.report(step.name, f"[{index}/{len(plan.steps)}] {step.name}: {step.summary}")
            self.history.step_started(failover_id, step.name)
            t0 = time.monotonic()
            try:
                if os.environ.get(FAIL_AT_ENV) == step.name:
                    raise FailoverError(f"failed on purpose ({FAIL_AT_ENV})")
                detail = await getattr(self, "_" + step.name.replace("-", "_"))()
            except (KafkaError, OSError, TimeoutError, FailoverError) as exc:
                message = str(exc) or type(exc).__name__
                self.history.step_finished(failover_id, step.name, message, state="failed")
                rolled_back = await self._maybe_roll_back(step.name)
                # A role step that failed may have changed some topics (each topic is its own
                # change), so it counts as changed.
                changed = any(name in context["done"] or name == step.name for name in ROLE_STEPS)
                if rolled_back:
                    state, then = "rolled-back", "; rolled back: the old active copies are writable again"
                elif not changed:
                    state, then = "failed", "; no role was changed"
                else:       # roles half moved: the next `dr failover` of this region finishes it
                    state, then = "running", "; run dr failover again to go on from this step"
                self.history.update(failover_id, state=state, error=f"{step.name}: {message}",
                                    finished_at=None if state == "running" else time.time(), context=context)
                raise FailoverError(f"{step.name}: {message}{then}") from None
            took = time.monotonic() - t0
            if os.environ.get(CRASH_AT_ENV) == step.name:
                os.kill(os.getpid(), signal.SIGKILL)     # the fault hook: see CRASH_AT_ENV
            context["done"].append(step.name)
            context["elapsed"] = time.monotonic() - started
            if step.name == "promote":
                context["rto_writes_s"] = context["elapsed"]
            self.history.step_finished(failover_id, step.name, detail)
            self.history.update(failover_id, context=context)
            self.report(step.name, f"      done in {took:.2f}s: {detail}")
        duration = time.monotonic() - started
        outcome = Outcome(failover_id, plan, context.get("rto_writes_s", duration), plan.rpo_records,
                          plan.rpo_seconds, duration, context.get("properties_file", ""))
        self.history.update(failover_id, state="done", finished_at=time.time(), rpo_records=outcome.rpo_records,
                            rpo_seconds=outcome.rpo_seconds, rto_writes_s=outcome.rto_writes_s, context=context)
        return outcome

    # ------------------------------------------------------------------ helpers

    def _admin(self, cluster: str) -> Admin:
        return Admin(self._client(cluster))

    def _client(self, cluster: str) -> KafkaClient:
        client = self.clients.clients.get(cluster)
        if client is None:
            raise FailoverError(f"{cluster} does not answer: {self.clients.unreachable.get(cluster)}")
        return client

    @property
    def _epoch(self) -> str:
        return str(self.plan.epoch)

    async def _set_roles(self, cluster: str, role: str | None, also: dict[str, str | None] | None = None) -> int:
        """Every DR topic of the failover on `cluster` gets seaway.replica.of = `role` (None:
        writable), at the failover's epoch, and the configs in `also`."""
        topics = self.plan.topics
        changes = {ConfigResource.topic(t): {REPLICA_OF: role, DR_EPOCH: self._epoch, **(also or {})}
                   for t in topics}
        if not changes:
            return 0
        result = await self._admin(cluster).incremental_alter_configs(changes)
        for resource, error in result.items():
            if error is not None:
                raise FailoverError(f"{cluster}: {resource.name}: {error}")
        await self._until_every_broker_shows(cluster, role or "")
        return len(changes)

    async def _until_every_broker_shows(self, cluster: str, role: str) -> None:
        """A role takes effect on each broker when its metadata image has it; the step is done
        only when every broker of the cluster shows it (a fence that one partition leader has
        not seen yet would still take writes there)."""
        client = self._client(cluster)
        topics = sorted(self.plan.topics)
        R = m.DescribeConfigsRequest
        request = R(resources=[R.DescribeConfigsResource(resource_type=TOPIC_RESOURCE, resource_name=t,
                                                         configuration_keys=[REPLICA_OF]) for t in topics],
                    include_synonyms=False, include_documentation=False)
        deadline = anyio.current_time() + PROPAGATION_TIMEOUT_S
        while True:
            brokers = sorted((await client.refresh_metadata()).brokers)
            lagging = []
            for broker in brokers:
                try:
                    answer = await client.send(broker, request)
                except KafkaError:
                    # Listed but not answering (restarting, or dead and not yet fenced by its
                    # controller): it shows the role once it answers, or leaves the metadata.
                    lagging.append(broker)
                    continue
                seen = {r.resource_name: next((c.value or "" for c in r.configs if c.name == REPLICA_OF), "")
                        for r in answer.results if not r.error_code}
                if any(seen.get(t) != role for t in topics):
                    lagging.append(broker)
            if not lagging:
                return
            if anyio.current_time() > deadline:
                raise FailoverError(f"{cluster}: brokers {lagging} do not show the new roles after "
                                    f"{PROPAGATION_TIMEOUT_S:g}s")
            await anyio.sleep(0.05)

    async def _maybe_roll_back(self, failed_step: str) -> bool:
        done = self.context["done"]
        fenced = "fence" in done or failed_step == "fence"
        if self.plan.kind != "planned" or not fenced or "promote" in done or failed_step == "promote":
            return False
        try:
            await self._set_roles(self.plan.source, None)
        except (KafkaError, OSError, FailoverError) as exc:
            self.report(failed_step, f"      rolling back failed too: {exc}")
            return False
        try:
            # The fence said `draining`: consumers held by gateways join again where they were.
            await self._decide(SERVING, active=self.plan.source)
        except (KafkaError, OSError, TimeoutError) as exc:
            self.report(failed_step, f"      the decision could not say the old side serves again: {exc} "
                                     f"(gateways release held consumers there after a while)")
        return True

    # ------------------------------------------------------------------ steps

    async def _take_epoch(self) -> str:
        clusters = [self.plan.target] if self.plan.kind == "unplanned" else [self.plan.source, self.plan.target]
        # One order for every controller: two racing ones meet on the same cluster first, and
        # the loser stops before it has touched the other.
        for cluster in sorted(clusters):
            if cluster in self.context.get("epoch_on", []):
                continue
            await ensure_compacted_topic(self._client(cluster), DR_STATE_TOPIC)
            resource = ConfigResource.topic(DR_STATE_TOPIC)
            error = (await self._admin(cluster).incremental_alter_configs(
                {resource: {DR_EPOCH: self._epoch}}))[resource]
            if error is not None:
                # A controller that died between taking the epoch and recording it cannot tell
                # its own epoch from a rival's: it gives the epoch up (nothing has changed yet)
                # and the next `dr failover` plans with a new one.
                if error.code != ErrorCode.STALE_CONTROLLER_EPOCH:
                    raise FailoverError(f"{cluster}: {error}")
                current = await _epoch_of(self._admin(cluster))
                raise FailoverError(f"another DR controller holds epoch {current} on {cluster} "
                                    f"(this one asked for {self.plan.epoch}); nothing was changed")
            self.context.setdefault("epoch_on", []).append(cluster)
            self.history.update(self.failover_id, context=self.context)
        return f"epoch {self.plan.epoch} on {', '.join(sorted(clusters))}"

    async def _fence(self) -> str:
        self.context["fenced_at"] = time.time()
        n = await self._set_roles(self.plan.source, FENCED)
        if self.plan.kind != "planned":
            return f"{count(n, 'topic')} of {self.plan.source} fenced"
        # Consumers may leave their groups while the link drains (gateways make them), so
        # that sync-groups finds the groups idle instead of waiting for their heartbeats.
        said = await self._decide(DRAINING, active=self.plan.source)
        return f"{count(n, 'topic')} of {self.plan.source} fenced; {said}"

    async def _drain(self) -> str:
        """Wait until the target holds every record of the fenced topics.

        The link copies only committed records (it reads as a read_committed consumer), so a
        transaction still open on the fenced topics holds its partitions' copies back: its
        producer cannot write there any more, but it may still commit or abort what it
        wrote. It gets transactions_grace_s to do so; then its producer is fenced (Kafka's
        Admin.fenceProducers), which aborts the transaction: none of it reaches the
        promoted side, and the producer hears PRODUCER_FENCED, never a commit that did not
        happen. A transaction is never copied in part: whatever ended is copied whole."""
        source, target = self.plan.source, self.plan.target
        topics = {t: (n, FENCED) for t, n in self.plan.topics.items()}
        started = anyio.current_time()
        deadline = started + self.config.drain_timeout_s
        behind = None
        settled: dict | None = None
        fenced: str | None = None      # what fencing the open transactions did, once done
        while True:
            where = await positions(self.clients, source, target, topics)
            behind = {tp: p.end - p.copied for tp, p in where.items() if p.copied < p.end}
            ends = {tp: p.end for tp, p in where.items()}
            # Copied up to ends that held still across two looks: a produce that passed the
            # fence check just before the fence arrived has been appended by then.
            if not behind and settled == ends:
                self.context["source_ends"] = _by_topic(ends)
                return f"{sum(ends.values())} records on {target}, 0 behind" + (f"; {fenced}" if fenced else "")
            settled = ends if not behind else None
            if behind and fenced is None and anyio.current_time() - started >= self.config.transactions_grace_s:
                fenced = await self._abort_open_transactions()
            if anyio.current_time() > deadline:
                worst = sorted(behind.items(), key=lambda kv: -kv[1])[:3]
                raise FailoverError(f"the link to {target} did not catch up within "
                                    f"{self.config.drain_timeout_s:g}s: {sum(behind.values())} records "
                                    f"behind (" + ", ".join(f"{t}-{p}: {n}" for (t, p), n in worst) + ")"
                                    + (f"; {fenced}" if fenced else ""))
            await anyio.sleep(0.1)

    async def _abort_open_transactions(self) -> str:
        """Fence the producers of the transactions open on the failover's topics on the old
        active cluster (each id's coordinator aborts its transaction); says what it did."""
        admin = self._admin(self.plan.source)
        listed = await admin.list_transactions(states=["Ongoing"])
        described = await admin.describe_transactions([t.transactional_id for t in listed])
        open_here = sorted(tid for tid, d in described.items()
                           if not isinstance(d, KafkaError) and d.state == "Ongoing"
                           and any(topic in self.plan.topics for topic, _ in d.topic_partitions))
        if not open_here:
            return ""
        results = await admin.fence_producers(open_here)
        failed = {tid: r for tid, r in results.items() if isinstance(r, KafkaError)}
        done = [tid for tid in open_here if tid not in failed]
        said = []
        if done:
            said.append(f"aborted {count(len(done), 'open transaction')} by fencing its producer "
                        f"after {self.config.transactions_grace_s:g}s ({', '.join(done)})")
        if failed:
            said.append(f"could not fence the producers of {', '.join(failed)}: "
                        + "; ".join(str(r) for r in failed.values()))
        return "; ".join(said)

    async def _record_syncs(self) -> str:
        """Where the promoted copies stand. Planned: an offset sync per partition for the link
        back (promoted end -> old active end), which it resumes from. Unplanned: kept in the
        history for failback, which finds the stranded records from it.

        First every transaction still open on the promoted copies is ended. The link copies
        source transactions as transactions and commits each only once it has all of it
        (mirror/txn_gate.py); one it had in part when the link stopped would hold the
        partitions' last stable offset back for good, and must never be shown: it is aborted.
        One the link had decided to commit (its record in the decisions topic names the open
        copy) but not yet marked everywhere is committed. A planned failover's drain ends only
        after the link wrote its markers (its offset syncs wait for them), so there it finds
        none."""
        target = self.plan.target
        ended = await self._abort_open_copies()
        ends = await self._settled_ends(target)
        self.context["target_ends"] = _by_topic(ends)
        if self.plan.kind != "planned":
            return f"{ended}; {target}'s copies end at {sum(ends.values())} records"
        source_ends = self.context["source_ends"]
        await self._write_syncs(target, self.plan.source,
                                {tp: (end, source_ends[tp[0]][tp[1]]) for tp, end in ends.items()})
        return f"{ended}; {len(ends)} partitions: the link back starts where {target}'s copies end"

    async def _abort_open_copies(self) -> str:
        """End the transactions open on the target's copies of the failover's topics: COMMIT
        where the link's decision names the copy, ABORT elsewhere (Admin.abort_transaction,
        as `kafka-transactions abort`); says how many of each."""
        target = self.plan.target
        admin = self._admin(target)
        partitions = [(t, p) for t, n in self.plan.topics.items() for p in range(n)]
        found = await admin.describe_producers(partitions)
        open_copies = []
        for (topic, partition), producers in sorted(found.items()):
            if isinstance(producers, KafkaError):
                raise FailoverError(f"{target}: the producers of {topic}-{partition}: {producers}")
            open_copies += [(topic, partition, p) for p in producers if p.current_transaction_start_offset is not None]
        decided = await self._decisions() if open_copies else {}
        aborted = committed = 0
        for topic, partition, p in open_copies:
            decision = decided.get((topic, partition, p.producer_id))
            commit = decision is not None and decision.get("epoch") == p.producer_epoch \
                and decision.get("first_offset") == p.current_transaction_start_offset
            try:
                await admin.abort_transaction(topic, partition, p.producer_id, p.producer_epoch,
                                              p.coordinator_epoch if p.coordinator_epoch is not None else 0,
                                              commit=commit)
            except KafkaError as exc:
                raise FailoverError(f"{target}: could not end the transaction of producer {p.producer_id} "
                                    f"left open on {topic}-{partition}: {exc}") from None
            committed += commit
            aborted += not commit
        said = []
        if committed:
            said.append(f"{count(committed, 'copied transaction')} the link had whole committed on {target}")
        if aborted:
            said.append(f"{count(aborted, 'copied transaction')} left open by the link aborted on {target}")
        return "; ".join(said) or f"no copied transaction left open on {target}"

    async def _decisions(self) -> dict[tuple[str, int, int], dict]:
        """The link's records of copied transactions it had whole (core/protocol/dr.py
        txn_decisions_topic), the latest per (topic, partition, producer id)."""
        topic = txn_decisions_topic(self.plan.source)
        if topic not in await self._admin(self.plan.target).list_topics(internal=True):
            return {}
        out: dict[tuple[str, int, int], dict] = {}
        for record in await read_to_end(self._client(self.plan.target), topic):
            try:
                name, partition, producer = record.key.decode().rsplit(":", 2)
                key = (name, int(partition), int(producer))
            except (AttributeError, ValueError):
                continue                # not a decision
            if record.value is None:
                out.pop(key, None)
                continue
            try:
                out[key] = json.loads(record.value)
            except ValueError:
                continue
        return out

    async def _write_syncs(self, upstream: str, downstream: str,
                           where: dict[tuple[str, int], tuple[int, int]]) -> None:
        """Offset syncs for the link from `upstream` to `downstream` (kept on `upstream`, as
        MM2 keeps them): each partition's copy resumes at (upstream offset, downstream offset)."""
        syncs_topic = POLICY.offset_syncs_topic(downstream)
        client = self._client(upstream)
        await ensure_compacted_topic(client, syncs_topic)
        async with Producer(client, acks=-1) as producer:
            for (topic, partition), (up, down) in sorted(where.items()):
                sync = OffsetSync(topic, partition, up, down, 0)
                key, value = encode_offset_sync(sync)
                await producer.send(syncs_topic, value=value, key=key, headers=offset_sync_headers(sync),
                                    partition=0)
            await producer.flush()

    async def _ends(self, cluster: str) -> dict[tuple[str, int], int]:
        specs = {(t, p): "latest" for t, n in self.plan.topics.items() for p in range(n)}
        ends = await self._admin(cluster).list_offsets(specs)
        out = {}
        for tp, end in ends.items():
            if isinstance(end, KafkaError):
                raise FailoverError(f"{cluster}: end offset of {tp[0]}-{tp[1]}: {end}")
            out[tp] = end.offset
        return out

    async def _settled_ends(self, cluster: str) -> dict[tuple[str, int], int]:
        """The end offsets of the failover's topics on `cluster` once they hold still across
        two looks (after a fence or seal, a produce that passed the role check just before it
        has been appended by then)."""
        previous = None
        deadline = anyio.current_time() + PROPAGATION_TIMEOUT_S
        while True:
            ends = await self._ends(cluster)
            if ends == previous:
                return ends
            if anyio.current_time() > deadline:
                raise FailoverError(f"{cluster}: end offsets still moving after {PROPAGATION_TIMEOUT_S:g}s")
            previous = ends
            await anyio.sleep(0.2)

    async def _seal(self) -> str:
        n = await self._set_roles(self.plan.target, FENCED)
        return f"{count(n, 'replica')} on {self.plan.target} sealed"

    async def _promote(self) -> str:
        # Only after an unplanned failover may a producer from the old side skip sequences
        # here: the records it skips are stranded there (core/protocol/dr.py).
        stranded_on = self.plan.source if self.plan.kind == "unplanned" else None
        n = await self._set_roles(self.plan.target, None, {UNPLANNED_FROM: stranded_on})
        return f"{count(n, 'topic')} of {self.plan.target} writable"

    async def _switch_clients(self) -> str:
        phase = SWITCHING if self.plan.kind == "planned" else SERVING
        return await self._decide(phase)

    async def _decide(self, phase: str, active: str | None = None) -> str:
        pair = self.plan.pair
        active = active or self.plan.target
        access = self.config.pair_config(pair).access(active)
        decision = Decision(self.plan.key, self.plan.epoch, pair.region_of(active), active,
                            access.bootstrap, phase, time.time(), self.controller)
        properties = write_files(Path(self.config.state_dir), decision)
        self.context["properties_file"] = str(properties)
        published = []
        for cluster in (self.plan.target, self.plan.source):
            if cluster not in self.clients.clients and cluster != self.plan.target:
                continue        # the region that failed: it learns of the decision at failback
            try:
                with anyio.fail_after(self.clients.timeout_s * 2):
                    await publish(self._client(cluster), decision)
                published.append(cluster)
            except (KafkaError, OSError, TimeoutError):
                if cluster == self.plan.target:
                    raise
        return f"{decision.active_region} active ({phase}) in {properties} and on {', '.join(published)}"

    async def _sync_groups(self) -> str:
        """Once the groups have left the old active cluster, their committed offsets,
        translated exactly, into the promoted cluster's idle groups (only forward); then the
        decision says `serving`, and consumers join there."""
        source, target = self.plan.source, self.plan.target
        if source not in self.clients.clients:
            # The old side went away after the promotion: the mirror's checkpoints are the
            # groups' last known positions; consumers move now rather than never.
            await self._decide(SERVING)
            return f"{source} does not answer: groups keep the offsets the mirror last synced; consumers may join"
        admin = self._admin(source)
        target_admin = self._admin(target)
        topics = set(self.plan.topics)
        deadline = anyio.current_time() + self.config.groups_timeout_s
        while True:
            groups = [g.group_id for g in await admin.list_groups() if not g.group_id.startswith("__")
                      and (self.plan.groups is None or g.group_id in self.plan.groups)]
            busy = await _busy(admin, groups)
            # Members on the promoted side too: consumers the decision never sent there, or
            # (a cluster back from an outage) members that died with it and linger until
            # their session times out. Their offsets cannot be moved while they stay.
            busy_there = await _busy(target_admin, groups)
            if not (busy or busy_there) or anyio.current_time() > deadline:
                break
            if busy_there and not busy and self.context.get("after_outage"):
                # The promoted side is back from an outage, and every consumer following the
                # decision has been on the other side since: its members died with it.
                await self._remove_members(target_admin, busy_there)
            await anyio.sleep(0.2)
        store = await sync_store(self._client(source), target)
        offsets = await admin.list_groups_offsets({g: None for g in groups}) if groups else {}
        moved = 0
        for group, committed in sorted(offsets.items()):
            if not isinstance(committed, dict):
                continue
            wanted = {}
            for (topic, partition), om in committed.items():
                if topic not in topics or om is None or isinstance(om, KafkaError):
                    continue
                downstream = store.translate(topic, partition, om.offset)
                if downstream is not None:
                    wanted[(topic, partition)] = downstream
            if not wanted:
                continue
            there = (await target_admin.describe_groups([group])).get(group)
            if there is not None and not isinstance(there, KafkaError) and there.members \
                    and there.state not in IDLE_GROUP_STATES:
                continue        # already consuming there: its offsets are its own
            moved += await _commit_forward(target_admin, group, wanted)
        await self._decide(SERVING)
        still = f"; still consuming on {source} at the deadline: {', '.join(busy)}" if busy else ""
        if busy_there:
            still += f"; with members on {target} at the deadline, not moved: {', '.join(busy_there)}"
        return f"{count(moved, 'group')} moved to {target}, consumers may join there{still}"

    async def _restore_groups(self) -> str:
        """Unplanned: the old side cannot be asked where its groups stand, so the newest
        checkpoint the mirror wrote of each (on the promoted side: `<old>.checkpoints.internal`)
        is where they resume, committed into their idle groups there, only forward (the mirror's
        sync_group_offsets may have done it already; a running consumer's offsets are its own)."""
        source, target = self.plan.source, self.plan.target
        client, admin = self._client(target), self._admin(target)
        found, _ = await read_checkpoints(client, POLICY.checkpoints_topic(source))
        wanted: dict[str, dict[tuple[str, int], int]] = {}
        for (group, topic, partition), seen in found.items():
            if topic in self.plan.topics and (self.plan.groups is None or group in self.plan.groups):
                wanted.setdefault(group, {})[(topic, partition)] = seen.downstream
        moved, busy = 0, []
        for group, offsets in sorted(wanted.items()):
            if await _busy(admin, [group]):
                busy.append(group)
                continue
            moved += await _commit_forward(admin, group, offsets)
        self.context["groups_restored"] = moved
        note = f"; consuming there already, left alone: {', '.join(busy)}" if busy else ""
        return (f"{count(len(wanted), 'group')} checkpointed, {moved} moved forward on {target}{note}" if wanted
                else f"no checkpoints of {source}'s groups on {target}: groups start where they are there")

    async def _remove_members(self, admin: Admin, groups: list[str]) -> None:
        described = await admin.describe_groups(groups)
        for group, d in described.items():
            if isinstance(d, KafkaError) or not d.members:
                continue
            try:
                await admin.remove_members(group, d.members, reason="seaway dr: left over from an outage")
            except KafkaError as exc:
                self.report("sync-groups", f"      {group}: cannot remove its members left over from the "
                                           f"outage: {exc}")
                continue
            self.report("sync-groups", f"      {group}: removed {count(len(d.members), 'member')} left over from "
                                       f"the outage of {self.plan.target}")

    async def _reverse(self) -> str:
        if self.plan.source not in self.clients.clients:
            return f"{self.plan.source} does not answer: its copies are pointed back at failback"
        n = await self._set_roles(self.plan.source, self.plan.target)
        return f"{count(n, 'topic')} of {self.plan.source} now replicas of {self.plan.target}: the link back runs"


    # ------------------------------------------------------------------ failback (dr/stranded.py)

    async def _find_stranded(self) -> str:
        """Per partition of the returning copies: [first stranded offset, end, records]."""
        returning, active = self.plan.source, self.plan.target
        client = self._client(returning)
        # Every partition read below, the link's offset syncs too, holds all it has (stranded.py).
        tps = [(t, p) for t, n in sorted(self.plan.topics.items()) for p in range(n)]
        syncs = POLICY.offset_syncs_topic(active)
        if syncs in await self._admin(returning).list_topics(internal=True):
            tps_read = tps + [(syncs, 0)]
        else:
            tps_read = tps          # the link never ran: no sync proves anything, none to wait for
        try:
            ends = await caught_up_ends(client, tps_read)
        except NotCaughtUp as exc:
            raise FailoverError(f"{returning} has not caught up since its restart: {exc}") from None
        ends = {tp: end for tp, end in ends.items() if tp in set(tps)}
        starts = await self._admin(returning).list_offsets({tp: "earliest" for tp in ends})
        store = await sync_store(client, active, capacity=1 << 20)   # every sync: the boundary is near the latest
        promoted = self.context["promotion"]
        stranded: dict[str, list[int]] = {}
        unproven = []
        for (topic, partition), end in sorted(ends.items()):
            first = starts[(topic, partition)]
            log_start = first.offset if not isinstance(first, KafkaError) else 0
            boundary = stranded_boundary(store.syncs(topic, partition), promoted[topic][partition], log_start)
            if not boundary.proven:
                unproven.append(f"{topic}-{partition}")
            start, records = await stranded_range(client, topic, partition, boundary, end)
            stranded[f"{topic}/{partition}"] = [start, end, records]
            if records:
                self.report("find-stranded", f"      {topic}-{partition}: {records} stranded records, "
                                             f"offsets {start}..{end - 1}")
        total = sum(n for _, _, n in stranded.values())
        self.context["stranded"] = stranded
        self.context["stranded_records"] = total
        unplanned = self.context.get("promotion_failover")
        if unplanned is not None:       # its RPO, estimated then, is known now
            self.history.update(unplanned, rpo_records=total, rpo_exact=1)
        note = f"; no offset sync proves what {active} had of {', '.join(unproven[:5])}: counted from the " \
               f"log start" if unproven else ""
        return f"{count(total, 'stranded record')} on {returning} (the exact RPO of the unplanned failover){note}"

    async def _keep_stranded(self) -> str:
        returning = self.plan.source
        client = self._client(returning)
        todo = {key.rpartition("/")[0] for key, (_, _, n) in self.context["stranded"].items() if n}
        if todo:
            existing = set(await self._admin(returning).list_topics())
            new = [NewTopic(t + STRANDED_SUFFIX, self.plan.topics[t]) for t in sorted(todo)
                   if t + STRANDED_SUFFIX not in existing]
            if new:
                for name, error in (await self._admin(returning).create_topics(new)).items():
                    if error is not None and error.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                        raise FailoverError(f"{returning}: cannot create {name}: {error}")
        copied = await self._copy_stranded(client, suffix=STRANDED_SUFFIX)
        return f"{count(copied, 'stranded record')} kept in " + \
            (", ".join(sorted(t + STRANDED_SUFFIX for t in todo)) or "no topic") + f" on {returning}"

    async def _republish_stranded(self) -> str:
        copied = await self._copy_stranded(self._client(self.plan.target), suffix="")
        return f"{count(copied, 'stranded record')} re-published on {self.plan.target}, each with its origin"

    async def _copy_stranded(self, dest: KafkaClient, *, suffix: str) -> int:
        returning = self.plan.source
        source = self._client(returning)
        stranded = {k: v for k, v in self.context["stranded"].items() if v[2]}
        # Where each destination partition ended before the first copy: a run after a crash
        # reads from there what was copied already.
        if "dest_from" not in self.context:
            specs = {(k.rpartition("/")[0] + suffix, int(k.rpartition("/")[2])): "latest" for k in stranded}
            ends = await Admin(dest).list_offsets(specs) if specs else {}
            for tp, end in ends.items():
                if isinstance(end, KafkaError):
                    raise FailoverError(f"end offset of {tp[0]}-{tp[1]}: {end}")
            self.context["dest_from"] = {f"{t}/{p}": e.offset for (t, p), e in ends.items()}  # type: ignore[union-attr]
            self.history.update(self.failover_id, context=self.context)
        copied = 0
        for key, (start, end, _) in sorted(stranded.items()):
            topic, _, partition = key.rpartition("/")
            copied += await copy_stranded(source, returning, topic, int(partition), start, end, dest,
                                          topic + suffix, self.context["dest_from"][f"{topic}{suffix}/{partition}"])
        return copied

    async def _seed_syncs(self) -> str:
        """The link back (active -> returning) starts at the promotion point upstream and at
        the returning copy's end downstream, after its stranded records."""
        promoted = self.context["promotion"]
        where = {}
        for key, (_, end, _) in self.context["stranded"].items():
            topic, _, partition = key.rpartition("/")
            where[(topic, int(partition))] = (promoted[topic][int(partition)], end)
        await self._write_syncs(self.plan.target, self.plan.source, where)
        return f"{len(where)} partitions: the link back copies what {self.plan.target} took since its promotion"


def _by_topic(offsets: dict[tuple[str, int], int]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, []).append(offset)
        if len(out[topic]) != partition + 1:
            raise FailoverError(f"{topic}: no end offset for partition {len(out[topic]) - 1}")
    return out


async def _epoch_of(admin: Admin) -> int:
    resource = ConfigResource.topic(DR_STATE_TOPIC)
    found = (await admin.describe_configs(resource)).get(resource)
    return dr_epoch(found) if isinstance(found, dict) else 0


async def _busy(admin: Admin, groups: list[str]) -> list[str]:
    """Those of `groups` that have members consuming on the admin's cluster."""
    described = await admin.describe_groups(groups) if groups else {}
    return sorted(g for g, d in described.items()
                  if not isinstance(d, KafkaError) and d.state not in IDLE_GROUP_STATES and d.members)


async def _commit_forward(admin: Admin, group: str, offsets: dict[tuple[str, int], int]) -> int:
    """Commit the offsets the group has not passed yet (never back: what it read past stays
    read); 1 if any was committed, else 0."""
    current = await admin.list_group_offsets(group, list(offsets))
    forward = {tp: o for tp, o in offsets.items()
               if (now := current.get(tp)) is None or isinstance(now, KafkaError) or now.offset < o}
    if forward:
        await admin.alter_group_offsets(group, forward)
    return 1 if forward else 0
