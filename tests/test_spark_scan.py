"""How a read puts partition values on rows: Spark's own directory parse when it provably equals the
log, a join by Spark's file name otherwise, and the log's value winning whenever they differ."""

from __future__ import annotations

import itertools
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from acidtables import Catalog, DataFile, Table, Transaction
from acidtables.core import Storage
from acidtables.core.log.records import Column, TableMetadata
from acidtables.errors import InvalidArgumentError
from acidtables.spark import SparkTable
from acidtables.spark.files import footer
from acidtables.spark.scan import _directories_agree, _spark_spelling, _spark_unescape

SCHEMA = "id BIGINT, dt STRING, amount DOUBLE"
_typed = itertools.count()


def meta(partition_type: str = "STRING") -> TableMetadata:
    columns = (Column("id", "BIGINT"), Column("dt", partition_type), Column("amount", "DOUBLE"))
    return TableMetadata(table_id="t", name="s.t", location="/tmp/t", columns=columns, partition_by=("dt",))


def staged(segment: str, value: Any, *, layout: str = "data/_acid_txn=abc/_acid_write=0000") -> DataFile:
    return DataFile(path=f"{layout}/{segment}/part-0.parquet", partition={"dt": value}, rows=1)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("plain", "plain"),
        ("a%2Fb%3Dc%25d e", "a/b=c%d e"),
        ("%41%4a", "AJ"),
        ("100%", None),  # Spark keeps a stray '%' as is, a regex decoder would not: not provable
        ("%%41", None),
        ("%4G", None),
    ],
)
def test_spark_unescape_mirrors_spark_or_declines(raw: str, expected: str | None) -> None:
    assert _spark_unescape(raw) == expected


@pytest.mark.parametrize(
    ("file", "partition_type", "agrees"),
    [
        (staged("dt=2026-11-01", "2026-11-01"), "STRING", True),
        (staged("dt=a%2Fb", "a/b"), "STRING", True),
        (staged("dt=__HIVE_DEFAULT_PARTITION__", None), "STRING", True),
        (staged("dt=__HIVE_DEFAULT_PARTITION__", "__HIVE_DEFAULT_PARTITION__"), "STRING", False),
        (staged("dt=2026-11-01", "2026-11-02"), "STRING", False),  # the directory disagrees with the log
        (staged("dt=2026-11-01", None), "STRING", False),
        (staged("dt=", ""), "STRING", False),  # Spark asserts a directory value is not empty
        (staged("other=2026-11-01", "2026-11-01"), "STRING", False),
        (staged("dt=7", 7), "INT", True),
        (staged("dt=07", 7), "INT", False),  # Spark would read 7, but only canonical spellings are proved
        (staged("dt=7", "7"), "INT", False),
        (staged("dt=1.5", 1.5), "DOUBLE", False),  # no proof for types with several spellings
        (staged("dt=2026-11-01", "2026-11-01", layout="data/abc"), "STRING", False),  # not where write_staged writes
        (staged("dt=x", "x", layout="data/_acid_txn=a%41/_acid_write=0000"), "STRING", False),
        (DataFile(path="/elsewhere/dt=x/part-0.parquet", partition={"dt": "x"}, rows=1), "STRING", False),
    ],
)
def test_directories_agree_only_when_spark_reads_the_logs_value(
    file: DataFile, partition_type: str, agrees: bool
) -> None:
    assert _directories_agree(meta(partition_type), Storage("/tmp/t"), [file]) is agrees


def test_one_disagreeing_file_sends_the_whole_read_to_the_join() -> None:
    files = [staged("dt=a", "a"), staged("dt=b", "c")]
    storage = Storage("/tmp/t")
    assert _directories_agree(meta(), storage, files[:1]) and not _directories_agree(meta(), storage, files)


@pytest.mark.parametrize(
    ("uri", "spelled"),
    [
        ("file:///tmp/t/dt=a+b%253A/p.parquet", "file:/tmp/t/dt=a+b%253A/p.parquet"),
        ("s3a://bucket/t/dt=a/p.parquet", "s3a://bucket/t/dt=a/p.parquet"),
        ("hdfs://nn:8020/t/p.parquet", "hdfs://nn:8020/t/p.parquet"),
    ],
)
def test_spark_spelling_of_a_listed_file(uri: str, spelled: str) -> None:
    assert _spark_spelling(uri) == spelled


def _plan(df: DataFrame) -> str:
    return str(df._jdf.queryExecution().executedPlan().toString())


def _rows(df: DataFrame) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.select("id", "dt", "amount").collect())


def test_a_read_of_many_local_files_lists_them_on_the_driver_and_leaves_the_session_as_it_was(
    spark: SparkSession, catalog: Catalog
) -> None:
    """Past 32 paths Spark lists files in a job of its own; on local disk the read lists them on the
    driver instead (no job runs while the DataFrame is made) and puts the session's threshold back."""
    t = SparkTable(spark, catalog.create_table("shop.many", schema=SCHEMA, partition_by=["dt"]))
    data = [(i, "d", float(i)) for i in range(60)]
    for part in range(3):  # round-robin tasks leave some empty: three inserts of 20 tasks each
        t.insert_into(spark.createDataFrame(data[part * 20 : part * 20 + 20], SCHEMA).repartition(20))
    assert len(t.table.snapshot().files) > 32
    threshold = spark.conf.get("spark.sql.sources.parallelPartitionDiscovery.threshold")
    tracker = spark.sparkContext.statusTracker()
    spark.sparkContext.setJobGroup("many-files-read", "a read of many files")
    df = t.read(where="dt = 'd'")
    assert tracker.getJobIdsForGroup("many-files-read") == []  # made without a listing job
    assert spark.conf.get("spark.sql.sources.parallelPartitionDiscovery.threshold") == threshold
    assert _rows(df) == data


def test_a_plain_read_lets_spark_attach_the_verified_values(spark: SparkSession, catalog: Catalog) -> None:
    t = SparkTable(spark, catalog.create_table("shop.verified", schema=SCHEMA, partition_by=["dt"]))
    data = [(1, "a/b=c%d e", 1.0), (2, None, 2.0), (3, "ü ñ", 3.0), (4, "a+b", 4.0), (5, "2026-11-01", 5.0)]
    for row in data:  # one transaction each: files under several staging directories, one root
        t.insert_into(spark.createDataFrame([row], SCHEMA))
    df = t.read()
    assert "Join" not in _plan(df)
    assert _rows(df) == sorted(data, key=lambda r: r[0])


def _foreign_file(spark: SparkSession, table: Table, tx: Transaction, directory: str) -> tuple[str, int, Any]:
    """A Parquet file of one row (id 2) written by a writer other than write_staged, under `directory`
    of the transaction's staging dir."""
    relative = f"{table.storage.new_write_dir(tx.txn_id)}{directory}"
    spark.createDataFrame([(2, 2.0)], "id BIGINT, amount DOUBLE").coalesce(1).write.parquet(
        table.storage.absolute(relative)
    )
    (name,) = [i.path for i in table.storage.walk(relative) if i.path.endswith(".parquet")]
    count, stats = footer(table.storage, name)
    return name, count, stats


def test_the_logs_partition_value_is_what_a_file_outside_partition_directories_reads_as(
    spark: SparkSession, catalog: Catalog
) -> None:
    """A file registered outside Hive-style directories (another writer): the read takes its partition
    value from the log."""
    table = catalog.create_table("shop.disagree", schema=SCHEMA, partition_by=["dt"])
    t = SparkTable(spark, table)
    t.insert_into(spark.createDataFrame([(1, "2026-11-01", 1.0)], SCHEMA))
    tx = table.begin("insert_into")
    name, count, stats = _foreign_file(spark, table, tx, "")
    size = table.storage.file_size(name)
    tx.add_files([DataFile(path=name, partition={"dt": "2026-11-05"}, rows=count, size_bytes=size or 0, stats=stats)])
    tx.commit()
    df = t.read()
    assert "Join" in _plan(df)
    assert _rows(df) == [(1, "2026-11-01", 1.0), (2, "2026-11-05", 2.0)]
    assert _rows(t.read(where="dt = '2026-11-05'")) == [(2, "2026-11-05", 2.0)]


def test_a_file_whose_directory_spells_another_partition_value_is_refused(
    spark: SparkSession, catalog: Catalog
) -> None:
    table = catalog.create_table("shop.disagree", schema=SCHEMA, partition_by=["dt"])
    tx = table.begin("insert_into")
    name, count, stats = _foreign_file(spark, table, tx, "/dt=wrong")
    size = table.storage.file_size(name) or 0
    with pytest.raises(InvalidArgumentError, match="lies in directory dt=wrong but its entry says dt='2026-11-05'"):
        tx.add_files([DataFile(path=name, partition={"dt": "2026-11-05"}, rows=count, size_bytes=size, stats=stats)])
    tx.abort()
    assert table.version == 0


def test_integer_partitions_take_the_verified_path(spark: SparkSession, catalog: Catalog) -> None:
    t = SparkTable(
        spark, catalog.create_table("shop.ints", schema="id BIGINT, day INT, amount DOUBLE", partition_by=["day"])
    )
    data = [(1, 1, 1.0), (2, -3, 2.0), (3, None, 3.0)]
    t.insert_into(spark.createDataFrame(data, "id BIGINT, day INT, amount DOUBLE"))
    df = t.read()
    assert "Join" not in _plan(df)
    assert sorted(tuple(r) for r in df.collect()) == data


@pytest.mark.parametrize(
    ("type_", "value"),
    [
        ("DATE", date(2026, 11, 1)),
        ("TIMESTAMP", datetime(2026, 11, 1, 10, 30, 0)),
        ("DOUBLE", 1.5),
        ("BOOLEAN", True),
        ("DECIMAL(10,2)", Decimal("12.50")),
    ],
)
def test_partition_columns_of_other_types_through_reads_and_writes(
    spark: SparkSession, catalog: Catalog, type_: str, value: Any
) -> None:
    """Types the directory check does not prove go through the join, whose values the log keeps as
    text for some types (a DATE as '2026-11-01'): every read, update and compaction must type them."""
    schema = f"id BIGINT, p {type_}"
    t = SparkTable(spark, catalog.create_table(f"shop.typed{next(_typed)}", schema=schema, partition_by=["p"]))
    for row in [(1, value), (2, None)]:
        t.insert_into(spark.createDataFrame([row], schema))
    assert sorted(tuple(r) for r in t.read().collect()) == [(1, value), (2, None)]
    assert [tuple(r) for r in t.read(where="p IS NULL").collect()] == [(2, None)]
    t.update("id = 1", {"id": "10"})
    t.compact("major", target_file_bytes=1 << 20)
    assert sorted(tuple(r) for r in t.read().collect()) == [(2, None), (10, value)]
    # partition values given as Python values, or collected from the DataFrame, name the same partition
    t.insert_overwrite(spark.createDataFrame([(3,)], "id BIGINT"), partition={"p": value})
    assert sorted(tuple(r) for r in t.read().collect()) == [(2, None), (3, value)]
    t.insert_overwrite(spark.createDataFrame([(4, value)], schema), dynamic=True)
    assert sorted(tuple(r) for r in t.read().collect()) == [(2, None), (4, value)]
    t.truncate(partition={"P": value})
    assert sorted(tuple(r) for r in t.read().collect()) == [(2, None)]


def test_a_table_at_a_messy_location_updates_and_compacts(
    spark: SparkSession, catalog: Catalog, tmp_path: Path
) -> None:
    """Spark lists files under the cleaned-up location; the join by file must still find every file."""
    messy = f"{tmp_path}//tables/./x/../orders/"
    t = SparkTable(spark, catalog.create_table("shop.messy", schema=SCHEMA, partition_by=["dt"], location=messy))
    t.insert_into(spark.createDataFrame([(1, "a", 1.0), (2, "b", 2.0)], SCHEMA))
    t.update("id = 1", {"amount": "10"})
    t.insert_into(spark.createDataFrame([(3, "a", 3.0)], SCHEMA))
    t.compact("major", target_file_bytes=1 << 20)
    assert _rows(t.read()) == [(1, "a", 10.0), (2, "b", 2.0), (3, "a", 3.0)]
