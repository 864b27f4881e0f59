"""MERGE INTO as a builder: nothing runs until `execute()` (delta-spark's shape, Python naming).

Rules for combining clauses (as in Delta Lake): three kinds of clause (matched; not matched, i.e. a
source row no target row matches; not matched by source, i.e. a target row no source row matches), each
any number of times; within a kind, clauses are tried in order and the first whose condition holds acts
on the row, so every clause but the last of its kind needs a condition. A target row matched by several
source rows is an error, since which change wins would be arbitrary, unless the only matched clause is
an unconditional delete (the row goes either way). In the condition and clauses, `t` is the target table
and `s` the source; a not-matched-by-source clause has no source row, so it may name `t` only.

What the MERGE read is its target-side condition (`t.dt = '2026-11-01'`); a condition that names no
target partition reads the whole table, which is why seed 003/004 recommend naming it. A
not-matched-by-source clause acts on target rows the condition does not select, so with one the MERGE
reads what the condition or any such clause's condition selects (the whole table when one has none).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal, overload

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from acidtables.core import Column as Column_
from acidtables.core import (
    CommitInfo,
    DataFile,
    Expr,
    FileKind,
    InvalidArgumentError,
    Or,
    Policy,
    Table,
    TableMetadata,
    Transaction,
    parse_target_predicate,
)

from .files import FILE, ROW, files_by_key, with_deletion_vectors, write_staged
from .modify import holds, refuse_key_assignment, session_dialect
from .prepared import Prepared, preparing
from .scan import read_snapshot_rows
from .schema import DELETE, OP_COLUMN, SEQ_COLUMN, UPSERT, new_columns, spark_type, table_struct
from .source_reads import record_source_reads

TARGET, SOURCE = "t", "s"
_T_MARK, _S_MARK, _ACTION = "_acid_t", "_acid_s", "_acid_action"
#: a target row's identity, beside its columns
_ROW_FILE, _ROW_POSITION = "_acid_row_file", "_acid_row_position"
#: the prefixes of a row's action: the clause acting on it is the i-th of its kind
_MATCHED, _NOT_MATCHED, _BY_SOURCE = "m", "n", "b"


ClauseKind = Literal["matched", "not_matched", "not_matched_by_source"]


@dataclass(frozen=True)
class Clause:
    #: "update", "delete" or "insert"
    kind: str
    condition: str | None
    #: column -> SQL expression; None means "all columns from the source" (update_all / insert_all)
    values: Mapping[str, str] | None


@dataclass(frozen=True)
class MergeBuilder:
    spark: SparkSession
    table: Table
    source: DataFrame
    condition: str
    matched: tuple[Clause, ...] = ()
    not_matched: tuple[Clause, ...] = ()
    not_matched_by_source: tuple[Clause, ...] = ()
    #: Delta's schema auto-merge: source columns the target lacks, named by a *_all clause or an
    #: assignment, are added to the table in the same commit
    merge_schema: bool = False

    @staticmethod
    def start(
        spark: SparkSession, table: Table, source: DataFrame, condition: str, *, merge_schema: bool = False
    ) -> MergeBuilder:
        if not isinstance(condition, str) or not condition.strip():
            raise InvalidArgumentError('merge(): the condition must be a SQL string such as "t.id = s.id"')
        if not isinstance(merge_schema, bool):
            raise InvalidArgumentError(f"merge(): merge_schema must be True or False, found {merge_schema!r}")
        return MergeBuilder(spark, table, source, condition, merge_schema=merge_schema)

    def _add(self, clause: Clause, *, kind: ClauseKind, method: str) -> MergeBuilder:
        """`kind`: the builder field the clause joins."""
        if clause.condition is not None and not isinstance(clause.condition, str):
            raise InvalidArgumentError(f"{method}(): condition must be a SQL string")
        if clause.values is not None and (
            not isinstance(clause.values, Mapping) or not all(isinstance(v, str) for v in clause.values.values())
        ):
            raise InvalidArgumentError(f"{method}(): values must be {{column: SQL expression}}")
        existing: tuple[Clause, ...] = getattr(self, kind)
        if existing and existing[-1].condition is None:
            raise InvalidArgumentError(
                f"{method}(): an earlier when_{kind}_* clause has no condition, so this one could never apply; "
                "give the earlier clause a condition"
            )
        clauses = (*existing, clause)
        if kind == "matched":
            return replace(self, matched=clauses)
        if kind == "not_matched":
            return replace(self, not_matched=clauses)
        return replace(self, not_matched_by_source=clauses)

    def when_matched_update(self, values: Mapping[str, str], condition: str | None = None) -> MergeBuilder:
        return self._add(Clause("update", condition, dict(values)), kind="matched", method="when_matched_update")

    def when_matched_update_all(self, condition: str | None = None) -> MergeBuilder:
        return self._add(Clause("update", condition, None), kind="matched", method="when_matched_update_all")

    def when_matched_delete(self, condition: str | None = None) -> MergeBuilder:
        return self._add(Clause("delete", condition, None), kind="matched", method="when_matched_delete")

    def when_not_matched_insert(self, values: Mapping[str, str], condition: str | None = None) -> MergeBuilder:
        return self._add(
            Clause("insert", condition, dict(values)), kind="not_matched", method="when_not_matched_insert"
        )

    def when_not_matched_insert_all(self, condition: str | None = None) -> MergeBuilder:
        return self._add(Clause("insert", condition, None), kind="not_matched", method="when_not_matched_insert_all")

    def when_not_matched_by_source_update(
        self, values: Mapping[str, str], condition: str | None = None
    ) -> MergeBuilder:
        """Update target rows that no source row matches (Delta 2.3's WHEN NOT MATCHED BY SOURCE):
        `values` and `condition` may name the target's columns only."""
        return self._add(
            Clause("update", condition, dict(values)),
            kind="not_matched_by_source",
            method="when_not_matched_by_source_update",
        )

    def when_not_matched_by_source_delete(self, condition: str | None = None) -> MergeBuilder:
        """Delete target rows that no source row matches; `condition` may name the target only."""
        return self._add(
            Clause("delete", condition, None), kind="not_matched_by_source", method="when_not_matched_by_source_delete"
        )

    @overload
    def execute(self, *, commit: Literal[True] = ...) -> CommitInfo: ...
    @overload
    def execute(self, *, commit: Literal[False]) -> Prepared: ...
    @overload
    def execute(self, *, commit: bool) -> CommitInfo | Prepared: ...

    def execute(self, *, commit: bool = True) -> CommitInfo | Prepared:
        if not (self.matched or self.not_matched or self.not_matched_by_source):
            raise InvalidArgumentError(
                "execute(): add at least one when_matched_*, when_not_matched_* or when_not_matched_by_source_* clause"
            )
        _validate(self)
        prepared = _run(self)
        return prepared.commit() if commit else prepared


def _validate(merge: MergeBuilder) -> None:
    """Resolve the condition, the clause conditions and the assigned expressions against the target and
    the source now, on empty frames, so a typo or an unknown column fails before any job runs."""
    meta = merge.table.metadata
    target = merge.spark.createDataFrame([], table_struct(meta)).alias(TARGET)
    source = merge.source.limit(0).alias(SOURCE)

    def resolve(what: str, text: str, frame: Callable[[str], DataFrame]) -> None:
        try:
            frame(text).schema  # noqa: B018 (resolving the plan is the check)
        except Exception as exc:  # AnalysisException / ParseException: report them as our own error
            first = str(exc).strip().splitlines()[0]
            raise InvalidArgumentError(f"merge(): {what} {text!r} is not valid for {meta.name}: {first}") from None

    resolve("condition", merge.condition, lambda text: target.join(source, F.expr(text), "full_outer"))
    joined = target.join(source, F.expr(merge.condition), "full_outer")
    types = {c.name.lower(): spark_type(c.type) for c in meta.columns}
    # a not-matched-by-source clause has no source row: resolved against the target alone, a name of the
    # source fails as unknown; and against the join it runs on, where a name both sides have is ambiguous
    checks = (
        (merge.matched, joined),
        (merge.not_matched, joined),
        (merge.not_matched_by_source, target),
        (merge.not_matched_by_source, joined),
    )
    for clauses, rows in checks:
        for clause in clauses:
            if clause.condition is not None:
                resolve(f"{clause.kind} condition", clause.condition, lambda text: rows.filter(F.expr(text)))  # noqa: B023
            for column, expression in (clause.values or {}).items():
                # cast as the write will and beside the other columns, so a value of a type the column
                # cannot hold, or an aggregate, fails here
                type_ = types.get(str(column).lower())
                resolve(
                    f"value of {column}",
                    expression,
                    lambda text: rows.select("*", F.expr(text) if type_ is None else F.expr(text).cast(type_)),  # noqa: B023
                )


def _evolved_columns(merge: MergeBuilder, meta: TableMetadata) -> list[Column_]:
    """With merge_schema, the source columns the table lacks that a clause writes: every one for a
    *_all clause, else those an assignment names."""
    if not merge.merge_schema:
        return []
    missing = new_columns(merge.source, meta)
    clauses = (*merge.matched, *merge.not_matched)
    if any(c.values is None for c in clauses):
        return missing
    named = {k.lower() for c in clauses for k in (c.values or {})}
    return [c for c in missing if c.name.lower() in named]


def _target(column: str, meta: TableMetadata, read_columns: set[str]) -> Column:
    """The target row's value of `column`; NULL for a column this merge adds to the table."""
    if column in read_columns:
        return F.col(f"{TARGET}.`{column}`").alias(column)
    return F.lit(None).cast(spark_type(next(c.type for c in meta.columns if c.name == column))).alias(column)


def _values(
    meta: TableMetadata, clause: Clause, source_columns: set[str], *, base: str, read_columns: set[str]
) -> list[Column]:
    """The table's columns for an updated or inserted row; unnamed columns keep the target's value
    (update) or are NULL (insert)."""
    by_lower = {c.name.lower(): c.name for c in meta.columns}
    given: dict[str, str] = {}
    if clause.values is None:
        missing = [c.name for c in meta.columns if c.name.lower() not in source_columns]
        if missing:
            raise InvalidArgumentError(f"merge(): *_all clauses need source columns {missing}, which it lacks")
        given = {c.name: f"{SOURCE}.`{c.name}`" for c in meta.columns}
        if clause.kind == "update":  # the keys matched; a `delta` table's row may move partition, as Delta's does
            fixed = set(meta.primary_key) | (set() if meta.conflict_policy is Policy.DELTA else set(meta.partition_by))
            given = {k: v for k, v in given.items() if k not in fixed}
    else:
        for column, expression in clause.values.items():
            name = by_lower.get(column.lower())
            if name is None:
                raise InvalidArgumentError(f"merge(): {meta.name} has no column {column!r}")
            if clause.kind == "update":
                refuse_key_assignment(meta, name, "merge")
            given[name] = expression
    out = []
    for c in meta.columns:
        if c.name in given:
            out.append(F.expr(given[c.name]).cast(spark_type(c.type)).alias(c.name))
        elif base == TARGET:
            out.append(_target(c.name, meta, read_columns))
        else:
            out.append(F.lit(None).cast(spark_type(c.type)).alias(c.name))
    return out


def _read_predicate(merge: MergeBuilder, meta: TableMetadata) -> Expr | None:
    """What the MERGE reads of its target: the condition's target side, or, with not-matched-by-source
    clauses, that or any of their conditions (None: the whole table). Literals read as the session reads
    them, since Spark's join then compares those values."""
    dialect = session_dialect(merge.spark)
    expr = parse_target_predicate(merge.condition, meta.column_types, TARGET, dialect=dialect)
    if not merge.not_matched_by_source:
        return expr
    parts = [expr]
    for clause in merge.not_matched_by_source:
        parts.append(
            None
            if clause.condition is None
            else parse_target_predicate(clause.condition, meta.column_types, TARGET, dialect=dialect)
        )
    if any(p is None for p in parts):
        return None
    return Or(tuple(p for p in parts if p is not None))


def _run(merge: MergeBuilder) -> Prepared:
    spark, table = merge.spark, merge.table
    tx = table.begin("merge")
    with preparing(tx):
        meta, storage = tx.metadata, tx.storage
        record_source_reads(merge.source, tx)  # a source read from the target is a read of it too
        evolved = _evolved_columns(merge, meta)
        if evolved:
            tx.update_metadata(add_columns=evolved, method="merge")
        expr = _read_predicate(merge, meta)
        # a primary-key table prunes by partition and key only (Snapshot.prune)
        files = tx.snapshot.prune(expr)
        tx.record_read(predicate=expr, files=files, whole_table=expr is None)
        target = read_snapshot_rows(spark, meta, storage, files, version=tx.read_version, keep_helpers=True)
        target = target.withColumn(_T_MARK, F.lit(True))
        source = merge.source.withColumn(_S_MARK, F.lit(True))
        how = "full_outer" if merge.not_matched else "left_outer"
        joined = target.alias(TARGET).join(source.alias(SOURCE), F.expr(merge.condition), how)
        has_target = F.col(f"{TARGET}.{_T_MARK}").isNotNull()
        has_source = F.col(f"{SOURCE}.{_S_MARK}").isNotNull()
        matched = has_target & has_source
        # each row's clause: m<i>, n<i> or b<i> for the i-th matched, not matched, not matched by source
        action: Column = F.lit(None).cast("string")
        for prefix, clauses, applies in (
            (_BY_SOURCE, merge.not_matched_by_source, has_target & ~has_source),
            (_NOT_MATCHED, merge.not_matched, ~has_target),
            (_MATCHED, merge.matched, matched),
        ):
            for i, clause in reversed(list(enumerate(clauses))):
                action = F.when(applies & holds(clause.condition), F.lit(f"{prefix}{i}")).otherwise(action)
        joined = joined.withColumn(_ACTION, action).cache()
        try:
            return _stage(merge, tx, joined, matched, files)
        finally:
            joined.unpersist()


def _stage(
    merge: MergeBuilder, tx: Transaction, joined: DataFrame, matched: Column, target_files: Sequence[DataFile]
) -> Prepared:
    """`target_files`: the files the target read; every row the join touched comes from one of them."""
    read_columns = set(tx.metadata.column_names)
    meta = tx.target_metadata  # the read columns plus any merge_schema added
    # Delta's rule: several source rows may match one target row only when the one matched clause is an
    # unconditional delete, which deletes the row whichever source row it goes by
    if merge.matched and merge.matched != (Clause("delete", None, None),):
        doubled = joined.filter(matched).groupBy(f"{TARGET}.{FILE}", f"{TARGET}.{ROW}").count().filter("count > 1")
        if doubled.limit(1).count():
            raise InvalidArgumentError(
                f"merge(): a row of {meta.name} matched more than one source row; make the condition match at most "
                "one source row per target row (e.g. deduplicate the source on the key)"
            )
    source_columns = {c.lower() for c in merge.source.columns}
    changed: list[DataFrame] = []
    deleted: list[DataFrame] = []
    for prefix, clauses in ((_MATCHED, merge.matched), (_BY_SOURCE, merge.not_matched_by_source)):
        for i, clause in enumerate(clauses):
            rows = joined.filter(F.col(_ACTION) == f"{prefix}{i}")
            if clause.kind == "update":
                changed.append(
                    rows.select(*_values(meta, clause, source_columns, base=TARGET, read_columns=read_columns))
                )
            else:
                deleted.append(rows)
    inserted = [
        joined.filter(F.col(_ACTION) == f"{_NOT_MATCHED}{i}").select(
            *_values(meta, c, source_columns, base=SOURCE, read_columns=read_columns)
        )
        for i, c in enumerate(merge.not_matched)
    ]
    acts_on_target = F.col(_ACTION).startswith(_MATCHED) | F.col(_ACTION).startswith(_BY_SOURCE)
    touched_rows = joined.filter(acts_on_target)
    summary: dict[str, object] = {}
    metrics = _metrics(merge, joined)
    if meta.primary_key:
        key_columns = set(meta.primary_key) | set(meta.partition_by)
        frames = [f.withColumn(OP_COLUMN, F.lit(UPSERT)) for f in (*changed, *inserted)]
        for rows in deleted:
            frames.append(
                rows.select(
                    *[
                        _target(c.name, meta, read_columns)
                        if c.name in key_columns
                        else F.lit(None).cast(spark_type(c.type)).alias(c.name)
                        for c in meta.columns
                    ]
                )
                .distinct()  # one tombstone a key, however many source rows matched it
                .withColumn(OP_COLUMN, F.lit(DELETE))
            )
        out = _union(frames)
        if out is not None:
            tx.add_files(write_staged(out.withColumn(SEQ_COLUMN, F.lit(None).cast("long")), tx, kind=FileKind.CHANGES))
        return Prepared(tx, summary, metrics)
    snapshot_files = files_by_key(tx.storage, target_files)
    if meta.row_level_concurrency:
        positions: dict[str, set[int]] = defaultdict(set)
        for r in touched_rows.select(f"{TARGET}.{FILE}", f"{TARGET}.{ROW}").collect():
            positions[r[0]].add(int(r[1]))
        victims = [snapshot_files[name] for name in positions]
        tx.remove_files(victims)
        tx.add_files(with_deletion_vectors(tx.storage, victims, positions))
        out = _union([*changed, *inserted])
    else:
        touched = sorted({r[0] for r in touched_rows.select(f"{TARGET}.{FILE}").distinct().collect()})
        victims = [snapshot_files[name] for name in touched]
        # a row no clause acts on is written back once, however many source rows matched it (only a
        # not-matched-by-source or not-matched clause may be there to act on a row several matched)
        untouched_rows = (
            joined.filter(F.col(f"{TARGET}.{FILE}").isin(touched) & (F.col(_ACTION).isNull() | ~acts_on_target))
            .select(
                *[_target(c.name, meta, read_columns) for c in meta.columns],
                F.col(f"{TARGET}.{FILE}").alias(_ROW_FILE),
                F.col(f"{TARGET}.{ROW}").alias(_ROW_POSITION),
            )
            .dropDuplicates([_ROW_FILE, _ROW_POSITION])
            .drop(_ROW_FILE, _ROW_POSITION)
        )
        tx.remove_files(victims)
        out = _union([untouched_rows, *changed, *inserted] if victims else [*changed, *inserted])
    if out is not None:
        tx.add_files(write_staged(out, tx))
    return Prepared(tx, summary, metrics)


def _metrics(merge: MergeBuilder, joined: DataFrame) -> dict[str, int]:
    """Delta's MERGE operationMetrics: target rows each kind of clause updated, deleted or inserted (a
    target row counted once however many source rows matched it)."""
    target_row = F.countDistinct(F.col(f"{TARGET}.{FILE}"), F.col(f"{TARGET}.{ROW}"))
    counted = joined.groupBy(_ACTION).agg(F.count(F.lit(1)).alias("rows"), target_row.alias("targets")).collect()
    by_action = {r[_ACTION]: (int(r["rows"]), int(r["targets"])) for r in counted if r[_ACTION] is not None}
    out = dict.fromkeys(
        (
            "numTargetRowsInserted",
            "numTargetRowsUpdated",
            "numTargetRowsDeleted",
            "numTargetRowsMatchedUpdated",
            "numTargetRowsMatchedDeleted",
            "numTargetRowsNotMatchedBySourceUpdated",
            "numTargetRowsNotMatchedBySourceDeleted",
        ),
        0,
    )
    for prefix, clauses, name in (
        (_MATCHED, merge.matched, "Matched"),
        (_BY_SOURCE, merge.not_matched_by_source, "NotMatchedBySource"),
    ):
        for i, clause in enumerate(clauses):
            done = "Updated" if clause.kind == "update" else "Deleted"
            rows = by_action.get(f"{prefix}{i}", (0, 0))[1]
            out[f"numTargetRows{name}{done}"] += rows
            out[f"numTargetRows{done}"] += rows
    for i in range(len(merge.not_matched)):
        out["numTargetRowsInserted"] += by_action.get(f"{_NOT_MATCHED}{i}", (0, 0))[0]
    return out


def _union(frames: list[DataFrame]) -> DataFrame | None:
    if not frames:
        return None
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out
