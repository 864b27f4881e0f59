"""Spark's pushed filters as core predicates: a translation may select more files than its filter, never
fewer (the data source hands every filter back to Spark, so pruning is all a translation decides)."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import datasource as sf

from acidtables.core import And, Column, Compare, In, IsNull, Not, Or, TableMetadata, might_match
from acidtables.core.expressions import ColumnBounds
from acidtables.spark.pushed_filters import pushed_predicate

COLUMNS = (Column("id", "BIGINT"), Column("dt", "STRING"), Column("day", "DATE"), Column("amount", "DOUBLE"))
META = TableMetadata(
    table_id="t", name="s.t", location="/tmp/t", columns=(*COLUMNS, Column("ts", "TIMESTAMP")), partition_by=("dt",)
)


@pytest.fixture(scope="module")
def meta() -> TableMetadata:
    return META


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ([sf.EqualTo(("dt",), "a")], Compare("dt", "=", "a")),
        ([sf.EqualTo(("DT",), "a")], Compare("dt", "=", "a")),  # Spark's case, the table's name
        (
            [sf.GreaterThan(("id",), 3), sf.LessThanOrEqual(("id",), 9)],
            And((Compare("id", ">", 3), Compare("id", "<=", 9))),
        ),
        ([sf.In(("dt",), ("a", None, "b"))], In("dt", ("a", "b"))),
        ([sf.IsNull(("dt",))], IsNull("dt")),
        ([sf.IsNotNull(("dt",))], IsNull("dt", negated=True)),
        ([sf.EqualNullSafe(("dt",), None)], IsNull("dt")),
        ([sf.Not(sf.EqualTo(("dt",), "a"))], Not(Compare("dt", "=", "a"))),
        # `<=>` is never NULL: its negation keeps the NULLs a negated `=` would drop
        ([sf.Not(sf.EqualNullSafe(("dt",), "a"))], Or((IsNull("dt"), Compare("dt", "!=", "a")))),
        ([sf.EqualTo(("day",), date(2026, 11, 1))], Compare("day", "=", "2026-11-01")),
        # left to Spark: string matching, timestamps, decimals, NaN, nested fields, unknown columns
        ([sf.StringStartsWith(("dt",), "a")], None),
        ([sf.EqualTo(("ts",), datetime(2026, 11, 1))], None),
        ([sf.EqualTo(("amount",), Decimal("1.5"))], None),
        ([sf.EqualTo(("amount",), float("nan"))], None),
        ([sf.EqualTo(("id", "x"), 1)], None),
        ([sf.EqualTo(("nope",), 1)], None),
        ([sf.In(("dt",), (None,))], None),
        ([sf.In(("id",), (1, Decimal("2")))], None),
        ([sf.Not(sf.StringContains(("dt",), "a"))], None),
        # a value Spark would cast before comparing is not compared in Python
        ([sf.EqualTo(("id",), "7")], None),
    ],
)
def test_filters_translate_where_python_compares_as_spark_does(
    meta: TableMetadata, filters: list[sf.Filter], expected: Any
) -> None:
    assert pushed_predicate(filters, meta) == expected


VALUES = {
    "id": st.one_of(st.none(), st.integers(-5, 5)),
    "dt": st.one_of(st.none(), st.sampled_from(["", "a", "b", "ab"])),
    "day": st.one_of(st.none(), st.dates(date(2026, 1, 1), date(2026, 1, 9))),
}


def _filters() -> st.SearchStrategy[sf.Filter]:
    def on(column: str) -> st.SearchStrategy[sf.Filter]:
        value = VALUES[column].filter(lambda v: v is not None)
        comparisons = st.sampled_from(
            [sf.EqualTo, sf.GreaterThan, sf.GreaterThanOrEqual, sf.LessThan, sf.LessThanOrEqual]
        )
        return st.one_of(
            st.builds(lambda kind, v: kind((column,), v), comparisons, value),
            st.builds(lambda vs: sf.In((column,), tuple(vs)), st.lists(VALUES[column], min_size=1, max_size=3)),
            st.builds(lambda v: sf.EqualNullSafe((column,), v), VALUES[column]),
            st.just(sf.IsNull((column,))),
            st.just(sf.IsNotNull((column,))),
        )

    leaf = st.one_of(*(on(c) for c in VALUES))
    return st.one_of(leaf, st.builds(sf.Not, leaf))


def _holds(f: sf.Filter, row: dict[str, Any]) -> bool | None:
    """Spark's three-valued answer for one row."""
    if isinstance(f, sf.Not):
        inner = _holds(f.child, row)
        return None if inner is None else not inner
    value = row[getattr(f, "attribute")[0]]  # noqa: B009 (every leaf filter has one; Filter does not say so)
    if isinstance(f, sf.IsNull):
        return value is None
    if isinstance(f, sf.IsNotNull):
        return value is not None
    if isinstance(f, sf.EqualNullSafe):
        return bool(value == f.value)
    if value is None:
        return None
    if isinstance(f, sf.In):
        if value in [v for v in f.value if v is not None]:
            return True
        return None if None in f.value else False
    ops = {sf.EqualTo: "__eq__", sf.GreaterThan: "__gt__", sf.GreaterThanOrEqual: "__ge__", sf.LessThan: "__lt__"}
    return bool(getattr(value, ops.get(type(f), "__le__"))(getattr(f, "value")))  # noqa: B009


def _stored(value: Any) -> Any:
    return value.isoformat() if isinstance(value, date) else value


@settings(max_examples=400)
@given(
    rows=st.lists(st.fixed_dictionaries(VALUES), min_size=1, max_size=3),
    filters=st.lists(_filters(), min_size=1, max_size=2),
)
def test_a_file_holding_a_matching_row_is_never_pruned(rows: list[dict[str, Any]], filters: list[sf.Filter]) -> None:
    """A file of `rows` (its statistics as the log keeps them) with a row every filter holds for must
    be kept by the translated predicate."""
    predicate = pushed_predicate(filters, META)
    if predicate is None or not any(all(_holds(f, r) for f in filters) for r in rows):
        return
    bounds = {}
    for column in VALUES:
        present = [_stored(r[column]) for r in rows if r[column] is not None]
        nulls = any(r[column] is None for r in rows)
        bounds[column] = ColumnBounds(
            lower=min(present) if present else None,
            upper=max(present) if present else None,
            has_nulls=nulls,
            only_nulls=not present,
        )
    assert might_match(predicate, bounds)
