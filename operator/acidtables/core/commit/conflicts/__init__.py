"""The three conflict policies, one module each; `judge` picks the table's.

Every policy is a pure function (winning commit, our intent, table metadata) -> rebased intent or the
exception to raise (conflict-rules §1.4: the committer applies it to each winner in log order).
"""

from __future__ import annotations

from collections.abc import Callable

from acidtables.core.commit.conflicts import delta, maxcompute, maxcompute_transactional
from acidtables.core.commit.conflicts.common import Outcome, Verdict
from acidtables.core.log.operations import Policy
from acidtables.core.log.records import CommitRecord, TableMetadata

Judge = Callable[[CommitRecord, CommitRecord, TableMetadata], Verdict]

POLICIES: dict[Policy, Judge] = {
    Policy.MAXCOMPUTE: maxcompute.judge,
    Policy.MAXCOMPUTE_TRANSACTIONAL: maxcompute_transactional.judge,
    Policy.DELTA: delta.judge,
}


def judge(winner: CommitRecord, intent: CommitRecord, table: TableMetadata) -> Verdict:
    return POLICIES[table.conflict_policy](winner, intent, table)


__all__ = ["POLICIES", "Judge", "Outcome", "Verdict", "judge"]
