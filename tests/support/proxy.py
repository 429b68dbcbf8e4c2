"""A TCP proxy for tests: sees every Kafka request that passes, and can cut connections.

    with KafkaProxy(upstream_port) as proxy:
        client connects to proxy.port
        proxy.requests        # [(api_key, api_version), ...] in arrival order
        proxy.cut_all()       # close every proxied connection at once

Threads, not asyncio, so it works beside any client library in the test process.
"""
from __future__ import annotations

import socket
import struct
import threading


class KafkaProxy:
    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1", *, port: int = 0):
        self.upstream = (upstream_host, upstream_port)
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", port))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.requests: list[tuple[int, int]] = []
        # While set, responses are swallowed: the broker has done the work, the client never
        # hears of it (what a connection lost at the wrong moment looks like to a client).
        self.drop_responses = False
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=10)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, server]
            threading.Thread(target=self._pump_requests, args=(client, server), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    @staticmethod
    def _shut(*socks: socket.socket) -> None:
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _pump(self, src: socket.socket, dst: socket.socket, responses: bool = False) -> None:
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                if responses and self.drop_responses:
                    continue
                dst.sendall(data)
        except OSError:
            pass
        finally:
            self._shut(src, dst)

    def _pump_requests(self, src: socket.socket, dst: socket.socket) -> None:
        """Like _pump, and notes the (api key, version) of each request frame."""
        pending = b""
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                pending += data
                while len(pending) >= 8:
                    (size,) = struct.unpack_from(">i", pending)
                    key, version = struct.unpack_from(">hh", pending, 4)
                    if len(pending) < 4 + size:
                        break
                    with self._lock:
                        self.requests.append((key, version))
                    pending = pending[4 + size:]
                dst.sendall(data)
        except OSError:
            pass
        finally:
            self._shut(src, dst)

    def versions(self) -> dict[int, set[int]]:
        with self._lock:
            out: dict[int, set[int]] = {}
            for key, version in self.requests:
                out.setdefault(key, set()).add(version)
            return out

    def cut_all(self) -> None:
        with self._lock:
            self._shut(*self._sockets)
            self._sockets.clear()

    def close(self) -> None:
        self._closed = True
        self.listener.close()
        self.cut_all()

    def __enter__(self) -> "KafkaProxy":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
