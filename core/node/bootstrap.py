"""Bootstrap records: metadata written by `seaway storage format` for the controller to put at
the start of a new metadata log, as Kafka's bootstrap.checkpoint carries them.

Today that is SCRAM credentials (`--add-scram`), so that the first nodes of a cluster whose
listeners need SCRAM can log in to each other before anyone could have created a user. The
active controller appends them once, when it activates on an empty log; a log that already
has records ignores the file.

The file, `bootstrap.records` in the metadata log directory, is the records in the metadata
log's own encoding, each prefixed by its size, after a magic line and followed by a CRC32C of
everything before it: a damaged file stops the node with one line rather than starting a
cluster with half its users.

`--add-scram` takes Kafka's syntax, repeatable:

    SCRAM-SHA-256=[name=alice,password=alice-secret]
    SCRAM-SHA-512=[name=alice,iterations=8192,password=alice-secret]

`--add-scram-file FILE` (Seaway's) takes the same specs one per line, so that passwords stay
out of command lines, where `ps` and a compose file would show them.
"""
from __future__ import annotations

import os
import re
import struct
from pathlib import Path
from typing import Sequence

from crc32c import crc32c

from core.config.defs import ConfigError
from core.protocol import messages as m
from core.protocol.codegen import Message
from core.protocol.errors import DecodeError
from core.protocol.metadata_records import decode_record, encode_record
from core.security.scram import MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS, make_credential


BOOTSTRAP_FILE = "bootstrap.records"
_MAGIC = b"seaway bootstrap records v1\n"
_SIZE = struct.Struct(">I")
_MECHANISM_TYPES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
_SPEC = re.compile(r"^\s*(SCRAM-SHA-(?:256|512))\s*=\s*\[(.*)\]\s*$", re.I)


def parse_add_scram(spec: str) -> m.UserScramCredentialRecord:
    """One --add-scram value as a UserScramCredentialRecord; ConfigError naming the flag."""
    m_ = _SPEC.match(spec)
    if m_ is None:
        raise ConfigError(f"--add-scram: {spec!r} is not MECHANISM=[name=USER,password=PASSWORD]")
    mechanism = m_.group(1).upper()
    fields: dict[str, str] = {}
    for part in m_.group(2).split(","):
        key, sep, value = part.partition("=")
        if not sep:
            raise ConfigError(f"--add-scram: {part!r} is not key=value")
        fields[key.strip().lower()] = value.strip().strip('"')
    unknown = set(fields) - {"name", "password", "iterations"}
    if unknown:
        raise ConfigError(f"--add-scram: unknown field {sorted(unknown)[0]!r} (name, password, iterations)")
    if not fields.get("name") or not fields.get("password"):
        raise ConfigError("--add-scram: name and password are both required")
    try:
        iterations = int(fields.get("iterations", "4096"))
    except ValueError:
        raise ConfigError(f"--add-scram: iterations {fields['iterations']!r} is not a number") from None
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ConfigError(f"--add-scram: iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS}, got {iterations}")
    assert mechanism in MECHANISMS
    credential = make_credential(mechanism, fields["password"], iterations=iterations)
    return m.UserScramCredentialRecord(name=fields["name"], mechanism=_MECHANISM_TYPES[mechanism],
                                       salt=credential.salt, stored_key=credential.stored_key,
                                       server_key=credential.server_key, iterations=iterations)


def read_add_scram_file(path: str | Path) -> list[m.UserScramCredentialRecord]:
    """Every --add-scram spec in a file, one per line (blank lines and # comments skipped);
    ConfigError naming the file and line."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"--add-scram-file: cannot read {path}: {exc.strerror}") from None
    records = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            records.append(parse_add_scram(line))
        except ConfigError as exc:
            raise ConfigError(f"--add-scram-file: {path}:{number}: {str(exc).removeprefix('--add-scram: ')}") from None
    return records


def write_bootstrap(directory: Path, records: Sequence[Message]) -> Path:
    body = bytearray(_MAGIC)
    for record in records:
        data = encode_record(record)
        body += _SIZE.pack(len(data)) + data
    body += _SIZE.pack(crc32c(bytes(body)))
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / BOOTSTRAP_FILE
    # Salts and derived keys are not for everyone to read: owner-only from the first byte.
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(body)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def read_bootstrap(directory: Path) -> list[Message]:
    path = directory / BOOTSTRAP_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise ConfigError(f"metadata.log.dir: cannot read {path}: {exc.strerror}") from None
    damaged = ConfigError(f"metadata.log.dir: {path} is damaged; format the directory again "
                          f"(seaway storage format --add-scram ...)")
    if not data.startswith(_MAGIC) or len(data) < len(_MAGIC) + 4:
        raise damaged
    (crc,) = _SIZE.unpack_from(data, len(data) - 4)
    if crc32c(data[:-4]) != crc:
        raise damaged
    records: list[Message] = []
    pos, end = len(_MAGIC), len(data) - 4
    try:
        while pos < end:
            (size,) = _SIZE.unpack_from(data, pos)
            pos += 4
            if pos + size > end:
                raise damaged
            records.append(decode_record(data[pos:pos + size]).message)
            pos += size
    except (DecodeError, struct.error):
        raise damaged from None
    return records
