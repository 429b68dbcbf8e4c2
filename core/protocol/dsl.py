"""The schema language our Kafka messages are written in, and its parser.

Theory of operation
-------------------
Every message Seaway speaks is declared once, in `schema/*.ks` (what the metadata log holds,
in `schema/metadata/*.ks`). The codec in `codegen.py` is compiled from these declarations;
nothing is hand-written per request. A test checks each declaration against Kafka's JSON specs
for every version we advertise.

A file holds one API (a request and its response), one header, one data struct (a
versioned struct that is not a request: the consumer protocol's subscription, the records of
`__consumer_offsets`, KRaft's control records), or one metadata record (what the controller
writes to `__cluster_metadata`):

    api Produce 0              # name and API key
    versions 3-11              # the versions we advertise
    flexible 9+                # first version with compact types and tagged fields

    request
      TransactionalId  string  v3+ nullable
      Acks             int16
      TopicData        []TopicProduceData
        Name           string
        PartitionData  []PartitionProduceData
          Index        int32
          Records      records nullable

    response
      ...

A field line is `Name Type [vN | vN+ | vN-M] [nullable[=RANGE]] [tag=N] [default=X]
[flexible=none]`. Types are bool, int8, int16, int32, int64, uint16, float64, string, bytes,
records and uuid; `[]T` is an array of T. A type that is not primitive names a struct: its
fields follow on deeper-indented lines, or, if none follow, the struct of that name declared
elsewhere in the same section (Kafka's "common structs"). `header RequestHeader` starts a
header file and `data OffsetCommitValue` a data file; their fields sit directly under the
`versions`/`flexible` lines. `record TopicRecord 2` starts a metadata record file: a data
struct that also carries its record type (Kafka's "apiKey" for "type": "metadata"), which
frames it in the metadata log (see metadata_records.py). Declare every version Kafka defines
for a record: a log may hold any of them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PRIMITIVES = {"bool", "int8", "int16", "int32", "int64", "uint16", "float64",
              "string", "bytes", "records", "uuid"}
INT_TYPES = {"int8", "int16", "int32", "int64", "uint16"}
HEAD_WORDS = ("api", "header", "data", "record", "versions", "flexible")


class SchemaError(ValueError):
    pass


@dataclass(frozen=True)
class VersionRange:
    low: int
    high: int | None  # None: open-ended ("N+")

    @classmethod
    def parse(cls, text: str) -> "VersionRange":
        text = text.strip().lstrip("v")
        if text.endswith("+"):
            return cls(int(text[:-1]), None)
        if "-" in text:
            lo, hi = text.split("-", 1)
            return cls(int(lo), int(hi))
        return cls(int(text), int(text))

    def __contains__(self, version: int) -> bool:
        return version >= self.low and (self.high is None or version <= self.high)

    def __str__(self) -> str:
        if self.high is None:
            return f"{self.low}+"
        return f"{self.low}" if self.low == self.high else f"{self.low}-{self.high}"


ALL_VERSIONS = VersionRange(0, None)


def snake_case(name: str) -> str:
    s = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name)
    s = re.sub(r"(?<=[A-Z])([A-Z][a-z])", r"_\1", s)
    return s.lower()


@dataclass
class Field:
    name: str
    type: str                  # element type for arrays: a primitive or a struct name
    is_array: bool
    versions: VersionRange
    nullable: VersionRange | None = None
    tag: int | None = None
    default: Any = None
    has_default: bool = False
    never_flexible: bool = False
    struct: "Struct | None" = None
    line: int = 0

    @property
    def attr(self) -> str:
        return snake_case(self.name)

    @property
    def is_struct(self) -> bool:
        return self.struct is not None

    def nullable_in(self, version: int) -> bool:
        return self.nullable is not None and version in self.nullable

    def default_value(self) -> object:
        """A fresh default, as Kafka's generated code would construct it."""
        if self.is_array:
            return None if self.has_default and self.default is None else []
        if self.struct is not None:
            return None if self.has_default and self.default is None else self.struct.cls()
        if self.has_default:
            return self.default
        return _ZERO[self.type]


_ZERO = {"bool": False, "int8": 0, "int16": 0, "int32": 0, "int64": 0, "uint16": 0,
         "float64": 0.0, "string": "", "bytes": b"", "records": None, "uuid": bytes(16)}


@dataclass
class Struct:
    name: str
    fields: list[Field] = field(default_factory=list)
    cls: Any = None  # set by codegen

    def walk(self) -> list[Struct]:
        """This struct and every struct nested in it, each once."""
        seen: dict[str, Struct] = {}
        stack = [self]
        while stack:
            s = stack.pop()
            if s.name in seen:
                continue
            seen[s.name] = s
            stack.extend(f.struct for f in s.fields if f.struct is not None)
        return list(seen.values())


@dataclass
class MessageSpec:
    name: str                  # e.g. ProduceRequest
    kind: str                  # request | response | header | data | record
    api_key: int | None        # the API key, or a metadata record's type
    versions: VersionRange     # the versions we advertise
    flexible: VersionRange | None
    root: Struct
    source: str = ""

    def is_flexible(self, version: int) -> bool:
        return self.flexible is not None and version in self.flexible

    @property
    def max_version(self) -> int:
        """The newest version we declare: a message's versions are a closed range."""
        if self.versions.high is None:
            raise SchemaError(f"{self.name} declares open-ended versions {self.versions}")
        return self.versions.high


@dataclass
class ApiSchema:
    name: str
    key: int
    versions: VersionRange
    flexible: VersionRange | None
    request: MessageSpec
    response: MessageSpec


def _parse_default(type_: str, text: str) -> int | bool | float | str | None:
    if text == "null":
        return None
    if type_ in INT_TYPES:
        return int(text, 0)
    if type_ == "bool":
        if text not in ("true", "false"):
            raise SchemaError(f"bad bool default {text!r}")
        return text == "true"
    if type_ == "float64":
        return float(text)
    if type_ == "string":
        return text.strip('"')
    raise SchemaError(f"type {type_} cannot have a default")


def _parse_field(tokens: list[str], line: int, where: str) -> Field:
    if len(tokens) < 2:
        raise SchemaError(f"{where}:{line}: a field needs a name and a type")
    name, type_text, *rest = tokens
    is_array = type_text.startswith("[]")
    type_ = type_text[2:] if is_array else type_text
    fld = Field(name=name, type=type_, is_array=is_array, versions=ALL_VERSIONS, line=line)
    nullable_in_all = False   # a bare `nullable`: in every version of the field, known below
    for tok in rest:
        if tok.startswith("v") and tok[1:2].isdigit():
            fld.versions = VersionRange.parse(tok)
        elif tok == "nullable":
            nullable_in_all = True
        elif tok.startswith("nullable="):
            fld.nullable = VersionRange.parse(tok.split("=", 1)[1])
            nullable_in_all = False
        elif tok.startswith("tag="):
            fld.tag = int(tok.split("=", 1)[1])
        elif tok.startswith("default="):
            fld.default = _parse_default(type_, tok.split("=", 1)[1])
            fld.has_default = True
        elif tok == "flexible=none":
            fld.never_flexible = True
        else:
            raise SchemaError(f"{where}:{line}: unknown field attribute {tok!r}")
    if nullable_in_all:
        fld.nullable = fld.versions
    return fld


def _parse_block(lines: list[tuple[int, int, list[str]]], start: int, indent: int, struct: Struct,
                 defined: dict[str, Struct], pending: list[Field], where: str) -> int:
    """Parse fields at exactly `indent` into `struct`; returns the index of the next line."""
    i = start
    while i < len(lines):
        lineno, ind, tokens = lines[i]
        if ind < indent:
            return i
        if ind > indent:
            raise SchemaError(f"{where}:{lineno}: unexpected indentation")
        fld = _parse_field(tokens, lineno, where)
        struct.fields.append(fld)
        i += 1
        if fld.type not in PRIMITIVES:
            if i < len(lines) and lines[i][1] > indent:
                sub = Struct(fld.type)
                if fld.type in defined:
                    raise SchemaError(f"{where}:{lineno}: struct {fld.type} declared twice")
                defined[fld.type] = sub
                fld.struct = sub
                i = _parse_block(lines, i, lines[i][1], sub, defined, pending, where)
            else:
                pending.append(fld)
    return i


def _tokenize(text: str) -> list[tuple[int, int, list[str]]]:
    out = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        out.append((n, indent, line.split()))
    return out


def _resolve(pending: list[Field], defined: dict[str, Struct], where: str) -> None:
    for fld in pending:
        if fld.type not in defined:
            raise SchemaError(f"{where}:{fld.line}: unknown type {fld.type!r}")
        fld.struct = defined[fld.type]


def parse_schema(text: str, where: str = "<schema>") -> ApiSchema | MessageSpec:
    lines = _tokenize(text)
    head: dict[str, list[str]] = {}
    i = 0
    while i < len(lines) and lines[i][1] == 0 and lines[i][2][0] in HEAD_WORDS:
        word = lines[i][2][0]
        if word in head:
            raise SchemaError(f"{where}:{lines[i][0]}: '{word}' given twice")
        head[word] = lines[i][2][1:]
        i += 1
    kinds = [k for k in ("api", "header", "data", "record") if k in head]
    if len(kinds) > 1:
        raise SchemaError(f"{where}: a file declares one thing, not {' and '.join(kinds)}")
    if "versions" not in head:
        raise SchemaError(f"{where}: missing 'versions'")
    versions = VersionRange.parse(head["versions"][0])
    flex_text = head.get("flexible", ["none"])[0]
    flexible = None if flex_text == "none" else VersionRange.parse(flex_text)
    for kind in ("header", "data", "record"):
        if kind not in head:
            continue
        args = head[kind]
        if len(args) != (2 if kind == "record" else 1):
            usage = "record NAME TYPE" if kind == "record" else f"{kind} NAME"
            raise SchemaError(f"{where}: expected '{usage}'")
        name = args[0]
        record_type = None
        if kind == "record":
            try:
                record_type = int(args[1])
            except ValueError:
                raise SchemaError(f"{where}: record type {args[1]!r} is not a number") from None
            if not 0 <= record_type <= 0x7FFF:
                raise SchemaError(f"{where}: record type {record_type} is out of range")
        root = Struct(name)
        defined: dict[str, Struct] = {}
        pending: list[Field] = []
        if i < len(lines):  # a record may have no fields at all (NoOpRecord)
            i = _parse_block(lines, i, lines[i][1], root, defined, pending, where)
        if i < len(lines):
            raise SchemaError(f"{where}:{lines[i][0]}: unexpected line after the fields")
        _resolve(pending, defined, where)
        return MessageSpec(name, kind, record_type, versions, flexible, root, where)
    if "api" not in head:
        raise SchemaError(f"{where}: missing 'api NAME KEY'")
    api_name, key = head["api"][0], int(head["api"][1])
    specs = {}
    while i < len(lines):
        lineno, ind, tokens = lines[i]
        if ind != 0 or tokens[0] not in ("request", "response"):
            raise SchemaError(f"{where}:{lineno}: expected 'request' or 'response'")
        kind = tokens[0]
        i += 1
        root = Struct(api_name + kind.capitalize())
        defined = {}
        pending = []
        if i < len(lines) and lines[i][1] > 0:
            i = _parse_block(lines, i, lines[i][1], root, defined, pending, where)
        _resolve(pending, defined, where)
        specs[kind] = MessageSpec(root.name, kind, key, versions, flexible, root, where)
    if set(specs) != {"request", "response"}:
        raise SchemaError(f"{where}: needs both a request and a response section")
    return ApiSchema(api_name, key, versions, flexible, specs["request"], specs["response"])


SCHEMA_DIR = Path(__file__).with_name("schema")


def load_all(directory: Path = SCHEMA_DIR) -> tuple[dict[int, ApiSchema], dict[str, MessageSpec]]:
    """(APIs by key, every other spec by name: headers, data structs and metadata records)."""
    apis: dict[int, ApiSchema] = {}
    others: dict[str, MessageSpec] = {}
    record_types: dict[int, str] = {}
    for path in sorted(directory.rglob("*.ks")):
        parsed = parse_schema(path.read_text(), str(path.relative_to(directory)))
        if isinstance(parsed, ApiSchema):
            if parsed.key in apis:
                raise SchemaError(f"{path.name}: API key {parsed.key} declared twice")
            apis[parsed.key] = parsed
            continue
        if parsed.name in others:
            raise SchemaError(f"{path.name}: {parsed.name} is declared twice")
        if parsed.kind == "record":
            assert parsed.api_key is not None   # a record declares its type
            if parsed.api_key in record_types:
                raise SchemaError(f"{path.name}: record type {parsed.api_key} is already "
                                  f"{record_types[parsed.api_key]}")
            record_types[parsed.api_key] = parsed.name
        others[parsed.name] = parsed
    return apis, others
