"""A cluster's health as an operator reads it, asked over the wire like any client would:
the quorum's leader (DescribeQuorum on a controller listener), the brokers registered and
unfenced (DescribeCluster), and the under-replicated and offline partitions (Metadata).
A gateway says itself whether it serves (its /health).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import anyio

from core.client import Admin, KafkaClient
from core.client.describe import describe_cluster_at
from core.client.quorum import QuorumError, describe_quorum
from core.protocol.errors import KafkaError

from .layout import ClusterLayout


@dataclass
class ClusterHealth:
    region: str
    cluster: str
    controller_leader: int | None = None
    controller_epoch: int | None = None
    brokers: list[int] = field(default_factory=list)       # registered and unfenced
    expected_brokers: list[int] = field(default_factory=list)
    partitions: int = 0
    under_replicated: int = 0
    offline: int = 0
    error: str | None = None

    @property
    def healthy(self) -> bool:
        return self.controller_leader is not None and self.brokers == self.expected_brokers \
            and self.error is None

    def to_dict(self) -> dict:
        return dict(asdict(self), healthy=self.healthy)


async def cluster_health(cluster: ClusterLayout, timeout: float = 5.0, security=None) -> ClusterHealth:
    """`security`: the platform's (regions/security.py), whose admin user asks on a secured one."""
    health = ClusterHealth(cluster.region, cluster.name, expected_brokers=cluster.broker_ids)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_quorum, cluster, health, timeout,
                      security.admin_security(controller=True) if security is not None else None)
        tg.start_soon(_brokers_and_partitions, cluster, health, timeout,
                      security.admin_security() if security is not None else None)
    return health


async def _quorum(cluster: ClusterLayout, health: ClusterHealth, timeout: float, security) -> None:
    try:
        with anyio.fail_after(timeout):
            _, described = await describe_quorum(cluster.controller_bootstrap, int(timeout * 1000),
                                                 security=security)
    except (QuorumError, TimeoutError, OSError, Exception) as exc:   # noqa: BLE001 — shown as "no leader"
        health.error = health.error or f"quorum: {_short(exc)}"
        return
    if described.leader_id is not None and described.leader_id >= 0:
        health.controller_leader = described.leader_id
        health.controller_epoch = described.leader_epoch


async def _brokers_and_partitions(cluster: ClusterLayout, health: ClusterHealth, timeout: float,
                                  security) -> None:
    timeout_ms = int(timeout * 1000)
    client = KafkaClient(cluster.bootstrap, client_id="regions-status", default_api_timeout_ms=timeout_ms,
                         request_timeout_ms=timeout_ms, allow_auto_create_topics=False,
                         **({"security": security} if security is not None else {}))
    try:
        with anyio.fail_after(timeout):
            async with client:     # closes its connections even when the time is up
                admin = Admin(client, timeout_ms=timeout_ms)
                described = await admin.describe_cluster()
                seen = {b.node_id for b in described.brokers}
                # Every broker that answers must see them all: a broker whose metadata image
                # lags would hand a client that bootstraps from it a partial cluster.
                for view in await _every_brokers_view(cluster, timeout_ms, security):
                    seen &= view
                health.brokers = sorted(seen)
                topics = await admin.describe_topics(None)
                for desc in topics.values():
                    if isinstance(desc, KafkaError):
                        continue
                    for p in desc.partitions:
                        health.partitions += 1
                        if p.leader is None or p.leader < 0:
                            health.offline += 1
                        elif len(p.isr) < len(p.replicas):
                            health.under_replicated += 1
    except Exception as exc:   # noqa: BLE001 — a cluster that does not answer is a status, not a crash
        health.error = f"brokers: {_short(exc)}"


async def _every_brokers_view(cluster: ClusterLayout, timeout_ms: int, security) -> list[set[int]]:
    """The registered, unfenced brokers as each reachable broker of the cluster sees them
    (DescribeCluster on its own client listener); a broker that does not answer is down,
    which the cluster-wide answer already shows."""
    views: list[set[int]] = []

    async def ask(host: str, port: int) -> None:
        try:
            answer = await describe_cluster_at(host, port, timeout_ms=timeout_ms, security=security,
                                               client_id="regions-status")
        except (OSError, KafkaError):
            return
        if not answer.error_code:
            views.append({b.broker_id for b in answer.brokers})

    async with anyio.create_task_group() as tg:
        for n in cluster.nodes:
            if n.node.is_broker and n.client_port is not None:
                tg.start_soon(ask, n.node.host, n.client_port)
    return views


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:160]


def gateway_health(metrics_url: str, timeout: float = 1.0) -> tuple[bool, str]:
    """A gateway's own answer on /health, beside its /metrics: (200?, its one line, such as
    `serving eu-west-1`), or (False, why it did not answer)."""
    from urllib.error import HTTPError, URLError
    from urllib.request import urlopen
    url = metrics_url.removesuffix("/metrics") + "/health"
    try:
        with urlopen(url, timeout=timeout) as answer:
            return True, answer.read().decode(errors="replace").strip()
    except HTTPError as exc:
        return False, exc.read().decode(errors="replace").strip() or f"HTTP {exc.code}"
    except (URLError, OSError) as exc:
        return False, f"not answering ({_short(getattr(exc, 'reason', exc))})"
