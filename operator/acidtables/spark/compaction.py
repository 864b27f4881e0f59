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

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from acidtables.core import (
    CommitInfo,
    CompactionPlan,
    ConcurrentModificationException,
    DataFile,
    FileKind,
    InvalidArgumentError,
    Storage,
    Table,
    Transaction,
    files_in_scope,
    group_app_id,
    plan_compaction,
)

from .files import FILE, ROW, VERSION, file_key, write_staged
from .prepared import Prepared, preparing
from .scan import read_files, read_snapshot_rows
from .schema import OP_COLUMN, SEQ_COLUMN, UPSERT

logger = logging.getLogger(__name__)

_ORDER = "_acid_order"


def _ordered(df: DataFrame, storage: Storage, group: Sequence[DataFile]) -> DataFrame:
    """One output file holding the group's rows in input order (what ordered lineage promises)."""
    order = {file_key(storage, f): i for i, f in enumerate(group)}
    position = F.create_map(*[x for name, i in order.items() for x in (F.lit(name), F.lit(i))])
    return df.withColumn(_ORDER, position[F.col(FILE)]).repartition(1).sortWithinPartitions(_ORDER, ROW)


def _stage_group(
    spark: SparkSession, tx: Transaction, group: Sequence[DataFile], kind: str, target_file_bytes: int
) -> None:
    meta, storage = tx.metadata, tx.storage
    columns = [c.name for c in meta.columns]
    lineage = [f.path for f in group]
    if not meta.primary_key:
        rows = _ordered(read_files(spark, meta, storage, group, keep_helpers=True), storage, group).select(*columns)
        outputs = write_staged(rows, tx, lineage=lineage, ordered_lineage=True)
    elif kind == "minor":
        raw = read_files(spark, meta, storage, group, keep_helpers=True)
        raw = raw.withColumn(SEQ_COLUMN, F.coalesce(F.col(SEQ_COLUMN), F.col(VERSION)))
        rows = _ordered(raw, storage, group).select(*columns, OP_COLUMN, SEQ_COLUMN)
        outputs = write_staged(rows, tx, kind=FileKind.CHANGES, lineage=lineage, ordered_lineage=True)
    else:
        live = read_snapshot_rows(spark, meta, storage, group, keep_helpers=True)
        rows = live.select(
            *columns, F.lit(UPSERT).alias(OP_COLUMN), F.coalesce(F.col(SEQ_COLUMN), F.col(VERSION)).alias(SEQ_COLUMN)
        )
        count = max(1, math.ceil(sum(f.size_bytes for f in group) / target_file_bytes))
        outputs = write_staged(rows.repartition(count), tx, kind=FileKind.BASE, lineage=lineage)
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
        live = tx.snapshot.files_by_path
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
        files = files_in_scope(tx.snapshot, where, "cluster")
        if not files:
            return Prepared(tx, {"files": 0})
        columns = [c.name for c in meta.columns]
        count = max(1, math.ceil(sum(f.size_bytes for f in files) / (128 << 20)))
        if meta.primary_key:
            live = read_snapshot_rows(spark, meta, storage, files, keep_helpers=True)
            rows = live.select(
                *columns,
                F.lit(UPSERT).alias(OP_COLUMN),
                F.coalesce(F.col(SEQ_COLUMN), F.col(VERSION)).alias(SEQ_COLUMN),
            )
            kind = FileKind.BASE
        else:
            rows = read_files(spark, meta, storage, files).select(*columns)
            kind = FileKind.DATA
        rows = rows.repartitionByRange(count, *keys).sortWithinPartitions(*keys)
        outputs = write_staged(rows, tx, kind=kind, lineage=[f.path for f in files])
        tx.remove_files(files)
        tx.add_files(outputs)
    return Prepared(tx, {"files": len(files), "outputs": len(outputs)})
