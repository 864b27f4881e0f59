"""Table files read and written with pyarrow, for the data source's executors (which have no Spark).

Reads are core's (`acidtables.core.read`, what `Table.scan` returns, merge-on-read keeping the row
`scan.merge_on_read` keeps). Writes follow SparkTable's Spark-side rules on Arrow tables: the layout
comes from `Storage.new_write_dir`, partition values are kept as `schema.log_partition_value` spells
them, files are described from their footers (`files.footer_stats`) with `files.file_kind`, and NOT
NULL uses `files.not_null_message`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from acidtables.core import (
    HIVE_NULL,
    DataFile,
    FileKind,
    InvalidArgumentError,
    Storage,
    TableMetadata,
    named_as,
)
from acidtables.core import merge_rows_on_read as merge_on_read
from acidtables.core import read_data_file as read_file
from acidtables.core import read_schema as core_read_schema

from .files import (
    file_kind,
    footer_stats,
    not_null_message,
    null_spelling_message,
    too_long_message,
)
from .schema import (
    OP_COLUMN,
    SEQ_COLUMN,
    TEXT_TYPES,
    UPSERT,
    data_columns,
    log_partition_value,
)


def read_schema(meta: TableMetadata) -> pa.Schema:
    """The Arrow schema Spark expects of a Python data source's batches: core's (timestamps as UTC
    instants), which is Spark's own `to_arrow_schema` of the table's read schema."""
    return core_read_schema(meta)


def read_rows(meta: TableMetadata, storage: Storage, files: Sequence[DataFile]) -> pa.Table:
    """What a reader sees of `files` (for a primary-key table: all files of one table partition), as
    `Table.scan` reads them."""
    schema = read_schema(meta)
    merge = bool(meta.primary_key) and not all(f.kind is FileKind.BASE for f in files)
    tables = [read_file(meta, storage, f, schema, helpers=merge) for f in files]
    data = pa.concat_tables(tables) if tables else schema.empty_table()
    if merge:
        data = merge_on_read(data, meta.primary_key)
    return data.select(schema.names).cast(schema)


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


def _partition_groups(meta: TableMetadata, data: pa.Table) -> dict[tuple[Any, ...], pa.Array]:
    """The positions of `data`'s rows in each table partition, keyed by the partition's values as the
    log keeps them, in order of first appearance. The distinct values are found by Arrow (a dictionary
    per partition column), so only those go through `log_partition_value`, not every row; two raw
    values the log spells alike share one partition."""
    if not meta.partition_by:
        return {(): pa.array(np.arange(data.num_rows, dtype=np.int64))}
    dictionaries, indices = [], []
    for name in meta.partition_by:
        encoded = pc.dictionary_encode(data[name].combine_chunks(), null_encoding="encode")
        dictionaries.append(encoded.dictionary.to_pylist())
        indices.append(encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64))
    distinct, first, inverse = np.unique(np.stack(indices, axis=1), axis=0, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    order = np.argsort(inverse, kind="stable")  # rows grouped by distinct values, each group in row order
    ends = np.cumsum(np.bincount(inverse, minlength=len(distinct)))
    groups: dict[tuple[Any, ...], list[Any]] = {}
    for d in np.argsort(first, kind="stable"):
        key = tuple(
            log_partition_value(meta, column, dictionaries[c][distinct[d][c]])
            for c, column in enumerate(meta.partition_by)
        )
        groups.setdefault(key, []).append(order[(ends[d - 1] if d else 0) : ends[d]])
    return {key: pa.array(np.sort(np.concatenate(p)) if len(p) > 1 else p[0]) for key, p in groups.items()}


def write_rows(
    meta: TableMetadata, storage: Storage, txn_id: str, data: pa.Table, *, overwrite: bool
) -> list[DataFile]:
    """Stage `data` (the table's columns, any order and case) as one Parquet file per table partition in
    a new write directory of transaction `txn_id`, and describe the files for the log."""
    if data.num_rows == 0:
        return []  # a job never adds a file with no rows
    by_lower = {c.name.lower(): c.name for c in meta.columns}
    data = data.rename_columns([by_lower.get(n.lower(), n) for n in data.column_names])
    # struct fields too are stored as the table spells them (a Delta mirror's readers match names exactly)
    types = {f.name: f.type for f in read_schema(meta)}
    data = pa.table({n: named_as(data[n], types[n]) if n in types else data[n] for n in data.column_names})
    _check_rows(meta, data)
    stored = [c.name for c in data_columns(meta)]
    if meta.primary_key:
        data = data.append_column(OP_COLUMN, pa.array([UPSERT] * data.num_rows, pa.string()))
        data = data.append_column(SEQ_COLUMN, pa.nulls(data.num_rows, pa.int64()))
        stored += [OP_COLUMN, SEQ_COLUMN]
    groups = _partition_groups(meta, data)
    base = storage.new_write_dir(txn_id)
    kind = file_kind(meta, overwrite=overwrite)
    files = []
    for key, positions in groups.items():
        partition = dict(zip(meta.partition_by, key, strict=True))
        relative = f"{base}/{_directory(meta, partition)}part-{uuid.uuid4().hex}.parquet"
        sink = pa.BufferOutputStream()
        written = (data if len(groups) == 1 else data.take(positions)).select(stored)
        pq.write_table(written, sink, compression="snappy", write_statistics=_statistics(written))
        payload = sink.getvalue().to_pybytes()
        storage.write_exclusive(relative, payload)
        rows, stats = footer_stats(pq.ParquetFile(pa.BufferReader(payload)).metadata)
        files.append(DataFile(relative, partition, rows, len(payload), stats, kind=kind))
    return files


__all__ = ["read_rows", "read_schema", "write_rows"]
