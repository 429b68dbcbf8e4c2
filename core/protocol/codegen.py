"""Compile message specs (from dsl.py) into Python classes, decoders and encoders.

Theory of operation
-------------------
Each struct of a message becomes a class with `__slots__`, shared by every version. For each
(message, version) we generate straight-line Python source, one decode and one encode
function per struct, and `exec` it once, lazily, on first use. Generated code reads with
precompiled `struct.Struct` unpackers at explicit positions, so decoding costs a few
bytecodes per field and nothing per record: a `records` field decodes to a zero-copy
memoryview slice of the frame, and encodes as a separate buffer so that fetch responses
can be written with `writelines` without copying log data.

Safety: every length read from the wire is checked against the bytes that remain before
anything is allocated, so a hostile frame can never make us allocate more than its size.

Short lengths inline. In flexible versions almost every length (an array's, a string's, the
count of tagged fields) is a one-byte varint, so the generated code reads and writes those in
line and calls the general helpers (read_uvarint, _r_array_len, _w_string, ...) only for
longer or null values: a transaction on a 3-node cluster took some 1,100 fewer Python calls
in the nodes (tests/benchmarks/count_calls.py). A one-byte length holds at most 126 elements
or bytes, so nothing is allocated before it is checked here either.
"""
from __future__ import annotations

import operator
import struct
from typing import Any, Callable, Literal, Sequence, TypeAlias, cast, overload

from .buffers import Buffer
from .dsl import Field, MessageSpec, Struct
from .errors import DecodeError, EncodeError
from .varint import read_uvarint, uvarint_bytes

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")

_INT_CODECS = {  # type -> (struct, size, array format char)
    "int8": (_I8, 1, "b"),
    "int16": (_I16, 2, "h"),
    "uint16": (_U16, 2, "H"),
    "int32": (_I32, 4, "i"),
    "uint32": (_U32, 4, "I"),
    "int64": (_I64, 8, "q"),
    "float64": (_F64, 8, "d"),
}

LARGE_BUFFER = 16 * 1024  # records at least this big are sent as their own buffer


class Writer:
    """Accumulates an encoded message as a list of buffers (see module docstring)."""

    __slots__ = ("buf", "parts")

    def __init__(self) -> None:
        self.buf = bytearray()
        self.parts: list[Buffer] = []

    def add_large(self, data: Buffer) -> None:
        # Hand over the bytearray itself rather than a copy; encoders always reach the
        # buffer through `w.buf`, so replacing it here is safe.
        if self.buf:
            self.parts.append(self.buf)
            self.buf = bytearray()
        self.parts.append(data)

    def finish(self) -> list[Buffer]:
        if self.buf:
            self.parts.append(self.buf)
            self.buf = bytearray()
        return self.parts

    def getvalue(self) -> bytes:
        return b"".join(self.finish())


class Message:
    """Base of every generated message and struct class."""

    __slots__ = ()
    _fields: tuple[str, ...] = ()
    unknown_tags: dict[int, bytes] | None   # a slot of every generated class

    @staticmethod
    def _values(message: "Message") -> tuple[object, ...]:
        """Each generated class has its own: operator.attrgetter of its fields."""
        return ()

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        # Encoders compare tagged struct fields with their defaults, for every message sent.
        return (self._values(self) == other._values(other)
                and (self.unknown_tags or None) == (other.unknown_tags or None))

    def __repr__(self) -> str:
        inner = ", ".join(f"{f}={getattr(self, f)!r}" for f in self._fields)
        return f"{type(self).__name__}({inner})"

    def to_dict(self) -> dict[str, Any]:
        def conv(v: object) -> object:
            if isinstance(v, Message):
                return v.to_dict()
            if isinstance(v, list):
                return [conv(x) for x in v]
            if isinstance(v, memoryview):
                return bytes(v)
            return v
        return {f: conv(getattr(self, f)) for f in self._fields}


# --------------------------------------------------------------------------- read helpers
# These take (buffer, position) and return (value, new position).


def _short(what: str) -> DecodeError:
    return DecodeError(f"{what} runs past the end of the frame")


def _r_len16(b: memoryview, p: int) -> tuple[int, int]:
    (n,) = _I16.unpack_from(b, p)
    return n, p + 2


def _r_len32(b: memoryview, p: int) -> tuple[int, int]:
    (n,) = _I32.unpack_from(b, p)
    return n, p + 4


def _r_clen(b: memoryview, p: int) -> tuple[int, int]:
    n, p = read_uvarint(b, p)
    return n - 1, p


def _take(b: memoryview, p: int, n: int, what: str) -> tuple[memoryview, int]:
    end = p + n
    if end > len(b):
        raise _short(what)
    return b[p:end], end


# The generated decoders' readers of variable-length fields: (buffer, position, nullable, what)
# -> (value, new position).
_Reader: TypeAlias = Callable[[memoryview, int, bool, str], tuple[object, int]]


def _mk_reader(length_reader: Callable[[memoryview, int], tuple[int, int]],
               convert: Callable[[memoryview], object], max_len: int | None = None) -> _Reader:
    def read(b: memoryview, p: int, nullable: bool, what: str) -> tuple[object, int]:
        n, p = length_reader(b, p)
        if n < 0:
            if nullable:
                return None, p
            raise DecodeError(f"{what} is null but not nullable in this version")
        if max_len is not None and n > max_len:  # Kafka caps compact strings at 32767 bytes too
            raise DecodeError(f"{what} is {n} bytes long, more than {max_len}")
        raw, p = _take(b, p, n, what)
        return convert(raw), p
    return read


def _utf8(raw: memoryview) -> str:
    try:
        return str(raw, "utf-8")
    except UnicodeDecodeError:
        raise DecodeError("string is not valid UTF-8") from None


def _identity(raw: memoryview) -> memoryview:
    return raw


_READERS = {
    ("string", False): _mk_reader(_r_len16, _utf8),
    ("string", True): _mk_reader(_r_clen, _utf8, 0x7FFF),
    ("bytes", False): _mk_reader(_r_len32, bytes),
    ("bytes", True): _mk_reader(_r_clen, bytes),
    ("records", False): _mk_reader(_r_len32, _identity),
    ("records", True): _mk_reader(_r_clen, _identity),
}

# The generated decoders' conversions of a field whose compact length is one byte (0..126
# bytes; anything else goes through _READERS). A string that is not UTF-8 raises
# UnicodeDecodeError there, which MessageCodec.decode reports as a DecodeError.
_INLINE_CONVERT = {"string": "str({}, 'utf-8')", "bytes": "bytes({})", "records": "{}"}


def _r_uuid(b: memoryview, p: int, nullable: bool, what: str) -> tuple[bytes, int]:
    raw, p = _take(b, p, 16, what)
    return bytes(raw), p


def _r_bool(b: memoryview, p: int, nullable: bool, what: str) -> tuple[bool, int]:
    if p >= len(b):
        raise _short(what)
    return b[p] != 0, p + 1


def _r_array_len(b: memoryview, p: int, flexible: bool, nullable: bool, what: str) -> tuple[int, int]:
    n, p = _r_clen(b, p) if flexible else _r_len32(b, p)
    if n < 0:
        if not nullable:
            raise DecodeError(f"{what} is null but not nullable in this version")
        return -1, p
    if n > len(b) - p:  # every element takes at least one byte
        raise DecodeError(f"{what} claims {n} elements, more than the frame holds")
    return n, p


def _r_int_array(b: memoryview, p: int, n: int, fmt: str, size: int,
                 what: str) -> tuple[list[int | float], int]:
    end = p + n * size
    if end > len(b):
        raise _short(what)
    return list(struct.unpack_from(f">{n}{fmt}", b, p)), end


def _r_tag_header(b: memoryview, p: int) -> tuple[int, int, int]:
    tag, p = read_uvarint(b, p)
    size, p = read_uvarint(b, p)
    if p + size > len(b):
        raise _short(f"tagged field {tag}")
    return tag, size, p


# --------------------------------------------------------------------------- write helpers


def _w_len(buf: bytearray, n: int, flexible: bool, width: int) -> None:
    if flexible:
        buf += uvarint_bytes(n + 1)
    elif width == 2:
        buf += _I16.pack(n)
    else:
        buf += _I32.pack(n)


def _null(buf: bytearray, flexible: bool, width: int) -> None:
    if flexible:
        buf += b"\x00"
    else:
        buf += b"\xff\xff" if width == 2 else b"\xff\xff\xff\xff"


def _w_string(w: Writer, v: str | None, flexible: bool, nullable: bool, what: str) -> None:
    buf = w.buf
    if v is None:
        if not nullable:
            raise EncodeError(f"{what} may not be null in this version")
        _null(buf, flexible, 2)
        return
    data = v.encode("utf-8")
    if len(data) > 0x7FFF:
        raise EncodeError(f"{what} is longer than 32767 bytes")
    _w_len(buf, len(data), flexible, 2)
    buf += data


def _w_bytes(w: Writer, v: Buffer | None, flexible: bool, nullable: bool, what: str) -> None:
    buf = w.buf
    if v is None:
        if not nullable:
            raise EncodeError(f"{what} may not be null in this version")
        _null(buf, flexible, 4)
        return
    _w_len(buf, len(v), flexible, 4)
    buf += v


def _w_records(w: Writer, v: Buffer | list[Buffer] | tuple[Buffer, ...] | None, flexible: bool,
               nullable: bool, what: str) -> None:
    """Records may be one buffer or a list of buffers (file chunks) sent back to back."""
    if v is None:
        if not nullable:
            raise EncodeError(f"{what} may not be null in this version")
        _null(w.buf, flexible, 4)
        return
    chunks = v if isinstance(v, (list, tuple)) else (v,)
    total = 0
    for c in chunks:
        total += len(c) if not isinstance(c, memoryview) else c.nbytes
    _w_len(w.buf, total, flexible, 4)
    for c in chunks:
        if len(c) >= LARGE_BUFFER:
            w.add_large(c)
        else:
            w.buf += c


def _w_uuid(w: Writer, v: Buffer | None, flexible: bool, nullable: bool, what: str) -> None:
    if v is None or len(v) != 16:
        raise EncodeError(f"{what} must be 16 bytes")
    w.buf += v


def _w_bool(w: Writer, v: object, flexible: bool, nullable: bool, what: str) -> None:
    w.buf += b"\x01" if v else b"\x00"


_WRITERS = {"string": _w_string, "bytes": _w_bytes, "records": _w_records,
            "uuid": _w_uuid, "bool": _w_bool}


def _w_array_len(buf: bytearray, v: Sequence[object] | None, flexible: bool, nullable: bool,
                 what: str) -> bool:
    if v is None:
        if not nullable:
            raise EncodeError(f"{what} may not be null in this version")
        _null(buf, flexible, 4)
        return False
    _w_len(buf, len(v), flexible, 4)
    return True


def _w_tags(buf: bytearray, tags: list[tuple[int, bytes]]) -> None:
    buf += uvarint_bytes(len(tags))
    for tag, data in sorted(tags, key=lambda t: t[0]):
        buf += uvarint_bytes(tag)
        buf += uvarint_bytes(len(data))
        buf += data


# --------------------------------------------------------------------------- classes


def build_classes(spec: MessageSpec) -> type[Message]:
    """Create one class per struct; nested struct classes hang off the root class."""
    structs = spec.root.walk()
    for s in structs:
        attrs = tuple(f.attr for f in s.fields)
        # type() makes a Message subclass, which its signature cannot say.
        s.cls = cast("type[Message]", type(
            s.name, (Message,), {"__slots__": attrs + ("unknown_tags",), "_fields": attrs,
                                 **({"_values": operator.attrgetter(*attrs)} if attrs else {}),
                                 "__module__": "core.protocol.messages"}))
    for s in structs:
        ns: dict[str, Any] = {"_MISSING": _MISSING}
        params, body = [], []
        def const(value: object) -> str:
            name = f"_d{len(ns)}"
            ns[name] = value
            return name
        for f in s.fields:
            params.append(f"{f.attr}=_MISSING")
            body.append(f"    self.{f.attr} = {default_source(f, const)} if {f.attr} is _MISSING else {f.attr}")
        params.append("unknown_tags=None")
        body.append("    self.unknown_tags = unknown_tags")
        src = f"def __init__(self, *, {', '.join(params)}):\n" + "\n".join(body) + "\n"
        exec(src, ns)
        s.cls.__init__ = ns["__init__"]
    root: type[Message] = spec.root.cls
    for s in structs:
        if s is not spec.root:
            setattr(root, s.name, s.cls)
    return root


_MISSING = object()


def default_source(f: Field, const: Callable[[object], str]) -> str:
    """Source of an expression for a fresh default of `f`, the value `Field.default_value`
    gives, with no call where that value cannot be changed: constructing and decoding a
    message sets every field left out, a few hundred per transaction on a node. A list or a
    struct must be made anew each time. `const(value)` names a value in the generated code's
    namespace."""
    value = f.default_value()
    if isinstance(value, list):
        assert not value   # default_value's fresh empty list
        return "[]"
    if isinstance(value, Message):
        return f"{const(type(value))}()"
    return const(value)

# What _Gen compiles for one (message, version): decode(buffer, position) -> (object, end) and
# encode(object, writer).
_Decoder: TypeAlias = Callable[[memoryview, int], tuple[Message, int]]
_Encoder: TypeAlias = Callable[[Message, Writer], None]


# --------------------------------------------------------------------------- code generation


class _Gen:
    def __init__(self, spec: MessageSpec, version: int):
        self.spec = spec
        self.version = version
        self.flexible = spec.is_flexible(version)
        self.ns: dict[str, Any] = {
            "DecodeError": DecodeError, "_I8": _I8, "_I16": _I16, "_I32": _I32, "_I64": _I64,
            "_READERS": _READERS, "_WRITERS": _WRITERS, "_r_uuid": _r_uuid, "_r_bool": _r_bool,
            "_r_array_len": _r_array_len, "_r_int_array": _r_int_array, "_r_tag_header": _r_tag_header,
            "_w_array_len": _w_array_len, "_w_tags": _w_tags, "read_uvarint": read_uvarint,
            "Writer": Writer, "_struct": struct, "_short": _short,
        }
        self.lines: list[str] = []
        self.counter = 0

    def present(self, s: Struct) -> list[Field]:
        return [f for f in s.fields if self.version in f.versions]

    def structs(self) -> list[Struct]:
        seen: dict[str, Struct] = {}
        stack = [self.spec.root]
        while stack:
            s = stack.pop()
            if s.name in seen:
                continue
            seen[s.name] = s
            stack.extend(f.struct for f in self.present(s) if f.struct is not None)
        return list(seen.values())

    def const(self, value: object) -> str:
        self.counter += 1
        name = f"_k{self.counter}"
        self.ns[name] = value
        return name

    def field_flexible(self, f: Field) -> bool:
        return self.flexible and not f.never_flexible

    # ---- fixed-width fields side by side

    @staticmethod
    def plain_int(f: Field) -> bool:
        return not f.is_array and f.struct is None and f.type in _INT_CODECS

    def emit_int_run(self, run: list[Field], *, decode: bool) -> None:
        """Fixed-width fields one after another, read or written with one struct call (a
        FetchResponse partition has five, a Produce partition's answer six)."""
        if len(run) < 2:
            for f in run:
                if decode:
                    self.emit_decode_value(f, f"o.{f.attr}", "p", "    ", self.lines)
                else:
                    self.emit_encode_value(f, f"o.{f.attr}", "w", "    ", self.lines)
            return
        st = struct.Struct(">" + "".join(_INT_CODECS[f.type][2] for f in run))
        attrs = ", ".join(f"o.{f.attr}" for f in run)
        if decode:
            self.lines.append(f"    ({attrs},) = {self.const(st.unpack_from)}(b, p); p += {st.size}")
        else:
            self.lines.append(f"    w.buf += {self.const(st.pack)}({attrs})")

    # ---- decoding

    def emit_decode_value(self, f: Field, target: str, pos: str, ind: str, out: list[str]) -> None:
        flex = self.field_flexible(f)
        nullable = f.nullable_in(self.version)
        what = repr(f.name)
        if f.is_array:
            n = f"n{self.counter}"
            self.counter += 1
            if flex:
                out.append(f"{ind}{n} = b[{pos}]")
                out.append(f"{ind}if 0 < {n} < 0x80:")
                out.append(f"{ind}    {n} -= 1; {pos} += 1")
                out.append(f"{ind}else:")
                out.append(f"{ind}    {n}, {pos} = _r_array_len(b, {pos}, True, {nullable}, {what})")
            else:
                out.append(f"{ind}{n}, {pos} = _r_array_len(b, {pos}, False, {nullable}, {what})")
            out.append(f"{ind}if {n} < 0:")
            out.append(f"{ind}    {target} = None")
            out.append(f"{ind}else:")
            if f.type in _INT_CODECS:
                _, size, fmt = _INT_CODECS[f.type]
                out.append(f"{ind}    {target}, {pos} = _r_int_array(b, {pos}, {n}, {fmt!r}, {size}, {what})")
                return
            lst = f"l{self.counter}"
            self.counter += 1
            out.append(f"{ind}    {lst} = []")
            out.append(f"{ind}    for _ in range({n}):")
            out.append(f"{ind}        e, {pos} = {self.elem_reader(f, pos)}")
            out.append(f"{ind}        {lst}.append(e)")
            out.append(f"{ind}    {target} = {lst}")
            return
        if f.struct is not None and nullable:
            out.append(f"{ind}if b[{pos}] >= 0x80:  # any negative int8 marks null")
            out.append(f"{ind}    {target} = None; {pos} += 1")
            out.append(f"{ind}else:")
            out.append(f"{ind}    {pos} += 1")
            out.append(f"{ind}    {target}, {pos} = {self.elem_reader(f, pos)}")
            return
        if f.type in _INT_CODECS:
            st, size, _ = _INT_CODECS[f.type]
            sname = self.const(st.unpack_from)
            out.append(f"{ind}({target},) = {sname}(b, {pos}); {pos} += {size}")
            return
        if flex and f.type in _INLINE_CONVERT:
            # a one-byte length (1..127: 0..126 bytes); null and longer values take the reader
            out.append(f"{ind}v = b[{pos}]")
            out.append(f"{ind}if 0 < v < 0x80:")
            out.append(f"{ind}    v += {pos}")
            out.append(f"{ind}    if v > len(b): raise _short({what})")
            out.append(f"{ind}    {target} = {_INLINE_CONVERT[f.type].format(f'b[{pos} + 1:v]')}; {pos} = v")
            out.append(f"{ind}else:")
            out.append(f"{ind}    {target}, {pos} = {self.elem_reader(f, pos, nullable)}")
            return
        out.append(f"{ind}{target}, {pos} = {self.elem_reader(f, pos, nullable)}")

    def elem_reader(self, f: Field, pos: str, nullable: bool = False) -> str:
        flex = self.field_flexible(f)
        what = repr(f.name)
        if f.struct is not None:
            return f"d_{f.struct.name}(b, {pos})"
        if f.type in _INT_CODECS:
            st, size, _ = _INT_CODECS[f.type]
            return f"({self.const(st.unpack_from)}(b, {pos})[0], {pos} + {size})"
        if f.type == "uuid":
            return f"_r_uuid(b, {pos}, False, {what})"
        if f.type == "bool":
            return f"_r_bool(b, {pos}, False, {what})"
        reader = self.const(_READERS[(f.type, flex)])
        return f"{reader}(b, {pos}, {nullable}, {what})"

    def gen_decoder(self, s: Struct) -> None:
        L = self.lines
        cls = self.const(s.cls)
        L.append(f"def d_{s.name}(b, p):")
        L.append(f"    o = {cls}.__new__({cls})")
        L.append("    o.unknown_tags = None")
        tagged = []
        run: list[Field] = []
        for f in s.fields:
            if self.version not in f.versions or (f.tag is not None and self.flexible):
                L.append(f"    o.{f.attr} = {default_source(f, self.const)}")
                if self.version in f.versions:
                    tagged.append(f)
                continue
            if self.plain_int(f):
                run.append(f)
                continue
            self.emit_int_run(run, decode=True)
            run = []
            self.emit_decode_value(f, f"o.{f.attr}", "p", "    ", L)
        self.emit_int_run(run, decode=True)
        if self.flexible:
            L.append("    nt = b[p]")
            L.append("    if nt < 0x80:")
            L.append("        p += 1")
            L.append("    else:")
            L.append("        nt, p = read_uvarint(b, p)")
            L.append("    for _ in range(nt):")
            L.append("        tg, sz, p = _r_tag_header(b, p)")
            kw = "if"
            for f in tagged:
                L.append(f"        {kw} tg == {f.tag}:")
                L.append("            q = p")
                self.emit_decode_value(f, f"o.{f.attr}", "q", "            ", L)
                L.append("            if q != p + sz:")
                L.append(f"                raise DecodeError('tagged field {f.name} has the wrong size')")
                kw = "elif"
            body_ind = "        " if not tagged else "            "
            if tagged:
                L.append("        else:")
            L.append(f"{body_ind}if o.unknown_tags is None: o.unknown_tags = {{}}")
            L.append(f"{body_ind}o.unknown_tags[tg] = bytes(b[p:p + sz])")
            L.append("        p += sz")
        L.append("    return o, p")
        L.append("")

    # ---- encoding

    def emit_encode_value(self, f: Field, value: str, w: str, ind: str, out: list[str]) -> None:
        flex = self.field_flexible(f)
        nullable = f.nullable_in(self.version)
        what = repr(f.name)
        if f.is_array:
            out.append(f"{ind}a = {value}")
            # flexible: a one-byte length in line (append returns None, so `not` is True);
            # null and longer arrays take _w_array_len
            short = f"(a is not None and len(a) < 0x7F and not {w}.buf.append(len(a) + 1)) or " if flex else ""
            out.append(f"{ind}if {short}_w_array_len({w}.buf, a, {flex}, {nullable}, {what}):")
            if f.type in _INT_CODECS:
                _, _, fmt = _INT_CODECS[f.type]
                out.append(f"{ind}    {w}.buf += _struct.pack('>%d{fmt}' % len(a), *a)")
            else:
                out.append(f"{ind}    for e in a:")
                self.emit_encode_elem(f, "e", w, ind + "        ", out)
            return
        if f.struct is not None and nullable:
            out.append(f"{ind}if {value} is None:")
            out.append(f"{ind}    {w}.buf += b'\\xff'")
            out.append(f"{ind}else:")
            out.append(f"{ind}    {w}.buf += b'\\x01'")
            self.emit_encode_elem(f, value, w, ind + "    ", out)
            return
        if f.type in _INT_CODECS or f.struct is not None:
            self.emit_encode_elem(f, value, w, ind, out)
            return
        writer = self.const(_WRITERS[f.type])
        if flex and f.type == "string":
            # a one-byte length in line; null and longer strings take the writer
            out.append(f"{ind}v = {value}")
            out.append(f"{ind}if v is not None and len(d := v.encode('utf-8')) < 0x7F:")
            out.append(f"{ind}    {w}.buf.append(len(d) + 1); {w}.buf += d")
            out.append(f"{ind}else:")
            out.append(f"{ind}    {writer}({w}, v, True, {nullable}, {what})")
            return
        out.append(f"{ind}{writer}({w}, {value}, {flex}, {nullable}, {what})")

    def emit_encode_elem(self, f: Field, value: str, w: str, ind: str, out: list[str]) -> None:
        if f.struct is not None:
            out.append(f"{ind}e_{f.struct.name}({value}, {w})")
        elif f.type in _INT_CODECS:
            st, _, _ = _INT_CODECS[f.type]
            out.append(f"{ind}{w}.buf += {self.const(st.pack)}({value})")
        else:
            writer = self.const(_WRITERS[f.type])
            out.append(f"{ind}{writer}({w}, {value}, {self.field_flexible(f)}, False, {f.name!r})")

    def gen_encoder(self, s: Struct) -> None:
        L = self.lines
        L.append(f"def e_{s.name}(o, w):")
        tagged = []
        run: list[Field] = []
        for f in self.present(s):
            if f.tag is not None and self.flexible:
                tagged.append(f)
                continue
            if self.plain_int(f):
                run.append(f)
                continue
            self.emit_int_run(run, decode=False)
            run = []
            self.emit_encode_value(f, f"o.{f.attr}", "w", "    ", L)
        self.emit_int_run(run, decode=False)
        if self.flexible:
            L.append("    tags = list(o.unknown_tags.items()) if o.unknown_tags else []")
            for f in tagged:
                default = self.const(f.default_value())
                L.append(f"    if o.{f.attr} != {default}:")
                L.append("        tw = Writer()")
                self.emit_encode_value(f, f"o.{f.attr}", "tw", "        ", L)
                L.append(f"        tags.append(({f.tag}, tw.getvalue()))")
            L.append("    if tags:")
            L.append("        _w_tags(w.buf, tags)")
            L.append("    else:")
            L.append("        w.buf += b'\\x00'")
        L.append("    pass")
        L.append("")

    def compile(self) -> tuple[_Decoder, _Encoder]:
        for s in self.structs():
            self.gen_decoder(s)
            self.gen_encoder(s)
        src = "\n".join(self.lines)
        code = compile(src, f"<codec {self.spec.name} v{self.version}>", "exec")
        exec(code, self.ns)
        root = self.spec.root.name
        decoder: _Decoder = self.ns[f"d_{root}"]
        encoder: _Encoder = self.ns[f"e_{root}"]
        return decoder, encoder


class MessageCodec:
    """Encoder and decoder of one message across its versions, compiled on first use.

    What it decodes is an instance of `cls`, typed as a Message: the registries (messages.API,
    DATA, ...) hold codecs of many classes, so a caller that needs the fields narrows the result
    to the class it expects (messages.pyi has them all).
    """

    def __init__(self, spec: MessageSpec):
        self.spec = spec
        self.cls = build_classes(spec)
        self._compiled: dict[int, tuple[_Decoder, _Encoder]] = {}

    def _get(self, version: int) -> tuple[_Decoder, _Encoder]:
        fns = self._compiled.get(version)
        if fns is None:
            if version not in self.spec.versions:
                raise DecodeError(f"{self.spec.name} version {version} is not supported")
            fns = self._compiled[version] = _Gen(self.spec, version).compile()
        return fns

    @overload
    def decode(self, version: int, buf: Buffer, pos: int = 0, *,
               whole: Literal[True] = True) -> Message: ...
    @overload
    def decode(self, version: int, buf: Buffer, pos: int = 0, *,
               whole: Literal[False]) -> tuple[Message, int]: ...
    @overload
    def decode(self, version: int, buf: Buffer, pos: int = 0, *,
               whole: bool) -> Message | tuple[Message, int]: ...
    def decode(self, version: int, buf: Buffer, pos: int = 0, *,
               whole: bool = True) -> Message | tuple[Message, int]:
        """Decode from `buf` at `pos`. With `whole`, trailing bytes are an error and the
        object is returned; without, (object, end position) is returned."""
        decoder = (self._compiled.get(version) or self._get(version))[0]
        view = buf if isinstance(buf, memoryview) else memoryview(buf)
        try:
            obj, end = decoder(view, pos)
        except DecodeError:
            raise
        except (struct.error, IndexError) as exc:
            raise DecodeError(f"{self.spec.name} v{version} is truncated: {exc}") from None
        except UnicodeDecodeError:
            raise DecodeError(f"{self.spec.name} v{version}: a string is not valid UTF-8") from None
        if not whole:
            return obj, end
        if end != len(view):
            raise DecodeError(f"{self.spec.name} v{version} has {len(view) - end} unexpected trailing bytes")
        return obj

    def encode_into(self, version: int, obj: Message, w: Writer) -> None:
        encoder = (self._compiled.get(version) or self._get(version))[1]
        try:
            encoder(obj, w)
        except EncodeError:
            raise
        except (struct.error, AttributeError, TypeError) as exc:
            raise EncodeError(f"cannot encode {self.spec.name} v{version}: {exc}") from None

    def encode(self, version: int, obj: Message) -> bytes:
        w = Writer()
        self.encode_into(version, obj, w)
        return w.getvalue()


if __name__ == "__main__":  # python -m core.protocol.codegen --stubs [--check]: see stubgen.py
    import sys

    if "--stubs" not in sys.argv[1:]:
        sys.exit("usage: python -m core.protocol.codegen --stubs [--check]")
    from core.protocol import stubgen
    sys.exit(stubgen.main(sys.argv[1:]))
