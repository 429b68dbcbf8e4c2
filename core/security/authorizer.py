"""The authorizer every request handler asks before it acts.

Until ACLs land, `AllowAll` answers yes to everything; handlers already ask, so that turning
on a real authorizer changes no handler.
"""
from __future__ import annotations

import enum
from typing import Protocol


class Operation(enum.IntEnum):
    # AclOperation codes from the Kafka protocol.
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


class ResourceType(enum.IntEnum):
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5


ANONYMOUS = "User:ANONYMOUS"
CLUSTER_NAME = "kafka-cluster"   # the one CLUSTER resource ACLs and checks name


class Authorizer(Protocol):
    """What a listener asks before it serves a request: AllowAll without
    `authorizer.class.name`, else the ACL authorizer (core/security/standard_authorizer.py)."""

    def authorize(self, principal: str, operation: Operation, resource_type: ResourceType,
                  name: str, host: str = "*") -> bool: ...

    def authorize_by_resource_type(self, principal: str, operation: Operation, resource_type: ResourceType,
                                   host: str = "*") -> bool:
        """May the principal do `operation` on some resource of this type? (KIP-679)"""
        ...

    def authorized_operations(self, principal: str, resource_type: ResourceType, name: str,
                              host: str = "*") -> int: ...


# The operations Metadata and DescribeCluster report as authorized, per resource type (KIP-430).
REPORTED_OPERATIONS = {
    ResourceType.TOPIC: (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DELETE, Operation.ALTER,
                         Operation.DESCRIBE, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS),
    ResourceType.GROUP: (Operation.READ, Operation.DELETE, Operation.DESCRIBE),
    ResourceType.CLUSTER: (Operation.CREATE, Operation.ALTER, Operation.DESCRIBE, Operation.CLUSTER_ACTION,
                           Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE),
}


class AllowAll:
    def authorize(self, principal: str, operation: Operation, resource_type: ResourceType, name: str,
                  host: str = "*") -> bool:
        return True

    def authorize_by_resource_type(self, principal: str, operation: Operation, resource_type: ResourceType,
                                   host: str = "*") -> bool:
        return True

    def authorized_operations(self, principal: str, resource_type: ResourceType, name: str,
                              host: str = "*") -> int:
        """The bit field Metadata, DescribeCluster and DescribeGroups report (KIP-430)."""
        return operation_bits(REPORTED_OPERATIONS.get(resource_type, ()))


def operation_bits(operations) -> int:
    bits = 0
    for op in operations:
        bits |= 1 << op
    return bits
