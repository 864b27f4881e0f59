"""The filters Spark pushes into the `acidtables` data source, as core predicates that prune files.

The data source hands every filter back to Spark, which evaluates it on the rows it reads, so a filter
translated here only decides which files are never opened: a translation may select more than the
filter does, never less. A filter is translated where comparing its value with the log's stored values
in Python gives Spark's answer (`literal_fits`: the rule SQL predicates follow too); anything else
(string matching, nested columns, timestamps, decimals) is left to Spark alone and prunes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date, datetime
from typing import Any

from pyspark.sql import datasource as spark_filters

from acidtables.core import And, Compare, Expr, In, IsNull, Literal, Not, Or, TableMetadata, literal_fits

_COMPARISONS: Mapping[type[spark_filters.Filter], str] = {
    spark_filters.EqualTo: "=",
    spark_filters.GreaterThan: ">",
    spark_filters.GreaterThanOrEqual: ">=",
    spark_filters.LessThan: "<",
    spark_filters.LessThanOrEqual: "<=",
}

_UNTRANSLATED = object()


def pushed_predicate(filters: Sequence[spark_filters.Filter], meta: TableMetadata) -> Expr | None:
    """The AND of the filters that translate, or None when none does (nothing to prune by)."""
    columns = {c.name.lower(): (c.name, c.type) for c in meta.columns}
    parts = [expr for f in filters if (expr := _translate(f, columns)) is not None]
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else And(tuple(parts))


def _translate(f: spark_filters.Filter, columns: Mapping[str, tuple[str, str]]) -> Expr | None:
    if isinstance(f, spark_filters.Not):
        child = _translate(f.child, columns)
        if child is None:
            return None
        if isinstance(f.child, spark_filters.EqualNullSafe) and isinstance(child, Compare):
            # `<=>` is never NULL, so its negation holds for NULLs too, which a negated `=` would drop
            return Or((IsNull(child.column), Compare(child.column, "!=", child.value)))
        return Not(child)
    attribute: tuple[str, ...] = getattr(f, "attribute", ())
    if len(attribute) != 1 or attribute[0].lower() not in columns:
        return None  # a nested field, or a column the table does not have
    name, type_name = columns[attribute[0].lower()]
    if isinstance(f, spark_filters.IsNull | spark_filters.IsNotNull):
        return IsNull(name, negated=isinstance(f, spark_filters.IsNotNull))
    if isinstance(f, spark_filters.EqualNullSafe):
        if f.value is None:
            return IsNull(name)
        value = _literal(type_name, f.value)
        return None if value is _UNTRANSLATED else Compare(name, "=", value)
    if isinstance(f, spark_filters.In):
        # a NULL among the values never makes IN true, so leaving it out selects the same rows
        values = [_literal(type_name, v) for v in f.value if v is not None]
        if not values or any(v is _UNTRANSLATED for v in values):
            return None
        return In(name, tuple(values))
    op = _COMPARISONS.get(type(f))
    if op is None:
        return None  # string matching: Spark's alone
    value = _literal(type_name, getattr(f, "value", None))
    return None if value is _UNTRANSLATED else Compare(name, op, value)


def _literal(type_name: str, value: Any) -> Any:
    """`value` as the log stores it for a column of `type_name`, or _UNTRANSLATED where a Python
    comparison with stored values could differ from Spark's."""
    if isinstance(value, datetime):
        return _UNTRANSLATED
    if isinstance(value, date):
        text = value.isoformat()
        return text if literal_fits(type_name, text, "DATE") else _UNTRANSLATED
    if value is None or not isinstance(value, str | int | float | bool) or value != value:
        return _UNTRANSLATED  # NaN too: Spark orders it above every number, Python never
    literal: Literal = value
    return literal if literal_fits(type_name, literal, None) else _UNTRANSLATED


__all__ = ["pushed_predicate"]
