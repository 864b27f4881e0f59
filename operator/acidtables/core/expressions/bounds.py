"""Evaluation: can a predicate be true for some row of a file whose columns lie within known bounds?

Conflict detection (§13.1 rule 4, D-17) and read pruning ask the same question, so one evaluator serves
both. It is conservative: unknown columns and mixed types count as "might match".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from acidtables.core.expressions.tree import And, Compare, Const, Expr, In, IsNull, Literal, Not, Or, negate


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


def _comparable(a: Literal, b: Literal) -> bool:
    if a is None or b is None:
        return False
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool)
    if isinstance(a, int | float) and isinstance(b, int | float):
        return True
    return type(a) is type(b)


def _compare_might_match(bounds: ColumnBounds, op: str, value: Literal) -> bool:
    """Either bound may be unknown (None): a floating-point column keeps only its lower one."""
    if bounds.only_nulls:
        return False  # a comparison with NULL is never true
    lower, upper = bounds.lower, bounds.upper
    if value is None:
        return False
    if lower is None and upper is None:
        return True  # no statistics: anything may be there
    if any(b is not None and not _comparable(b, value) for b in (lower, upper)):
        return True  # mismatched types: don't guess
    lo: Any = lower
    hi: Any = upper
    v: Any = value
    if op == "=":
        return (lo is None or lo <= v) and (hi is None or v <= hi)
    if op == "!=":
        return not (lo is not None and lo == hi == v)
    if op == "<":
        return lo is None or bool(lo < v)
    if op == "<=":
        return lo is None or bool(lo <= v)
    if op == ">":
        return hi is None or bool(hi > v)
    if op == ">=":
        return hi is None or bool(hi >= v)
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
        return might_match(negate(expr.child), bounds)
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
