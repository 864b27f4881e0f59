"""Policy `maxcompute-transactional` (MC_TXN): plain transactional tables, the 16-cell matrix of seed 001.

Seed 001's summary is the rule: INSERT operations never fail; UPDATE, DELETE and the small-file MERGE fail
when their partition changed. Both compactions and clustering are the small-file MERGE (SFM) here.
"""

from __future__ import annotations

from acidtables.core.commit.conflicts.common import Outcome, Verdict
from acidtables.core.commit.conflicts.matrix import judge_by_matrix
from acidtables.core.log.operations import OpClass
from acidtables.core.log.records import CommitRecord, TableMetadata

OK, FAIL = Outcome.OK, Outcome.FAIL

#: columns of MATRIX: the later job
LATER = (OpClass.IO_T, OpClass.II, OpClass.UD, OpClass.SFM)

#: rows: the earlier job -> outcome for each later job, in LATER's order (seed 001, table "Conflict of
#: concurrent operations")
# fmt: off
MATRIX: dict[OpClass, tuple[Outcome, ...]] = {
    #               IO/T  II   UD    SFM
    OpClass.IO_T:  (OK,   OK,  FAIL, FAIL),
    OpClass.II:    (OK,   OK,  FAIL, FAIL),
    OpClass.UD:    (OK,   OK,  FAIL, FAIL),
    OpClass.SFM:   (OK,   OK,  FAIL, FAIL),
}
# fmt: on


def cell(earlier: OpClass, later: OpClass) -> Outcome:
    return MATRIX[earlier][LATER.index(later)]


def judge(winner: CommitRecord, intent: CommitRecord, table: TableMetadata) -> Verdict:
    return judge_by_matrix(winner, intent, table, cell)
