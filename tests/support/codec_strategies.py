"""Hypothesis strategies drawn from our protocol schema: every message of every API at every
version, unknown tagged fields included (StrategyBuilder); and `plain`, a message as nested plain
data, to compare what a codec gives back."""
from __future__ import annotations

from hypothesis import strategies as st

from core.protocol.codegen import Message
from core.protocol.dsl import Field, MessageSpec, Struct

_INT_RANGES = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "uint16": (0, (1 << 16) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
}


def _primitive(type_: str) -> st.SearchStrategy:
    if type_ in _INT_RANGES:
        lo, hi = _INT_RANGES[type_]
        # Mix the extremes in: they are where sign and width mistakes show (-1 only where the
        # type is signed: a uint16 port cannot be -1).
        return st.one_of(st.integers(lo, hi), st.sampled_from([x for x in (lo, hi, -1, 0, 1) if lo <= x <= hi]))
    if type_ == "float64":
        return st.floats(allow_nan=False)
    if type_ == "bool":
        return st.booleans()
    if type_ == "string":
        return st.text(max_size=10)
    if type_ == "bytes":
        return st.binary(max_size=24)
    if type_ == "records":
        return st.binary(max_size=48)
    if type_ == "uuid":
        return st.binary(min_size=16, max_size=16)
    raise AssertionError(f"no strategy for {type_}")


def _unknown_tags(struct_: Struct) -> st.SearchStrategy:
    known = {f.tag for f in struct_.fields if f.tag is not None}
    tag = st.one_of(st.integers(0, 40), st.integers(0, (1 << 31) - 1)).filter(lambda t: t not in known)
    return st.one_of(st.none(), st.dictionaries(tag, st.binary(max_size=8), min_size=1, max_size=2))


class StrategyBuilder:
    """Hypothesis strategies for the objects of one message at one version."""

    def __init__(self, spec: MessageSpec, version: int):
        self.spec = spec
        self.version = version
        self.flexible = spec.is_flexible(version)
        self._cache: dict[str, st.SearchStrategy] = {}

    def field(self, f: Field) -> st.SearchStrategy:
        if f.struct is not None:
            elem = self.struct(f.struct)
        else:
            elem = _primitive(f.type)
        value = st.lists(elem, max_size=2) if f.is_array else elem
        if f.nullable_in(self.version):
            value = st.one_of(st.none(), value)
        return value

    def struct(self, s: Struct) -> st.SearchStrategy:
        if s.name not in self._cache:
            present = {f.attr: self.field(f) for f in s.fields if self.version in f.versions}
            tags = _unknown_tags(s) if self.flexible else st.none()

            def build(kwargs, unknown_tags, cls=s.cls):
                return cls(**kwargs, unknown_tags=unknown_tags)
            self._cache[s.name] = st.builds(build, st.fixed_dictionaries(present), tags)
        return self._cache[s.name]

    def message(self) -> st.SearchStrategy:
        return self.struct(self.spec.root)


def plain(value):
    """A message as nested plain data, unknown tags included, buffers as bytes, NaN as "NaN"."""
    if isinstance(value, Message):
        out = {f: plain(getattr(value, f)) for f in value._fields}
        out["unknown_tags"] = value.unknown_tags
        return out
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, (memoryview, bytearray)):
        return bytes(value)
    if isinstance(value, float) and value != value:
        return "NaN"  # a float64 decoded from hostile bytes may be NaN, which equals nothing
    return value
