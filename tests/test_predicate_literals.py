"""Predicates with every string literal Spark SQL reads (issue 41, item 4): core reads each as Spark does,
so `scan`, `update`, `delete` and SQL touch exactly the partition the literal names, whatever its value
holds (backslash, quote, `%`, `=`, `/`, unicode); a predicate core cannot read all of refuses a scan that
chooses files to remove, and only widens (with a warning) a read."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.sql import SparkSession
from tests.helpers.tables import staged_parquet

from acidtables import Catalog, Table
from acidtables.core import Compare, InvalidArgumentError, Literal, parse_predicate
from acidtables.spark import SparkTable, sql
from acidtables.spark.statements.clauses import spark_sql
from acidtables.spark.statements.dialect import parse_statement

_n = itertools.count()

#: partition values a literal must name exactly; "backslash" is what Spark reads 'back\slash' as
VALUES = ["back\\slash", "backslash", "it's", "its", "50%", "k=v", "a/b", "é😀日", 'say "hi"', "tab\there"]

#: (how a predicate spells the literal, the partition value Spark reads it as)
SPELLINGS = [
    (r"'back\slash'", "backslash"),  # the predicate: Spark drops the backslash of an unknown escape
    (r"'back\\slash'", "back\\slash"),
    (r"R'back\slash'", "back\\slash"),
    (r'"back\\slash"', "back\\slash"),
    ("'it''s'", "it's"),
    (r"'it\'s'", "it's"),
    ('"it\'s"', "it's"),
    ("'it' 's'", "its"),  # adjacent literals are concatenated
    ("'50%'", "50%"),
    (r"'50\u0025'", "50%"),
    ("'k=v'", "k=v"),
    (r"'a\/b'", "a/b"),
    ("'é😀日'", "é😀日"),
    (r"'\u00e9\U0001F600\u65e5'", "é😀日"),
    (r"'\u00E9\uD83D\uDE00\u65E5'", "é😀日"),
    (r'"say \"hi\""', 'say "hi"'),
    ('"say ""hi"""', 'say "hi"'),
    ("'say \"hi\"'", 'say "hi"'),
    (r"'tab\there'", "tab\there"),
    (r"'tab\011here'", "tab\there"),
]

#: spellings compared with Spark's own reading, beyond those above
MORE_LITERALS = [
    "'a''''b'",
    "''''",
    "''",
    '"a""b"',
    "'a\"\"b'",
    "\"a''b\"",
    r"'\n\t\r\b\0\Z'",
    r"'\101'",
    r"'\1011'",
    r"'\277'",
    r"'\18'",
    r"'\%\_'",
    r"'\x41'",
    r"'\q'",
    r"R'raw\n'",
    r'r"raw\d"',
    "'a' -- a comment\n 'b'",
    "'a' /* a /* nested */ comment */ 'b'",
    "'multi\nline'",
    r"'\u12G4'",
    r"'x\u00'",
    r"'\\%'",
    r"'\'\''",
    "'a'\"b\"",
    r"'\\'",
    r"'\U00000041'",
]


@pytest.mark.parametrize("literal", [s for s, _ in SPELLINGS] + MORE_LITERALS)
def test_core_and_the_sql_statement_path_read_each_literal_as_spark_does(spark: SparkSession, literal: str) -> None:
    [spark_value] = spark.sql(f"SELECT {literal} AS v").first()  # type: ignore[misc]
    expr = parse_predicate(f"p = {literal}", {"p": "STRING"})
    assert expr == Compare("p", "=", spark_value)
    # acidtables.spark.sql reads the statement with sqlglot and hands the API its condition printed back
    tree = parse_statement(f"DELETE FROM t WHERE p = {literal}")
    printed = spark_sql(tree.args["where"].this)
    assert spark.sql(f"SELECT {printed.split(' = ', 1)[1]} AS v").first()[0] == spark_value, printed  # type: ignore[index]


# --- the transaction core: scan ------------------------------------------------------------------------


def core_table(catalog: Catalog) -> Table:
    """One file in each partition of VALUES and in the NULL partition."""
    table = catalog.create_table(f"lake.c{next(_n)}", schema="id BIGINT, dt STRING", partition_by=["dt"])
    with table.begin("insert_into") as tx:
        tx.add_files([staged_parquet(tx, {"dt": value}) for value in [*VALUES, None]])
        tx.commit()
    return table


@pytest.mark.parametrize(("spelling", "value"), SPELLINGS, ids=[s for s, _ in SPELLINGS])
def test_a_delete_removing_what_scan_returns_removes_only_the_partition_the_literal_names(
    catalog: Catalog, spelling: str, value: str
) -> None:
    table = core_table(catalog)
    before = table.snapshot().files
    with table.begin("delete") as tx:
        matched = tx.scan(f"dt = {spelling}")
        assert [f.partition["dt"] for f in matched] == [value]
        tx.remove_files(matched)  # the documented copy-on-write pattern, nothing written back
        tx.commit()
    after = table.snapshot().files
    assert sorted(f.path for f in after) == sorted(f.path for f in before if f.partition["dt"] != value)
    [record] = table.commits(table.version)
    assert not record.reads_whole_table and record.read_predicates == (Compare("dt", "=", value),)


@pytest.mark.parametrize(
    ("predicate", "reason"),
    [
        ("dt = 'a' AND id % 2 = 0", "'id % 2 = 0' (% is outside that subset)"),
        ("upper(dt) = 'A'", "upper(...) is a function call"),
        ("dt = 'never closed", "' is never closed"),
        ("dt LIKE 'a%'", "expected a comparison after dt, found LIKE"),
        ("day = 'x'", "day is not a column of the table"),
        ("id = '1'", "id (BIGINT) is compared with '1', which Spark casts first"),
        (r"dt = '\uD800'", "lone UTF-16 surrogate"),
    ],
)
def test_a_scan_choosing_files_to_remove_refuses_a_predicate_it_cannot_read_all_of(
    catalog: Catalog, predicate: str, reason: str
) -> None:
    table = core_table(catalog)
    with table.begin("delete") as tx:
        with pytest.raises(InvalidArgumentError) as caught:
            tx.scan(predicate)
        message = str(caught.value)
        assert f"scan(): cannot read all of the predicate {predicate!r} on {table.name}" in message
        assert reason in message
        assert "In a DELETE transaction the files it returns are the ones a job removes" in message
        tx.remove_files(tx.scan("dt = 'k=v'"))  # the transaction goes on; nothing was recorded as read
        tx.commit()
    [record] = table.commits(table.version)
    assert not record.reads_whole_table and record.read_predicates == (Compare("dt", "=", "k=v"),)
    assert len(table.snapshot().files) == len(VALUES)


@pytest.mark.parametrize("operation", ["update", "insert_overwrite", "truncate", "merge", "major_compact"])
def test_every_operation_that_removes_files_refuses_it(catalog: Catalog, operation: str) -> None:
    tx = core_table(catalog).begin(operation)
    with pytest.raises(InvalidArgumentError, match="cannot read all of the predicate"):
        tx.scan("id % 2 = 0")
    tx.abort()


def test_an_insert_reading_its_own_table_widens_with_a_warning(
    catalog: Catalog, caplog: pytest.LogCaptureFixture
) -> None:
    table = core_table(catalog)
    tx = table.begin("insert_into")
    with caplog.at_level(logging.WARNING, "acidtables.core.commit.transaction"):
        assert [f.partition["dt"] for f in tx.scan("dt = 'k=v' AND id % 2 = 0")] == ["k=v"]
        assert len(tx.scan("upper(dt) = 'K=V'")) == len(VALUES) + 1
    tx.abort()
    # this transaction's own warnings (other threads of the catalog may log meanwhile)
    warnings = [r.getMessage() for r in caplog.records if tx.txn_id in r.getMessage()]
    assert len(warnings) == 2
    assert f"{table.name}: txn {tx.txn_id} (read version 1): scan() cannot read 'id % 2 = 0'" in warnings[0]
    assert warnings[0].endswith("so it counts as reading only the rest of it")
    assert warnings[1].endswith("so it counts as reading the whole table")


def test_a_scan_given_no_predicate_or_a_tree_is_never_refused(catalog: Catalog) -> None:
    tx = core_table(catalog).begin("delete")
    assert len(tx.scan()) == len(VALUES) + 1
    assert [f.partition["dt"] for f in tx.scan(Compare("dt", "=", "it's"))] == ["it's"]
    tx.abort()


# --- Spark: update, delete, read and SQL ---------------------------------------------------------------


@pytest.fixture
def spark_table(spark: SparkSession, catalog: Catalog) -> SparkTable:
    """Two rows in each partition of VALUES."""
    table = catalog.create_table(f"lake.s{next(_n)}", schema="id BIGINT, dt STRING", partition_by=["dt"])
    t = SparkTable(spark, table)
    t.insert_into(spark.createDataFrame([(i, v) for i, v in enumerate(VALUES * 2)], "id BIGINT, dt STRING"))
    return t


def files_by_partition(table: Table) -> dict[Literal, set[str]]:
    out: dict[Literal, set[str]] = {}
    for f in table.snapshot().files:
        out.setdefault(f.partition["dt"], set()).add(f.path)
    return out


def assert_only_partition_touched(table: Table, before: dict[Literal, set[str]], value: str) -> None:
    """The last commit removed or added files of `value`'s partition only, and read only that."""
    after = files_by_partition(table)
    assert {k: v for k, v in after.items() if k != value} == {k: v for k, v in before.items() if k != value}
    assert after.get(value) != before[value]
    [record] = table.commits(table.version)
    assert {f.partition["dt"] for f in (*record.adds, *record.removes)} == {value}
    assert not record.reads_whole_table and record.read_predicates == (Compare("dt", "=", value),)


def rows_of(t: SparkTable) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in t.read().collect())


SPARK_CASES = [s for s in SPELLINGS if s[0] in (r"'back\slash'", r"'back\\slash'", "'it''s'", r"'50\u0025'", "'é😀日'")]
SPARK_IDS = [s for s, _ in SPARK_CASES]


@pytest.mark.parametrize(("spelling", "value"), SPARK_CASES, ids=SPARK_IDS)
def test_spark_delete_touches_only_the_partition_the_literal_names(
    spark_table: SparkTable, spelling: str, value: str
) -> None:
    before, rows = files_by_partition(spark_table.table), rows_of(spark_table)
    spark_table.delete(f"dt = {spelling}")
    assert rows_of(spark_table) == [r for r in rows if r[1] != value]
    assert_only_partition_touched(spark_table.table, before, value)


@pytest.mark.parametrize(("spelling", "value"), SPARK_CASES[1:3], ids=SPARK_IDS[1:3])
def test_spark_update_touches_only_the_partition_the_literal_names(
    spark_table: SparkTable, spelling: str, value: str
) -> None:
    before, rows = files_by_partition(spark_table.table), rows_of(spark_table)
    spark_table.update(f"dt = {spelling}", {"id": "id + 100"})
    assert rows_of(spark_table) == sorted((i + 100, d) if d == value else (i, d) for i, d in rows)
    assert_only_partition_touched(spark_table.table, before, value)


@pytest.mark.parametrize(
    ("spelling", "value"),
    [(r"'back\\slash'", "back\\slash"), ("'it''s'", "it's"), ('"say ""hi"""', 'say "hi"'), ("'é😀日'", "é😀日")],
)
def test_sql_delete_touches_only_the_partition_the_literal_names(
    spark: SparkSession, catalog: Catalog, spark_table: SparkTable, spelling: str, value: str
) -> None:
    before, rows = files_by_partition(spark_table.table), rows_of(spark_table)
    sql(spark, f"DELETE FROM {spark_table.table.name} WHERE dt = {spelling}", catalog=catalog)
    assert rows_of(spark_table) == [r for r in rows if r[1] != value]
    assert_only_partition_touched(spark_table.table, before, value)


def test_sql_update_touches_only_the_partition_the_literal_names(
    spark: SparkSession, catalog: Catalog, spark_table: SparkTable
) -> None:
    before, rows = files_by_partition(spark_table.table), rows_of(spark_table)
    sql(spark, f"UPDATE {spark_table.table.name} SET id = id + 100 WHERE dt = 'k=v' OR dt = 'a/b'", catalog=catalog)
    assert rows_of(spark_table) == sorted((i + 100, d) if d in ("k=v", "a/b") else (i, d) for i, d in rows)
    after = files_by_partition(spark_table.table)
    assert {k: v for k, v in after.items() if k not in ("k=v", "a/b")} == {
        k: v for k, v in before.items() if k not in ("k=v", "a/b")
    }
    [record] = spark_table.table.commits(spark_table.table.version)
    assert not record.reads_whole_table


def test_a_spark_delete_core_reads_only_in_part_still_deletes_only_its_rows_and_warns(
    spark_table: SparkTable, caplog: pytest.LogCaptureFixture
) -> None:
    """Spark's filter picks the rows, so a condition core reads only in part widens the files read."""
    rows = rows_of(spark_table)
    with caplog.at_level(logging.WARNING, "acidtables.spark.modify"):
        spark_table.delete("dt = 'it''s' AND id % 2 = 0")
    assert rows_of(spark_table) == [r for r in rows if not (r[1] == "it's" and r[0] % 2 == 0)]
    [warning] = [r.getMessage() for r in caplog.records if r.name == "acidtables.spark.modify"]
    assert "DELETE: core cannot read 'id % 2 = 0' (% is outside that subset)" in warning
    assert "so it reads the files the rest selects; Spark still picks the rows" in warning


def test_a_spark_read_core_reads_only_in_part_returns_the_rows_and_warns(
    spark_table: SparkTable, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, "acidtables.spark.modify"):
        found = spark_table.read(where="upper(dt) = 'K=V'").collect()
    assert sorted(r.dt for r in found) == ["k=v", "k=v"]
    [warning] = [r.getMessage() for r in caplog.records if r.name == "acidtables.spark.modify"]
    assert f"{spark_table.table.name}: read() of version 1: core cannot read \"upper(dt) = 'K=V'\"" in warning
    assert "so it reads every file of the table" in warning


@pytest.fixture
def escaped_string_literals(spark: SparkSession) -> Iterator[None]:
    spark.conf.set("spark.sql.parser.escapedStringLiterals", "true")
    try:
        yield
    finally:
        spark.conf.unset("spark.sql.parser.escapedStringLiterals")


@pytest.mark.usefixtures("escaped_string_literals")
def test_a_session_keeping_backslashes_deletes_the_value_it_reads(spark_table: SparkTable) -> None:
    """With spark.sql.parser.escapedStringLiterals, 'back\\slash' keeps its backslash: core must not prune
    to the partition the default reading names ("backslash")."""
    rows = rows_of(spark_table)
    spark_table.delete(r"dt = 'back\slash'")
    assert rows_of(spark_table) == [r for r in rows if r[1] != "back\\slash"]
