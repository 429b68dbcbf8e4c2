"""The ACL authorizer a node runs with `authorizer.class.name` set: Kafka's StandardAuthorizer,
its decisions from core/security/acls.py over the ACLs of the metadata image this node has
loaded, with `super.users` and `allow.everyone.if.no.acl.found`.

The ACLs are indexed once per change: the image is immutable, and its `acls` mapping is the
same object until an ACL record changes it, so an identity check says when to rebuild.
Reading the image from the raft thread's loop (controller listeners) is safe for the same
reason.
"""
from __future__ import annotations

from typing import Callable, Mapping

from .acls import AclSet
from .authorizer import REPORTED_OPERATIONS, Operation, ResourceType, operation_bits

# What Kafka's authorizer.class.name may name for ACLs in KRaft (and its short form).
STANDARD_AUTHORIZER = ("org.apache.kafka.metadata.authorizer.StandardAuthorizer", "StandardAuthorizer")


def parse_super_users(text: str | None) -> frozenset[str]:
    """super.users: principals separated by semicolons (User:admin;User:broker)."""
    return frozenset(p.strip() for p in (text or "").split(";") if p.strip())


class StandardAuthorizer:
    def __init__(self, acls_of_image: Callable[[], Mapping], *, super_users: frozenset[str],
                 allow_if_no_acl: bool, binding_of: Callable):
        self._acls_of_image = acls_of_image
        self._binding_of = binding_of
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        self._indexed_from: Mapping | None = None
        self._set = AclSet.of((), super_users=super_users, allow_if_no_acl=allow_if_no_acl)

    def acl_set(self) -> AclSet:
        acls = self._acls_of_image()
        if acls is not self._indexed_from:
            bindings = []
            for entry in acls.values():
                try:
                    bindings.append(self._binding_of(entry))
                except ValueError:
                    continue   # a code this version does not know cannot grant or deny anything
            self._set = AclSet.of(bindings, super_users=self.super_users, allow_if_no_acl=self.allow_if_no_acl)
            self._indexed_from = acls
        return self._set

    def authorize(self, principal: str, operation: Operation, resource_type: ResourceType, name: str,
                  host: str = "*") -> bool:
        return self.acl_set().authorize(principal, host, operation, resource_type, name)

    def authorize_by_resource_type(self, principal: str, operation: Operation, resource_type: ResourceType,
                                   host: str = "*") -> bool:
        return self.acl_set().authorize_by_resource_type(principal, host, operation, resource_type)

    def authorized_operations(self, principal: str, resource_type: ResourceType, name: str,
                              host: str = "*") -> int:
        acls = self.acl_set()
        return operation_bits(op for op in REPORTED_OPERATIONS.get(resource_type, ())
                              if acls.authorize(principal, host, op, resource_type, name))
