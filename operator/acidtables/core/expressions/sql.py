"""SQL predicates as users write them (`"dt = '2026-11-01' AND amount < 0"`), parsed into the tree.

One tokenizer serves the parser and `split_conjuncts`. The common subset is parsed; anything else
yields None (or is dropped from a conjunction), which callers read as "reads the whole table":
understanding less can only widen a read set, never hide a conflict.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..errors import AcidTablesError
from .tree import COMPARISONS, And, Compare, Const, Expr, In, IsNull, Literal, Not, Or

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<string>'(?:[^']|'')*')
      | (?P<number>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)
      | (?P<op><=|>=|<>|!=|==|=|<|>)
      | (?P<punct>[(),])
      | (?P<ident>`[^`]+`|[A-Za-z_][A-Za-z0-9_.]*)
      | (?P<other>\S)
    )""",
    re.VERBOSE,
)


@dataclass(frozen=True)
class Token:
    #: string, number, op, punct, ident, or other (any character outside the subset: `%`, `+`, ...)
    kind: str
    text: str
    start: int
    end: int


def tokenize(text: str) -> list[Token]:
    """Every token of `text`, with its place in it; nothing is dropped, so parts can be cut back out."""
    tokens: list[Token] = []
    pos = 0
    while True:
        match = _TOKEN.match(text, pos)
        if match is None:  # only trailing blanks are left
            return tokens
        kind = match.lastgroup or ""
        tokens.append(Token(kind, match.group(kind), match.start(kind), match.end()))
        pos = match.end()


class _Unsupported(AcidTablesError):
    """Control flow inside this module: the text uses something outside the subset (never escapes)."""


class _Parser:
    def __init__(self, text: str, column_of: Callable[[str], str | None]) -> None:
        self.tokens = [(t.kind, t.text) for t in tokenize(text)]
        other = next((t for t in self.tokens if t[0] == "other"), None)
        if other is not None:
            raise _Unsupported(other[1])
        self.column_of = column_of
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
        if op not in COMPARISONS:
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
    """Top-level AND parts of a SQL condition (outside parentheses and quotes; the AND of a BETWEEN
    stays with it)."""
    parts, depth, start, between = [], 0, 0, False
    for token in tokenize(text):
        if token.kind == "punct" and token.text in "()":
            depth += 1 if token.text == "(" else -1
        elif depth == 0 and token.kind == "ident" and token.text.upper() == "BETWEEN":
            between = True
        elif depth == 0 and token.kind == "ident" and token.text.upper() == "AND":
            if between:
                between = False
            else:
                parts.append(text[start : token.start])
                start = token.end
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
