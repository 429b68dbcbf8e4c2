"""DescribeUserScramCredentials (key 50, v0): each user's SCRAM mechanisms and iteration counts
(never salts or keys), from this broker's metadata image (KIP-554).

Null or empty Users lists every user with a credential. A named user without one gets
RESOURCE_NOT_FOUND; a user named twice gets DUPLICATE_RESOURCE (once, as Kafka answers).
Needs DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED for the whole request.
"""
from __future__ import annotations

from core.controller.image import MetadataImage
from core.protocol import messages as m
from core.protocol.api_keys import ApiKey
from core.protocol.errors import ErrorCode
from core.security.authorizer import CLUSTER_NAME, Operation, ResourceType

R = m.DescribeUserScramCredentialsResponse


def _credentials(image: MetadataImage) -> dict[str, list]:
    found: dict[str, list] = {}
    for (user, mechanism), entry in sorted(image.scram.items()):
        found.setdefault(user, []).append(R.CredentialInfo(
            mechanism=mechanism, iterations=entry.iterations))
    return found


async def handle(ctx, req):
    if not ctx.authorize(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return R(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                 error_message=None, results=[])
    credentials = _credentials(ctx.broker.kraft.quorum.loader.image)
    Result = R.DescribeUserScramCredentialsResult
    if not req.users:   # null or empty: every user (Kafka treats both alike)
        results = [Result(user=user, error_code=0, error_message=None, credential_infos=infos)
                   for user, infos in credentials.items()]
        return R(throttle_time_ms=0, error_code=0, error_message=None, results=results)
    names = [u.name for u in req.users]
    results = []
    for name in dict.fromkeys(names):
        if names.count(name) > 1:
            results.append(Result(user=name, error_code=ErrorCode.DUPLICATE_RESOURCE,
                                  error_message="Cannot describe SCRAM credentials for the same user twice "
                                                "in a single request", credential_infos=[]))
        elif name not in credentials:
            results.append(Result(user=name, error_code=ErrorCode.RESOURCE_NOT_FOUND,
                                  error_message="Attempt to describe a user credential that does not exist",
                                  credential_infos=[]))
        else:
            results.append(Result(user=name, error_code=0, error_message=None, credential_infos=credentials[name]))
    return R(throttle_time_ms=0, error_code=0, error_message=None, results=results)


HANDLES = {ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: handle}
