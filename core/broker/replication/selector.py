"""Which replica a consumer should read from (KIP-392, replica.selector.class).

The leader answers a consumer's Fetch (v11+, which carries the client's rack) with a preferred
read replica instead of records when the selector names another broker; the consumer then
fetches from that follower, which serves reads up to its own high watermark.

RackAwareReplicaSelector (Kafka's rules): with a client rack, the replicas in that rack that
are in the ISR and hold the fetch offset (log start <= offset <= log end) are candidates, the
leader always among them if it is in the rack; the leader wins if it is a candidate, else the
follower with the largest log end (then the most recently caught up). No rack, or no candidate:
the leader. LeaderSelector (and no selector): always the leader, so nothing is preferred.
"""
from __future__ import annotations

RACK_AWARE = ("org.apache.kafka.common.replica.RackAwareReplicaSelector", "RackAwareReplicaSelector")
LEADER = ("org.apache.kafka.common.replica.LeaderSelector", "LeaderSelector")
CHOICES = RACK_AWARE + LEADER


def preferred_read_replica(selector: str | None, client_rack: str | None, partition, fetch_offset: int,
                           image, listener: str) -> int | None:
    """Another broker the consumer should read from, or None to read here (the leader)."""
    if selector not in RACK_AWARE or not client_rack:
        return None
    replica = partition.replica
    if replica is None or replica.leader is None:
        return None
    brokers = image.brokers

    def rack(broker_id: int):
        reg = brokers.get(broker_id)
        return reg.rack if reg is not None else None

    if rack(replica.broker_id) == client_rack:
        return None
    isr = replica.isr
    best = None
    for progress in replica.leader.remotes.values():
        reg = brokers.get(progress.replica_id)
        if (reg is None or reg.fenced or reg.rack != client_rack or progress.replica_id not in isr
                or not progress.log_start_offset <= fetch_offset <= progress.log_end_offset
                or not any(e.name == listener for e in reg.endpoints)):
            continue
        key = (progress.log_end_offset, progress.last_caught_up_time_ms)
        if best is None or key > best[0]:
            best = (key, progress.replica_id)
    return best[1] if best is not None else None
