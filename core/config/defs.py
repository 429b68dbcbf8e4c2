"""One configuration setting: its type, default, validation and documentation."""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Callable, overload

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1


class ConfigError(ValueError):
    """A bad setting. The message names the key, so the CLI can print it as one line."""


class ConfigType(enum.IntEnum):
    # The numbering is DescribeConfigs' ConfigType (KIP-569).
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


@dataclass(frozen=True)
class ConfigDef:
    name: str
    type: ConfigType
    default: Any
    doc: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] | None = None
    validator: Callable[[Any], None] | None = None
    synonym: str | None = None     # the broker setting a topic setting defaults from
    read_only: bool = False
    sensitive: bool = False

    def parse(self, raw: Any) -> Any:
        """Turn a property string (or an already-typed value) into a checked value."""
        try:
            value = self._convert(raw)
        except (TypeError, ValueError):
            raise ConfigError(f"{self.name}: {raw!r} is not a valid {self.type.name.lower()}") from None
        self._check(value)
        return value

    def _convert(self, raw: Any) -> Any:
        if raw is None:
            return None
        t = self.type
        if t in (ConfigType.INT, ConfigType.LONG, ConfigType.SHORT):
            if isinstance(raw, bool):
                raise ValueError
            value = int(str(raw).strip())
            limit = {ConfigType.INT: INT_MAX, ConfigType.LONG: LONG_MAX, ConfigType.SHORT: 2**15 - 1}[t]
            if not -limit - 1 <= value <= limit:
                raise ValueError
            return value
        if t == ConfigType.DOUBLE:
            return float(str(raw).strip())
        if t == ConfigType.BOOLEAN:
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text not in ("true", "false"):
                raise ValueError
            return text == "true"
        if t == ConfigType.LIST:
            if isinstance(raw, (list, tuple)):
                return [str(x).strip() for x in raw]
            return [x.strip() for x in str(raw).split(",") if x.strip()]
        return str(raw).strip()

    def _check(self, value: Any) -> None:
        if value is None:
            return
        if self.minimum is not None and value < self.minimum:
            raise ConfigError(f"{self.name}: {value} is below the minimum {self.minimum:g}")
        if self.maximum is not None and value > self.maximum:
            raise ConfigError(f"{self.name}: {value} is above the maximum {self.maximum:g}")
        if self.choices is not None:
            items = value if isinstance(value, list) else [value]
            for item in items:
                if item not in self.choices:
                    raise ConfigError(f"{self.name}: {item!r} is not one of {', '.join(self.choices)}")
        if self.validator is not None:
            self.validator(value)

    @overload
    def render(self, value: None) -> None: ...
    @overload
    def render(self, value: bool | int | float | str | list[str] | tuple[str, ...]) -> str: ...
    def render(self, value: Any) -> str | None:
        """The string DescribeConfigs shows (None for a null value)."""
        if value is None:
            return None
        if self.type == ConfigType.BOOLEAN:
            return "true" if value else "false"
        if self.type == ConfigType.LIST:
            return ",".join(value)
        return str(value)
