"""The README's tested examples: code blocks marked `<!-- readme-test: SET [OPTIONS] -->`.

A `console` block is a shell session: `$ COMMAND` lines, each followed by the output it
prints (standard output). Expected lines match whole lines of the real output, in order; `...`
inside a line stands for any text, a run of spaces for any run of spaces (table columns
widen with their values), and a line of only `...` for any number of lines. The
state directory's home prefix is written `~` on both sides, as the README writes it.

Options of a marker:
  background    the block's one command keeps running (`regions up`): its output so far must
                match the block's, up to the block's last line
  retry=S       the block converges (the mirror copies within seconds): run it again until it
                matches, for up to S seconds
  file=NAME     not a session: the block is saved as NAME in the working directory
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
_MARKER = re.compile(r"<!-- readme-test: (\S+)((?: \S+)*) -->")


@dataclass
class Step:
    command: str
    expected: list[str] = field(default_factory=list)


@dataclass
class Block:
    line: int                       # of the marker, 1-based, for messages
    kind: str                       # the fence's info string: console, python, ...
    text: str
    background: bool = False
    retry_s: float = 0.0
    file: str | None = None

    @property
    def steps(self) -> list[Step]:
        steps: list[Step] = []
        for line in self.text.splitlines():
            if line.startswith("$ "):
                steps.append(Step(line[2:]))
            elif steps:
                steps[-1].expected.append(line)
            elif line.strip():
                raise ValueError(f"README.md:{self.line}: output before any `$ ` command: {line!r}")
        return steps


def blocks(name: str, readme: Path = README) -> list[Block]:
    """The blocks of one set, in the README's order."""
    lines = readme.read_text().splitlines()
    found = []
    for i, line in enumerate(lines):
        m = _MARKER.fullmatch(line.strip())
        if not m or m.group(1) != name:
            continue
        fence = lines[i + 1]
        if not fence.startswith("```"):
            raise ValueError(f"README.md:{i + 1}: a readme-test marker must stand right above a code block")
        end = next(j for j in range(i + 2, len(lines)) if lines[j].startswith("```"))
        block = Block(i + 1, fence[3:].strip(), "\n".join(lines[i + 2:end]) + "\n")
        for option in m.group(2).split():
            key, _, value = option.partition("=")
            if key == "background":
                block.background = True
            elif key == "retry":
                block.retry_s = float(value)
            elif key == "file":
                block.file = value
            else:
                raise ValueError(f"README.md:{i + 1}: unknown readme-test option {option!r}")
        found.append(block)
    return found


def _line_pattern(expected: str) -> re.Pattern:
    """`...` is any text; a run of spaces is any run of spaces (columns widen with values)."""
    parts = re.split(r"(\.\.\.|\s+)", expected.strip())
    return re.compile("".join(".*" if part == "..." else r"\s+" if part.isspace() else re.escape(part)
                              for part in parts if part))


def mismatch(expected: list[str], actual: list[str], *, prefix: bool = False) -> str | None:
    """None if `actual` matches `expected` (all of it, or with `prefix` a beginning of it);
    otherwise where it first departs."""
    def match(e: int, a: int) -> bool:
        if e == len(expected):
            return prefix or a == len(actual)
        if expected[e].strip() == "...":
            return any(match(e + 1, k) for k in range(a, len(actual) + 1))
        return a < len(actual) and _line_pattern(expected[e]).fullmatch(actual[a].strip()) is not None \
            and match(e + 1, a + 1)

    if match(0, 0):
        return None
    # Say which expected line found no partner (the first, in order, that fails).
    a = 0
    for e, want in enumerate(expected):
        if want.strip() == "...":
            continue
        pattern = _line_pattern(want)
        while a < len(actual) and not pattern.fullmatch(actual[a].strip()):
            a += 1
        if a == len(actual):
            return f"expected line {e + 1} not found in order: {want!r}\n--- actual:\n" + "\n".join(actual)
        a += 1
    return "unexpected extra lines\n--- actual:\n" + "\n".join(actual)


def as_written(text: str, home: Path) -> list[str]:
    """Output lines as the README writes them: the home directory as `~`."""
    return text.replace(str(home), "~").splitlines()
