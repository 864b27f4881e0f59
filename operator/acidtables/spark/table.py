"""SparkTable: the delta-spark-style API over one acidtables table.

Each method is prepare-then-commit through the transaction core; `commit=False` returns the Prepared
operation instead, so the caller picks the commit point (or aborts). Example::

    t = SparkTable(spark, Catalog.connect().table("sales.orders"))
    t.insert_into(df)
    t.update("amount < 0", {"amount": "0"})
    t.read(version=3).show()
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, overload

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from acidtables.core import CommitInfo, InvalidArgumentError, Snapshot, Table, TimeLike

from . import compaction, modify, reads, stream_batches, writes
from .datasource import register
from .merge import MergeBuilder
from .prepared import Prepared

Result = CommitInfo | Prepared


def _finish(prepared: Prepared, commit: bool) -> Result:
    return prepared.commit() if commit else prepared


class SparkTable:
    def __init__(self, spark: SparkSession, table: Table) -> None:
        if not isinstance(table, Table):
            raise InvalidArgumentError(
                f"SparkTable(): expected an acidtables Table (catalog.table(name)), found {type(table).__name__}"
            )
        self.spark = spark
        self.table = table
        register(spark)

    def __repr__(self) -> str:
        return f"SparkTable({self.table.name!r})"

    @property
    def name(self) -> str:
        return self.table.name

    # --- writes --------------------------------------------------------------------------------------

    def _check_df(self, df: Any, method: str) -> DataFrame:
        if not isinstance(df, DataFrame):
            raise InvalidArgumentError(f"{method}(): expected a Spark DataFrame, found {type(df).__name__}")
        return df

    # Every write commits unless called with commit=False, which returns the Prepared operation instead
    # (two-phase: prepare, then commit); the overloads let a type checker see which one a call returns.

    @overload
    def insert_into(
        self,
        df: DataFrame,
        *,
        merge_schema: bool = ...,
        txn_app_id: str | None = ...,
        txn_version: int | None = ...,
        commit: Literal[True] = ...,
    ) -> CommitInfo: ...
    @overload
    def insert_into(
        self,
        df: DataFrame,
        *,
        merge_schema: bool = ...,
        txn_app_id: str | None = ...,
        txn_version: int | None = ...,
        commit: Literal[False],
    ) -> Prepared: ...
    @overload
    def insert_into(
        self,
        df: DataFrame,
        *,
        merge_schema: bool = ...,
        txn_app_id: str | None = ...,
        txn_version: int | None = ...,
        commit: bool,
    ) -> Result: ...

    def insert_into(
        self,
        df: DataFrame,
        *,
        merge_schema: bool = False,
        txn_app_id: str | None = None,
        txn_version: int | None = None,
        commit: bool = True,
    ) -> Result:
        """Append `df` (upsert it, on a primary-key table). With `txn_app_id` and `txn_version` (Delta's
        txnAppId/txnVersion) the write is applied once: a repeat of a version the table already has
        writes nothing and returns a skipped CommitInfo naming the version that holds it."""
        df = self._check_df(df, "insert_into")
        prepared = writes.insert_into(
            self.table, df, merge_schema=merge_schema, txn_app_id=txn_app_id, txn_version=txn_version
        )
        return _finish(prepared, commit)

    @overload
    def insert_overwrite(
        self,
        df: DataFrame,
        *,
        partition: Mapping[str, Any] | None = ...,
        dynamic: bool = ...,
        replace_where: str | None = ...,
        merge_schema: bool = ...,
        txn_app_id: str | None = ...,
        txn_version: int | None = ...,
        commit: Literal[True] = ...,
    ) -> CommitInfo: ...
    @overload
    def insert_overwrite(
        self,
        df: DataFrame,
        *,
        partition: Mapping[str, Any] | None = ...,
        dynamic: bool = ...,
        replace_where: str | None = ...,
        merge_schema: bool = ...,
        txn_app_id: str | None = ...,
        txn_version: int | None = ...,
        commit: Literal[False],
    ) -> Prepared: ...
    @overload
    def insert_overwrite(
        self,
        df: DataFrame,
        *,
        partition: Mapping[str, Any] | None = ...,
        dynamic: bool = ...,
        replace_where: str | None = ...,
        merge_schema: bool = ...,
        txn_app_id: str | None = ...,
        txn_version: int | None = ...,
        commit: bool,
    ) -> Result: ...

    def insert_overwrite(
        self,
        df: DataFrame,
        *,
        partition: Mapping[str, Any] | None = None,
        dynamic: bool = False,
        replace_where: str | None = None,
        merge_schema: bool = False,
        txn_app_id: str | None = None,
        txn_version: int | None = None,
        commit: bool = True,
    ) -> Result:
        """Replace the whole table, one static `partition`, the partitions `df` has rows in (`dynamic`),
        or the rows `replace_where` selects (Delta's replaceWhere: every row of `df` must satisfy it).
        `txn_app_id`/`txn_version` make it idempotent, as for insert_into."""
        df = self._check_df(df, "insert_overwrite")
        prepared = writes.insert_overwrite(
            self.table,
            df,
            partition=partition,
            dynamic=dynamic,
            replace_where=replace_where,
            merge_schema=merge_schema,
            txn_app_id=txn_app_id,
            txn_version=txn_version,
        )
        return _finish(prepared, commit)

    @overload
    def truncate(self, *, partition: Mapping[str, Any] | None = ..., commit: Literal[True] = ...) -> CommitInfo: ...
    @overload
    def truncate(self, *, partition: Mapping[str, Any] | None = ..., commit: Literal[False]) -> Prepared: ...
    @overload
    def truncate(self, *, partition: Mapping[str, Any] | None = ..., commit: bool) -> Result: ...

    def truncate(self, *, partition: Mapping[str, Any] | None = None, commit: bool = True) -> Result:
        return _finish(writes.truncate(self.table, partition=partition), commit)

    @overload
    def update(
        self, condition: str | None, assignments: Mapping[str, str], *, commit: Literal[True] = ...
    ) -> CommitInfo: ...
    @overload
    def update(self, condition: str | None, assignments: Mapping[str, str], *, commit: Literal[False]) -> Prepared: ...
    @overload
    def update(self, condition: str | None, assignments: Mapping[str, str], *, commit: bool) -> Result: ...

    def update(self, condition: str | None, assignments: Mapping[str, str], *, commit: bool = True) -> Result:
        return _finish(modify.modify(self.spark, self.table, "update", condition, assignments), commit)

    @overload
    def delete(self, condition: str | None = ..., *, commit: Literal[True] = ...) -> CommitInfo: ...
    @overload
    def delete(self, condition: str | None = ..., *, commit: Literal[False]) -> Prepared: ...
    @overload
    def delete(self, condition: str | None = ..., *, commit: bool) -> Result: ...

    def delete(self, condition: str | None = None, *, commit: bool = True) -> Result:
        return _finish(modify.modify(self.spark, self.table, "delete", condition), commit)

    def merge(self, source: DataFrame, condition: str, *, merge_schema: bool = False) -> MergeBuilder:
        """Start a MERGE; add clauses, then `.execute()`. Aliases: `t` is this table, `s` the source.

        With `merge_schema=True` source columns the table lacks, written by an *_all clause or named in
        an assignment, are added to the table in the same commit (Delta's schema auto-merge)."""
        return MergeBuilder.start(
            self.spark, self.table, self._check_df(source, "merge"), condition, merge_schema=merge_schema
        )

    @overload
    def compact(
        self, kind: str = ..., *, where: str | None = ..., target_file_bytes: int = ..., commit: Literal[True] = ...
    ) -> list[CommitInfo]: ...
    @overload
    def compact(
        self, kind: str = ..., *, where: str | None = ..., target_file_bytes: int = ..., commit: Literal[False]
    ) -> Prepared: ...
    @overload
    def compact(
        self, kind: str = ..., *, where: str | None = ..., target_file_bytes: int = ..., commit: bool
    ) -> list[CommitInfo] | Prepared: ...

    def compact(
        self, kind: str = "minor", *, where: str | None = None, target_file_bytes: int = 128 << 20, commit: bool = True
    ) -> list[CommitInfo] | Prepared:
        """Rewrite small files (and, for primary-key tables, merge delta files) in groups that commit one
        by one; returns the commit of each group, or one Prepared for everything with commit=False."""
        return compaction.compact(
            self.spark, self.table, kind, where=where, target_file_bytes=target_file_bytes, commit=commit
        )

    @overload
    def cluster(self, by: Sequence[str], *, where: str | None = ..., commit: Literal[True] = ...) -> CommitInfo: ...
    @overload
    def cluster(self, by: Sequence[str], *, where: str | None = ..., commit: Literal[False]) -> Prepared: ...
    @overload
    def cluster(self, by: Sequence[str], *, where: str | None = ..., commit: bool) -> Result: ...

    def cluster(self, by: Sequence[str], *, where: str | None = None, commit: bool = True) -> Result:
        return _finish(compaction.cluster(self.spark, self.table, by, where=where), commit)

    def write_stream(
        self,
        df: DataFrame,
        checkpoint_location: str,
        *,
        output_mode: str = "append",
        trigger: Mapping[str, Any] | None = None,
        query_name: str | None = None,
    ) -> StreamingQuery:
        """Start a streaming query that writes each micro-batch of `df` with Spark's Parquet writer and
        commits it once, keyed (query id, batch id): append mode appends (upserts, on a primary-key
        table), complete mode overwrites. `trigger` takes DataStreamWriter.trigger's keywords."""
        return stream_batches.write_stream(
            self.table, df, checkpoint_location, output_mode=output_mode, trigger=trigger, query_name=query_name
        )

    # --- reads ---------------------------------------------------------------------------------------

    def read(
        self,
        *,
        version: int | None = None,
        timestamp: TimeLike | None = None,
        where: str | None = None,
        snapshot: Snapshot | None = None,
    ) -> DataFrame:
        """The current version, an ID `version`, the version current at `timestamp`, or a `snapshot` of
        this table already pinned (`catalog.snapshots([...])[name]`, several tables at one instant):
        exactly that snapshot's files. A write whose source reads a pinned snapshot of its own table is
        judged against every commit since the pin, as one reading `read()` is."""
        if snapshot is None:
            return reads.read(self.spark, self.table, version=version, timestamp=timestamp, where=where)
        if not isinstance(snapshot, Snapshot):
            raise InvalidArgumentError(
                f"read(): snapshot must be a Snapshot (catalog.snapshots([...])[name]), found {type(snapshot).__name__}"
            )
        if version is not None or timestamp is not None:
            raise InvalidArgumentError("read(): give a snapshot, a version or a timestamp, not more than one")
        if snapshot.metadata.table_id != self.table.table_id:
            raise InvalidArgumentError(
                f"read(): the snapshot is of {snapshot.metadata.name} (version {snapshot.version}), not of "
                f"{self.table.name}"
            )
        return reads.read_snapshot(self.spark, self.table, snapshot, where, latest=True)

    def changes(
        self,
        start_version: int | None = None,
        end_version: int | None = None,
        *,
        start_time: TimeLike | None = None,
        end_time: TimeLike | None = None,
    ) -> DataFrame:
        return reads.changes(
            self.spark,
            self.table,
            start_version=start_version,
            end_version=end_version,
            start_time=start_time,
            end_time=end_time,
        )

    def restore(self, version: int | None = None, timestamp: TimeLike | None = None) -> CommitInfo:
        """Commit one version whose files are those of an earlier `version` (or the version current at
        `timestamp`): Table.restore, Delta Lake's RESTORE."""
        return self.table.restore(version=version, timestamp=timestamp)

    def history(self, limit: int | None = None) -> DataFrame:
        return reads.history(self.spark, self.table, limit)
