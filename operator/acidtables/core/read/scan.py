"""A table's rows without Spark or a JVM: `Table.scan(where=, columns=, version= | timestamp=, limit=)`.

A scan pins one snapshot when it is made, so every method reads the same version however many commits
land meanwhile, and returns what a Spark read of that version returns: merge-on-read primary-key
partitions merged (newest row per key, tombstones dropped), deletion vectors applied, partition columns
from the log (NULL partitions included), columns added later read as NULL from older files.

Work is split by what each file needs (`data_files`): plain files are one pyarrow dataset, which Arrow
scans in parallel with the filter and projection pushed into it; files with deletion vectors are read
one at a time; a primary-key partition that is not major-compacted is read and merged as a whole. So
`to_batches()` holds at most one file, or one such partition, in memory at a time.

Partition values and file statistics prune files before any is opened (`Snapshot.prune`, from the part
of `where` core's predicate parser understands); `row_filter` then decides row by row.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from acidtables.core.commit.presence import check_files_exist
from acidtables.core.errors import InvalidArgumentError
from acidtables.core.expressions import parse_predicate
from acidtables.core.log.records import DataFile, FileKind, TableMetadata
from acidtables.core.log.snapshot import Snapshot
from acidtables.core.read.arrow_schema import read_schema
from acidtables.core.read.data_files import plain_dataset, read_file
from acidtables.core.read.merge import merge_on_read
from acidtables.core.read.row_filter import row_filter
from acidtables.core.storage.storage import Storage


class TableScan:
    """One read of one version of a table. Made by `Table.scan`; each `to_*` method reads anew."""

    def __init__(
        self,
        snapshot: Snapshot,
        storage: Storage,
        *,
        where: str | None = None,
        columns: Sequence[str] | None = None,
        limit: int | None = None,
    ) -> None:
        self.snapshot = snapshot
        self.storage = storage
        meta = snapshot.metadata
        table_schema = read_schema(meta)
        self.columns = _chosen_columns(meta, columns)
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise InvalidArgumentError(f"{meta.name}: scan(): limit must be a non-negative int, found {limit!r}")
        self.limit = limit
        self.where = where
        types = {f.name: f.type for f in table_schema}
        self._filter: pc.Expression | None = None
        filter_columns: frozenset[str] = frozenset()
        prunable = True
        if where is not None:
            self._filter, filter_columns, prunable = row_filter(where, types, table=meta.name)
        wanted = set(self.columns) | set(filter_columns)
        #: whether Arrow may prune row groups by the filter: not on FLOAT/DOUBLE columns, whose Parquet
        #: statistics (as pyarrow writes them) leave NaN out, so `x != 1` would skip a row group of 1.0 and NaN
        #: (a struct's, list's or map's too), nor where the filter casts a column (RowFilter.prunable)
        self._pushdown = prunable and not any(_holds_floating(types[c]) for c in filter_columns)
        #: what is read: the chosen columns and those the filter needs, in the table's order
        self._read_schema = pa.schema([f for f in table_schema if f.name in wanted])
        #: what a primary-key partition that must be merged reads: its key too, which the merge groups by
        self._merge_schema = pa.schema([f for f in table_schema if f.name in wanted or f.name in meta.primary_key])
        #: what comes back
        self.schema = pa.schema([table_schema.field(name) for name in self.columns])
        pruning = parse_predicate(where, meta.column_types) if where is not None else None
        self.files: list[DataFile] = snapshot.prune(pruning)

    def __repr__(self) -> str:
        return (
            f"TableScan({self.snapshot.metadata.name!r}, version={self.version}, where={self.where!r}, "
            f"columns={self.columns!r}, files={len(self.files)})"
        )

    @property
    def version(self) -> int:
        return self.snapshot.version

    @property
    def metadata(self) -> TableMetadata:
        return self.snapshot.metadata

    # --- results -------------------------------------------------------------------------------------

    def to_batches(self) -> pa.RecordBatchReader:
        """The rows as a stream of record batches, holding one file (or one merged primary-key
        partition) in memory at a time: for tables larger than memory."""
        return pa.RecordBatchReader.from_batches(self.schema, self._limited(self._batches()))

    def to_arrow(self) -> pa.Table:
        """The rows as one Arrow table."""
        if self.limit is not None:
            return pa.Table.from_batches(list(self._limited(self._batches())), self.schema)
        # whole tables: Arrow's dataset scan builds its table in parallel, faster than batch by batch
        tables = [t if t.schema.equals(self.schema) else t.cast(self.schema) for t in self._pieces(whole=True)]
        return pa.concat_tables(tables) if tables else self.schema.empty_table()

    def to_pandas(self, **options: Any) -> Any:
        """The rows as a pandas DataFrame (`options` go to `pyarrow.Table.to_pandas`)."""
        return self.to_arrow().to_pandas(**options)

    def to_polars(self) -> Any:
        """The rows as a Polars DataFrame (needs polars: `pip install 'acidtables[polars]'`)."""
        polars = _optional("polars", "to_polars")
        return polars.from_arrow(self.to_arrow())

    def to_duckdb(self, connection: Any, name: str) -> Any:
        """The rows registered in a DuckDB connection as the view `name`, which is returned as a relation
        (needs duckdb: `pip install 'acidtables[duckdb]'`)."""
        _optional("duckdb", "to_duckdb")
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"to_duckdb(): name must be a non-empty string, found {name!r}")
        connection.register(name, self.to_dataset())
        return connection.table(name)

    def to_dataset(self) -> ds.Dataset:
        """The rows as a `pyarrow.dataset.Dataset`, for engines that take one (DuckDB, Polars'
        `scan_pyarrow_dataset`, Acero). When every file can be read as it is (no merge-on-read, no
        deletion vector, the chosen columns cover the filter, and the filter compares no FLOAT or DOUBLE
        value, whose Parquet statistics leave NaN out) it is a lazy dataset over the files, with
        the filter applied, so an engine's own projection and filters reach the files; otherwise the
        rows are read first."""
        plain, rest = self._split()
        lazy = self._pushdown and self.limit is None  # Arrow's pruning by float statistics loses NaN rows
        if lazy and not rest and set(self._read_schema.names) <= set(self.columns):
            dataset, others = plain_dataset(self.storage, plain, self.schema, self.metadata)
            if not others:
                return dataset.filter(self._filter) if self._filter is not None else dataset
        return ds.dataset(self.to_arrow())

    # --- reading -------------------------------------------------------------------------------------

    def _split(self) -> tuple[list[DataFile], list[list[DataFile]]]:
        """Files a dataset may read as they are, and groups read through `read_file`: a file with a
        deletion vector alone, or a whole primary-key partition that must be merged."""
        meta = self.metadata
        plain: list[DataFile] = []
        rest: list[list[DataFile]] = []
        if not meta.primary_key:
            for file in self.files:
                (rest.append([file]) if file.deletion_vector else plain.append(file))
            return plain, rest
        by_partition: dict[str, list[DataFile]] = {}
        for file in self.files:
            by_partition.setdefault(json.dumps(file.partition, sort_keys=True, default=str), []).append(file)
        for files in by_partition.values():
            major_compacted = all(f.kind is FileKind.BASE and not f.deletion_vector for f in files)
            (plain.extend(files) if major_compacted else rest.append(files))
        return plain, rest

    def _batches(self) -> Iterator[pa.RecordBatch]:
        for piece in self._pieces(whole=False):
            assert isinstance(piece, pa.RecordBatch)
            yield self._conformed(piece)

    def _pieces(self, *, whole: bool) -> Iterator[pa.RecordBatch | pa.Table]:
        """The rows in record batches, or (`whole`) in one table per dataset, file or merged partition;
        a file vacuum deleted is named as DataFilesMissingError."""
        try:
            yield from self._read(whole=whole)
        except FileNotFoundError:
            meta = self.metadata
            check_files_exist(self.storage, self.files, table=meta.name, version=self.version)
            raise
        except pa.ArrowInvalid as exc:
            if self._filter is None or "overflow" not in str(exc):
                raise
            # Spark's ANSI mode fails the same way: the arithmetic of the condition left its type's range
            raise InvalidArgumentError(
                f"{self.metadata.name}: where {self.where!r} overflows on the table's rows ({exc})"
            ) from None

    def _read(self, *, whole: bool) -> Iterator[pa.RecordBatch | pa.Table]:
        meta = self.metadata
        plain, rest = self._split()
        if plain:
            dataset, others = plain_dataset(self.storage, plain, self._read_schema, meta)
            if whole:
                if self._pushdown:
                    yield dataset.to_table(columns=self.columns, filter=self._filter)
                else:
                    yield self._filtered(dataset.to_table(columns=self._read_schema.names))
            elif self._pushdown:
                yield from dataset.to_batches(columns=self.columns, filter=self._filter)
            else:
                for batch in dataset.to_batches(columns=self._read_schema.names):
                    yield from self._filtered(pa.Table.from_batches([batch])).to_batches()
            rest = [[file] for file in others] + rest
        for group in rest:
            merge = bool(meta.primary_key) and not all(f.kind is FileKind.BASE for f in group)
            schema = self._merge_schema if merge else self._read_schema
            tables = [read_file(meta, self.storage, f, schema, helpers=merge) for f in group]
            data = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
            if merge:
                data = merge_on_read(data, meta.primary_key)
            if self._filter is not None:
                data = data.filter(self._filter)
            data = data.select(self.columns)
            if whole:
                yield data
            else:
                yield from data.to_batches()

    def _filtered(self, data: pa.Table) -> pa.Table:
        """`data` (the read schema's columns) filtered row by row, then the chosen columns."""
        return (data.filter(self._filter) if self._filter is not None else data).select(self.columns)

    def _conformed(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        return batch if batch.schema.equals(self.schema) else batch.cast(self.schema)

    def _limited(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        if self.limit is None:
            yield from batches
            return
        left = self.limit
        if left == 0:
            return
        for batch in batches:
            if batch.num_rows >= left:
                yield batch.slice(0, left)
                return
            left -= batch.num_rows
            yield batch


def _holds_floating(data_type: pa.DataType) -> bool:
    """FLOAT or DOUBLE, or a struct, list or map with one inside."""
    if pa.types.is_floating(data_type):
        return True
    if pa.types.is_struct(data_type):
        return any(_holds_floating(data_type.field(i).type) for i in range(data_type.num_fields))
    if pa.types.is_map(data_type):
        return _holds_floating(data_type.key_type) or _holds_floating(data_type.item_type)
    if pa.types.is_list(data_type) or pa.types.is_large_list(data_type) or pa.types.is_fixed_size_list(data_type):
        return _holds_floating(data_type.value_type)
    return False


def _chosen_columns(meta: TableMetadata, columns: Sequence[str] | None) -> list[str]:
    """The table's columns named by `columns` (matched case-insensitively, as Spark does), in the given
    order; all of them when None."""
    names = [c.name for c in meta.columns]
    if columns is None:
        return names
    if isinstance(columns, str) or not all(isinstance(c, str) for c in columns):
        raise InvalidArgumentError(f"{meta.name}: scan(): columns must be a list of column names, found {columns!r}")
    if not columns:
        raise InvalidArgumentError(f"{meta.name}: scan(): columns names no column; leave it out to read them all")
    by_lower = {n.lower(): n for n in names}
    unknown = [c for c in columns if c.lower() not in by_lower]
    if unknown:
        raise InvalidArgumentError(
            f"{meta.name}: scan(): no column {', '.join(map(repr, unknown))} in the table; "
            f"its columns: {', '.join(names)}"
        )
    chosen = [by_lower[c.lower()] for c in columns]
    repeated = sorted({c for c in chosen if chosen.count(c) > 1})
    if repeated:
        raise InvalidArgumentError(f"{meta.name}: scan(): columns names {', '.join(repeated)} more than once")
    return chosen


def _optional(module: str, method: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            f"{method}() needs {module}, which is not installed: pip install 'acidtables[{module}]'"
        ) from None


__all__ = ["TableScan"]
