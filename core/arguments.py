"""What the command lines (seaway, regions, mirror, dr) share about parsing arguments: a parser
whose usage mistakes are one line, and old spellings of flags that still work for a release.

A mistake in a command line (an unknown flag, a missing value) is one line on stderr with exit
status 2, naming the command and pointing at its --help, instead of argparse's usage block:

    regions: error: up: unrecognized arguments: --detatch (see regions up --help)

Old spellings of flags still work for one release, and say so.

The CLIs (seaway, regions, mirror, dr) use `-o/--output` for the output format, as kubectl and
kcat users expect. Where a flag had another spelling, the old one is registered with
`deprecated_alias`: it sets the same destination, and the first use prints one line on stderr
naming what replaces it. Kept out of core/cli so that regions/ (which may not import the seaway
CLI) uses the same helpers.
"""
from __future__ import annotations

import argparse
import sys


class OneLineParser(argparse.ArgumentParser):
    """Usage mistakes in one line, exit status 2; subparsers made from it are the same class."""

    def error(self, message: str):
        top = self.prog.split()[0]
        where = self.prog.removeprefix(top).strip()
        self.exit(2, f"{top}: error: {where + ': ' if where else ''}{message} (see {self.prog} --help)\n")


class _DeprecatedAlias(argparse.Action):
    def __init__(self, option_strings, dest, *, replacement: str, prog: str, append: bool = False, **kwargs):
        self.replacement, self.prog, self.append = replacement, prog, append
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{self.prog}: note: {option_string} is deprecated and goes in the next release: "
              f"use {self.replacement}", file=sys.stderr)
        if self.append:
            current = getattr(namespace, self.dest, None)
            setattr(namespace, self.dest, [*(current or []), values])
        else:
            setattr(namespace, self.dest, values)


def deprecated_alias(parser, flag: str, *, dest: str, replacement: str, prog: str, append: bool = False,
                     **kwargs) -> None:
    """Register `flag` as the old spelling of the option stored in `dest`. `kwargs` are the
    new option's (type, choices, metavar); the default stays the new option's."""
    parser.add_argument(flag, dest=dest, action=_DeprecatedAlias, replacement=replacement, prog=prog,
                        append=append, default=argparse.SUPPRESS, help=argparse.SUPPRESS, **kwargs)
