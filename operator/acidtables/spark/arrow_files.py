"""Table files read and written with pyarrow, for the data source's executors (which have no Spark).

The same table rules as SparkTable's Spark-side code, on Arrow tables: the layout comes from
`Storage.new_write_dir`, partition values are kept as `schema.log_partition_value` spells them and read
back as `schema.partition_text` casts them, files are described from their footers
(`files.footer_stats`) with `files.file_kind`, NOT NULL uses `files.not_null_message`, and
merge-on-read keeps the row `scan.merge_on_read` keeps.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql.pandas.types import to_arrow_schema

from acidtables.core import HIVE_NULL, AcidTablesError, DataFile, FileKind, InvalidArgumentError, Storage, TableMetadata

from .files import (
    FILE,
    ROW,
    VERSION,
    file_kind,
    footer_stats,
    not_null_message,
    null_spelling_message,
    too_long_message,
)
from .schema import (
    DELETE,
    OP_COLUMN,
    SEQ_COLUMN,
    TEXT_TYPES,
    UPSERT,
    data_columns,
    log_partition_value,
    partition_text,
    read_struct,
)


def read_schema(meta: TableMetadata) -> pa.Schema:
    """The Arrow schema Spark expects of a Python data source's batches (timestamps as UTC instants)."""
    return to_arrow_schema(read_struct(meta), timezone="UTC")


def _constant(field: pa.Field, text: str | None, rows: int) -> pa.Array:
    """A partition column: the log's value (as text) on every row, cast to the column's Arrow type.

    A TIMESTAMP partition value is the wall-clock text Spark wrote in its session time zone; Arrow
    parses it as a naive time that is then taken as UTC, which is what a UTC session writes."""
    column = pa.array([text] * rows, pa.string())
    if pa.types.is_timestamp(field.type) and field.type.tz is not None:
        return column.cast(pa.timestamp(field.type.unit)).cast(field.type)
    return column.cast(field.type)


def read_file(meta: TableMetadata, storage: Storage, file: DataFile) -> pa.Table:
    """The live rows of one file: its stored columns (NULL for a column added after it was written),
    partition columns from the log, and the file, row and version helpers merge-on-read needs."""
    schema = read_schema(meta)
    with storage.open_input(file.path) as handle:
        stored = pq.read_table(handle)
    rows = stored.num_rows
    # Spark matches a file's columns to the table's case-insensitively; so does this reader
    by_lower = {name.lower(): name for name in stored.column_names}
    columns: dict[str, pa.Array | pa.ChunkedArray] = {}
    for column in meta.columns:
        field = schema.field(column.name)
        if column.name in meta.partition_by:
            columns[column.name] = _constant(field, partition_text(file.partition.get(column.name)), rows)
        elif column.name.lower() in by_lower:
            columns[column.name] = stored[by_lower[column.name.lower()]].cast(field.type)
        else:
            columns[column.name] = pa.nulls(rows, field.type)
    if meta.primary_key:
        columns[OP_COLUMN] = _operations(stored, file)
        columns[SEQ_COLUMN] = stored[SEQ_COLUMN] if SEQ_COLUMN in by_lower else pa.nulls(rows, pa.int64())
    columns[FILE] = pa.array([file.path] * rows, pa.string())
    columns[ROW] = pa.array(range(rows), pa.int64())
    columns[VERSION] = pa.array([file.added_version] * rows, pa.int64())
    data = pa.table(columns)
    if file.deletion_vector:
        hidden = pa.array(file.deletion_vector, pa.int64())
        data = data.filter(pc.invert(pc.is_in(data[ROW], value_set=hidden)))
    return data


def _operations(stored: pa.Table, file: DataFile) -> pa.Array | pa.ChunkedArray:
    """Each row's merge-on-read operation, as `scan.row_operation` reads it: upserts where the file has
    no `_acid_op` (a plain Parquet file), and an error naming the file for anything but 'U' and 'D'."""
    if OP_COLUMN not in stored.column_names:
        return pa.array([UPSERT] * stored.num_rows, pa.string())
    ops = pc.fill_null(stored[OP_COLUMN], UPSERT)
    if not pc.all(pc.is_in(ops, value_set=pa.array([UPSERT, DELETE]))).as_py():
        raise AcidTablesError(
            f"acidtables: {OP_COLUMN} is neither 'U' nor 'D' in {file.path}; run `acidtables fsck` on the table"
        )
    return ops


def merge_on_read(meta: TableMetadata, data: pa.Table) -> pa.Table:
    """Per key (the caller passes one table partition) the newest row, tombstones dropped: newest
    sequence, then greatest file, then last row, as `scan.merge_on_read` orders them."""
    sequence = pc.coalesce(data[SEQ_COLUMN], data[VERSION])
    ordered = data.append_column("_acid_order", sequence).sort_by(
        [
            *[(k, "ascending") for k in meta.primary_key],
            ("_acid_order", "descending"),
            (FILE, "descending"),
            (ROW, "descending"),
        ]
    )
    keys = ordered.select(list(meta.primary_key)).to_pylist()
    first = [i for i, key in enumerate(keys) if i == 0 or key != keys[i - 1]]
    newest = ordered.take(pa.array(first, pa.int64()))
    return newest.filter(pc.not_equal(newest[OP_COLUMN], DELETE))


def read_rows(meta: TableMetadata, storage: Storage, files: Sequence[DataFile]) -> pa.Table:
    """What a reader sees of `files` (for a primary-key table: all files of one table partition)."""
    data = pa.concat_tables([read_file(meta, storage, f) for f in files])
    if meta.primary_key and not all(f.kind is FileKind.BASE for f in files):
        data = merge_on_read(meta, data)
    return data.select([c.name for c in meta.columns]).cast(read_schema(meta))


def _check_rows(meta: TableMetadata, data: pa.Table) -> None:
    """The schema's rules on rows before they are written (SparkTable checks the same on its footers)."""
    for column in meta.columns:
        if not column.nullable and data[column.name].null_count:
            raise InvalidArgumentError(not_null_message(meta, column.name) + "; nothing was committed")
    for name in meta.partition_by:
        type_ = next(c.type for c in meta.columns if c.name == name).upper().split("(")[0]
        if type_ in TEXT_TYPES and pc.any(pc.is_in(data[name], pa.array(["", HIVE_NULL]))).as_py():
            raise InvalidArgumentError(null_spelling_message(meta, name))


def _directory(meta: TableMetadata, partition: dict[str, Any]) -> str:
    """The `name=value` directories of a partition, spelt so Spark's partition discovery reads back the
    log's value (Spark unescapes every %XX)."""
    segments = []
    for column, value in partition.items():
        segment = f"{column}={HIVE_NULL if value is None else quote(str(value), safe='')}"
        problem = too_long_message(meta, column, len(segment.encode()) - len(column.encode()) - 1)
        if problem:
            raise InvalidArgumentError(problem)
        segments.append(segment)
    return "".join(s + "/" for s in segments)


def _statistics(data: pa.Table) -> bool | list[str]:
    """The columns whose Parquet statistics are written: all but floating-point ones holding a NaN.
    pyarrow leaves NaN out of a column's max, where Spark orders it above every number, so with such a
    max both Spark's Parquet filter pushdown and core's pruning would skip the file for `amount > 3`."""
    nan = [
        name
        for name in data.column_names
        if pa.types.is_floating(data.column(name).type) and pc.any(pc.is_nan(data.column(name))).as_py()
    ]
    return [name for name in data.column_names if name not in nan] if nan else True


def write_rows(
    meta: TableMetadata, storage: Storage, txn_id: str, data: pa.Table, *, overwrite: bool
) -> list[DataFile]:
    """Stage `data` (the table's columns, any order and case) as one Parquet file per table partition in
    a new write directory of transaction `txn_id`, and describe the files for the log."""
    if data.num_rows == 0:
        return []  # a job never adds a file with no rows
    by_lower = {c.name.lower(): c.name for c in meta.columns}
    data = data.rename_columns([by_lower.get(n.lower(), n) for n in data.column_names])
    _check_rows(meta, data)
    stored = [c.name for c in data_columns(meta)]
    if meta.primary_key:
        data = data.append_column(OP_COLUMN, pa.array([UPSERT] * data.num_rows, pa.string()))
        data = data.append_column(SEQ_COLUMN, pa.nulls(data.num_rows, pa.int64()))
        stored += [OP_COLUMN, SEQ_COLUMN]
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, values in enumerate(data.select(list(meta.partition_by)).to_pylist()):
        key = tuple(log_partition_value(meta, c, values[c]) for c in meta.partition_by)
        groups.setdefault(key, []).append(i)
    base = storage.new_write_dir(txn_id)
    kind = file_kind(meta, overwrite=overwrite)
    files = []
    for key, positions in groups.items():
        partition = dict(zip(meta.partition_by, key, strict=True))
        relative = f"{base}/{_directory(meta, partition)}part-{uuid.uuid4().hex}.parquet"
        sink = pa.BufferOutputStream()
        written = data.take(pa.array(positions, pa.int64())).select(stored)
        pq.write_table(written, sink, compression="snappy", write_statistics=_statistics(written))
        payload = sink.getvalue().to_pybytes()
        storage.write_exclusive(relative, payload)
        rows, stats = footer_stats(pq.ParquetFile(pa.BufferReader(payload)).metadata)
        files.append(DataFile(relative, partition, rows, len(payload), stats, kind=kind))
    return files


__all__ = ["merge_on_read", "read_file", "read_rows", "read_schema", "write_rows"]
