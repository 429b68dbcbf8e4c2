"""SaslHandshake (key 17, v0-1) and SaslAuthenticate (key 36, v0-2) outside authentication.

On a SASL listener the connection's SaslSession (core/security/sasl.py) answers these while
the client authenticates, and a SaslHandshake on an authenticated connection starts a
re-authentication (KIP-368) there too. Only what reaches the handler table comes here: either
request on a listener without SASL, or a SaslAuthenticate with no handshake before it on an
authenticated connection. Kafka's KafkaApis answers both with ILLEGAL_SASL_STATE, and so do we.
"""
from __future__ import annotations

from core.protocol import messages as m
from core.protocol.api_keys import ApiKey
from core.protocol.errors import ErrorCode


async def handle_handshake(ctx, req):
    return m.SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])


async def handle_authenticate(ctx, req):
    why = ("already authenticated" if ctx.listener.security_protocol.startswith("SASL_")
           else f"listener {ctx.listener.name} is {ctx.listener.security_protocol}, without SASL")
    return m.SaslAuthenticateResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE,
                                      error_message=f"SaslAuthenticate is not expected: {why}",
                                      auth_bytes=b"")


HANDLES = {ApiKey.SASL_HANDSHAKE: handle_handshake, ApiKey.SASL_AUTHENTICATE: handle_authenticate}
