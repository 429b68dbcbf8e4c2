"""A server-side TLS byte stream over any anyio byte stream, built on ssl.MemoryBIO.

Why not anyio's TLSStream: two things a Kafka listener needs that it does not do.

- A failed handshake ends with the TLS alert the server owes the client (protocol version,
  unknown CA, certificate required, ...). anyio drops it, so a client only sees the socket
  close and cannot tell a wrong certificate from a crash.
- One receive returns everything the bytes read so far decrypt to, not one TLS record (16 KiB)
  at a time: a 1 MiB produce request is then a few reads, not 64 passes through the caller.

Sending encrypts the item and writes the records out at once; nothing is buffered between
calls. Closing sends close_notify when it can and never waits for the peer's.
"""
from __future__ import annotations

import ssl
from typing import Any, Callable, Mapping, TypeVar

import anyio
from anyio.abc import ByteStream

_T = TypeVar("_T")
TRANSPORT_READ = 256 * 1024


class TlsStream(ByteStream):
    def __init__(self, transport: ByteStream, context: ssl.SSLContext):
        self.transport = transport
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self.ssl_object = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._closed = False

    # --- the handshake ------------------------------------------------------------------------

    async def handshake(self) -> None:
        """Complete the server handshake. On failure the alert is sent before the error
        (ssl.SSLError, or anyio.EndOfStream when the client went away) propagates."""
        try:
            await self._retry(self.ssl_object.do_handshake)
        except ssl.SSLError:
            await self._flush_quietly()
            raise

    @property
    def peer_certificate(self) -> bytes | None:
        """The client's certificate (DER), if it sent one that the context accepted."""
        return self.ssl_object.getpeercert(binary_form=True)

    @property
    def version(self) -> str | None:
        return self.ssl_object.version()

    # --- ByteStream ---------------------------------------------------------------------------

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if max_bytes < 1:
            raise ValueError("max_bytes must be positive")
        while True:
            chunks = []
            size = 0
            closed = False
            while size < max_bytes:
                try:
                    chunk = self.ssl_object.read(max_bytes - size)
                except ssl.SSLWantReadError:
                    break
                except ssl.SSLZeroReturnError:   # the peer's close_notify
                    closed = True
                    break
                except ssl.SSLError as exc:
                    raise anyio.BrokenResourceError from exc
                if not chunk:
                    # An SSLObject reports the peer's close_notify as an empty read, not as
                    # SSLZeroReturnError. Waiting for more bytes here would deadlock with a peer
                    # that sends close_notify and waits for ours before it closes the socket
                    # (asyncio's and OpenSSL's clients do): each close would cost it a timeout.
                    closed = True
                    break
                chunks.append(chunk)
                size += len(chunk)
            if chunks:
                await self._flush()   # TLS 1.3 may answer records (key updates) while reading
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)
            if closed or self._incoming.eof:
                raise anyio.EndOfStream
            await self._fill()

    async def send(self, item: bytes | bytearray | memoryview) -> None:
        await self._retry(lambda: self.ssl_object.write(item))

    async def send_parts(self, parts: list) -> None:
        """A response's buffers (header, record sets) encrypted back to back and written
        out in one send, where separate sends would each cost a write and a wait."""
        for part in parts:
            while True:
                try:
                    self.ssl_object.write(part)
                    break
                except ssl.SSLWantReadError:   # TLS 1.3 post-handshake traffic: rare
                    await self._flush()
                    await self._fill()
        await self._flush()

    async def send_eof(self) -> None:
        raise NotImplementedError("TLS has no half-close")

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            with anyio.move_on_after(1):
                try:
                    self.ssl_object.unwrap()
                except (ssl.SSLError, ValueError):
                    pass   # WantRead: the peer's close_notify is never waited for
                await self._flush_quietly()
        finally:
            await self.transport.aclose()

    @property
    def extra_attributes(self) -> Mapping[Any, Callable[[], Any]]:
        return self.transport.extra_attributes

    # --- plumbing -----------------------------------------------------------------------------

    async def _retry(self, operation: Callable[[], _T]) -> _T:
        while True:
            try:
                result = operation()
            except ssl.SSLWantReadError:
                await self._flush()
                await self._fill()
                continue
            except ssl.SSLWantWriteError:
                await self._flush()
                continue
            await self._flush()
            return result

    async def _fill(self) -> None:
        try:
            data = await self.transport.receive(TRANSPORT_READ)
        except anyio.EndOfStream:
            self._incoming.write_eof()
            raise
        except OSError as exc:
            self._incoming.write_eof()
            raise anyio.BrokenResourceError from exc
        self._incoming.write(data)

    async def _flush(self) -> None:
        pending = self._outgoing.read()
        if pending:
            await self.transport.send(pending)

    async def _flush_quietly(self) -> None:
        try:
            await self._flush()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
