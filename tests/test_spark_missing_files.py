"""A read whose version names a missing data file fails while it is planned (issue 24, item 4 a), with
DataFilesMissingError naming the table, the version, the file and the repair, through SparkTable and
through the `acidtables` data source alike; after `Table.repair()` both read the rest."""

from __future__ import annotations

import os
from typing import Any

import pytest
from pyspark.sql import SparkSession
from tests.helpers.tables import source_options

from acidtables import Catalog, Table
from acidtables.errors import DataFilesMissingError
from acidtables.spark import SparkTable

SCHEMA = "id BIGINT, dt STRING, amount DOUBLE"
options = source_options


def rows(df: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.select("id", "dt", "amount").collect())


@pytest.fixture
def broken(spark: SparkSession, catalog: Catalog) -> tuple[Table, str]:
    """sales.orders at version 2 (one write per partition, dt=a then dt=b) whose dt=a file is gone."""
    table = catalog.create_table("sales.orders", schema=SCHEMA, partition_by=["dt"])
    spark_table = SparkTable(spark, table)
    spark_table.insert_into(spark.createDataFrame([(1, "a", 1.0), (2, "a", 2.0)], SCHEMA).coalesce(1))
    spark_table.insert_into(spark.createDataFrame([(3, "b", 3.0)], SCHEMA))
    (victim,) = [f for f in table.snapshot().files if f.partition["dt"] == "a"]
    path = table.storage.absolute(victim.path)
    os.unlink(path)
    return table, path


def test_a_spark_table_read_fails_when_planned_naming_table_version_file_and_repair(
    spark: SparkSession, broken: tuple[Table, str]
) -> None:
    table, path = broken
    with pytest.raises(DataFilesMissingError) as caught:
        SparkTable(spark, table).read()  # no action: the plan itself refuses, before any Spark job
    error = caught.value
    assert (error.table, error.version, error.paths) == ("sales.orders", 2, (path,))
    message = str(error)
    assert message.startswith("Reading sales.orders at version 2 needs 1 data file(s) that are missing")
    assert path in message and "acidtables fsck sales.orders --repair" in message


def test_a_read_that_prunes_the_missing_file_away_still_reads(spark: SparkSession, broken: tuple[Table, str]) -> None:
    table, _ = broken
    assert rows(SparkTable(spark, table).read(where="dt = 'b'")) == [(3, "b", 3.0)]


def test_time_travel_to_an_older_version_names_that_version(spark: SparkSession, broken: tuple[Table, str]) -> None:
    table, path = broken
    with pytest.raises(DataFilesMissingError, match="at version 1 needs 1 data file") as caught:
        SparkTable(spark, table).read(version=1)
    assert caught.value.paths == (path,)


def test_an_update_plans_no_job_over_a_missing_file(spark: SparkSession, broken: tuple[Table, str]) -> None:
    table, path = broken
    with pytest.raises(DataFilesMissingError, match="at version 2") as caught:
        SparkTable(spark, table).delete("amount > 0")
    assert caught.value.paths == (path,) and table.version == 2


def test_the_data_source_read_fails_with_the_error_on_the_first_line(
    spark: SparkSession, catalog: Catalog, broken: tuple[Table, str]
) -> None:
    _, path = broken
    with pytest.raises(Exception) as caught:
        spark.read.format("acidtables").options(**options(catalog)).load("sales.orders").collect()
    first_line = str(caught.value).splitlines()[0]
    assert "DataFilesMissingError: Reading sales.orders at version 2 needs 1 data file(s)" in first_line, first_line
    assert path in first_line and "PATH_NOT_FOUND" not in str(caught.value)


def test_after_a_repair_both_readers_read_the_rest(
    spark: SparkSession, catalog: Catalog, broken: tuple[Table, str]
) -> None:
    table, _ = broken
    assert table.repair().version == 3
    assert rows(SparkTable(spark, table).read()) == [(3, "b", 3.0)]
    source = spark.read.format("acidtables").options(**options(catalog)).load("sales.orders")
    assert rows(source) == [(3, "b", 3.0)]
