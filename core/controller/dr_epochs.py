"""The cluster's half of DR fencing (core/protocol/dr.py): which changes to the DR configs
`seaway.dr.epoch` and `seaway.replica.of` a cluster accepts.

    __seaway_dr's epoch       only strictly up: taking an epoch is a compare-and-set, so of
                              two controllers asking for the same epoch one wins
    a topic's epoch           never down
    a topic's role change     (its replica.of or its epoch) only if the topic's epoch after the
                              change, set in the same request or kept from before, is at or
                              above the cluster's

The metadata log orders every change, and these checks run against the image that includes
every change before this one, so two requests cannot both pass one check. Creating a topic is
not a role change: the mirror creates replicas (with `seaway.replica.of` set) without knowing
any epoch.

A refused change is STALE_CONTROLLER_EPOCH, with the epochs in the message.
"""
from __future__ import annotations

from typing import Mapping

from core.protocol.dr import DR_EPOCH, DR_STATE_TOPIC, REPLICA_OF
from core.protocol.errors import ErrorCode, KafkaError

from .image import MetadataImage


def _epoch(config: Mapping[str, str]) -> int:
    # Stored values were validated (a LONG >= 0) when written.
    return int(config.get(DR_EPOCH, "0"))


def check_dr_change(image: MetadataImage, topic: str, current: Mapping[str, str],
                    changes: Mapping[str, str | None], new: Mapping[str, str]) -> None:
    """Raise KafkaError(STALE_CONTROLLER_EPOCH) if the request's `changes` to `topic`'s config
    (`current` before, `new` after, both validated) break a rule above."""
    old_epoch, new_epoch = _epoch(current), _epoch(new)
    if topic == DR_STATE_TOPIC:
        # Asking for the epoch the cluster already has fails too: that is the compare-and-set.
        if (DR_EPOCH in changes or new.get(DR_EPOCH) != current.get(DR_EPOCH)) \
                and new_epoch <= old_epoch:
            raise KafkaError(ErrorCode.STALE_CONTROLLER_EPOCH,
                             f"DR epoch {new_epoch} is not above this cluster's DR epoch {old_epoch}")
        return
    if current.get(REPLICA_OF, "") == new.get(REPLICA_OF, "") and old_epoch == new_epoch:
        return
    if new_epoch < old_epoch:
        raise KafkaError(ErrorCode.STALE_CONTROLLER_EPOCH,
                         f"DR epoch {new_epoch} is below topic {topic}'s DR epoch {old_epoch}")
    cluster_epoch = _epoch(image.topic_config(DR_STATE_TOPIC))
    if new_epoch < cluster_epoch:
        raise KafkaError(ErrorCode.STALE_CONTROLLER_EPOCH,
                         f"a DR role change of {topic} needs {DR_EPOCH} at least this cluster's DR "
                         f"epoch {cluster_epoch}, not {new_epoch}")
