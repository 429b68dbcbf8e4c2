"""Kafka requests over a plain blocking socket, one at a time: for tests that must say exactly
what goes on the wire and in which order (before authentication, half a handshake, a frame
no client would send)."""
from __future__ import annotations

import socket
import struct

from core.protocol import messages as m
from core.protocol.codegen import Writer

_SIZE = struct.Struct(">i")


def request_frame(api_key: int, version: int, request, *, correlation_id: int = 1,
                  client_id: str = "raw-test") -> bytes:
    api = m.API[api_key]
    w = Writer()
    header = m.RequestHeader(request_api_key=api_key, request_api_version=version,
                             correlation_id=correlation_id, client_id=client_id)
    m.REQUEST_HEADER.encode_into(api.request_header_version(version), header, w)
    api.request.encode_into(version, request, w)
    body = b"".join(bytes(p) for p in w.finish())
    return _SIZE.pack(len(body)) + body


def read_frame(sock: socket.socket) -> bytes | None:
    """One size-prefixed frame, or None if the peer closed first."""
    head = _read_exactly(sock, 4)
    if head is None:
        return None
    return _read_exactly(sock, _SIZE.unpack(head)[0])


def _read_exactly(sock: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def roundtrip(sock: socket.socket, api_key: int, version: int, request, correlation_id: int = 1):
    """Send one request; its decoded response, or None if the connection closed instead."""
    sock.sendall(request_frame(api_key, version, request, correlation_id=correlation_id))
    frame = read_frame(sock)
    if frame is None:
        return None
    api = m.API[api_key]
    header_size = 4 if api.response_header_version(version) == 0 else 5
    assert _SIZE.unpack_from(frame)[0] == correlation_id
    response, _ = api.response.decode(version, frame, header_size, whole=False)
    return response


def closed_without_answer(sock: socket.socket) -> bool:
    """True once the peer has closed (reading returns nothing), False if it sent bytes."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
