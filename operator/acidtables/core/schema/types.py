"""The column types a table may declare, checked where a schema is received (create_table, alter_table,
merge_schema) and spelled one way in the log.

Keywords are upper-cased; the names of STRUCT fields keep their case (Parquet and Spark match nested
fields by name, so `STRUCT<userId: BIGINT>` must not come back as `USERID`). Anything outside the set
is refused with the list, instead of being accepted and failing at the first write or read.
"""

from __future__ import annotations

import re

from acidtables.core.errors import AcidTablesError, InvalidArgumentError
from acidtables.core.names import IDENTIFIER

#: the primitive types, as Spark SQL names them (with its synonyms)
PRIMITIVE_TYPES = (
    "BOOLEAN",
    "TINYINT",
    "BYTE",
    "SMALLINT",
    "SHORT",
    "INT",
    "INTEGER",
    "BIGINT",
    "LONG",
    "FLOAT",
    "REAL",
    "DOUBLE",
    "DECIMAL",
    "STRING",
    "BINARY",
    "DATE",
    "TIMESTAMP",
    "TIMESTAMP_NTZ",
)
SUPPORTED = (
    ", ".join(PRIMITIVE_TYPES)
    + ", DECIMAL(p,s), CHAR(n), VARCHAR(n), ARRAY<type>, MAP<key type, value type>, STRUCT<name: type, ...>"
)

# [0-9], not \d: \d also matches other scripts' digits, which int() reads but Spark's type parser refuses
_TOKEN = re.compile(r"\s*(?:(?P<word>`[^`]+`|[A-Za-z_][A-Za-z0-9_]*)|(?P<number>[0-9]+)|(?P<punct>[<>(),:]))")


class _Unsupported(AcidTablesError):
    """Control flow inside this module: the text uses something outside the subset (never escapes)."""


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens: list[str] = []
        position = 0
        text = text.strip()
        while position < len(text):
            match = _TOKEN.match(text, position)
            if match is None or match.end() == position:
                raise _Unsupported(f"unexpected {text[position:]!r}")
            self.tokens.append(match.group().strip())
            position = match.end()
        self.position = 0

    def peek(self) -> str | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None or (expected is not None and token.upper() != expected):
            raise _Unsupported(f"expected {expected or 'more'}, found {token!r}")
        self.position += 1
        return token

    def number(self) -> str:
        token = self.take()
        if not (token.isascii() and token.isdigit()):
            raise _Unsupported(f"expected a number, found {token!r}")
        return token

    def type_(self) -> str:
        word = self.take().upper()
        if word in ("ARRAY", "MAP", "STRUCT"):
            self.take("<")
            if word == "ARRAY":
                inner = self.type_()
                self.take(">")
                return f"ARRAY<{inner}>"
            if word == "MAP":
                key = self.type_()
                self.take(",")
                value = self.type_()
                self.take(">")
                return f"MAP<{key}, {value}>"
            fields = []
            while True:
                name = self.take().strip("`")
                if not IDENTIFIER.match(name):
                    raise _Unsupported(f"field name {name!r} is not a plain identifier")
                if self.peek() == ":":
                    self.take(":")
                fields.append(f"{name}: {self.type_()}")
                if self.peek() == ",":
                    self.take(",")
                    continue
                self.take(">")
                return f"STRUCT<{', '.join(fields)}>"
        if word == "DECIMAL" and self.peek() == "(":
            self.take("(")
            precision = self.number()
            self.take(",")
            scale = self.number()
            self.take(")")
            if not 1 <= int(precision) <= 38 or int(scale) > int(precision):
                raise _Unsupported(f"DECIMAL({precision},{scale}) is out of range (precision 1-38, scale <= precision)")
            return f"DECIMAL({precision},{scale})"
        if word in ("CHAR", "VARCHAR"):
            self.take("(")
            length = self.number()
            self.take(")")
            return f"{word}({length})"
        if word not in PRIMITIVE_TYPES:
            raise _Unsupported(f"{word} is not a type")
        return word


def inner_type(type_text: str) -> str:
    """`ARRAY<BIGINT>` -> `BIGINT`, `MAP<K, V>` -> `K, V`: what a complex type's brackets hold."""
    return type_text[type_text.index("<") + 1 : type_text.rindex(">")]


def split_top_level(text: str) -> list[str]:
    """`a, MAP<b, c>, DECIMAL(10,2)` -> the comma-separated parts outside brackets, unstripped: how a
    schema string splits into columns and a STRUCT or MAP type into its fields."""
    parts: list[str] = []
    depth, start = 0, 0
    for i, ch in enumerate(text):
        if ch in "(<":
            depth += 1
        elif ch in ")>":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def normalize_type(type_text: str, *, column: str, method: str) -> str:
    """The canonical spelling of a supported column type; InvalidArgumentError naming the column, the
    type and the supported set otherwise."""
    if not isinstance(type_text, str) or not type_text.strip():
        raise InvalidArgumentError(f"{method}(): column {column} has no type; supported types: {SUPPORTED}")
    try:
        parser = _Parser(type_text)
        out = parser.type_()
        if parser.peek() is not None:
            raise _Unsupported(f"unexpected {parser.peek()!r} after the type")
    except _Unsupported as exc:
        raise InvalidArgumentError(
            f"{method}(): column {column} has type {type_text.strip()!r}, which acidtables does not support ({exc}); "
            f"supported types: {SUPPORTED}"
        ) from None
    return out
