"""Policy `maxcompute` (MC_DELTA): primary-key Delta tables, the 25-cell matrix of seeds 000 and 002.

Check it against seed 000's "Conflict detection rules" row by row: seed 002 has the same 25 outcomes in
another layout (conflict-rules S3 checked every cell). Clustering is not in the seeds' matrix; D-05 places
it, as its own row and column: OK with INSERT INTO in both orders, otherwise like MAJOR COMPACT.
"""

from __future__ import annotations

from acidtables.core.commit.conflicts.common import Outcome, Verdict
from acidtables.core.commit.conflicts.matrix import judge_by_matrix
from acidtables.core.log.operations import OpClass
from acidtables.core.log.records import CommitRecord, TableMetadata

OK, FAIL = Outcome.OK, Outcome.FAIL

#: columns of MATRIX: the later job (the one whose commit lands second)
LATER = (OpClass.IO_T, OpClass.II, OpClass.UD, OpClass.MIN_C, OpClass.MAJ_C, OpClass.CLU)

#: rows: the earlier job (commits first) -> outcome for each later job, in LATER's order. The 5x5 block
#: is seed 000's "Conflict detection rules" (seed 002 has the same 25 outcomes). The CLU row and column
#: are conflict-rules D-05: clustering and INSERT INTO both succeed in either order (seed 000's "smart
#: conflict resolution"), and against everything else clustering behaves like MAJOR COMPACT.
# fmt: off
MATRIX: dict[OpClass, tuple[Outcome, ...]] = {
    #               IO/T  II    UD    MinC  MajC  CLU (D-05)
    OpClass.IO_T:  (OK,   FAIL, FAIL, FAIL, FAIL, FAIL),
    OpClass.II:    (OK,   FAIL, FAIL, OK,   FAIL, OK),
    OpClass.UD:    (OK,   FAIL, FAIL, OK,   FAIL, FAIL),
    OpClass.MIN_C: (OK,   OK,   OK,   FAIL, OK,   OK),
    OpClass.MAJ_C: (OK,   OK,   OK,   FAIL, FAIL, FAIL),
    OpClass.CLU:   (OK,   OK,   OK,   FAIL, FAIL, FAIL),  # D-05
}
# fmt: on


def cell(earlier: OpClass, later: OpClass) -> Outcome:
    return MATRIX[earlier][LATER.index(later)]


def judge(winner: CommitRecord, intent: CommitRecord, table: TableMetadata) -> Verdict:
    return judge_by_matrix(winner, intent, table, cell)
