"""The `acidtables` Spark data source (PySpark's Python Data Source API).

    spark.read.format("acidtables").option("versionAsOf", 3).load("sales.orders")
    df.write.format("acidtables").mode("append").save("sales.orders")

Spark runs a Python data source's driver-side steps (planning the read, starting and committing the
write) in separate Python workers, so nothing is shared between them in memory: the read plan carries
the snapshot's file list, and the write carries (txn id, read version, head revision), from which the
commit step resumes the transaction. Executors read and write Parquet with pyarrow and never talk to
etcd. Where to find etcd comes from options (`etcd.endpoints`, `etcd.prefix`, `warehouse`, or `local`
for the embedded development etcd) or else from the ACIDTABLES_* environment.

SparkTable is the faster path for large jobs (Spark's native Parquet reader and writer); this source is
for code that wants `format("acidtables")`.
"""

from __future__ import annotations

import functools
import os
import uuid
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import StructType

from acidtables.core import (
    HIVE_NULL,
    AcidTablesError,
    Catalog,
    CommitSettings,
    DataFile,
    EtcdSettings,
    InvalidArgumentError,
    Settings,
    Storage,
    TableMetadata,
)

from .files import WRITE_PREFIX, footer_stats, not_null_message
from .schema import DELETE, OP_COLUMN, SEQ_COLUMN, UPSERT, data_columns, read_struct, spark_type, table_struct

FORMAT = "acidtables"


_registered: weakref.WeakSet[SparkSession] = weakref.WeakSet()


def register(spark: SparkSession) -> None:
    """Make `format("acidtables")` available in this session (SparkTable and local_session do it).

    Once per session: Spark logs a warning each time a data source name is registered again."""
    if spark in _registered:
        return
    spark.dataSource.register(AcidTablesDataSource)
    _registered.add(spark)


def catalog_from_options(options: Mapping[str, str]) -> Catalog:
    endpoints = options.get("etcd.endpoints")
    if endpoints:
        warehouse = options.get("warehouse")
        if not warehouse:
            raise InvalidArgumentError("format('acidtables'): option etcd.endpoints needs option warehouse too")
        etcd = EtcdSettings(
            tuple(e.strip() for e in endpoints.split(",")), prefix=options.get("etcd.prefix", "/acidtables/v1")
        )
        return Catalog(Settings(etcd=etcd, warehouse=warehouse, commit=CommitSettings()))
    if "local" in options:
        return Catalog.local(options["local"] or None)
    return Catalog.connect()


def _table_name(options: Mapping[str, str]) -> str:
    name = options.get("path") or options.get("table")
    if not name:
        raise InvalidArgumentError("format('acidtables'): name the table, e.g. .load('sales.orders')")
    return name


F = TypeVar("F", bound=Callable[..., Any])


def user_facing(method: F) -> F:
    """For the driver-side steps Spark runs in planning workers (schema, reader, writer, commit): an
    acidtables error reaches the user as its class and message on the first line of Spark's error,
    instead of a Python traceback with the cause at the bottom. Spark formats a worker's error without
    the traceback when SPARK_HIDE_TRACEBACK is set, so it is set, in that planning worker only, when the
    error is ours; our errors name their cause themselves. Executor-side read and write are left alone:
    their workers also run user code whose tracebacks matter."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except AcidTablesError:
            os.environ["SPARK_HIDE_TRACEBACK"] = "1"
            raise

    return cast(F, wrapper)


class AcidTablesDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def _metadata(self) -> TableMetadata:
        with catalog_from_options(self.options) as catalog:
            return catalog.table(_table_name(self.options)).metadata

    @user_facing
    def schema(self) -> StructType:
        return read_struct(self._metadata())

    @user_facing
    def reader(self, schema: StructType) -> DataSourceReader:
        options = self.options
        version = options.get("versionAsOf")
        timestamp = options.get("timestampAsOf")
        with catalog_from_options(options) as catalog:
            table = catalog.table(_table_name(options))
            snapshot = table.snapshot(version=int(version) if version is not None else None, timestamp=timestamp)
            files = [{**f.to_json(), "added_version": f.added_version} for f in snapshot.files]
            return AcidTablesReader(snapshot.metadata.to_json(), files)

    @user_facing
    def writer(self, schema: StructType, overwrite: bool) -> AcidTablesWriter:
        with catalog_from_options(self.options) as catalog:
            table = catalog.table(_table_name(self.options))
            tx = table.begin("insert_overwrite" if overwrite else "insert_into")
            meta = tx.metadata
            expected = table_struct(meta)
            got = {f.name.lower(): f.dataType for f in schema.fields}
            problems = [
                f"{f.name} {f.dataType.simpleString()}"
                for f in expected.fields
                if got.get(f.name.lower()) != f.dataType
            ]
            extra = sorted(set(got) - {f.name.lower() for f in expected.fields})
            if problems or extra:
                tx.abort()
                raise InvalidArgumentError(
                    f"format('acidtables').save({meta.name!r}): the DataFrame does not match the table "
                    f"({meta.schema_ddl}); wrong or missing: {problems or 'none'}; extra: {extra or 'none'}"
                )
            state = _WriteState(
                dict(self.options),
                table.name,
                tx.txn_id,
                tx.operation.value,
                tx.read_version,
                tx.head_revision,
                tx.staging_dir,
                meta.to_json(),
            )
            return AcidTablesWriter(state)


# --- reading ---------------------------------------------------------------------------------------


class _Files(InputPartition):
    def __init__(self, files: list[dict[str, Any]]) -> None:
        super().__init__(files)
        self.files = files


def _arrow_type(type_ddl: str) -> pa.DataType:
    return to_arrow_type(spark_type(type_ddl))


def _read_file(meta: TableMetadata, storage: Storage, raw: dict[str, Any], *, keep_helpers: bool) -> pa.Table:
    file = DataFile.from_json(raw, raw.get("added_version"))
    with storage.open_input(file.path) as handle:
        data = pq.read_table(handle)
    data = data.append_column("_acid_row", pa.array(range(data.num_rows), pa.int64()))
    if file.deletion_vector:
        hidden = pa.array(file.deletion_vector, pa.int64())
        data = data.filter(pc.invert(pc.is_in(data["_acid_row"], value_set=hidden)))
    for column in meta.partition_by:
        type_ = next(c.type for c in meta.columns if c.name == column)
        data = data.append_column(column, pa.array([file.partition.get(column)] * data.num_rows, _arrow_type(type_)))
    if keep_helpers:
        data = data.append_column("_acid_version", pa.array([file.added_version] * data.num_rows, pa.int64()))
    return data


class AcidTablesReader(DataSourceReader):
    def __init__(self, metadata: dict[str, Any], files: list[dict[str, Any]]) -> None:
        self.metadata = metadata
        self.files = files

    @user_facing
    def partitions(self) -> Sequence[InputPartition]:
        meta = TableMetadata.from_json(self.metadata)
        if not self.files:
            return [_Files([])]
        if not meta.primary_key:
            return [_Files([f]) for f in self.files]
        # merge-on-read needs every file of a table partition in one reader task
        groups: dict[str, list[dict[str, Any]]] = {}
        for f in self.files:
            groups.setdefault(repr(sorted(f["partition"].items())), []).append(f)
        return [_Files(g) for g in groups.values()]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        meta = TableMetadata.from_json(self.metadata)
        storage = Storage(meta.location)
        files = partition.files if isinstance(partition, _Files) else []
        names = [c.name for c in meta.columns]
        if not files:
            return
        tables = [_read_file(meta, storage, f, keep_helpers=bool(meta.primary_key)) for f in files]
        data = pa.concat_tables(tables, promote_options="default")
        if meta.primary_key:
            seq = pc.coalesce(data[SEQ_COLUMN], data["_acid_version"])
            data = data.append_column("_acid_order", seq)
            ordered = data.sort_by(
                [
                    *[(k, "ascending") for k in meta.primary_key],
                    ("_acid_order", "descending"),
                    ("_acid_row", "descending"),
                ]
            )
            keys = ordered.select(list(meta.primary_key)).to_pylist()
            keep = [i for i, k in enumerate(keys) if i == 0 or k != keys[i - 1]]
            newest = ordered.take(pa.array(keep, pa.int64()))
            data = newest.filter(pc.not_equal(newest[OP_COLUMN], DELETE))
        yield from data.select(names).to_batches()


# --- writing ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _WriteState:
    options: dict[str, str]
    table: str
    txn_id: str
    operation: str
    read_version: int
    head_revision: int
    staging_dir: str
    metadata: dict[str, Any]


class _Written(WriterCommitMessage):
    def __init__(self, files: list[dict[str, Any]]) -> None:
        self.files = files


def _hive_segment(column: str, value: Any) -> str:
    if value is None:
        return f"{column}={HIVE_NULL}"
    return f"{column}={quote(str(value), safe='')}"


class AcidTablesWriter(DataSourceArrowWriter):
    def __init__(self, state: _WriteState) -> None:
        self.state = state

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        meta = TableMetadata.from_json(self.state.metadata)
        batches = list(iterator)
        if not batches:
            return _Written([])
        data = pa.Table.from_batches(batches)
        if data.num_rows == 0:
            return _Written([])  # a job never adds a file with no rows
        data = data.rename_columns(
            [next((c.name for c in meta.columns if c.name.lower() == n.lower()), n) for n in data.column_names]
        )
        for column in meta.columns:  # the rule guarded() folds into SparkTable's writes
            if not column.nullable and column.name in data.column_names and data[column.name].null_count:
                raise InvalidArgumentError(not_null_message(meta, column.name) + "; nothing was committed")
        stored = [c.name for c in data_columns(meta)]
        if meta.primary_key:
            data = data.append_column(OP_COLUMN, pa.array([UPSERT] * data.num_rows, pa.string()))
            data = data.append_column(SEQ_COLUMN, pa.nulls(data.num_rows, pa.int64()))
            stored += [OP_COLUMN, SEQ_COLUMN]
        groups = [((), data)]
        if meta.partition_by:
            keys = data.select(list(meta.partition_by)).to_pylist()
            distinct = {tuple(k.values()) for k in keys}
            groups = []
            for values in distinct:
                mask = pa.array([tuple(k.values()) == values for k in keys])
                groups.append((values, data.filter(mask)))
        storage = Storage(meta.location)
        # the layout write_staged uses, so reads can let Spark attach the partition values (spark.scan)
        base = storage.relative(self.state.staging_dir) + f"/{WRITE_PREFIX}ds-{uuid.uuid4().hex}"
        files = []
        for values, rows in groups:
            partition: dict[str, Any] = dict(zip(meta.partition_by, values, strict=True))
            segments = "/".join(_hive_segment(k, v) for k, v in partition.items())
            relative = f"{base}/{segments + '/' if segments else ''}part-{uuid.uuid4().hex}.parquet"
            sink = pa.BufferOutputStream()
            pq.write_table(rows.select(stored), sink, compression="snappy")
            payload = sink.getvalue().to_pybytes()
            storage.write_exclusive(relative, payload)
            count, stats = footer_stats(pq.ParquetFile(pa.BufferReader(payload)).metadata)
            kind = "delta" if meta.primary_key else "data"
            files.append(DataFile(relative, partition, count, len(payload), stats, kind=kind).to_json())
        return _Written(files)

    def _transaction(self, catalog: Catalog) -> Any:
        table = catalog.table(self.state.table)
        return table.resume(
            self.state.txn_id,
            self.state.operation,
            read_version=self.state.read_version,
            head_revision=self.state.head_revision,
        )

    @user_facing
    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        with catalog_from_options(self.state.options) as catalog:
            tx = self._transaction(catalog)
            if self.state.operation == "insert_overwrite":
                tx.remove_files(tx.snapshot.files)
                tx.record_read(whole_table=True)
                tx.set_scope(None)
            tx.add_files([DataFile.from_json(f) for m in messages if isinstance(m, _Written) for f in m.files])
            tx.commit()

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        with catalog_from_options(self.state.options) as catalog:
            self._transaction(catalog).abort()
