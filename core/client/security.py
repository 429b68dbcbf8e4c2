"""How a client proves itself and protects its traffic: TLS and SASL, from Kafka client
properties (a client.properties file, or the mirror's link config)."""
from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Mapping

from .sasl import SaslCredentials, SaslSettingsError
from .tls import TlsError, context_from_client_properties


@dataclass(frozen=True)
class ClientSecurity:
    ssl_context: ssl.SSLContext | None = None
    sasl: SaslCredentials | None = None


PLAINTEXT = ClientSecurity()


def security_from_properties(props: Mapping[str, str], where: str = "") -> ClientSecurity:
    """`security.protocol` with its ssl.* and sasl.* keys; TlsError or SaslSettingsError (one
    line naming the key) when they cannot work."""
    context = context_from_client_properties(props, where)
    protocol = (props.get("security.protocol") or "PLAINTEXT").strip().upper()
    sasl = SaslCredentials.from_properties(props, where) if protocol.startswith("SASL_") else None
    return ClientSecurity(context, sasl)


__all__ = ["ClientSecurity", "PLAINTEXT", "SaslSettingsError", "TlsError", "security_from_properties"]


def checked_properties(props: Mapping[str, str]) -> Mapping[str, str]:
    """`props` if their security settings can work, else ValueError with the one line: for
    configuration models (the mirror's links, the DR controller's clusters) to validate with."""
    try:
        security_from_properties(props)
    except (TlsError, SaslSettingsError) as exc:
        raise ValueError(str(exc)) from None
    return props
