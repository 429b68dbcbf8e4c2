"""What `dr status` and `dr serve` report of a DR pair: the active region, each cluster's DR
epoch and topics, the link's lag per partition (records, bytes, seconds) and the RPO at risk,
the age of the standby's checkpoints and each group's sync (dr/groups.py), the readiness
checks of a failover from each active side, and the last failover and drill."""
from __future__ import annotations

import time

from .config import PairConfig
from .gateway_probe import probe_gateways
from .groups import checkpoint_age, group_syncs
from .history import History
from .observe import PairClients, observe
from .plan import PairView, PartitionLag, PlanError, plan_failover


async def view_of(clients: PairClients, history: History) -> PairView:
    """The pair as it is now; where the active side cannot be asked for its lag, the last lag
    seen (for an unplanned failover's expected loss). Every lag seen is kept."""
    view = await observe(clients)
    pair = clients.config.pair
    if view.lag_known:
        history.observed(pair.name, view.active(),
                         {f"{t}/{p}": [v.records, v.seconds, v.bytes, v.bytes_estimated]
                          for (t, p), v in view.lag.items()})
        return view
    last = history.last_observation(pair.name)
    if last is None or not last["active"] or view.clusters[last["active"]].reachable:
        return view         # only an active side that stopped answering is judged by what it last showed
    lag = {}
    for key, (records, seconds, *size) in last["lag"].items():     # size: since bytes were kept
        topic, _, partition = key.rpartition("/")
        lag[(topic, int(partition))] = PartitionLag(records, seconds + (time.time() - last["at"]),
                                                    *(size or [None, False]))
    return PairView(view.pair, view.clusters, lag, groups=view.groups, lag_seen_at=last["at"])


async def pair_status(pair_config: PairConfig, history: History, *, timeout_s: float) -> dict:
    async with PairClients(pair_config, timeout_s=timeout_s) as clients:
        view = await view_of(clients, history)
    active = view.active()
    # Ready: every region that is active for some topic could fail over now.
    now = time.time()
    plans = []
    for cluster in (view.pair.first, view.pair.second):
        if view.active_for(cluster):
            try:
                plans.append(plan_failover(view, view.pair.region_of(cluster), now=now))
            except PlanError:
                pass
    checks = [c for plan in plans for c in plan.checks]
    groups = [s for seen in view.groups.values()
              for s in group_syncs(seen, now, topics=set(view.active_for(seen.active)))]
    gateways = await probe_gateways(pair_config.gateways, view.pair.name)
    last = next((f for f in history.failovers() if f["pair"] == view.pair.name), None)
    drill = next((d for d in history.drills() if d["pair"] == view.pair.name), None)
    return {
        "pair": view.pair.name,
        "active_region": view.pair.region_of(active) if active else None,
        "active_cluster": active,
        "active_for": {view.pair.region_of(c): len(view.active_for(c)) for c in (view.pair.first, view.pair.second)},
        "unsettled": view.unsettled(),
        "clusters": {name: {"region": view.pair.region_of(name), "reachable": c.reachable, "epoch": c.epoch,
                            "error": c.error,
                            "topics": {t: {"partitions": n, "replica_of": r} for t, (n, r) in sorted(c.topics.items())}}
                     for name, c in view.clusters.items()},
        "lag": [{"topic": t, "partition": p, "records": v.records, "bytes": v.bytes,
                 "bytes_estimated": v.bytes_estimated, "seconds": round(v.seconds, 3)}
                for (t, p), v in sorted(view.lag.items())],
        "lag_known": view.lag_known,
        "rpo_at_risk": {"records": sum(v.records for v in view.lag.values()),
                        # a partition whose bytes could not be measured counts 0, and makes the sum estimated
                        "bytes": sum(v.bytes or 0 for v in view.lag.values()),
                        "bytes_estimated": any(v.bytes_estimated or v.bytes is None for v in view.lag.values()),
                        "seconds": round(max((v.seconds for v in view.lag.values()), default=0.0), 3)},
        "checkpoints": {
            "age_seconds": _rounded(checkpoint_age(list(view.groups.values()), now)),
            "groups": [{"group": s.group, "standby": s.standby, "partitions": s.partitions, "synced": s.synced,
                        "age_seconds": _rounded(s.age_s),
                        "missing": [{"topic": t, "partition": p} for t, p in s.missing],
                        "ahead_of_link": [{"topic": t, "partition": p} for t, p in s.ahead],
                        "stale": [{"topic": b.topic, "partition": b.partition, "commit": b.commit,
                                   "checkpoint": b.checkpoint, "age_seconds": round(b.age_s, 3)} for b in s.stale]}
                       for s in groups],
            "errors": {seen.active: seen.error for seen in view.groups.values() if seen.error},
        },
        "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail, "blocking": c.blocking} for c in checks],
        # Ready: nothing would stop a failover, and nothing advises against one.
        "ready": bool(plans) and all(c.ok for c in checks) and not view.unsettled(),
        "gateways": gateways,
        "last_failover": None if last is None else {k: last[k] for k in (
            "id", "kind", "state", "source", "target", "started_at", "rto_writes_s", "rpo_records")},
        "last_drill": None if drill is None else {k: drill[k] for k in (
            "id", "region", "mode", "state", "started_at", "rpo_records", "rto_writes_s", "rto_reads_s", "report")},
    }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
