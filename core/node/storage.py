"""A node's storage identity: meta.properties in every log directory.

It follows Kafka's format (`cluster.id`, `node.id`, `version`, `directory.id`), so that every
directory can be checked to belong to the same node and cluster, and written whole through a
temporary file, fsync and rename, so a crash leaves either the old file or the new one.
"""
from __future__ import annotations

import base64
import os
import uuid
from pathlib import Path

from core.config.broker import parse_properties
from core.config.defs import ConfigError

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
