"""Automatic failover: optional, off by default (`auto_failover_after_s`, in the topology's `dr:`
or dr.yaml). `dr serve` carries it out; people decide otherwise.

Theory of operation
-------------------
An unplanned failover loses what the link had not copied, and two active regions are worse
than one down: so the controller acts only on evidence from two places, for a whole period,
and never on a guess. For a pair whose active cluster is A and partner B, at each poll:

1. the controller's own view: A has not answered any poll for at least `after_s` (counted
   from the first poll it failed; one answer resets it);
2. the surviving region's view: B answers, and B has not heard from A for at least `after_s`.
   What B hears is A's heartbeats: the link out of A writes one a second into A's `heartbeats`
   topic and copies it into B as `<A>.heartbeats` (mirror/link.py; never a DR topic), so the
   newest heartbeat on B is when A last reached B through the link. No heartbeat topic on B,
   or none read, means B cannot say: the controller does not act;
3. nothing else is under way: no failover of the pair half done, no region half promoted,
   and the controller lock free (a person's `dr failover` or a drill goes first).

Then it runs what `dr failover A --force` runs (dr/failover.py: the same steps, epoch and
history), marked automatic with the evidence in the history row's context. The epoch keeps
it from racing a person's failover. One failover per outage: afterwards B is active, and A's
return is a `dr failback` that people run.

What this cannot tell apart: A down, versus A cut off from both the controller and B while
its clients still reach it. That is why the period is the operator's to choose, why it is
off by default, and why the evidence is kept.

Worked example (after_s 30, polls every 5 s): A is killed at t=0. Polls at 5, 10, ... fail;
the first failure is at 5, so (1) holds from t=35. A's last heartbeat reached B at t=0, so
(2) holds from t=30. At the poll of t=35 the controller fails over.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from core.client import Admin, KafkaClient
from core.client.errors import KafkaError
from mirror.policy import HEARTBEATS_TOPIC
from mirror.records import decode_heartbeat

from .observe import POLICY
from .stranded import read_range


@dataclass(frozen=True)
class Verdict:
    act: bool
    reason: str         # one line, for the log and the history


def judge(*, unreachable_for: float | None, partner_reachable: bool, heard_ago: float | None, after_s: float,
          busy: str | None = None) -> Verdict:
    """Whether to fail the active cluster over now (the module's docstring): `unreachable_for`,
    seconds since the first of the unbroken run of polls it failed (None: it answers);
    `heard_ago`, the age of the newest heartbeat from it on the partner (None: unknown);
    `busy`, why something else is under way."""
    if unreachable_for is None:
        return Verdict(False, "the active cluster answers")
    if unreachable_for < after_s:
        return Verdict(False, f"the active cluster has not answered for {unreachable_for:.0f}s of {after_s:g}s")
    if not partner_reachable:
        return Verdict(False, "the partner does not answer either: no surviving region to fail over to")
    if heard_ago is None:
        return Verdict(False, "the partner cannot say when it last heard from the active cluster (no heartbeats "
                              "copied to it)")
    if heard_ago < after_s:
        return Verdict(False, f"the partner heard from the active cluster {heard_ago:.0f}s ago: not an outage "
                              f"from where it stands")
    if busy is not None:
        return Verdict(False, busy)
    return Verdict(True, f"unreachable from the controller for {unreachable_for:.0f}s and unheard by the partner "
                         f"for {heard_ago:.0f}s (after {after_s:g}s)")


class OutageClock:
    """Per cluster, when the unbroken run of polls it failed began."""

    def __init__(self):
        self._since: dict[str, float] = {}

    def observe(self, cluster: str, reachable: bool, now: float) -> float | None:
        """Seconds it has been unreachable as of `now` (None: it answered)."""
        if reachable:
            self._since.pop(cluster, None)
            return None
        return now - self._since.setdefault(cluster, now)


async def heard_ago(partner: KafkaClient, active: str, now: float | None = None) -> float | None:
    """Seconds since the newest heartbeat from `active` that reached `partner` (None: no
    heartbeat topic, or no heartbeat in it)."""
    topic = POLICY.format_remote_topic(active, HEARTBEATS_TOPIC)
    admin = Admin(partner)
    if topic not in await admin.list_topics(internal=True):
        return None
    end = (await admin.list_offsets({(topic, 0): "latest"}))[(topic, 0)]
    if isinstance(end, KafkaError) or end.offset == 0:
        return None
    newest = None
    async for record in read_range(partner, topic, 0, end.offset - 1, end.offset):
        try:
            newest = decode_heartbeat(record.key, record.value).timestamp / 1000
        except ValueError:
            return None
    return None if newest is None else max(0.0, (time.time() if now is None else now) - newest)
