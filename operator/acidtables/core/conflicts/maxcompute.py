"""Policy `maxcompute` (MC_DELTA): primary-key Delta tables, the 25-cell matrix of seeds 000 and 002.

Check it against seed 000's "Conflict detection rules" row by row: seed 002 has the same 25 outcomes in
another layout (conflict-rules S3 checked every cell). Clustering is not in the seeds' matrix; D-05 places
it: OK with INSERT INTO in both orders, otherwise like MAJOR COMPACT.
"""

from __future__ import annotations

from ..operations import OpClass
from ..records import CommitRecord, TableMetadata
from .common import Outcome, Verdict
from .matrix import judge_by_matrix

OK, FAIL = Outcome.OK, Outcome.FAIL

#: columns of MATRIX: the later job (the one whose commit lands second)
LATER = (OpClass.IO_T, OpClass.II, OpClass.UD, OpClass.MIN_C, OpClass.MAJ_C)

#: rows: the earlier job (commits first) -> outcome for each later job, in LATER's order
# fmt: off
MATRIX: dict[OpClass, tuple[Outcome, ...]] = {
    #               IO/T  II    UD    MinC  MajC
    OpClass.IO_T:  (OK,   FAIL, FAIL, FAIL, FAIL),
    OpClass.II:    (OK,   FAIL, FAIL, OK,   FAIL),
    OpClass.UD:    (OK,   FAIL, FAIL, OK,   FAIL),
    OpClass.MIN_C: (OK,   OK,   OK,   FAIL, OK),
    OpClass.MAJ_C: (OK,   OK,   OK,   FAIL, FAIL),
}
# fmt: on


def cell(earlier: OpClass, later: OpClass) -> Outcome:
    if OpClass.CLU in (earlier, later) and OpClass.II in (earlier, later):
        return OK  # seed 000 "Smart conflict resolution": clustering and INSERT INTO both succeed
    row = OpClass.MAJ_C if earlier is OpClass.CLU else earlier
    column = OpClass.MAJ_C if later is OpClass.CLU else later
    return MATRIX[row][LATER.index(column)]


def judge(winner: CommitRecord, intent: CommitRecord, table: TableMetadata) -> Verdict:
    return judge_by_matrix(winner, intent, table, cell)
