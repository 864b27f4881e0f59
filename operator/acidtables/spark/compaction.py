"""MINOR / MAJOR COMPACT and CLUSTER: rewrite files without changing the data they hold.

Compaction works in small groups of files that commit one by one (partial progress): a busy table
cannot starve it, and a group that loses to a concurrent job is skipped while the others still land.
Outputs list their inputs (lineage), and a group of whole files written as one file keeps their rows in
order, so deletion vectors can follow rows onto it (conflict-rules D-06, D-25). None of these commits
gets a time version.

* Tables without a primary key: small files (and files with deletion vectors) are bin-packed up to the
  target size; MAJOR takes every file of the partition.
* Primary-key tables: MINOR merges small delta files, keeping every row version and tombstone with its
  sequence; MAJOR rewrites a partition into base files with only the newest live row per key (seed 000).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence

from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from acidtables.core import (
    CommitInfo,
    CompactionPlan,
    ConcurrentModificationException,
    DataFile,
    FileKind,
    InvalidArgumentError,
    RowsLostError,
    Storage,
    Table,
    Transaction,
    files_in_scope,
    group_app_id,
    plan_compaction,
)

from .files import FILE, ROW, VERSION, file_key, write_staged
from .prepared import Prepared, preparing
from .scan import newest_per_key, read_files, read_snapshot_rows
from .schema import DELETE, OP_COLUMN, SEQ_COLUMN, UPSERT

logger = logging.getLogger(__name__)

_ORDER = "_acid_order"


def _ordered(df: DataFrame, storage: Storage, group: Sequence[DataFile]) -> DataFrame:
    """One output file holding the group's rows in input order (what ordered lineage promises)."""
    order = {file_key(storage, f): i for i, f in enumerate(group)}
    position = F.create_map(*[x for name, i in order.items() for x in (F.lit(name), F.lit(i))])
    return df.withColumn(_ORDER, position[F.col(FILE)]).repartition(1).sortWithinPartitions(_ORDER, ROW)


class _Counted:
    """Rows counted as they flow into a rewrite's write (Spark's Observation: no second pass over the
    data), so a rewrite that would keep fewer rows than it must is refused before its commit.

    Where Spark reports no observation (adaptive execution drops the metrics of a plan whose result it
    proves empty), the rows are counted by a query of their own: slower, but only on that path."""

    def __init__(self, df: DataFrame, name: str) -> None:
        self._observation = Observation(name)
        self._metrics = [F.count(F.lit(1)).alias("rows"), self._tombstones(df).alias("tombstones")]
        self._plain = df
        self.df = df.observe(self._observation, *self._metrics)

    @staticmethod
    def _tombstones(df: DataFrame) -> Column:
        if OP_COLUMN not in df.columns:
            return F.lit(0)
        return F.sum(F.when(F.col(OP_COLUMN) == F.lit(DELETE), 1).otherwise(0))

    def rows(self, *, live: bool = False) -> int:
        try:
            seen = self._observation.get
        except Exception:  # Py4JJavaError: no metrics were reported
            found = self._plain.agg(*self._metrics).first()
            seen = found.asDict() if found is not None else {}
        return int(seen.get("rows") or 0) - (int(seen.get("tombstones") or 0) if live else 0)


def _refuse_lost_rows(tx: Transaction, group: Sequence[DataFile], read: int, kept: int, written: int) -> None:
    """The group's files hold `sum(live_rows)` rows; the rewrite read `read` of them, kept `kept` (all of
    them, or after merge-on-read the newest live row per key) and its outputs hold `written`."""
    held = sum(f.live_rows for f in group)
    if read != held or written != kept:
        raise RowsLostError(
            f"{tx.table_name}: a {tx.operation.display} of {len(group)} file(s) holding {held} rows read {read} and "
            f"would write {written} where {kept} must be kept; refused before its commit (nothing was committed). "
            "A file the reader cannot interpret: run `acidtables fsck` on the table"
        )


def _stage_group(
    spark: SparkSession, tx: Transaction, group: Sequence[DataFile], kind: str, target_file_bytes: int
) -> None:
    meta, storage = tx.metadata, tx.storage
    columns = [c.name for c in meta.columns]
    lineage = [f.path for f in group]
    read = _Counted(read_files(spark, meta, storage, group, version=tx.read_version, keep_helpers=True), "read")
    if not meta.primary_key:
        rows = _ordered(read.df, storage, group).select(*columns)
        outputs = write_staged(rows, tx, lineage=lineage, ordered_lineage=True)
        kept = read.rows()
    elif kind == "minor":
        raw = read.df.withColumn(SEQ_COLUMN, F.coalesce(F.col(SEQ_COLUMN), F.col(VERSION)))
        rows = _ordered(raw, storage, group).select(*columns, OP_COLUMN, SEQ_COLUMN)
        outputs = write_staged(rows, tx, kind=FileKind.CHANGES, lineage=lineage, ordered_lineage=True)
        kept = read.rows()
    else:
        newest = _Counted(newest_per_key(read.df, meta), "newest")
        rows = newest.df.filter(F.col(OP_COLUMN) != F.lit(DELETE)).select(
            *columns, F.lit(UPSERT).alias(OP_COLUMN), F.coalesce(F.col(SEQ_COLUMN), F.col(VERSION)).alias(SEQ_COLUMN)
        )
        count = max(1, math.ceil(sum(f.size_bytes for f in group) / target_file_bytes))
        outputs = write_staged(rows.repartition(count), tx, kind=FileKind.BASE, lineage=lineage)
        kept = newest.rows(live=True)
    _refuse_lost_rows(tx, group, read.rows(), kept, sum(f.rows for f in outputs))
    tx.remove_files(group)
    tx.add_files(outputs)


def staged_groups(
    spark: SparkSession,
    table: Table,
    kind: str,
    *,
    where: str | None = None,
    target_file_bytes: int = 128 << 20,
    job_id: str | None = None,
) -> Iterator[Prepared]:
    """The plan's groups, each staged in its own transaction, one at a time as the caller asks for the
    next: what `compact()` commits one by one (partial progress), and what a test holds open to let
    a concurrent job commit between a group's prepare and its commit.

    The arguments are checked and the plan is made now; a group whose files a concurrent job changed
    after that is not staged at all (the next run picks those files up again). Each yielded group is
    the caller's to commit (`commit_group`) or abort: one left open keeps its staged files until its
    process ends and cleanup removes them. With `job_id` each group commits under its own application
    id (core.group_app_id), so a rerun of the same job never commits a group twice.
    """
    plan = plan_compaction(table.snapshot(), kind, where=where, target_file_bytes=target_file_bytes)
    return _stage_each(spark, table, plan, job_id)


def _stage_each(spark: SparkSession, table: Table, plan: CompactionPlan, job_id: str | None) -> Iterator[Prepared]:
    operation = f"{plan.kind}_compact"
    for group in plan.groups:
        tx = table.begin(operation)
        live = tx.snapshot.find(f.path for f in group.files)
        if any(live.get(f.path) != f for f in group.files):
            tx.abort()
            continue
        with preparing(tx):
            if job_id is not None:
                tx.set_app_transaction(group_app_id(job_id, group), 1)
            _stage_group(spark, tx, group.files, plan.kind, plan.target_file_bytes)
        summary = {"files": len(group.files), "bytes": group.size_bytes, "partition": dict(group.partition)}
        yield Prepared(tx, summary)


def commit_group(table: Table, group: Prepared) -> CommitInfo | None:
    """Commit one staged group; None if it lost to a concurrent commit (its staged files are gone:
    the losing transaction removes them)."""
    try:
        return group.commit()
    except ConcurrentModificationException as exc:
        logger.info(
            "%s: a %s group of %d files lost to a concurrent commit and was skipped: %s",
            table.name,
            group.operation,
            group.summary["files"],
            exc,
        )
        return None


def compact(
    spark: SparkSession,
    table: Table,
    kind: str,
    *,
    where: str | None = None,
    target_file_bytes: int = 128 << 20,
    commit: bool = True,
    job_id: str | None = None,
) -> list[CommitInfo] | Prepared:
    """With `commit`, each group commits right after it is staged and a losing group is skipped;
    without, all groups are staged into one transaction that commits or fails as a whole (what the
    seeds' matrices describe as one compaction job)."""
    if commit:
        staged = staged_groups(spark, table, kind, where=where, target_file_bytes=target_file_bytes, job_id=job_id)
        return [info for group in staged if (info := commit_group(table, group)) is not None]
    plan = plan_compaction(table.snapshot(), kind, where=where, target_file_bytes=target_file_bytes)
    tx = table.begin(f"{kind}_compact")
    with preparing(tx):
        if job_id is not None:
            tx.set_app_transaction(f"compaction/{job_id}", 1)
        for group in plan.groups:
            _stage_group(spark, tx, group.files, kind, target_file_bytes)
    return Prepared(tx, {"groups": len(plan.groups)})


def cluster(spark: SparkSession, table: Table, by: Sequence[str], *, where: str | None = None) -> Prepared:
    """Reorder the rows by `by` (range-partitioned, sorted within files); the data does not change."""
    if isinstance(by, str) or not by:
        raise InvalidArgumentError("cluster(): by must be a non-empty list of column names, e.g. by=['id']")
    tx = table.begin("cluster")
    with preparing(tx):
        meta, storage = tx.metadata, tx.storage
        known = {c.name.lower(): c.name for c in meta.columns}
        missing = [c for c in by if c.lower() not in known]
        if missing:
            raise InvalidArgumentError(f"cluster(): {meta.name} has no column(s) {missing}")
        keys = [known[c.lower()] for c in by]
        partition_keys = [c for c in keys if c in meta.partition_by]
        if partition_keys:
            # Delta's DELTA_ZORDERING_ON_PARTITION_COLUMN: a file holds one value of a partition column,
            # so ordering by it would commit a version that changes nothing
            raise InvalidArgumentError(
                f"cluster(): {', '.join(partition_keys)} is a partition column of {meta.name}; every file holds "
                "one value of it already, so order by other columns (and name partitions with where=)"
            )
        files = files_in_scope(tx.snapshot, where, "cluster")
        if not files:
            return Prepared(tx, {"files": 0})
        columns = [c.name for c in meta.columns]
        count = max(1, math.ceil(sum(f.size_bytes for f in files) / (128 << 20)))
        if meta.primary_key:
            live = read_snapshot_rows(spark, meta, storage, files, version=tx.read_version, keep_helpers=True)
            rows = live.select(
                *columns,
                F.lit(UPSERT).alias(OP_COLUMN),
                F.coalesce(F.col(SEQ_COLUMN), F.col(VERSION)).alias(SEQ_COLUMN),
            )
            kind = FileKind.BASE
        else:
            rows = read_files(spark, meta, storage, files, version=tx.read_version).select(*columns)
            kind = FileKind.DATA
        rows = rows.repartitionByRange(count, *keys).sortWithinPartitions(*keys)
        outputs = write_staged(rows, tx, kind=kind, lineage=[f.path for f in files])
        tx.remove_files(files)
        tx.add_files(outputs)
    return Prepared(tx, {"files": len(files), "outputs": len(outputs)})
