"""Every SparkTable operation against the same operation done in plain Spark on plain DataFrames.

Four table flavours: `cow` (delta, copy-on-write), `dv` (delta with deletion vectors), `txn`
(maxcompute-transactional) and `pk` (maxcompute, primary key, merge-on-read). Real local Spark, real
Parquet files, real etcd.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from tests.helpers import docs

from acidtables import Catalog
from acidtables.core import FileKind
from acidtables.core.storage.storage import txn_of_staging_dir
from acidtables.errors import ConcurrentTransactionException, InvalidArgumentError
from acidtables.spark import Prepared, SparkTable
from acidtables.spark.compaction import commit_group, staged_groups

SCHEMA = "id BIGINT, dt STRING, amount DOUBLE"
FLAVOURS: dict[str, dict[str, Any]] = {
    "cow": {},
    "dv": {"row_level_concurrency": True},
    "txn": {"conflict_policy": "maxcompute-transactional"},
    "pk": {"primary_key": ["id"]},
}
_n = itertools.count()


def rows(df: DataFrame) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.select("id", "dt", "amount").collect())


def base_df(spark: SparkSession) -> DataFrame:
    data = [
        (i, "2026-11-01" if i % 3 == 0 else "2026-11-02" if i % 3 == 1 else "2026-11-03", float(i - 5))
        for i in range(12)
    ]
    return spark.createDataFrame(data, SCHEMA)


def make(spark: SparkSession, catalog: Catalog, flavour: str) -> SparkTable:
    table = catalog.create_table(f"shop.{flavour}{next(_n)}", schema=SCHEMA, partition_by=["dt"], **FLAVOURS[flavour])
    t = SparkTable(spark, table)
    t.insert_into(base_df(spark))
    return t


def upsert(base: DataFrame, new: DataFrame) -> DataFrame:
    """Plain-Spark model of a primary-key write: new rows replace old rows with the same (dt, id)."""
    return base.join(new.select("dt", "id"), ["dt", "id"], "left_anti").unionByName(new)


flavours = pytest.mark.parametrize("flavour", list(FLAVOURS))


@flavours
def test_insert_into_appends(spark: SparkSession, catalog: Catalog, flavour: str) -> None:
    t = make(spark, catalog, flavour)
    new = spark.createDataFrame([(100, "2026-11-01", 1.5), (3, "2026-11-01", 9.0)], SCHEMA)
    info = t.insert_into(new)
    expected = upsert(base_df(spark), new) if flavour == "pk" else base_df(spark).unionByName(new)
    assert rows(t.read()) == rows(expected)
    assert info.version == 2 and info.time_version is not None


@flavours
def test_insert_overwrite_of_the_whole_table(spark: SparkSession, catalog: Catalog, flavour: str) -> None:
    t = make(spark, catalog, flavour)
    new = spark.createDataFrame([(7, "2026-12-01", 0.5)], SCHEMA)
    t.insert_overwrite(new)
    assert rows(t.read()) == rows(new)


@flavours
def test_insert_overwrite_of_a_static_partition(spark: SparkSession, catalog: Catalog, flavour: str) -> None:
    t = make(spark, catalog, flavour)
    new = spark.createDataFrame([(50, 1.0), (51, 2.0)], "id BIGINT, amount DOUBLE")
    t.insert_overwrite(new, partition={"dt": "2026-11-02"})
    expected = (
        base_df(spark)
        .filter("dt != '2026-11-02'")
        .unionByName(new.withColumn("dt", F.lit("2026-11-02")).select("id", "dt", "amount"))
    )
    assert rows(t.read()) == rows(expected)


@flavours
def test_dynamic_insert_overwrite_replaces_only_partitions_in_the_data(
    spark: SparkSession, catalog: Catalog, flavour: str
) -> None:
    t = make(spark, catalog, flavour)
    new = spark.createDataFrame([(60, "2026-11-01", 1.0), (61, "2026-11-09", 2.0)], SCHEMA)
    t.insert_overwrite(new, dynamic=True)
    expected = base_df(spark).filter("dt NOT IN ('2026-11-01', '2026-11-09')").unionByName(new)
    assert rows(t.read()) == rows(expected)


@flavours
def test_truncate_a_partition_and_then_the_table(spark: SparkSession, catalog: Catalog, flavour: str) -> None:
    t = make(spark, catalog, flavour)
    t.truncate(partition={"dt": "2026-11-03"})
    assert rows(t.read()) == rows(base_df(spark).filter("dt != '2026-11-03'"))
    t.truncate()
    assert rows(t.read()) == []


@flavours
def test_update_matches_plain_spark(spark: SparkSession, catalog: Catalog, flavour: str) -> None:
    t = make(spark, catalog, flavour)
    t.update("amount < 0 AND dt = '2026-11-01'", {"amount": "amount * -10"})
    cond = F.expr("amount < 0 AND dt = '2026-11-01'")
    expected = base_df(spark).withColumn("amount", F.when(cond, F.col("amount") * -10).otherwise(F.col("amount")))
    assert rows(t.read()) == rows(expected)


@flavours
def test_delete_matches_plain_spark(spark: SparkSession, catalog: Catalog, flavour: str) -> None:
    t = make(spark, catalog, flavour)
    t.delete("id % 4 = 1 OR amount > 5")
    assert rows(t.read()) == rows(base_df(spark).filter("NOT (id % 4 = 1 OR amount > 5)"))


@flavours
def test_update_and_delete_that_match_nothing_change_nothing(
    spark: SparkSession, catalog: Catalog, flavour: str
) -> None:
    t = make(spark, catalog, flavour)
    t.update("id > 1000", {"amount": "0"})
    t.delete("dt = '1999-01-01'")
    assert rows(t.read()) == rows(base_df(spark))


@flavours
def test_merge_matches_plain_spark(spark: SparkSession, catalog: Catalog, flavour: str) -> None:
    t = make(spark, catalog, flavour)
    source = spark.createDataFrame(
        [
            (0, "2026-11-01", 100.0, False),
            (3, "2026-11-01", 0.0, True),
            (4, "2026-11-02", -7.0, False),
            (200, "2026-11-03", 2.0, False),
        ],
        "id BIGINT, dt STRING, amount DOUBLE, deleted BOOLEAN",
    )
    (
        t.merge(source, "t.id = s.id AND t.dt = s.dt")
        .when_matched_delete("s.deleted")
        .when_matched_update({"amount": "s.amount"})
        .when_not_matched_insert({"id": "s.id", "dt": "s.dt", "amount": "s.amount"})
        .execute()
    )
    base = {(r.id, r.dt): r.amount for r in base_df(spark).collect()}
    del base[(3, "2026-11-01")]
    base[(0, "2026-11-01")] = 100.0
    base[(4, "2026-11-02")] = -7.0
    base[(200, "2026-11-03")] = 2.0
    assert rows(t.read()) == sorted((i, d, a) for (i, d), a in base.items())


@flavours
def test_merge_with_several_clauses_of_a_kind_and_not_matched_by_source_matches_plain_spark(
    spark: SparkSession, catalog: Catalog, flavour: str
) -> None:
    # Delta's order rule: within each kind the first clause whose condition holds acts on the row
    t = make(spark, catalog, flavour)
    source = spark.createDataFrame(
        [
            (0, "2026-11-01", 100.0),  # matched, > 50: the first update
            (1, "2026-11-02", 5.0),  # matched, > 0: the second update
            (2, "2026-11-03", -1.0),  # matched, neither: deleted
            (300, "2026-11-03", 2.0),  # not matched, > 0: the first insert
            (301, "2026-11-02", -3.0),  # not matched: the second
        ],
        SCHEMA,
    )
    info = (
        t.merge(source, "t.id = s.id AND t.dt = s.dt")
        .when_matched_update({"amount": "s.amount * 10"}, "s.amount > 50")
        .when_matched_update({"amount": "s.amount"}, "s.amount > 0")
        .when_matched_delete()
        .when_not_matched_insert({"id": "s.id", "dt": "s.dt", "amount": "s.amount + 0.5"}, "s.amount > 0")
        .when_not_matched_insert_all()
        .when_not_matched_by_source_update({"amount": "t.amount - 1000"}, "t.dt = '2026-11-01'")
        .when_not_matched_by_source_delete("t.amount < 0")
        .execute()
    )
    # Delta's MERGE metrics: ids 0 and 1 updated, 2 deleted, 300 and 301 inserted; not matched by source,
    # 3, 6 and 9 (2026-11-01) updated and 4 (amount -1) deleted
    assert dict(info.metrics) == {
        "numTargetRowsInserted": 2,
        "numTargetRowsUpdated": 5,
        "numTargetRowsDeleted": 2,
        "numTargetRowsMatchedUpdated": 2,
        "numTargetRowsMatchedDeleted": 1,
        "numTargetRowsNotMatchedBySourceUpdated": 3,
        "numTargetRowsNotMatchedBySourceDeleted": 1,
    }
    expected = {(r.id, r.dt): r.amount for r in base_df(spark).collect()}
    expected[(0, "2026-11-01")] = 1000.0
    expected[(1, "2026-11-02")] = 5.0
    del expected[(2, "2026-11-03")]
    expected[(300, "2026-11-03")] = 2.5
    expected[(301, "2026-11-02")] = -3.0
    for (i, dt), amount in list(expected.items()):
        if i in (0, 1, 2, 300, 301):
            continue
        if dt == "2026-11-01":  # not matched by source: the first clause wins even where the second holds
            expected[(i, dt)] = amount - 1000
        elif amount < 0:
            del expected[(i, dt)]
    assert rows(t.read()) == sorted((i, d, a) for (i, d), a in expected.items())


@flavours
def test_merge_deletes_a_row_several_source_rows_match_when_its_only_matched_clause_is_a_delete(
    spark: SparkSession, catalog: Catalog, flavour: str
) -> None:
    t = make(spark, catalog, flavour)
    source = spark.createDataFrame([(1, "2026-11-02", 1.0), (1, "2026-11-02", 2.0), (999, "2026-11-02", 9.0)], SCHEMA)
    t.merge(source, "t.id = s.id AND t.dt = s.dt").when_matched_delete().when_not_matched_insert_all().execute()
    expected = [r for r in rows(base_df(spark)) if r[0] != 1] + [(999, "2026-11-02", 9.0)]
    assert rows(t.read()) == sorted(expected)
    # a condition on the delete makes which source row decides matter: Delta's error
    with pytest.raises(InvalidArgumentError, match="more than one source row"):
        t.merge(source.withColumn("id", F.lit(4).cast("long")), "t.id = s.id").when_matched_delete(
            "s.amount > 1"
        ).execute()


def test_the_spark_pages_merge_runs_as_written(spark: SparkSession, catalog: Catalog) -> None:
    """docs/spark.md's MERGE (tests/test_docs.py checks that every example has its test)."""
    example = docs.block("docs/spark.md", "python")
    t = make(spark, catalog, "cow")
    source = spark.createDataFrame(
        [(0, "2026-11-01", 100.0, False), (1, "2026-11-02", 5.0, False), (2, "2026-11-03", 0.0, True)],
        "id BIGINT, dt STRING, amount DOUBLE, deleted BOOLEAN",
    )
    exec(compile(example.code, example.name, "exec"), {"t": t, "source": source})
    expected = {(r.id, r.dt): r.amount for r in base_df(spark).collect()}
    expected[(0, "2026-11-01")] = 1000.0
    expected[(1, "2026-11-02")] = 5.0
    del expected[(2, "2026-11-03")]
    for (i, dt), amount in list(expected.items()):
        if i > 2 and dt == "2026-11-01":
            expected[(i, dt)] = 0.0
        elif i > 2 and amount < 0:
            del expected[(i, dt)]
    assert rows(t.read()) == sorted((i, d, a) for (i, d), a in expected.items())


@flavours
def test_an_update_of_the_partition_column_moves_the_row_on_delta_tables_only(
    spark: SparkSession, catalog: Catalog, flavour: str
) -> None:
    t = make(spark, catalog, flavour)
    before = rows(t.read())
    if FLAVOURS[flavour].get("conflict_policy") or flavour == "pk":  # the MaxCompute policies: its rule
        with pytest.raises(InvalidArgumentError, match="MaxCompute's rule"):
            t.update("id = 1", {"dt": "'2026-11-09'"})
        with pytest.raises(InvalidArgumentError, match="MaxCompute's rule"):
            t.merge(t.read().filter("id = 1"), "t.id = s.id").when_matched_update({"dt": "'x'"}).execute()
        assert rows(t.read()) == before
        return
    t.update("id IN (1, 2)", {"dt": "'2026-11-09'", "amount": "amount + 100"})
    t.merge(t.read().filter("id = 4"), "t.id = s.id").when_matched_update({"dt": "'2026-11-10'"}).execute()
    moved = {1: ("2026-11-09", -4.0 + 100), 2: ("2026-11-09", -3.0 + 100), 4: ("2026-11-10", -1.0)}
    expected = sorted((i, *moved[i]) if i in moved else (i, dt, a) for i, dt, a in before)
    assert rows(t.read()) == expected
    assert rows(t.read(where="dt = '2026-11-09'")) == [(1, "2026-11-09", 96.0), (2, "2026-11-09", 97.0)]


@flavours
def test_insert_overwrite_replace_where_replaces_the_rows_the_predicate_selects(
    spark: SparkSession, catalog: Catalog, flavour: str
) -> None:
    t = make(spark, catalog, flavour)
    before = rows(t.read())
    new = spark.createDataFrame([(100, "2026-11-02", 1.0), (101, "2026-11-03", 2.0)], SCHEMA)
    if flavour == "pk":
        with pytest.raises(InvalidArgumentError, match="replace_where is for tables without a primary key"):
            t.insert_overwrite(new, replace_where="amount > 0")
        assert rows(t.read()) == before
        return
    # Delta's replaceWhere: rows across partitions, selected by a data column, are replaced
    t.insert_overwrite(new, replace_where="amount > 0 AND amount < 5")
    kept = [r for r in before if not 0 < r[2] < 5]
    assert rows(t.read()) == sorted([*kept, (100, "2026-11-02", 1.0), (101, "2026-11-03", 2.0)])
    # a written row the predicate does not select: Delta's DELTA_REPLACE_WHERE_MISMATCH, nothing committed
    version = t.table.version
    with pytest.raises(InvalidArgumentError, match="DELTA_REPLACE_WHERE_MISMATCH"):
        t.insert_overwrite(new.withColumn("amount", F.lit(9.0)), replace_where="amount < 5")
    with pytest.raises(InvalidArgumentError, match="give one of partition=, dynamic=True and replace_where="):
        t.insert_overwrite(new, dynamic=True, replace_where="amount < 5")
    assert t.table.version == version


@flavours
def test_update_and_delete_report_deltas_row_counts_even_when_they_commit_nothing(
    spark: SparkSession, catalog: Catalog, flavour: str
) -> None:
    t = make(spark, catalog, flavour)
    assert dict(t.update("id IN (1, 2, 4)", {"amount": "0"}).metrics) == {"numUpdatedRows": 3}
    assert dict(t.delete("id = 3").metrics) == {"numDeletedRows": 1}
    nothing = t.update("id = 999", {"amount": "0"})
    assert dict(nothing.metrics) == {"numUpdatedRows": 0}
    if flavour in ("cow", "dv"):  # at WriteSerializable, the default, Delta records the empty commit too
        assert not nothing.skipped
    serializable = SparkTable(
        spark,
        catalog.create_table(f"shop.ser{next(_n)}", schema=SCHEMA, partition_by=["dt"], isolation_level="Serializable"),
    )
    serializable.insert_into(base_df(spark))
    skipped = serializable.delete("id = 999")
    assert skipped.skipped and dict(skipped.metrics) == {"numDeletedRows": 0}
    assert skipped.version == serializable.table.version == 1


@flavours
def test_a_merge_writes_back_a_row_several_source_rows_matched_once_when_no_clause_acts_on_it(
    spark: SparkSession, catalog: Catalog, flavour: str
) -> None:
    # only a not-matched-by-source clause: the matched row 1 is left as it is, whatever its file's fate
    t = make(spark, catalog, flavour)
    source = spark.createDataFrame([(1, "2026-11-02", 0.0), (1, "2026-11-02", 0.0)], SCHEMA)
    t.merge(source, "t.id = s.id AND t.dt = s.dt").when_not_matched_by_source_delete("t.id = 4").execute()
    assert rows(t.read()) == [r for r in rows(base_df(spark)) if r[0] != 4]


@flavours
def test_merge_insert_all_and_update_all(spark: SparkSession, catalog: Catalog, flavour: str) -> None:
    t = make(spark, catalog, flavour)
    source = spark.createDataFrame([(1, "2026-11-02", 11.0), (300, "2026-11-02", 3.0)], SCHEMA)
    t.merge(
        source, "t.id = s.id AND t.dt = '2026-11-02'"
    ).when_matched_update_all().when_not_matched_insert_all().execute()
    expected = upsert(base_df(spark), source)
    assert rows(t.read()) == rows(expected)


@flavours
@pytest.mark.parametrize("kind", ["minor", "major"])
def test_compaction_keeps_the_data(spark: SparkSession, catalog: Catalog, flavour: str, kind: str) -> None:
    t = make(spark, catalog, flavour)
    for i in range(3):
        t.insert_into(spark.createDataFrame([(500 + i, "2026-11-01", float(i))], SCHEMA))
    t.update("id = 500", {"amount": "42"})
    t.delete("id = 501")
    before = rows(t.read())
    files_before = len(t.table.snapshot().files)
    infos = t.compact(kind, target_file_bytes=1 << 20)
    assert isinstance(infos, list) and infos, "compaction committed nothing"
    assert all(i.time_version is None for i in infos)
    assert rows(t.read()) == before
    assert len(t.table.snapshot().files) < files_before


@flavours
def test_cluster_reorders_without_changing_data(spark: SparkSession, catalog: Catalog, flavour: str) -> None:
    t = make(spark, catalog, flavour)
    before = rows(t.read())
    info = t.cluster(by=["amount"])
    assert info.time_version is None
    assert rows(t.read()) == before
    assert t.table.history(limit=1)[0].operation.display == "CLUSTER"


@flavours
def test_time_travel_and_changes(spark: SparkSession, catalog: Catalog, flavour: str) -> None:
    t = make(spark, catalog, flavour)
    first = t.insert_into(spark.createDataFrame([(900, "2026-11-01", 9.0)], SCHEMA))
    t.delete("id = 900")
    assert rows(t.read(version=1)) == rows(base_df(spark))
    assert (900, "2026-11-01", 9.0) in rows(t.read(version=first.version))
    assert (900, "2026-11-01", 9.0) in rows(t.read(timestamp=first.time_version))
    assert (900, "2026-11-01", 9.0) not in rows(t.read())
    changes = t.changes(start_version=first.version).filter("id = 900")
    kinds = sorted((r._commit_version, r._change_type) for r in changes.collect())
    assert kinds == [(first.version, "insert"), (first.version + 1, "delete")]


@flavours
def test_uncommitted_operation_is_invisible_until_committed(
    spark: SparkSession, catalog: Catalog, flavour: str
) -> None:
    t = make(spark, catalog, flavour)
    prepared = t.update("id = 1", {"amount": "77"}, commit=False)
    assert isinstance(prepared, Prepared)
    assert (1, "2026-11-02", 77.0) not in rows(t.read())
    prepared.commit()
    assert (1, "2026-11-02", 77.0) in rows(t.read())


@flavours
def test_aborted_operation_leaves_nothing(spark: SparkSession, catalog: Catalog, flavour: str) -> None:
    t = make(spark, catalog, flavour)
    prepared = t.insert_into(spark.createDataFrame([(1000, "2026-11-01", 1.0)], SCHEMA), commit=False)
    assert isinstance(prepared, Prepared)
    staging = t.table.storage.staging_dir(prepared.transaction.txn_id)
    assert t.table.storage.exists(staging)
    prepared.abort()
    assert not t.table.storage.exists(staging)
    assert rows(t.read()) == rows(base_df(spark)) and t.table.version == 1


def test_a_reader_keeps_its_snapshot_while_20_commits_land(spark: SparkSession, catalog: Catalog) -> None:
    t = make(spark, catalog, "cow")
    pinned = t.table.snapshot()
    from acidtables.spark.reads import read_snapshot

    reader = read_snapshot(spark, t.table, pinned)
    for i in range(20):
        t.insert_into(spark.createDataFrame([(2000 + i, "2026-11-01", 0.0)], SCHEMA))
    t.compact("major", target_file_bytes=1 << 20)
    assert rows(reader) == rows(base_df(spark))
    assert len(rows(t.read())) == 12 + 20


def test_a_failing_job_leaves_no_visible_data_and_no_staged_files(spark: SparkSession, catalog: Catalog) -> None:
    t = make(spark, catalog, "cow")
    bad = spark.createDataFrame([(1, "2026-11-01", 1.0)], SCHEMA).withColumn(
        "amount", F.expr("raise_error('the job failed')").cast("double")
    )
    with pytest.raises(Exception, match="the job failed"):
        t.insert_into(bad)
    assert t.table.version == 1
    assert t.table.cleanup(grace_seconds=0).deleted == ()  # abort already removed the staging dir
    assert not t.table.storage.list_dir("data") or all(
        txn_of_staging_dir(e.path.rsplit("/", 1)[-1]) in {h.txn_id for h in t.table.history()}
        for e in t.table.storage.list_dir("data")
    )


@pytest.mark.parametrize(
    ("df_schema", "message"),
    [
        ("id BIGINT, dt STRING", "missing column amount double"),
        ("id STRING, dt STRING, amount DOUBLE", "column id is string, the table has bigint"),
        ("id BIGINT, dt STRING, amount DOUBLE, note STRING", "extra column note string"),
    ],
)
def test_a_write_that_does_not_match_the_schema_names_the_columns(
    spark: SparkSession, catalog: Catalog, df_schema: str, message: str
) -> None:
    t = make(spark, catalog, "cow")
    with pytest.raises(InvalidArgumentError, match=message):
        t.insert_into(spark.createDataFrame([], df_schema))
    assert t.table.version == 1


def test_merge_schema_adds_columns_through_a_metadata_commit(spark: SparkSession, catalog: Catalog) -> None:
    t = make(spark, catalog, "cow")
    wider = spark.createDataFrame(
        [(5000, "2026-11-01", 1.0, "vip")], "id BIGINT, dt STRING, amount DOUBLE, note STRING"
    )
    t.insert_into(wider, merge_schema=True)
    assert t.table.metadata.column_names == ("id", "dt", "amount", "note")
    assert t.table.commits(2)[0].metadata is not None
    notes = {r.id: r.note for r in t.read().collect()}
    assert notes[5000] == "vip" and notes[0] is None


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda t: t.update("amount <", {"amount": "0"}), "is not valid"),
        (lambda t: t.update("amount < 0", {"nope": "0"}), "has no column 'nope'"),
        (lambda t: t.insert_into([1, 2]), "expected a Spark DataFrame"),
        (lambda t: t.insert_overwrite(t.read(), partition={"day": "x"}), "partition column"),
        (lambda t: t.compact("medium"), "use 'minor' or 'major'"),
        (lambda t: t.compact("minor", where="amount > 1"), "partition columns"),
        (lambda t: t.cluster(by="id"), "non-empty list"),
        (lambda t: t.cluster(by=["amount", "DT"]), "dt is a partition column"),
        (lambda t: t.merge(t.read(), "t.id = s.id").execute(), "at least one"),
        (
            lambda t: t.merge(t.read(), "t.id = s.id").when_matched_delete().when_matched_update({"amount": "0"}),
            "could never apply",
        ),
        (
            lambda t: (
                t.merge(t.read(), "t.id = s.id").when_not_matched_by_source_delete().when_not_matched_by_source_delete()
            ),
            "could never apply",
        ),
        (
            lambda t: (
                t.merge(t.read(), "t.id = s.id").when_not_matched_by_source_update({"amount": "s.amount"}).execute()
            ),
            "value of amount .* is not valid",
        ),
    ],
)
def test_bad_calls_name_the_problem(
    spark: SparkSession, catalog: Catalog, call: Callable[[SparkTable], object], message: str
) -> None:
    t = make(spark, catalog, "cow")
    with pytest.raises(InvalidArgumentError, match=message):
        call(t)
    assert t.table.version == 1


def test_merge_with_two_source_rows_for_one_target_row_fails(spark: SparkSession, catalog: Catalog) -> None:
    t = make(spark, catalog, "cow")
    source = spark.createDataFrame([(1, "2026-11-02", 1.0), (1, "2026-11-02", 2.0)], SCHEMA)
    with pytest.raises(InvalidArgumentError, match="more than one source row"):
        t.merge(source, "t.id = s.id").when_matched_update({"amount": "s.amount"}).execute()
    assert t.table.version == 1


def test_primary_key_table_reads_the_same_after_minor_and_major_compaction(
    spark: SparkSession, catalog: Catalog
) -> None:
    t = make(spark, catalog, "pk")
    for i in range(4):
        t.insert_into(spark.createDataFrame([(i, "2026-11-01", 100.0 + i), (40 + i, "2026-11-02", 1.0)], SCHEMA))
    t.delete("id = 41")
    t.update("dt = '2026-11-02' AND id >= 42", {"amount": "amount + 1"})
    expected = rows(t.read())
    t.compact("minor", target_file_bytes=1 << 20)
    assert rows(t.read()) == expected
    assert any(f.kind is FileKind.CHANGES and f.lineage for f in t.table.snapshot().files)
    t.compact("major", target_file_bytes=1 << 20)
    assert rows(t.read()) == expected
    assert all(f.kind is FileKind.BASE for f in t.table.snapshot().files)


def test_partition_filters_and_statistics_prune_files_before_spark_reads(spark: SparkSession, catalog: Catalog) -> None:
    t = make(spark, catalog, "cow")
    t.insert_into(spark.createDataFrame([(1000 + i, "2026-11-01", 500.0) for i in range(3)], SCHEMA))
    everything = set(t.read().inputFiles())
    by_partition = set(t.read(where="dt = '2026-11-02'").inputFiles())
    by_stats = t.read(where="amount >= 500")
    assert by_partition and by_partition < everything
    assert all("dt=2026-11-02" in f for f in by_partition)
    # only the files of that insert reach amount 500; the base data's max is 6
    added = {f.path.rsplit("/", 1)[-1] for f in t.table.commits(2, 2)[0].adds}
    assert {f.rsplit("/", 1)[-1] for f in by_stats.inputFiles()} == added
    assert rows(by_stats) == [(1000 + i, "2026-11-01", 500.0) for i in range(3)]


def test_a_primary_key_tables_filtered_read_never_brings_back_an_older_version(
    spark: SparkSession, catalog: Catalog
) -> None:
    """An update moves a row's newest version to a file whose amount statistics miss the old value, and a
    delete leaves a tombstone whose amount is null: pruning either file by amount would let merge-on-read
    pick the older version. Key and partition columns still prune."""
    t = make(spark, catalog, "pk")
    t.insert_into(spark.createDataFrame([(900, "2026-11-01", 5.0), (901, "2026-11-01", 5.0)], SCHEMA))
    t.update("id = 900", {"amount": "10"})
    t.delete("id = 901")
    for where in ("amount = 5", "amount < 6", "amount IS NULL OR amount = 5"):
        got = rows(t.read(where=where))
        assert (900, "2026-11-01", 5.0) not in got and (901, "2026-11-01", 5.0) not in got, where
        assert got == rows(t.read().where(where)), where
    assert rows(t.read(where="id = 900")) == [(900, "2026-11-01", 10.0)]
    by_key = t.read(where="id = 900").inputFiles()
    assert by_key and len(by_key) < len(t.read().inputFiles())


def test_partition_values_that_need_escaping_and_nulls_round_trip(spark: SparkSession, catalog: Catalog) -> None:
    table = catalog.create_table("shop.odd", schema=SCHEMA, partition_by=["dt"])
    t = SparkTable(spark, table)
    odd = [(1, "a/b=c%d e", 1.0), (2, None, 2.0), (3, "ü ñ", 3.0), (4, "a+b", 4.0)]
    t.insert_into(spark.createDataFrame(odd, SCHEMA))
    assert sorted(f.partition["dt"] or "" for f in table.snapshot().files) == ["", "a+b", "a/b=c%d e", "ü ñ"]
    assert sorted(tuple(r) for r in t.read().collect()) == sorted(odd, key=lambda r: r[0])
    assert [tuple(r) for r in t.read(where="dt IS NULL").collect()] == [(2, None, 2.0)]
    # the paths through the per-row file key (update, compaction) must see those rows too: a '+' in a
    # path once made them match no file, so compaction rewrote the partition empty
    t.update("id = 4", {"amount": "40"})
    t.compact("major", target_file_bytes=1 << 20)
    assert (4, "a+b", 40.0) in [tuple(r) for r in t.read().collect()]
    assert len(t.read().collect()) == 4


@pytest.mark.parametrize("flavour", ["cow", "pk"])
def test_a_duplicated_compaction_job_commits_each_group_once(
    spark: SparkSession, catalog: Catalog, flavour: str
) -> None:
    """Two pods of one CompactionJob (a retry racing a slow first attempt) plan the same groups: the
    group's application id makes the second commit of a group the named conflict (§13.1 rule 2),
    whatever the policy would say of two compactions, never a second rewrite."""
    t = make(spark, catalog, flavour)
    for i in range(3):
        t.insert_into(spark.createDataFrame([(500 + i, "2026-11-01", float(i))], SCHEMA))
    before, version = rows(t.read()), t.table.version
    first = staged_groups(spark, t.table, "minor", target_file_bytes=1 << 20, job_id="job-uid-1")
    second = staged_groups(spark, t.table, "minor", target_file_bytes=1 << 20, job_id="job-uid-1")
    a, b = next(first), next(second)
    assert a.summary["partition"] == b.summary["partition"]
    landed = commit_group(t.table, a)
    assert landed is not None and not landed.skipped
    with pytest.raises(ConcurrentTransactionException):
        b.commit()
    assert t.table.version == version + 1 and rows(t.read()) == before
    assert not t.table.storage.list_dir(t.table.storage.staging_dir(b.transaction.txn_id))
