"""The conflict rules as data, written down again from the seeds and conflict-rules.md (issue 10):
the checker re-judges every committed commit against the commits that landed under it with these
tables, never with the committer's own code (acidtables.core.commit.conflicts), so a bug there that lets a
forbidden pair through is caught here.

Only the pairs that MUST fail are listed: a committed later job (L) that meets one of them in its
window is an anomaly. What may pass is left to the committer (rebases are its business). Each commit
arrives as a plain description (`describe` in the checker): the log entry's fields, read as JSON.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: MaxCompute Delta tables (seeds 000/002; `maxcompute`): earlier class -> later classes that fail,
#: within one partition. IO/T = INSERT OVERWRITE and TRUNCATE; II = INSERT INTO; UD = UPDATE, DELETE,
#: MERGE; MinC / MajC = minor / major compaction; CLU = clustering, which D-05 makes succeed with II in
#: both orders and behave like MajC against everything else.
MC_DELTA_FAILS: dict[str, frozenset[str]] = {
    "IO/T": frozenset({"II", "UD", "MinC", "MajC", "CLU"}),
    "II": frozenset({"II", "UD", "MajC"}),
    "UD": frozenset({"II", "UD", "MajC", "CLU"}),
    "MinC": frozenset({"MinC"}),
    "MajC": frozenset({"MinC", "MajC", "CLU"}),
    "CLU": frozenset({"MinC", "MajC", "CLU"}),
}

#: MaxCompute transactional tables (seed 001; `maxcompute-transactional`): INSERTs never fail; UPDATE,
#: DELETE and MERGE fail when their target changed; a small-file merge (SFM, every compaction and
#: clustering there) fails when anything was written to its partition first (conflict-rules §3.1).
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
    # Table.repair removes the entries of files that are gone: a DELETE of them (issue 24, item 4)
    "repair": "UD",
    "minor_compact": "MinC",
    "major_compact": "MajC",
    "cluster": "CLU",
}

#: operations that rewrite rows into new files without changing them
REWRITES = frozenset({"minor_compact", "major_compact", "cluster"})

#: operations that are no logical data change: compactions, clustering and ALTER are judged with
#: snapshot isolation, so a concurrent append never fails them (§13.1 rule 4, R7)
NO_DATA_CHANGE = frozenset({"minor_compact", "major_compact", "cluster", "alter", "upgrade_protocol", "create_table"})


def mc_class(policy: str, operation: str) -> str | None:
    cls = MC_CLASS.get(operation)
    if policy == "maxcompute-transactional" and cls in ("MinC", "MajC", "CLU"):
        return "SFM"
    return cls


def must_fail(policy: str, earlier: Mapping[str, Any], later: Mapping[str, Any]) -> str | None:
    """Why `later` must have failed with `earlier` in its window (None: the rules let it through)."""
    if earlier["protocol"]:
        return "the earlier changed the protocol (ProtocolChangedException, §13.1 rule 1)"
    if earlier["is_metadata"]:
        return "a metadata change fails every overlapping write (MetadataChangedException, §1.5, D-13)"
    shared = sorted(set(earlier["app_ids"]) & set(later["app_ids"]))
    if shared:
        return f"both wrote for application id {shared[0]!r} (ConcurrentTransactionException, D-27)"
    if policy in ("maxcompute", "maxcompute-transactional"):
        return _maxcompute(policy, earlier, later)
    return _delta(earlier, later)


def _maxcompute(policy: str, earlier: Mapping[str, Any], later: Mapping[str, Any]) -> str | None:
    if not _partitions_meet(earlier["partitions"], later["partitions"]):
        return None
    table = MC_DELTA_FAILS if policy == "maxcompute" else MC_TXN_FAILS
    e_cls = mc_class(policy, str(earlier["operation"]))
    l_cls = mc_class(policy, str(later["operation"]))
    if e_cls is not None and l_cls is not None and l_cls in table.get(e_cls, frozenset()):
        return f"{e_cls} then {l_cls} in one partition: the later fails ({policy} matrix)"
    return None


def _delta(earlier: Mapping[str, Any], later: Mapping[str, Any]) -> str | None:
    """§13.1 rules 4-6. The runner's writers rewrite whole files (no deletion vectors of their own), so
    with row-level concurrency rule 5 is about rows: a file the earlier removed that the later only read
    rebases it (a compaction drops the bin), and only a file both removed is a conflict (rule 6)."""
    if _appended_where_read(earlier, later):
        return "the earlier added data where the later read (ConcurrentAppendException, §13.1 rule 4)"
    removed = set(earlier["removes"])
    read = set(later["read_files"])
    if not later["rlc"] and (removed & read or (later["reads_whole_table"] and removed)):
        return "the earlier removed a file the later read (ConcurrentDeleteReadException, §13.1 rule 5)"
    if removed & set(later["removes"]):
        return "both removed the same file (ConcurrentDeleteDeleteException, §13.1 rule 6)"
    return None


def _appended_where_read(earlier: Mapping[str, Any], later: Mapping[str, Any]) -> bool:
    if later["blind_append"] or later["operation"] in NO_DATA_CHANGE:
        return False
    write_serializable = (later["isolation_level"] or "WriteSerializable") == "WriteSerializable"
    if earlier["blind_append"] and write_serializable and not later["is_metadata"]:
        return False  # D-26
    # Under acidtables.conflictDetection=statistics the committer may also prove from an appended file's
    # min/max that no row of it matches; the checker keeps no statistics evaluator of its own, so there a
    # failure is required only where the partition values alone decide a match.
    undecided_conflicts = not later["statistics"]
    for added in earlier["adds"]:
        if not added["data_change"]:
            continue  # D-15: a rewrite's output is no append
        if later["reads_whole_table"] or any(
            _matches(may_match(p, added["partition"], later["partition_by"]), undecided_conflicts)
            for p in later["read_predicates"]
        ):
            return True
    return False


def _matches(result: bool | None, undecided: bool) -> bool:
    return undecided if result is None else result


def may_match(predicate: Sequence[Any], partition: Mapping[str, Any], partition_by: Sequence[str]) -> bool | None:
    """The stored predicate (its JSON form) against one file's partition values: True, False, or None
    when it depends on a data column (without row-level concurrency those parts widen to true, §13.1)."""
    kind = predicate[0]
    if kind == "const":
        return bool(predicate[1])
    if kind in ("and", "or"):
        results = [may_match(c, partition, partition_by) for c in predicate[1]]
        decided, undecided = (False, True) if kind == "and" else (True, False)
        if decided in results:
            return decided
        return None if None in results else undecided
    if kind == "not":
        inner = may_match(predicate[1], partition, partition_by)
        return None if inner is None else not inner
    column = predicate[1]
    if column not in partition_by:
        return None
    value = partition.get(column)
    if kind == "isnull":
        return (value is None) != bool(predicate[2])
    if value is None:
        return False  # SQL: a comparison with NULL is never true
    if kind == "in":
        return bool(value in predicate[2]) != bool(predicate[3])
    if kind == "cmp":
        op, other = predicate[2], predicate[3]
        try:
            if op in ("=", "!="):
                return bool(value == other) is (op == "=")
            ordered = {"<": value < other, "<=": value <= other, ">": value > other, ">=": value >= other}
        except TypeError:
            return None
        return bool(ordered[op])
    raise ValueError(f"the checker does not know predicate node {kind!r}")


def _partitions_meet(a: list[dict[str, Any]] | None, b: list[dict[str, Any]] | None) -> bool:
    if a is None or b is None:
        return True  # a whole-table scope meets every partition
    keys_a = {tuple(sorted(p.items())) for p in a}
    keys_b = {tuple(sorted(p.items())) for p in b}
    return bool(keys_a & keys_b)
