"""Reads: the current snapshot, time travel by ID version or time, incremental changes, history.

A read pins one snapshot for its whole plan, so a reader never mixes versions however many commits land
while Spark runs. Partition predicates and file statistics prune files before Spark opens them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, LongType, MapType, StringType, StructField, StructType, TimestampType

from acidtables import __version__ as acidtables_version
from acidtables.core import (
    DataFile,
    HistoryEntry,
    InvalidArgumentError,
    Operation,
    Snapshot,
    Table,
    TimeLike,
)

from .files import FILE, ROW
from .modify import core_condition, validate_condition
from .scan import read_files, read_snapshot_rows
from .schema import CHANGE_TIME, CHANGE_TYPE, CHANGE_VERSION, DELETE, OP_COLUMN, change_feed_struct, table_struct


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


def _change_rows(
    spark: SparkSession,
    table: Table,
    snapshot_meta: Snapshot,
    version: int,
    time: datetime | None,
    added: Sequence[DataFile],
    removed: Sequence[DataFile],
) -> DataFrame | None:
    meta = snapshot_meta.metadata
    storage = table.storage
    columns = [c.name for c in meta.columns]
    frames = []
    re_added = {f.path: f for f in added}
    gone = {f.path: f for f in removed}
    # A deletion-vector update removes and re-adds the same file: only the newly hidden rows changed.
    for path in re_added.keys() & gone.keys():
        before, after = gone[path], re_added[path]
        newly_hidden = sorted(set(after.deletion_vector or ()) - set(before.deletion_vector or ()))
        if newly_hidden:
            rows = read_files(spark, meta, storage, [before], version=version, keep_helpers=True)
            hidden = spark.createDataFrame([(p,) for p in newly_hidden], f"{ROW} LONG")
            frames.append(rows.join(F.broadcast(hidden), ROW).select(*columns).withColumn(CHANGE_TYPE, F.lit("delete")))
    inserts = [f for p, f in re_added.items() if p not in gone]
    deletes = [f for p, f in gone.items() if p not in re_added]
    if inserts:
        rows = read_files(spark, meta, storage, inserts, version=version, keep_helpers=bool(meta.primary_key))
        if meta.primary_key:
            kind = F.when(F.col(OP_COLUMN) == F.lit(DELETE), F.lit("delete")).otherwise(F.lit("upsert"))
            frames.append(rows.select(*columns, kind.alias(CHANGE_TYPE)))
        else:
            frames.append(rows.withColumn(CHANGE_TYPE, F.lit("insert")))
    if deletes:
        deleted = read_files(spark, meta, storage, deletes, version=version)
        frames.append(deleted.withColumn(CHANGE_TYPE, F.lit("delete")))
    if not frames:
        return None
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out.withColumn(CHANGE_VERSION, F.lit(version).cast(LongType())).withColumn(
        CHANGE_TIME, F.lit(time).cast(TimestampType())
    )


def changes(
    spark: SparkSession,
    table: Table,
    *,
    start_version: int | None = None,
    end_version: int | None = None,
    start_time: TimeLike | None = None,
    end_time: TimeLike | None = None,
) -> DataFrame:
    """Row-level changes (`_change_type` insert/delete, or upsert/delete on primary-key tables) of the
    data commits in a range; compaction and clustering are not changes (D-18)."""
    found = table.changes(start_version, end_version, start_time=start_time, end_time=end_time, single_schema=True)
    snapshot = table.snapshot()
    frames = [
        f
        for c in found
        if (f := _change_rows(spark, table, snapshot, c.version, c.time_version, c.added, c.removed)) is not None
    ]
    if not frames:
        return spark.createDataFrame([], change_feed_struct(table_struct(snapshot.metadata)))
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out


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


__all__ = ["FILE", "changes", "history", "read", "read_snapshot"]
