"""Spark SQL string literals read as Spark reads them, so a predicate core prunes with names the value
Spark's filter then compares (issue 41: `'back\\slash'` read as anything else would prune to the wrong
partition, or to none).

`sql` cuts the tokens and calls `string_value` on each run of adjacent string tokens. The rules are
Spark 4.3's (`SparkParserUtils.unescapeSQLString` and the lexer's STRING_LITERAL / DOUBLEQUOTED_STRING),
under its default session settings; `Dialect` names the two settings that change them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from acidtables.core.errors import AcidTablesError


@dataclass(frozen=True)
class Dialect:
    """The Spark session settings that change what a quoted literal means; the defaults are Spark's."""

    #: spark.sql.parser.escapedStringLiterals: backslashes are kept as written (Spark 1.6's behaviour)
    escaped_string_literals: bool = False
    #: spark.sql.ansi.doubleQuotedIdentifiers (with ANSI mode on): "x" names a column, not a string
    double_quoted_identifiers: bool = False


SPARK_DEFAULTS = Dialect()

#: what Spark's appendEscapedChar gives for a backslash and one character; any other character stands
#: for itself, and `\%` and `\_` keep their backslash (for LIKE, as MySQL does)
_ESCAPED = {"0": "\u0000", "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\u001a", "%": "\\%", "_": "\\_"}
_HEX = frozenset("0123456789abcdefABCDEF")


class UnreadableLiteral(AcidTablesError):
    """A literal whose value core cannot state as Spark would (the message says why); the parser turns
    it into "not understood", so it never reaches a caller."""


def string_value(tokens: Sequence[str], dialect: Dialect = SPARK_DEFAULTS) -> str:
    """The value of adjacent string literal tokens (`'it''s'`, `"a" 'b'`, `R'\\d'`): Spark concatenates
    them, whatever lies between (blanks, comments). Raises UnreadableLiteral where Spark's value is not a
    Python string equal to it (a lone UTF-16 surrogate, which Spark turns into '?') or depends on a
    setting core does not model."""
    return "".join(_one(token, dialect) for token in tokens)


def _one(token: str, dialect: Dialect) -> str:
    if token[0] in "rR":
        return token[2:-1]  # a raw literal: every character as written
    quote = token[0]
    if quote == '"' and dialect.double_quoted_identifiers:
        raise UnreadableLiteral(f"{token} names a column in this session (spark.sql.ansi.doubleQuotedIdentifiers)")
    body = token[1:-1]
    if dialect.escaped_string_literals and ("\\" in body or quote * 2 in body):
        raise UnreadableLiteral(
            f"{token} is read with spark.sql.parser.escapedStringLiterals, which core does not model"
        )
    # Java strings are UTF-16: an escape may give half of a surrogate pair, and two halves one character
    units: list[str] = []
    i, end = 0, len(body)
    while i < end:
        c = body[i]
        if c == quote and i + 1 < end and body[i + 1] == quote:  # '' inside '...', "" inside "..."
            units.append(quote)
            i += 2
        elif c != "\\" or i + 1 == end:
            units.append(c)
            i += 1
        else:
            i += 1
            after = body[i]
            if after == "u" and _hex(body, i + 1, 4):
                units.append(chr(int(body[i + 1 : i + 5], 16)))
                i += 5
            elif after == "U" and _hex(body, i + 1, 8):
                units.extend(_code_point_units(int(body[i + 1 : i + 9], 16)))
                i += 9
            elif i + 3 <= end and body[i] in "01" and body[i + 1] in "01234567" and body[i + 2] in "01234567":
                units.append(chr(int(body[i : i + 3], 8)))  # \000 to \177: Spark reads no higher octal
                i += 3
            else:
                units.append(_ESCAPED.get(after, after))
                i += 1
    return _from_utf16("".join(units), token)


def _hex(text: str, start: int, length: int) -> bool:
    return start + length <= len(text) and all(c in _HEX for c in text[start : start + length])


def _code_point_units(code_point: int) -> list[str]:
    """`\\UXXXXXXXX` as Spark splits it into UTF-16 units, beyond U+10FFFF too (which gives lone halves)."""
    if code_point < 0x10000:
        return [chr(code_point)]
    high = (code_point - 0x10000) // 0x400 + 0xD800
    low = (code_point - 0x10000) % 0x400 + 0xDC00
    return [chr(high & 0xFFFF), chr(low & 0xFFFF)]


def _from_utf16(units: str, token: str) -> str:
    """Join surrogate halves into characters, as a Java string holds them; a half left alone is what
    Spark writes as '?' when it makes the value UTF-8, so no stored value compares equal to it here."""
    text = units.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    if any("\ud800" <= c <= "\udfff" for c in text):
        raise UnreadableLiteral(f"{token} holds a lone UTF-16 surrogate, which Spark reads as '?'")
    return text
