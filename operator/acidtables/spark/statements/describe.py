"""DESCRIBE DETAIL, DESCRIBE [TABLE] [EXTENDED] and SHOW TABLES as DataFrames (DESCRIBE HISTORY is
SparkTable.history's own reads.history).

DESCRIBE DETAIL is one row in the spirit of Delta Lake's (format, id, name, location, partition columns,
files, bytes, properties) plus what an acidtables table adds (version, time version, primary key,
conflict policy, isolation level, rows); DESCRIBE lists columns as Spark does (col_name, data_type in
lower case, comment) with the partitioning after them.
"""

from __future__ import annotations

import re

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from acidtables.core import Catalog, Table, to_datetime

from .ddl import COMMENT_PROPERTY

DETAIL = T.StructType(
    [
        T.StructField("format", T.StringType()),
        T.StructField("id", T.StringType()),
        T.StructField("name", T.StringType()),
        T.StructField("location", T.StringType()),
        T.StructField("createdAt", T.TimestampType()),
        T.StructField("lastModified", T.TimestampType()),
        T.StructField("partitionColumns", T.ArrayType(T.StringType())),
        T.StructField("primaryKey", T.ArrayType(T.StringType())),
        T.StructField("conflictPolicy", T.StringType()),
        T.StructField("isolationLevel", T.StringType()),
        T.StructField("rowLevelConcurrency", T.BooleanType()),
        T.StructField("version", T.LongType()),
        T.StructField("timeVersion", T.TimestampType()),
        T.StructField("numFiles", T.LongType()),
        T.StructField("numRows", T.LongType()),
        T.StructField("sizeInBytes", T.LongType()),
        T.StructField("properties", T.MapType(T.StringType(), T.StringType())),
    ]
)
COLUMNS = T.StructType(
    [
        T.StructField("col_name", T.StringType()),
        T.StructField("data_type", T.StringType()),
        T.StructField("comment", T.StringType()),
    ]
)
TABLES = T.StructType(
    [
        T.StructField("namespace", T.StringType()),
        T.StructField("tableName", T.StringType()),
        T.StructField("isTemporary", T.BooleanType()),
    ]
)


def describe_detail(spark: SparkSession, table: Table) -> DataFrame:
    snapshot = table.snapshot()
    meta = snapshot.metadata
    row = (
        "acidtables",
        meta.table_id,
        meta.name,
        meta.location,
        to_datetime(meta.created_at or None),
        to_datetime(snapshot.committed_at or None),
        list(meta.partition_by),
        list(meta.primary_key),
        meta.conflict_policy.value,
        meta.isolation_level.value if meta.isolation_level else None,
        meta.rlc_in_effect,
        snapshot.version,
        to_datetime(snapshot.time_version),
        len(snapshot.files_by_path),
        snapshot.row_count,
        snapshot.size_bytes,
        dict(meta.properties),
    )
    return spark.createDataFrame([row], DETAIL)


def describe_columns(spark: SparkSession, table: Table) -> DataFrame:
    meta = table.metadata
    comments = {k[len(COMMENT_PROPERTY) :]: v for k, v in meta.properties.items() if k.startswith(COMMENT_PROPERTY)}
    rows: list[tuple[str, str, str | None]] = [
        (c.name, c.type.lower() if c.nullable else f"{c.type.lower()} not null", comments.get(c.name))
        for c in meta.columns
    ]
    if meta.partition_by:
        rows += [("# Partition Information", "", ""), ("# col_name", "data_type", "comment")]
        rows += [(c, meta.column_types[c].lower(), None) for c in meta.partition_by]
    if meta.primary_key:
        rows += [("# Primary Key", ", ".join(meta.primary_key), "")]
    return spark.createDataFrame(rows, COLUMNS)


def show_tables(spark: SparkSession, catalog: Catalog, namespace: str | None, like: str | None) -> DataFrame:
    """Spark's SHOW TABLES pattern: `*` for any characters, `|` between alternatives, the rest a regular
    expression, matched against the whole name without regard to case."""
    rows = []
    patterns = [re.compile(p.strip().replace("*", ".*"), re.IGNORECASE) for p in like.split("|")] if like else []
    for name in catalog.list_tables(namespace):
        ns, short = name.split(".", 1)
        if not patterns or any(p.fullmatch(short) for p in patterns):
            rows.append((ns, short, False))
    return spark.createDataFrame(rows, TABLES)
