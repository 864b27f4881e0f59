"""Predicates that core can evaluate against partition values and file statistics, without Spark.

Conflict detection needs to know whether a file a concurrent commit added *might* hold rows a transaction
read (conflict-rules §13.1 rule 4, D-17), and readers prune files the same way before Spark opens them.
`tree` is the syntax tree and its stored form, `bounds` the one evaluator (`might_match`), `sql`
turns the common subset of SQL predicates users write into a tree (saying what it left out), and
`literals` reads Spark's string literals as Spark does.
"""

from acidtables.core.expressions.bounds import ColumnBounds, might_match
from acidtables.core.expressions.literals import SPARK_DEFAULTS, Dialect
from acidtables.core.expressions.sql import (
    SUBSET,
    Reading,
    literal_fits,
    parse_predicate,
    parse_target_predicate,
    read_predicate,
    split_conjuncts,
)
from acidtables.core.expressions.text import expr_sql
from acidtables.core.expressions.tree import (
    TRUE,
    And,
    Compare,
    Const,
    Expr,
    In,
    IsNull,
    Literal,
    Not,
    Or,
    expr_from_json,
    in_partitions,
    negate,
    restrict_to_columns,
)

__all__ = [
    "SPARK_DEFAULTS",
    "SUBSET",
    "TRUE",
    "And",
    "ColumnBounds",
    "Compare",
    "Const",
    "Dialect",
    "Expr",
    "In",
    "IsNull",
    "Literal",
    "Not",
    "Or",
    "Reading",
    "expr_from_json",
    "expr_sql",
    "in_partitions",
    "literal_fits",
    "might_match",
    "negate",
    "parse_predicate",
    "parse_target_predicate",
    "read_predicate",
    "restrict_to_columns",
    "split_conjuncts",
]
