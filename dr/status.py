"""What `dr status` and `dr serve` report of a DR pair: the active region, each cluster's DR
epoch and topics, the link's lag per partition and the RPO at risk, the readiness checks of a
failover from each active side, and the last failover and drill."""
from __future__ import annotations

import time

from .config import PairConfig
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
                         {f"{t}/{p}": [v.records, v.seconds] for (t, p), v in view.lag.items()})
        return view
    last = history.last_observation(pair.name)
    if last is None or not last["active"] or view.clusters[last["active"]].reachable:
        return view         # only an active side that stopped answering is judged by what it last showed
    lag = {}
    for key, (records, seconds) in last["lag"].items():
        topic, _, partition = key.rpartition("/")
        lag[(topic, int(partition))] = PartitionLag(records, seconds + (time.time() - last["at"]))
    return PairView(view.pair, view.clusters, lag)


async def pair_status(pair_config: PairConfig, history: History, *, timeout_s: float) -> dict:
    async with PairClients(pair_config, timeout_s=timeout_s) as clients:
        view = await view_of(clients, history)
    active = view.active()
    # Ready: every region that is active for some topic could fail over now.
    plans = []
    for cluster in (view.pair.first, view.pair.second):
        if view.active_for(cluster):
            try:
                plans.append(plan_failover(view, view.pair.region_of(cluster)))
            except PlanError:
                pass
    checks = [c for plan in plans for c in plan.checks]
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
        "lag": [{"topic": t, "partition": p, "records": v.records, "seconds": round(v.seconds, 3)}
                for (t, p), v in sorted(view.lag.items())],
        "lag_known": view.lag_known,
        "rpo_at_risk": {"records": sum(v.records for v in view.lag.values()),
                        "seconds": round(max((v.seconds for v in view.lag.values()), default=0.0), 3)},
        "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail, "blocking": c.blocking} for c in checks],
        # Ready: nothing would stop a failover, and nothing advises against one.
        "ready": bool(plans) and all(c.ok for c in checks) and not view.unsettled(),
        "last_failover": None if last is None else {k: last[k] for k in (
            "id", "kind", "state", "source", "target", "started_at", "rto_writes_s", "rpo_records")},
        "last_drill": None if drill is None else {k: drill[k] for k in (
            "id", "region", "mode", "state", "started_at", "rpo_records", "rto_writes_s", "rto_reads_s", "report")},
    }
