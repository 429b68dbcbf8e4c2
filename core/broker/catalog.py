"""The single-node topic catalog and the storage identity (meta.properties).

Until the KRaft metadata log exists (see the controller), a node keeps its topics (name, id,
partition count, config overrides) in `seaway-topics.json` in its first log directory. It is
rewritten whole, through a temporary file, fsync and rename, so a crash leaves either the old
catalog or the new one. `meta.properties` follows Kafka's format (`cluster.id`, `node.id`,
`version`), so that every directory can be checked to belong to the same node and cluster.
"""
from __future__ import annotations

import base64
import json
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.config.broker import parse_properties
from core.config.defs import ConfigError

CATALOG_FILE = "seaway-topics.json"
META_FILE = "meta.properties"


def write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def new_cluster_id() -> str:
    """A random 16-byte id in Kafka's URL-safe base64 form (22 characters). Like Kafka's
    Uuid.randomUuid, never one that starts with '-': command lines would read it as an option."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def parse_cluster_id(text: str) -> str:
    """Kafka's Uuid.fromString: 22 characters of URL-safe base64 for 16 bytes, not all zero."""
    try:
        raw = base64.urlsafe_b64decode(text + "==") if len(text) == 22 else b""
    except ValueError:
        raw = b""
    if len(raw) != 16 or raw == bytes(16) or base64.urlsafe_b64encode(raw).rstrip(b"=").decode() != text:
        raise ConfigError(f"--cluster-id: {text!r} is not a cluster id (22 characters of URL-safe base64, "
                          f"as `seaway storage random-uuid` prints)")
    return text


def read_meta(directory: Path) -> dict[str, str] | None:
    meta = directory / META_FILE
    return parse_properties(meta.read_text()) if meta.exists() else None


def format_storage(log_dirs: list[Path], node_id: int, cluster_id: str, *,
                   ignore_formatted: bool = False) -> list[tuple[Path, str]]:
    """`kafka-storage format`: write meta.properties with this cluster id into every log dir,
    so that every node of a cluster starts with the same id. Returns (dir, what happened).
    A directory formatted for another cluster or node is always an error; one already
    formatted for this cluster is an error unless ignore_formatted, as in Kafka."""
    parse_cluster_id(cluster_id)
    existing = {d: read_meta(d) for d in log_dirs}
    for d, meta in existing.items():
        if meta is None:
            continue
        if meta.get("cluster.id") != cluster_id:
            raise ConfigError(f"log.dirs: {d} is already formatted for cluster {meta.get('cluster.id')}")
        if meta.get("node.id") != str(node_id):
            raise ConfigError(f"node.id: {d} is already formatted for node {meta.get('node.id')}")
        if not ignore_formatted:
            raise ConfigError(f"log.dirs: {d} is already formatted; use --ignore-formatted to skip it")
    done = []
    for d in log_dirs:
        if existing[d] is not None:
            done.append((d, "already formatted"))
            continue
        d.mkdir(parents=True, exist_ok=True)
        text = (f"#Written by seaway storage format\nversion=1\ncluster.id={cluster_id}\n"
                f"node.id={node_id}\ndirectory.id={new_cluster_id()}\n")
        write_atomically(d / META_FILE, text.encode())
        done.append((d, "formatted"))
    return done


def ensure_meta(log_dirs: list[Path], node_id: int, cluster_id: str | None) -> str:
    """Create or check meta.properties in every log dir; returns the cluster id."""
    found: dict[Path, dict[str, str]] = {}
    for d in log_dirs:
        d.mkdir(parents=True, exist_ok=True)
        meta = d / META_FILE
        if meta.exists():
            found[d] = parse_properties(meta.read_text())
    ids = {m.get("cluster.id") for m in found.values()}
    if len(ids) > 1:
        raise ConfigError(f"log.dirs: directories belong to different clusters: {sorted(map(str, ids))}")
    existing = next(iter(ids), None)
    if existing and cluster_id and existing != cluster_id:
        raise ConfigError(f"cluster.id: {cluster_id} does not match {existing} found in meta.properties")
    for d, m in found.items():
        if m.get("node.id") not in (None, str(node_id)):
            raise ConfigError(f"node.id: {node_id} does not match {m.get('node.id')} in {d / META_FILE}")
    cid = existing or cluster_id or new_cluster_id()
    for d in log_dirs:
        if d not in found:
            text = f"#Written by seaway\nversion=1\ncluster.id={cid}\nnode.id={node_id}\n"
            write_atomically(d / META_FILE, text.encode())
    return cid


@dataclass
class TopicRecord:
    name: str
    topic_id: bytes
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)  # overrides as rendered strings

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "id": base64.urlsafe_b64encode(self.topic_id).decode(),
                "partitions": self.partitions, "configs": self.configs}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "TopicRecord":
        return cls(obj["name"], base64.urlsafe_b64decode(obj["id"]), int(obj["partitions"]),
                   dict(obj.get("configs", {})))


class Catalog:
    def __init__(self, directory: Path):
        self.path = directory / CATALOG_FILE
        self.topics: dict[str, TopicRecord] = {}
        if self.path.exists():
            data = json.loads(self.path.read_text())
            for obj in data.get("topics", []):
                rec = TopicRecord.from_json(obj)
                self.topics[rec.name] = rec

    def serialize(self) -> bytes:
        """Taken on the event loop, so the thread that writes sees one consistent state."""
        data = {"version": 1, "topics": [t.to_json() for t in self.topics.values()]}
        return json.dumps(data, indent=1).encode()

    def write(self, data: bytes) -> None:
        write_atomically(self.path, data)
