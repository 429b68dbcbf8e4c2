"""Java .properties files, the format of Kafka's client (`--command-config`) and server
configuration files. Parsing is pure; `read_properties` adds the file and its one-line error."""
from __future__ import annotations

import re
from pathlib import Path

_ENTRY = re.compile(r"^((?:[^=:\s\\]|\\.)+)\s*[=:\s]\s*(.*)$")


class PropertiesFileError(ValueError):
    """A properties file that cannot be read; the message names the file."""


def parse_properties(text: str) -> dict[str, str]:
    """Java .properties: `k=v`, `k: v` or `k v`; `#`/`!` comments; `\\` continues a line."""
    props: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip() if pending else raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        m = _ENTRY.match(line)
        if m:
            props[m.group(1)] = m.group(2)
        else:
            props[line] = ""
    if pending:
        props[pending] = ""
    return props


def read_properties(path: str | Path) -> dict[str, str]:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise PropertiesFileError(f"cannot read {path}: {exc.strerror}") from None
    return parse_properties(text)
