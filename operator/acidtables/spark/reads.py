"""Reads: the current snapshot, time travel by ID version or time, incremental changes, history.

A read pins one snapshot for its whole plan, so a reader never mixes versions however many commits land
while Spark runs. Partition predicates and file statistics prune files before Spark opens them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, LongType, MapType, StringType, StructField, StructType, TimestampType

from acidtables import __version__ as acidtables_version
from acidtables.core import (
    HistoryEntry,
    InvalidArgumentError,
    Operation,
    Snapshot,
    Storage,
    Table,
    TableMetadata,
    TimeLike,
)

from .change_feed import CommitChange, change_rows, commit_change
from .modify import core_condition, validate_condition
from .scan import read_snapshot_rows
from .schema import change_feed_struct, table_struct


def read_snapshot(
    spark: SparkSession, table: Table, snapshot: Snapshot, where: str | None = None, *, latest: bool = False
) -> DataFrame:
    """`latest`: the snapshot was read as the table's current version (not by time travel), so a write
    on a later version whose source this is has the commits in between judged (scan.SNAPSHOT_OPTION)."""
    meta = snapshot.metadata
    if where is not None:
        if not isinstance(where, str):
            raise InvalidArgumentError(f"read(): where must be a SQL string, found {type(where).__name__}")
        validate_condition(spark, meta, where, "read")
    expr = core_condition(spark, meta, where, f"{meta.name}: read() of version {snapshot.version}") if where else None
    df = read_snapshot_rows(spark, meta, table.storage, snapshot.prune(expr), version=snapshot.version, latest=latest)
    return df.filter(F.expr(where)) if where else df


def read(
    spark: SparkSession,
    table: Table,
    *,
    version: int | None = None,
    timestamp: TimeLike | None = None,
    where: str | None = None,
) -> DataFrame:
    latest = version is None and timestamp is None
    return read_snapshot(spark, table, table.snapshot(version=version, timestamp=timestamp), where, latest=latest)


def changes(
    spark: SparkSession,
    table: Table,
    *,
    start_version: int | None = None,
    end_version: int | None = None,
    start_time: TimeLike | None = None,
    end_time: TimeLike | None = None,
) -> DataFrame:
    """Row-level changes of the data commits in a range, in Delta's change feed terms (`_change_type`
    insert / update_preimage / update_postimage / delete, `_commit_version`, `_commit_timestamp`), as the
    stream's readChangeFeed delivers them (change_feed); compaction and clustering are not changes
    (D-18). The log is read here; each commit's changes are worked out in a Spark task (mapInArrow)."""
    found = table.changes(start_version, end_version, start_time=start_time, end_time=end_time, single_schema=True)
    meta = table.snapshot().metadata
    struct = change_feed_struct(table_struct(meta))
    described = [
        json.dumps(commit_change(table, c.version, c.time_us, c.operation, c.added, c.removed, c.metrics).to_json())
        for c in found
        if c.time_us is not None
    ]
    if not described:
        return spark.createDataFrame([], struct)
    metadata = meta.to_json()

    def compute(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        on_executor = TableMetadata.from_json(metadata)
        storage = Storage(on_executor.location)
        for batch in batches:
            for text in batch.column(0).to_pylist():
                yield from change_rows(on_executor, storage, CommitChange.from_json(json.loads(text))).to_batches()

    commits = spark.createDataFrame([(d,) for d in described], "change STRING")
    tasks = min(len(described), spark.sparkContext.defaultParallelism)
    return commits.repartition(tasks).mapInArrow(compute, struct)


#: Delta Lake's operation names, which its DESCRIBE HISTORY shows (acidtables' own are in `acid_operation`)
DELTA_OPERATIONS = {
    Operation.CREATE_TABLE: "CREATE TABLE",
    Operation.INSERT_INTO: "WRITE",
    Operation.INSERT_OVERWRITE: "WRITE",
    Operation.TRUNCATE: "TRUNCATE",
    Operation.UPDATE: "UPDATE",
    Operation.DELETE: "DELETE",
    Operation.MERGE: "MERGE",
    Operation.MINOR_COMPACT: "OPTIMIZE",
    Operation.MAJOR_COMPACT: "OPTIMIZE",
    Operation.CLUSTER: "OPTIMIZE",
    Operation.ALTER: "ALTER TABLE",
    Operation.UPGRADE_PROTOCOL: "UPGRADE PROTOCOL",
    Operation.REPAIR: "FSCK",
    Operation.RESTORE: "RESTORE",
}

HISTORY_SCHEMA = StructType(
    [
        # Delta Lake's DESCRIBE HISTORY columns, in its names and types
        StructField("version", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("userId", StringType()),
        StructField("userName", StringType()),
        StructField("operation", StringType()),
        StructField("operationParameters", MapType(StringType(), StringType())),
        StructField("clusterId", StringType()),
        StructField("readVersion", LongType()),
        StructField("isolationLevel", StringType()),
        StructField("isBlindAppend", BooleanType()),
        StructField("operationMetrics", MapType(StringType(), StringType())),
        StructField("userMetadata", StringType()),
        StructField("engineInfo", StringType()),
        # acidtables' own
        StructField("acid_operation", StringType()),
        StructField("time_version", TimestampType()),
        StructField("txn_id", StringType()),
        StructField("retries", LongType()),
        StructField("files_added", LongType()),
        StructField("files_removed", LongType()),
        StructField("rows_added", LongType()),
        StructField("rows_removed", LongType()),
    ]
)


def _parameters(entry: HistoryEntry, partition_by: Sequence[str]) -> dict[str, str]:
    """Delta's operationParameters, as far as the commit record says them."""
    op = entry.operation
    if op in (Operation.INSERT_INTO, Operation.INSERT_OVERWRITE):
        mode = "Append" if op is Operation.INSERT_INTO else "Overwrite"
        out = {"mode": mode, "partitionBy": json.dumps(list(partition_by))}
    else:
        out = {}
    if entry.predicates:
        out["predicate"] = json.dumps(list(entry.predicates))
    return out


def _metrics(entry: HistoryEntry) -> dict[str, str]:
    """Delta's operationMetrics: what the job counted (numUpdatedRows, numTargetRowsInserted, ...), and
    what the commit record holds exactly: files added and removed, rows written (numOutputRows)."""
    out = {
        **{name: str(value) for name, value in entry.metrics.items()},
        "numAddedFiles": str(entry.files_added),
        "numRemovedFiles": str(entry.files_removed),
        "numOutputRows": str(entry.rows_added),
    }
    if entry.operation in (Operation.INSERT_INTO, Operation.INSERT_OVERWRITE):
        out["numFiles"] = str(entry.files_added)
    return out


def _isolation(entry: HistoryEntry) -> str | None:
    # Delta records compactions at SnapshotIsolation: they change no data, so nothing they read can be stale
    if entry.operation.rewrites:
        return "SnapshotIsolation"
    return entry.isolation_level


def history(spark: SparkSession, table: Table, limit: int | None = None) -> DataFrame:
    """`DESCRIBE HISTORY`: Delta Lake's columns in its names and types (its operation names, such as
    WRITE and OPTIMIZE; operationParameters and operationMetrics as far as the log records them), then
    acidtables' own (`acid_operation` spells the operation as acidtables does: INSERT INTO, MINOR
    COMPACT)."""
    engine = f"acidtables/{acidtables_version} Apache-Spark/{spark.version}"
    partition_by = table.metadata.partition_by
    rows = [
        (
            h.version,
            h.committed_at,
            None,
            None,
            DELTA_OPERATIONS[h.operation],
            _parameters(h, partition_by),
            None,
            h.read_version,
            _isolation(h),
            h.is_blind_append,
            _metrics(h),
            json.dumps(dict(h.user_metadata), sort_keys=True) if h.user_metadata else None,
            engine,
            h.operation.display,
            h.time_version,
            h.txn_id,
            h.retries,
            h.files_added,
            h.files_removed,
            h.rows_added,
            h.rows_removed,
        )
        for h in table.history(limit)
    ]
    return spark.createDataFrame(rows, HISTORY_SCHEMA)


__all__ = ["changes", "history", "read", "read_snapshot"]
