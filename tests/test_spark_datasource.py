"""The `acidtables` Spark data source: format("acidtables") reads and writes through the same commits."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from acidtables import Catalog
from acidtables.spark import SparkTable

SCHEMA = "id BIGINT, dt STRING, amount DOUBLE"


def options(catalog: Catalog) -> dict[str, str]:
    return {
        "etcd.endpoints": ",".join(catalog.settings.etcd.endpoints),
        "etcd.prefix": catalog.settings.etcd.prefix,
        "warehouse": catalog.settings.warehouse,
    }


def rows(df):  # type: ignore[no-untyped-def]
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

    def read():  # type: ignore[no-untyped-def]  # a DataFrameReader keeps its options: take a fresh one
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
    assert [h.operation for h in table.history()][:3] == ["INSERT OVERWRITE", "INSERT INTO", "INSERT INTO"]


def test_a_write_with_the_wrong_schema_is_refused_and_leaves_nothing(spark: SparkSession, catalog: Catalog) -> None:
    catalog.create_table("ds.strict", schema=SCHEMA)
    bad = spark.createDataFrame([(1, "a")], "id BIGINT, dt STRING")
    with pytest.raises(Exception, match="does not match the table"):
        bad.write.format("acidtables").options(**options(catalog)).mode("append").save("ds.strict")
    table = catalog.table("ds.strict")
    assert table.version == 0
    assert table.storage.list_dir("data") == []


def test_reading_a_missing_table_names_it(spark: SparkSession, catalog: Catalog) -> None:
    with pytest.raises(Exception, match=r"no table ds\.nothing"):
        spark.read.format("acidtables").options(**options(catalog)).load("ds.nothing").collect()


@pytest.mark.parametrize("step", ["read", "write", "time travel"])
def test_an_acidtables_error_in_the_data_source_is_the_first_line_spark_shows(
    spark: SparkSession, catalog: Catalog, step: str
) -> None:
    opts = options(catalog)
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
