"""What every policy shares: the verdict type, building a conflict error, app-id and metadata rules.

A policy judges one winning commit against the transaction's intent and returns either the rebased
intent (the commit may go ahead on top of the winner) or the exception to raise. Policies are pure:
no etcd, no clock, no files — the committer does the I/O (style: the etcd STM shape).
"""

from __future__ import annotations

from dataclasses import replace
from enum import StrEnum
from typing import TypeAlias

from acidtables.core.errors import (
    ConcurrentModificationException,
    ConcurrentTransactionException,
    MetadataChangedException,
    ProtocolChangedException,
)
from acidtables.core.log.operations import Operation
from acidtables.core.log.records import CommitRecord, DataFile, TableMetadata

Verdict: TypeAlias = CommitRecord | ConcurrentModificationException


class Outcome(StrEnum):
    """A matrix cell: both jobs commit, or the later one fails."""

    OK = "both succeed"
    FAIL = "later fails"


def conflict(
    cls: type[ConcurrentModificationException],
    winner: CommitRecord,
    intent: CommitRecord,
    table: TableMetadata,
    detail: str | None = None,
    *,
    file: DataFile | None = None,
) -> ConcurrentModificationException:
    """The exception for a rule that failed; `file` is the file it tripped on, whose partition becomes
    the exception's partition hint."""
    scope = intent.scope.describe() or winner.scope.describe()
    return cls(
        table=table.name,
        operation=intent.operation.display,
        read_version=intent.read_version,
        winning_version=winner.version,
        winning_operation=winner.operation.display,
        scope=scope,
        detail=detail,
        partition_hint=file.partition_spec if file is not None else None,
    )


def protocol_changed(
    winner: CommitRecord, intent: CommitRecord, table: TableMetadata
) -> ConcurrentModificationException | None:
    """conflict-rules §13.1 rule 1 and D-14: the winner changed the protocol, or both created the table."""
    if winner.protocol is not None:
        return conflict(ProtocolChangedException, winner, intent, table)
    if winner.operation is Operation.CREATE_TABLE and intent.operation is Operation.CREATE_TABLE:
        return conflict(ProtocolChangedException, winner, intent, table, "both created the table")
    return None


def metadata_changed(
    winner: CommitRecord, intent: CommitRecord, table: TableMetadata
) -> ConcurrentModificationException | None:
    """§13.1 rule 2 and D-13/D-14: a committed metadata change fails every overlapping write."""
    if winner.metadata is not None:
        return conflict(MetadataChangedException, winner, intent, table)
    return None


def protocol_or_metadata_changed(
    winner: CommitRecord, intent: CommitRecord, table: TableMetadata
) -> ConcurrentModificationException | None:
    """Rules 1-2 together, for the MaxCompute policies (D-13): protocol first, then metadata."""
    return protocol_changed(winner, intent, table) or metadata_changed(winner, intent, table)


def same_application(
    winner: CommitRecord, intent: CommitRecord, table: TableMetadata
) -> ConcurrentModificationException | None:
    """§13.1 rule 3 and D-27: a winner that wrote for an application id this transaction also writes."""
    shared = sorted(set(winner.app_ids) & set(intent.app_ids))
    if shared:
        return conflict(ConcurrentTransactionException, winner, intent, table, f"application id {shared[0]!r}")
    return None


def extend_overwrite(winner: CommitRecord, intent: CommitRecord) -> CommitRecord:
    """Rebase an overwrite so that its result replaces the winner's too ("the later job's result
    overwrites the earlier job's result", seeds 000/001/002, X -> IO/T).

    The overwrite drops what the winner already removed and also removes what the winner added inside
    the overwrite's scope. Only metadata changes: the overwrite's own staged files stay as they are.
    """
    gone = winner.removed_paths()
    removes = [f for f in intent.removes if f.path not in gone]
    known = {f.path for f in removes}
    removes += [f for f in winner.adds if intent.scope.contains(f.partition) and f.path not in known]
    return replace(intent, removes=tuple(removes))
