"""DescribeAcls (key 29, v0-3): the ACL bindings one filter selects (core/security/acls.py's
AclFilter), from this broker's metadata image, grouped by resource pattern as Kafka groups
them. Needs DESCRIBE on the cluster; a broker without an authorizer (no authorizer.class.name)
answers SECURITY_DISABLED, as Kafka does; a filter with an UNKNOWN field is INVALID_REQUEST.
v0 knows only literal patterns: its filter is taken as LITERAL, as Kafka does."""
from __future__ import annotations

from core.controller.acls import NO_AUTHORIZER, filter_of, matching
from core.protocol import messages as m
from core.protocol.api_keys import ApiKey
from core.protocol.errors import ErrorCode
from core.security.authorizer import CLUSTER_NAME, Operation, ResourceType

R = m.DescribeAclsResponse


async def handle(ctx, req):
    if not ctx.authorize(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return R(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                 error_message=None, resources=[])
    if not ctx.broker.config["authorizer.class.name"]:
        return R(throttle_time_ms=0, error_code=ErrorCode.SECURITY_DISABLED, error_message=NO_AUTHORIZER, resources=[])
    acl_filter = filter_of(req)
    if acl_filter is None:
        return R(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST,
                 error_message="The filter has an UNKNOWN field", resources=[])
    grouped: dict[tuple[int, str, int], list] = {}
    for _, e in matching(ctx.broker.kraft.quorum.loader.image, acl_filter):
        if ctx.api_version == 0 and e.pattern_type != 3:
            continue   # v0 cannot say "prefixed": such ACLs are not shown to it
        grouped.setdefault((e.resource_type, e.resource_name, e.pattern_type), []).append(
            R.AclDescription(principal=e.principal, host=e.host, operation=e.operation,
                             permission_type=e.permission))
    resources = [R.DescribeAclsResource(resource_type=t, resource_name=n, pattern_type=p, acls=acls)
                 for (t, n, p), acls in sorted(grouped.items())]
    return R(throttle_time_ms=0, error_code=0, error_message=None, resources=resources)


HANDLES = {ApiKey.DESCRIBE_ACLS: handle}
