"""Envelope (KIP-590) framing without decoding what is inside: a trusted proxy (the gateway)
sends a client's request, as the client sent it, with the client's principal and address,
and the broker answers with the response it would have given the client.

Kafka uses Envelope between brokers and the controller; Seaway's brokers also take it on
client listeners from a principal allowed ClusterAction on the cluster, so that a gateway
in front of them never needs rights of its own on topics and groups: each request is
authorized as the client's principal, on the cluster that serves it.

The request and response data are whole frames without their size prefix (header and body).
The gateway builds the envelope around the client's bytes and takes the answer's bytes out
of the envelope's answer without copying or decoding them (`envelope_request_parts`,
`envelope_response_data`); the broker uses the codec.
"""
from __future__ import annotations

import ipaddress
import struct

from . import messages as m
from .api_keys import ApiKey
from .errors import DecodeError
from .varint import read_uvarint, uvarint_bytes

ENVELOPE_VERSION = 0
_PRINCIPAL = m.DATA["DefaultPrincipalData"]
_VERSION = struct.Struct(">h")
_HEADER = struct.Struct(">hhi")


def encode_principal(principal: str) -> bytes:
    """"User:alice" as Kafka's DefaultPrincipalData: a 2-byte version, then the struct."""
    kind, sep, name = principal.partition(":")
    if not sep:
        raise ValueError(f"a principal is TYPE:NAME, not {principal!r}")
    body = _PRINCIPAL.encode(0, m.DefaultPrincipalData(type=kind, name=name, token_authenticated=False))
    return _VERSION.pack(0) + bytes(body)


def decode_principal(data: bytes | bytearray | memoryview) -> str:
    """The principal an Envelope names, as "TYPE:NAME". Raises DecodeError."""
    if len(data) < 2:
        raise DecodeError("principal data shorter than its version")
    (version,) = _VERSION.unpack_from(data)
    if version != 0:
        raise DecodeError(f"principal data version {version} is not supported")
    value, _ = _PRINCIPAL.decode(0, data, 2, whole=False)
    kind, name = getattr(value, "type"), getattr(value, "name")
    if not kind or name is None:
        raise DecodeError("principal data without a type or name")
    return f"{kind}:{name}"


def encode_address(host: str) -> bytes:
    """The client's address as Envelope carries it: 4 or 16 bytes (b"" if it is not an IP)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).packed
    except ValueError:
        return b""


def decode_address(data: bytes | bytearray | memoryview) -> str:
    if len(data) in (4, 16):
        return str(ipaddress.ip_address(bytes(data)))
    raise DecodeError(f"client address of {len(data)} bytes is neither IPv4 nor IPv6")


def envelope_request_parts(correlation_id: int, client_id: str, inner: bytes | bytearray | memoryview,
                           principal: bytes, address: bytes) -> list[bytes | bytearray | memoryview]:
    """An Envelope request frame around `inner` (a client's request without its size prefix),
    size prefix included, as parts to write one after the other: the inner bytes are not
    copied."""
    head = bytearray(_HEADER.pack(ApiKey.ENVELOPE, ENVELOPE_VERSION, correlation_id))
    cid = client_id.encode()
    head += struct.pack(">h", len(cid)) + cid      # request header v2: client id is a plain string
    head.append(0)                                 # no tagged fields
    head += uvarint_bytes(len(inner) + 1)
    tail = bytearray(uvarint_bytes(len(principal) + 1)) + principal
    tail += uvarint_bytes(len(address) + 1) + address
    tail.append(0)
    size = len(head) + len(inner) + len(tail)
    return [struct.pack(">i", size), head, inner, tail]


def envelope_response_data(frame: bytes | bytearray | memoryview) -> tuple[int, memoryview | None]:
    """(error code, the inner response frame or None) of an Envelope answer (without its size
    prefix), taken out without copying. Raises DecodeError for a malformed answer."""
    view = memoryview(frame)
    at = 4                                          # correlation id
    _tags, at = read_uvarint(view, at)                  # response header v1: tagged fields (count)
    if _tags:
        raise DecodeError("tagged fields in an Envelope answer's header are not expected")
    length, at = read_uvarint(view, at)
    data = None
    if length:
        end = at + length - 1
        if end > len(view):
            raise DecodeError("Envelope answer shorter than its response data")
        data, at = view[at:end], end
    if at + 2 > len(view):
        raise DecodeError("Envelope answer without an error code")
    (error,) = _VERSION.unpack_from(view, at)
    return error, data

