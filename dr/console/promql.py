"""The part of PromQL the platform's alert rules use (compose/alerts.yml), evaluated over the
console's own history (series.py) when no Prometheus is configured, so that one rule file
serves both. No I/O.

Theory of operation
-------------------
`parse` turns an expression into a small tree; `evaluate` computes it at one instant over a
SeriesStore, as Prometheus' instant query does. What is understood, and nothing more (anything
else is a PromQLError naming what was not understood, so a rule the console cannot evaluate is
said to be so rather than silently never firing):

- selectors `name{label="v", label!="v", label=~"re", label!~"re"}`: each series' latest
  sample in the 5 minutes up to the instant (Prometheus' lookback);
- `rate(selector[5m])` (series.py's rate: resets handled, no extrapolation);
- `sum`, `max`, `min`, `avg`, `count`, with `by (labels)` before or after the argument;
- `histogram_quantile(q, vector)`, by the vector's labels other than `le`;
- comparisons `== != > < >= <=` between a vector and a number (filtering, as without `bool`)
  or two vectors, matched on all their labels or `on (labels)`;
- `*`, `/`, `+`, `-` between a vector and a number; `or` between vectors (the left side, and
  the right side's series whose labels the left has not).

A vector is {labels: value}, labels without the metric name, as Prometheus drops it from any
computed result.
"""
from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass
from typing import Any, Callable

from .series import Labels, SeriesStore, histogram_quantile

LOOKBACK_S = 300.0

Vector = dict[Labels, float]


class PromQLError(ValueError):
    pass


# ------------------------------------------------------------------ the tree

@dataclass(frozen=True)
class Number:
    value: float


@dataclass(frozen=True)
class Selector:
    name: str
    matchers: tuple[tuple[str, str, str], ...]      # (label, op, value)
    range_s: float | None = None


@dataclass(frozen=True)
class Call:
    function: str
    args: tuple[Any, ...]


@dataclass(frozen=True)
class Aggregate:
    op: str
    by: tuple[str, ...]
    arg: Any


@dataclass(frozen=True)
class Binary:
    op: str
    left: Any
    right: Any
    on: tuple[str, ...] | None = None


# ------------------------------------------------------------------ parsing

_TOKEN = re.compile(r"""\s*(?:
    (?P<number>\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)(?![A-Za-z_])
  | (?P<duration>\d+[smhd])
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<op>==|!=|>=|<=|=~|!~|[-+*/<>=(){}\[\],])
  | (?P<name>[A-Za-z_:][A-Za-z0-9_:]*)
)""", re.VERBOSE)

_AGGREGATIONS = {"sum", "max", "min", "avg", "count"}
_COMPARISONS = {"==", "!=", ">", "<", ">=", "<="}
_DURATION_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _tokens(text: str) -> list[tuple[str, str]]:
    out, at = [], 0
    text = text.strip()
    while at < len(text):
        m = _TOKEN.match(text, at)
        if m is None or m.end() == at:
            raise PromQLError(f"cannot read {text[at:at + 20]!r} (at {at})")
        kind = m.lastgroup
        assert kind is not None
        out.append((kind, m.group(kind)))
        at = m.end()
        while at < len(text) and text[at].isspace():
            at += 1
    return out


class _Parser:
    def __init__(self, text: str):
        self.tokens = _tokens(text)
        self.at = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self, value: str | None = None, kind: str | None = None) -> str:
        token = self.peek()
        if token is None or (value is not None and token[1] != value) or (kind is not None and token[0] != kind):
            want = value or kind
            raise PromQLError(f"expected {want}, found {token[1] if token else 'the end'}")
        self.at += 1
        return token[1]

    def accept(self, value: str) -> bool:
        token = self.peek()
        if token is not None and token[1] == value:
            self.at += 1
            return True
        return False

    def expression(self) -> Any:
        left = self.comparison()
        while self.accept("or"):
            left = Binary("or", left, self.comparison())
        return left

    def comparison(self) -> Any:
        left = self.additive()
        token = self.peek()
        if token is not None and token[1] in _COMPARISONS:
            op = self.take()
            if self.peek() == ("name", "bool"):
                raise PromQLError("`bool` comparisons are not supported")
            on = self.labels() if self.accept("on") else None
            left = Binary(op, left, self.additive(), on)
        return left

    def additive(self) -> Any:
        left = self.multiplicative()
        while (token := self.peek()) is not None and token[1] in ("+", "-"):
            left = Binary(self.take(), left, self.multiplicative())
        return left

    def multiplicative(self) -> Any:
        left = self.term()
        while (token := self.peek()) is not None and token[1] in ("*", "/"):
            left = Binary(self.take(), left, self.term())
        return left

    def labels(self) -> tuple[str, ...]:
        self.take("(")
        names = []
        while not self.accept(")"):
            names.append(self.take(kind="name"))
            self.accept(",")
        return tuple(names)

    def term(self) -> Any:
        token = self.peek()
        if token is None:
            raise PromQLError("the expression ends too soon")
        kind, value = token
        if kind == "number":
            self.at += 1
            return Number(float(value))
        if value == "(":
            self.at += 1
            inner = self.expression()
            self.take(")")
            return inner
        if kind != "name":
            raise PromQLError(f"unexpected {value}")
        self.at += 1
        if value in _AGGREGATIONS:
            by = self.labels() if self.accept("by") else ()
            self.take("(")
            arg = self.expression()
            self.take(")")
            if self.accept("by"):
                by = self.labels()
            return Aggregate(value, by, arg)
        if value == "histogram_quantile":
            self.take("(")
            q = self.take(kind="number")
            self.take(",")
            arg = self.expression()
            self.take(")")
            return Call(value, (float(q), arg))
        if value == "rate":
            self.take("(")
            selector = self.term()
            self.take(")")
            if not isinstance(selector, Selector) or selector.range_s is None:
                raise PromQLError("rate() takes a range selector, such as name[5m]")
            return Call(value, (selector,))
        if self.peek() == ("op", "("):
            raise PromQLError(f"the function {value}() is not supported")
        return self.selector(value)

    def selector(self, name: str) -> Selector:
        matchers = []
        if self.accept("{"):
            while not self.accept("}"):
                label = self.take(kind="name")
                op = self.take(kind="op")
                if op not in ("=", "!=", "=~", "!~"):
                    raise PromQLError(f"unknown label matcher {op}")
                matchers.append((label, op, _unquote(self.take(kind="string"))))
                self.accept(",")
        range_s = None
        if self.accept("["):
            duration = self.take(kind="duration")
            range_s = float(duration[:-1]) * _DURATION_S[duration[-1]]
            self.take("]")
        return Selector(name, tuple(matchers), range_s)


def _unquote(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text[1:-1])


def parse(text: str) -> Any:
    parser = _Parser(text)
    tree = parser.expression()
    if parser.peek() is not None:
        raise PromQLError(f"unexpected {parser.peek()[1]} after the expression")     # type: ignore[index]
    return tree


# ------------------------------------------------------------------ evaluating

_OPS: dict[str, Callable[[float, float], Any]] = {
    "==": operator.eq, "!=": operator.ne, ">": operator.gt, "<": operator.lt, ">=": operator.ge,
    "<=": operator.le, "+": operator.add, "-": operator.sub, "*": operator.mul,
    "/": lambda a, b: a / b if b else math.copysign(math.inf, a) if a else math.nan,
}


def evaluate(tree: Any, store: SeriesStore, at: float) -> Vector | float:
    if isinstance(tree, Number):
        return tree.value
    if isinstance(tree, Selector):
        if tree.range_s is not None:
            raise PromQLError(f"a range selector ({tree.name}[...]) outside rate()")
        return {labels: points[-1][1] for labels, points in _select(store, tree, at - LOOKBACK_S, at)
                if points and not math.isnan(points[-1][1])}     # a stale series is absent
    if isinstance(tree, Call) and tree.function == "rate":
        sel = tree.args[0]
        out = {}
        for series in store.rate(sel.name, at=[at], lookback_s=sel.range_s):
            if _matches(series.labels, sel.matchers) and series.points[0][1] is not None:
                out[series.labels] = series.points[0][1]
        return out
    if isinstance(tree, Call) and tree.function == "histogram_quantile":
        q, vector = tree.args[0], _vector(evaluate(tree.args[1], store, at))
        groups: dict[Labels, list[tuple[float, float | None]]] = {}
        for labels, value in vector.items():
            le = dict(labels).get("le")
            if le is not None:
                groups.setdefault(tuple(kv for kv in labels if kv[0] != "le"), []).append((float(le), value))
        result = {labels: histogram_quantile(q, sorted(buckets)) for labels, buckets in groups.items()}
        return {labels: v for labels, v in result.items() if v is not None}
    if isinstance(tree, Aggregate):
        vector = _vector(evaluate(tree.arg, store, at))
        grouped: dict[Labels, list[float]] = {}
        for labels, value in vector.items():
            grouped.setdefault(tuple(kv for kv in labels if kv[0] in tree.by), []).append(value)
        fold: Callable[[list[float]], float] = {"sum": sum, "max": max, "min": min, "count": len,
                                                "avg": lambda vs: sum(vs) / len(vs)}[tree.op]
        return {labels: float(fold(values)) for labels, values in grouped.items()}
    if isinstance(tree, Binary):
        return _binary(tree, evaluate(tree.left, store, at), evaluate(tree.right, store, at))
    raise PromQLError(f"cannot evaluate {tree!r}")


def _binary(tree: Binary, left: Vector | float, right: Vector | float) -> Vector | float:
    op = _OPS.get(tree.op)
    if tree.op == "or":
        lv, rv = _vector(left), _vector(right)
        return {**{k: v for k, v in rv.items() if k not in lv}, **lv}
    assert op is not None
    comparison = tree.op in _COMPARISONS
    if isinstance(left, float) and isinstance(right, float):
        return float(op(left, right))
    if isinstance(right, float):
        assert isinstance(left, dict)
        return {k: v for k, v in left.items() if op(v, right)} if comparison else \
            {k: float(op(v, right)) for k, v in left.items()}
    if isinstance(left, float):
        return {k: v for k, v in right.items() if op(left, v)} if comparison else \
            {k: float(op(left, v)) for k, v in right.items()}

    def key(labels: Labels) -> Labels:
        return tuple(kv for kv in labels if kv[0] in tree.on) if tree.on is not None else labels
    others = {key(labels): value for labels, value in right.items()}
    out = {}
    for labels, value in left.items():
        other = others.get(key(labels))
        if other is None:
            continue
        if comparison:
            if op(value, other):
                out[labels] = value
        else:
            out[labels] = float(op(value, other))
    return out


def _vector(value: Vector | float) -> Vector:
    if not isinstance(value, dict):
        raise PromQLError("a vector was expected, not a number")
    return value


def _select(store: SeriesStore, sel: Selector, since: float, until: float) -> list[tuple[Labels, list]]:
    out = []
    for series in store.points(sel.name, since=since):
        if _matches(series.labels, sel.matchers):
            out.append((series.labels, [p for p in series.points if p[0] <= until]))
    return out


def _matches(labels: Labels, matchers: tuple[tuple[str, str, str], ...]) -> bool:
    have = dict(labels)
    for label, op, value in matchers:
        got = have.get(label, "")
        if op == "=" and got != value or op == "!=" and got == value:
            return False
        if op in ("=~", "!~") and (re.fullmatch(value, got) is None) == (op == "=~"):
            return False
    return True
