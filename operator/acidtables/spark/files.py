"""Spark's side of writing: staged Parquet files, described for the log, and the keys rows carry.

Writes go through Spark's own Parquet writer into the transaction's staging directory; each file is then
described for the log from its path (partition values, Hive-style) and its footer (rows, min/max, nulls),
so no data is read twice. Reading a snapshot's files back is `scan`'s job.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import date
from typing import Any
from urllib.parse import unquote

import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from acidtables.core import (
    HIVE_NULL,
    ColumnStats,
    DataFile,
    FileKind,
    InvalidArgumentError,
    Storage,
    TableMetadata,
    Transaction,
)

from .schema import DELETE, OP_COLUMN, TEXT_TYPES, typed_partition_value

logger = logging.getLogger(__name__)

FILE = "_acid_file"
ROW = "_acid_row"
VERSION = "_acid_version"


def _stat_value(value: Any) -> Any:
    if isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, date):
        return value.isoformat()  # DATE literals compare as ISO strings (expressions.parse_predicate)
    return None  # binary, decimal, timestamp: no statistics rather than wrong ones


def footer(storage: Storage, relative: str) -> tuple[int, dict[str, ColumnStats]]:
    """Row count and per-column min/max/null count, from the Parquet footer only (read once: the commit's
    proof of the file reuses it)."""
    return footer_stats(storage.parquet_footer(relative, keep=True))


def footer_stats(meta: pq.FileMetaData) -> tuple[int, dict[str, ColumnStats]]:
    """Row count and per-column statistics: only what every row group's statistics prove, because read
    pruning and the row-level conflict check (conflict-rules §13.1 rule 4 with RLC) skip a file its
    statistics exclude, and a bound that is too narrow would skip one holding matching rows."""
    stats: dict[str, ColumnStats] = {}
    for c in range(meta.num_columns):
        groups = [
            (meta.row_group(g).column(c).statistics, meta.row_group(g).num_rows) for g in range(meta.num_row_groups)
        ]
        column = _column_stats(groups)
        if column is not None:
            stats[meta.schema.column(c).path] = column
    return meta.num_rows, stats


def _column_stats(groups: Sequence[tuple[Any, int]]) -> ColumnStats | None:
    """One column's statistics from its row groups' (statistics, rows); None when nothing is known.

    A group without statistics leaves the column unknown. A group holding values but no min/max (Parquet
    writers leave them out for values over 4 KiB, parquet-mr's and Arrow's alike) leaves min/max unknown:
    the other groups' range says nothing of its values. A group without a null count leaves the null
    count unknown."""
    if any(s is None for s, _ in groups):
        return None
    nulls: int | None = 0
    lows: list[Any] = []
    highs: list[Any] = []
    bounded = True
    for s, rows in groups:
        nulls = nulls + s.null_count if nulls is not None and s.has_null_count else None
        if s.has_min_max:
            lows.append(_stat_value(s.min))
            highs.append(_stat_value(s.max))
        elif not (s.has_null_count and s.null_count >= rows):  # values, but no range for them
            bounded = False
    if bounded and lows and all(v is not None for v in (*lows, *highs)):
        return ColumnStats(min(lows), max(highs), nulls)
    if nulls is None:
        return None
    return ColumnStats(None, None, nulls)


def write_staged(
    df: DataFrame,
    tx: Transaction,
    *,
    kind: FileKind = FileKind.DATA,
    lineage: Sequence[str] = (),
    ordered_lineage: bool = False,
) -> list[DataFile]:
    """Write `df` (in the table's column order) under the staging dir and describe the files written."""
    meta = tx.metadata
    storage = tx.storage
    relative_dir = storage.new_write_dir(tx.txn_id)
    writer = guarded(df, tx.target_metadata).write.mode("errorifexists").option("compression", "snappy")
    if meta.partition_by:
        writer = writer.partitionBy(*meta.partition_by)
    try:
        writer.parquet(storage.absolute(relative_dir))
    except Exception as exc:  # Py4JJavaError / SparkRuntimeException: a row broke the schema (guarded)
        refused = _CHECK_FAILED.search(str(exc))
        if refused is not None:
            raise InvalidArgumentError(refused.group(1).strip() + "; nothing was committed") from None
        unwritable = _unwritable_partition_value(df, meta)
        if unwritable is not None:
            raise InvalidArgumentError(unwritable) from None
        raise
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
        if rows == 0:
            # Spark writes a row-less file for an empty result; a job never adds one (a DELETE that
            # empties a file only removes it), so it goes at once
            storage.discard_staged(tx.txn_id, [info.path])
            continue
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
    check_written(df, tx.target_metadata, files)
    return files


#: how a row the schema refuses stops the write (F.raise_error), and how that is found in Spark's error
_CHECK = "acidtables refused a row:"
_CHECK_FAILED = re.compile(re.escape(_CHECK) + r"(.*?)(?:\. SQLSTATE|SQLSTATE|\n|$)")
_COMPLEX = ("ARRAY", "MAP", "STRUCT")


def file_kind(meta: TableMetadata, *, overwrite: bool) -> FileKind:
    """What a write's files are: plain data, or in a primary-key table upserts to merge on read (and an
    overwrite's rows, one per key, a base)."""
    if not meta.primary_key:
        return FileKind.DATA
    return FileKind.BASE if overwrite else FileKind.CHANGES


def too_long_message(meta: TableMetadata, column: str, size: int) -> str | None:
    """Why a partition value of `size` bytes cannot be a directory name (`name=value` holds 255 bytes)."""
    limit = 255 - len(column.encode()) - 1
    if size <= limit:
        return None
    return (
        f"partition column {column} of {meta.name} has a value of {size} bytes, too long for a directory "
        f"name ({limit} bytes with `{column}=`); nothing was committed"
    )


def null_spelling_message(meta: TableMetadata, column: str) -> str:
    return (
        f"partition column {column} of {meta.name} has a row with the value '' or {HIVE_NULL!r}, which Spark "
        "and Hive store and read back as NULL; use NULL or another value. Nothing was committed"
    )


def not_null_message(meta: TableMetadata, column: str) -> str:
    reason = "part of the primary key" if column in meta.primary_key else "declared NOT NULL"
    return f"column {column} of {meta.name} is {reason} and a row has NULL"


def _row_checked(meta: TableMetadata, df: DataFrame) -> list[str]:
    """NOT NULL columns whose Parquet null counts cannot vouch for them, so each row is checked as it is
    written: complex types (a leaf's null count also counts NULLs inside a value) and, in merge-on-read
    files, non-key columns (a tombstone holds NULL there by design)."""
    merge_on_read = OP_COLUMN in df.columns
    keys = set(meta.primary_key) | set(meta.partition_by)
    return [
        c.name
        for c in meta.columns
        if not c.nullable
        and c.name in df.columns
        and c.name not in meta.partition_by
        and (c.type.upper().startswith(_COMPLEX) or (merge_on_read and c.name not in keys))
    ]


def guarded(df: DataFrame, meta: TableMetadata) -> DataFrame:
    """`df` with a per-row NOT NULL check folded into the write (no extra Spark job) for the columns
    `_row_checked` names; every other rule is checked on what was written (`check_written`)."""
    columns = _row_checked(meta, df)
    if not columns:
        return df
    tombstone = (F.col(OP_COLUMN) == F.lit(DELETE)) if OP_COLUMN in df.columns else F.lit(False)
    out = []
    for name in df.columns:
        column: Column = F.col(f"`{name}`")
        if name in columns:
            error = F.raise_error(F.lit(f"{_CHECK} {not_null_message(meta, name)}"))
            column = F.when(column.isNull() & ~tombstone, error).otherwise(column)
        out.append(column.alias(name))
    return df.select(*out)


def _unwritable_partition_value(df: DataFrame, meta: TableMetadata) -> str | None:
    """Why a failed write failed, when a partition value cannot be a directory name: too long
    (`name=value` holds 255 bytes at most; file systems word that failure differently), or holding a
    NUL, which Spark does not escape and no file system takes. The data is asked once the write failed."""
    for name in meta.partition_by:
        text = F.col(f"`{name}`").cast("string")
        found = df.select(F.max(F.octet_length(text)), F.max(text.contains("\x00").cast("int"))).first()
        if found is None:
            continue
        longest, nul = found
        message = too_long_message(meta, name, longest) if longest is not None else None
        if message:
            return message
        if nul:
            return (
                f"partition column {name} of {meta.name} has a value holding the character NUL (\\x00), which no "
                "directory name can hold; nothing was committed"
            )
    return None


def check_written(df: DataFrame, meta: TableMetadata, files: Sequence[DataFile]) -> None:
    """The schema's rules on what a write produced, from the footers and directories already read:
    NULL in a NOT NULL column (Parquet null counts; partition values from the directories), and a text
    partition value of '' or Hive's NULL spelling, which Spark writes as the NULL partition. Only a
    NULL partition sends one more, short Spark job to the source to tell a real NULL from those."""
    row_checked = set(_row_checked(meta, df))
    unknown: set[str] = set()
    for f in files:
        for c in meta.columns:
            if c.nullable or c.name in row_checked:
                continue
            if c.name in meta.partition_by:
                if f.partition.get(c.name) is None:
                    raise InvalidArgumentError(not_null_message(meta, c.name) + "; nothing was committed")
                continue
            stats = f.stats.get(c.name)
            if stats is None or stats.null_count is None:
                unknown.add(c.name)
            elif stats.null_count > 0:
                raise InvalidArgumentError(not_null_message(meta, c.name) + "; nothing was committed")
    for name in sorted(unknown):  # a writer that kept no statistics: ask the data itself
        if df.filter(F.col(f"`{name}`").isNull()).limit(1).count():
            raise InvalidArgumentError(not_null_message(meta, name) + "; nothing was committed")
    text = [c.name for c in meta.columns if c.name in meta.partition_by and c.type.upper().split("(")[0] in TEXT_TYPES]
    null_partition = [p for p in text if any(f.partition.get(p) is None for f in files)]
    for name in null_partition:
        if df.filter(F.col(f"`{name}`").isin("", HIVE_NULL)).limit(1).count():
            raise InvalidArgumentError(null_spelling_message(meta, name))


def file_key(storage: Storage, file: DataFile) -> str:
    """How the FILE column names `file`: its absolute path, URL-decoded, without a `file:` scheme.

    Spark's part-file names repeat across partition directories, so only the whole path is a key."""
    return without_file_scheme(storage.absolute(file.path))


def without_file_scheme(path: str) -> str:
    """`path` without a leading `file:` or `file://` (how a local file is keyed)."""
    return re.sub(r"^file:(//)?", "", path)


def with_deletion_vectors(
    storage: Storage, files: Iterable[DataFile], positions: dict[str, set[int]]
) -> list[DataFile]:
    """New entries for `files` hiding `positions` (keyed by file_key) on top of their current vectors.

    A file whose every row would be hidden gets no new entry: the caller's removal of it is the whole
    change, so the table never keeps a file with no live rows."""
    out = []
    for f in files:
        hide = positions.get(file_key(storage, f))
        if hide:
            merged = tuple(sorted(set(f.deletion_vector or ()) | hide))
            if len(merged) < f.rows:
                out.append(replace(f, deletion_vector=merged, added_version=None))
    return out


def files_by_key(storage: Storage, files: Iterable[DataFile]) -> dict[str, DataFile]:
    return {file_key(storage, f): f for f in files}
