"""AclAdmin: ACL bindings through CreateAcls, DescribeAcls and DeleteAcls (KIP-140, KIP-290), as
Kafka's Admin.createAcls, describeAcls and deleteAcls do.

The model is Kafka's client one (org.apache.kafka.common.acl): an `AclBinding` ties a resource
pattern (type, name, LITERAL or PREFIXED) to an entry (principal, host, operation, ALLOW or
DENY); an `AclBindingFilter` selects bindings, with ANY (or None for a name, principal or host)
matching everything and the pattern types ANY and MATCH as Kafka defines them. The codes are
the wire's. A request goes to any broker: DescribeAcls answers from its metadata image, and
CreateAcls and DeleteAcls are forwarded to the controller. Creating and deleting need ALTER on
the cluster, describing DESCRIBE (else CLUSTER_AUTHORIZATION_FAILED).
"""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Iterable

from core.protocol import messages as m
from core.protocol.errors import ErrorCode, KafkaError

from .admin_core import AdminCore

DESCRIBE_ACLS = 29
CREATE_ACLS = 30
DELETE_ACLS = 31
CLUSTER_NAME = "kafka-cluster"   # the one name a CLUSTER resource has
WILDCARD = "*"                   # a literal name that matches every resource of its type


_USER_PRINCIPAL = re.compile(r"^User:[^\s;]+$")


def checked_user_principals(values: list[str]) -> list[str]:
    """`values` if each is a user principal (User:ops), else ValueError naming the first that
    is not: for settings that list who may do something."""
    for value in values:
        if not _USER_PRINCIPAL.match(value):
            raise ValueError(f"{value!r} is not a principal such as User:ops")
    return values


def _pascal(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def _lookup(cls, text: str):
    """The member named `text`, case-insensitively, with or without '_' or '-' (as Kafka's
    SecurityUtils reads "ClusterAction" and "CLUSTER_ACTION"); None if there is none."""
    key = text.strip().upper().replace("-", "").replace("_", "")
    for member in cls:
        if member.name.replace("_", "") == key:
            return member
    return None


class ResourceType(enum.IntEnum):
    ANY = 1            # filters only
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5

    @classmethod
    def parse(cls, text: str) -> "ResourceType":
        found = _lookup(cls, text)
        if found is None:
            raise ValueError(f"unknown resource type {text!r}")
        return found


class AclOperation(enum.IntEnum):
    ANY = 1            # filters only
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12

    @property
    def kafka_name(self) -> str:
        """The name Kafka's tools take and print: "ClusterAction"."""
        return _pascal(self.name)

    @classmethod
    def parse(cls, text: str) -> "AclOperation":
        found = _lookup(cls, text)
        if found is None:
            raise ValueError(f"unknown operation {text!r}")
        return found


class PatternType(enum.IntEnum):
    ANY = 1            # filters only: any pattern type, the name exactly
    MATCH = 2          # filters only: every binding that applies to a resource of that name
    LITERAL = 3
    PREFIXED = 4

    @classmethod
    def parse(cls, text: str) -> "PatternType":
        found = _lookup(cls, text)
        if found is None:
            raise ValueError(f"unknown pattern type {text!r}")
        return found


class AclPermission(enum.IntEnum):
    ANY = 1            # filters only
    DENY = 2
    ALLOW = 3


# Kafka's AclEntry.supportedOperations, plus ALL, which every resource type takes.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (AclOperation.ALL, AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE,
                         AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE,
                         AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS),
    ResourceType.GROUP: (AclOperation.ALL, AclOperation.READ, AclOperation.DELETE, AclOperation.DESCRIBE,
                         AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS),
    ResourceType.CLUSTER: (AclOperation.ALL, AclOperation.CREATE, AclOperation.ALTER, AclOperation.DESCRIBE,
                           AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
                           AclOperation.IDEMPOTENT_WRITE),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.ALL, AclOperation.WRITE, AclOperation.DESCRIBE),
}


@dataclass(frozen=True)
class AclBinding:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermission

    def to_filter(self) -> "AclBindingFilter":
        """The filter that selects exactly this binding."""
        return AclBindingFilter(self.resource_type, self.name, self.pattern_type, self.principal, self.host,
                                self.operation, self.permission)

    def as_dict(self) -> dict[str, str]:
        return {"resource_type": self.resource_type.name, "name": self.name, "pattern_type": self.pattern_type.name,
                "principal": self.principal, "host": self.host, "operation": self.operation.name,
                "permission": self.permission.name}


@dataclass(frozen=True)
class AclBindingFilter:
    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermission = AclPermission.ANY


ANY_ACL = AclBindingFilter()


@dataclass(frozen=True)
class AclDeletion:
    """What one DeleteAcls filter did: the bindings it removed, or the error that stopped it."""
    removed: tuple[AclBinding, ...] = ()
    error: KafkaError | None = None


def _binding(resource_type: int, name: str, pattern_type: int, principal: str, host: str, operation: int,
             permission: int) -> AclBinding:
    return AclBinding(ResourceType(resource_type), name, PatternType(pattern_type), principal, host,
                      AclOperation(operation), AclPermission(permission))


def _error(code: int, message: str | None, action: str) -> KafkaError:
    if not message and code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
        needs = "DESCRIBE" if action == "describe" else "ALTER"
        message = f"not authorized to {action} ACLs (it takes {needs} on the cluster)"
    return KafkaError(code, message or f"{action} ACLs")


class AclAdmin(AdminCore):
    async def create_acls(self, bindings: Iterable[AclBinding]) -> list[KafkaError | None]:
        """Per binding, in order: None, or the KafkaError the cluster answered with. A binding
        that exists already is created again without error (nothing changes)."""
        bindings = list(bindings)
        C = m.CreateAclsRequest
        request = C(creations=[C.AclCreation(
            resource_type=int(b.resource_type), resource_name=b.name, resource_pattern_type=int(b.pattern_type),
            principal=b.principal, host=b.host, operation=int(b.operation), permission_type=int(b.permission))
            for b in bindings])

        async def once() -> list[KafkaError | None]:
            conn = await self.client.connection(await self.client.any_node())
            resp = await conn.send(request, api_key=CREATE_ACLS)
            errors = [_error(r.error_code, r.error_message, "create") if r.error_code else None
                      for r in resp.results]
            for error in errors:
                if error is not None and error.retriable:
                    raise error    # the whole request again: creating an existing ACL is a no-op
            if len(errors) != len(bindings):
                raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                 f"CreateAcls answered {len(errors)} results for {len(bindings)} ACLs")
            return errors

        if not bindings:
            return []
        await self.client.start()
        return await self.client.call(once, timeout_ms=self.timeout_ms)

    async def describe_acls(self, acl_filter: AclBindingFilter = ANY_ACL) -> list[AclBinding]:
        """The bindings the filter selects; a KafkaError if the cluster refuses."""
        request = m.DescribeAclsRequest(
            resource_type_filter=int(acl_filter.resource_type), resource_name_filter=acl_filter.name,
            pattern_type_filter=int(acl_filter.pattern_type), principal_filter=acl_filter.principal,
            host_filter=acl_filter.host, operation=int(acl_filter.operation),
            permission_type=int(acl_filter.permission))

        async def once() -> list[AclBinding]:
            conn = await self.client.connection(await self.client.any_node())
            resp = await conn.send(request, api_key=DESCRIBE_ACLS)
            if resp.error_code:
                raise _error(resp.error_code, resp.error_message, "describe")
            return [_binding(r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation,
                             a.permission_type)
                    for r in resp.resources for a in r.acls]

        await self.client.start()
        return await self.client.call(once, timeout_ms=self.timeout_ms)

    async def delete_acls(self, filters: Iterable[AclBindingFilter]) -> list[AclDeletion]:
        """Per filter, in order: the bindings it removed (a binding two filters select is
        removed, and reported, by the first), or the error the cluster answered with."""
        filters = list(filters)
        D = m.DeleteAclsRequest
        request = D(filters=[D.DeleteAclsFilter(
            resource_type_filter=int(f.resource_type), resource_name_filter=f.name,
            pattern_type_filter=int(f.pattern_type), principal_filter=f.principal, host_filter=f.host,
            operation=int(f.operation), permission_type=int(f.permission)) for f in filters])

        async def once() -> list[AclDeletion]:
            conn = await self.client.connection(await self.client.any_node())
            resp = await conn.send(request, api_key=DELETE_ACLS)
            results = resp.filter_results
            if len(results) != len(filters):
                raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                 f"DeleteAcls answered {len(results)} results for {len(filters)} filters")
            codes = {r.error_code for r in results}
            if len(codes) == 1 and (first := results[0]).error_code:
                everywhere = _error(first.error_code, first.error_message, "delete")
                if everywhere.retriable:
                    raise everywhere    # every filter failed alike: nothing was removed, so try again
            out: list[AclDeletion] = []
            for r in results:
                if r.error_code:
                    out.append(AclDeletion(error=_error(r.error_code, r.error_message, "delete")))
                    continue
                removed: list[AclBinding] = []
                error: KafkaError | None = None
                for a in r.matching_acls:
                    if a.error_code:
                        error = error or _error(a.error_code, a.error_message, "delete")
                        continue
                    removed.append(_binding(a.resource_type, a.resource_name, a.pattern_type, a.principal, a.host,
                                            a.operation, a.permission_type))
                out.append(AclDeletion(tuple(removed), error))
            return out

        if not filters:
            return []
        await self.client.start()
        return await self.client.call(once, timeout_ms=self.timeout_ms)


__all__ = ["ANY_ACL", "AclAdmin", "AclBinding", "AclBindingFilter", "AclDeletion", "AclOperation", "AclPermission",
           "CLUSTER_NAME", "PatternType", "ResourceType", "SUPPORTED_OPERATIONS", "WILDCARD"]
