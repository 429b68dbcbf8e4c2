"""Telling a mistyped setting from one Seaway merely does not use.

A node's settings come from a properties file, `--override` flags and, on a platform, the
topology's `config:` maps. Kafka logs unknown keys and goes on ("supplied but not used"), which
turns a typo into a setting silently left at its default. Seaway keeps Kafka's tolerance only
for names Kafka has: a server.properties written for Kafka still loads, its unused keys
reported (core/config/broker.py). A name neither Seaway nor Kafka knows is an error, with the
nearest name that is known, because that is almost always a typo:

    log.retension.ms: not a broker setting of Seaway or Kafka (did you mean log.retention.ms?)

Per-listener settings (`listener.name.<listener>.<setting>`) are judged by their setting.
"""
from __future__ import annotations

import difflib
import re
from functools import lru_cache

from .kafka_names import KAFKA_BROKER_CONFIG_NAMES, KAFKA_BROKER_CONFIG_PREFIXES

_LISTENER_PREFIX_RE = re.compile(r"^listener\.name\.[^.]+\.(.+)$")


@lru_cache(maxsize=1)
def known_broker_settings() -> frozenset[str]:
    from .broker import _ACCEPTED_UNUSED, BROKER_CONFIGS
    from .sasl import SASL_CONFIGS
    from .tls import SSL_CONFIGS
    return frozenset(BROKER_CONFIGS) | frozenset(SSL_CONFIGS) | frozenset(SASL_CONFIGS) \
        | frozenset(_ACCEPTED_UNUSED) | KAFKA_BROKER_CONFIG_NAMES


def nearest(name: str, candidates) -> str | None:
    """The closest of `candidates` to a mistyped `name`, if one is close enough to suggest."""
    found = difflib.get_close_matches(name, sorted(candidates), n=1, cutoff=0.8)
    return found[0] if found else None


def unknown_broker_setting(key: str) -> str | None:
    """None when `key` is a broker setting of Seaway or Kafka (used or not); otherwise the
    reason, in one line, with a suggestion when one is close."""
    known = known_broker_settings()
    listener = _LISTENER_PREFIX_RE.match(key)
    name = listener.group(1) if listener else key
    if name in known or name.startswith(KAFKA_BROKER_CONFIG_PREFIXES) or (listener and _is_mechanism_setting(name)):
        return None
    suggestion = nearest(name, known)
    hint = f" (did you mean {key[:len(key) - len(name)]}{suggestion}?)" if suggestion else ""
    return f"{key}: not a broker setting of Seaway or Kafka{hint}"


def _is_mechanism_setting(name: str) -> bool:
    """`<mechanism>.sasl.jaas.config` and `<mechanism>.connections.max.reauth.ms` (KIP-368)."""
    from .broker import _MECHANISM_JAAS_RE, _MECHANISM_REAUTH_RE
    return bool(_MECHANISM_JAAS_RE.match(name) or _MECHANISM_REAUTH_RE.match(name))
