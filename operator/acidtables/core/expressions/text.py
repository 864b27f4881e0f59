"""Predicates printed back as Spark SQL: what history shows as a write's `predicate` (Delta Lake's
operationParameters), from the tree a commit record stores."""

from __future__ import annotations

import math

from acidtables.core.expressions.tree import And, Compare, Const, Expr, In, IsNull, Literal, Not, Or


def expr_sql(expr: Expr) -> str:
    """`expr` as a Spark SQL condition that means the same."""
    if isinstance(expr, Const):
        return "true" if expr.value else "false"
    if isinstance(expr, Compare):
        return f"{_name(expr.column)} {expr.op} {_literal(expr.value)}"
    if isinstance(expr, In):
        values = ", ".join(_literal(v) for v in expr.values)
        return f"{_name(expr.column)} {'NOT IN' if expr.negated else 'IN'} ({values})"
    if isinstance(expr, IsNull):
        return f"{_name(expr.column)} IS {'NOT NULL' if expr.negated else 'NULL'}"
    if isinstance(expr, And | Or):
        joiner = " AND " if isinstance(expr, And) else " OR "
        return joiner.join(f"({expr_sql(c)})" for c in expr.children)
    if isinstance(expr, Not):
        return f"NOT ({expr_sql(expr.child)})"
    raise TypeError(f"not a predicate node: {expr!r}")


def _name(column: str) -> str:
    # always quoted: a column named null, true or date would otherwise read back as something else
    return "`" + column.replace("`", "``") + "`"


def _literal(value: Literal) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, float) and not math.isfinite(value):
        spelled = "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
        return f"CAST('{spelled}' AS DOUBLE)"
    return repr(value)
