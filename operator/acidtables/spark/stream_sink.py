"""The `acidtables` data source as a Structured Streaming sink: each micro-batch commits once.

    (df.writeStream.format("acidtables")
        .option("checkpointLocation", "s3a://bucket/checkpoints/events")
        .start("sales.events"))

Spark runs a Python sink in three places, none sharing memory: a planning worker makes a writer for each
micro-batch (`streamWriter`), the executors write with it, and another worker commits (`streamWriter`
again, then `commit(messages, batch_id)`). The transaction is begun when the micro-batch is planned, so
its files are staged under its id and it spans the batch as a batch write does; each write task's
commit message carries it to the commit, which resumes it.

Exactly once, as Delta's SetTransaction: every commit carries the application transaction (query id,
batch id). The query id is the one Spark keeps in the checkpoint (`<checkpointLocation>/metadata`), the
same for every run of the query. So a batch replayed after a crash between its commit and Spark's commit
log is skipped as already applied (its staged files removed), and two runs of one query on one
checkpoint writing the same batch at once meet as ConcurrentTransactionException (conflict-rules D-27);
the table never holds a batch twice.

Append mode adds the batch's rows (upserts them, on a primary-key table); complete mode replaces the
table's contents with them (an overwrite per batch). A batch with no rows commits nothing in append
mode.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from acidtables.core import (
    AcidTablesError,
    Catalog,
    DataFile,
    InvalidArgumentError,
    Settings,
    Storage,
    Table,
    TableMetadata,
    TableNotFoundError,
    Transaction,
    location_key,
)

from .arrow_files import write_rows
from .schema import check_schema
from .source_catalog import kept_catalog, user_facing
from .source_options import CHECKPOINT_LOCATION, SourceOptions, parse_options
from .writes import replace_all

logger = logging.getLogger(__name__)

#: the file Spark keeps a query's id in, under its checkpoint location
QUERY_METADATA = "metadata"


@dataclass(frozen=True)
class StreamTransaction:
    """A micro-batch's transaction, as it travels from planning through the write tasks to the commit."""

    txn_id: str
    operation: str
    read_version: int
    head_revision: int
    #: the table it was begun on: one dropped and created again under the name is another table
    table_id: str | None = None

    @staticmethod
    def of(tx: Transaction) -> StreamTransaction:
        return StreamTransaction(tx.txn_id, tx.operation.value, tx.read_version, tx.head_revision, tx.metadata.table_id)

    def resume(self, table: Table) -> Transaction:
        return table.resume(
            self.txn_id,
            self.operation,
            read_version=self.read_version,
            head_revision=self.head_revision,
            table_id=self.table_id,
        )


class StagedBatch(WriterCommitMessage):
    """What one write task staged, and the transaction it staged it for."""

    def __init__(self, files: list[dict[str, Any]], transaction: dict[str, Any]) -> None:
        self.files = files
        self.transaction = transaction


def query_id(checkpoint_location: str) -> str:
    """The id Spark keeps for a streaming query in its checkpoint: every run of the query has it."""
    where = f"{checkpoint_location}/{QUERY_METADATA}"
    try:
        found = json.loads(Storage(checkpoint_location).read(QUERY_METADATA))
    except FileNotFoundError:
        found = None
    except OSError as exc:
        raise AcidTablesError(
            f"stream into acidtables: {where}, where Spark keeps the query's id, cannot be read ({exc}); "
            f"{CHECKPOINT_LOCATION} must be a directory this process can read and write"
        ) from None
    except ValueError as exc:
        raise AcidTablesError(
            f"stream into acidtables: {where}, where Spark keeps the query's id, is not JSON ({exc}); "
            f"{CHECKPOINT_LOCATION} must be the directory this query was started with"
        ) from None
    ident = found.get("id") if isinstance(found, dict) else None
    if not isinstance(ident, str) or not ident:
        raise AcidTablesError(
            f"stream into acidtables: {where} holds no query id; Spark writes it when a query starts, so "
            f"{CHECKPOINT_LOCATION} must be the directory this query was started with"
        )
    return ident


def check_checkpoint_outside(table: Table, checkpoint_location: str, meta: TableMetadata | None = None) -> None:
    """A checkpoint inside a table's location would be taken for the table's own files: maintenance
    would count it as stray, and a drop would remove it with the table. `meta`: the table's metadata
    when the caller has read it already (reading it again costs a round trip to etcd)."""
    location = (meta or table.metadata).location
    table_key, checkpoint_key = location_key(location), location_key(checkpoint_location)
    if checkpoint_key == table_key or checkpoint_key.startswith(table_key.rstrip("/") + "/"):
        raise InvalidArgumentError(
            f"format('acidtables'): option {CHECKPOINT_LOCATION}={checkpoint_location!r} lies inside the location of "
            f"{table.name} ({location}); keep checkpoints outside every table's location"
        )


def stage_batches(
    meta: TableMetadata, txn_id: str, batches: list[pa.RecordBatch], *, overwrite: bool
) -> list[DataFile]:
    """A write task's rows, staged as Parquet files of transaction `txn_id` (batch and stream writes)."""
    if not batches:
        return []
    return write_rows(meta, Storage(meta.location), txn_id, pa.Table.from_batches(batches), overwrite=overwrite)


@dataclass(frozen=True)
class StreamWriteState:
    options: dict[str, str]
    session_settings: Settings | None
    table: str
    metadata: dict[str, Any]
    query_id: str
    transaction: StreamTransaction


class AcidTablesStreamWriter(DataSourceStreamArrowWriter):
    """Spark makes this writer twice per micro-batch, in two workers: the planning worker's is pickled
    to the write tasks, and the commit worker makes its own (`streamWriter` again) only to call
    `commit` or `abort` on it. So the writer keeps the table it was planned with (never pickled:
    executors do not talk to etcd) and the commit reuses it, its snapshot of the read version the one
    planning just loaded. The catalog is the worker's kept one (`kept_catalog`): the stream's next
    micro-batches in that worker use it again."""

    def __init__(self, state: StreamWriteState, overwrite: bool, table: Table | None = None) -> None:
        self.state = state
        self.overwrite = overwrite
        self._table: Table | None = table

    def __getstate__(self) -> dict[str, Any]:
        return {"state": self.state, "overwrite": self.overwrite, "_table": None}

    @staticmethod
    def plan(
        options: SourceOptions,
        raw_options: dict[str, str],
        catalog: Catalog,
        session_settings: Settings | None,
        schema: StructType,
        overwrite: bool,
    ) -> AcidTablesStreamWriter:
        """Check the stream against its table before anything is written, and begin the micro-batch's
        transaction."""
        assert options.checkpoint_location is not None  # parse_options requires it of a stream's sink
        table = catalog.table(options.table)
        meta = table.metadata  # read once: the transaction begins from this head without asking etcd again
        check_checkpoint_outside(table, options.checkpoint_location, meta)
        mode = "complete" if overwrite else "append"
        check_schema(
            meta,
            schema,
            call=f"writeStream.format('acidtables').outputMode({mode!r}).start({table.name!r})",
            hint="alter_table(), or write with SparkTable and merge_schema=True",
        )
        tx = table.begin("insert_overwrite" if overwrite else "insert_into")
        state = StreamWriteState(
            options=raw_options,
            session_settings=session_settings,
            table=table.name,
            metadata=tx.metadata.to_json(),
            query_id=query_id(options.checkpoint_location),
            transaction=StreamTransaction.of(tx),
        )
        return AcidTablesStreamWriter(state, overwrite, table)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        meta = TableMetadata.from_json(self.state.metadata)
        files = stage_batches(meta, self.state.transaction.txn_id, list(iterator), overwrite=self.overwrite)
        return StagedBatch([f.to_json() for f in files], asdict(self.state.transaction))

    def _table_for_commit(self) -> Table:
        """The table as planning found it when it was planned in this worker, else the table from the
        worker's kept catalog for these options."""
        if self._table is None:
            options = parse_options(self.state.options, "stream_write")
            catalog = kept_catalog(options, self.state.options, self.state.session_settings)
            self._table = catalog.table(self.state.table)
        return self._table

    def _done(self) -> None:
        """Let go of the table (its catalog, the worker's kept one, stays open for the next micro-batch)."""
        self._table = None

    @user_facing
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        try:
            table = self._table_for_commit()
            self.commit_batch(table, messages, batchId)
        finally:
            self._done()

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        try:
            table = self._table_for_commit()
            self.abort_batch(table, messages)
        finally:
            self._done()

    def commit_batch(self, table: Table, messages: list[WriterCommitMessage | None], batch_id: int) -> None:
        """Commit micro-batch `batch_id` once: resume the transaction its tasks staged files for (or, when
        it ran no task, this writer's own), keyed (query id, batch id)."""
        staged = [m for m in messages if isinstance(m, StagedBatch)]
        files = [DataFile.from_json(f) for m in staged for f in m.files]
        if not files and not self.overwrite:
            logger.info("%s: micro-batch %d of query %s has no rows", self.state.table, batch_id, self.state.query_id)
            return
        carried = StreamTransaction(**staged[0].transaction) if staged else self.state.transaction
        tx = carried.resume(table)
        tx.set_app_transaction(self.state.query_id, batch_id)
        if self.overwrite:
            replace_all(tx)
        tx.add_files(files)
        info = tx.commit()
        if info.skipped:
            logger.warning(
                "%s: micro-batch %d of query %s was committed before, at version %d (a replay after a restart); "
                "this run's files were removed",
                self.state.table,
                batch_id,
                self.state.query_id,
                info.version,
            )

    def abort_batch(self, table: Table, messages: list[WriterCommitMessage | None]) -> None:
        """Remove what the batch's tasks staged, unless its commit landed after all (Spark aborts when
        commit raised, and a commit whose answer was lost may have landed: its files are the table's)."""
        for transaction in {StreamTransaction(**m.transaction) for m in messages if isinstance(m, StagedBatch)}:
            try:
                resumed = transaction.resume(table)
            except TableNotFoundError as exc:  # its table is gone: cleanup of the location removes the files
                logger.warning("%s: not aborting txn %s: %s", self.state.table, transaction.txn_id, exc)
                continue
            resumed.abort()  # a resumed transaction that landed keeps its files


__all__ = [
    "AcidTablesStreamWriter",
    "StagedBatch",
    "StreamTransaction",
    "query_id",
    "stage_batches",
]
