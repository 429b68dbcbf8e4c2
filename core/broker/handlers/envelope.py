"""Envelope v0 (KIP-590): a request forwarded for a client by a trusted proxy.

Kafka takes Envelope only on the controller, from brokers forwarding admin requests. Seaway's
brokers also take it on client listeners, from the gateway (core/gateway), so that a request
the gateway forwards is authorized as the client who sent it and never as the gateway:

- the sender must be allowed ClusterAction on the cluster, else CLUSTER_AUTHORIZATION_FAILED
  (as Kafka's controller answers a broker without it);
- the principal must parse (DefaultPrincipalData, with its 2-byte version), else
  PRINCIPAL_DESERIALIZATION_FAILURE; the client's address is 4 or 16 bytes;
- the inner request is any API the listener serves but Envelope itself, SaslHandshake and
  SaslAuthenticate (authentication belongs to the connection that carries the envelope);
  anything else, or a request that does not parse, is INVALID_REQUEST in the envelope's
  answer, and the carrying connection stays open;
- the inner request is handled exactly as if the client had sent it on this listener,
  principal and host included (ACLs, quotas of one, the audit log), and its answer, size
  prefix removed, is the envelope's response data; an acks=0 Produce has none.

The connection does the work (Connection._envelope): this module only claims the API key,
so that ApiVersions lists Envelope v0 on the listeners that take it.
"""
from __future__ import annotations

from core.protocol.api_keys import ApiKey


async def handle(ctx, req):
    raise AssertionError("Envelope is unwrapped by the connection before dispatch")


HANDLES = {ApiKey.ENVELOPE: handle}
