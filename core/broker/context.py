"""What a request handler knows about the request in front of it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from core.config.broker import Listener
from core.protocol.api_keys import ApiKey
from core.security.audit import AuditEvent, AuditLog, NullAudit, now_ms
from core.security.authorizer import ANONYMOUS, Authorizer, Operation, ResourceType

NULL_AUDIT = NullAudit()
# The audit log records every decision on a change and on ACLs and credentials, and every
# denial except those of checks that only filter an answer (log_denied=False).
AUDITED_OPERATIONS = frozenset({Operation.CREATE, Operation.DELETE, Operation.ALTER, Operation.ALTER_CONFIGS})
AUDITED_APIS = frozenset({ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS, ApiKey.DESCRIBE_ACLS,
                          ApiKey.ALTER_USER_SCRAM_CREDENTIALS, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS})
API_NAMES = {int(k): "".join(w.capitalize() for w in k.name.split("_")) for k in ApiKey}

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
    audit: "AuditLog | NullAudit" = NULL_AUDIT

    @property
    def host(self) -> str:
        """The client's address without its port, as ACL host rules name it."""
        return self.peer.rsplit(":", 1)[0].strip("[]")

    def authorize(self, operation: Operation, resource_type: ResourceType, name: str, *,
                  log_denied: bool = True) -> bool:
        """`log_denied=False` for a check that filters what a response shows rather than refusing
        the request (Kafka's logIfDenied): the audit log records its denials not at all."""
        allowed = self.authorizer.authorize(self.principal, operation, resource_type, name, self.host)
        if self.audit.enabled and (log_denied if not allowed else
                                   operation in AUDITED_OPERATIONS or self.api_key in AUDITED_APIS):
            self.audit.record(AuditEvent(now_ms(), "authorization", self.principal, self.peer, self.listener.name,
                                         API_NAMES.get(self.api_key, str(self.api_key)), resource_type.name, name,
                                         operation.name, "ALLOWED" if allowed else "DENIED"))
        return allowed

    def authorize_by_resource_type(self, operation: Operation, resource_type: ResourceType) -> bool:
        """May the principal do `operation` on some resource of this type (KIP-679)?"""
        allowed = self.authorizer.authorize_by_resource_type(self.principal, operation, resource_type, self.host)
        if not allowed and self.audit.enabled:
            self.audit.record(AuditEvent(now_ms(), "authorization", self.principal, self.peer, self.listener.name,
                                         API_NAMES.get(self.api_key, str(self.api_key)), resource_type.name, "*",
                                         operation.name, "DENIED", "no resource of this type allows it"))
        return allowed
