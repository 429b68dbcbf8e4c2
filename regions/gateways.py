"""The gateways of a platform (`seaway gateway`, core/gateway): for each DR pair of the topology,
one in every region, so that an application bootstraps from a gateway of its own region and
rides through the pair's failovers. Pure: `regions up` (layout.py) and `regions compose`
(compose.py) place the same gateways, each with its own ports.

A gateway listens on one port per slot (as many slots as the pair's larger cluster has
brokers) and serves /metrics and /health on another. Where the topology fixes every broker's
port (as the shipped ones do, and as compose needs), the gateways' ports are fixed too, so
that their addresses are known in advance and the same with `regions up` and compose: the
k-th gateway (pairs in file order, then regions in file order) has the block of ports from
31092 + 100 k, its slots at the start and its metrics at 98 past it (31092.. and 31190 for the
first), skipping any block that holds a port the topology names. Otherwise the launcher picks
free ports once and keeps them, as it does for nodes.

On a secured topology a gateway's ports take TLS and SCRAM as the brokers' client listeners
do, with a certificate of its own from the platform CA (for 127.0.0.1, localhost and its
compose service name), so clients use the platform's client properties through it unchanged:
their logins are relayed to the brokers, and their requests reach the brokers in Envelopes
(KIP-590) that the gateway sends as the platform's `seaway-gateway` user, whose only ACLs are
ClusterAction and reading `__seaway_dr` (regions/security.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from .topology import Topology, TopologyError

# Below Linux's ephemeral range (32768-60999): a fixed port there can be taken by any
# outgoing connection or free_port() of the moment (CI met it, with compose publishing 39092).
FIRST_GATEWAY_PORT = 31092
GATEWAY_BLOCK = 100             # ports per gateway in the fixed scheme
GATEWAY_METRICS_OFFSET = 98     # the metrics port, past the block's first (slots are at most 64)


@dataclass(frozen=True)
class GatewaySpec:
    """One gateway: the DR pair it serves (its primary first) and the region it is in."""
    first: str
    second: str
    region: str
    slots: int

    @property
    def pair(self) -> str:
        """The pair's name, as `dr status` and the decision record spell it (dr/plan.py DrPair)."""
        return f"{self.first}~{self.second}"

    @property
    def name(self) -> str:
        """How the platform names it: its compose service, log file and ports. A cluster is in
        at most one DR pair, so the pair's primary names the pair."""
        return f"gateway-{self.region}-{self.first}"


def gateway_specs(topology: Topology) -> list[GatewaySpec]:
    specs = []
    for link in topology.dr_pairs():
        slots = max(len(topology.cluster(c).brokers) for c in (link.source, link.target))
        for region in topology.regions:
            specs.append(GatewaySpec(link.source, link.target, region, slots))
    return specs


def ports_are_fixed(topology: Topology) -> bool:
    """The topology names every broker's port, so the gateways' ports are fixed too."""
    return all(n.port is not None for _, _, c in topology.clusters() for n in c.brokers)


def fixed_gateway_ports(topology: Topology) -> dict[str, tuple[list[int], int]]:
    """Each gateway's slot ports and metrics port in the fixed scheme, by name."""
    named = {p for _, _, c in topology.clusters() for n in c.nodes
             for p in (n.port, n.controller_port, n.metrics_port) if p is not None}
    out: dict[str, tuple[list[int], int]] = {}
    base = FIRST_GATEWAY_PORT
    for spec in gateway_specs(topology):
        while True:
            slots = list(range(base, base + spec.slots))
            metrics = base + GATEWAY_METRICS_OFFSET
            base += GATEWAY_BLOCK
            if metrics > 65535:
                raise TopologyError("mirrors: too many DR pairs' gateways for the ports below 65536")
            if not named & {*slots, metrics}:
                break
        out[spec.name] = (slots, metrics)
    return out
