"""Generate the typed surface of the protocol from the schema: the `ApiKey` enum
(api_keys.py) and the type stubs of every message class (messages.pyi).

    python -m core.protocol.codegen --stubs          # rewrite both files
    python -m core.protocol.codegen --stubs --check  # exit 1 if either is out of date

Both files are checked in, as franz-go's kmsg is, so that readers, editors and mypy see every
class and field without running the schema compiler; tests/unit/test_protocol_stubs.py fails
when they differ from what this module writes. Nothing here runs when the codec is imported.

The stubs describe what the runtime classes hold (see codegen.build_classes and
dsl.Field.default_value): integers are int, float64 is float, strings str, bytes and uuid
bytes (a uuid is its 16 raw bytes), arrays lists, nested structs classes hanging off their
message's class (`ProduceRequest.TopicProduceData`). A field is `| None` when some version lets
it be null or its default is null; records are always optional (their default is None), decode
to a memoryview of the frame, and encode from one buffer or a sequence of buffers.
"""
from __future__ import annotations

import sys
from pathlib import Path

from .dsl import ApiSchema, Field, MessageSpec, Struct, load_all, snake_case

HERE = Path(__file__).parent
API_KEYS_PATH = HERE / "api_keys.py"
STUBS_PATH = HERE / "messages.pyi"
REGENERATE = "python -m core.protocol.codegen --stubs"

_SCALAR = {"bool": "bool", "int8": "int", "int16": "int", "int32": "int", "int64": "int",
           "uint16": "int", "float64": "float", "string": "str", "bytes": "bytes",
           "uuid": "bytes", "records": "_Records"}

_HEADER = f"""\
# Generated from core/protocol/schema by `{REGENERATE}`. Do not edit.
"""


def api_key_name(api_name: str) -> str:
    """Kafka's ApiKeys constant for an API: CamelCase to UPPER_SNAKE (OffsetForLeaderEpoch ->
    OFFSET_FOR_LEADER_EPOCH)."""
    return snake_case(api_name).upper()


def api_keys_source(apis: dict[int, ApiSchema]) -> str:
    lines = [_HEADER.rstrip("\n"),
             '"""Kafka\'s API keys, one member per API declared in schema/*.ks, named as Kafka\'s',
             "ApiKeys enum names them. An IntEnum: members equal, hash and encode as their numbers.",
             '"""',
             "from enum import IntEnum",
             "",
             "",
             "class ApiKey(IntEnum):"]
    for key, api in sorted(apis.items()):
        lines.append(f"    {api_key_name(api.name)} = {key}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- stubs


def _structs(root: Struct) -> list[Struct]:
    """The root and every struct nested in it, each once, in the order the schema declares
    them (depth first, by field)."""
    seen: dict[str, Struct] = {}

    def visit(s: Struct) -> None:
        if s.name in seen:
            return
        seen[s.name] = s
        for f in s.fields:
            if f.struct is not None:
                visit(f.struct)

    visit(root)
    return list(seen.values())


def _field_type(f: Field, owner: str) -> str:
    if f.struct is not None:
        elem = f.struct.name if f.struct.name == owner else f"{owner}.{f.struct.name}"
    else:
        elem = _SCALAR[f.type]
    text = f"list[{elem}]" if f.is_array else elem
    if text == "_Records":
        return text  # already optional
    if f.nullable is not None or (f.has_default and f.default is None):
        text += " | None"
    return text


def _class_lines(s: Struct, owner: str, indent: str) -> list[str]:
    """`owner` is the root class that nested struct classes hang off."""
    out = [f"{indent}class {s.name}(Message):"]
    body = indent + "    "
    for f in s.fields:
        out.append(f"{body}{f.attr}: {_field_type(f, owner)}")
    out.append(f"{body}unknown_tags: dict[int, bytes] | None")
    params = [f"{f.attr}: {_field_type(f, owner)} = ..." for f in s.fields]
    params.append("unknown_tags: dict[int, bytes] | None = None")
    out.append(f"{body}def __init__(")
    out.append(f"{body}    self,")
    out.append(f"{body}    *,")
    out.extend(f"{body}    {p}," for p in params)
    out.append(f"{body}) -> None: ...")
    return out


def _message_lines(spec: MessageSpec) -> list[str]:
    root, *nested = _structs(spec.root)
    lines = _class_lines(root, root.name, "")
    for s in nested:
        lines.append("")
        lines.extend(_class_lines(s, root.name, "    "))
    return lines


_MODULE_PART = '''\
"""Types of core/protocol/messages.py: the registry, and every class it compiles from the
schema (requests and responses, headers, data structs, metadata records)."""
from collections.abc import Sequence
from typing import TypeAlias

from .api_keys import ApiKey as ApiKey
from .codegen import Message, MessageCodec
from .dsl import ApiSchema

_Buffer: TypeAlias = bytes | bytearray | memoryview
# Decoded: a memoryview of the frame. Encoded from one buffer or a sequence of them.
_Records: TypeAlias = _Buffer | Sequence[_Buffer] | None

class Api:
    key: int
    name: str
    min_version: int
    max_version: int
    request: MessageCodec
    response: MessageCodec
    schema: ApiSchema
    _flexible: frozenset[int]
    def __init__(
        self,
        key: int,
        name: str,
        min_version: int,
        max_version: int,
        request: MessageCodec,
        response: MessageCodec,
        schema: ApiSchema,
    ) -> None: ...
    def is_flexible(self, version: int) -> bool: ...
    def request_header_version(self, version: int) -> int: ...
    def response_header_version(self, version: int) -> int: ...
    def supports(self, version: int) -> bool: ...

API: dict[int, Api]
API_BY_NAME: dict[str, Api]
REQUEST_HEADER: MessageCodec
RESPONSE_HEADER: MessageCodec
DATA: dict[str, MessageCodec]
METADATA_RECORDS: dict[int, MessageCodec]
METADATA_RECORDS_BY_NAME: dict[str, MessageCodec]
'''


def stubs_source(apis: dict[int, ApiSchema], others: dict[str, MessageSpec]) -> str:
    sections: list[tuple[str, list[MessageSpec]]] = [
        ("APIs, by key", [spec for _, api in sorted(apis.items())
                          for spec in (api.request, api.response)]),
        ("headers", [others["RequestHeader"], others["ResponseHeader"]]),
        ("data structs (DATA)", sorted((s for s in others.values() if s.kind == "data"),
                                       key=lambda s: s.name)),
        ("metadata records (METADATA_RECORDS)",
         sorted((s for s in others.values() if s.kind == "record"),
                key=lambda s: (s.api_key, s.name))),
    ]
    out = [_HEADER + _MODULE_PART]
    for title, specs in sections:
        out.append(f"# {'-' * 75} {title}\n")
        for spec in specs:
            out.append("\n".join(_message_lines(spec)) + "\n")
    return "\n".join(out)


def generate() -> dict[Path, str]:
    """Every generated file, path -> text."""
    apis, others = load_all()
    return {API_KEYS_PATH: api_keys_source(apis), STUBS_PATH: stubs_source(apis, others)}


def stale() -> list[Path]:
    """The generated files whose checked-in text differs from what generate() writes."""
    return [path for path, text in generate().items()
            if not path.exists() or path.read_text() != text]


def main(argv: list[str]) -> int:
    if "--check" in argv:
        paths = stale()
        for path in paths:
            print(f"{path} is out of date; run `{REGENERATE}`", file=sys.stderr)
        return 1 if paths else 0
    for path, text in generate().items():
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
