"""acidtables.spark.sql: each statement against the Python API on a twin table (same rows, same history
entry, same operation), time travel and pinning, passthrough, and errors that name the part at fault."""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from tests.helpers import docs

from acidtables import Catalog, Table
from acidtables.core import CommitInfo, InvalidArgumentError, TableNotFoundError
from acidtables.core.log.operations import IsolationLevel
from acidtables.spark import Prepared, SparkTable, sql

SCHEMA = "id BIGINT, dt STRING, amount DOUBLE"
ROWS = [(1, "d1", 10.0), (2, "d1", -3.0), (3, "d2", 7.5), (4, "d2", 0.0)]
_n = itertools.count()

pytestmark = pytest.mark.usefixtures("spark")


def rows(df: DataFrame) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.collect())


def table_rows(spark: SparkSession, table: Table, version: int | None = None) -> list[tuple[Any, ...]]:
    return rows(SparkTable(spark, table).read(version=version))


def last_entry(table: Table) -> tuple[str, int, int, bool, bool]:
    """What a history entry says about a commit, less its ids and times."""
    [h] = table.history(1)
    return (h.operation.display, h.rows_added, h.rows_removed, h.is_blind_append, h.time_version is not None)


def twins(spark: SparkSession, catalog: Catalog, *, primary_key: bool = False, **options: Any) -> tuple[Table, Table]:
    """Two tables with the same definition and rows: one driven by SQL, one by the API."""
    made = []
    for role in ("s", "a"):
        name = f"lake.{role}{next(_n)}"
        kw: dict[str, Any] = {"partition_by": ["dt"], **options}
        if primary_key:
            kw["primary_key"] = ["id"]
        table = catalog.create_table(name, SCHEMA, **kw)
        SparkTable(spark, table).insert_into(spark.createDataFrame(ROWS, SCHEMA))
        made.append(catalog.table(name))
    return made[0], made[1]


def same(spark: SparkSession, by_sql: Table, by_api: Table) -> None:
    assert table_rows(spark, by_sql) == table_rows(spark, by_api)
    assert last_entry(by_sql) == last_entry(by_api)


# --- writes against the API -----------------------------------------------------------------------------


@pytest.mark.parametrize("primary_key", [False, True], ids=["delta", "maxcompute"])
def test_insert_into_values_and_select_match_the_api(spark: SparkSession, catalog: Catalog, primary_key: bool) -> None:
    s, a = twins(spark, catalog, primary_key=primary_key)
    info = sql(spark, f"INSERT INTO {s.name} VALUES (5, 'd3', 1.5), (6, 'd3', 2)", catalog=catalog)
    SparkTable(spark, a).insert_into(spark.createDataFrame([(5, "d3", 1.5), (6, "d3", 2.0)], SCHEMA))
    assert isinstance(info, CommitInfo) and info.is_blind_append
    same(spark, s, a)
    # a column list, a static partition, and a query reading another table
    sql(
        spark,
        f"INSERT INTO {s.name} PARTITION (dt = 'd4') (amount, id) "
        f"SELECT amount * 2, id + 10 FROM {a.name} WHERE dt = 'd1'",
        catalog=catalog,
    )
    SparkTable(spark, a).insert_into(
        # each reads the other, so each is a blind append
        SparkTable(spark, s).read(where="dt = 'd1'").selectExpr("id + 10 AS id", "'d4' AS dt", "amount * 2 AS amount")
    )
    same(spark, s, a)


def test_insert_reading_its_own_target_is_not_a_blind_append(spark: SparkSession, catalog: Catalog) -> None:
    s, a = twins(spark, catalog)
    info = sql(
        spark, f"INSERT INTO {s.name} SELECT id + 100, dt, amount FROM {s.name} WHERE dt = 'd2'", catalog=catalog
    )
    SparkTable(spark, a).insert_into(
        SparkTable(spark, a).read(where="dt = 'd2'").selectExpr("id + 100 AS id", "dt", "amount")
    )
    assert not info.is_blind_append
    same(spark, s, a)


@pytest.mark.parametrize(
    ("statement", "call"),
    [
        ("INSERT OVERWRITE TABLE {t} VALUES (9, 'd9', 9.0)", lambda t, df: t.insert_overwrite(df)),
        (
            "INSERT OVERWRITE {t} PARTITION (dt = 'd1') SELECT 9, 9.0",
            lambda t, df: t.insert_overwrite(df.selectExpr("id", "'d1' AS dt", "amount"), partition={"dt": "d1"}),
        ),
        (
            "INSERT OVERWRITE {t} PARTITION (dt) SELECT 9, 'd1', 9.0",
            lambda t, df: t.insert_overwrite(df.selectExpr("id", "'d1' AS dt", "amount"), dynamic=True),
        ),
        (
            "INSERT INTO {t} REPLACE WHERE amount < 1 SELECT 9, 'd1', -9.0",
            lambda t, df: t.insert_overwrite(
                df.selectExpr("id", "'d1' AS dt", "-amount AS amount"), replace_where="amount < 1"
            ),
        ),
    ],
    ids=["whole-table", "static-partition", "dynamic-partitions", "replace-where"],
)
def test_insert_overwrite_matches_the_api(spark: SparkSession, catalog: Catalog, statement: str, call: Any) -> None:
    s, a = twins(spark, catalog)
    sql(spark, statement.format(t=s.name), catalog=catalog)
    call(SparkTable(spark, a), spark.createDataFrame([(9, "d9", 9.0)], SCHEMA))
    same(spark, s, a)


@pytest.mark.parametrize(
    ("statement", "call"),
    [
        ("TRUNCATE TABLE {t}", lambda t: t.truncate()),
        ("TRUNCATE TABLE {t} PARTITION (dt = 'd2')", lambda t: t.truncate(partition={"dt": "d2"})),
        ("UPDATE {t} SET amount = 0 WHERE amount < 0", lambda t: t.update("amount < 0", {"amount": "0"})),
        (
            "UPDATE {t} AS o SET o.amount = o.amount * 2 WHERE o.dt = 'd2'",
            lambda t: t.update("dt = 'd2'", {"amount": "amount * 2"}),
        ),
        ("UPDATE {t} SET amount = 1", lambda t: t.update(None, {"amount": "1"})),
        ("DELETE FROM {t} WHERE id IN (1, 3)", lambda t: t.delete("id IN (1, 3)")),
        ("DELETE FROM {t}", lambda t: t.delete()),
        ("DELETE FROM {t} WHERE id = 100", lambda t: t.delete("id = 100")),
        ("UPDATE {t} SET dt = 'd9' WHERE id = 1", lambda t: t.update("id = 1", {"dt": "'d9'"})),
    ],
    ids=[
        "truncate",
        "truncate-partition",
        "update",
        "update-alias",
        "update-all",
        "delete",
        "delete-all",
        "delete-none",
        "update-partition-column",
    ],
)
@pytest.mark.parametrize("primary_key", [False, True], ids=["delta", "maxcompute"])
def test_truncate_update_delete_match_the_api(
    spark: SparkSession, catalog: Catalog, statement: str, call: Any, primary_key: bool
) -> None:
    if primary_key and "dt = 'd9'" in statement:
        pytest.skip("a partition column is updated on delta tables only (test_spark_operations)")
    s, a = twins(spark, catalog, primary_key=primary_key)
    info = sql(spark, statement.format(t=s.name), catalog=catalog)
    assert isinstance(info, CommitInfo)
    call(SparkTable(spark, a))
    same(spark, s, a)


def test_update_and_delete_run_a_subquery_that_reads_other_tables(spark: SparkSession, catalog: Catalog) -> None:
    # Databricks runs these (delta-spark refuses them): the subquery reads a pinned snapshot of another
    # acidtables table, or a Spark view, and the write is the API's with the same rows matched
    s, a = twins(spark, catalog)
    other, _ = twins(spark, catalog)
    spark.createDataFrame([(3,), (4,)], "x BIGINT").createOrReplaceTempView("sql_ids")
    sql(spark, f"UPDATE {s.name} SET amount = -1 WHERE id IN (SELECT x FROM sql_ids)", catalog=catalog)
    SparkTable(spark, a).update("id IN (3, 4)", {"amount": "-1"})
    same(spark, s, a)
    sql(
        spark,
        f"DELETE FROM {s.name} WHERE dt = 'd1' AND id IN (SELECT id FROM {other.name} WHERE amount > 0) "
        "AND EXISTS (SELECT 1 FROM sql_ids)",
        catalog=catalog,
    )
    SparkTable(spark, a).delete("dt = 'd1' AND id IN (1)")
    same(spark, s, a)
    assert [i for i, *_ in table_rows(spark, s)] == [2, 3, 4]


MERGES = [
    (
        "WHEN MATCHED AND u.gone THEN DELETE WHEN MATCHED THEN UPDATE SET o.amount = u.amount "
        "WHEN NOT MATCHED THEN INSERT (id, dt, amount) VALUES (u.id, u.dt, u.amount + 1)",
        lambda b: (
            b.when_matched_delete("s.gone")
            .when_matched_update({"amount": "s.amount"})
            .when_not_matched_insert({"id": "s.id", "dt": "s.dt", "amount": "s.amount + 1"})
        ),
    ),
    (
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED AND u.amount > 0 THEN INSERT *",
        lambda b: b.when_matched_update_all().when_not_matched_insert_all("s.amount > 0"),
    ),
    (
        "WHEN MATCHED AND u.gone THEN DELETE WHEN MATCHED AND u.amount > 50 THEN UPDATE SET amount = u.amount * 10 "
        "WHEN MATCHED THEN UPDATE SET amount = u.amount "
        "WHEN NOT MATCHED BY TARGET AND u.amount > 0 THEN INSERT (id, dt, amount) VALUES (u.id, u.dt, u.amount) "
        "WHEN NOT MATCHED THEN INSERT (id, dt, amount) VALUES (u.id, u.dt, 0) "
        "WHEN NOT MATCHED BY SOURCE AND o.dt = 'd1' THEN UPDATE SET amount = o.amount - 1000 "
        "WHEN NOT MATCHED BY SOURCE THEN DELETE",
        lambda b: (
            b.when_matched_delete("s.gone")
            .when_matched_update({"amount": "s.amount * 10"}, "s.amount > 50")
            .when_matched_update({"amount": "s.amount"})
            .when_not_matched_insert({"id": "s.id", "dt": "s.dt", "amount": "s.amount"}, "s.amount > 0")
            .when_not_matched_insert({"id": "s.id", "dt": "s.dt", "amount": "0"})
            .when_not_matched_by_source_update({"amount": "t.amount - 1000"}, "t.dt = 'd1'")
            .when_not_matched_by_source_delete()
        ),
    ),
]


@pytest.mark.parametrize(("clauses", "build"), MERGES, ids=["explicit", "star", "several-of-a-kind-and-by-source"])
@pytest.mark.parametrize("primary_key", [False, True], ids=["delta", "maxcompute"])
def test_merge_matches_the_api(
    spark: SparkSession, catalog: Catalog, clauses: str, build: Any, primary_key: bool
) -> None:
    s, a = twins(spark, catalog, primary_key=primary_key)
    updates = spark.createDataFrame(
        [(1, "d1", 100.0, False), (2, "d1", 0.0, True), (7, "d2", 5.0, False), (8, "d2", -5.0, False)],
        "id BIGINT, dt STRING, amount DOUBLE, gone BOOLEAN",
    )
    updates.createOrReplaceTempView("sql_updates")
    source = "sql_updates" if "INSERT *" not in clauses else "(SELECT id, dt, amount FROM sql_updates)"
    sql(
        spark, f"MERGE INTO {s.name} AS o USING {source} AS u ON o.id = u.id AND o.dt = u.dt {clauses}", catalog=catalog
    )
    frame = updates if "INSERT *" not in clauses else updates.select("id", "dt", "amount")
    build(SparkTable(spark, a).merge(frame, "t.id = s.id AND t.dt = s.dt")).execute()
    same(spark, s, a)


def test_create_table_as_select_takes_the_querys_columns_partitioning_and_rows(
    spark: SparkSession, catalog: Catalog
) -> None:
    s, _ = twins(spark, catalog)
    made = sql(
        spark,
        "CREATE TABLE lake.ctas USING acidtables PARTITIONED BY (dt) TBLPROPERTIES ('delta.isolationLevel' = "
        f"'Serializable') AS SELECT id, dt, amount * 2 AS doubled, named_struct('Note', 'x') AS info FROM {s.name} "
        "WHERE id < 4",
        catalog=catalog,
    )
    meta = made.metadata
    assert [(c.name, c.type, c.nullable) for c in meta.columns] == [
        ("id", "BIGINT", True),
        ("dt", "STRING", True),
        ("doubled", "DOUBLE", True),
        ("info", "STRUCT<Note: STRING>", True),
    ]
    assert meta.partition_by == ("dt",) and meta.isolation_level == IsolationLevel.SERIALIZABLE
    assert sorted(tuple(r) for r in SparkTable(spark, made).read().select("id", "dt", "doubled").collect()) == [
        (i, dt, amount * 2) for i, dt, amount in sorted(ROWS) if i < 4
    ]
    assert [h.operation.display for h in made.history()] == ["INSERT INTO", "CREATE TABLE"]


def test_a_create_table_as_select_whose_rows_fail_leaves_no_table(spark: SparkSession, catalog: Catalog) -> None:
    s, _ = twins(spark, catalog)
    with pytest.raises(InvalidArgumentError, match="DIVIDE_BY_ZERO"):
        sql(
            spark,
            f"CREATE TABLE lake.bad USING acidtables AS SELECT id, 1 / (id - 1) AS x FROM {s.name}",
            catalog=catalog,
        )
    with pytest.raises(TableNotFoundError):
        catalog.table("lake.bad")


@pytest.mark.parametrize("clause", ["TO VERSION AS OF 1", "TIMESTAMP AS OF '{at}'"], ids=["version", "timestamp"])
def test_restore_matches_the_api(spark: SparkSession, catalog: Catalog, clause: str) -> None:
    s, a = twins(spark, catalog)
    for t in (s, a):
        SparkTable(spark, t).delete("id = 1")
    at = s.history(limit=2)[1].time_version
    assert at is not None
    info = sql(spark, f"RESTORE TABLE {s.name} {clause.format(at=at.isoformat())}", catalog=catalog)
    assert isinstance(info, CommitInfo) and info.version == 3
    a.restore(version=1)
    same(spark, s, a)
    assert table_rows(spark, s) == sorted(ROWS)


@pytest.mark.parametrize(
    ("statement", "kind"),
    [("ALTER TABLE {t} COMPACT MINOR", "minor"), ("ALTER TABLE {t} PARTITION (dt = 'd1') COMPACT major", "major")],
)
def test_compact_matches_the_api(spark: SparkSession, catalog: Catalog, statement: str, kind: str) -> None:
    s, a = twins(spark, catalog, primary_key=True)
    for t in (s, a):
        for i in range(3):
            SparkTable(spark, t).insert_into(spark.createDataFrame([(10 + i, "d1", float(i))], SCHEMA))
    infos = sql(spark, statement.format(t=s.name), catalog=catalog)
    where = "dt = 'd1'" if "PARTITION" in statement else None
    expected = SparkTable(spark, a).compact(kind, where=where)
    assert [i.operation for i in infos] == [i.operation for i in expected] and infos
    same(spark, s, a)


def test_optimize_and_zorder_match_the_api(spark: SparkSession, catalog: Catalog) -> None:
    s, a = twins(spark, catalog)
    for t in (s, a):
        for i in range(3):
            SparkTable(spark, t).insert_into(spark.createDataFrame([(10 + i, "d1", float(i))], SCHEMA))
    infos = sql(spark, f"OPTIMIZE {s.name} WHERE dt = 'd1'", catalog=catalog)
    assert [i.operation for i in infos] == [
        i.operation for i in SparkTable(spark, a).compact("minor", where="dt = 'd1'")
    ]
    same(spark, s, a)
    info = sql(spark, f"OPTIMIZE {s.name} ZORDER BY (amount)", catalog=catalog)
    SparkTable(spark, a).cluster(["amount"])
    assert isinstance(info, CommitInfo)
    same(spark, s, a)


# --- queries ----------------------------------------------------------------------------------------------


def test_select_with_time_travel_joins_and_ctes(spark: SparkSession, catalog: Catalog) -> None:
    s, _ = twins(spark, catalog)
    v1 = s.snapshot().version
    sql(spark, f"DELETE FROM {s.name} WHERE dt = 'd1'", catalog=catalog)
    now = rows(sql(spark, f"SELECT * FROM {s.name}", catalog=catalog))
    assert now == [r for r in sorted(ROWS) if r[1] == "d2"]
    then = sql(spark, f"SELECT * FROM {s.name} VERSION AS OF {v1}", catalog=catalog)
    assert rows(then) == sorted(ROWS)
    [entry] = [h for h in s.history() if h.version == v1]
    by_time = sql(
        spark,
        f"SELECT * FROM {s.name} TIMESTAMP AS OF '{entry.time_version and entry.time_version.isoformat()}'",
        catalog=catalog,
    )
    assert rows(by_time) == sorted(ROWS)
    joined = sql(
        spark,
        f"WITH old AS (SELECT * FROM {s.name} VERSION AS OF {v1}) "
        f"SELECT old.id FROM old LEFT JOIN {s.name} cur ON old.id = cur.id WHERE cur.id IS NULL",
        catalog=catalog,
    )
    assert rows(joined) == [(1,), (2,)]
    # a self join without a version clause reads one snapshot for both sides
    [(count,)] = rows(sql(spark, f"SELECT count(*) FROM {s.name} a JOIN {s.name} b ON a.id = b.id", catalog=catalog))
    assert count == 2


def test_describe_and_show(spark: SparkSession, catalog: Catalog) -> None:
    s, a = twins(spark, catalog, primary_key=True)
    history = sql(spark, f"DESCRIBE HISTORY {s.name}", catalog=catalog)
    assert [r.acid_operation for r in history.collect()] == [h.operation.display for h in s.history()]
    [detail] = sql(spark, f"DESCRIBE DETAIL {s.name}", catalog=catalog).collect()
    assert (detail.name, detail.primaryKey, detail.partitionColumns, detail.numRows) == (s.name, ["id"], ["dt"], 4)
    described = rows(sql(spark, f"DESCRIBE {s.name}", catalog=catalog))
    assert ("id", "bigint not null", None) in described and ("# Primary Key", "id", "") in described
    shown = rows(sql(spark, "SHOW TABLES IN lake", catalog=catalog))
    assert ("lake", s.name.split(".")[1], False) in shown and ("lake", a.name.split(".")[1], False) in shown
    assert rows(sql(spark, f"SHOW TABLES IN lake LIKE '{s.name.split('.')[1]}'", catalog=catalog)) == [
        ("lake", s.name.split(".")[1], False)
    ]


def test_describe_history_has_deltas_columns_and_types_and_acidtables_own(
    spark: SparkSession, catalog: Catalog
) -> None:
    s, _ = twins(spark, catalog, isolation_level="Serializable")
    sql(spark, f"DELETE FROM {s.name} WHERE dt = 'd1' AND id = 1", catalog=catalog)
    sql(spark, f"OPTIMIZE {s.name} ZORDER BY (amount)", catalog=catalog)
    history = sql(spark, f"DESCRIBE HISTORY {s.name}", catalog=catalog)
    delta = [
        ("version", "bigint"),
        ("timestamp", "timestamp"),
        ("userId", "string"),
        ("userName", "string"),
        ("operation", "string"),
        ("operationParameters", "map<string,string>"),
        ("clusterId", "string"),
        ("readVersion", "bigint"),
        ("isolationLevel", "string"),
        ("isBlindAppend", "boolean"),
        ("operationMetrics", "map<string,string>"),
        ("userMetadata", "string"),
        ("engineInfo", "string"),
    ]
    assert [(f.name, f.dataType.simpleString()) for f in history.schema.fields][: len(delta)] == delta
    assert {"acid_operation", "time_version", "retries"} <= set(history.columns)
    optimize, delete, write, create = history.collect()
    assert (optimize.operation, optimize.acid_operation, optimize.isolationLevel) == (
        "OPTIMIZE",
        "CLUSTER",
        "SnapshotIsolation",
    )
    assert (delete.operation, delete.readVersion, delete.isolationLevel, delete.isBlindAppend) == (
        "DELETE",
        1,
        "Serializable",
        False,
    )
    assert json.loads(delete.operationParameters["predicate"]) == ["(`dt` = 'd1') AND (`id` = 1)"]
    assert delete.operationMetrics["numRemovedFiles"] == "1" and delete.version == 2
    assert delete.operationMetrics["numDeletedRows"] == "1"  # what the job counted, kept in its record
    assert (write.operation, write.operationParameters) == ("WRITE", {"mode": "Append", "partitionBy": '["dt"]'})
    assert write.operationMetrics["numOutputRows"] == "4" and write.isBlindAppend is True
    assert create.operation == "CREATE TABLE" and create.engineInfo.startswith("acidtables/")
    # a Delta user's query over history runs unchanged
    history.createOrReplaceTempView("sql_history")
    assert rows(
        spark.sql("SELECT version FROM sql_history WHERE operation = 'WRITE' AND operationMetrics['numFiles'] > 0")
    ) == [(1,)]


def test_create_alter_drop(spark: SparkSession, catalog: Catalog) -> None:
    name = f"lake.c{next(_n)}"
    table = sql(
        spark,
        f"CREATE TABLE {name} (id BIGINT, dt STRING, amount DECIMAL(10,2), PRIMARY KEY (id)) USING acidtables "
        "PARTITIONED BY (dt) TBLPROPERTIES ('conflictPolicy' = 'maxcompute', 'team' = 'sales')",
        catalog=catalog,
    )
    meta = table.metadata
    assert (meta.primary_key, meta.partition_by, meta.conflict_policy.value) == (("id",), ("dt",), "maxcompute")
    assert meta.properties["team"] == "sales" and not next(c for c in meta.columns if c.name == "id").nullable
    assert sql(spark, f"CREATE TABLE IF NOT EXISTS {name} (id BIGINT) USING acidtables", catalog=catalog) is None
    info = sql(spark, f"ALTER TABLE {name} ADD COLUMNS (note STRING)", catalog=catalog)
    assert isinstance(info, CommitInfo) and catalog.table(name).metadata.column_names[-1] == "note"
    delta = f"lake.c{next(_n)}"
    sql(
        spark,
        f"CREATE TABLE {delta} (id BIGINT) USING acidtables TBLPROPERTIES ('delta.isolationLevel' = 'Serializable')",
        catalog=catalog,
    )
    assert catalog.table(delta).metadata.isolation_level == IsolationLevel.SERIALIZABLE
    sql(spark, f"ALTER TABLE {delta} SET TBLPROPERTIES ('isolationLevel' = 'WriteSerializable')", catalog=catalog)
    assert catalog.table(delta).metadata.isolation_level == IsolationLevel.WRITE_SERIALIZABLE
    sql(spark, f"DROP TABLE {delta}", catalog=catalog)
    with pytest.raises(TableNotFoundError):
        catalog.table(delta)
    # no acidtables table of that name: Spark's own DROP TABLE IF EXISTS, which finds nothing either
    sql(spark, f"DROP TABLE IF EXISTS {delta}", catalog=catalog)


# --- two phases, passthrough, errors --------------------------------------------------------------------------


def test_commit_false_gives_the_prepared_job(spark: SparkSession, catalog: Catalog) -> None:
    s, _ = twins(spark, catalog)
    head = s.snapshot().version
    prepared = sql(spark, f"DELETE FROM {s.name} WHERE id = 1", catalog=catalog, commit=False)
    assert isinstance(prepared, Prepared) and s.snapshot().version == head
    assert prepared.commit().version == head + 1


def test_statements_on_spark_tables_pass_through(spark: SparkSession, catalog: Catalog) -> None:
    spark.createDataFrame([(1,)], "x INT").createOrReplaceTempView("sql_plain")
    assert rows(sql(spark, "SELECT x + 1 FROM sql_plain", catalog=catalog)) == [(2,)]
    s, _ = twins(spark, catalog)
    # a Spark query that reads an acidtables table reads its pinned snapshot
    assert rows(sql(spark, f"SELECT count(*) FROM sql_plain CROSS JOIN {s.name}", catalog=catalog)) == [(4,)]


@pytest.mark.parametrize(
    ("statement", "message"),
    [
        (
            "MERGE INTO {t} o USING sql_plain u ON o.id = u.x WHEN NOT MATCHED BY SOURCE THEN UPDATE SET *",
            "WHEN NOT MATCHED BY SOURCE has no source row",
        ),
        (
            "MERGE INTO {t} o USING sql_plain u ON o.id = u.x WHEN NOT MATCHED BY SOURCE AND u.x > 1 THEN DELETE",
            "cannot be resolved",
        ),
        ("UPDATE {t} SET amount = (SELECT max(x) FROM sql_plain)", "holds a subquery"),
        ("DELETE FROM {t} WHERE id IN (SELECT id FROM {t} WHERE amount < 0)", "the table being written"),
        ("DELETE FROM {t} o WHERE EXISTS (SELECT 1 FROM sql_plain u WHERE u.x = o.id)", "correlated"),
        ("RESTORE TABLE {t} TO VERSION AS OF 'x'", "the version must be a whole number"),
        ("INSERT INTO {t} REPLACE WHERE amount < 0 SELECT 9, 'd1', 5.0", "DELTA_REPLACE_WHERE_MISMATCH"),
        ("OPTIMIZE {t} ZORDER BY (dt)", "dt is a partition column"),
        ("RESTORE TABLE {t}", "expected VERSION AS OF <version> or TIMESTAMP AS OF <timestamp>"),
        ("RESTORE TABLE {t} TO VERSION AS OF 999", "has no version 999"),
        ("UPDATE {t} SET nope = 1", "nope"),
        ("DELETE FROM {t} WHERE nope = 1", "nope"),
        ("INSERT INTO {t} VALUES (1, 'd1')", "the query gives 2 column(s)"),
        ("INSERT INTO {t} VALUES (1, 'd1', 'x')", "column amount is DOUBLE, the query gives STRING"),
        ("INSERT INTO {t} (id, nope) VALUES (1, 2)", "nope is not a column"),
        ("UPDATE {t} SET amount = 'x'", "column amount is DOUBLE, the expression gives STRING"),
        (
            "MERGE INTO {t} o USING sql_plain u ON o.id = u.x WHEN NOT MATCHED THEN INSERT (id, dt, amount) "
            "VALUES (u.x, 'd1', true)",
            "column amount is DOUBLE, the expression gives BOOLEAN",
        ),
        ("MERGE INTO {t} o USING sql_plain u ON o.id = u.x WHEN MATCHED THEN UPDATE SET nope = 1", "nope"),
        ("INSERT INTO {t} PARTITION (amount = 1) VALUES (1, 'd1')", "is partitioned by dt"),
        ("ALTER TABLE {t} COMPACT FULL", "use COMPACT MINOR or COMPACT MAJOR"),
        ("ALTER TABLE {t} DROP COLUMN amount", "is not supported"),
        ("SELECT * FROM {t} VERSION AS OF 'x'", "the version must be a whole number"),
        ("SELECT * FROM {t} VERSION AS OF 999", "999"),
        ("SELECT * FROM {t} TIMESTAMP AS OF '2999-01-01'", "2999-01-01 00:00:00+00:00 is later than now"),
        ("SELEKT 1", "cannot parse"),
        ("SELECT 1; SELECT 2", "exactly one statement"),
        ("CREATE TABLE lake.x (id INT) USING acidtables AS SELECT 1 AS id", "leave out the column list"),
        ("CREATE TABLE lake.x USING acidtables PARTITIONED BY (nope) AS SELECT 1 AS id", "PARTITIONED BY (nope)"),
        ("CREATE TABLE lake.x USING acidtables AS SELECT nope FROM {t}", "nope"),
    ],
)
def test_a_statement_acidtables_cannot_run_names_the_part_at_fault(
    spark: SparkSession, catalog: Catalog, statement: str, message: str
) -> None:
    spark.createDataFrame([(1,)], "x INT").createOrReplaceTempView("sql_plain")
    s, _ = twins(spark, catalog)
    head = s.snapshot().version
    with pytest.raises(Exception, match=__import__("re").escape(message)) as caught:
        sql(spark, statement.format(t=s.name), catalog=catalog)
    assert isinstance(caught.value, InvalidArgumentError | TableNotFoundError) or "999" in message
    assert s.snapshot().version == head, "nothing committed"


def test_the_demos_sql_part_agrees_with_the_api_at_every_step(spark: SparkSession, catalog: Catalog) -> None:
    from acidtables.cli.demo.sql import STEPS, sql_tour

    tour = sql_tour(spark, catalog)
    assert [s.same_as_api for s in tour.steps] == [True] * len(STEPS)
    assert [s.operation for s in tour.steps] == [
        "INSERT INTO",
        "UPDATE",
        "MERGE",
        "DELETE",
        "INSERT OVERWRITE",
        "MINOR COMPACT",
        "MERGE",
        "RESTORE",
    ]
    assert (tour.rows_at_version_1, tour.rows_now) == (2, 2)
    assert "SAME AS API" in tour.to_text() and tour.to_json()["steps"][0]["version"] == 1


def test_the_sql_pages_example_runs_as_written(spark: SparkSession, catalog: Catalog) -> None:
    """docs/sql.md's example (tests/test_docs.py checks that every example has its test)."""
    example = docs.block("docs/sql.md", "python")
    spark.createDataFrame(
        [(1, "2026-11-01", 12.0, False), (2, "2026-11-01", 0.0, True), (3, "2026-11-02", 5.0, False)],
        "id BIGINT, dt STRING, amount DOUBLE, deleted BOOLEAN",
    ).createOrReplaceTempView("updates")
    exec(compile(example.code, example.name, "exec"), {"spark": spark, "catalog": catalog})
    assert rows(SparkTable(spark, catalog.table("sales.orders")).read()) == [
        (1, "2026-11-01", 12.0),
        (3, "2026-11-02", 5.0),
    ]
    assert [h.operation.display for h in catalog.table("sales.orders").history()][:4] == [
        "DELETE",
        "MAJOR COMPACT",
        "MERGE",
        "INSERT INTO",
    ]


def test_one_statement_reads_one_snapshot_of_a_table_however_often_it_names_it(
    spark: SparkSession, catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    from acidtables.spark.statements import references

    s, _ = twins(spark, catalog)
    pin = references.Tables.pin
    deleted: list[int] = []

    def pin_then_someone_deletes(self: references.Tables, table: Table, version: Any = None) -> references.Pin:
        pinned = pin(self, table, version)
        if not deleted:  # a commit lands while the statement is being planned
            deleted.append(SparkTable(spark, s).delete("id = 1").version)
        return pinned

    monkeypatch.setattr(references.Tables, "pin", pin_then_someone_deletes)
    statement = (
        f"SELECT (SELECT count(*) FROM {s.name}) AS a, (SELECT count(*) FROM {s.name} x) AS b, "
        f"(SELECT count(*) FROM {s.name} WHERE id IN (SELECT id FROM {s.name})) AS c"
    )
    assert rows(sql(spark, statement, catalog=catalog)) == [(4, 4, 4)]
    assert deleted and table_rows(spark, s) == sorted(ROWS)[1:]


def test_timestamp_as_of_takes_an_expression_spark_evaluates(spark: SparkSession, catalog: Catalog) -> None:
    s, _ = twins(spark, catalog)
    assert rows(sql(spark, f"SELECT count(*) FROM {s.name} TIMESTAMP AS OF current_timestamp()", catalog=catalog)) == [
        (4,)
    ]
    with pytest.raises(InvalidArgumentError, match="TIMESTAMP AS OF"):
        sql(spark, f"SELECT * FROM {s.name} TIMESTAMP AS OF 'not a time'", catalog=catalog)


def test_create_with_commit_false_is_two_phase_and_other_ddl_passes_through(
    spark: SparkSession, catalog: Catalog
) -> None:
    name = f"lake.p{next(_n)}"
    prepared = sql(spark, f"CREATE TABLE {name} (id BIGINT) USING acidtables", catalog=catalog, commit=False)
    assert name not in catalog.list_tables("lake")
    prepared.commit()
    assert name in catalog.list_tables("lake")
    sql(spark, "CREATE OR REPLACE TEMPORARY VIEW sql_view AS SELECT 1 AS one", catalog=catalog)
    assert spark.table("sql_view").collect()[0].one == 1


# --- every clause is run or refused: nothing the parser accepts is dropped ---------------------------------


@pytest.mark.parametrize(
    ("statement", "message"),
    [
        ("DELETE FROM {t} VERSION AS OF 1 WHERE id > 0", "a write acts on the table's current version"),
        ("UPDATE {t} SET amount = -1 WHERE id < 10 ORDER BY id LIMIT 1", "'ORDER BY id' is not supported"),
        ("DELETE FROM {t} WHERE id = 1 RETURNING id", "'RETURNING id' is not supported"),
        ("INSERT INTO {t} REPLACE USING (dt) SELECT 1, 'd1', 1.0", "is not supported"),
        ("INSERT OR REPLACE INTO {t} VALUES (1, 'd1', 1.0)", "'ALTERNATIVE REPLACE' is not supported"),
        ("INSERT INTO {t} VALUES (1, 'd1', 1.0) ON CONFLICT DO NOTHING", "'ON CONFLICT DO NOTHING' is not supported"),
        ("INSERT INTO {t} TABLE sql_plain", "write it as INSERT INTO ... SELECT * FROM sql_plain"),
        ("INSERT INTO {t} (id, dt, id) VALUES (1, 'd1', 2)", "id named more than once"),
        ("UPDATE {t} SET other.amount = 1", "is not a column of"),
        ("UPDATE {t} SET amount.x = 1", "is not a column of"),
        ("ALTER TABLE {t} ADD COLUMNS (c INT FIRST)", "is not supported"),
        ("ALTER TABLE {t} ADD COLUMNS (c INT NOT NULL)", "an added column is nullable"),
        ("OPTIMIZE {t} ZORDER BY (amount.x)", "no struct fields"),
        ("CREATE TEMPORARY VIEW sql_over_acid AS SELECT * FROM {t}", "createOrReplaceTempView"),
        ("ANALYZE TABLE {t} COMPUTE STATISTICS", "names an acidtables table"),
        ("SHOW TBLPROPERTIES {t}", "names an acidtables table"),
        (
            "MERGE INTO {t} o USING sql_plain u ON o.id = u.x WHEN MATCHED THEN UPDATE SET o.amount = 1 RETURNING *",
            "RETURNING",
        ),
    ],
)
def test_a_clause_acidtables_would_ignore_is_refused(
    spark: SparkSession, catalog: Catalog, statement: str, message: str
) -> None:
    spark.createDataFrame([(1,)], "x INT").createOrReplaceTempView("sql_plain")
    s, _ = twins(spark, catalog)
    head = s.snapshot().version
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        sql(spark, statement.format(t=s.name), catalog=catalog)
    assert s.snapshot().version == head and table_rows(spark, s) == sorted(ROWS)


@pytest.mark.parametrize(
    "statement",
    [
        "CREATE TABLE lake.{n} (id BIGINT) USING acidtables STORED AS PARQUET",
        "CREATE TABLE lake.{n} (id BIGINT) USING acidtables CLUSTERED BY (id) INTO 4 BUCKETS",
        "CREATE TABLE lake.{n} (id BIGINT, ts TIMESTAMP) USING acidtables PARTITIONED BY (years(ts))",
        "CREATE TABLE lake.{n} (id BIGINT) USING acidtables PARTITIONED BY (b STRING)",
        "CREATE TABLE lake.{n} (id BIGINT PRIMARY KEY, b INT, PRIMARY KEY (b)) USING acidtables",
        "CREATE TABLE lake.{n} (id BIGINT) USING acidtables OPTIONS (a 'b')",
    ],
)
def test_create_refuses_what_it_cannot_keep(spark: SparkSession, catalog: Catalog, statement: str) -> None:
    name = f"c{next(_n)}"
    with pytest.raises(InvalidArgumentError, match="CREATE TABLE"):
        sql(spark, statement.format(n=name), catalog=catalog)
    assert f"lake.{name}" not in catalog.list_tables("lake")


def test_merge_between_tables_of_one_name_in_two_namespaces(spark: SparkSession, catalog: Catalog) -> None:
    short = f"m{next(_n)}"
    target = catalog.create_table(f"lake.{short}", SCHEMA)
    source = catalog.create_table(f"other.{short}", SCHEMA)
    SparkTable(spark, target).insert_into(spark.createDataFrame(ROWS, SCHEMA))
    SparkTable(spark, source).insert_into(spark.createDataFrame(ROWS[:1], SCHEMA))
    sql(
        spark,
        f"MERGE INTO lake.{short} USING other.{short} ON lake.{short}.id = other.{short}.id WHEN MATCHED THEN DELETE",
        catalog=catalog,
    )
    assert table_rows(spark, target) == sorted(ROWS)[1:]
    with pytest.raises(InvalidArgumentError, match="either table"):
        sql(
            spark,
            f"MERGE INTO lake.{short} USING other.{short} ON {short}.id = 1 WHEN MATCHED THEN DELETE",
            catalog=catalog,
        )


def test_merge_reads_a_struct_field_of_the_source_through_its_alias(spark: SparkSession, catalog: Catalog) -> None:
    s, _ = twins(spark, catalog)
    sql(
        spark,
        f"MERGE INTO {s.name} AS o USING (SELECT 1 AS id, named_struct('x', 5.0D) AS info) AS t ON o.id = t.id "
        "WHEN MATCHED THEN UPDATE SET amount = t.info.x",
        catalog=catalog,
    )
    assert (1, "d1", 5.0) in table_rows(spark, s)


def test_queries_keep_every_part_of_a_table_reference(spark: SparkSession, catalog: Catalog) -> None:
    s, _ = twins(spark, catalog)
    namespace, short = s.name.split(".")
    assert rows(sql(spark, f"SELECT count(*) FROM {s.name} TABLESAMPLE (1 ROWS)", catalog=catalog)) == [(1,)]
    assert rows(sql(spark, f"SELECT max(a) FROM {s.name} AS x(a, b, c)", catalog=catalog)) == [(4,)]
    assert rows(sql(spark, f"SELECT {namespace}.{short}.id FROM {s.name} WHERE id = 2", catalog=catalog)) == [(2,)]
    # names match without regard to case, as Spark's do
    assert rows(sql(spark, f"SELECT count(*) FROM {s.name.upper()}", catalog=catalog)) == [(4,)]
    sql(spark, f"DELETE FROM {s.name.upper()} WHERE id = 1", catalog=catalog)
    assert len(table_rows(spark, s)) == 3


def test_a_leading_with_belongs_to_the_writes_source(spark: SparkSession, catalog: Catalog) -> None:
    s, _ = twins(spark, catalog)
    sql(
        spark,
        f"WITH c AS (SELECT 7 AS id, 'd3' AS dt, 7.0 AS amount) INSERT INTO {s.name} SELECT * FROM c",
        catalog=catalog,
    )
    sql(
        spark,
        f"WITH c AS (SELECT 7 AS id, 'd3' AS dt, 70.0 AS amount) MERGE INTO {s.name} o USING c ON o.id = c.id "
        "WHEN MATCHED THEN UPDATE SET amount = c.amount",
        catalog=catalog,
    )
    assert (7, "d3", 70.0) in table_rows(spark, s)


def test_comments_drop_and_other_catalogs(spark: SparkSession, catalog: Catalog, tmp_path: Any) -> None:
    name = f"lake.k{next(_n)}"
    sql(
        spark,
        f"CREATE TABLE {name} (id BIGINT COMMENT 'the key', CONSTRAINT pk PRIMARY KEY (id)) USING acidtables "
        "COMMENT 'orders'",
        catalog=catalog,
    )
    sql(spark, f"ALTER TABLE {name} ADD COLUMNS (note STRING COMMENT 'free text')", catalog=catalog)
    described = rows(sql(spark, f"DESCRIBE {name}", catalog=catalog))
    assert ("id", "bigint not null", "the key") in described and ("note", "string", "free text") in described
    assert catalog.table(name).metadata.primary_key == ("id",)
    assert catalog.table(name).metadata.properties["comment"] == "orders"
    with pytest.raises(InvalidArgumentError, match="one acidtables table at a time"):
        sql(spark, f"DROP TABLE {name}, lake.other", catalog=catalog)
    assert sql(spark, "DROP TABLE IF EXISTS acidtables.lake.nothing_here", catalog=catalog) is None
    # Spark's own path tables are Spark's
    path = str(tmp_path / "plain")
    spark.createDataFrame([(1,)], "x INT").write.parquet(path)
    assert rows(sql(spark, f"SELECT x FROM parquet.`{path}`", catalog=catalog)) == [(1,)]
    # SHOW TABLES LIKE as Spark reads it: * any characters, | alternatives
    short = name.split(".")[1]
    assert rows(sql(spark, f"SHOW TABLES IN lake LIKE 'zz|{short[:1]}*{short[-1]}'", catalog=catalog)) == [
        ("lake", short, False)
    ]


def test_two_tables_with_one_short_name_in_one_query(spark: SparkSession, catalog: Catalog) -> None:
    """Qualified columns keep meaning the table their full name names, in joins (parenthesised too) and
    in correlated subqueries, where giving both the short name as alias would let the inner one capture
    the outer's columns."""
    short = f"o{next(_n)}"
    first = catalog.create_table(f"lake.{short}", SCHEMA)
    second = catalog.create_table(f"arch.{short}", SCHEMA)
    SparkTable(spark, first).insert_into(spark.createDataFrame(ROWS, SCHEMA))
    SparkTable(spark, second).insert_into(spark.createDataFrame(ROWS[:2], SCHEMA))
    a, b = f"lake.{short}", f"arch.{short}"
    exists = f"SELECT id FROM {a} WHERE EXISTS (SELECT 1 FROM {b} WHERE {b}.id = {a}.id AND {b}.id > 1)"
    assert rows(sql(spark, exists, catalog=catalog)) == [(2,)]
    joined = f"SELECT {a}.id FROM ({a} JOIN {b} ON {a}.id = {b}.id)"
    assert rows(sql(spark, joined, catalog=catalog)) == [(1,), (2,)]
    same_table = f"SELECT count(*) FROM {a} WHERE id IN (SELECT id FROM {a} WHERE amount > 0)"
    assert rows(sql(spark, same_table, catalog=catalog)) == [(2,)]


@pytest.mark.parametrize(
    ("statement", "message"),
    [
        ("SELECT * FROM {t}@v1", "VERSION AS OF"),
        ("DELETE FROM {t}@v1 WHERE id = 1", "VERSION AS OF"),
        ("MERGE INTO {t} x USING sql_plain y ON x.id = t.x WHEN MATCHED THEN DELETE", "names neither"),
        (
            "MERGE INTO {t} o USING (SELECT 1 AS id) u ON o.id = u.id WHEN MATCHED THEN UPDATE SET * EXCEPT (amount)",
            "EXCEPT",
        ),
        ("WITH c AS (SELECT 1 AS x) INSERT INTO {t} VALUES (1, 'd1', 1.0)", "write the rows as a SELECT"),
    ],
)
def test_more_clauses_refused(spark: SparkSession, catalog: Catalog, statement: str, message: str) -> None:
    spark.createDataFrame([(1,)], "x INT").createOrReplaceTempView("sql_plain")
    s, _ = twins(spark, catalog)
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        sql(spark, statement.format(t=s.name), catalog=catalog)
    assert table_rows(spark, s) == sorted(ROWS)


def test_namespaces_ctas_and_add_column(spark: SparkSession, catalog: Catalog, tmp_path: Any) -> None:
    s, _ = twins(spark, catalog)
    namespace = s.name.split(".")[0]
    catalog.create_table(f"default.{namespace}", "id BIGINT")  # a table named like the namespace
    sql(spark, f"DROP DATABASE IF EXISTS {namespace}", catalog=catalog)  # Spark's (no such database): not refused
    sql(
        spark,
        f"CREATE TABLE sql_ctas USING parquet LOCATION '{tmp_path}/ctas' AS SELECT * FROM {s.name}",
        catalog=catalog,
    )
    assert spark.table("sql_ctas").count() == 4
    spark.sql("DROP TABLE sql_ctas")
    sql(spark, f"ALTER TABLE {s.name} ADD COLUMN note STRING", catalog=catalog)
    assert catalog.table(s.name).metadata.column_names[-1] == "note"
