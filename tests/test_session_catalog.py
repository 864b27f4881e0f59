"""One session, one catalog (issue 33, item 9): `use_catalog` / `local_session(catalog=...)` make `sql()`
and `format("acidtables")` use the catalog the session carries. The data source's planning runs in
Spark's Python workers, other processes, so a read and a write through it prove the catalog travels."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from acidtables import Catalog
from acidtables.errors import InvalidArgumentError
from acidtables.spark import local_session, session_catalog, sql, use_catalog


@pytest.fixture
def carried(spark: SparkSession, catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> Iterator[Catalog]:
    """The test's catalog carried by the shared session, and the environment naming no catalog at all
    (so nothing can fall back to it unnoticed); the session is plain again afterwards."""
    for name in ("ACIDTABLES_ETCD_ENDPOINTS", "ACIDTABLES_WAREHOUSE"):
        monkeypatch.delenv(name, raising=False)
    use_catalog(spark, catalog)
    try:
        yield catalog
    finally:
        use_catalog(spark, None)


def test_sql_without_a_catalog_uses_the_sessions(spark: SparkSession, carried: Catalog) -> None:
    assert session_catalog(spark) is carried
    sql(spark, "CREATE TABLE lake.carried (id BIGINT, dt STRING) USING acidtables PARTITIONED BY (dt)")
    sql(spark, "INSERT INTO lake.carried VALUES (1, 'a'), (2, 'b')")
    assert carried.table("lake.carried").version == 1
    assert sorted(tuple(r) for r in sql(spark, "SELECT id, dt FROM lake.carried").collect()) == [(1, "a"), (2, "b")]


def test_the_data_source_without_options_reads_and_writes_the_sessions_catalog(
    spark: SparkSession, carried: Catalog
) -> None:
    carried.create_table("lake.ds", schema="id BIGINT, dt STRING", partition_by=["dt"])
    spark.createDataFrame([(1, "a")], "id BIGINT, dt STRING").write.format("acidtables").mode("append").save("lake.ds")
    assert carried.table("lake.ds").version == 1
    assert [tuple(r) for r in spark.read.format("acidtables").load("lake.ds").collect()] == [(1, "a")]
    # a commit setting alone still means the session's catalog
    read = spark.read.format("acidtables").option("commit.max_attempts", "3").load("lake.ds")
    assert read.count() == 1


def test_local_session_carries_the_catalog_it_is_given(spark: SparkSession, carried: Catalog) -> None:
    use_catalog(spark, None)
    assert session_catalog(spark) is None
    assert local_session("acidtables-tests", catalog=carried) is spark  # the running session, now carrying it
    assert session_catalog(spark) is carried


def test_without_a_carried_catalog_the_environment_is_asked_and_names_what_is_missing(
    spark: SparkSession, carried: Catalog
) -> None:
    carried.create_table("lake.gone", schema="id BIGINT")
    use_catalog(spark, None)
    with pytest.raises(Exception, match="ACIDTABLES_ETCD_ENDPOINTS"):
        spark.read.format("acidtables").load("lake.gone").collect()
    with pytest.raises(InvalidArgumentError, match="expected an acidtables Catalog"):
        use_catalog(spark, "lake")  # type: ignore[arg-type]
