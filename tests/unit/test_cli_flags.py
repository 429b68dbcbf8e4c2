"""One flag convention across seaway, regions, mirror and dr: `-o/--output` is the output
format everywhere. The old spellings (`seaway -O`, `seaway node -o` for --override, `regions
compose -o/--output FILE`) still work for one release and say once, on stderr, what replaces
them."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from core.cli.main import build_parser
from tests.support.node import REPO


@pytest.mark.parametrize("argv, dest, value, note", [
    (["topics", "list", "-o", "json"], "output", "json", ""),
    (["topics", "list", "--output", "json"], "output", "json", ""),
    (["topics", "list", "-O", "json"], "output", "json",
     "seaway: note: -O is deprecated and goes in the next release: use -o (--output)\n"),
    (["groups", "describe", "--all-groups", "-O", "json"], "output", "json",
     "seaway: note: -O is deprecated and goes in the next release: use -o (--output)\n"),
    (["topics", "list"], "output", "table", ""),
    (["node", "--override", "a=1", "--override", "b=2"], "override", ["a=1", "b=2"], ""),
    (["node", "-o", "a=1", "--override", "b=2"], "override", ["a=1", "b=2"],
     "seaway node: note: -o is deprecated and goes in the next release: use --override\n"),
    (["node"], "override", [], ""),
])
def test_new_and_old_spellings(capsys, argv, dest, value, note):
    args = build_parser().parse_args(argv)
    assert getattr(args, dest) == value
    assert capsys.readouterr().err == note


def test_an_old_spelling_still_checks_its_value(capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["topics", "list", "-O", "yaml"])
    assert exit_.value.code == 2
    assert "invalid choice: 'yaml'" in capsys.readouterr().err


@pytest.mark.parametrize("cli", [
    ["regions.cli", "status"], ["mirror.cli", "status"], ["dr.cli", "status"], ["dr.cli", "history"],
    ["core.cli", "topics", "list"], ["core.cli", "groups", "list"], ["core.cli", "quorum", "describe"],
    ["core.cli", "acls", "list"], ["core.cli", "users", "list"],
])
def test_every_output_format_flag_is_dash_o(cli):
    shown = subprocess.run([sys.executable, "-m", *cli, "--help"], capture_output=True, text=True, cwd=REPO,
                           timeout=60)
    assert shown.returncode == 0, shown.stderr
    help_text = " ".join(shown.stdout.split())
    assert re.search(r"-o \{table,json\}, --output \{table,json\}|--output \{table,json\}, -o \{table,json\}",
                     help_text), help_text
    assert "-O" not in help_text
