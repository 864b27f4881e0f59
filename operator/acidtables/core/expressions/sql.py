"""SQL predicates as users write them (`"dt = '2026-11-01' AND amount < 0"`), parsed into the tree.

One tokenizer serves the parser and `split_conjuncts`. The common subset is parsed; `read_predicate`
says what was left out and why, and `parse_predicate` keeps only the tree, where None (or a conjunct
dropped from an AND) reads as "the whole table": understanding less can only widen a read set, never hide
a conflict. A caller whose result decides what is removed refuses anything left out instead
(Transaction.scan, compaction's `where`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from acidtables.core.errors import AcidTablesError
from acidtables.core.expressions.literals import SPARK_DEFAULTS, Dialect, UnreadableLiteral, string_value
from acidtables.core.expressions.tree import COMPARISONS, And, Compare, Const, Expr, In, IsNull, Literal, Not, Or

# Tokens are cut where Spark's lexer cuts them (SqlBaseLexer.g4), so no part of a string literal or a
# comment is ever read as an AND, a column or a value: strings take backslash escapes and doubled
# quotes, may be double-quoted or raw (R'...'), and a -- comment runs to the end of the line unless a
# backslash continues it. Bracketed comments nest, so `tokenize` cuts those itself.
_TOKEN = re.compile(
    r"""(?:
        (?P<comment>--(?:\\\n|[^\r\n])*)
      | (?P<string>[rR]'[^']*'|[rR]"[^"]*"|'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*")
      | (?P<number>-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)
      | (?P<op><=|>=|<>|!=|==|=|<|>)
      | (?P<punct>[(),])
      | (?P<ident>`(?:[^`]|``)*`|[^\W\d][\w.]*)
      | (?P<other>.)
    )""",
    re.VERBOSE | re.DOTALL,
)
_BLANKS = re.compile(r"\s+")


@dataclass(frozen=True)
class Token:
    #: string, number, op, punct, ident, comment, or other (any character outside the subset: `%`, `+`,
    #: an unclosed quote or comment, ...)
    kind: str
    text: str
    start: int
    end: int


def tokenize(text: str) -> list[Token]:
    """Every token of `text`, with its place in it; nothing is dropped, so parts can be cut back out."""
    tokens: list[Token] = []
    pos = _after_blanks(text, 0)
    while pos < len(text):
        if text.startswith("/*", pos):
            end = _bracketed_comment_end(text, pos)
            kind = "comment" if end is not None else "other"  # Spark refuses an unclosed comment
            end = end if end is not None else pos + 2
            tokens.append(Token(kind, text[pos:end], pos, end))
        else:
            match = _TOKEN.match(text, pos)  # always a match: `other` takes any character
            kind = (match.lastgroup if match else None) or "other"
            end = match.end() if match else pos + 1
            tokens.append(Token(kind, text[pos:end], pos, end))
        pos = _after_blanks(text, end)
    return tokens


def _after_blanks(text: str, pos: int) -> int:
    blanks = _BLANKS.match(text, pos)
    return blanks.end() if blanks else pos


def _bracketed_comment_end(text: str, start: int) -> int | None:
    """Where the /* comment at `start` ends, counting nested ones as Spark does; None if it never does."""
    depth, pos = 0, start
    while pos < len(text):
        if text.startswith("/*", pos):
            depth, pos = depth + 1, pos + 2
        elif text.startswith("*/", pos):
            depth, pos = depth - 1, pos + 2
            if depth == 0:
                return pos
        else:
            pos += 1
    return None


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
    def __init__(
        self,
        text: str,
        column_of: Callable[[str], str | None],
        type_of: Callable[[str], str | None],
        dialect: Dialect,
    ) -> None:
        self.tokens = [(t.kind, t.text) for t in tokenize(text) if t.kind != "comment"]
        other = next((t for t in self.tokens if t[0] == "other"), None)
        if other is not None:
            if other[1] in "'\"`" or other[1] == "/*":
                raise _Unsupported(f"{other[1]} is never closed")
            raise _Unsupported(f"{other[1]} is outside that subset")
        self.column_of = column_of
        self.type_of = type_of
        self.dialect = dialect
        self.i = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def keyword(self, word: str) -> bool:
        tok = self.peek()
        if tok and tok[0] == "ident" and tok[1].upper() == word:
            self.i += 1
            return True
        return False

    def expect(self, kind: str, what: str, value: str | None = None) -> str:
        tok = self.peek()
        if tok is None or tok[0] != kind or (value is not None and tok[1] != value):
            raise _Unsupported(f"expected {what}, found {_shown(tok)}")
        self.i += 1
        return tok[1]

    def parse(self) -> Expr:
        expr = self.or_expr()
        if self.peek() is not None:
            raise _Unsupported(f"expected AND, OR or the end, found {_shown(self.peek())}")
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

    def literal(self, *, adjacent: bool = True) -> tuple[Literal, str | None]:
        """A literal, and DATE or TIMESTAMP when it is typed (`DATE '2026-11-01'`). Adjacent string
        literals are one value, as Spark reads them (`'a' 'b'` is 'ab'), unless `adjacent` is False."""
        tok = self.peek()
        if tok is None:
            raise _Unsupported("the predicate ends where a value belongs")
        kind, text = tok
        self.i += 1
        if kind == "string":
            texts = [text]
            while adjacent and (following := self.peek()) is not None and following[0] == "string":
                texts.append(following[1])
                self.i += 1
            try:
                return string_value(texts, self.dialect), None
            except UnreadableLiteral as exc:
                raise _Unsupported(str(exc)) from None
        if kind == "number":
            return float(text) if any(c in text for c in ".eE") else int(text), None
        if kind == "ident" and text.upper() in ("TRUE", "FALSE"):
            return text.upper() == "TRUE", None
        if kind == "ident" and text.upper() == "NULL":
            return None, None
        if kind == "ident" and text.upper() in ("DATE", "TIMESTAMP"):
            value, typed = self.literal(adjacent=False)  # DATE '2026-11-01' compares as its ISO string
            if not isinstance(value, str) or typed is not None:
                raise _Unsupported(f"{text} is not followed by a quoted value")
            return value, text.upper()
        raise _Unsupported(f"expected a value, found {text}")

    def value_for(self, column: str, literal: tuple[Literal, str | None]) -> Literal:
        """The literal's value, where comparing it with `column` in Python is what Spark does."""
        value, typed = literal
        type_name = self.type_of(column)
        if not literal_fits(type_name, value, typed):
            shown = f"{typed} {value!r}" if typed else repr(value)
            raise _Unsupported(f"{column} ({type_name}) is compared with {shown}, which Spark casts first")
        return value

    def column(self) -> str:
        tok = self.peek()
        name = self.expect("ident", "a column")
        if name.upper() in ("TRUE", "FALSE", "NULL", "AND", "OR", "NOT"):
            raise _Unsupported(f"expected a column, found {name}")
        if self.peek() == ("punct", "("):
            raise _Unsupported(f"{name}(...) is a function call")
        bare = name[1:-1].replace("``", "`") if name.startswith("`") else name
        column = self.column_of(bare)
        if column is None:
            raise _Unsupported(f"{_shown(tok)} is not a column of the table")
        return column

    def atom(self) -> Expr:
        tok = self.peek()
        if tok == ("punct", "("):
            self.i += 1
            inner = self.or_expr()
            self.expect("punct", "a closing parenthesis", ")")
            return inner
        if tok and tok[0] == "ident" and tok[1].upper() in ("TRUE", "FALSE"):
            self.i += 1
            return Const(tok[1].upper() == "TRUE")
        if tok and tok[0] in ("string", "number"):
            # literal on the left: `'x' = col`
            literal = self.literal()
            op = self.expect("op", "a comparison")
            col = self.column()
            value = self.value_for(col, literal)
            mirrored = {"<": ">", ">": "<", "<=": ">=", ">=": "<="}.get(op, op)
            return self._compare(col, mirrored, value)
        col = self.column()
        if self.keyword("IS"):
            negated = self.keyword("NOT")
            if not self.keyword("NULL"):
                raise _Unsupported(f"expected NULL after IS, found {_shown(self.peek())}")
            return IsNull(col, negated)
        negated = self.keyword("NOT")
        if self.keyword("IN"):
            self.expect("punct", "( after IN", "(")
            values = [self.value_for(col, self.literal())]
            while self.peek() == ("punct", ","):
                self.i += 1
                values.append(self.value_for(col, self.literal()))
            self.expect("punct", "a closing parenthesis", ")")
            return In(col, tuple(values), negated)
        if self.keyword("BETWEEN"):
            low = self.value_for(col, self.literal())
            if not self.keyword("AND"):
                raise _Unsupported(f"expected AND in BETWEEN, found {_shown(self.peek())}")
            high = self.value_for(col, self.literal())
            between = And((Compare(col, ">=", low), Compare(col, "<=", high)))
            return Not(between) if negated else between
        if negated:
            raise _Unsupported(f"expected IN or BETWEEN after NOT, found {_shown(self.peek())}")
        op = self.expect("op", f"a comparison after {col}")
        value = self.value_for(col, self.literal())
        return self._compare(col, op, value)

    @staticmethod
    def _compare(col: str, op: str, value: Literal) -> Expr:
        op = {"==": "=", "<>": "!="}.get(op, op)
        if op not in COMPARISONS:
            raise _Unsupported(f"{op} is outside that subset")
        if value is None:
            return Const(False)  # `x = NULL` is never true in SQL
        return Compare(col, op, value)


def _shown(tok: tuple[str, str] | None) -> str:
    return "the end" if tok is None else tok[1]


Columns = Sequence[str] | Mapping[str, str]

#: what `read_predicate` understands, for messages that say what to write instead
SUBSET = (
    "comparisons of a column with a literal (=, ==, !=, <>, <, <=, >, >=), IN, BETWEEN, IS [NOT] NULL, AND, OR, "
    "NOT and parentheses"
)


@dataclass(frozen=True)
class Reading:
    """What core understood of a SQL predicate: `expr` (None: nothing, so the whole table) and, for
    each part it left out, that part and why."""

    text: str
    expr: Expr | None
    left_out: tuple[tuple[str, str], ...] = ()

    @property
    def complete(self) -> bool:
        return not self.left_out

    def describe_left_out(self) -> str:
        """`'id % 2 = 0' (% is outside that subset)`, one such part after another."""
        return "; ".join(f"{part!r} ({why})" for part, why in self.left_out)


def read_predicate(text: str, columns: Columns, *, dialect: Dialect = SPARK_DEFAULTS) -> Reading:
    """Parse a SQL predicate over `columns`: the subset (`SUBSET`), with column names optionally
    qualified (`t.dt`), every string literal Spark reads (escapes, doubled quotes, double-quoted, raw,
    adjacent ones concatenated) with the value Spark gives it, DATE '...' literals, TRUE and FALSE.

    Given {name: type} (what a table's metadata knows), a comparison Spark would answer with a cast is
    left out too. A top-level AND keeps the parts it understands: fewer conjuncts select more rows, so a
    read set only widens (`dt = 'b' AND id % 2 = 0` still narrows to partition b)."""
    by_lower = {c.lower(): c for c in columns}

    def column_of(name: str) -> str | None:
        *qualifiers, bare = name.split(".")
        if any(q.lower() in by_lower for q in qualifiers):
            # `address.city` is a STRUCT column's field, not the column `city`: left out, which only
            # widens a read (a qualifier that names no column is a table or alias, `t.dt`)
            return None
        return by_lower.get(bare.lower())

    type_of = _types_of(columns)
    try:
        return Reading(text, _Parser(text, column_of, type_of, dialect).parse())
    except _Unsupported:
        pass
    return _readable_conjuncts(text, column_of, type_of, dialect)


def parse_predicate(text: str, columns: Columns, *, dialect: Dialect = SPARK_DEFAULTS) -> Expr | None:
    """`read_predicate`'s tree: None means "could not understand", which callers treat as a read of the
    whole table (conservative), never as "reads nothing"."""
    return read_predicate(text, columns, dialect=dialect).expr


def _types_of(columns: Columns) -> Callable[[str], str | None]:
    types = dict(columns) if isinstance(columns, Mapping) else {}
    return types.get


def _readable_conjuncts(
    text: str, column_of: Callable[[str], str | None], type_of: Callable[[str], str | None], dialect: Dialect
) -> Reading:
    """The AND of the top-level conjuncts the parser understands (None if none), and the others."""
    kept: list[Expr] = []
    left_out: list[tuple[str, str]] = []
    for part in split_conjuncts(text):
        try:
            kept.append(_Parser(part, column_of, type_of, dialect).parse())
        except _Unsupported as exc:
            left_out.append((part, str(exc)))
    if not kept:
        return Reading(text, None, tuple(left_out) or ((text, "it is empty"),))
    return Reading(text, kept[0] if len(kept) == 1 else And(tuple(kept)), tuple(left_out))


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


def parse_target_predicate(
    condition: str, columns: Columns, alias: str, *, dialect: Dialect = SPARK_DEFAULTS
) -> Expr | None:
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

    return _readable_conjuncts(condition, column_of, _types_of(columns), dialect).expr
