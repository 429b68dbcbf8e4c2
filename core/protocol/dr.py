"""Seaway's DR conventions on the wire: what marks a topic as a read-only DR replica, the epoch
that fences DR controllers, and how the mirror names itself. The broker, the controller, the
mirror and the DR controller all read these names from here.

A DR pair is two clusters joined by identity-named mirror links, one each way. Each topic of
the pair has one writable copy, on the cluster that is active for it. The other copy is a
*replica*: its topic config `seaway.replica.of` names the cluster it receives records from,
and its brokers refuse Produce from every client but the mirror copying from that cluster.
The refusal is INVALID_TOPIC_EXCEPTION with a message naming the source, because that is how
Kafka answers a write to an internal topic and every client treats it as final for the batch
(no retries, the error reaches the application).

The mirror is recognised by its client id, `__seaway_mirror.<source cluster>`, as Kafka
recognises its admin client by `__admin_client`. That guards against mistakes (an
application still pointed at the old region); ACLs are what keep out a hostile client. The
mirror, in turn, may write only a replica of its own source or a topic no DR controller has
touched: once a topic is promoted, the link that fed it is refused at once, though its
copiers notice the new roles only at their next look (without that, records the link back
copies into the old primary could travel forward again in that window).

A third value, `(fenced)`, is a topic no one may write, not even a mirror: the old primary's
copy while a planned failover drains the link. That state passes within seconds and the
records are then welcome on the promoted side, so applications are refused with
NOT_LEADER_OR_FOLLOWER, which every client retries (after reading Metadata again) until its
delivery timeout: a client behind the gateway (core/gateway) is moved to the promoted side
meanwhile and its retry lands there, where a producer that addressed the fenced copy directly
gets the error only if no one re-points it in time. A mirror is still refused with
INVALID_TOPIC_EXCEPTION: its copier must stop, not retry.

A DR link copies a topic only into a replica of its own source, and only from a copy that is
not itself a replica of the link's target (which would send records back where they came
from). So the topic configs alone say which way records flow, through a planned failover
(eu-west primary, us-east its replica):

    eu-west copy     us-east copy     eu-west -> us-east    us-east -> eu-west
    writable         eu-west          copies                -
    (fenced)         eu-west          copies: the drain     -
    (fenced)         writable         - (promoted)          -
    us-east          writable         -                     copies

Both live in the clusters' metadata, so they survive every process that set them.

Epochs. A DR controller takes an epoch before it changes roles: it raises the config
`seaway.dr.epoch` of the topic `__seaway_dr` on a cluster, and the cluster's controller lets
that value only grow, strictly. Two DR controllers that read epoch 4 and both ask for 5: one
gets it, the other gets STALE_CONTROLLER_EPOCH. Every role change then carries the epoch too
(`seaway.dr.epoch` on the topic, set in the same request as `seaway.replica.of`), and the
cluster refuses one below its current epoch, so a controller that lost the race, or stalled
and woke up later, cannot change a role behind the winner's back.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from .errors import ErrorCode

REPLICA_OF = "seaway.replica.of"
DR_EPOCH = "seaway.dr.epoch"
# Set by an unplanned failover's promote step (cleared by a planned one's): the cluster the
# topic was promoted away from, where records may be stranded. See "Producer ids" below.
UNPLANNED_FROM = "seaway.dr.unplanned.from"
# One compacted partition per cluster: its config holds the cluster's DR epoch, and its records
# (key: the DR pair's name) are the controller's decisions, which clients and gateways follow.
DR_STATE_TOPIC = "__seaway_dr"
MIRROR_CLIENT_PREFIX = "__seaway_mirror."
FENCED = "(fenced)"      # the value of seaway.replica.of that no one may write
# Failback: records a region acknowledged but never mirrored before it was failed over
# (stranded) are kept in `<topic>.stranded` on that region, or re-published on the active
# side; either way each carries this header, "<cluster>:<topic>:<partition>:<offset>".
STRANDED_SUFFIX = ".stranded"
STRANDED_ORIGIN_HEADER = "seaway.stranded.origin"


def mirror_client_id(source_cluster: str) -> str:
    """The client id the mirror copying from `source_cluster` uses towards its target."""
    return MIRROR_CLIENT_PREFIX + source_cluster


def txn_decisions_topic(source_cluster: str) -> str:
    """The compacted topic on a DR link's target where the link records, before it writes a
    copied transaction's markers, that it has all of it (mirror/copier.py TxnRelay): one
    record per (partition, producer), key "<topic>:<partition>:<producer id>", value JSON
    {"epoch", "first_offset", "start_ms"}, the first offset being where that transaction's copy
    begins in the partition. `dr failover` commits a copy still open that matches one and
    aborts every other (dr/failover.py). Named like MM2's internal topics, which no link copies."""
    return f"{source_cluster}.txn-decisions.internal"


def copies_into(client_id: str | None, replica_of: str | None) -> bool:
    """Is this client the mirror copying into a replica of its own source? Such a copy may
    carry the source's transactional batches and markers as they are (a DR link copies
    source transactions whole: mirror/txn_gate.py), which no other client may write."""
    return bool(replica_of) and replica_of != FENCED and client_id == mirror_client_id(replica_of or "")


def replica_write_refusal(topic: str, replica_of: str, client_id: str | None, dr_epoch: int = 0) -> str | None:
    """Why this client may not produce to `topic`, whose seaway.replica.of is `replica_of`
    ("": writable) and seaway.dr.epoch `dr_epoch`; None if it may.

    A mirror (by its client id) writes only into a replica of its own source, or into a topic
    no DR controller has touched (a renaming link's target): a promoted topic refuses the
    link that used to feed it, whose copiers stop only at their next look at the roles."""
    if replica_of == FENCED:
        return f"{topic} is fenced for a DR failover: produce to the cluster being promoted"
    if client_id is not None and client_id.startswith(MIRROR_CLIENT_PREFIX):
        source = client_id[len(MIRROR_CLIENT_PREFIX):]
        if replica_of == source or (not replica_of and dr_epoch == 0):
            return None
        if not replica_of:
            return f"{topic} was promoted (DR epoch {dr_epoch}): the mirror from {source} no longer writes it"
    if not replica_of:
        return None
    if client_id == mirror_client_id(replica_of):
        return None
    return (f"{topic} is a read-only DR replica of cluster {replica_of}: produce to the active "
            f"cluster, or promote this one (dr failover)")


def refusal_error(replica_of: str | None, client_id: str | None) -> ErrorCode:
    """The error a refused produce gets (see the module's notes): retriable for an application
    writing a fenced copy, final otherwise."""
    if replica_of == FENCED and not (client_id or "").startswith(MIRROR_CLIENT_PREFIX):
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    return ErrorCode.INVALID_TOPIC_EXCEPTION


def link_copies(source: str, target: str, source_replica_of: str, target_replica_of: str) -> bool:
    """Does the DR link `source` -> `target` copy a topic whose copies have these
    seaway.replica.of values? Only into a replica of its source, and never from a copy that is
    itself a replica of the target."""
    return target_replica_of == source and source_replica_of != target


# The DR controller's decision for a pair, the value of its record in `__seaway_dr`; the
# controller writes it (dr/decision.py), applications and gateways follow it
# (core/gateway/follower.py):
#
#     {"pair": "eu-west-1~us-east-1", "epoch": 4, "active_region": "us-east",
#      "active_cluster": "us-east-1", "bootstrap": "127.0.0.1:29092,...",
#      "phase": "serving", "decided_at": 1796490518.0, "controller": "host:1234"}
#
# `phase`, within one epoch, goes `draining` -> `switching` -> `serving`:
# - `draining` (a planned failover, from its fence step): the old side is still active but
#   fenced, and the link drains. Producers' writes there are refused with a retriable error;
#   consumers may stop and leave their groups now (a gateway makes them commit and rejoin,
#   and holds their joins), so that the groups are idle by the time the offsets move.
# - `switching`: the new side takes writes; the groups' offsets are being carried over.
#   Producers write to the active side; consumers stay stopped.
# - `serving`: consumers join on the new side and resume exactly where they committed.
# A failover rolled back during the drain publishes `serving` for the old side at the same
# epoch. An unplanned failover publishes `serving` at once. A reader that sees several
# records (one per cluster that answered) takes the highest (epoch, phase) in that order.
DRAINING, SWITCHING, SERVING = "draining", "switching", "serving"
PHASE_ORDER = {DRAINING: 0, SWITCHING: 1, SERVING: 2}


@dataclass(frozen=True)
class Decision:
    pair: str
    epoch: int
    active_region: str
    active_cluster: str
    bootstrap: str
    phase: str
    decided_at: float
    controller: str

    def encode(self) -> tuple[bytes, bytes]:
        return self.pair.encode(), json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def decode(cls, value: bytes) -> "Decision":
        """Raises ValueError (or KeyError, TypeError) for a value that is not a decision."""
        data = json.loads(value)
        return cls(**{k: data[k] for k in cls.__dataclass_fields__})


# Producer ids. Each cluster allocates producer ids from a range of its own (Kafka starts
# every cluster at 0): one of 2^20 ranges of 2^32 ids, picked by the CRC32C of its cluster id.
# A DR link keeps an application producer's id on the batches it copies (mirror/batches.py),
# so the producer can continue on the other cluster after a failover; the ranges keep that id
# from being another producer's there. An id outside a cluster's own range therefore belongs
# to a producer that came from its partner. The broker accepts a forward gap in such a
# producer's sequence in two cases only (core/broker/producer_state.py): in a DR link's copy
# (the link skips aborted transactions and what retention removed upstream), and on a topic
# an unplanned failover promoted (UNPLANNED_FROM), where the gap is the records stranded on
# the partner, already counted as the failover's RPO. Anywhere else a gap means requests of
# the producer were lost on the way, and it is refused as Kafka refuses it: after a planned
# failover the link has copied everything, so a gap there is a client's earlier requests
# still to be retried, and accepting the later one would lose them once the client counts
# them acknowledged.
PRODUCER_ID_RANGE_BITS = 32
PRODUCER_ID_RANGES = 2**20


def producer_id_range(cluster_id: str) -> range:
    """The producer ids a cluster hands out."""
    from crc32c import crc32c     # a pure function (the package has no I/O)
    base = (crc32c(cluster_id.encode()) % PRODUCER_ID_RANGES) << PRODUCER_ID_RANGE_BITS
    return range(base, base + 2**PRODUCER_ID_RANGE_BITS)
