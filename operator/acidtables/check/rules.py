"""The conflict rules as data, written down again from the seeds and conflict-rules.md (issue 10):
the checker re-judges every committed commit against the commits that landed under it with these
tables, never with the committer's own code (acidtables.core.conflicts), so a bug there that lets a
forbidden pair through is caught here.

Only the pairs that MUST fail are listed: a committed later job (L) that meets one of them in its
window is an anomaly. What may pass is left to the committer (rebases are its business).
"""

from __future__ import annotations

from typing import Any

#: MaxCompute Delta tables (seeds 000/002; `maxcompute`): earlier class -> later classes that fail,
#: within one partition. IO/T = INSERT OVERWRITE and TRUNCATE; II = INSERT INTO; UD = UPDATE, DELETE,
#: MERGE; MinC / MajC = minor / major compaction.
MC_DELTA_FAILS: dict[str, frozenset[str]] = {
    "IO/T": frozenset({"II", "UD", "MinC", "MajC"}),
    "II": frozenset({"II", "UD", "MajC"}),
    "UD": frozenset({"II", "UD", "MajC"}),
    "MinC": frozenset({"MinC"}),
    "MajC": frozenset({"MinC", "MajC"}),
}

#: MaxCompute transactional tables (seed 001; `maxcompute-transactional`): INSERTs never fail; UPDATE,
#: DELETE and MERGE fail when their target changed; a small-file merge (SFM, every compaction there)
#: fails when anything was written to its partition first (conflict-rules §3.1).
MC_TXN_FAILS: dict[str, frozenset[str]] = {
    "IO/T": frozenset({"UD", "SFM"}),
    "II": frozenset({"UD", "SFM"}),
    "UD": frozenset({"UD", "SFM"}),
    "SFM": frozenset({"UD", "SFM"}),
}

#: operation -> MaxCompute class (conflict-rules §1.3)
MC_CLASS: dict[str, str] = {
    "insert_overwrite": "IO/T",
    "truncate": "IO/T",
    "insert_into": "II",
    "update": "UD",
    "delete": "UD",
    "merge": "UD",
    "minor_compact": "MinC",
    "major_compact": "MajC",
}


def mc_class(policy: str, operation: str) -> str | None:
    cls = MC_CLASS.get(operation)
    if policy == "maxcompute-transactional" and cls in ("MinC", "MajC"):
        return "SFM"
    return cls


def must_fail(policy: str, earlier: dict[str, Any], later: dict[str, Any]) -> str | None:
    """Why `later` must have failed with `earlier` in its window (None: the rules let it through).

    Each argument is a plain description of one commit: operation, partitions (None: whole table),
    read_files, removes, is_metadata."""
    if earlier["is_metadata"] and not later["is_metadata"]:
        return "a metadata change fails every overlapping write (conflict-rules §1.5, D-13)"
    if policy in ("maxcompute", "maxcompute-transactional"):
        if not _partitions_meet(earlier["partitions"], later["partitions"]):
            return None
        table = MC_DELTA_FAILS if policy == "maxcompute" else MC_TXN_FAILS
        e_cls = mc_class(policy, str(earlier["operation"]))
        l_cls = mc_class(policy, str(later["operation"]))
        if e_cls is not None and l_cls is not None and l_cls in table.get(e_cls, frozenset()):
            return f"{e_cls} then {l_cls} in one partition: the later fails ({policy} matrix)"
        return None
    removed = set(earlier["removes"])
    if removed & set(later["removes"]):
        return "both removed the same file (ConcurrentDeleteDeleteException)"
    if removed & set(later["read_files"]):
        return "the earlier removed a file the later read (ConcurrentDeleteReadException)"
    return None


def _partitions_meet(a: list[dict[str, Any]] | None, b: list[dict[str, Any]] | None) -> bool:
    if a is None or b is None:
        return True  # a whole-table scope meets every partition
    keys_a = {tuple(sorted(p.items())) for p in a}
    keys_b = {tuple(sorted(p.items())) for p in b}
    return bool(keys_a & keys_b)
