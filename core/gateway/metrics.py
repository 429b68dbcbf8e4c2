"""The gateway's Prometheus metrics (served on its /metrics with core/metrics_http.py)."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class GatewayMetrics:
    def __init__(self, pair: str, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r, labels = self.registry, {"pair": pair}
        self.connections = Gauge("seaway_gateway_connections", "Client connections open now",
                                 ["pair"], registry=r).labels(**labels)
        self.connections_total = Counter("seaway_gateway_accepted_connections", "Client connections accepted",
                                         ["pair"], registry=r).labels(**labels)
        self._requests = Counter("seaway_gateway_requests_total",
                                 "Client requests, by API and how the gateway handled them "
                                 "(forwarded, answered itself, held during a move)",
                                 ["pair", "api", "handling"], registry=r)
        self._request_children: dict[tuple[str, str], Counter] = {}
        self._bytes = Counter("seaway_gateway_bytes_total", "Bytes from clients (in) and to clients (out)",
                              ["pair", "direction"], registry=r)
        self.bytes_in = self._bytes.labels(pair, "in")
        self.bytes_out = self._bytes.labels(pair, "out")
        self.moves = Counter("seaway_gateway_moves_total", "Moves of the gateway's clients to the other cluster",
                             ["pair"], registry=r).labels(**labels)
        self.move_seconds = Histogram("seaway_gateway_move_seconds",
                                      "From the decision naming a new active cluster until consumers may "
                                      "join there (producers move at its start)", ["pair"],
                                      buckets=(0.5, 1, 2, 5, 10, 30, 60, 120, 300), registry=r).labels(**labels)
        self._serving = Gauge("seaway_gateway_serving", "1 for the cluster the gateway forwards to",
                              ["pair", "cluster"], registry=r)
        self.serving_cluster: str | None = None
        self.moving = Gauge("seaway_gateway_moving", "1 while clients are being moved (decision phase "
                            "switching)", ["pair"], registry=r).labels(**labels)
        self.epoch = Gauge("seaway_gateway_decision_epoch", "The DR epoch of the decision served",
                           ["pair"], registry=r).labels(**labels)
        self.decision_stale = Gauge("seaway_gateway_decision_stale",
                                    "1 when no cluster of the pair has answered the gateway's decision read "
                                    "lately: it keeps serving the last decision it learnt", ["pair"],
                                    registry=r).labels(**labels)
        self.decision_age = Gauge("seaway_gateway_decision_read_age_seconds",
                                  "Seconds since a cluster of the pair last answered the decision read",
                                  ["pair"], registry=r).labels(**labels)
        self.upstream_failures = Counter("seaway_gateway_upstream_failures_total",
                                         "Broker connections lost or refused under a client (its connection "
                                         "is closed, as a broker's would be)", ["pair", "cluster"], registry=r)
        self.pair = pair

    def request(self, api: str, handling: str) -> None:
        child = self._request_children.get((api, handling))
        if child is None:
            child = self._request_children[(api, handling)] = self._requests.labels(self.pair, api, handling)
        child.inc()

    def serve(self, cluster: str) -> None:
        if self.serving_cluster is not None:
            self._serving.labels(self.pair, self.serving_cluster).set(0)
        self._serving.labels(self.pair, cluster).set(1)
        self.serving_cluster = cluster
