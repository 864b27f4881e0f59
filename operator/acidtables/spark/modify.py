"""UPDATE and DELETE, in the three shapes the table settings call for (design §4):

* copy-on-write (no primary key, no deletion vectors): files holding a matched row are rewritten whole;
* deletion vectors (row_level_concurrency on): matched rows are hidden in place and updated rows are
  appended, so two jobs touching different rows of one file both commit (seed 004, row-level);
* merge-on-read (primary-key tables): keyed upserts and tombstones go to a delta file and nothing is
  removed, which is why MaxCompute lets a compaction and an UPDATE both succeed (D-07).

Every shape records what it read: the parsed condition and the files it scanned (conflict-rules §17).
Spark's filter, not core's reading of the condition, picks the rows each shape changes, so a condition
core reads only in part widens the files read (with a warning) and never the rows changed.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F

from acidtables.core import (
    Dialect,
    Expr,
    FileKind,
    InvalidArgumentError,
    Policy,
    Table,
    TableMetadata,
    Transaction,
    read_predicate,
)

from .files import FILE, ROW, files_by_key, with_deletion_vectors, write_staged
from .prepared import Prepared, preparing
from .scan import read_files, read_snapshot_rows
from .schema import DELETE, OP_COLUMN, SEQ_COLUMN, UPSERT, spark_type, table_struct

logger = logging.getLogger(__name__)


def holds(condition: str | None) -> Column:
    """SQL WHERE semantics: a row matches only where the condition is TRUE (NULL does not match)."""
    if condition is None:
        return F.lit(True)
    return F.coalesce(F.expr(condition), F.lit(False))


def session_dialect(spark: SparkSession) -> Dialect:
    """How `spark` reads quoted literals, so core prunes with the values Spark's filter compares: under
    either setting a literal core would read otherwise is left to Spark (read as the whole table)."""

    def enabled(key: str) -> bool:
        return str(spark.conf.get(key, "false")).strip().lower() == "true"

    return Dialect(
        escaped_string_literals=enabled("spark.sql.parser.escapedStringLiterals"),
        double_quoted_identifiers=enabled("spark.sql.ansi.enabled")
        and enabled("spark.sql.ansi.doubleQuotedIdentifiers"),
    )


def core_condition(spark: SparkSession, meta: TableMetadata, condition: str | None, what: str) -> Expr | None:
    """`condition` as core prunes with it (None: the whole table). Spark filters the rows after, so a
    part core cannot read only widens the files read; a warning names it, since it costs reading more
    files and conflicting with more commits. `what` says who reads (the table, txn and read version)."""
    if condition is None:
        return None
    reading = read_predicate(condition, meta.column_types, dialect=session_dialect(spark))
    if not reading.complete:
        logger.warning(
            "%s: core cannot read %s of %r, so it reads %s; Spark still picks the rows",
            what,
            reading.describe_left_out(),
            condition,
            "every file of the table" if reading.expr is None else "the files the rest selects",
        )
    return reading.expr


def check_assignments(meta: TableMetadata, assignments: Mapping[str, str], method: str) -> dict[str, str]:
    if not isinstance(assignments, Mapping) or not assignments:
        raise InvalidArgumentError(
            f"{method}(): give the new values as {{column: SQL expression}}, e.g. {{'amount': '0'}}"
        )
    by_lower = {c.name.lower(): c.name for c in meta.columns}
    out = {}
    for column, expression in assignments.items():
        name = by_lower.get(str(column).lower())
        if name is None:
            raise InvalidArgumentError(f"{method}(): {meta.name} has no column {column!r}")
        refuse_key_assignment(meta, name, method)
        if not isinstance(expression, str):
            raise InvalidArgumentError(f"{method}(): the value for {name} must be a SQL expression string")
        out[name] = expression
    return out


def refuse_key_assignment(meta: TableMetadata, column: str, method: str) -> None:
    """A primary-key column never changes (a row is its key); a partition column changes only on a
    `delta` table, where the row moves to its new partition as Delta Lake moves it (a delete in one
    partition and an insert in another, which is how its commit records it and the rules judge it).
    MaxCompute does not update partition columns, and neither do its policies here."""
    if column in meta.primary_key:
        raise InvalidArgumentError(f"{method}(): {column} is a primary key column and cannot be assigned")
    if column in meta.partition_by and meta.conflict_policy is not Policy.DELTA:
        raise InvalidArgumentError(
            f"{method}(): {column} is a partition column, which a {meta.conflict_policy.value} table does not update "
            "(MaxCompute's rule); delete the rows and insert them with the new value"
        )


def assigned(meta: TableMetadata, assignments: Mapping[str, str], when: Column | None = None) -> list[Column]:
    """The table's columns with `assignments` applied (only where `when` holds, if given)."""
    out = []
    for c in meta.columns:
        if c.name in assignments:
            value = F.expr(assignments[c.name]).cast(spark_type(c.type))
            out.append((F.when(when, value).otherwise(F.col(c.name)) if when is not None else value).alias(c.name))
        else:
            out.append(F.col(c.name))
    return out


def _copy_on_write(
    spark: SparkSession,
    tx: Transaction,
    condition: str | None,
    expr: Expr | None,
    assignments: Mapping[str, str] | None,
) -> dict[str, int]:
    meta, storage = tx.metadata, tx.storage
    candidates = tx.scan(expr)
    rows = read_files(spark, meta, storage, candidates, version=tx.read_version, keep_helpers=True)
    match = holds(condition)
    matched = {r[FILE]: int(r["count"]) for r in rows.filter(match).groupBy(FILE).count().collect()}
    touched = set(matched)
    if not touched:
        return {"rows_matched": 0, "files_rewritten": 0}
    victims = [f for key, f in files_by_key(storage, candidates).items() if key in touched]
    kept = rows.filter(F.col(FILE).isin(sorted(touched)))
    if assignments is None:
        kept = kept.filter(~match).select(*[c.name for c in meta.columns])
    else:
        kept = kept.select(*assigned(meta, assignments, when=match))
    tx.remove_files(victims)
    tx.add_files(write_staged(kept, tx))
    return {"rows_matched": sum(matched.values()), "files_rewritten": len(victims)}


def _deletion_vectors(
    spark: SparkSession,
    tx: Transaction,
    condition: str | None,
    expr: Expr | None,
    assignments: Mapping[str, str] | None,
) -> dict[str, int]:
    meta, storage = tx.metadata, tx.storage
    candidates = tx.scan(expr)
    rows = read_files(spark, meta, storage, candidates, version=tx.read_version, keep_helpers=True)
    matched = rows.filter(holds(condition)).cache()
    try:
        positions: dict[str, set[int]] = defaultdict(set)
        for r in matched.select(FILE, ROW).collect():
            positions[r[FILE]].add(int(r[ROW]))
        if not positions:
            return {"rows_matched": 0}
        victims = [f for key, f in files_by_key(storage, candidates).items() if key in positions]
        tx.remove_files(victims)
        tx.add_files(with_deletion_vectors(storage, victims, positions))
        if assignments is not None:
            tx.add_files(write_staged(matched.select(*assigned(meta, assignments)), tx))
        return {"rows_matched": sum(len(p) for p in positions.values())}
    finally:
        matched.unpersist()


def _merge_on_read(
    spark: SparkSession,
    tx: Transaction,
    condition: str | None,
    expr: Expr | None,
    assignments: Mapping[str, str] | None,
) -> dict[str, int]:
    """Keyed delta records. The newest version of a row may sit in a file whose statistics do not match
    the condition, so files are pruned by partition and key only before merging (Snapshot.prune)."""
    meta, storage = tx.metadata, tx.storage
    files = tx.snapshot.prune(expr)
    tx.record_read(predicate=expr, files=files, whole_table=expr is None)
    live = read_snapshot_rows(spark, meta, storage, files, version=tx.read_version).filter(holds(condition))
    if assignments is None:
        keys = set(meta.primary_key) | set(meta.partition_by)
        out = live.select(
            *[
                F.col(c.name) if c.name in keys else F.lit(None).cast(spark_type(c.type)).alias(c.name)
                for c in meta.columns
            ]
        ).withColumn(OP_COLUMN, F.lit(DELETE))
    else:
        out = live.select(*assigned(meta, assignments)).withColumn(OP_COLUMN, F.lit(UPSERT))
    out = out.withColumn(SEQ_COLUMN, F.lit(None).cast("long"))
    files_written = write_staged(out, tx, kind=FileKind.CHANGES)
    tx.add_files(files_written)
    return {"rows_matched": sum(f.rows for f in files_written)}


def change_rows(
    spark: SparkSession, tx: Transaction, condition: str | None, assignments: Mapping[str, str] | None
) -> dict[str, int]:
    """Update (or, with no `assignments`, delete) the rows `condition` selects inside `tx`, in the shape
    the table's settings call for; what it matched."""
    who = f"{tx.table_name}: txn {tx.txn_id} (read version {tx.read_version}), {tx.operation.display}"
    expr = core_condition(spark, tx.metadata, condition, who)
    if tx.metadata.primary_key:
        return _merge_on_read(spark, tx, condition, expr, assignments)
    if tx.metadata.row_level_concurrency:
        return _deletion_vectors(spark, tx, condition, expr, assignments)
    return _copy_on_write(spark, tx, condition, expr, assignments)


def modify(
    spark: SparkSession,
    table: Table,
    operation: str,
    condition: str | None,
    assignments: Mapping[str, str] | None = None,
) -> Prepared:
    if condition is not None and not isinstance(condition, str):
        raise InvalidArgumentError(f"{operation}(): the condition must be a SQL string like \"dt < '2026-01-01'\"")
    tx = table.begin(operation)
    with preparing(tx):
        meta = tx.metadata
        if assignments is not None:
            assignments = check_assignments(meta, assignments, operation)
            for column, expression in assignments.items():
                validate_value(spark, meta, column, expression, operation)
        if condition is not None:
            validate_condition(spark, meta, condition, operation)
        summary = change_rows(spark, tx, condition, assignments)
    counted = "numUpdatedRows" if assignments is not None else "numDeletedRows"
    return Prepared(tx, summary, {counted: int(summary["rows_matched"])})


def validate_condition(spark: SparkSession, meta: TableMetadata, condition: str, method: str) -> None:
    """Resolve the condition against the table's columns now, so a typo fails before any work."""
    try:
        spark.createDataFrame([], table_struct(meta)).filter(F.expr(condition)).schema  # noqa: B018
    except Exception as exc:  # AnalysisException / ParseException: report them as our own error
        first = str(exc).strip().splitlines()[0]
        raise InvalidArgumentError(
            f"{method}(): condition {condition!r} is not valid for {meta.name}: {first}"
        ) from None


def validate_value(spark: SparkSession, meta: TableMetadata, column: str, expression: str, method: str) -> None:
    """Resolve an assigned expression now, in the projection the update runs (cast to its column's type,
    beside the other columns, so an aggregate fails too): a typo fails even when no row matches, and
    never after the job has started."""
    try:
        spark.createDataFrame([], table_struct(meta)).select(*assigned(meta, {column: expression})).schema  # noqa: B018
    except Exception as exc:  # AnalysisException / ParseException: report them as our own error
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InvalidArgumentError(
            f"{method}(): value {expression!r} for {column} is not valid for {meta.name}: {first}"
        ) from None
