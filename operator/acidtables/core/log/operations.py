"""Operations users run, and the conflict class each one has under each policy (conflict-rules §1.3).

`Operation` is what a job says it does (`table.begin("update")`); `OpClass` is how a policy's conflict
rules see it. They differ because the seeds group operations differently: MaxCompute lumps UPDATE and
DELETE together (`UD`) while Delta Lake tells a blind append (`INS`) from an insert that read the table
(`INS_R`).
"""

from __future__ import annotations

from enum import StrEnum

from acidtables.core.errors import InvalidArgumentError


class Policy(StrEnum):
    """A table's conflict policy, fixed at creation (conflict-rules D-01)."""

    MAXCOMPUTE = "maxcompute"
    MAXCOMPUTE_TRANSACTIONAL = "maxcompute-transactional"
    DELTA = "delta"


class IsolationLevel(StrEnum):
    """Delta Lake write isolation (seed 004); only the `delta` policy uses it."""

    SERIALIZABLE = "Serializable"
    WRITE_SERIALIZABLE = "WriteSerializable"


class Operation(StrEnum):
    CREATE_TABLE = "create_table"
    INSERT_INTO = "insert_into"
    INSERT_OVERWRITE = "insert_overwrite"
    TRUNCATE = "truncate"
    UPDATE = "update"
    DELETE = "delete"
    MERGE = "merge"
    MINOR_COMPACT = "minor_compact"
    MAJOR_COMPACT = "major_compact"
    CLUSTER = "cluster"
    ALTER = "alter"
    UPGRADE_PROTOCOL = "upgrade_protocol"
    #: `Table.repair` / `acidtables fsck --repair`: removes the entries of data files that are gone
    #: (Databricks' FSCK REPAIR TABLE); never begun by hand
    REPAIR = "repair"
    #: `Table.restore` / RESTORE TABLE: the files of an earlier version become the table's again
    #: (Delta Lake's RESTORE); never begun by hand
    RESTORE = "restore"

    @property
    def display(self) -> str:
        """The seeds' name for the operation, as history and errors print it."""
        return self.value.upper().replace("_", " ")

    @property
    def changes_data(self) -> bool:
        """Whether a commit of this operation is a logical data change and so gets a time version (D-20)."""
        return self in _DATA_CHANGING

    @property
    def rewrites(self) -> bool:
        """Whether it rewrites existing data without changing it (compaction, clustering)."""
        return self in REWRITES

    @staticmethod
    def parse(value: str | Operation, *, argument: str = "operation", method: str = "begin") -> Operation:
        if isinstance(value, Operation):
            return value
        normalized = str(value).strip().lower().replace(" ", "_").replace("-", "_")
        try:
            return Operation(normalized)
        except ValueError:
            names = ", ".join(op.value for op in Operation if op not in NOT_BEGUN_BY_HAND)
            raise InvalidArgumentError(
                f"{method}(): {argument}={value!r} is not an operation; use one of: {names}"
            ) from None


_DATA_CHANGING = frozenset(
    {
        Operation.INSERT_INTO,
        Operation.INSERT_OVERWRITE,
        Operation.TRUNCATE,
        Operation.UPDATE,
        Operation.DELETE,
        Operation.MERGE,
        # rows of the files it removes leave the table (they were unreadable, but a reader by time must
        # see the version where they went)
        Operation.REPAIR,
        Operation.RESTORE,
    }
)

#: operations their own methods commit (Catalog.create_table, Table.repair, Table.restore)
NOT_BEGUN_BY_HAND = frozenset({Operation.CREATE_TABLE, Operation.REPAIR, Operation.RESTORE})

#: Operations that rewrite existing data without changing it; their added files carry dataChange=false.
REWRITES = frozenset({Operation.MINOR_COMPACT, Operation.MAJOR_COMPACT, Operation.CLUSTER})


class OpClass(StrEnum):
    """Conflict classes, spelled as in conflict-rules §1.3 (no synonyms)."""

    # MaxCompute flavours
    IO_T = "IO/T"
    II = "II"
    UD = "UD"
    MIN_C = "MinC"
    MAJ_C = "MajC"
    SFM = "SFM"
    CLU = "CLU"
    # Delta Lake flavour
    INS = "INS"
    INS_R = "INS-R"
    UPD = "UPD"
    DEL = "DEL"
    MRG = "MRG"
    OPT = "OPT"
    OPTZ = "OPTZ"
    # every flavour
    META = "META"
    PROTO = "PROTO"


_MAXCOMPUTE = {
    Operation.INSERT_OVERWRITE: OpClass.IO_T,
    Operation.TRUNCATE: OpClass.IO_T,
    Operation.INSERT_INTO: OpClass.II,
    # D-29: MERGE INTO counts as UD
    Operation.UPDATE: OpClass.UD,
    Operation.DELETE: OpClass.UD,
    Operation.MERGE: OpClass.UD,
    # a repair deletes the files it removes: for the matrices it is a DELETE of them (issue 24, item 4)
    Operation.REPAIR: OpClass.UD,
    # a restore replaces the whole table's files with an earlier version's: an overwrite of it
    Operation.RESTORE: OpClass.IO_T,
    Operation.MINOR_COMPACT: OpClass.MIN_C,
    Operation.MAJOR_COMPACT: OpClass.MAJ_C,
    Operation.CLUSTER: OpClass.CLU,
}

_MAXCOMPUTE_TRANSACTIONAL = {
    **_MAXCOMPUTE,
    # Seed 001 knows one compaction, the small-file MERGE; both compactions and clustering are it here.
    Operation.MINOR_COMPACT: OpClass.SFM,
    Operation.MAJOR_COMPACT: OpClass.SFM,
    Operation.CLUSTER: OpClass.SFM,
}

_DELTA = {
    # An overwrite removes the files of its scope and appends, as OSS Delta writes it; the rules look
    # at what it read and removed, so DEL is the class that describes it.
    Operation.INSERT_OVERWRITE: OpClass.DEL,
    Operation.TRUNCATE: OpClass.DEL,
    Operation.UPDATE: OpClass.UPD,
    Operation.DELETE: OpClass.DEL,
    # a repair removes the entries of files that are gone and reads exactly those: a DELETE of them
    Operation.REPAIR: OpClass.DEL,
    # a restore reads the whole table and removes and re-adds files: an overwrite of all of it
    Operation.RESTORE: OpClass.DEL,
    Operation.MERGE: OpClass.MRG,
    Operation.MINOR_COMPACT: OpClass.OPT,
    Operation.MAJOR_COMPACT: OpClass.OPT,
    # CLUSTER reorders rows across files like OPTIMIZE ... ZORDER BY
    Operation.CLUSTER: OpClass.OPTZ,
}


def classify(operation: Operation, policy: Policy, *, read_table: bool) -> OpClass:
    """The conflict class of `operation` under `policy`; `read_table` tells INS from INS-R for Delta."""
    if operation in (Operation.ALTER, Operation.CREATE_TABLE):
        return OpClass.META
    if operation is Operation.UPGRADE_PROTOCOL:
        return OpClass.PROTO
    if policy is Policy.MAXCOMPUTE:
        return _MAXCOMPUTE[operation]
    if policy is Policy.MAXCOMPUTE_TRANSACTIONAL:
        return _MAXCOMPUTE_TRANSACTIONAL[operation]
    if operation is Operation.INSERT_INTO:
        return OpClass.INS_R if read_table else OpClass.INS
    return _DELTA[operation]
