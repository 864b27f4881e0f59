"""The `acidtables` Spark data source (PySpark's Python Data Source API).

    spark.read.format("acidtables").option("versionAsOf", 3).load("sales.orders")
    df.write.format("acidtables").mode("append").save("sales.orders")

Spark runs a Python data source's driver-side steps (planning the read, starting and committing the
write) in separate Python workers, so nothing is shared between them in memory: a read is planned in
one worker (the snapshot pinned, the filters Spark pushes turned into partition and statistics pruning,
the files listed into tasks), and the write carries (txn id, read version, head revision), from which
the commit step resumes the transaction. Executors read and write Parquet with pyarrow (`arrow_files`, the
same layout, partition spelling, file kinds and merge-on-read as SparkTable) and never talk to etcd.

Settings are the ACIDTABLES_* environment that `Catalog.connect()` reads, and each can be given as an
option instead: drop the prefix, lower-case it, and write a dot for the first underscore
(`etcd.endpoints`, `warehouse`, `etcd.prefix`, `commit.max_attempts`, ...); `local` uses the embedded
development etcd. Every option is checked before anything runs (`source_options`): an unknown name, a
value of the wrong type or range, or a read option on a write is refused naming it. Whole-table
overwrite and append are the write modes; the write is a blind append (the data source cannot see what
the DataFrame read). A read checks that every file it will open exists while it is planned
(DataFilesMissingError names them), before any executor opens one. `register` turns on Spark's
`spark.sql.python.filterPushdown.enabled` for the session, which the pruning needs.

SparkTable is the faster path for large jobs (Spark's native Parquet reader and writer); this source is
for code that wants `format("acidtables")`.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    Filter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from acidtables.core import (
    AcidTablesError,
    Catalog,
    DataFile,
    Expr,
    InvalidArgumentError,
    Settings,
    Snapshot,
    Storage,
    TableMetadata,
    Transaction,
    check_files_exist,
)

from .arrow_files import read_rows
from .pushed_filters import pushed_predicate
from .schema import change_feed_struct, check_schema, read_struct
from .source_catalog import catalog_from_options, kept_catalog, user_facing
from .source_options import parse_options
from .stream_sink import AcidTablesStreamWriter, stage_batches
from .writes import replace_all

FORMAT = "acidtables"
FILTER_PUSHDOWN = "spark.sql.python.filterPushdown.enabled"


#: each session the source is registered in, and the catalog it carries (use_catalog), if any
_registered: weakref.WeakKeyDictionary[SparkSession, Catalog | None] = weakref.WeakKeyDictionary()
#: one registration at a time: the class Spark holds and the catalog sql() uses must be the same
_registering = threading.RLock()


def register(spark: SparkSession, catalog: Catalog | None = None) -> None:
    """Make `format("acidtables")` available in this session (SparkTable and local_session do it);
    with `catalog`, the session's reads and writes use it when they name no catalog setting
    (use_catalog).

    Once per session and catalog: Spark logs a warning each time a data source name is registered
    again."""
    with _registering:
        _register(spark, catalog)


def _register(spark: SparkSession, catalog: Catalog | None) -> None:
    if spark in _registered and (catalog is None or _registered[spark] is catalog):
        return
    # the reader prunes by the filters Spark pushes (AcidTablesReader.pushFilters), which Spark asks for
    # with this setting on; off, it refuses a reader that takes filters rather than ignore them
    spark.conf.set(FILTER_PUSHDOWN, "true")
    if catalog is None:
        spark.dataSource.register(AcidTablesDataSource)
    else:
        # Spark's planning workers get the data source class, pickled, and nothing of the session: a
        # class made here travels by value, with the catalog's settings
        carrying = type("AcidTablesSessionDataSource", (AcidTablesDataSource,), {"session_settings": catalog.settings})
        spark.dataSource.register(carrying)
    _registered[spark] = catalog


def use_catalog(spark: SparkSession, catalog: Catalog | None) -> None:
    """Make `catalog` this session's: `sql(spark, ...)` without `catalog=` and `format("acidtables")`
    without catalog options use it (one session, one catalog). `local_session(catalog=...)` does it;
    None makes them go back to the environment's (`Catalog.connect()`)."""
    if catalog is not None and not isinstance(catalog, Catalog):
        raise InvalidArgumentError(f"use_catalog(): expected an acidtables Catalog, found {type(catalog).__name__}")
    with _registering:
        if catalog is None:
            if _registered.get(spark) is not None:
                _registered.pop(spark)
                _register(spark, None)
            return
        _register(spark, catalog)


def session_catalog(spark: SparkSession) -> Catalog | None:
    """The catalog `use_catalog` gave this session, if any."""
    return _registered.get(spark)


class AcidTablesDataSource(DataSource):
    #: the settings of the catalog of the session this class was registered in (use_catalog)
    session_settings: Settings | None = None

    @classmethod
    def name(cls) -> str:
        return FORMAT

    @user_facing
    def schema(self) -> StructType:
        options = parse_options(self.options, "schema")
        with catalog_from_options(options, self.session_settings) as catalog:
            struct = read_struct(catalog.table(options.table).metadata)
        return change_feed_struct(struct) if options.stream.read_change_feed else struct

    @user_facing
    def reader(self, schema: StructType) -> DataSourceReader:
        options = parse_options(self.options, "read")
        with catalog_from_options(options, self.session_settings) as catalog:
            table = catalog.table(options.table)
            snapshot = table.snapshot(version=options.version_as_of, timestamp=options.timestamp_as_of)
            return AcidTablesReader(snapshot, table.storage)

    @user_facing
    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from .stream_source import AcidTablesStreamReader

        return AcidTablesStreamReader.from_options(self.options, self.session_settings, schema)

    @user_facing
    def writer(self, schema: StructType, overwrite: bool) -> AcidTablesWriter:
        operation = "insert_overwrite" if overwrite else "insert_into"
        options = parse_options(self.options, "write")
        # the worker's kept catalog, open after this returns: the transaction's id carries its process
        # lease, and its in-flight registration is made under it, so cleanup() sees the write running
        # while the tasks stage its files (a catalog closed here revoked the lease at once)
        catalog = kept_catalog(options, dict(self.options), self.session_settings)
        table = catalog.table(options.table)
        check_schema(
            table.metadata,
            schema,
            call=f"format('acidtables').mode({'overwrite' if overwrite else 'append'!r}).save({table.name!r})",
            hint="alter_table() or SparkTable's merge_schema=True",
        )
        tx = table.begin(operation)
        applied = None
        if options.txn_app_id is not None and options.txn_version is not None:
            applied = tx.applied_at(options.txn_app_id, options.txn_version)
        state = _WriteState(
            dict(self.options),
            self.session_settings,
            table.name,
            tx.txn_id,
            tx.operation.value,
            tx.read_version,
            tx.head_revision,
            tx.metadata.to_json(),
            applied_at=applied,
        )
        return AcidTablesWriter(state)

    @user_facing
    def streamWriter(self, schema: StructType, overwrite: bool) -> AcidTablesStreamWriter:
        options = parse_options(self.options, "stream_write")
        # the worker's kept catalog: a stream plans a writer every micro-batch (AcidTablesStreamWriter)
        catalog = kept_catalog(options, dict(self.options), self.session_settings)
        return AcidTablesStreamWriter.plan(
            options, dict(self.options), catalog, self.session_settings, schema, overwrite
        )


# --- reading ---------------------------------------------------------------------------------------


class _Files(InputPartition):
    def __init__(self, files: list[dict[str, Any]]) -> None:
        super().__init__(files)
        self.files = files


class AcidTablesReader(DataSourceReader):
    """A read of one pinned snapshot. Spark plans it in the worker that made it: `pushFilters` (when
    the query has filters) and then `partitions` run there with the snapshot in memory, so a read of
    one partition decodes only that partition's entries and proves only its files exist. The reader
    then travels to the executors with the table's metadata only; each task's files travel in its
    partition."""

    def __init__(self, snapshot: Snapshot, storage: Storage) -> None:
        self.metadata = snapshot.metadata.to_json()
        self._snapshot: Snapshot | None = snapshot
        self._storage: Storage | None = storage
        self._predicate: Expr | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_snapshot": None, "_storage": None}

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        self._predicate = pushed_predicate(filters, TableMetadata.from_json(self.metadata))
        return filters  # Spark still evaluates every filter: the predicate only leaves files unopened

    @user_facing
    def partitions(self) -> Sequence[InputPartition]:
        snapshot, storage = self._snapshot, self._storage
        if snapshot is None or storage is None:
            raise AcidTablesError("acidtables: a read was planned outside the Python worker that pinned its snapshot")
        meta = snapshot.metadata
        files = snapshot.prune(self._predicate)
        # planned here, on the driver: a vanished file fails the read now, naming itself, not in a task
        check_files_exist(storage, files, table=meta.name, version=snapshot.version)
        entries = [{**f.to_json(), "added_version": f.added_version} for f in files]
        if not entries:
            return [_Files([])]
        if not meta.primary_key:
            return [_Files(task) for task in packed_tasks(entries)]
        # merge-on-read needs every file of a table partition in one reader task
        groups: dict[str, list[dict[str, Any]]] = {}
        for f in entries:
            groups.setdefault(repr(sorted(f["partition"].items())), []).append(f)
        return [_Files(g) for g in groups.values()]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        raw = partition.files if isinstance(partition, _Files) else []
        if not raw:
            return
        meta = TableMetadata.from_json(self.metadata)
        files = [DataFile.from_json(f, f.get("added_version")) for f in raw]
        yield from read_rows(meta, Storage(meta.location), files).to_batches()


#: as Spark packs files into a scan's tasks (spark.sql.files.maxPartitionBytes, openCostInBytes): a task
#: per tiny file would spend more on starting tasks than on reading
TASK_BYTES = 128 << 20
OPEN_COST_BYTES = 4 << 20


def packed_tasks(entries: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Files in tasks of up to TASK_BYTES, each file counted with OPEN_COST_BYTES more."""
    tasks: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []
    size = 0
    for entry in entries:
        cost = int(entry.get("size_bytes") or 0) + OPEN_COST_BYTES
        if current and size + cost > TASK_BYTES:
            tasks.append(current)
            current, size = [], 0
        current.append(entry)
        size += cost
    tasks.append(current)
    return tasks


# --- writing ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _WriteState:
    options: dict[str, str]
    session_settings: Settings | None
    table: str
    txn_id: str
    operation: str
    read_version: int
    head_revision: int
    metadata: dict[str, Any]
    #: the version that already holds this write's (txnAppId, txnVersion): the write is skipped
    applied_at: int | None = None


class _Written(WriterCommitMessage):
    def __init__(self, files: list[dict[str, Any]]) -> None:
        self.files = files


class AcidTablesWriter(DataSourceArrowWriter):
    def __init__(self, state: _WriteState) -> None:
        self.state = state

    @property
    def _overwrite(self) -> bool:
        return self.state.operation == "insert_overwrite"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        if self.state.applied_at is not None:
            return _Written([])  # the table has this write already: nothing is staged
        meta = TableMetadata.from_json(self.state.metadata)
        files = stage_batches(meta, self.state.txn_id, list(iterator), overwrite=self._overwrite)
        return _Written([f.to_json() for f in files])

    def _transaction(self, catalog: Catalog) -> Transaction:
        table = catalog.table(self.state.table)
        return table.resume(
            self.state.txn_id,
            self.state.operation,
            read_version=self.state.read_version,
            head_revision=self.state.head_revision,
            table_id=str(self.state.metadata["table_id"]),
        )

    @user_facing
    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        with catalog_from_options(parse_options(self.state.options, "write"), self.state.session_settings) as catalog:
            tx = self._transaction(catalog)
            options = parse_options(self.state.options, "write")
            if options.txn_app_id is not None and options.txn_version is not None:
                tx.set_app_transaction(options.txn_app_id, options.txn_version)
            if self._overwrite:
                replace_all(tx)
            tx.add_files([DataFile.from_json(f) for m in messages if isinstance(m, _Written) for f in m.files])
            tx.commit()

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        with catalog_from_options(parse_options(self.state.options, "write"), self.state.session_settings) as catalog:
            self._transaction(catalog).abort()  # resumed: one that landed after all keeps its files
