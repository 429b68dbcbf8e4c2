"""The platform at a glance: regions, then clusters, then nodes, each with a health and the
words for it, from the overview's instant queries (charts.STATUS). No I/O.

Health is one of three, so a problem shows in colour and in words:

    bad   something is down or refused now: a node does not answer its scrape, a partition
          has no leader, a partition's ISR is below min.insync.replicas (acks=all refused),
          no active controller or more than one;
    warn  redundancy is reduced: under-replicated or at-min-ISR partitions (one more failure
          refuses acks=all), fenced brokers, a node whose metadata lags its quorum;
    ok    none of these.

A cluster is as bad as its worst node or partition. Counts come from the nodes that answer:
the partition gauges are each leader's own (summed), the controller's gauges are its image's
(the active controller's are taken), and a dead node's series are gone (stale), so nothing a
dead node said last counts.

Quorum lag: each node reports the offset after the last metadata record it applied; a node's
lag is the highest of its cluster's answering nodes minus its own. A lag measured across
scrapes taken milliseconds apart is noise, so only more than QUORUM_LAG_WARN records warns.
"""
from __future__ import annotations

from collections.abc import Mapping

from .series import Labels

Vector = Mapping[Labels, float]

QUORUM_LAG_WARN = 100           # records
DISK_FREE_WARN = 0.10           # of the file system
_RANK = {"ok": 0, "warn": 1, "bad": 2}


def worst(*healths: str) -> str:
    return max(healths, key=_RANK.__getitem__, default="ok")


def by_instance(vector: Vector) -> dict[str, tuple[dict[str, str], float]]:
    out = {}
    for labels, value in vector.items():
        d = dict(labels)
        if "instance" in d:
            out[d["instance"]] = (d, value)
    return out


def _partitions(n: float, state: str) -> str:
    return f"{int(n)} partition{'' if n == 1 else 's'} {state}"


def platform_view(instants: Mapping[str, Vector], known_nodes: Mapping[str, dict[str, str]],
                  regions: list[str] | None = None) -> dict:
    """The overview. `known_nodes` is instance -> seaway_node_info's labels as last seen (a
    dead node no longer reports them, and it must still be shown by its id); `regions` the
    topology's order, where known."""
    def get(name: str) -> dict[str, tuple[dict[str, str], float]]:
        return by_instance(instants.get(name, {}))

    up = get("up")
    values = {name: get(name) for name in ("leader", "epoch", "active", "fenced", "unfenced", "offline",
                                             "under_replicated", "under_min_isr", "at_min_isr", "leaders",
                                             "replicas", "applied", "disk_used", "disk_free", "disk_total")}
    clusters: dict[tuple[str, str], list[dict]] = {}
    for instance, (labels, value) in sorted(up.items()):
        info = known_nodes.get(instance, {})
        node = {"instance": instance, "node_id": info.get("node_id"), "roles": info.get("roles", ""),
                "rack": info.get("rack", ""), "up": value == 1}
        for name, vals in values.items():
            found = vals.get(instance)
            node[name] = found[1] if found is not None and node["up"] else None
        clusters.setdefault((labels.get("region", ""), labels.get("cluster", "")), []).append(node)

    out_regions: dict[str, list[dict]] = {}
    for (region, name), nodes in clusters.items():
        nodes.sort(key=lambda n: (int(n["node_id"]) if (n["node_id"] or "").isdigit() else 1 << 30, n["instance"]))
        out_regions.setdefault(region, []).append(_cluster(name, nodes))
    order = list(regions or []) + sorted(r for r in out_regions if r not in (regions or []))
    result = []
    for region in order:
        cs = sorted(out_regions.get(region, []), key=lambda c: c["name"])
        result.append({"name": region, "clusters": cs,
                       "health": worst(*(c["health"] for c in cs)) if cs else "bad",
                       "problems": [] if cs else ["no cluster answers (or none is known)"]})
    return {"regions": result, "health": worst(*(r["health"] for r in result))}


def _cluster(name: str, nodes: list[dict]) -> dict:
    live = [n for n in nodes if n["up"]]
    problems: list[tuple[str, str]] = []           # (health, words)
    for n in nodes:
        n["problems"], n["health"] = [], "ok"
        who = f"node {n['node_id']}" if n["node_id"] else n["instance"]
        if not n["up"]:
            n["health"] = "bad"
            n["problems"].append("down: does not answer")
            problems.append(("bad", f"{who} is down"))
    # The controller: the active one's gauges; the epoch and leader as the most nodes know them.
    actives = [n for n in live if n["active"] == 1]
    controller = None
    if live:
        best = max(live, key=lambda n: n["epoch"] or -1)
        if best["leader"] is not None and best["leader"] >= 0:
            controller = {"leader": int(best["leader"]), "epoch": int(best["epoch"] or 0)}
    if not actives and any("controller" in (n["roles"] or "controller") for n in live):
        problems.append(("bad", "no active controller"))
    if len(actives) > 1:
        problems.append(("bad", f"{len(actives)} active controllers"))
    source = actives[0] if actives else None
    brokers = {"active": _int(source["unfenced"]) if source else None,
               "fenced": _int(source["fenced"]) if source else None}
    offline = max((n["offline"] or 0 for n in live), default=0)
    partitions = {"offline": int(offline)}
    for key in ("under_replicated", "under_min_isr", "at_min_isr", "leaders", "replicas"):
        partitions[key] = int(sum(n[key] or 0 for n in live))
    highest = max((n["applied"] for n in live if n["applied"] is not None), default=None)
    for n in nodes:
        n["metadata_lag"] = None if highest is None or n["applied"] is None else int(highest - n["applied"])
        if (n["metadata_lag"] or 0) > QUORUM_LAG_WARN:
            n["health"] = worst(n["health"], "warn")
            n["problems"].append(f"metadata {n['metadata_lag']} records behind its quorum")
        if n["disk_free"] is not None and n["disk_total"] and n["disk_free"] < DISK_FREE_WARN * n["disk_total"]:
            n["health"] = worst(n["health"], "warn")
            n["problems"].append(f"disk {100 * n['disk_free'] / n['disk_total']:.0f}% free")
        n["active_controller"] = n["active"] == 1
    lags = [n["metadata_lag"] for n in nodes if n["metadata_lag"] is not None]
    quorum_lag = max(lags, default=None)
    if quorum_lag is not None and quorum_lag > QUORUM_LAG_WARN:
        problems.append(("warn", f"metadata quorum lag {quorum_lag} records"))
    if partitions["offline"]:
        problems.append(("bad", _partitions(partitions["offline"], "offline")))
    if partitions["under_min_isr"]:
        problems.append(("bad", _partitions(partitions["under_min_isr"], "under min ISR (acks=all refused)")))
    if partitions["under_replicated"]:
        problems.append(("warn", _partitions(partitions["under_replicated"], "under-replicated")))
    if partitions["at_min_isr"]:
        problems.append(("warn", _partitions(partitions["at_min_isr"], "at min ISR")))
    if brokers["fenced"]:
        problems.append(("warn", f"{brokers['fenced']} fenced broker" + ("s" if brokers["fenced"] != 1 else "")))
    if not live:
        problems.append(("bad", "no node answers"))
    health = worst(*(h for h, _ in problems))
    for n in nodes:
        for key in ("leader", "epoch", "active", "fenced", "unfenced", "offline", "applied"):
            n.pop(key, None)
    return {"name": name, "health": health, "problems": [words for _, words in problems],
            "controller": controller, "quorum_lag": quorum_lag, "brokers": brokers, "partitions": partitions,
            "nodes": nodes}


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


def links_view(instants: Mapping[str, Vector], rpo_target_s: float | None = None) -> list[dict]:
    """Each mirror link's lag in records and seconds against its RPO target, throughput,
    checkpoint age and errors, with a health: bad past the RPO target, warn past half of it
    or with errors or a checkpoint pass older than a minute."""
    def by_link(name: str) -> dict[str, float]:
        return {dict(labels).get("link", ""): v for labels, v in instants.get(name, {}).items()}

    records, seconds, target = by_link("link_lag_records"), by_link("link_lag_seconds"), by_link("link_rpo_target")
    age, throughput, errors = by_link("link_checkpoint_age"), by_link("link_bytes"), by_link("link_errors")
    out = []
    for link in sorted(set(records) | set(seconds) | set(target)):
        rpo = target.get(link, rpo_target_s)
        lag_s = seconds.get(link)
        problems: list[tuple[str, str]] = []
        if lag_s is not None and rpo and lag_s > rpo:
            problems.append(("bad", f"lag {lag_s:.0f} s is past the RPO target of {rpo:g} s"))
        elif lag_s is not None and rpo and lag_s > rpo / 2:
            problems.append(("warn", f"lag {lag_s:.0f} s is past half the RPO target of {rpo:g} s"))
        if errors.get(link):
            problems.append(("warn", f"{errors[link]:.2f} errors/s"))
        if age.get(link) is not None and age[link] > 60:
            problems.append(("warn", f"checkpoints {age[link]:.0f} s old"))
        out.append({"link": link, "lag_records": _int(records.get(link)), "lag_seconds": lag_s,
                    "rpo_target_s": rpo, "checkpoint_age_s": age.get(link), "bytes_per_s": throughput.get(link),
                    "errors_per_s": errors.get(link), "health": worst(*(h for h, _ in problems)),
                    "problems": [w for _, w in problems]})
    return out
