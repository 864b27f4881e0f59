"""Predicates that core can evaluate against partition values and file statistics, without Spark.

Conflict detection needs to know whether a file a concurrent commit added *might* hold rows a transaction
read (conflict-rules §13.1 rule 4, D-17), and readers prune files the same way before Spark opens them.
Both questions are "can this predicate be true for some row of a file whose columns lie within these
bounds?", so one evaluator, `might_match`, serves both. It is conservative: unknown columns, mixed types
and expressions it cannot parse all count as "might match", which can only make a conflict more likely,
never hide one.

Predicates are written as SQL strings by users (`"dt = '2026-11-01' AND amount < 0"`); `parse_predicate`
turns the common subset into an `Expr`, and returns None for anything else so callers fall back to
"reads the whole table".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

Literal: TypeAlias = str | int | float | bool | None

_COMPARISONS = ("=", "!=", "<", "<=", ">", ">=")


@dataclass(frozen=True)
class ColumnBounds:
    """What is known of one column in one file: min and max of its non-null values, and nulls.

    A partition column has `lower == upper` (or `only_nulls` for a null partition value).
    """

    lower: Literal = None
    upper: Literal = None
    has_nulls: bool = False
    only_nulls: bool = False

    @staticmethod
    def exact(value: Literal) -> ColumnBounds:
        if value is None:
            return ColumnBounds(has_nulls=True, only_nulls=True)
        return ColumnBounds(lower=value, upper=value)


@dataclass(frozen=True)
class Expr:
    """A predicate node. Subclasses are the closed set below; `to_json` is their persisted form."""

    def to_json(self) -> list[Any]:
        raise NotImplementedError

    def columns(self) -> frozenset[str]:
        raise NotImplementedError


@dataclass(frozen=True)
class Const(Expr):
    value: bool

    def to_json(self) -> list[Any]:
        return ["const", self.value]

    def columns(self) -> frozenset[str]:
        return frozenset()


@dataclass(frozen=True)
class Compare(Expr):
    column: str
    op: str
    value: Literal

    def to_json(self) -> list[Any]:
        return ["cmp", self.column, self.op, self.value]

    def columns(self) -> frozenset[str]:
        return frozenset([self.column])


@dataclass(frozen=True)
class In(Expr):
    column: str
    values: tuple[Literal, ...]
    negated: bool = False

    def to_json(self) -> list[Any]:
        return ["in", self.column, list(self.values), self.negated]

    def columns(self) -> frozenset[str]:
        return frozenset([self.column])


@dataclass(frozen=True)
class IsNull(Expr):
    column: str
    negated: bool = False

    def to_json(self) -> list[Any]:
        return ["isnull", self.column, self.negated]

    def columns(self) -> frozenset[str]:
        return frozenset([self.column])


@dataclass(frozen=True)
class And(Expr):
    children: tuple[Expr, ...]

    def to_json(self) -> list[Any]:
        return ["and", [c.to_json() for c in self.children]]

    def columns(self) -> frozenset[str]:
        return frozenset().union(*(c.columns() for c in self.children))


@dataclass(frozen=True)
class Or(Expr):
    children: tuple[Expr, ...]

    def to_json(self) -> list[Any]:
        return ["or", [c.to_json() for c in self.children]]

    def columns(self) -> frozenset[str]:
        return frozenset().union(*(c.columns() for c in self.children))


@dataclass(frozen=True)
class Not(Expr):
    child: Expr

    def to_json(self) -> list[Any]:
        return ["not", self.child.to_json()]

    def columns(self) -> frozenset[str]:
        return self.child.columns()


TRUE = Const(True)


def expr_from_json(data: Sequence[Any]) -> Expr:
    kind = data[0]
    if kind == "const":
        return Const(bool(data[1]))
    if kind == "cmp":
        return Compare(data[1], data[2], data[3])
    if kind == "in":
        return In(data[1], tuple(data[2]), bool(data[3]))
    if kind == "isnull":
        return IsNull(data[1], bool(data[2]))
    if kind == "and":
        return And(tuple(expr_from_json(c) for c in data[1]))
    if kind == "or":
        return Or(tuple(expr_from_json(c) for c in data[1]))
    if kind == "not":
        return Not(expr_from_json(data[1]))
    raise ValueError(f"unknown predicate node {kind!r} in a stored commit record")


def _negate(expr: Expr) -> Expr:
    """Push a NOT down to the leaves, so `might_match` never has to reason about a negated range."""
    if isinstance(expr, Const):
        return Const(not expr.value)
    if isinstance(expr, Compare):
        flipped = {"=": "!=", "!=": "=", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}[expr.op]
        # SQL three-valued logic: NOT (x < 1) is not true for NULL x either, so nulls stay excluded.
        return Compare(expr.column, flipped, expr.value)
    if isinstance(expr, In):
        return In(expr.column, expr.values, not expr.negated)
    if isinstance(expr, IsNull):
        return IsNull(expr.column, not expr.negated)
    if isinstance(expr, And):
        return Or(tuple(_negate(c) for c in expr.children))
    if isinstance(expr, Or):
        return And(tuple(_negate(c) for c in expr.children))
    if isinstance(expr, Not):
        return expr.child
    raise TypeError(f"not a predicate: {expr!r}")


def _comparable(a: Literal, b: Literal) -> bool:
    if a is None or b is None:
        return False
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool)
    if isinstance(a, int | float) and isinstance(b, int | float):
        return True
    return type(a) is type(b)


def _compare_might_match(bounds: ColumnBounds, op: str, value: Literal) -> bool:
    if bounds.only_nulls:
        return False  # a comparison with NULL is never true
    lower, upper = bounds.lower, bounds.upper
    if value is None:
        return False
    if lower is None or upper is None:
        return True  # no statistics: anything may be there
    if not (_comparable(lower, value) and _comparable(upper, value)):
        return True  # mismatched types: don't guess
    lo: Any = lower
    hi: Any = upper
    v: Any = value
    if op == "=":
        return bool(lo <= v <= hi)
    if op == "!=":
        return not (lo == hi == v)
    if op == "<":
        return bool(lo < v)
    if op == "<=":
        return bool(lo <= v)
    if op == ">":
        return bool(hi > v)
    if op == ">=":
        return bool(hi >= v)
    raise ValueError(f"unknown comparison {op!r}")


def might_match(expr: Expr, bounds: Mapping[str, ColumnBounds]) -> bool:
    """Whether some row within `bounds` could satisfy `expr`; columns missing from `bounds` are unknown."""
    if isinstance(expr, Const):
        return expr.value
    if isinstance(expr, And):
        return all(might_match(c, bounds) for c in expr.children)
    if isinstance(expr, Or):
        return any(might_match(c, bounds) for c in expr.children)
    if isinstance(expr, Not):
        return might_match(_negate(expr.child), bounds)
    column = getattr(expr, "column", None)
    if not isinstance(column, str) or column not in bounds:
        return True
    b = bounds[column]
    if isinstance(expr, Compare):
        return _compare_might_match(b, expr.op, expr.value)
    if isinstance(expr, IsNull):
        if expr.negated:
            return not b.only_nulls
        return b.has_nulls
    if isinstance(expr, In):
        if expr.negated:
            exact = b.lower is not None and b.lower == b.upper and not b.has_nulls
            return not (exact and b.lower in expr.values) and not b.only_nulls
        return any(_compare_might_match(b, "=", v) for v in expr.values)
    raise TypeError(f"not a predicate: {expr!r}")


def restrict_to_columns(expr: Expr, columns: frozenset[str]) -> Expr:
    """Keep only the parts of `expr` about `columns`, widening the rest to TRUE.

    Used to take the partition part of a row predicate (D-22: only predicates on the target's partition
    columns narrow the read set at partition granularity). Widening is sound only under AND and OR,
    so a NOT is pushed down first.
    """
    if isinstance(expr, Not):
        return restrict_to_columns(_negate(expr.child), columns)
    if isinstance(expr, And):
        return And(tuple(restrict_to_columns(c, columns) for c in expr.children))
    if isinstance(expr, Or):
        return Or(tuple(restrict_to_columns(c, columns) for c in expr.children))
    if isinstance(expr, Const):
        return expr
    return expr if expr.columns() <= columns else TRUE


# --- a parser for the common subset of SQL predicates ------------------------------------------------

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<string>'(?:[^']|'')*')
      | (?P<number>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)
      | (?P<op><=|>=|<>|!=|==|=|<|>)
      | (?P<punct>[(),])
      | (?P<ident>`[^`]+`|[A-Za-z_][A-Za-z0-9_.]*)
    )""",
    re.VERBOSE,
)


class _Unsupported(Exception):
    pass


class _Parser:
    def __init__(self, text: str, column_of: Callable[[str], str | None]) -> None:
        self.tokens: list[tuple[str, str]] = []
        self.column_of = column_of
        pos = 0
        text = text.strip()
        while pos < len(text):
            match = _TOKEN.match(text, pos)
            if not match or match.end() == pos:
                raise _Unsupported(text[pos:])
            kind = match.lastgroup or ""
            self.tokens.append((kind, match.group(kind)))
            pos = match.end()
            while pos < len(text) and text[pos].isspace():
                pos += 1
        self.i = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def keyword(self, word: str) -> bool:
        tok = self.peek()
        if tok and tok[0] == "ident" and tok[1].upper() == word:
            self.i += 1
            return True
        return False

    def expect(self, kind: str, value: str | None = None) -> str:
        tok = self.peek()
        if tok is None or tok[0] != kind or (value is not None and tok[1] != value):
            raise _Unsupported(str(tok))
        self.i += 1
        return tok[1]

    def parse(self) -> Expr:
        expr = self.or_expr()
        if self.peek() is not None:
            raise _Unsupported(str(self.peek()))
        return expr

    def or_expr(self) -> Expr:
        children = [self.and_expr()]
        while self.keyword("OR"):
            children.append(self.and_expr())
        return children[0] if len(children) == 1 else Or(tuple(children))

    def and_expr(self) -> Expr:
        children = [self.not_expr()]
        while self.keyword("AND"):
            children.append(self.not_expr())
        return children[0] if len(children) == 1 else And(tuple(children))

    def not_expr(self) -> Expr:
        if self.keyword("NOT"):
            return Not(self.not_expr())
        return self.atom()

    def literal(self) -> Literal:
        tok = self.peek()
        if tok is None:
            raise _Unsupported("end of predicate")
        kind, text = tok
        self.i += 1
        if kind == "string":
            return text[1:-1].replace("''", "'")
        if kind == "number":
            return float(text) if any(c in text for c in ".eE") else int(text)
        if kind == "ident" and text.upper() in ("TRUE", "FALSE"):
            return text.upper() == "TRUE"
        if kind == "ident" and text.upper() == "NULL":
            return None
        if kind == "ident" and text.upper() in ("DATE", "TIMESTAMP"):
            return self.literal()  # DATE '2026-11-01' compares as its ISO string
        raise _Unsupported(text)

    def column(self) -> str:
        name = self.expect("ident")
        if name.upper() in ("TRUE", "FALSE", "NULL", "AND", "OR", "NOT"):
            raise _Unsupported(name)
        column = self.column_of(name.strip("`"))
        if column is None:
            raise _Unsupported(name)
        return column

    def atom(self) -> Expr:
        tok = self.peek()
        if tok == ("punct", "("):
            self.i += 1
            inner = self.or_expr()
            self.expect("punct", ")")
            return inner
        if tok and tok[0] == "ident" and tok[1].upper() in ("TRUE", "FALSE"):
            self.i += 1
            return Const(tok[1].upper() == "TRUE")
        if tok and tok[0] in ("string", "number"):
            # literal on the left: `'x' = col`
            value = self.literal()
            op = self.expect("op")
            col = self.column()
            mirrored = {"<": ">", ">": "<", "<=": ">=", ">=": "<="}.get(op, op)
            return self._compare(col, mirrored, value)
        col = self.column()
        if self.keyword("IS"):
            negated = self.keyword("NOT")
            if not self.keyword("NULL"):
                raise _Unsupported("IS without NULL")
            return IsNull(col, negated)
        negated = self.keyword("NOT")
        if self.keyword("IN"):
            self.expect("punct", "(")
            values = [self.literal()]
            while self.peek() == ("punct", ","):
                self.i += 1
                values.append(self.literal())
            self.expect("punct", ")")
            return In(col, tuple(values), negated)
        if self.keyword("BETWEEN"):
            low = self.literal()
            if not self.keyword("AND"):
                raise _Unsupported("BETWEEN without AND")
            high = self.literal()
            between = And((Compare(col, ">=", low), Compare(col, "<=", high)))
            return Not(between) if negated else between
        if negated:
            raise _Unsupported("NOT after a column")
        op = self.expect("op")
        value = self.literal()
        return self._compare(col, op, value)

    @staticmethod
    def _compare(col: str, op: str, value: Literal) -> Expr:
        op = {"==": "=", "<>": "!="}.get(op, op)
        if op not in _COMPARISONS:
            raise _Unsupported(op)
        if value is None:
            return Const(False)  # `x = NULL` is never true in SQL
        return Compare(col, op, value)


def parse_predicate(text: str, columns: Sequence[str]) -> Expr | None:
    """Parse a SQL predicate over `columns`, or return None if it uses anything beyond the subset.

    The subset: comparisons with literals, IN, BETWEEN, IS [NOT] NULL, AND, OR, NOT, parentheses, and
    column names optionally qualified (`t.dt`). None means "could not understand", which callers treat
    as a read of the whole table (conservative), never as "reads nothing".
    """
    by_lower = {c.lower(): c for c in columns}

    def column_of(name: str) -> str | None:
        bare = name.rsplit(".", 1)[-1]
        return by_lower.get(bare.lower())

    try:
        return _Parser(text, column_of).parse()
    except _Unsupported:
        pass
    # Drop the AND-ed parts it cannot read: a conjunction of fewer parts selects more rows, so the read
    # set only widens (safe), and `dt = 'b' AND id % 2 = 0` still narrows to partition b.
    return _readable_conjuncts(text, column_of)


def _readable_conjuncts(text: str, column_of: Callable[[str], str | None]) -> Expr | None:
    """The AND of the top-level conjuncts the parser understands; None if it understands none."""
    kept = []
    for part in split_conjuncts(text):
        try:
            kept.append(_Parser(part, column_of).parse())
        except _Unsupported:
            continue
    if not kept:
        return None
    return kept[0] if len(kept) == 1 else And(tuple(kept))


def split_conjuncts(text: str) -> list[str]:
    """Top-level AND parts of a SQL condition (outside parentheses and quotes)."""
    parts, depth, quote, start, i = [], 0, False, 0, 0
    upper = text.upper()
    while i < len(text):
        ch = text[i]
        if ch == "'":
            quote = not quote
        elif not quote and ch == "(":
            depth += 1
        elif not quote and ch == ")":
            depth -= 1
        elif (
            not quote
            and depth == 0
            and upper.startswith("AND", i)
            and (i == 0 or not text[i - 1].isalnum())
            and (i + 3 >= len(text) or not (text[i + 3].isalnum() or text[i + 3] == "_"))
        ):
            before = upper[:i].rstrip()
            if not before.endswith("BETWEEN") and " BETWEEN " not in before[before.rfind(" AND ") + 1 :]:
                parts.append(text[start:i])
                start = i + 3
        i += 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def parse_target_predicate(condition: str, columns: Sequence[str], alias: str) -> Expr | None:
    """The part of a join condition about the target alone (`t.dt = '2026-11-01'`), for its read set.

    Conjuncts that mention anything but `alias.<column>` and literals are dropped, which widens the
    predicate (safe); None means no conjunct was about the target alone, i.e. a whole-table read.
    """
    by_lower = {c.lower(): c for c in columns}
    prefix = alias.lower() + "."

    def column_of(name: str) -> str | None:
        lowered = name.lower()
        if not lowered.startswith(prefix):
            return None
        return by_lower.get(lowered[len(prefix) :])

    return _readable_conjuncts(condition, column_of)
