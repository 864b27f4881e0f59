"""Spark's side of the data: write staged Parquet files, and read a snapshot's files back.

Writes go through Spark's own Parquet writer into the transaction's staging directory; each file is then
described for the log from its path (partition values, Hive-style) and its footer (rows, min/max, nulls),
so no data is read twice. Reads are the other way round: the snapshot names the files, Spark's native
reader scans them, and partition values, deletion vectors and the version that added each file are
joined in from the log, never inferred from directory names (issue: "partition values come from the
log"). Primary-key tables are merge-on-read: the newest row per key wins and tombstones drop out.
"""

from __future__ import annotations

import functools
import itertools
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import date
from typing import Any
from urllib.parse import unquote

import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from acidtables.core.records import ColumnStats, DataFile, TableMetadata
from acidtables.core.storage import Storage
from acidtables.core.transaction import Transaction

from .schema import DELETE, OP_COLUMN, SEQ_COLUMN, file_struct, spark_type, table_struct, typed_partition_value

logger = logging.getLogger(__name__)

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
FILE = "_acid_file"
ROW = "_acid_row"
VERSION = "_acid_version"
_subdirs = itertools.count()


def _stat_value(value: Any) -> Any:
    if isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, date):
        return value.isoformat()  # DATE literals compare as ISO strings (expressions.parse_predicate)
    return None  # binary, decimal, timestamp: no statistics rather than wrong ones


def footer(storage: Storage, relative: str) -> tuple[int, dict[str, ColumnStats]]:
    """Row count and per-column min/max/null count, from the Parquet footer only."""
    with storage.open_input(relative) as handle:
        return footer_stats(pq.ParquetFile(handle).metadata)


def footer_stats(meta: pq.FileMetaData) -> tuple[int, dict[str, ColumnStats]]:
    stats: dict[str, ColumnStats] = {}
    for c in range(meta.num_columns):
        name = meta.schema.column(c).path
        lows, highs, nulls, complete = [], [], 0, True
        for g in range(meta.num_row_groups):
            s = meta.row_group(g).column(c).statistics
            if s is None:
                complete = False
                continue
            nulls += s.null_count or 0
            if s.has_min_max:
                lows.append(_stat_value(s.min))
                highs.append(_stat_value(s.max))
        known = [v for v in lows if v is not None]
        if complete and known and len(known) == len(lows):
            stats[name] = ColumnStats(min(known), max(v for v in highs if v is not None), nulls)
        elif complete:
            stats[name] = ColumnStats(None, None, nulls)
    return meta.num_rows, stats


def write_staged(
    df: DataFrame,
    tx: Transaction,
    *,
    kind: str = "data",
    lineage: Sequence[str] = (),
    ordered_lineage: bool = False,
) -> list[DataFile]:
    """Write `df` (in the table's column order) under the staging dir and describe the files written."""
    meta = tx.metadata
    storage = tx.storage
    relative_dir = f"{storage.staging_dir(tx.txn_id)}/{next(_subdirs):04d}"
    writer = df.write.mode("errorifexists").option("compression", "snappy")
    if meta.partition_by:
        writer = writer.partitionBy(*meta.partition_by)
    writer.parquet(storage.absolute(relative_dir))
    files = []
    for info in storage.walk(relative_dir):
        name = info.path.rsplit("/", 1)[-1]
        inner = info.path[len(relative_dir) + 1 :]
        if not name.endswith(".parquet") or name.startswith(("_", ".")) or inner.startswith("_"):
            continue
        partition = {}
        for segment in inner.split("/")[:-1]:
            column, _, raw = segment.partition("=")
            value = unquote(raw)
            partition[column] = typed_partition_value(meta, column, None if value == HIVE_NULL else value)
        rows, stats = footer(storage, info.path)
        files.append(
            DataFile(
                path=info.path,
                partition=partition,
                rows=rows,
                size_bytes=info.size_bytes,
                stats=stats,
                kind=kind,
                lineage=tuple(lineage),
                ordered_lineage=ordered_lineage,
            )
        )
    return files


def file_key(storage: Storage, file: DataFile) -> str:
    """How the FILE column names `file`: its absolute path, URL-decoded, without a `file:` scheme.

    Spark's part-file names repeat across partition directories, so only the whole path is a key."""
    absolute = storage.absolute(file.path)
    return re.sub(r"^file:(//)?", "", absolute)


def _file_column() -> Column:
    # Spark leaves '+' literal in file paths, but url_decode reads it as a space: escape it first, or
    # rows of a partition like dt='a+b' would match no file and silently drop out
    return F.regexp_replace(F.expr("url_decode(replace(_metadata.file_path, '+', '%2B'))"), r"^file:(//)?", "")


def _mapping(spark: SparkSession, meta: TableMetadata, storage: Storage, files: Sequence[DataFile]) -> DataFrame:
    part_fields = [f for f in table_struct(meta).fields if f.name in meta.partition_by]
    schema = StructType([StructField(FILE, StringType(), False), *part_fields, StructField(VERSION, LongType(), True)])
    rows = [(file_key(storage, f), *(f.partition.get(c) for c in meta.partition_by), f.added_version) for f in files]
    return spark.createDataFrame(rows, schema)


def read_files(
    spark: SparkSession, meta: TableMetadata, storage: Storage, files: Sequence[DataFile], *, keep_helpers: bool = False
) -> DataFrame:
    """The rows of `files` with partition columns from the log, deletion vectors applied.

    With `keep_helpers`, rows keep their file name, row position and the version that added the file
    (and the merge-on-read columns of primary-key tables), which updates and compactions need.
    """
    if not keep_helpers and files and not any(f.deletion_vector for f in files):
        fast = _read_by_partition(spark, meta, storage, files)
        if fast is not None:
            return fast
    if not files:
        helpers = StructType([StructField(FILE, StringType()), StructField(ROW, LongType())])
        df = spark.createDataFrame([], StructType([*file_struct(meta).fields, *helpers.fields]))
    else:
        df = spark.read.schema(file_struct(meta)).parquet(*[storage.absolute(f.path) for f in files])
        df = df.select("*", _file_column().alias(FILE), F.col("_metadata.row_index").alias(ROW))
    df = df.join(F.broadcast(_mapping(spark, meta, storage, files)), FILE)
    hidden = [(file_key(storage, f), pos) for f in files for pos in (f.deletion_vector or ())]
    if hidden:
        dv = spark.createDataFrame(hidden, f"{FILE} STRING, {ROW} LONG")
        df = df.join(F.broadcast(dv), [FILE, ROW], "left_anti")
    columns = [c.name for c in meta.columns]
    if keep_helpers:
        extra = [FILE, ROW, VERSION] + ([OP_COLUMN, SEQ_COLUMN] if meta.primary_key else [])
        return df.select(*columns, *extra)
    return df.select(*columns)


#: above this many partitions a read joins partition values per row instead of one scan per partition
MAX_PARTITION_SCANS = 64


def _read_by_partition(
    spark: SparkSession, meta: TableMetadata, storage: Storage, files: Sequence[DataFile]
) -> DataFrame | None:
    """One scan per partition with its values as literals: no per-row file-path decoding or join.

    Used when a read needs nothing per file but the partition values (no deletion vectors, no
    helper columns), which is every read of a compacted table; None when there are too many
    partitions for a union of scans to plan quickly.
    """
    groups: dict[tuple[Any, ...], list[DataFile]] = {}
    for f in files:
        groups.setdefault(tuple(f.partition.get(c) for c in meta.partition_by), []).append(f)
    if len(groups) > MAX_PARTITION_SCANS:
        return None
    types = {c.name: spark_type(c.type) for c in meta.columns}
    columns = [c.name for c in meta.columns]
    scans = []
    for values, members in groups.items():
        scan = spark.read.schema(file_struct(meta)).parquet(*[storage.absolute(f.path) for f in members])
        for column, value in zip(meta.partition_by, values, strict=True):
            scan = scan.withColumn(column, F.lit(value).cast(types[column]))
        scans.append(scan.select(*columns))
    return functools.reduce(DataFrame.unionByName, scans)


def merge_on_read(df: DataFrame, meta: TableMetadata) -> DataFrame:
    """Primary-key tables: per (partition, key) the newest row wins; tombstones drop out.

    A row's sequence is its own `_acid_seq` (kept by compactions) or else the version that added its
    file, which the log assigned at commit time, so a rebased commit still orders correctly (D-07).
    """
    seq = F.coalesce(F.col(SEQ_COLUMN), F.col(VERSION))
    window = Window.partitionBy(*meta.partition_by, *meta.primary_key).orderBy(seq.desc(), F.col(ROW).desc())
    newest = df.withColumn("_acid_rank", F.row_number().over(window)).filter("_acid_rank = 1").drop("_acid_rank")
    return newest.filter(F.col(OP_COLUMN) != F.lit(DELETE))


def read_snapshot_rows(
    spark: SparkSession, meta: TableMetadata, storage: Storage, files: Sequence[DataFile], *, keep_helpers: bool = False
) -> DataFrame:
    """What a reader sees: for primary-key tables after merge-on-read, unless every file is a base file
    (major-compacted: one live row per key), where the window is skipped."""
    if not meta.primary_key:
        return read_files(spark, meta, storage, files, keep_helpers=keep_helpers)
    if all(f.kind == "base" for f in files) and not keep_helpers:
        # major-compacted: one live row per key already, so no merge and no helper columns
        return read_files(spark, meta, storage, files)
    raw = read_files(spark, meta, storage, files, keep_helpers=True)
    live = raw if all(f.kind == "base" for f in files) else merge_on_read(raw, meta)
    if keep_helpers:
        return live
    return live.select(*[c.name for c in meta.columns])


def with_deletion_vectors(
    storage: Storage, files: Iterable[DataFile], positions: dict[str, set[int]]
) -> list[DataFile]:
    """New entries for `files` hiding `positions` (keyed by file_key) on top of their current vectors."""
    out = []
    for f in files:
        hide = positions.get(file_key(storage, f))
        if hide:
            merged = tuple(sorted(set(f.deletion_vector or ()) | hide))
            out.append(replace(f, deletion_vector=merged, added_version=None))
    return out


def files_by_key(storage: Storage, files: Iterable[DataFile]) -> dict[str, DataFile]:
    return {file_key(storage, f): f for f in files}
