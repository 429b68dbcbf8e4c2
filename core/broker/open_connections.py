"""The open connections of one server, and shutdown's wait for them to go."""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

import anyio

if TYPE_CHECKING:
    from .connection import Connection


class OpenConnections:
    """The open connections of one server (the broker, or the controller on its raft thread),
    touched from that server's event loop only. Shutdown closes the idle ones and awaits
    `drained()`, which returns once the last one has gone."""

    def __init__(self) -> None:
        self._open: set[Connection] = set()
        self._emptied: anyio.Event | None = None   # made by the waiter, on the owner's loop

    def add(self, conn: Connection) -> None:
        self._open.add(conn)

    def discard(self, conn: Connection) -> None:
        self._open.discard(conn)
        if not self._open and self._emptied is not None:
            self._emptied.set()

    def __len__(self) -> int:
        return len(self._open)

    def __iter__(self) -> Iterator[Connection]:
        return iter(list(self._open))     # a snapshot: closing one changes the set

    def close_when_idle(self) -> None:
        for conn in self:
            conn.close_when_idle()

    async def drained(self) -> None:
        while self._open:
            self._emptied = anyio.Event()
            await self._emptied.wait()
