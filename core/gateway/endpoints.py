"""What a client learns about brokers through the gateway (issue 19's first part, no I/O): every
broker address becomes one of the gateway's own, and every broker id a *slot* that stays valid
whichever cluster of the DR pair the gateway serves.

Theory of operation
-------------------
Kafka clients route by broker id: a partition's leader id picks the connection, and the
connection's address comes from the Metadata the client last read. A gateway between the
client and a cluster must therefore hand out addresses it listens on, and ids that still
mean something after it has moved the client to the other cluster, whose brokers have ids and
addresses of their own.

So the gateway listens on one address per *slot*, 0..n-1, and a SlotMap says which broker of
the active cluster each slot forwards to: the cluster's brokers in id order, one per slot. A
client sees only slots, as if the cluster's brokers had ids 0..n-1 at the gateway's
addresses. When the gateway moves to the other cluster its slots forward to that cluster's
brokers in id order; a leader id a client cached is then a slot that answers, and, if it
does not lead the partition there, it answers NOT_LEADER_OR_FOLLOWER and the client reads
Metadata again, as after any leader change.

Clients also see one cluster id, the pair's (`pair_cluster_id`), whichever cluster is active:
to a client the gateway is one cluster, and a client that sees the id change concludes it is
"connected to multiple clusters" (librdkafka warns so; Java clients tell their
ClusterResourceListeners). Every gateway of a pair derives the same id from the pair's name,
so a client may list several in its bootstrap.

The rules, for each response that names brokers (Metadata, FindCoordinator, DescribeCluster):
every broker id of the active cluster becomes its slot, and every (host, port) the slot's
gateway address; an id no slot holds (a broker beyond the gateway's slots, or one not in the
broker list, such as an offline replica's) is dropped from broker lists and replica lists,
and as a leader or coordinator becomes -1 with no address, which clients treat as "not known
yet, ask again". The rack is kept: rack-aware clients fetch from the nearest replica. -1
stays -1.

Responses that can name a new leader in passing (Produce v10+ and Fetch v12+ carry
`current_leader` and node endpoints, KIP-951) are not rewritten here: the gateway advertises
those APIs only up to the versions before them (`GATEWAY_MAX_VERSIONS`), so that their
responses, records included, pass through as bytes. `advertised_versions` intersects that
with what the active cluster supports.
"""
from __future__ import annotations

import base64
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

from core.protocol import messages as m
from core.protocol.api_keys import ApiKey

# APIs whose newer versions name brokers inside responses the gateway forwards undecoded: it
# offers them only up to here (Produce v10 and Fetch v12 add current_leader and node
# endpoints; KIP-951, KIP-392).
GATEWAY_MAX_VERSIONS: dict[int, int] = {ApiKey.PRODUCE: 9, ApiKey.FETCH: 11,
                                        # as the brokers: transaction version 2 is not served
                                        ApiKey.ADD_PARTITIONS_TO_TXN: 4, ApiKey.END_TXN: 4}

# What a client may ask through the gateway: the client-facing APIs whose requests name no
# broker (AlterPartitionReassignments and ListPartitionReassignments name replicas by broker
# id, which a client only knows as slots; DescribeQuorum v2 carries endpoints; the rest are
# between brokers and controllers). A request for any other API closes the connection, as a
# broker does for an API it does not serve.
FORWARDED_APIS = frozenset({
    ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.LIST_OFFSETS, ApiKey.METADATA, ApiKey.OFFSET_COMMIT,
    ApiKey.OFFSET_FETCH, ApiKey.FIND_COORDINATOR, ApiKey.JOIN_GROUP, ApiKey.HEARTBEAT,
    ApiKey.LEAVE_GROUP, ApiKey.SYNC_GROUP, ApiKey.DESCRIBE_GROUPS, ApiKey.LIST_GROUPS,
    ApiKey.SASL_HANDSHAKE, ApiKey.API_VERSIONS, ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS,
    ApiKey.DELETE_RECORDS, ApiKey.INIT_PRODUCER_ID, ApiKey.OFFSET_FOR_LEADER_EPOCH,
    ApiKey.DESCRIBE_ACLS, ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS, ApiKey.DESCRIBE_CONFIGS,
    ApiKey.ALTER_CONFIGS, ApiKey.SASL_AUTHENTICATE, ApiKey.CREATE_PARTITIONS, ApiKey.DELETE_GROUPS,
    ApiKey.ELECT_LEADERS, ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.OFFSET_DELETE,
    ApiKey.DESCRIBE_CLUSTER, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
    # a transactional producer's requests, and the tools that look at transactions
    ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.END_TXN, ApiKey.TXN_OFFSET_COMMIT,
    ApiKey.DESCRIBE_PRODUCERS, ApiKey.DESCRIBE_TRANSACTIONS, ApiKey.LIST_TRANSACTIONS,
})


@cache
def gateway_versions() -> dict[int, tuple[int, int]]:
    """api key -> (min, max) the gateway itself can serve: its codec's, for FORWARDED_APIS
    (computed once: every request is checked against it)."""
    return {key: (api.min_version, min(api.max_version, GATEWAY_MAX_VERSIONS.get(key, api.max_version)))
            for key, api in m.API.items() if key in FORWARDED_APIS}


_PAIR_NAMESPACE = uuid.UUID("5e1a3a7e-9a7e-4a7e-8c1d-5ea3a7e9a7e1")


def pair_cluster_id(pair: str) -> str:
    """The cluster id clients see through any gateway of `pair`: a name-based UUID in the
    22-character form Kafka's cluster ids take."""
    return base64.urlsafe_b64encode(uuid.uuid5(_PAIR_NAMESPACE, pair).bytes).rstrip(b"=").decode()


@dataclass(frozen=True)
class Address:
    host: str
    port: int


class SlotMap:
    """The active cluster's brokers, in id order, on the gateway's slots."""

    def __init__(self, gateway: list[Address], broker_ids: list[int], cluster_id: str | None = None):
        if not gateway:
            raise ValueError("a gateway needs at least one address")
        self.gateway = list(gateway)
        self.cluster_id = cluster_id        # None: the cluster's own is kept
        self._slot = {broker: slot for slot, broker in enumerate(sorted(set(broker_ids))[:len(gateway)])}
        self._broker = {slot: broker for broker, slot in self._slot.items()}
        # Brokers beyond the gateway's slots are not reachable through it.
        self.unserved = sorted(set(broker_ids))[len(gateway):]

    def slot(self, broker_id: int) -> int:
        """The slot of a broker id; -1 for -1 and for a broker no slot holds."""
        return self._slot.get(broker_id, -1)

    def broker(self, slot: int) -> int | None:
        """The broker a slot forwards to (None: this cluster has fewer brokers than slots)."""
        return self._broker.get(slot)

    def address(self, slot: int) -> Address:
        return self.gateway[slot]


def rewrite_metadata(resp: m.MetadataResponse, slots: SlotMap) -> m.MetadataResponse:
    resp.brokers = [m.MetadataResponse.MetadataResponseBroker(node_id=slot, host=a.host, port=a.port, rack=rack)
                    for slot, a, rack in _served(((b.node_id, b.rack) for b in resp.brokers), slots)]
    resp.controller_id = slots.slot(resp.controller_id)
    if slots.cluster_id is not None and resp.cluster_id is not None:
        resp.cluster_id = slots.cluster_id
    for topic in resp.topics:
        for p in topic.partitions:
            p.leader_id = slots.slot(p.leader_id)
            p.replica_nodes = _slots(p.replica_nodes, slots)
            p.isr_nodes = _slots(p.isr_nodes, slots)
            p.offline_replicas = _slots(p.offline_replicas, slots)
    return resp


def rewrite_find_coordinator(resp: m.FindCoordinatorResponse, slots: SlotMap) -> m.FindCoordinatorResponse:
    """v0-3 answer one key at the top level, v4+ per key in `coordinators`: both are rewritten
    (the other form is empty or defaults)."""
    resp.node_id, resp.host, resp.port = _endpoint(resp.node_id, resp.error_code, slots)
    for c in resp.coordinators:
        c.node_id, c.host, c.port = _endpoint(c.node_id, c.error_code, slots)
    return resp


def rewrite_describe_cluster(resp: m.DescribeClusterResponse, slots: SlotMap) -> m.DescribeClusterResponse:
    resp.brokers = [m.DescribeClusterResponse.DescribeClusterBroker(broker_id=slot, host=a.host, port=a.port,
                                                                    rack=rack)
                    for slot, a, rack in _served(((b.broker_id, b.rack) for b in resp.brokers), slots)]
    resp.controller_id = slots.slot(resp.controller_id)
    if slots.cluster_id is not None:
        resp.cluster_id = slots.cluster_id
    return resp


def advertised_versions(cluster: dict[int, tuple[int, int]], gateway: dict[int, tuple[int, int]]
                        ) -> dict[int, tuple[int, int]]:
    """api key -> (min, max) that the client may use: offered by the active cluster and the
    gateway, capped by GATEWAY_MAX_VERSIONS; an API with no version in common is left out."""
    out = {}
    for key, (cmin, cmax) in cluster.items():
        if key not in gateway:
            continue
        gmin, gmax = gateway[key]
        low, high = max(cmin, gmin), min(cmax, gmax, GATEWAY_MAX_VERSIONS.get(key, cmax))
        if low <= high:
            out[key] = (low, high)
    return out


def _served(brokers: Iterable[tuple[int, str | None]], slots: SlotMap) -> list[tuple[int, Address, str | None]]:
    """(slot, gateway address, rack) of the listed (id, rack) brokers a slot holds, by slot."""
    return sorted(((slot, slots.address(slot), rack) for broker, rack in brokers if (slot := slots.slot(broker)) >= 0),
                  key=lambda served: served[0])


def _slots(ids: list[int], slots: SlotMap) -> list[int]:
    return [s for s in (slots.slot(i) for i in ids) if s >= 0]


def _endpoint(broker_id: int, error_code: int, slots: SlotMap) -> tuple[int, str, int]:
    slot = slots.slot(broker_id) if not error_code else -1
    if slot < 0:
        return -1, "", -1
    a = slots.address(slot)
    return slot, a.host, a.port


def rewrite_api_versions(resp: m.ApiVersionsResponse) -> m.ApiVersionsResponse:
    """The versions a client may use through the gateway (the cluster's, narrowed by the
    gateway's); features are the cluster's."""
    cluster = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    V = m.ApiVersionsResponse.ApiVersion
    resp.api_keys = [V(api_key=k, min_version=lo, max_version=hi)
                     for k, (lo, hi) in sorted(advertised_versions(cluster, gateway_versions()).items())]
    return resp
