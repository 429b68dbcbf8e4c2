"""Importing the topic catalog of an older standalone node into the metadata log, once.

Before every node kept its metadata in a KRaft log, a standalone node listed its topics (name,
id, partition count, config overrides) in `seaway-topics.json` in its first log directory, and
the start of its next block of producer ids in `producer-id-block`. Such a data directory still
starts: a node without controller.quorum.voters (a one-node cluster) hands these records to its
controller, which writes them with its bootstrap records when it first activates on an empty
metadata log (controller.py, `activate`), in the same append, so no image ever shows the log
without them. Every partition keeps its topic id, its index and its files; this node is its
only replica, leader and in-sync replica. Producer ids continue after the ones already handed
out, so an idempotent producer's old id is never given to another.

Once the broker serves (its registration came after the bootstrap, so the import is committed),
the catalog is renamed `seaway-topics.json.imported`; a crash before that only means the next
start finds the log already bootstrapped and writes nothing again.

A node of a multi-node quorum cannot import: its metadata is the quorum's. It refuses to start
with a one-line error saying what to do.
"""
from __future__ import annotations

import base64
import binascii
import json
import logging
import struct
from pathlib import Path

from crc32c import crc32c

from core.config import BrokerConfig
from core.config.defs import ConfigError
from core.controller.image import TOPIC_RESOURCE
from core.protocol import messages as m
from core.protocol.codegen import Message

log = logging.getLogger(__name__)

CATALOG_FILE = "seaway-topics.json"
PRODUCER_ID_FILE = "producer-id-block"
# The standalone node's producer-id-block: magic, version, the first id of the next block, and
# the crc32c of the 14 bytes before it.
PRODUCER_ID_BLOCK = struct.Struct(">4sHqI")
PRODUCER_ID_MAGIC = b"SWPI"
IMPORTED_SUFFIX = ".imported"


def _catalog_path(config: BrokerConfig) -> Path:
    return config.log_dirs[0] / CATALOG_FILE


def bootstrap_records(config: BrokerConfig) -> list:
    """The metadata records for an old catalog in this node's first log dir ([] without one).
    Raises ConfigError, naming the file, when it cannot be imported."""
    path = _catalog_path(config)
    if not path.exists():
        return []
    if not config.single_node:
        raise ConfigError(f"log.dirs: {path} is a standalone node's topic catalog; start this directory once "
                          f"as a one-node cluster (without controller.quorum.voters) to import it")
    try:
        data = json.loads(path.read_text())
        topics = [_topic_records(obj, config.node_id) for obj in data.get("topics", [])]
    except (OSError, ValueError, KeyError, TypeError, AttributeError, binascii.Error) as exc:
        raise ConfigError(f"log.dirs: {path} cannot be imported ({exc}); move it aside to start "
                          f"without its topics") from None
    records = [r for group in topics for r in group]
    next_id = next_producer_id(config.log_dirs[0] / PRODUCER_ID_FILE)
    if next_id > 0:
        records.append(m.ProducerIdsRecord(broker_id=config.node_id, broker_epoch=-1,
                                           next_producer_id=next_id))
    log.info("%s: %d topics to import into the metadata log", path, len(topics))
    return records


def next_producer_id(path: Path) -> int:
    """The first id the old node had not reserved (0 without the file). Raises ConfigError on a
    damaged file: handing an old producer's id to another is worse than refusing to start."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return 0
    except OSError as exc:
        raise ConfigError(f"log.dirs: {path} cannot be read ({exc})") from None
    if len(data) == PRODUCER_ID_BLOCK.size:
        magic, version, start, crc = PRODUCER_ID_BLOCK.unpack(data)
        if magic == PRODUCER_ID_MAGIC and version == 1 and crc == crc32c(data[:-4]) and start >= 0:
            return start
    raise ConfigError(f"log.dirs: {path} is damaged; producer ids cannot safely continue after it")


def _topic_records(obj: dict, node_id: int) -> list:
    name = obj["name"]
    topic_id = base64.urlsafe_b64decode(obj["id"])
    count = int(obj["partitions"])
    if not isinstance(name, str) or len(topic_id) != 16 or count <= 0:
        raise ValueError(f"topic {name!r} is malformed")
    records: list[Message] = [m.TopicRecord(name=name, topic_id=topic_id)]
    records += [m.ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name=name, name=str(k), value=str(v))
                for k, v in dict(obj.get("configs", {})).items()]
    records += [m.PartitionRecord(partition_id=i, topic_id=topic_id, replicas=[node_id], isr=[node_id],
                                  removing_replicas=[], adding_replicas=[], leader=node_id,
                                  leader_recovery_state=0, leader_epoch=0, partition_epoch=0, directories=[])
                for i in range(count)]
    return records


def retire(config: BrokerConfig) -> None:
    """Put the imported catalog aside (worker thread)."""
    path = _catalog_path(config)
    if path.exists():
        path.rename(path.with_name(path.name + IMPORTED_SUFFIX))
        log.info("imported %s into the metadata log; renamed it %s%s", path, path.name, IMPORTED_SUFFIX)
