"""Multi-table transactions from Spark (issue 44): SparkTable operations run with commit=False joining
one `catalog.transaction()` (`Prepared.join`), reads of snapshots pinned by `catalog.snapshots()`, and
`sql()`'s BEGIN / COMMIT / ROLLBACK. Real local Spark, real Parquet files, real etcd."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from tests.helpers import docs
from tests.helpers.tables import staged_parquet

from acidtables import Catalog, Table
from acidtables.core import InvalidArgumentError
from acidtables.errors import ConcurrentModificationException, TransactionClosedError
from acidtables.spark import Prepared, SparkTable, sql
from acidtables.spark.statements import transaction as sql_transaction

SCHEMA = "id BIGINT, dt STRING, amount DOUBLE"
ROWS = [(1, "d1", 10.0), (2, "d1", -3.0), (3, "d2", 7.5), (4, "d2", 0.0)]
_n = itertools.count()


@pytest.fixture(autouse=True)
def no_transaction_left_open(spark: SparkSession) -> Iterator[None]:
    """The session is shared by every test: a transaction a failing test leaves open must not outlive it."""
    yield
    sql_transaction.abandon(spark)


def rows(df: DataFrame) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.select("id", "dt", "amount").collect())


def make(spark: SparkSession, catalog: Catalog, prefix: str = "t") -> SparkTable:
    table = catalog.create_table(f"lake.{prefix}{next(_n)}", SCHEMA, partition_by=["dt"])
    t = SparkTable(spark, table)
    t.insert_into(spark.createDataFrame(ROWS, SCHEMA))
    return t


def staged(prepared: Prepared) -> bool:
    """Whether the operation's staging directory (its files, until committed) is still there."""
    tx = prepared.transaction
    return tx.storage.exists(tx.storage.staging_dir(tx.txn_id))


def concurrent_delete(table: Table, where: str) -> None:
    """A plain core commit (no Spark) removing the files of `where`'s partition: what loses a Spark job
    that read them."""
    fresh = table.begin("delete")
    fresh.remove_files(fresh.scan(where))
    fresh.commit()


# --- the Python API: Prepared.join -----------------------------------------------------------------------


def test_two_operations_commit_together_with_one_multi_txn_id(spark: SparkSession, catalog: Catalog) -> None:
    orders, staging = make(spark, catalog, "orders"), make(spark, catalog, "staging")
    versions = (orders.table.version, staging.table.version)
    new = spark.createDataFrame([(5, "d3", 1.5)], SCHEMA)
    tx = catalog.transaction()
    inserted = orders.insert_into(new, commit=False).join(tx)
    deleted = staging.delete("dt = 'd1'", commit=False).join(tx)
    assert isinstance(inserted, Prepared) and deleted.metrics == {"numDeletedRows": 2}
    assert orders.table.version == versions[0]  # nothing visible before the commit
    infos = tx.commit()

    assert set(infos) == {orders.name, staging.name}
    assert (infos[orders.name].version, infos[staging.name].version) == (versions[0] + 1, versions[1] + 1)
    assert (orders.table.version, staging.table.version) == (versions[0] + 1, versions[1] + 1)
    assert {i.multi_txn_id for i in infos.values()} == {tx.id}
    assert infos[staging.name].metrics == {"numDeletedRows": 2}  # tx.commit()'s own CommitInfo carries them
    [o], [s] = orders.table.history(1), staging.table.history(1)
    assert o.multi_txn_id == s.multi_txn_id == tx.id
    assert s.metrics["numDeletedRows"] == 2  # recorded on the transaction before the commit: the log has it
    assert rows(orders.read()) == sorted([*ROWS, (5, "d3", 1.5)])
    assert rows(staging.read()) == [r for r in ROWS if r[1] != "d1"]


def test_the_with_block_commits_on_leaving_and_aborts_on_an_exception(spark: SparkSession, catalog: Catalog) -> None:
    orders, staging = make(spark, catalog), make(spark, catalog)
    with catalog.transaction() as tx:
        orders.update("id = 1", {"amount": "11.0"}, commit=False).join(tx)
        staging.delete("id = 4", commit=False).join(tx)
    assert orders.table.history(1)[0].multi_txn_id == staging.table.history(1)[0].multi_txn_id == tx.id
    assert orders.table.history(1)[0].metrics["numUpdatedRows"] == 1

    versions = (orders.table.version, staging.table.version)
    with pytest.raises(RuntimeError, match="changed my mind"), catalog.transaction() as tx2:
        first = orders.delete("id = 2", commit=False).join(tx2)
        second = staging.insert_into(spark.createDataFrame([(9, "d9", 9.0)], SCHEMA), commit=False).join(tx2)
        raise RuntimeError("changed my mind")
    assert tx2.state == "aborted" and not staged(first) and not staged(second)
    assert (orders.table.version, staging.table.version) == versions


def test_a_conflict_on_one_part_leaves_both_tables_unchanged(spark: SparkSession, catalog: Catalog) -> None:
    orders, staging = make(spark, catalog), make(spark, catalog)
    tx = catalog.transaction()
    inserted = orders.insert_into(spark.createDataFrame([(5, "d3", 1.5)], SCHEMA), commit=False).join(tx)
    updated = staging.update("dt = 'd1'", {"amount": "0.0"}, commit=False).join(tx)
    concurrent_delete(staging.table, "dt = 'd1'")  # a core commit between prepare and commit
    versions = (orders.table.version, staging.table.version)

    with pytest.raises(ConcurrentModificationException) as failed:
        tx.commit()
    assert failed.value.table == staging.name and failed.value.multi_txn_id == tx.id
    assert tx.id in str(failed.value) and "none of them changed" in str(failed.value)
    assert (orders.table.version, staging.table.version) == versions
    assert rows(orders.read()) == sorted(ROWS)
    assert rows(staging.read()) == [r for r in ROWS if r[1] != "d1"]  # the concurrent delete only
    assert not staged(inserted) and not staged(updated)
    assert tx.state == "aborted"


def test_a_joined_operation_commits_only_with_the_others(spark: SparkSession, catalog: Catalog) -> None:
    orders, staging = make(spark, catalog), make(spark, catalog)
    tx = catalog.transaction()
    first = orders.delete("id = 1", commit=False).join(tx)
    with pytest.raises(InvalidArgumentError, match="one part of multi-table transaction"):
        first.commit()
    # a second operation on the same table cannot join: it is aborted, the first stays a part
    second = orders.delete("id = 2", commit=False)
    with pytest.raises(InvalidArgumentError, match=f"already has a part on {orders.name}"):
        second.join(tx)
    assert not staged(second) and staged(first)
    with pytest.raises(InvalidArgumentError, match="expected a multi-table transaction"):
        staging.delete("id = 3", commit=False).join(catalog)  # type: ignore[arg-type]
    # a part's abort() aborts the whole
    third = staging.delete("id = 4", commit=False).join(tx)
    third.abort()
    assert tx.state == "aborted" and not staged(first) and not staged(third)
    assert rows(orders.read()) == sorted(ROWS) and rows(staging.read()) == sorted(ROWS)


# --- reads of pinned snapshots ----------------------------------------------------------------------------


def test_a_read_of_a_pinned_snapshot_reads_exactly_that_version(spark: SparkSession, catalog: Catalog) -> None:
    orders, staging = make(spark, catalog), make(spark, catalog)
    pinned = catalog.snapshots([orders.name, staging.name])
    assert pinned[orders.name].version == orders.table.version
    orders.delete("dt = 'd1'")
    staging.insert_into(spark.createDataFrame([(5, "d3", 1.5)], SCHEMA))

    assert rows(orders.read(snapshot=pinned[orders.name])) == sorted(ROWS)
    assert rows(staging.read(snapshot=pinned[staging.name])) == sorted(ROWS)
    assert rows(orders.read(snapshot=pinned[orders.name], where="amount > 0")) == [(1, "d1", 10.0), (3, "d2", 7.5)]
    assert rows(orders.read()) == [r for r in ROWS if r[1] != "d1"]  # the current version moved on
    settings = catalog.settings
    by_source = (
        spark.read.format("acidtables")
        .options(**{"etcd.endpoints": ",".join(settings.etcd.endpoints), "etcd.prefix": settings.etcd.prefix})
        .option("warehouse", settings.warehouse)
        .option("versionAsOf", pinned[orders.name].version)
        .load(orders.name)
    )
    assert rows(by_source) == sorted(ROWS)

    with pytest.raises(InvalidArgumentError, match=f"snapshot is of {staging.name}"):
        orders.read(snapshot=pinned[staging.name])
    with pytest.raises(InvalidArgumentError, match="not more than one"):
        orders.read(snapshot=pinned[orders.name], version=1)
    with pytest.raises(InvalidArgumentError, match="must be a Snapshot"):
        orders.read(snapshot=pinned[orders.name].version)  # type: ignore[arg-type]


def test_a_write_whose_source_is_a_pin_of_its_own_table_is_judged_since_the_pin(
    spark: SparkSession, catalog: Catalog
) -> None:
    """A pin is a read of the current version, not time travel: an overwrite built from it must not bring
    back rows a commit after the pin deleted."""
    orders = make(spark, catalog)
    pinned = catalog.snapshots([orders.name])[orders.name]
    orders.delete("dt = 'd1'")
    with pytest.raises(ConcurrentModificationException):
        orders.insert_overwrite(orders.read(snapshot=pinned).filter("amount >= 0"))
    assert rows(orders.read()) == [r for r in ROWS if r[1] != "d1"]


# --- SQL: BEGIN / COMMIT / ROLLBACK -----------------------------------------------------------------------


def test_begin_then_commit_commits_two_tables_together(spark: SparkSession, catalog: Catalog) -> None:
    orders, staging = make(spark, catalog), make(spark, catalog)
    versions = (orders.table.version, staging.table.version)
    assert sql(spark, "BEGIN TRANSACTION", catalog=catalog) is None
    moved = sql(spark, f"INSERT INTO {staging.name} SELECT id, 'd9', amount FROM {orders.name} WHERE id = 3")
    updated = sql(spark, f"UPDATE {orders.name} SET amount = 0 WHERE amount < 0", catalog=catalog)
    assert isinstance(updated, Prepared) and isinstance(moved, Prepared)
    assert rows(orders.read()) == sorted(ROWS)  # nothing visible before COMMIT
    infos = sql(spark, "COMMIT")

    assert set(infos) == {orders.name, staging.name}
    assert infos[orders.name].metrics == {"numUpdatedRows": 1}
    assert len({i.multi_txn_id for i in infos.values()}) == 1 and infos[orders.name].multi_txn_id is not None
    assert (orders.table.version, staging.table.version) == (versions[0] + 1, versions[1] + 1)
    assert orders.table.history(1)[0].multi_txn_id == staging.table.history(1)[0].multi_txn_id
    assert rows(orders.read()) == sorted([(1, "d1", 10.0), (2, "d1", 0.0), (3, "d2", 7.5), (4, "d2", 0.0)])
    assert rows(staging.read()) == sorted([*ROWS, (3, "d9", 7.5)])
    assert sql_transaction.current(spark) is None
    sql(spark, f"DELETE FROM {orders.name} WHERE id = 4", catalog=catalog)  # autocommits again
    assert orders.table.version == versions[0] + 2 and orders.table.history(1)[0].multi_txn_id is None


@pytest.mark.parametrize(
    ("begin", "commit"),
    [("BEGIN", "COMMIT WORK"), ("START TRANSACTION", "COMMIT TRANSACTION;"), ("begin work", "commit")],
)
def test_the_spellings_databricks_accepts(spark: SparkSession, catalog: Catalog, begin: str, commit: str) -> None:
    orders, staging = make(spark, catalog), make(spark, catalog)
    sql(spark, begin, catalog=catalog)
    sql(spark, f"DELETE FROM {orders.name} WHERE id = 1")
    sql(spark, f"MERGE INTO {staging.name} t USING (SELECT 2 AS id) s ON t.id = s.id WHEN MATCHED THEN DELETE")
    infos = sql(spark, commit)
    assert infos[staging.name].metrics["numTargetRowsDeleted"] == 1
    assert rows(orders.read()) == [r for r in ROWS if r[0] != 1]
    assert rows(staging.read()) == [r for r in ROWS if r[0] != 2]


def test_rollback_leaves_both_tables_unchanged_and_deletes_the_staged_files(
    spark: SparkSession, catalog: Catalog
) -> None:
    orders, staging = make(spark, catalog), make(spark, catalog)
    versions = (orders.table.version, staging.table.version)
    sql(spark, "BEGIN", catalog=catalog)
    parts = [
        sql(spark, f"INSERT OVERWRITE {orders.name} VALUES (7, 'd7', 7.0)"),
        sql(spark, f"TRUNCATE TABLE {staging.name}"),
    ]
    assert staged(parts[0])  # the overwrite's new file (a truncate only removes)
    assert sql(spark, "ROLLBACK TRANSACTION") is None
    assert not any(staged(p) for p in parts)
    assert (orders.table.version, staging.table.version) == versions
    assert rows(orders.read()) == rows(staging.read()) == sorted(ROWS)
    assert sql_transaction.current(spark) is None


def test_a_conflict_at_commit_fails_it_whole_and_ends_the_transaction(spark: SparkSession, catalog: Catalog) -> None:
    orders, staging = make(spark, catalog), make(spark, catalog)
    sql(spark, "BEGIN", catalog=catalog)
    parts = [
        sql(spark, f"INSERT INTO {orders.name} VALUES (5, 'd3', 1.5)"),
        sql(spark, f"DELETE FROM {staging.name} WHERE dt = 'd1' AND amount < 0"),
    ]
    concurrent_delete(staging.table, "dt = 'd1'")
    versions = (orders.table.version, staging.table.version)
    with pytest.raises(ConcurrentModificationException, match="none of them changed") as failed:
        sql(spark, "COMMIT")
    assert failed.value.table == staging.name and failed.value.multi_txn_id is not None
    assert (orders.table.version, staging.table.version) == versions
    assert not any(staged(p) for p in parts)
    assert sql_transaction.current(spark) is None
    with pytest.raises(InvalidArgumentError, match="no transaction is open"):
        sql(spark, "ROLLBACK")


def concurrent_append(table: Table, dt: str) -> None:
    """A plain core commit (no Spark) adding a file of one row (id 0) to partition `dt`."""
    with table.begin("insert_into") as fresh:
        fresh.add_files([staged_parquet(fresh, {"dt": dt})])
        fresh.commit()


def test_reads_are_repeatable_and_a_move_loses_no_row_appended_meanwhile(spark: SparkSession, catalog: Catalog) -> None:
    """docs/sql.md's move: INSERT ... SELECT from staging, then DELETE from staging. A row another job
    appends to staging in between is neither copied nor deleted: the later statements read staging where
    the first did, and the DELETE, which would delete that row too, fails the transaction by name."""
    orders, staging = make(spark, catalog), make(spark, catalog)
    versions = (orders.table.version, staging.table.version)
    sql(spark, "BEGIN", catalog=catalog)
    sql(spark, f"INSERT INTO {orders.name} SELECT * FROM {staging.name} WHERE dt = 'd1'")
    concurrent_append(staging.table, "d1")
    # a query of staging still reads the version the transaction first read
    assert sql(spark, f"SELECT count(*) AS n FROM {staging.name} WHERE dt = 'd1'").collect()[0].n == 2
    with pytest.raises(ConcurrentModificationException, match=r"would act on rows it did not read") as failed:
        sql(spark, f"DELETE FROM {staging.name} WHERE dt = 'd1'")
    assert (failed.value.table, failed.value.read_version) == (staging.name, versions[1])
    assert failed.value.winning_version == versions[1] + 1
    sql(spark, "ROLLBACK")
    assert orders.table.version == versions[0] and staging.table.version == versions[1] + 1
    assert sorted(r.id for r in staging.read().where("dt = 'd1'").collect()) == [0, 1, 2]


def test_commit_or_rollback_with_no_transaction_open_is_an_error(spark: SparkSession, catalog: Catalog) -> None:
    for statement in ("COMMIT", "ROLLBACK", "COMMIT WORK", "rollback transaction"):
        with pytest.raises(InvalidArgumentError, match="no transaction is open in this session"):
            sql(spark, statement, catalog=catalog)
    for statement, part in (
        ("BEGIN TRANSACTION ISOLATION LEVEL SERIALIZABLE", "transaction modes are not supported"),
        ("COMMIT AND CHAIN", "AND CHAIN is not supported"),
        ("ROLLBACK TO SAVEPOINT s", "savepoints are not supported"),
    ):
        with pytest.raises(InvalidArgumentError, match=part):
            sql(spark, statement, catalog=catalog)
    assert sql_transaction.current(spark) is None


def _aborted(spark: SparkSession, parts: list[Prepared], tables: list[SparkTable], versions: list[int]) -> None:
    """What a failed statement leaves: every part aborted at once, the session refusing all but ROLLBACK."""
    assert not any(staged(p) for p in parts)
    assert [t.table.version for t in tables] == versions
    with pytest.raises(TransactionClosedError, match=r"aborted by an earlier error.*Run ROLLBACK to end it"):
        sql(spark, "SELECT 1")
    with pytest.raises(TransactionClosedError, match="aborted by an earlier error"):
        sql(spark, "COMMIT")
    assert sql(spark, "ROLLBACK") is None
    assert sql_transaction.current(spark) is None


@pytest.mark.parametrize(
    ("statement", "error"),
    [
        ("BEGIN", "already open in this session; nested transactions are not supported"),
        ("CREATE TABLE lake.made_inside (id BIGINT) USING acidtables", "is not supported inside transaction"),
        ("ALTER TABLE {orders} ADD COLUMNS (note STRING)", "is not supported inside transaction"),
        ("OPTIMIZE {orders}", "is not supported inside transaction"),
        ("DROP TABLE {orders}", "is not supported inside transaction"),
        ("SET spark.sql.ansi.enabled = true", "is not supported inside transaction"),
        (
            "DELETE FROM {orders} WHERE id = 2",
            "already writes {orders} \\(DELETE\\); a transaction writes each table once",
        ),
        ("SELECT * FROM {orders}", "reads {orders}, which transaction .* already writes"),
        ("INSERT INTO {staging} SELECT * FROM {orders}", "reads {orders}, which transaction .* already writes"),
        ("INSERT INTO plain_spark_view VALUES (1)", "plain_spark_view is not an acidtables table"),
        ("UPDATE {staging} SET no_such_column = 1", "no_such_column"),
        ("SELEC 1", "cannot parse"),
    ],
)
def test_a_failing_statement_aborts_the_whole_transaction(
    spark: SparkSession, catalog: Catalog, statement: str, error: str
) -> None:
    orders, staging = make(spark, catalog), make(spark, catalog)
    versions = [orders.table.version, staging.table.version]
    spark.createDataFrame([(1,)], "id INT").createOrReplaceTempView("plain_spark_view")
    sql(spark, "BEGIN", catalog=catalog)
    parts = [sql(spark, f"DELETE FROM {orders.name} WHERE id = 1")]
    if "{staging}" not in statement:
        parts.append(sql(spark, f"UPDATE {staging.name} SET amount = 1"))
    shown = statement.format(orders=orders.name, staging=staging.name)
    with pytest.raises(InvalidArgumentError) as failed:
        sql(spark, shown)
    message = str(failed.value)
    assert _search(error.format(orders=orders.name, staging=staging.name), message), message
    assert "is aborted because of this error: nothing of it was committed" in message
    assert orders.name in message.split("is aborted because")[1]  # its staged writes, named
    _aborted(spark, parts, [orders, staging], versions)
    assert catalog.list_tables("lake") == sorted([orders.name, staging.name])  # nothing created, nothing dropped


def _search(pattern: str, text: str) -> bool:
    import re

    return re.search(pattern, text) is not None


def test_a_spark_error_inside_a_transaction_aborts_it_too(spark: SparkSession, catalog: Catalog) -> None:
    """An error Spark raises keeps its type; a note on it says the transaction was aborted."""
    orders = make(spark, catalog)
    sql(spark, "BEGIN", catalog=catalog)
    parts = [sql(spark, f"DELETE FROM {orders.name} WHERE id = 1")]
    with pytest.raises(Exception) as failed:
        sql(spark, "SELECT no_such_column FROM range(1)")
    assert not isinstance(failed.value, TransactionClosedError)
    assert any("is aborted because of this error" in n for n in getattr(failed.value, "__notes__", []))
    _aborted(spark, parts, [orders], [orders.table.version])


def test_inside_a_transaction_writes_take_no_commit_false_and_one_catalog(
    spark: SparkSession, catalog: Catalog
) -> None:
    orders = make(spark, catalog)
    sql(spark, "BEGIN", catalog=catalog)
    with pytest.raises(InvalidArgumentError, match="commit=False inside transaction"):
        sql(spark, f"DELETE FROM {orders.name} WHERE id = 1", commit=False)
    _aborted(spark, [], [orders], [orders.table.version])
    other = Catalog(catalog.settings)
    try:
        sql(spark, "BEGIN", catalog=catalog)
        with pytest.raises(InvalidArgumentError, match="another catalog than transaction"):
            sql(spark, f"DELETE FROM {orders.name} WHERE id = 1", catalog=other)
    finally:
        other.close()
    _aborted(spark, [], [orders], [orders.table.version])


def test_the_transaction_belongs_to_its_session(spark: SparkSession, catalog: Catalog) -> None:
    orders, staging = make(spark, catalog), make(spark, catalog)
    sql(spark, "BEGIN", catalog=catalog)
    part = sql(spark, f"DELETE FROM {orders.name} WHERE id = 1")
    other = spark.newSession()
    assert sql_transaction.current(other) is None
    with pytest.raises(InvalidArgumentError, match="no transaction is open in this session"):
        sql(other, "COMMIT")
    staging.delete("id = 1")  # the API, meanwhile: commits on its own
    assert staging.table.history(1)[0].multi_txn_id is None and staged(part)
    infos = sql(spark, "COMMIT")
    assert set(infos) == {orders.name}
    assert rows(orders.read()) == [r for r in ROWS if r[0] != 1]


# --- the documentation's examples -------------------------------------------------------------------------


def test_the_spark_pages_transactions_run_as_written(spark: SparkSession, catalog: Catalog) -> None:
    """docs/spark.md's multi-table transaction (tests/test_docs.py checks that every example has its test)."""
    example = docs.block("docs/spark.md", "python", 1)
    orders = catalog.create_table("sales.orders", SCHEMA, partition_by=["dt"])
    staging = catalog.create_table("sales.staging", SCHEMA, partition_by=["dt"])
    arrived = spark.createDataFrame([(1, "2024-01-01", 10.0), (2, "2024-01-02", 5.0)], SCHEMA)
    SparkTable(spark, staging).insert_into(arrived)
    names: dict[str, Any] = {"spark": spark, "catalog": catalog}
    exec(compile(example.code, example.name, "exec"), names)
    assert rows(SparkTable(spark, catalog.table("sales.orders")).read()) == [(1, "2024-01-01", 10.0)]
    assert rows(SparkTable(spark, catalog.table("sales.staging")).read()) == [(2, "2024-01-02", 5.0)]
    [o], [s] = catalog.table("sales.orders").history(1), catalog.table("sales.staging").history(1)
    assert o.multi_txn_id == s.multi_txn_id is not None
    assert rows(names["before"]) == [(1, "2024-01-01", 10.0), (2, "2024-01-02", 5.0)]
    assert o.version == 1 and orders.name == "sales.orders"


def test_the_sql_pages_transactions_run_as_written(spark: SparkSession, catalog: Catalog) -> None:
    """docs/sql.md's BEGIN ... COMMIT (tests/test_docs.py checks that every example has its test)."""
    example = docs.block("docs/sql.md", "python", 1)
    for name in ("sales.orders", "sales.staging"):
        table = catalog.create_table(name, SCHEMA, partition_by=["dt"])
        SparkTable(spark, table).insert_into(spark.createDataFrame([(1, "2024-01-01", 10.0)], SCHEMA))
    names: dict[str, Any] = {"spark": spark, "catalog": catalog}
    exec(compile(example.code, example.name, "exec"), names)
    infos = names["infos"]
    assert set(infos) == {"sales.orders", "sales.staging"}
    assert infos["sales.staging"].metrics == {"numDeletedRows": 1}
    assert rows(SparkTable(spark, catalog.table("sales.orders")).read()) == [
        (1, "2024-01-01", 10.0),
        (1, "2024-01-01", 10.0),
    ]
    assert rows(SparkTable(spark, catalog.table("sales.staging")).read()) == []
    assert sql_transaction.current(spark) is None
