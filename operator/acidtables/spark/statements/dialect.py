"""The SQL acidtables reads: Spark's dialect as sqlglot parses it, plus the statements Spark's own
grammar lacks and the seeds use: MaxCompute's `ALTER TABLE ... [PARTITION (...)] COMPACT MINOR|MAJOR`,
Delta Lake's `OPTIMIZE ... [WHERE ...] [ZORDER BY (...)]`, `RESTORE` and `DESCRIBE DETAIL`, and `SHOW TABLES
[IN|FROM namespace] [LIKE 'pattern']` as a statement with parts (sqlglot keeps it as opaque text).

Why sqlglot and not Spark's parser through the session: Spark hands back a JVM plan that can only be
walked call by call over py4j, and it does not know these statements either (Delta adds them with its
own parser extension, a JVM class). sqlglot is a maintained pure-Python parser whose Spark dialect gives
a tree acidtables can inspect and rewrite (table references to pinned snapshots) and print back as Spark
SQL; it parses a statement in well under a millisecond (bench/README.md).
"""

from __future__ import annotations

from typing import Any, ClassVar, cast

from sqlglot import exp
from sqlglot.dialects.spark import Spark
from sqlglot.errors import ParseError
from sqlglot.parsers.spark import SparkParser
from sqlglot.tokenizer_core import TokenType

from acidtables.core import InvalidArgumentError


class Compact(exp.Expression):
    """The action of `ALTER TABLE t [PARTITION (...)] COMPACT MINOR|MAJOR`."""

    arg_types: ClassVar[dict[str, bool]] = {"this": True}


class Optimize(exp.Expression):
    """`OPTIMIZE t [WHERE predicate] [ZORDER BY (columns)]`."""

    arg_types: ClassVar[dict[str, bool]] = {"this": True, "where": False, "zorder": False}


class Restore(exp.Expression):
    """`RESTORE [TABLE] t [TO] VERSION AS OF n | TIMESTAMP AS OF expression` (Delta Lake's); `version`
    is the clause, as a table reference's time travel is."""

    arg_types: ClassVar[dict[str, bool]] = {"this": True, "version": True}


class ShowTables(exp.Expression):
    """`SHOW TABLES [IN|FROM namespace] [LIKE 'pattern']`."""

    arg_types: ClassVar[dict[str, bool]] = {"this": False, "like": False}


class AcidSparkParser(SparkParser):
    ALTER_TABLE_PARTITIONS = True
    ALTER_PARSERS: ClassVar[dict[str, Any]] = {
        **SparkParser.ALTER_PARSERS,
        "COMPACT": lambda self: self._parse_compact(),
    }
    DESCRIBE_STYLES: ClassVar[set[str]] = {*SparkParser.DESCRIBE_STYLES, "DETAIL"}

    def _parse_compact(self) -> Compact:
        kind = self._parse_var(any_token=True)
        return self.expression(Compact(this=exp.var(kind.name.upper()) if kind else None))

    def _parse_statement(self) -> exp.Expr | None:
        if self._curr and self._curr.text.upper() == "OPTIMIZE" and self._next:
            self._advance()
            table = self._parse_table_parts()
            where = self._parse_where()
            zorder = None
            if self._match_text_seq("ZORDER", "BY"):
                zorder = exp.Tuple(expressions=self._parse_wrapped_csv(self._parse_column))
            return cast(exp.Expr, self.expression(Optimize(this=table, where=where, zorder=zorder)))
        if self._curr and self._curr.text.upper() == "RESTORE" and self._next:
            self._advance()
            self._match(TokenType.TABLE)
            table = self._parse_table_parts()
            self._match_text_seq("TO")
            kind = "VERSION" if self._match_text_seq("VERSION", "AS", "OF") else None
            if kind is None and self._match_text_seq("TIMESTAMP", "AS", "OF"):
                kind = "TIMESTAMP"
            if kind is None:
                self.raise_error("expected VERSION AS OF <version> or TIMESTAMP AS OF <timestamp>")
            clause = exp.Version(this=kind, kind="AS OF", expression=self._parse_bitwise())
            return cast(exp.Expr, self.expression(Restore(this=table, version=clause)))
        if self._curr and self._curr.token_type == TokenType.SHOW:
            self._advance()
            if not self._match_text_seq("TABLES"):
                return cast(exp.Expr, self._parse_as_command(self._prev))
            namespace = self._parse_table_parts() if self._match_set((TokenType.IN, TokenType.FROM)) else None
            like = self._parse_string() if self._match(TokenType.LIKE) else None
            return cast(exp.Expr, self.expression(ShowTables(this=namespace, like=like)))
        return super()._parse_statement()


class AcidSpark(Spark):
    class Tokenizer(Spark.Tokenizer):
        # SHOW is parsed into parts (AcidSparkParser) rather than kept as an opaque command
        COMMANDS: ClassVar[set[TokenType]] = Spark.Tokenizer.COMMANDS - {TokenType.SHOW}
        # OPTIMIZE too: a plain word to the tokenizer, a statement to AcidSparkParser
        KEYWORDS: ClassVar[dict[str, TokenType]] = {
            k: v for k, v in Spark.Tokenizer.KEYWORDS.items() if k != "OPTIMIZE"
        }
        # Spark reads a doubled quote inside a literal as one quote ('it''s' is it's, "a""b" is a"b); as
        # sqlglot's Spark dialect reads them, two literals concatenated, a WHERE would name another value
        STRING_ESCAPES: ClassVar[list[str]] = [*Spark.Tokenizer.STRING_ESCAPES, "'", '"']

    Parser = AcidSparkParser


def parse_statement(statement: str) -> exp.Expr:
    """One statement's tree; a syntax error is an InvalidArgumentError that quotes sqlglot's account of
    where the text stops making sense."""
    if not isinstance(statement, str) or not statement.strip():
        raise InvalidArgumentError("sql(): expected one SQL statement as a non-empty string")
    try:
        trees = [t for t in AcidSpark().parse(statement) if t is not None]
    except ParseError as exc:
        detail = exc.errors[0]["description"] if exc.errors else str(exc)
        raise InvalidArgumentError(f"sql(): cannot parse {statement.strip()!r}: {detail}") from None
    if len(trees) != 1:
        raise InvalidArgumentError(f"sql(): expected exactly one statement, found {len(trees)}")
    return trees[0]
