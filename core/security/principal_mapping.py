"""`ssl.principal.mapping.rules`: from a client certificate's subject to a principal name.

Kafka's syntax and semantics (SslPrincipalMapper), so an existing server.properties means the
same here. The setting is one string (the commas inside a pattern are part of it), a list of

    RULE:pattern/replacement/[L|U]      the first rule whose pattern matches the whole DN wins
    DEFAULT                             the DN itself, in RFC 2253 form

separated by commas. In a pattern or replacement `\\/` stands for `/`. The replacement refers to
groups as `$1`; a reference to a group the pattern does not have is taken literally, as Kafka
does. /L and /U lower- or upper-case the result. A DN that no rule matches fails the
handshake's authentication (Kafka's NoMatchingRule).

Example: with `RULE:^CN=(.*?),O=(.*)$/$1@$2/L,DEFAULT` the subject `CN=Writer,O=Corp` maps to
`writer@corp`, and a subject without an O to the whole DN.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from core.config.defs import ConfigError

DEFAULT_RULES = "DEFAULT"
_SETTING = "ssl.principal.mapping.rules"

# One rule, then optional blanks, then a comma or the end. Anything else is an invalid rule.
_PART = r"((?:\\.|[^\\/])*)"
_RULE = re.compile(r"\s*(?:(DEFAULT)|RULE:" + _PART + "/" + _PART + r"/([LU]?)[^,]*?|([^,]*?))\s*(?:,|$)")


class NoMatchingRule(Exception):
    """No rule maps this subject: the client is not authenticated."""


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str] | None      # None: DEFAULT
    replacement: str = ""
    case: str = ""                       # "L", "U" or ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if not self.pattern.fullmatch(dn):
            return None
        result = self.pattern.sub(lambda m: _expand(self.replacement, m), dn)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result


def _expand(replacement: str, match: re.Match[str]) -> str:
    """Java's Matcher replacement syntax: `\\x` is x, `$n` is group n (the longest prefix of
    the digits that names a group; none at all keeps the `$` and digits as they are)."""
    groups = match.re.groups
    out: list[str] = []
    i, n = 0, len(replacement)
    while i < n:
        c = replacement[i]
        if c == "\\" and i + 1 < n:
            out.append(replacement[i + 1])
            i += 2
        elif c == "$" and i + 1 < n and replacement[i + 1].isdigit() and replacement[i + 1] != "0":
            j = i + 1
            while j < n and replacement[j].isdigit():
                j += 1
            digits = replacement[i + 1:j]
            while len(digits) > 1 and int(digits) > groups:
                digits = digits[:-1]
            if int(digits) > groups:
                out.append(replacement[i:i + 1 + len(digits)])   # not a group: literal
            else:
                out.append(match.group(int(digits)) or "")
            i += 1 + len(digits)
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _unescape_slashes(text: str) -> str:
    return text.replace("\\/", "/")


class PrincipalMapper:
    def __init__(self, rules: str | None = DEFAULT_RULES):
        self.text = (rules or DEFAULT_RULES).strip()
        self.rules = self._parse(self.text)

    @staticmethod
    def _parse(text: str) -> list[_Rule]:
        rules: list[_Rule] = []
        pos = 0
        while pos < len(text):
            m = _RULE.match(text, pos)
            if m is None or m.end() == pos:
                raise ConfigError(f"{_SETTING}: cannot read the rules from {text[pos:]!r}")
            pos = m.end()
            default, pattern, replacement, case, junk = m.groups()
            if default:
                rules.append(_Rule(None))
            elif pattern is not None:
                try:
                    compiled = re.compile(_unescape_slashes(pattern))
                except re.error as exc:
                    raise ConfigError(f"{_SETTING}: pattern {pattern!r} is not a regular expression "
                                      f"({exc})") from None
                rules.append(_Rule(compiled, _unescape_slashes(replacement), case))
            elif junk and junk.strip():
                raise ConfigError(f"{_SETTING}: {junk.strip()!r} is neither DEFAULT nor RULE:pattern/replacement/")
        return rules

    def name_of(self, distinguished_name: str) -> str:
        for rule in self.rules:
            name = rule.apply(distinguished_name)
            if name is not None:
                return name
        raise NoMatchingRule(f"no rule of {_SETTING} maps {distinguished_name!r}")
