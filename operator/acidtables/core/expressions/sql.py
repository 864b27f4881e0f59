"""SQL predicates as users write them (`"dt = '2026-11-01' AND amount < 0"`), parsed into the tree.

One tokenizer serves the parser and `split_conjuncts`. The common subset is parsed; anything else
yields None (or is dropped from a conjunction), which callers read as "reads the whole table":
understanding less can only widen a read set, never hide a conflict.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from acidtables.core.errors import AcidTablesError
from acidtables.core.expressions.tree import COMPARISONS, And, Compare, Const, Expr, In, IsNull, Literal, Not, Or

# Tokens are cut where Spark's lexer cuts them, so no part of a string literal or a comment is ever
# read as an AND, a column or a value: strings take backslash escapes and may be double-quoted, and
# comments run to the end of the line (--) or to */.
_TOKEN = re.compile(
    r"""\s*(?:
        (?P<comment>--[^\n]*|/\*.*?(?:\*/|\Z))
      | (?P<string>'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*")
      | (?P<number>-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)
      | (?P<op><=|>=|<>|!=|==|=|<|>)
      | (?P<punct>[(),])
      | (?P<ident>`[^`]+`|[A-Za-z_][A-Za-z0-9_.]*)
      | (?P<other>\S)
    )""",
    re.VERBOSE | re.DOTALL,
)


@dataclass(frozen=True)
class Token:
    #: string, number, op, punct, ident, comment, or other (any character outside the subset: `%`, `+`, ...)
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


#: column types whose stored values (partition values, statistics) compare with a literal in Python as
#: Spark compares them; FLOAT is left out (a float32 value widened to a double is not the literal it
#: was written as), and so are DECIMAL, TIMESTAMP and BINARY (kept as text, or without statistics)
_NUMERIC_TYPES = frozenset(("TINYINT", "BYTE", "SMALLINT", "SHORT", "INT", "INTEGER", "BIGINT", "LONG", "DOUBLE"))
_TEXT_TYPES = frozenset(("STRING", "CHAR", "VARCHAR"))
#: the one spelling of a date the log holds (partition values, statistics)
_ISO_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


def literal_fits(type_name: str | None, value: Literal, typed: str | None) -> bool:
    """Whether comparing `value` with a column's stored values in Python gives Spark's answer.

    Spark casts one side to the other's type (`day = '2026-11-1'` is true for 2026-11-01, and a STRING
    compared with DATE '2026-11-01' is read as a date), so a literal is used only where no cast changes
    the outcome. `typed` is DATE or TIMESTAMP for `DATE '...'`; `type_name` None means no types are known
    (the caller passed names only)."""
    if type_name is None or value is None:
        return True
    base = type_name.strip().upper().split("(")[0]
    if typed is not None:
        return typed == "DATE" and base == "DATE" and isinstance(value, str) and _ISO_DATE.fullmatch(value) is not None
    if isinstance(value, bool):
        return base == "BOOLEAN"
    if isinstance(value, int | float):
        return base in _NUMERIC_TYPES
    return base in _TEXT_TYPES or (base == "DATE" and _ISO_DATE.fullmatch(value) is not None)


class _Parser:
    def __init__(self, text: str, column_of: Callable[[str], str | None], type_of: Callable[[str], str | None]) -> None:
        self.tokens = [(t.kind, t.text) for t in tokenize(text) if t.kind != "comment"]
        other = next((t for t in self.tokens if t[0] == "other"), None)
        if other is not None:
            raise _Unsupported(other[1])
        self.column_of = column_of
        self.type_of = type_of
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

    def literal(self) -> tuple[Literal, str | None]:
        """A literal, and DATE or TIMESTAMP when it is typed (`DATE '2026-11-01'`)."""
        tok = self.peek()
        if tok is None:
            raise _Unsupported("end of predicate")
        kind, text = tok
        self.i += 1
        if kind == "string":
            # Spark reads backslash escapes (a newline, a unicode or octal escape, a quote) its own way,
            # and a double-quoted string may be an identifier: both are left to Spark
            if text.startswith('"') or "\\" in text:
                raise _Unsupported(text)
            return text[1:-1].replace("''", "'"), None
        if kind == "number":
            return float(text) if any(c in text for c in ".eE") else int(text), None
        if kind == "ident" and text.upper() in ("TRUE", "FALSE"):
            return text.upper() == "TRUE", None
        if kind == "ident" and text.upper() == "NULL":
            return None, None
        if kind == "ident" and text.upper() in ("DATE", "TIMESTAMP"):
            value, typed = self.literal()  # DATE '2026-11-01' compares as its ISO string
            if not isinstance(value, str) or typed is not None:
                raise _Unsupported(text)
            return value, text.upper()
        raise _Unsupported(text)

    def value_for(self, column: str, literal: tuple[Literal, str | None]) -> Literal:
        """The literal's value, where comparing it with `column` in Python is what Spark does."""
        value, typed = literal
        if not literal_fits(self.type_of(column), value, typed):
            raise _Unsupported(f"{value!r} against {column}")
        return value

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
            literal = self.literal()
            op = self.expect("op")
            col = self.column()
            value = self.value_for(col, literal)
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
            values = [self.value_for(col, self.literal())]
            while self.peek() == ("punct", ","):
                self.i += 1
                values.append(self.value_for(col, self.literal()))
            self.expect("punct", ")")
            return In(col, tuple(values), negated)
        if self.keyword("BETWEEN"):
            low = self.value_for(col, self.literal())
            if not self.keyword("AND"):
                raise _Unsupported("BETWEEN without AND")
            high = self.value_for(col, self.literal())
            between = And((Compare(col, ">=", low), Compare(col, "<=", high)))
            return Not(between) if negated else between
        if negated:
            raise _Unsupported("NOT after a column")
        op = self.expect("op")
        value = self.value_for(col, self.literal())
        return self._compare(col, op, value)

    @staticmethod
    def _compare(col: str, op: str, value: Literal) -> Expr:
        op = {"==": "=", "<>": "!="}.get(op, op)
        if op not in COMPARISONS:
            raise _Unsupported(op)
        if value is None:
            return Const(False)  # `x = NULL` is never true in SQL
        return Compare(col, op, value)


Columns = Sequence[str] | Mapping[str, str]


def parse_predicate(text: str, columns: Columns) -> Expr | None:
    """Parse a SQL predicate over `columns`, or return None if it uses anything beyond the subset.

    The subset: comparisons with literals, IN, BETWEEN, IS [NOT] NULL, AND, OR, NOT, parentheses, and
    column names optionally qualified (`t.dt`). None means "could not understand", which callers treat
    as a read of the whole table (conservative), never as "reads nothing". Given {name: type} (what a
    table's metadata knows), a comparison Spark would answer with a cast is not understood either.
    """
    by_lower = {c.lower(): c for c in columns}

    def column_of(name: str) -> str | None:
        bare = name.rsplit(".", 1)[-1]
        return by_lower.get(bare.lower())

    try:
        return _Parser(text, column_of, _types_of(columns)).parse()
    except _Unsupported:
        pass
    # Drop the AND-ed parts it cannot read: a conjunction of fewer parts selects more rows, so the read
    # set only widens (safe), and `dt = 'b' AND id % 2 = 0` still narrows to partition b.
    return _readable_conjuncts(text, column_of, _types_of(columns))


def _types_of(columns: Columns) -> Callable[[str], str | None]:
    types = dict(columns) if isinstance(columns, Mapping) else {}
    return types.get


def _readable_conjuncts(
    text: str, column_of: Callable[[str], str | None], type_of: Callable[[str], str | None]
) -> Expr | None:
    """The AND of the top-level conjuncts the parser understands; None if it understands none."""
    kept = []
    for part in split_conjuncts(text):
        try:
            kept.append(_Parser(part, column_of, type_of).parse())
        except _Unsupported:
            continue
    if not kept:
        return None
    return kept[0] if len(kept) == 1 else And(tuple(kept))


def split_conjuncts(text: str) -> list[str]:
    """Top-level AND parts of a SQL condition (outside parentheses, quotes and comments; the AND of a
    BETWEEN stays with it). A condition with a top-level OR or CASE is one part: OR binds looser than
    AND (`a OR b AND c` is `a OR (b AND c)`, not `(a OR b) AND c`), and the ANDs of a CASE are inside it."""
    parts, depth, start, between = [], 0, 0, False
    for token in tokenize(text):
        word = token.text.upper() if token.kind == "ident" else None
        if token.kind == "punct" and token.text in "()":
            depth += 1 if token.text == "(" else -1
        elif depth == 0 and word in ("OR", "CASE"):
            return [text.strip()] if text.strip() else []
        elif depth == 0 and word == "BETWEEN":
            between = True
        elif depth == 0 and word == "AND":
            if between:
                between = False
            else:
                parts.append(text[start : token.start])
                start = token.end
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def parse_target_predicate(condition: str, columns: Columns, alias: str) -> Expr | None:
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

    return _readable_conjuncts(condition, column_of, _types_of(columns))
