"""The predicate language core evaluates against partition values and statistics (pure, no etcd)."""

from __future__ import annotations

import pytest

from acidtables.core.expressions import (
    TRUE,
    And,
    ColumnBounds,
    Compare,
    Dialect,
    Expr,
    expr_from_json,
    expr_sql,
    might_match,
    parse_predicate,
    read_predicate,
    restrict_to_columns,
    split_conjuncts,
)

COLUMNS = ["id", "dt", "amount", "name"]


def bounds(**cols: tuple[object, object]) -> dict[str, ColumnBounds]:
    return {k: ColumnBounds(lo, hi) for k, (lo, hi) in cols.items()}  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("predicate", "file", "expected"),
    [
        ("dt = '2026-11-01'", {"dt": ("2026-11-01", "2026-11-01")}, True),
        ("dt = '2026-11-01'", {"dt": ("2026-11-02", "2026-11-02")}, False),
        ("id > 10", {"id": (1, 10)}, False),
        ("id >= 10", {"id": (1, 10)}, True),
        ("10 < id", {"id": (1, 10)}, False),
        ("id BETWEEN 3 AND 4", {"id": (5, 9)}, False),
        ("id NOT BETWEEN 3 AND 9", {"id": (5, 9)}, False),
        ("id IN (1, 2)", {"id": (3, 9)}, False),
        ("id NOT IN (4)", {"id": (4, 4)}, False),
        ("id != 4", {"id": (4, 4)}, False),
        ("NOT (id < 5)", {"id": (1, 4)}, False),
        ("id = 1 OR dt = 'x'", {"id": (5, 9), "dt": ("x", "x")}, True),
        ("t.amount < 0 AND dt = 'a'", {"amount": (0.0, 9.5), "dt": ("a", "a")}, False),
        ("amount < 0", {"dt": ("a", "a")}, True),  # no statistics for amount: might match
        ("name = 'x'", {"name": (1, 2)}, True),  # mismatched types: don't guess
        ("dt = DATE '2026-11-01'", {"dt": ("2026-11-01", "2026-11-01")}, True),
        ("name = 'it''s'", {"name": ("it's", "it's")}, True),
        ("id = NULL", {"id": (1, 2)}, False),
    ],
)
def test_might_match(predicate: str, file: dict[str, tuple[object, object]], expected: bool) -> None:
    expr = parse_predicate(predicate, COLUMNS)
    assert expr is not None
    assert might_match(expr, bounds(**file)) is expected


def test_unreadable_conjuncts_are_dropped_which_only_widens() -> None:
    expr = parse_predicate("dt = 'b' AND id % 2 = 0 AND upper(name) = 'X'", COLUMNS)
    assert expr == parse_predicate("dt = 'b'", COLUMNS)
    assert parse_predicate("dt = 'b' OR id % 2 = 0", COLUMNS) is None  # an OR cannot be narrowed that way


@pytest.mark.parametrize(
    "predicate",
    ["t.id = s.id", "upper(name) = 'X'", "id + 1 = 2", "id = (SELECT 1)", "id LIKE 'a%'", "unknown_col = 1", "id ="],
)
def test_predicates_beyond_the_subset_are_not_understood(predicate: str) -> None:
    assert parse_predicate(predicate, COLUMNS) is None


def test_null_partition_values() -> None:
    null = {"dt": ColumnBounds.exact(None)}
    assert might_match(parse_predicate("dt IS NULL", COLUMNS), null)  # type: ignore[arg-type]
    assert not might_match(parse_predicate("dt = 'a'", COLUMNS), null)  # type: ignore[arg-type]
    assert not might_match(parse_predicate("dt IS NOT NULL", COLUMNS), null)  # type: ignore[arg-type]


def test_restricting_to_partition_columns_widens_the_rest() -> None:
    expr = parse_predicate("dt = 'a' AND amount < 0", COLUMNS)
    assert expr is not None
    narrowed = restrict_to_columns(expr, frozenset({"dt"}))
    assert might_match(narrowed, bounds(dt=("a", "a")))
    assert not might_match(narrowed, bounds(dt=("b", "b")))
    negated = parse_predicate("NOT (dt = 'a' AND amount < 0)", COLUMNS)
    assert negated is not None
    assert restrict_to_columns(negated, frozenset({"dt"})) != TRUE
    assert might_match(restrict_to_columns(negated, frozenset({"dt"})), bounds(dt=("a", "a")))


def test_json_round_trip() -> None:
    expr = parse_predicate("(dt IN ('a', 'b') OR id IS NOT NULL) AND NOT amount >= 1.5", COLUMNS)
    assert expr is not None
    assert expr_from_json(expr.to_json()) == expr
    assert Compare("id", "=", 1).columns() == frozenset({"id"})


def test_split_conjuncts_cuts_only_top_level_ands() -> None:
    assert split_conjuncts("dt = 'b' AND id % 2 = 0") == ["dt = 'b'", "id % 2 = 0"]
    assert split_conjuncts("a BETWEEN 1 AND 3 AND dt = 'x'") == ["a BETWEEN 1 AND 3", "dt = 'x'"]
    assert split_conjuncts("(a = 1 AND b = 2) and c = 3") == ["(a = 1 AND b = 2)", "c = 3"]
    assert split_conjuncts("x = 'it''s AND' AND t.and = 1 AND band = 2") == ["x = 'it''s AND'", "t.and = 1", "band = 2"]


@pytest.mark.parametrize(
    "condition",
    [
        "dt = 'a' AND amount >= 2.5",
        "id IN (1, 2, 3) OR note IS NULL",
        "NOT (dt <> 'a') AND note IS NOT NULL",
        "`null` = 1",
    ],
)
def test_a_stored_predicate_printed_as_sql_parses_back_to_itself(condition: str) -> None:
    """History shows what a commit read as SQL (expr_sql); parsed again it is the same predicate, a
    column named like a keyword included."""
    types = {"dt": "STRING", "amount": "DOUBLE", "id": "BIGINT", "note": "STRING", "null": "INT"}
    parsed = parse_predicate(condition, types)
    assert parsed is not None
    assert parse_predicate(expr_sql(parsed), types) == parsed


def test_printed_strings_and_infinities_read_back_as_spark_reads_them() -> None:
    import sqlglot
    from sqlglot import exp

    value = "it's a back\\slash"
    printed = expr_sql(Compare("note", "=", value))
    [literal] = sqlglot.parse_one(printed, read="spark").find_all(exp.Literal)
    assert literal.this == value  # Spark's escapes: \' and \\
    assert expr_sql(Compare("amount", "<", float("inf"))) == "`amount` < CAST('Infinity' AS DOUBLE)"
    assert expr_sql(Compare("amount", "=", float("nan"))) == "`amount` = CAST('NaN' AS DOUBLE)"


@pytest.mark.parametrize(
    ("predicate", "expected"),
    [
        ("dt = 'a' -- a comment a backslash continues \\\nAND dt = 'b'", Compare("dt", "=", "a")),
        ("dt = 'a' /* nested /* comments */ AND dt = 'b' */", Compare("dt", "=", "a")),
        ("dt = 'a' -- to the line's end\nAND id = 1", And((Compare("dt", "=", "a"), Compare("id", "=", 1)))),
    ],
)
def test_comments_end_where_sparks_end(predicate: str, expected: Expr) -> None:
    """Reading a commented-out AND as code would narrow the predicate below what Spark selects."""
    reading = read_predicate(predicate, COLUMNS)
    assert reading.complete and reading.expr == expected


def test_an_unclosed_comment_or_quote_is_not_understood() -> None:
    assert parse_predicate("dt = 'a' /* open", COLUMNS) is None
    assert parse_predicate("dt = 'a", COLUMNS) is None
    assert parse_predicate("dt = R'a", COLUMNS) is None


@pytest.mark.parametrize(
    ("dialect", "predicate"),
    [
        (Dialect(escaped_string_literals=True), r"dt = 'back\\slash'"),
        (Dialect(escaped_string_literals=True), "dt = 'it''s'"),
        (Dialect(double_quoted_identifiers=True), 'dt = "x"'),
    ],
)
def test_literals_a_session_setting_changes_are_left_to_spark(dialect: Dialect, predicate: str) -> None:
    assert parse_predicate(predicate, COLUMNS) is not None  # Spark's defaults
    assert parse_predicate(predicate, COLUMNS, dialect=dialect) is None
    assert parse_predicate("dt = 'plain' OR dt = R'r\\aw'", COLUMNS, dialect=dialect) is not None


@pytest.mark.parametrize(
    "value", ["back\\slash", "it's", 'say "hi"', "a\nb\tc\x00", "\\%\\_", "é😀日", "\\u0041", "k=v/50%"]
)
def test_a_string_printed_by_history_reads_back_as_the_same_value(value: str) -> None:
    assert parse_predicate(expr_sql(Compare("dt", "=", value)), COLUMNS) == Compare("dt", "=", value)


def test_a_backquoted_column_may_hold_a_backquote() -> None:
    types = {"a`b": "STRING"}
    assert parse_predicate(expr_sql(Compare("a`b", "=", "x")), types) == Compare("a`b", "=", "x")


def test_a_struct_field_is_not_the_top_level_column_of_its_name() -> None:
    """`address.city` must not prune (or narrow a read set) as the column `city` would: it is left out;
    a qualifier naming no column is a table or alias."""
    columns = {"city": "STRING", "address": "STRUCT<city: STRING>"}
    assert parse_predicate("address.city = 'Paris'", columns) is None
    assert parse_predicate("t.city = 'Paris'", columns) == parse_predicate("city = 'Paris'", columns) is not None
