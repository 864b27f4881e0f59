"""Judging by a MaxCompute matrix: the part the `maxcompute` and `maxcompute-transactional` policies share.

The matrices decide per table or partition (the scope), by operation class alone (seed 000: "These rules
apply at the transaction level, not at the row or file level"). What an OK cell means for the data is
then carried out as a metadata-level rebase: an overwrite also replaces what the winner wrote, and a
major compaction moves onto the outputs of a minor one (D-06).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from acidtables.core.commit.conflicts.common import (
    Outcome,
    Verdict,
    extend_overwrite,
    protocol_or_metadata_changed,
    same_application,
)
from acidtables.core.errors import TransactionConflictException
from acidtables.core.log.operations import OpClass
from acidtables.core.log.records import CommitRecord, Scope, TableMetadata

Cell = Callable[[OpClass, OpClass], Outcome]


def scopes_intersect(a: Scope, b: Scope) -> bool:
    """D-09: two jobs meet if any partition is shared; a whole-table job meets every job."""
    if a.partitions is None or b.partitions is None:
        return True
    return any(b.contains(p) for p in a.partitions) or any(a.contains(p) for p in b.partitions)


def matrix_conflict(
    winner: CommitRecord, intent: CommitRecord, table: TableMetadata, detail: str | None = None
) -> TransactionConflictException:
    return TransactionConflictException(
        table=table.name,
        operation=intent.operation.display,
        read_version=intent.read_version,
        winning_version=winner.version,
        winning_operation=winner.operation.display,
        earlier_op=winner.op_class.value,
        later_op=intent.op_class.value,
        scope=intent.scope.describe() or winner.scope.describe(),
        detail=detail,
    )


def rebase_through_lineage(winner: CommitRecord, intent: CommitRecord) -> CommitRecord:
    """D-06: a compaction rebased onto another compaction that replaced some of its inputs.

    It removes the winner's outputs whose data its own output fully covers. If a live file made from its
    inputs also holds data it never read, committing would drop that data, so it becomes an empty,
    successful commit instead (its staged files are cleaned up).
    """
    gone = winner.removed_paths()
    ours = intent.removed_paths()
    overlap = gone & ours
    if not overlap:
        return intent
    removes = [f for f in intent.removes if f.path not in gone]
    covered: set[str] = set()
    for output in winner.adds:
        inputs = set(output.lineage)
        if not inputs & ours:
            continue
        if not inputs <= ours:
            return replace(intent, adds=(), removes=())
        removes.append(output)
        covered |= inputs
    if overlap - covered:
        # the winner removed inputs of ours without an output we can account for: their data is gone
        return replace(intent, adds=(), removes=())
    return replace(intent, removes=tuple(removes))


def judge_by_matrix(winner: CommitRecord, intent: CommitRecord, table: TableMetadata, cell: Cell) -> Verdict:
    for rule in (same_application, protocol_or_metadata_changed):
        exc = rule(winner, intent, table)
        if exc is not None:
            return exc
    if intent.op_class in (OpClass.META, OpClass.PROTO):
        return intent  # an ALTER after a data commit: nothing of it depends on data
    if not scopes_intersect(winner.scope, intent.scope):
        return intent
    if cell(winner.op_class, intent.op_class) is Outcome.FAIL:
        return matrix_conflict(winner, intent, table)
    if intent.op_class is OpClass.IO_T:
        return extend_overwrite(winner, intent)
    if winner.op_class is OpClass.MIN_C and intent.op_class in (OpClass.MAJ_C, OpClass.CLU):
        return rebase_through_lineage(winner, intent)
    shared = sorted(winner.removed_paths() & intent.removed_paths())
    if shared:
        # No OK cell of the matrices lets two jobs remove the same file except the cases handled above;
        # committing would remove a file twice, so refuse rather than corrupt the table.
        return matrix_conflict(winner, intent, table, f"both remove {shared[0]}")
    return intent
