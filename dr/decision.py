"""The DR controller's decision for a pair: which region is active, where its clients connect,
and whether consumers may start there yet. Applications and gateways (core/gateway) follow it.

It is kept three ways, so that a client finds it whatever is down:
- a record in the compacted topic `__seaway_dr` of every cluster that answers (key: the pair's
  name, value: the JSON below); each cluster keeps its latest, and a client that reads
  several takes the one with the highest epoch (a cluster that was away has an older one);
- `<state dir>/active/<pair>.json`, and `<pair>.properties` with `bootstrap.servers` for
  Kafka clients' property files;
- the JSON API of `dr serve`.

The record's format, and what its phases mean, are in core/protocol/dr.py (the gateway, in
core/, reads it too):

    {"pair": "eu-west-1~us-east-1", "epoch": 4, "active_region": "us-east",
     "active_cluster": "us-east-1", "bootstrap": "127.0.0.1:29092,...",
     "phase": "serving", "decided_at": 1796490518.0, "controller": "host:1234"}

"""
from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

from core.client import Admin, KafkaClient, NewTopic, Producer
from core.client.errors import KafkaError
from core.protocol.dr import DR_STATE_TOPIC, DRAINING, SERVING, SWITCHING, Decision
from core.protocol.errors import ErrorCode

__all__ = ["Decision", "DRAINING", "SERVING", "SWITCHING", "publish", "write_files", "read_file",
           "ensure_compacted_topic"]


async def ensure_compacted_topic(client: KafkaClient, topic: str) -> None:
    """One compacted partition at the cluster's default replication (`__seaway_dr`, and the
    offset syncs the controller writes for a link that may not have started)."""
    admin = Admin(client)
    if topic in await admin.list_topics(internal=True):
        return
    result = await admin.create_topics([NewTopic(topic, 1, -1, {"cleanup.policy": "compact"})])
    error = result.get(topic)
    if isinstance(error, KafkaError) and error.code != ErrorCode.TOPIC_ALREADY_EXISTS:
        raise error


async def publish(client: KafkaClient, decision: Decision) -> None:
    """Write the decision to the cluster's `__seaway_dr` (acks=all)."""
    await ensure_compacted_topic(client, DR_STATE_TOPIC)
    key, value = decision.encode()
    async with Producer(client, acks=-1) as producer:
        delivery = await producer.send(DR_STATE_TOPIC, value=value, key=key, partition=0)
        await delivery


def write_files(state_dir: Path, decision: Decision) -> Path:
    """`active/<pair>.json` and `active/<pair>.properties`, each replaced atomically; the
    properties file's path."""
    folder = Path(state_dir) / "active"
    folder.mkdir(parents=True, exist_ok=True)
    _replace(folder / f"{decision.pair}.json", json.dumps(asdict(decision), indent=2, sort_keys=True) + "\n")
    properties = folder / f"{decision.pair}.properties"
    _replace(properties, f"# the active region of DR pair {decision.pair}: {decision.active_region} "
                         f"(epoch {decision.epoch}, {decision.phase})\n"
                         f"bootstrap.servers={decision.bootstrap}\n")
    return properties


def read_file(state_dir: Path, pair: str) -> Decision | None:
    try:
        return Decision.decode((Path(state_dir) / "active" / f"{pair}.json").read_bytes())
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _replace(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
