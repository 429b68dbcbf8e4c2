"""The README's list of APIs is what a broker's ApiVersions answers: every API a client
listener serves is named with its version range, and nothing else is claimed. A newcomer
reads versions in the README, never in the schema."""
from __future__ import annotations

import re
from pathlib import Path

from core.broker.handlers import HANDLERS
from core.broker.handlers.api_versions import api_versions_response
from core.protocol import messages as m
from core.protocol.errors import ErrorCode

README = Path(__file__).resolve().parents[2] / "README.md"
OTHER_LISTENERS = {"AlterPartition"}     # named as served on controller listeners only


def camel(key: m.ApiKey) -> str:
    return "".join(part.capitalize() for part in key.name.split("_"))


def readme_apis() -> dict[str, str]:
    text = README.read_text()
    bullet = text[text.index("- **Wire protocol.**"):]
    bullet = bullet[:bullet.index("\n- **")]
    return dict(re.findall(r"\b([A-Z][A-Za-z]+) (\d+(?:-\d+)?)\b", bullet))


def test_the_readme_names_every_api_with_the_versions_apiversions_answers():
    answered = api_versions_response(ErrorCode.NONE, HANDLERS).api_keys
    served = {camel(m.ApiKey(k.api_key)): (f"{k.min_version}" if k.min_version == k.max_version
                                          else f"{k.min_version}-{k.max_version}") for k in answered}
    named = readme_apis()
    assert {k: v for k, v in named.items() if k not in OTHER_LISTENERS} == served
