"""The "consumer" embedded protocol: what group members put in JoinGroup metadata and what
the leader hands out in SyncGroup assignments.

Each blob is an int16 version followed by the struct (schema/consumer_protocol_*.ks). Kafka
promises that later versions only append fields, and its clients read a newer version with
their newest layout; so do we. Anything else malformed is a `DecodeError`.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Optional, TypeVar

from .buffers import Buffer
from .codegen import Message, MessageCodec
from .errors import DecodeError
from .messages import DATA, ConsumerProtocolAssignment, ConsumerProtocolSubscription

M = TypeVar("M", bound=Message)

_SUBSCRIPTION = DATA["ConsumerProtocolSubscription"]
_ASSIGNMENT = DATA["ConsumerProtocolAssignment"]
SUBSCRIPTION_VERSION = 3   # what we write: owned partitions, generation and rack
ASSIGNMENT_VERSION = 3
PROTOCOL_TYPE = "consumer"


@dataclass
class Subscription:
    topics: list[str]
    user_data: Optional[bytes] = None
    owned_partitions: dict[str, list[int]] = field(default_factory=dict)
    generation_id: int = -1
    rack_id: Optional[str] = None
    version: int = SUBSCRIPTION_VERSION


@dataclass
class Assignment:
    partitions: dict[str, list[int]]
    user_data: Optional[bytes] = None
    version: int = ASSIGNMENT_VERSION


def _split(codec: MessageCodec, cls: type[M], blob: Buffer, what: str) -> tuple[int, M]:
    view = memoryview(blob)
    if len(view) < 2:
        raise DecodeError(f"{what} is {len(view)} bytes; it needs at least a 2-byte version")
    (version,) = struct.unpack_from(">h", view, 0)
    if version < 0:
        raise DecodeError(f"{what} has negative version {version}")
    readable = min(version, codec.spec.max_version)
    obj, _ = codec.decode(readable, view, 2, whole=False)
    assert isinstance(obj, cls), obj   # codec.cls is cls
    return version, obj


def decode_subscription(blob: Buffer) -> Subscription:
    version, s = _split(_SUBSCRIPTION, ConsumerProtocolSubscription, blob, "consumer subscription")
    owned = {tp.topic: list(tp.partitions) for tp in (s.owned_partitions or [])}
    return Subscription(list(s.topics), None if s.user_data is None else bytes(s.user_data),
                        owned, s.generation_id, s.rack_id, version)


def encode_subscription(sub: Subscription) -> bytes:
    version = min(sub.version, SUBSCRIPTION_VERSION)
    cls = ConsumerProtocolSubscription
    obj = cls(topics=list(sub.topics), user_data=sub.user_data,
              owned_partitions=[cls.TopicPartition(topic=t, partitions=list(p))
                                for t, p in sub.owned_partitions.items()],
              generation_id=sub.generation_id, rack_id=sub.rack_id)
    return struct.pack(">h", version) + _SUBSCRIPTION.encode(version, obj)


def decode_assignment(blob: Buffer) -> Assignment:
    """An empty blob is an empty assignment: the coordinator answers members the leader left
    out with no bytes at all."""
    if len(blob) == 0:
        return Assignment({}, version=0)
    version, a = _split(_ASSIGNMENT, ConsumerProtocolAssignment, blob, "consumer assignment")
    return Assignment({tp.topic: list(tp.partitions) for tp in a.assigned_partitions},
                      None if a.user_data is None else bytes(a.user_data), version)


def encode_assignment(assignment: Assignment) -> bytes:
    version = min(assignment.version, ASSIGNMENT_VERSION)
    cls = ConsumerProtocolAssignment
    obj = cls(assigned_partitions=[cls.TopicPartition(topic=t, partitions=list(p))
                                   for t, p in assignment.partitions.items()],
              user_data=assignment.user_data)
    return struct.pack(">h", version) + _ASSIGNMENT.encode(version, obj)
