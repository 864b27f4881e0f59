"""A snapshot's data files as Arrow rows: partition values from the log, NULL for columns added after a
file was written, deletion vectors applied, and the helper columns merge-on-read orders rows by.

Two ways to read, chosen per file:

* **as a pyarrow dataset** (`plain_dataset`): a file whose stored columns have exactly the table's names
  and types and which has no deletion vector is one fragment of a `pyarrow.dataset.FileSystemDataset`,
  its partition values given as the fragment's partition expression. Arrow then fills partition columns,
  projects, filters, prunes row groups and reads files in parallel itself, as it does for any dataset.
  Whether a file fits is known without its footer when its entry's `schema_digest` (taken at its
  commit) is the table's; only other files' footers are read while planning;
* **file by file** (`read_file`): everything else (a column stored under another case or type, which
  Spark reads case-insensitively and widens; a deletion vector; a primary-key file to be merged) is
  read whole and made to fit the table's schema here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from acidtables.core.errors import AcidTablesError
from acidtables.core.expressions import Literal
from acidtables.core.log.records import DataFile, TableMetadata
from acidtables.core.read.arrow_schema import read_schema
from acidtables.core.schema.file_schema import MERGE_ON_READ_OPS, OP_COLUMN, SEQ_COLUMN, UPSERT, stored_columns_digest
from acidtables.core.storage.storage import Storage

#: helper columns of a file-by-file read: the file, the row's position in it, the version that added it
FILE, ROW, VERSION = "_acid_file", "_acid_row", "_acid_version"

#: Spark writes TIMESTAMP as INT96 by default; read as microseconds (Spark's unit), as nanoseconds it
#: would overflow outside 1677-2262 (the common 9999-12-31 sentinel)
_INT96_UNIT = "us"
_FORMAT = ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(coerce_int96_timestamp_unit=_INT96_UNIT))
#: threads reading footers while a dataset is planned (I/O bound on object stores, parsing locally)
_FOOTER_THREADS = 8


def partition_text(value: Literal) -> str | None:
    """A log partition value as text, which is cast to the column's type (DATE, TIMESTAMP and DECIMAL
    values are kept as the text their directories spell)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def partition_scalar(arrow_type: pa.DataType, value: Literal) -> pa.Scalar:
    """A partition value as a scalar of its column's type. A TIMESTAMP value is the wall-clock text Spark
    wrote in its session time zone, read as UTC (the zone the library's sessions run in)."""
    text = partition_text(value)
    if text is None:
        return pa.scalar(None, arrow_type)
    if pa.types.is_timestamp(arrow_type) and arrow_type.tz is not None:
        return pc.cast(pc.cast(pa.scalar(text), pa.timestamp(arrow_type.unit)), arrow_type)
    if pa.types.is_boolean(arrow_type):
        return pa.scalar(text.lower() == "true")
    return pc.cast(pa.scalar(text), arrow_type)


def partition_expression(schema: pa.Schema, partition: Mapping[str, Literal]) -> pc.Expression:
    """What a file's partition values say of its rows, as the expression a dataset fragment carries."""
    expression: pc.Expression | None = None
    for name, value in partition.items():
        if name not in schema.names:
            continue  # a partition column the read does not need
        field = pc.field(name)
        term = field.is_null() if value is None else field == partition_scalar(schema.field(name).type, value)
        expression = term if expression is None else expression & term
    return expression if expression is not None else pc.scalar(True)


def fits_dataset(physical: pa.Schema, schema: pa.Schema, stored: Sequence[str], partition_by: Sequence[str]) -> bool:
    """Whether a file's stored columns are exactly the table's (name and type) for every column in
    `stored` that it holds: what lets Arrow's dataset scanner read it without this module's help."""
    names = {name.lower(): name for name in physical.names}
    if any(name.lower() in names for name in partition_by):
        return False  # a stored partition column: the log's value is the row's, not the file's
    for name in stored:
        found = names.get(name.lower())
        if found is None:
            continue  # added after the file was written: the dataset fills NULL
        if found != name or not physical.field(found).type.equals(schema.field(name).type):
            return False
    return True


def table_columns_digest(meta: TableMetadata) -> str:
    """The `stored_columns_digest` a file has when it stores exactly the table's columns (partition
    columns left out) in the types a reader hands back."""
    partition = set(meta.partition_by)
    return stored_columns_digest(pa.schema([f for f in read_schema(meta) if f.name not in partition]))


def plain_dataset(
    storage: Storage, files: Sequence[DataFile], schema: pa.Schema, meta: TableMetadata
) -> tuple[ds.FileSystemDataset, list[DataFile]]:
    """The files a dataset reads as they are, and those that must be read file by file (`read_file`).
    A file whose commit recorded the table's own columns (`DataFile.schema_digest`) joins the dataset
    without its footer being read here: the scan reads it, as it reads any dataset's. Every other file's
    footer is read once here, on a few threads (pyarrow releases the GIL while it reads and parses), and
    its fragment keeps it for the scan."""
    partition_by = meta.partition_by
    stored = [name for name in schema.names if name not in partition_by]
    fitting = table_columns_digest(meta)
    expressions: dict[str, pc.Expression] = {}

    def fragment_of(file: DataFile) -> Any:
        key = json.dumps(file.partition, sort_keys=True, default=str)
        expression = expressions.get(key)
        if expression is None:
            expression = expressions[key] = partition_expression(schema, file.partition)
        filesystem, path = storage.arrow_file(file.path)
        return _FORMAT.make_fragment(path, filesystem=filesystem, partition_expression=expression)

    def footer_read(file: DataFile) -> Any:
        fragment = fragment_of(file)
        fragment.physical_schema  # noqa: B018 - reads the footer here, in parallel, once
        return fragment

    # fragments stay in the files' order, whichever way each was found to fit
    fragments: list[Any] = [None] * len(files)
    unknown = []
    for index, file in enumerate(files):
        if file.schema_digest == fitting:
            fragments[index] = fragment_of(file)
        else:
            unknown.append(index)
    if len(unknown) > 1:
        with ThreadPoolExecutor(max_workers=min(_FOOTER_THREADS, len(unknown))) as pool:
            read = list(pool.map(footer_read, (files[i] for i in unknown)))
    else:
        read = [footer_read(files[i]) for i in unknown]
    others = []
    for index, fragment in zip(unknown, read, strict=True):
        if fits_dataset(fragment.physical_schema, schema, stored, partition_by):
            fragments[index] = fragment
        else:
            others.append(files[index])
    filesystem = storage.arrow_file("")[0]
    kept = [fragment for fragment in fragments if fragment is not None]
    return ds.FileSystemDataset(kept, schema, _FORMAT, filesystem), others


def _renamed(stored: pa.DataType, target: pa.DataType) -> pa.DataType:
    """`stored` with each struct field (at any depth) named as `target` names it where the names match
    regardless of case, as Spark's reader matches them; the layout stays the stored one."""
    if pa.types.is_struct(stored) and pa.types.is_struct(target):
        wanted = {target.field(i).name.lower(): target.field(i) for i in range(target.num_fields)}
        fields = []
        for i in range(stored.num_fields):
            field = stored.field(i)
            match = wanted.get(field.name.lower())
            if match is not None:
                field = field.with_name(match.name).with_type(_renamed(field.type, match.type))
            fields.append(field)
        return pa.struct(fields)
    lists = (pa.types.is_list, pa.types.is_large_list)
    if any(is_list(stored) for is_list in lists) and any(is_list(target) for is_list in lists):
        make = pa.list_ if pa.types.is_list(stored) else pa.large_list
        return make(stored.value_field.with_type(_renamed(stored.value_type, target.value_type)))
    if pa.types.is_map(stored) and pa.types.is_map(target):
        return pa.map_(stored.key_field, stored.item_field.with_type(_renamed(stored.item_type, target.item_type)))
    return stored


def named_as(column: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    """`column` with its struct fields named as `target` names them (a cast would leave a field spelled
    in another case NULL)."""
    renamed = _renamed(column.type, target)
    if renamed.equals(column.type):
        return column
    return pa.chunked_array([chunk.view(renamed) for chunk in column.chunks], renamed)


def read_file(
    meta: TableMetadata, storage: Storage, file: DataFile, schema: pa.Schema, *, helpers: bool = False
) -> pa.Table:
    """The live rows of one file in `schema` (some of the table's columns, in the table's types): stored
    columns matched case-insensitively and cast as Spark widens them, NULL for a column the file does not
    hold, partition columns from the log, the deletion vector applied. With `helpers`, a primary-key
    file's operation and sequence and the FILE, ROW and VERSION columns merge-on-read orders by."""
    with storage.open_input(file.path) as handle:
        parquet = pq.ParquetFile(handle, coerce_int96_timestamp_unit=_INT96_UNIT)
        by_lower = {name.lower(): name for name in parquet.schema_arrow.names}
        wanted = [by_lower[n.lower()] for n in schema.names if n not in meta.partition_by and n.lower() in by_lower]
        if helpers and meta.primary_key:
            wanted += [c for c in (OP_COLUMN, SEQ_COLUMN) if c in by_lower and c not in wanted]
        stored = parquet.read(columns=wanted, use_threads=False)
    rows = stored.num_rows
    columns: dict[str, pa.Array | pa.ChunkedArray] = {}
    for field in schema:
        if field.name in meta.partition_by:
            scalar = partition_scalar(field.type, file.partition.get(field.name))
            columns[field.name] = pa.repeat(scalar, rows)
        elif field.name.lower() in by_lower:
            columns[field.name] = named_as(stored[by_lower[field.name.lower()]], field.type).cast(field.type)
        else:
            columns[field.name] = pa.nulls(rows, field.type)
    if helpers:
        if meta.primary_key:
            columns[OP_COLUMN] = _operations(stored, file)
            columns[SEQ_COLUMN] = (
                stored[SEQ_COLUMN].cast(pa.int64()) if SEQ_COLUMN in by_lower else pa.nulls(rows, pa.int64())
            )
        columns[FILE] = pa.repeat(pa.scalar(file.path), rows)
        columns[ROW] = pa.array(numpy.arange(rows, dtype=numpy.int64))
        columns[VERSION] = pa.repeat(pa.scalar(file.added_version or 0, pa.int64()), rows)
    data = pa.table(columns)
    if file.deletion_vector:
        if file.deletion_vector[-1] >= rows:
            raise AcidTablesError(
                f"acidtables: the deletion vector of {file.path} hides row {file.deletion_vector[-1]}, and the "
                f"file has {rows} rows; run `acidtables fsck` on the table"
            )
        keep = numpy.ones(rows, dtype=bool)
        keep[numpy.fromiter(file.deletion_vector, dtype=numpy.int64)] = False
        data = data.filter(pa.array(keep))
    return data


def _operations(stored: pa.Table, file: DataFile) -> Any:
    """Each row's merge-on-read operation: an upsert where the file has no `_acid_op` (a plain Parquet
    file), and an error naming the file for anything but 'U' and 'D' (the commit proof refuses such
    files, so this is damage, never a row to drop)."""
    if OP_COLUMN not in stored.column_names:
        return pa.repeat(pa.scalar(UPSERT), stored.num_rows)
    ops = pc.fill_null(stored[OP_COLUMN], UPSERT)
    if not pc.all(pc.is_in(ops, value_set=pa.array(sorted(MERGE_ON_READ_OPS)))).as_py():
        raise AcidTablesError(
            f"acidtables: {OP_COLUMN} is neither 'U' nor 'D' in {file.path}; run `acidtables fsck` on the table"
        )
    return ops


__all__ = [
    "FILE",
    "ROW",
    "VERSION",
    "fits_dataset",
    "partition_expression",
    "partition_scalar",
    "partition_text",
    "plain_dataset",
    "read_file",
    "table_columns_digest",
]
