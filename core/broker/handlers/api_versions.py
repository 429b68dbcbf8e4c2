"""ApiVersions (key 18), v0-4.

The first request on most connections. We list every API with a handler and the version
range our schema declares. A request in a version we do not know gets UNSUPPORTED_VERSION
in a v0 response with the list (KIP-511), handled in connection.py.
"""
from __future__ import annotations

from core.protocol import messages as m
from core.protocol.errors import ErrorCode

R = m.ApiVersionsResponse


def api_versions_response(error: ErrorCode, handlers: dict) -> R:
    """Our ranges for the APIs of one listener's table. A table may narrow an API's range
    with a `VERSIONS` attribute on its handler (the controller serves Fetch only for KRaft)."""
    keys = []
    for k, api in sorted(m.API.items()):
        if k in handlers:
            versions = getattr(handlers[k], "VERSIONS", None)
            low, high = (versions[0], versions[-1]) if versions else (api.min_version, api.max_version)
            keys.append(R.ApiVersion(api_key=k, min_version=low, max_version=high))
    return R(error_code=error, api_keys=keys, throttle_time_ms=0)


async def handle(ctx, req):
    return api_versions_response(ErrorCode.NONE, ctx.handlers)


HANDLES = {m.ApiKey.API_VERSIONS: handle}
