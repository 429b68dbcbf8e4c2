"""What a request handler knows about the request in front of it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from core.config.broker import Listener
from core.security.authorizer import ANONYMOUS, Authorizer, Operation, ResourceType

if TYPE_CHECKING:
    from .broker import Broker


@dataclass
class RequestContext:
    broker: "Broker"
    authorizer: Authorizer
    listener: Listener
    peer: str
    api_key: int = -1
    api_version: int = -1
    correlation_id: int = 0
    client_id: str | None = None
    principal: str = ANONYMOUS
    controller: object = None   # the controller role, on controller listeners
    handlers: dict | None = None   # the request table of the listener it came on (ApiVersions answers from it)
    close_after_response: bool = field(default=False)  # acks=0 errors: Kafka closes the socket

    @property
    def host(self) -> str:
        """The client's address without its port, as ACL host rules name it."""
        return self.peer.rsplit(":", 1)[0].strip("[]")

    def authorize(self, operation: Operation, resource_type: ResourceType, name: str, *,
                  log_denied: bool = True) -> bool:
        """`log_denied=False` for a check that filters what a response shows rather than refusing
        the request (Kafka's logIfDenied): the audit log records its denials not at all."""
        return self.authorizer.authorize(self.principal, operation, resource_type, name, self.host)
