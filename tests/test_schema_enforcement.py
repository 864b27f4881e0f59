"""The declared schema is enforced on every write: NOT NULL (and primary-key) columns refuse NULL through
insert, overwrite, update and merge; only supported types are accepted, nested field names keep their
case and nested types round-trip; '' and Hive's NULL spelling are refused as partition values rather
than silently read back as NULL."""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import pytest
from pyspark.sql import SparkSession
from tests.spark_jobs import next_name

from acidtables import Catalog
from acidtables.core.schema.types import normalize_type
from acidtables.errors import InvalidArgumentError
from acidtables.spark import SparkTable

SCHEMA = "id BIGINT NOT NULL, dt STRING, amount DOUBLE NOT NULL"
ROW_SCHEMA = "id BIGINT, dt STRING, amount DOUBLE"


def table(spark: SparkSession, catalog: Catalog, **kw: Any) -> SparkTable:
    t = SparkTable(spark, catalog.create_table(next_name(), schema=kw.pop("schema", SCHEMA), **kw))
    t.insert_into(spark.createDataFrame([(1, "a", 1.0), (2, "b", 2.0)], ROW_SCHEMA))
    return t


Write = Callable[[SparkTable], object]
NULL_WRITES: dict[str, tuple[Write, str]] = {
    "insert_into": (
        lambda t: t.insert_into(t.spark.createDataFrame([(3, "a", None)], ROW_SCHEMA)),
        "amount",
    ),
    "insert_overwrite": (
        lambda t: t.insert_overwrite(t.spark.createDataFrame([(None, "a", 3.0)], ROW_SCHEMA)),
        "id",
    ),
    "update": (lambda t: t.update("id = 1", {"amount": "NULL"}), "amount"),
    "merge-update": (
        lambda t: (
            t.merge(t.spark.createDataFrame([(1, "a", None)], ROW_SCHEMA), "t.id = s.id")
            .when_matched_update_all()
            .execute()
        ),
        "amount",
    ),
    "merge-insert": (
        lambda t: (
            t.merge(t.spark.createDataFrame([(9, "a", None)], ROW_SCHEMA), "t.id = s.id")
            .when_not_matched_insert_all()
            .execute()
        ),
        "amount",
    ),
}


@pytest.mark.parametrize("layout", ["copy-on-write", "deletion-vectors", "primary-key"])
@pytest.mark.parametrize("write", NULL_WRITES)
def test_a_null_in_a_not_null_column_is_refused_by_every_write(
    spark: SparkSession, catalog: Catalog, write: str, layout: str
) -> None:
    options: dict[str, Any] = {"partition_by": ["dt"]}
    if layout == "deletion-vectors":
        options = {"row_level_concurrency": True}
    elif layout == "primary-key":
        options["primary_key"] = ["id"]
    t = table(spark, catalog, **options)
    before = t.table.version
    job, column = NULL_WRITES[write]
    with pytest.raises(InvalidArgumentError, match=f"column {column} of {t.name} is .* and a row has NULL"):
        job(t)
    assert t.table.version == before
    assert sorted(tuple(r) for r in t.read().collect()) == [(1, "a", 1.0), (2, "b", 2.0)]
    assert not [e for e in t.table.storage.list_dir("data") if "_acid_txn=" in e.path and _staged_only(t, e.path)]


def _staged_only(t: SparkTable, path: str) -> bool:
    """A staging directory no commit names (what a refused write would leave)."""
    txn = path.rsplit("=", 1)[-1]
    return t.table.find_commit(txn) is None


def test_primary_key_columns_are_not_null_whatever_the_ddl_says(spark: SparkSession, catalog: Catalog) -> None:
    t = table(spark, catalog, schema=ROW_SCHEMA, primary_key=["id"])
    assert [(c.name, c.nullable) for c in t.table.metadata.columns] == [("id", False), ("dt", True), ("amount", True)]
    with pytest.raises(InvalidArgumentError, match=r"column id of .* is part of the primary key"):
        t.insert_into(spark.createDataFrame([(None, "a", 1.0)], ROW_SCHEMA))


@pytest.mark.parametrize("bad", ["BIGINTT", "VARCHAR", "MAP<STRING>", "STRUCT<>", "DECIMAL(50,2)", "INT UNSIGNED"])
def test_an_unsupported_type_is_refused_with_the_supported_list(catalog: Catalog, bad: str) -> None:
    with pytest.raises(InvalidArgumentError, match=r"does not support .* supported types: BOOLEAN"):
        catalog.create_table(next_name(), schema=f"id BIGINT, x {bad}")
    t = catalog.create_table(next_name(), schema="id BIGINT")
    with pytest.raises(InvalidArgumentError, match=r"alter_table\(\): column x has type"):
        catalog.alter_table(t.name, add_columns=f"x {bad}")


def test_nested_field_names_keep_their_case() -> None:
    assert normalize_type("struct<userId: bigint, Name: array<string>>", column="s", method="m") == (
        "STRUCT<userId: BIGINT, Name: ARRAY<STRING>>"
    )


TYPED = [
    ("b", "BOOLEAN", True),
    ("t", "TINYINT", 7),
    ("s", "SMALLINT", -300),
    ("i", "INT", 70_000),
    ("l", "BIGINT", 2**40),
    ("f", "FLOAT", 1.5),
    ("d", "DOUBLE", 2.25),
    ("dec", "DECIMAL(10,2)", Decimal("12.34")),
    ("str", "STRING", "x"),
    ("bin", "BINARY", bytearray(b"\x00\x01")),
    ("day", "DATE", date(2026, 11, 24)),
    ("ts", "TIMESTAMP", datetime(2026, 11, 24, 12, 30)),
    ("arr", "ARRAY<BIGINT>", [1, 2]),
    ("m", "MAP<STRING, BIGINT>", {"k": 1}),
    ("st", "STRUCT<userId: BIGINT, Name: STRING>", (5, "n")),
]


def test_every_supported_type_round_trips_through_write_and_read(spark: SparkSession, catalog: Catalog) -> None:
    schema = ", ".join(f"{n} {t}" for n, t, _ in TYPED)
    t = SparkTable(spark, catalog.create_table(next_name(), schema=schema))
    row = tuple(v for _, _, v in TYPED)
    t.insert_into(spark.createDataFrame([row], schema))
    (back,) = t.read().collect()
    assert back["st"]["userId"] == 5 and back["st"]["Name"] == "n"
    assert [back[n] for n, _, _ in TYPED[:-1]] == [v for _, _, v in TYPED[:-1]]
    assert t.read().schema.simpleString() == spark.createDataFrame([row], schema).schema.simpleString()


@pytest.mark.parametrize("value", ["", "__HIVE_DEFAULT_PARTITION__"])
def test_a_partition_value_spark_would_read_back_as_null_is_refused(
    spark: SparkSession, catalog: Catalog, value: str
) -> None:
    t = table(spark, catalog, schema=ROW_SCHEMA, partition_by=["dt"])
    with pytest.raises(InvalidArgumentError, match=r"read (it )?back as NULL"):
        t.insert_into(spark.createDataFrame([(3, value, 3.0)], ROW_SCHEMA))
    with pytest.raises(InvalidArgumentError, match=r"read (it )?back as NULL"):
        t.insert_overwrite(spark.createDataFrame([(3, 3.0)], "id BIGINT, amount DOUBLE"), partition={"dt": value})
    with pytest.raises(InvalidArgumentError, match=r"read (it )?back as NULL"):
        t.truncate(partition={"dt": value})
    t.insert_into(spark.createDataFrame([(4, None, 4.0)], ROW_SCHEMA))  # the real NULL partition is fine
    assert (4, None, 4.0) in [tuple(r) for r in t.read().collect()]


def test_the_data_source_refuses_a_null_in_a_not_null_column_too(spark: SparkSession, catalog: Catalog) -> None:
    t = table(spark, catalog, schema=ROW_SCHEMA, primary_key=["id"])
    opts = {
        "etcd.endpoints": ",".join(catalog.settings.etcd.endpoints),
        "etcd.prefix": catalog.settings.etcd.prefix,
        "warehouse": catalog.settings.warehouse,
    }
    frame = spark.createDataFrame([(None, "a", 1.0)], ROW_SCHEMA)
    with pytest.raises(Exception, match=r"column id of .* is part of the primary key and a row has NULL"):
        frame.write.format("acidtables").options(**opts).mode("append").save(t.name)
    assert t.table.version == 1
