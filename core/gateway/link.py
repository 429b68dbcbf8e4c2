"""What both kinds of a gateway client connection's connection to a broker share."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .proxy import ClientConnection


class BrokerLink:
    """What both kinds of a client connection's connection to a broker share (this module's
    Upstream, and secure.py's SecureUpstream): retiring once the last answer is delivered, and
    failing, which closes the client's connection only if the link was still needed."""
    owner: "ClientConnection"
    cluster: str
    host: str
    port: int
    closed: bool
    retiring: bool

    def busy(self) -> bool:
        """Requests sent or queued and not yet answered."""
        raise NotImplementedError

    def shut(self) -> None:
        """Drop what is queued and close the socket (once)."""
        raise NotImplementedError

    def retire(self) -> None:
        """No new requests: close once the last answer is delivered."""
        self.retiring = True
        if not self.busy():
            self.close()

    def _failed(self, exc: BaseException | None) -> None:
        was_needed = self.busy() or not self.retiring
        self.close()
        if was_needed and not self.owner.closed:
            self.owner.upstream_failed(self, exc)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.shut()
