"""The `acidtables` Spark data source: format("acidtables") reads and writes through the same commits."""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, DataFrameReader, SparkSession
from tests.helpers.tables import source_options, write_part

from acidtables import Catalog
from acidtables.spark import SparkTable
from acidtables.spark.datasource import OPEN_COST_BYTES, TASK_BYTES, AcidTablesDataSource, packed_tasks

SCHEMA = "id BIGINT, dt STRING, amount DOUBLE"
options = source_options


def rows(df: DataFrame) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.select("id", "dt", "amount").collect())


@pytest.mark.parametrize("flavour", [{}, {"primary_key": ["id"]}], ids=["delta", "primary-key"])
def test_append_overwrite_and_time_travel_through_the_data_source(
    spark: SparkSession, catalog: Catalog, flavour: dict[str, object]
) -> None:
    catalog.create_table("ds.t", schema=SCHEMA, partition_by=["dt"], **flavour)  # type: ignore[arg-type]
    opts = options(catalog)
    first = spark.createDataFrame([(1, "a", 1.0), (2, "b", 2.0)], SCHEMA)
    first.write.format("acidtables").options(**opts).mode("append").save("ds.t")
    second = spark.createDataFrame([(2, "b", 20.0), (3, "a", 3.0)], SCHEMA)
    second.write.format("acidtables").options(**opts).mode("append").save("ds.t")

    def read() -> DataFrameReader:  # a DataFrameReader keeps its options: take a fresh one
        return spark.read.format("acidtables").options(**opts)

    if flavour:  # primary key: the second write's row for id 2 replaces the first's
        assert rows(read().load("ds.t")) == [(1, "a", 1.0), (2, "b", 20.0), (3, "a", 3.0)]
    else:
        assert rows(read().load("ds.t")) == [(1, "a", 1.0), (2, "b", 2.0), (2, "b", 20.0), (3, "a", 3.0)]
    assert rows(read().option("versionAsOf", 1).load("ds.t")) == rows(first)
    table = catalog.table("ds.t")
    assert rows(SparkTable(spark, table).read()) == rows(read().load("ds.t"))
    spark.createDataFrame([(9, "c", 9.0)], SCHEMA).write.format("acidtables").options(**opts).mode("overwrite").save(
        "ds.t"
    )
    assert rows(spark.read.format("acidtables").options(**opts).load("ds.t")) == [(9, "c", 9.0)]
    assert [h.operation.display for h in table.history()][:3] == ["INSERT OVERWRITE", "INSERT INTO", "INSERT INTO"]


def test_a_write_with_the_wrong_schema_is_refused_and_leaves_nothing(spark: SparkSession, catalog: Catalog) -> None:
    catalog.create_table("ds.strict", schema=SCHEMA)
    bad = spark.createDataFrame([(1, "a")], "id BIGINT, dt STRING")
    with pytest.raises(Exception, match="does not match the table"):
        bad.write.format("acidtables").options(**options(catalog)).mode("append").save("ds.strict")
    table = catalog.table("ds.strict")
    assert table.version == 0
    assert table.storage.list_dir("data") == []


def test_a_planned_write_counts_as_running_while_its_tasks_stage_files(catalog: Catalog) -> None:
    """Spark plans a write in one Python worker (`writer`, which begins the transaction), stages its files
    in tasks, and commits in another worker. The transaction's id carries the planning catalog's lease:
    that catalog must stay open, or cleanup() takes the write for dead and deletes what its tasks stage."""
    from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

    table = catalog.create_table("ds.planned", schema=SCHEMA)
    struct = StructType(
        [StructField("id", LongType()), StructField("dt", StringType()), StructField("amount", DoubleType())]
    )
    writer = AcidTablesDataSource({**options(catalog), "path": table.name}).writer(struct, False)
    staged = write_part(table.storage.absolute(table.storage.staging_dir(writer.state.txn_id)), "part-0.parquet", {})
    report = table.cleanup(grace_seconds=0)
    assert not report.deleted and Path(staged.path).exists(), "a running write's staged file was cleaned up"


def test_reading_a_missing_table_names_it(spark: SparkSession, catalog: Catalog) -> None:
    with pytest.raises(Exception, match=r"no table ds\.nothing"):
        spark.read.format("acidtables").options(**options(catalog)).load("ds.nothing").collect()


@pytest.mark.parametrize("step", ["read", "write", "time travel"])
def test_an_acidtables_error_in_the_data_source_is_the_first_line_spark_shows(
    spark: SparkSession, catalog: Catalog, step: str
) -> None:
    opts = options(catalog)
    run: Callable[[], object]
    if step == "read":
        expected = "TableNotFoundError: table(): no table ds.missing"
        run = lambda: spark.read.format("acidtables").options(**opts).load("ds.missing").collect()  # noqa: E731
    elif step == "write":
        expected = "TableNotFoundError: table(): no table ds.missing"
        frame = spark.createDataFrame([(1, "a", 1.0)], SCHEMA)
        run = lambda: frame.write.format("acidtables").options(**opts).mode("append").save("ds.missing")  # noqa: E731
    else:
        catalog.create_table("ds.t", schema=SCHEMA)
        expected = "VersionNotFoundError: ds.t has no version 7"
        run = (  # noqa: E731
            lambda: spark.read.format("acidtables").options(**opts).option("versionAsOf", 7).load("ds.t").collect()
        )
    with pytest.raises(Exception) as caught:
        run()
    first_line = str(caught.value).splitlines()[0]
    assert expected in first_line, first_line
    assert "Traceback" not in first_line


TYPED = "id BIGINT, d DATE, ts TIMESTAMP, price DECIMAL(10,2), note STRING"
TYPED_ROWS = [
    (1, date(2026, 11, 1), datetime(2026, 11, 1, 10, 30, 0), Decimal("12.50"), "a"),
    (2, date(2026, 11, 2), datetime(2026, 11, 2, 0, 0, 0, 250000), Decimal("-3.00"), "b"),
    (3, None, None, None, "c"),
]


def test_date_timestamp_and_decimal_partitions_mean_the_same_through_both_writers(
    spark: SparkSession, catalog: Catalog
) -> None:
    """Both writers spell the log's partition values alike, and each reader gives back what either wrote."""
    catalog.create_table("ds.typed", schema=TYPED, partition_by=["d", "ts", "price"])
    frame = spark.createDataFrame(TYPED_ROWS, TYPED)
    frame.write.format("acidtables").options(**options(catalog)).mode("append").save("ds.typed")
    table = catalog.table("ds.typed")
    through_source = {tuple(sorted(f.partition.items(), key=str)) for f in table.snapshot().files}
    SparkTable(spark, table).insert_into(frame)
    after = table.snapshot()
    through_spark = {
        tuple(sorted(f.partition.items(), key=str)) for f in after.files if f.added_version == after.version
    }
    assert through_source == through_spark
    assert ("d", "2026-11-01") in next(p for p in through_source if ("price", "12.50") in p)
    expected = sorted(TYPED_ROWS * 2, key=lambda r: r[0])
    by_source = spark.read.format("acidtables").options(**options(catalog)).load("ds.typed")
    assert sorted((tuple(r) for r in by_source.collect()), key=lambda r: r[0]) == expected
    assert sorted((tuple(r) for r in SparkTable(spark, table).read().collect()), key=lambda r: r[0]) == expected


def test_duplicate_keys_from_separate_tasks_read_alike_by_both_readers(spark: SparkSession, catalog: Catalog) -> None:
    catalog.create_table("ds.keys", schema=SCHEMA, partition_by=["dt"], primary_key=["id"])
    frame = spark.createDataFrame([(1, "a", 1.0), (1, "a", 2.0), (2, "a", 3.0), (2, "a", 4.0)], SCHEMA).repartition(4)
    frame.write.format("acidtables").options(**options(catalog)).mode("append").save("ds.keys")
    table = catalog.table("ds.keys")
    assert len(table.snapshot().files) > 1  # the tasks really wrote several files of one version
    by_source = rows(spark.read.format("acidtables").options(**options(catalog)).load("ds.keys"))
    assert [r[0] for r in by_source] == [1, 2]
    assert by_source == rows(SparkTable(spark, table).read())


def test_settings_given_as_options_reach_the_commit(spark: SparkSession, catalog: Catalog) -> None:
    catalog.create_table("ds.settings", schema=SCHEMA)
    frame = spark.createDataFrame([(1, "a", 1.0)], SCHEMA)
    writer = frame.write.format("acidtables").options(**options(catalog)).option("checkpoint.interval", "1")
    writer.mode("append").save("ds.settings")
    table = catalog.table("ds.settings")
    checkpoints = [i.path for i in table.storage.walk("_acidtables/checkpoints")]
    assert any(p.rsplit("/", 1)[-1].startswith(f"{table.version:020d}-") for p in checkpoints)
    with pytest.raises(Exception, match="ACIDTABLES_COMMIT_MAX_ATTEMPTS='0' must be at least 1"):
        frame.write.format("acidtables").options(**options(catalog)).option("commit.max_attempts", "0").mode(
            "append"
        ).save("ds.settings")
    with pytest.raises(Exception, match=r"unknown option 'etcd\.endpoint'; .*etcd\.endpoints"):
        spark.read.format("acidtables").option("etcd.endpoint", "http://x:1").load("ds.settings").collect()
    assert table.version == 1  # the refused write committed nothing


def test_a_whole_table_overwrite_writes_base_files_of_a_keyed_table(spark: SparkSession, catalog: Catalog) -> None:
    catalog.create_table("ds.base", schema=SCHEMA, primary_key=["id"])
    frame = spark.createDataFrame([(1, "a", 1.0)], SCHEMA)
    frame.write.format("acidtables").options(**options(catalog)).mode("append").save("ds.base")
    frame.write.format("acidtables").options(**options(catalog)).mode("overwrite").save("ds.base")
    table = catalog.table("ds.base")
    assert [f.kind for f in table.snapshot().files] == ["base"]
    assert table.history()[0].operation.display == "INSERT OVERWRITE"


def test_a_filtered_read_opens_and_proves_only_the_files_its_filters_can_match(
    spark: SparkSession, catalog: Catalog
) -> None:
    """Spark's pushed filters prune partitions, then statistics: a file gone from what a read prunes
    does not fail it, and one gone from what it keeps does, naming the file (before any task runs)."""
    catalog.create_table("ds.pruned", schema=SCHEMA, partition_by=["dt"])
    opts = options(catalog)
    for dt in ("a", "b", "c"):
        frame = spark.createDataFrame([(1, dt, 1.0), (2, dt, 2.0)], SCHEMA).coalesce(1)
        frame.write.format("acidtables").options(**opts).mode("append").save("ds.pruned")
    frame = spark.createDataFrame([(3, "a", 500.0)], SCHEMA).coalesce(1)
    frame.write.format("acidtables").options(**opts).mode("append").save("ds.pruned")

    def load() -> DataFrame:
        return spark.read.format("acidtables").options(**opts).load("ds.pruned")

    everything = rows(load())
    assert load().rdd.getNumPartitions() == 1  # tiny files share a task, as Spark packs its scans
    table = catalog.table("ds.pruned")
    in_b = next(f for f in table.snapshot().files if f.partition["dt"] == "b")
    small_a = next(f for f in table.snapshot().files if f.partition["dt"] == "a" and f.rows == 2)
    for gone in (in_b, small_a):
        Path(table.storage.absolute(gone.path)).unlink()

    assert rows(load().where("dt = 'c'")) == [(1, "c", 1.0), (2, "c", 2.0)]  # partitions
    assert rows(load().where("amount >= 500")) == [(3, "a", 500.0)]  # statistics
    assert rows(load().where("dt IN ('b', 'c') AND amount > 100")) == []
    assert rows(load().where("NOT (dt <=> 'a') AND NOT (dt <=> 'b')")) == [(1, "c", 1.0), (2, "c", 2.0)]
    for where, gone in [
        ("dt = 'b'", in_b),
        ("dt IN ('b', 'c')", in_b),
        ("amount < 100 AND dt = 'a'", small_a),
        ("dt = 'c' OR amount = 2", in_b),  # an OR is not pushed: every file, and Spark filters
    ]:
        with pytest.raises(Exception, match="DataFilesMissingError") as caught:
            load().where(where).collect()
        assert gone.path in str(caught.value), where
    with pytest.raises(Exception, match="DataFilesMissingError"):
        load().collect()
    assert len(everything) == 7


def test_a_keyed_tables_filtered_read_through_the_data_source_keeps_the_newest_version(
    spark: SparkSession, catalog: Catalog
) -> None:
    """The newest version of id 1 sits in a file whose amount statistics miss amount = 1.0: a filter on
    amount must not leave that file out and bring the older version back."""
    catalog.create_table("ds.keyed", schema=SCHEMA, partition_by=["dt"], primary_key=["id"])
    opts = options(catalog)
    for frame in ([(1, "a", 1.0), (2, "a", 1.0)], [(1, "a", 9.0)]):
        spark.createDataFrame(frame, SCHEMA).write.format("acidtables").options(**opts).mode("append").save("ds.keyed")
    load = spark.read.format("acidtables").options(**opts).load("ds.keyed")
    assert rows(load.where("amount = 1.0")) == [(2, "a", 1.0)]
    assert rows(load.where("id = 1")) == [(1, "a", 9.0)]


def test_files_are_packed_into_tasks_as_spark_packs_its_scans() -> None:
    """Up to 128 MB a task, each file counted with 4 MB more; a file larger than that has a task alone."""
    mb = 1 << 20
    sizes = [300 * mb, 100 * mb, 20 * mb, *([1024] * 40), 2 * mb]
    entries = [{"path": f"f{i}", "size_bytes": size} for i, size in enumerate(sizes)]
    tasks = packed_tasks(entries)
    assert [e for task in tasks for e in task] == entries  # every file once, in order
    assert [len(t) for t in tasks] == [1, 2, 31, 10]  # 100 MB + 20 MB, then 31 tiny files (4 MB each)
    for task in tasks:
        assert len(task) == 1 or sum(e["size_bytes"] + OPEN_COST_BYTES for e in task) <= TASK_BYTES
    assert packed_tasks([]) == [[]]
