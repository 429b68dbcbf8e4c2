"""What `regions` checks in a topology's broker settings before anything starts: a key that
is neither Seaway's nor Kafka's (with the nearest known one), and a value the node would
refuse. Kept apart from regions/topology.py so that readers of a topology's shape (dr/) do
not depend on the node's settings."""
from __future__ import annotations

from typing import Any

from core.config.broker import BROKER_CONFIGS
from core.config.defs import ConfigError
from core.config.unknown import unknown_broker_setting


def broker_setting_problem(key: str, value: Any) -> str | None:
    if reason := unknown_broker_setting(key):
        return reason.removeprefix(f"{key}: ")
    definition = BROKER_CONFIGS.get(key)
    if definition is None:
        return None
    try:
        # As the launcher writes it into the node's properties (regions/layout.py).
        definition.parse(str(value).lower() if isinstance(value, bool) else str(value))
    except ConfigError as exc:
        return str(exc).split(": ", 1)[-1]
    return None
