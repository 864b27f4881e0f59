"""A write whose source DataFrame read its own table before the write's transaction began: the commits
in between are judged against what the source read, as concurrent ones are (Transaction.record_read's
as_of_version). Without that, `df = t.read()`, a DELETE by someone else, then `t.insert_overwrite(df)`
brought the deleted rows back without a word."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from tests.jobs import insert_into
from tests.spark_jobs import SCHEMA, make, rows

from acidtables import Catalog
from acidtables.errors import ConcurrentModificationException
from acidtables.spark import SparkTable


@pytest.mark.parametrize("level", ["WriteSerializable", "Serializable"])
def test_an_overwrite_from_a_dataframe_read_before_a_delete_does_not_undo_the_delete(
    spark: SparkSession, catalog: Catalog, level: str
) -> None:
    t = make(spark, catalog, isolation_level=level)
    source = t.read(where="dt = 'a'")
    SparkTable(spark, catalog.table(t.name)).delete("dt = 'a' AND id = 1")  # lands after the read
    with pytest.raises(ConcurrentModificationException):
        t.insert_overwrite(source.withColumn("amount", F.col("amount") + 1), partition={"dt": "a"})
    assert [r for r in rows(t) if r[0] == 1] == [], "the deleted row stays deleted"


def test_under_serializable_an_insert_from_a_stale_read_meets_the_append_it_did_not_see(
    spark: SparkSession, catalog: Catalog
) -> None:
    t = make(spark, catalog, isolation_level="Serializable")
    source = t.read(where="dt = 'a'").selectExpr("id + 100 AS id", "dt", "amount")
    SparkTable(spark, catalog.table(t.name)).insert_into(spark.createDataFrame([(50, "a", 5.0)], SCHEMA))
    with pytest.raises(ConcurrentModificationException, match="CONCURRENT_APPEND"):
        t.insert_into(source)


def test_commits_elsewhere_and_time_travel_sources_still_commit(spark: SparkSession, catalog: Catalog) -> None:
    t = make(spark, catalog, isolation_level="Serializable")
    first = t.table.version
    source = t.read(where="dt = 'a'").selectExpr("id + 100 AS id", "dt", "amount")
    SparkTable(spark, catalog.table(t.name)).insert_into(spark.createDataFrame([(50, "b", 5.0)], SCHEMA))
    info = t.insert_into(source)  # the commit in between wrote dt=b, which the source did not read
    assert not info.is_blind_append and (101, "a", 1.0) in rows(t)
    # a read of an old version on purpose (a restore) is not a read that missed later commits
    t.delete("dt = 'a'")
    restored = t.insert_into(t.read(version=first, where="dt = 'a'"))
    assert restored.version == t.table.version and len([r for r in rows(t) if r[1] == "a"]) == 4


def test_reads_as_of_version_0_and_a_later_one_are_judged_from_version_0(catalog: Catalog) -> None:
    """The oldest version the reads saw counts, version 0 included: a conflicting commit at version 1
    fails the job even when another of its reads saw version 1."""
    table = catalog.create_table(
        "stale.zero", "id BIGINT, dt STRING", partition_by=["dt"], isolation_level="Serializable"
    )
    insert_into(table, "p1").tx.commit()  # version 1: into what the job read at version 0
    insert_into(table, "p2").tx.commit()  # version 2: elsewhere
    job = insert_into(table, "p3")  # starts at version 2
    job.tx.record_read(predicate="dt = 'p1'", as_of_version=0)
    job.tx.record_read(predicate="dt = 'p9'", as_of_version=1)
    with pytest.raises(ConcurrentModificationException, match="CONCURRENT_APPEND"):
        job.tx.commit()
