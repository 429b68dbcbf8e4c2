"""ACLs: CreateAcls and DeleteAcls (KIP-140, KIP-290), Kafka's AclControlManager.

CreateAcls answers one result per creation. A creation is checked as Kafka's validateNewAcl
does, and an invalid one gets INVALID_REQUEST with the reason:

* the resource type is TOPIC, GROUP, CLUSTER or TRANSACTIONAL_ID (not ANY or UNKNOWN);
* the pattern type is LITERAL or PREFIXED;
* the operation and the permission are concrete (not ANY or UNKNOWN);
* the resource name is not empty, and a CLUSTER resource is named "kafka-cluster";
* the principal reads as TYPE:NAME.

A valid creation that repeats an ACL that already exists (or one made earlier in the same
request) succeeds without a record, as in Kafka. Every new ACL gets a fresh random id in its
AccessControlEntryRecord.

DeleteAcls answers one result per filter with the ACLs it removed (an ACL two filters match is
removed, and reported, by the first). A filter with an UNKNOWN field gets INVALID_REQUEST.
"""
from __future__ import annotations

import uuid

from core.protocol import messages as m
from core.protocol.codegen import Message
from core.protocol.errors import ErrorCode
from core.security.acls import AclBinding, AclFilter, PatternType, Permission
from core.security.authorizer import CLUSTER_NAME, Operation, ResourceType

from .common import Working
from .image import AclEntry, MetadataImage

# Kafka's answer to an ACL request where no authorizer is configured (SECURITY_DISABLED).
NO_AUTHORIZER = "No Authorizer is configured."

_RESOURCE_TYPES = {int(t) for t in ResourceType}
_OPERATIONS = {int(o) for o in Operation}
C = m.CreateAclsResponse
D = m.DeleteAclsResponse


def binding_of(entry: AclEntry) -> AclBinding:
    return AclBinding(ResourceType(entry.resource_type), entry.resource_name, PatternType(entry.pattern_type),
                      entry.principal, entry.host, Operation(entry.operation), Permission(entry.permission))


def _invalid(creation: m.CreateAclsRequest.AclCreation) -> str | None:
    if creation.resource_type not in _RESOURCE_TYPES:
        return f"Invalid resourceType {creation.resource_type}"
    if creation.resource_pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {creation.resource_pattern_type}"
    if creation.operation not in _OPERATIONS:
        return f"Invalid operation {creation.operation}"
    if creation.permission_type not in (Permission.ALLOW, Permission.DENY):
        return f"Invalid permissionType {creation.permission_type}"
    if not creation.resource_name:
        return "Resource name should not be empty"
    if creation.resource_type == ResourceType.CLUSTER and creation.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    kind, sep, name = (creation.principal or "").partition(":")
    if not sep or not kind or not name:
        return f"Could not parse principal from `{creation.principal}` (no colon is present separating " \
               f"the principal type from the principal name)"
    if creation.host is None or creation.host == "":
        return "Invalid host"
    return None


def _entry(c: m.CreateAclsRequest.AclCreation) -> AclEntry:
    return AclEntry(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal, c.host,
                    c.operation, c.permission_type)


def create_acls(w: Working, request: m.CreateAclsRequest) -> C:
    existing = set(w.image.acls.values())
    records: list[Message] = []
    results = []
    for creation in request.creations:
        reason = _invalid(creation)
        if reason is not None:
            results.append(C.AclCreationResult(error_code=ErrorCode.INVALID_REQUEST, error_message=reason))
            continue
        entry = _entry(creation)
        if entry not in existing:
            existing.add(entry)
            records.append(m.AccessControlEntryRecord(
                id=uuid.uuid4().bytes, resource_type=entry.resource_type, resource_name=entry.resource_name,
                pattern_type=entry.pattern_type, principal=entry.principal, host=entry.host,
                operation=entry.operation, permission_type=entry.permission))
        results.append(C.AclCreationResult(error_code=ErrorCode.NONE, error_message=None))
    w.add(records)
    return C(throttle_time_ms=0, results=results)


def filter_of(f: m.DescribeAclsRequest | m.DeleteAclsRequest.DeleteAclsFilter) -> AclFilter | None:
    """The filter of a DescribeAcls request or a DeleteAcls entry; None if a field is UNKNOWN."""
    if f.resource_type_filter == 0 or f.pattern_type_filter == 0 or f.operation == 0 or f.permission_type == 0:
        return None
    return AclFilter(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter,
                     f.principal_filter, f.host_filter, f.operation, f.permission_type)


def matching(image: MetadataImage, acl_filter: AclFilter) -> list[tuple[bytes, AclEntry]]:
    found = []
    for acl_id, entry in image.acls.items():
        try:
            binding = binding_of(entry)
        except ValueError:
            continue   # a code this version does not know never matches a filter
        if acl_filter.matches(binding):
            found.append((acl_id, entry))
    return found


def delete_acls(w: Working, request: m.DeleteAclsRequest) -> D:
    removed: set[bytes] = set()
    records: list[Message] = []
    results = []
    image = w.image
    for f in request.filters:
        acl_filter = filter_of(f)
        if acl_filter is None:
            results.append(D.DeleteAclsFilterResult(error_code=ErrorCode.INVALID_REQUEST,
                                                    error_message="The filter has an UNKNOWN field",
                                                    matching_acls=[]))
            continue
        matched = []
        for acl_id, e in sorted(matching(image, acl_filter), key=lambda item: item[0]):
            if acl_id in removed:
                continue
            removed.add(acl_id)
            records.append(m.RemoveAccessControlEntryRecord(id=acl_id))
            matched.append(D.DeleteAclsMatchingAcl(
                error_code=0, error_message=None, resource_type=e.resource_type, resource_name=e.resource_name,
                pattern_type=e.pattern_type, principal=e.principal, host=e.host, operation=e.operation,
                permission_type=e.permission))
        results.append(D.DeleteAclsFilterResult(error_code=0, error_message=None, matching_acls=matched))
    w.add(records)
    return D(throttle_time_ms=0, filter_results=results)


def error_response(api_key: int, request: m.CreateAclsRequest | m.DeleteAclsRequest, code: ErrorCode,
                   message: str | None) -> Message:
    if isinstance(request, m.CreateAclsRequest):
        return C(throttle_time_ms=0, results=[C.AclCreationResult(error_code=code, error_message=message)
                                               for _ in request.creations])
    return D(throttle_time_ms=0, filter_results=[D.DeleteAclsFilterResult(error_code=code, error_message=message,
                                                                          matching_acls=[])
                                                 for _ in request.filters])
