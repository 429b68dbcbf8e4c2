"""The README's `mirror run --config links.yaml` example is a valid configuration, and every
setting it names shows its real default: a newcomer copies it without reading mirror/link.py."""
from __future__ import annotations

import re
from pathlib import Path

import yaml

from mirror.cli import load_links
from mirror.link import LinkConfig

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_links_yaml() -> str:
    text = README.read_text()
    section = text[text.index("`mirror run --config links.yaml`"):]
    return re.search(r"```yaml\n(.*?)```", section, re.S).group(1)


def test_the_readme_links_example_loads_and_shows_the_defaults(tmp_path):
    path = tmp_path / "links.yaml"
    path.write_text(readme_links_yaml())
    [link] = load_links(path)
    example = yaml.safe_load(readme_links_yaml())["links"][0]
    defaults = LinkConfig(**{k: example[k] for k in ("source_alias", "source_bootstrap", "target_alias",
                                                     "target_bootstrap")})
    assert link == defaults
    assert {"fetchers_per_broker", "fetch_max_bytes", "fetch_response_max_bytes"} <= example.keys()
