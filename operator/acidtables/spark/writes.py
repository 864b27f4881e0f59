"""INSERT INTO, INSERT OVERWRITE (whole table, static or dynamic partitions) and TRUNCATE.

Primary-key tables are upserts: an INSERT INTO writes a delta file whose rows replace older rows with
the same key when read (merge-on-read); an overwrite writes base files. Each call returns a Prepared
operation; SparkTable commits it unless asked not to.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from acidtables.core import (
    HIVE_NULL,
    InvalidArgumentError,
    Literal,
    Table,
    TableMetadata,
    Transaction,
    in_partitions,
)

from .files import file_kind, write_staged
from .modify import change_rows, holds, validate_condition
from .prepared import Prepared, preparing
from .schema import (
    OP_COLUMN,
    SEQ_COLUMN,
    UPSERT,
    conform,
    data_columns,
    log_partition_value,
    new_columns,
    spark_type,
)
from .source_reads import record_source_reads


def outside_partition(meta: TableMetadata, partition: Mapping[str, Literal]) -> Column:
    """Rows of a DataFrame that do not belong to `partition`, NULLs included (a NULL is outside a
    partition with a value, and inside the NULL partition)."""
    types = {c.name: spark_type(c.type) for c in meta.columns}
    inside: Column = F.lit(True)
    for column, value in partition.items():
        inside = inside & F.col(f"`{column}`").eqNullSafe(F.lit(value).cast(types[column]))
    return ~inside


def prepare_rows(df: DataFrame, tx: Transaction, *, method: str, merge_schema: bool = False) -> DataFrame:
    """Conform `df` to the table (evolving the schema in the same commit if asked) and add the
    merge-on-read columns of primary-key tables."""
    meta = tx.metadata
    if merge_schema:
        added = new_columns(df, meta)
        if added:
            tx.update_metadata(add_columns=added, method=method)
            meta = tx.target_metadata
    rows = conform(df, meta, method=method)
    if meta.primary_key:
        # one row per key within a write; which duplicate survives is unspecified
        rows = rows.dropDuplicates([*meta.partition_by, *meta.primary_key])
        rows = rows.withColumn(OP_COLUMN, F.lit(UPSERT)).withColumn(SEQ_COLUMN, F.lit(None).cast("long"))
    return rows


def replace_all(tx: Transaction) -> None:
    """The removal half of a whole-table overwrite or truncate: every file goes, the whole table was read
    and is the scope (SparkTable's and the data source's overwrites both end here)."""
    tx.remove_files(tx.scan(None))
    tx.set_scope(None)


def idempotent(tx: Transaction, app_id: str | None, version: int | None, method: str) -> Prepared | None:
    """Delta's txnAppId/txnVersion: key the write (app id, version), applied at most once (D-27). When the
    table has it already, the write is skipped before anything is written: the Prepared returned
    commits as skipped (CommitInfo.skipped, with the version that holds it)."""
    if app_id is None and version is None:
        return None
    if not isinstance(app_id, str) or not app_id.strip():
        raise InvalidArgumentError(f"{method}(): txn_app_id must name the application (a non-empty string)")
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise InvalidArgumentError(f"{method}(): txn_version must be a whole number 0 or more, found {version!r}")
    tx.set_app_transaction(app_id, version)
    applied = tx.applied_at(app_id, version)
    if applied is None:
        return None
    return Prepared(tx, {"files_written": 0, "already_applied_at": applied})


def insert_into(
    table: Table,
    df: DataFrame,
    *,
    merge_schema: bool = False,
    txn_app_id: str | None = None,
    txn_version: int | None = None,
) -> Prepared:
    tx = table.begin("insert_into")
    with preparing(tx):
        repeat = idempotent(tx, txn_app_id, txn_version, "insert_into")
        if repeat is not None:
            return repeat
        record_source_reads(df, tx)  # an insert that read its own table is not a blind append (INS-R)
        rows = prepare_rows(df, tx, method="insert_into", merge_schema=merge_schema)
        files = write_staged(rows, tx, kind=file_kind(tx.metadata, overwrite=False))
        tx.add_files(files)
    return Prepared(tx, {"files_written": len(files), "rows_written": sum(f.rows for f in files)})


def _check_partition(table_partition_by: tuple[str, ...], partition: Mapping[str, Any], method: str) -> None:
    if not isinstance(partition, Mapping) or {k.lower() for k in partition} != {p.lower() for p in table_partition_by}:
        raise InvalidArgumentError(
            f"{method}(): partition={dict(partition) if isinstance(partition, Mapping) else partition!r} must give "
            f"a value for each partition column {list(table_partition_by)}"
        )


def _canonical_partition(meta: TableMetadata, partition: Mapping[str, Any], method: str) -> dict[str, Literal]:
    """`partition` keyed by the table's own column names, each value as the log keeps it."""
    out = {
        c: log_partition_value(meta, c, next(v for k, v in partition.items() if k.lower() == c.lower()))
        for c in meta.partition_by
    }
    for column, value in out.items():
        if value in ("", HIVE_NULL):
            raise InvalidArgumentError(
                f"{method}(): partition value {value!r} of {column}: Spark and Hive store it and read it back as NULL, "
                "so acidtables refuses it; use None for the NULL partition or another value"
            )
    return out


def insert_overwrite(
    table: Table,
    df: DataFrame,
    *,
    partition: Mapping[str, Any] | None = None,
    dynamic: bool = False,
    replace_where: str | None = None,
    merge_schema: bool = False,
    txn_app_id: str | None = None,
    txn_version: int | None = None,
) -> Prepared:
    """Replace the whole table, one static partition, (dynamic) the partitions present in `df`, or the
    rows `replace_where` selects."""
    method = "insert_overwrite"
    if sum((partition is not None, bool(dynamic), replace_where is not None)) > 1:
        raise InvalidArgumentError(f"{method}(): give one of partition=, dynamic=True and replace_where=")
    if replace_where is not None:
        return _replace_where(
            table, df, replace_where, merge_schema=merge_schema, txn_app_id=txn_app_id, txn_version=txn_version
        )
    tx = table.begin("insert_overwrite")
    with preparing(tx):
        repeat = idempotent(tx, txn_app_id, txn_version, method)
        if repeat is not None:
            return repeat
        record_source_reads(df, tx)
        meta = tx.metadata
        if (partition is not None or dynamic) and not meta.partition_by:
            raise InvalidArgumentError(f"{method}(): {meta.name} is not partitioned")
        source = df
        if partition is not None:
            _check_partition(meta.partition_by, partition, method)
            canonical = _canonical_partition(meta, partition, method)
            types = {c.name: spark_type(c.type) for c in meta.columns}
            for column, value in canonical.items():
                if column.lower() not in {c.lower() for c in df.columns}:
                    source = source.withColumn(column, F.lit(value).cast(types[column]))
            stray = source.filter(outside_partition(meta, canonical)).limit(1).count()
            if stray:
                raise InvalidArgumentError(
                    f"{method}(): the DataFrame has rows outside partition {canonical}; filter them or use dynamic=True"
                )
            targets: list[Mapping[str, Literal]] | None = [canonical]
        else:
            targets = None
        rows = prepare_rows(source, tx, method=method, merge_schema=merge_schema)
        if dynamic:
            found = rows.select(*meta.partition_by).distinct().collect()
            targets = [{c: log_partition_value(meta, c, r[c]) for c in meta.partition_by} for r in found]
        if targets is None:
            replace_all(tx)
        else:
            tx.remove_files(tx.scan(in_partitions(targets)))
            tx.set_scope(targets)
        files = write_staged(rows, tx, kind=file_kind(tx.metadata, overwrite=True))
        tx.add_files(files)
    return Prepared(tx, {"files_written": len(files), "partitions": targets})


def _replace_where(
    table: Table,
    df: DataFrame,
    predicate: str,
    *,
    merge_schema: bool,
    txn_app_id: str | None,
    txn_version: int | None,
) -> Prepared:
    """Delta's replaceWhere: delete the rows `predicate` selects and insert `df`, whose every row must
    satisfy it (DELTA_REPLACE_WHERE_MISMATCH otherwise, and nothing is committed). The conflict rules
    judge what the commit holds: the predicate's read and removals, and an insert."""
    method = "insert_overwrite"
    if not isinstance(predicate, str) or not predicate.strip():
        raise InvalidArgumentError(f"{method}(): replace_where must be a SQL condition such as \"dt >= '2026-11-01'\"")
    tx = table.begin("insert_overwrite")
    with preparing(tx):
        repeat = idempotent(tx, txn_app_id, txn_version, method)
        if repeat is not None:
            return repeat
        record_source_reads(df, tx)
        meta = tx.metadata
        if meta.primary_key:
            raise InvalidArgumentError(
                f"{method}(): replace_where is for tables without a primary key; on {meta.name} (merge-on-read) "
                "write the rows with insert_into, which replaces each key, or overwrite whole partitions"
            )
        spark = df.sparkSession
        validate_condition(spark, meta, predicate, method)
        rows = prepare_rows(df, tx, method=method, merge_schema=merge_schema)
        if rows.filter(~holds(predicate)).limit(1).count():
            raise InvalidArgumentError(
                f"{method}(): a row of the DataFrame does not satisfy replace_where {predicate!r} (Delta's "
                "DELTA_REPLACE_WHERE_MISMATCH); write only rows it selects. Nothing was committed"
            )
        summary = change_rows(spark, tx, predicate, None)
        files = write_staged(rows, tx, kind=file_kind(tx.metadata, overwrite=True))
        tx.add_files(files)
    return Prepared(tx, {**summary, "files_written": len(files), "replace_where": predicate})


def truncate(table: Table, *, partition: Mapping[str, Any] | None = None) -> Prepared:
    tx = table.begin("truncate")
    with preparing(tx):
        meta = tx.metadata
        if partition is None:
            replace_all(tx)
        else:
            if not meta.partition_by:
                raise InvalidArgumentError(f"truncate(): {meta.name} is not partitioned")
            _check_partition(meta.partition_by, partition, "truncate")
            canonical = _canonical_partition(meta, partition, "truncate")
            tx.remove_files(tx.scan(in_partitions([canonical])))
            tx.set_scope([canonical])
    return Prepared(tx)


__all__ = ["data_columns", "insert_into", "insert_overwrite", "outside_partition", "replace_all", "truncate"]
