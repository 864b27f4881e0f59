"""Policy `delta`: Delta Lake's optimistic concurrency at file or row level (seeds 003/004).

This is conflict-rules §13.1, the normative validation algorithm, one function per rule in rule order
(`RULES`); each returns the intent, rebased where the rule rebases, or the named exception, and `judge`
is a plain loop over them. The recovered matrices of §8.1 are what these rules produce,
not a separate table: tests check every row of both matrices against this module.

Row-level concurrency (RLC: deletion vectors on and an unpartitioned table) moves rules 5 and 6 from files
to rows. Two writers that hide different rows of the same file through deletion vectors are rebased by
merging the vectors; a deletion vector on a file that a plain OPTIMIZE rewrote is moved onto the output
through the output's ordered lineage (D-25's row ids, computed from metadata alone).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from dataclasses import replace

from acidtables.core.commit.conflicts.common import (
    Verdict,
    conflict,
    metadata_changed,
    protocol_changed,
    same_application,
)
from acidtables.core.errors import (
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentModificationException,
)
from acidtables.core.expressions import might_match, restrict_to_columns
from acidtables.core.log.operations import IsolationLevel, OpClass
from acidtables.core.log.records import CommitRecord, DataFile, TableMetadata


def rule_1_protocol_changed(winner: CommitRecord, intent: CommitRecord, table: TableMetadata) -> Verdict:
    """Rule 1: ProtocolChangedException when the winner changed the protocol or created the table too."""
    return protocol_changed(winner, intent, table) or intent


def rule_2_metadata_changed(winner: CommitRecord, intent: CommitRecord, table: TableMetadata) -> Verdict:
    """Rule 2: MetadataChangedException when the winner committed a metadata action."""
    return metadata_changed(winner, intent, table) or intent


def rule_3_concurrent_transaction(winner: CommitRecord, intent: CommitRecord, table: TableMetadata) -> Verdict:
    """Rule 3: the winner wrote for an application id this transaction writes for."""
    return same_application(winner, intent, table) or intent


def rule_4_concurrent_append(winner: CommitRecord, intent: CommitRecord, table: TableMetadata) -> Verdict:
    """Rule 4: the winner added data where this transaction read."""
    return _appended_where_read(winner, intent, table) or intent


def _appended_where_read(
    winner: CommitRecord, intent: CommitRecord, table: TableMetadata
) -> ConcurrentModificationException | None:
    if intent.blind_append:
        return None
    if not intent.operation.changes_data:
        # A compaction, clustering or ALTER: snapshot isolation (R7). Decided by the operation, not by
        # what the commit ended up writing: a DELETE whose predicate matched nothing writes nothing,
        # yet it read, and a concurrent append of matching rows must still fail it (D-21, D-23).
        return None
    write_serializable = (
        intent.isolation_level or IsolationLevel.WRITE_SERIALIZABLE
    ) is IsolationLevel.WRITE_SERIALIZABLE
    if winner.blind_append and write_serializable and intent.metadata is None:
        return None  # D-26: blind appends do not conflict under WriteSerializable
    rows = table.rlc_in_effect
    rewritten = winner.removed_paths()
    # D-15: only files added with dataChange=true are appends
    candidates = [f for f in winner.adds if f.data_change]
    if rows:
        # rows: a deletion-vector update re-adds the same file, which adds no row
        candidates = [f for f in candidates if f.path not in rewritten]
    if rows or table.conflict_detection == "statistics":
        # Each file's statistics (min/max, null counts) stand in for its rows: a file conflicts unless
        # they prove that none of its rows satisfies the predicate; a column without them is unknown.
        predicates = list(intent.read_predicates)
        file_bounds = DataFile.bounds
    else:
        # The rules' default without RLC: only partition values are compared (D-22), so a predicate's
        # data-column parts widen to TRUE and one that mixes columns with no partition filter to extract
        # (`p = 1 OR year > 2019`) reads the whole table and meets every added file.
        partition_columns = frozenset(table.partition_by)
        predicates = [restrict_to_columns(p, partition_columns) for p in intent.read_predicates]
        file_bounds = DataFile.partition_bounds
    for file in candidates:
        bounds = file_bounds(file)
        if intent.reads_whole_table or any(might_match(p, bounds) for p in predicates):
            return conflict(ConcurrentAppendException, winner, intent, table, f"added {file.path}", file=file)
    return None


def _new_positions(before: DataFile, after: DataFile) -> set[int]:
    return set(after.deletion_vector or ()) - set(before.deletion_vector or ())


def _live_positions(file: DataFile) -> set[int]:
    return set(range(file.rows)) - set(file.deletion_vector or ())


def _map_onto_output(output: DataFile, inputs: dict[str, DataFile], path: str, positions: set[int]) -> set[int]:
    """Row ids through an ordered lineage: the output holds its inputs' live rows in order, so position
    `p` of input `path` is the output row after all earlier inputs' live rows and the live rows before p."""
    offset = 0
    for source in output.lineage:
        entry = inputs[source]
        hidden = sorted(entry.deletion_vector or ())
        if source == path:
            return {offset + p - bisect_left(hidden, p) for p in positions if p not in set(hidden)}
        offset += entry.rows - len(hidden)
    raise KeyError(path)


def _rebase_rows(winner: CommitRecord, intent: CommitRecord, table: TableMetadata) -> Verdict:
    """Rule 5's row-level form (with RLC, or deletion vectors on and a plain OPTIMIZE as the winner):
    rebase deletion-vector changes instead of failing. A file this transaction rewrites whole (not
    through a deletion vector) and the winner also changed fails with ConcurrentDeleteRead; an
    OPTIMIZE's inputs are left to rule 6.
    """
    plain_optimize = winner.op_class is OpClass.OPT
    w_removed = {f.path: f for f in winner.removes}
    if not w_removed.keys() & intent.removed_paths():
        return intent
    w_added = {f.path: f for f in winner.adds}
    l_added = {f.path: f for f in intent.adds}
    removes: list[DataFile] = []
    moved: dict[str, DataFile] = {}  # winner's outputs that now carry our deletion vector, by path
    dropped_adds: set[str] = set()
    for old in intent.removes:
        if old.path not in w_removed:
            removes.append(old)
            continue
        mine = l_added.get(old.path)
        if mine is None and intent.op_class in (OpClass.OPT, OpClass.OPTZ):
            removes.append(old)  # rule 6 decides what happens to a compaction's inputs
            continue
        # A job that deleted every live row of a file removes it instead of re-adding it with a full
        # deletion vector: as rows, it hid all of them.
        ours = _new_positions(old, mine) if mine is not None else _live_positions(old)
        theirs = w_added.get(old.path)
        if theirs is not None:
            # both only hid rows of the same file: fine unless a row is in both (D-23)
            if ours & _new_positions(w_removed[old.path], theirs):
                return conflict(
                    ConcurrentDeleteReadException,
                    winner,
                    intent,
                    table,
                    f"a row of {old.path} was deleted or modified by both",
                    file=old,
                )
            removes.append(theirs)
            if mine is not None:
                merged = tuple(sorted(set(theirs.deletion_vector or ()) | ours))
                l_added[old.path] = replace(mine, deletion_vector=merged)
            continue
        outputs = [o for o in winner.adds if old.path in o.lineage]
        if not (
            plain_optimize
            and len(outputs) == 1
            and outputs[0].ordered_lineage
            and all(p in w_removed for p in outputs[0].lineage)
        ):
            # D-25: no row ids to follow the rows to their new file; fall back to the file-level rule
            return conflict(ConcurrentDeleteReadException, winner, intent, table, f"{old.path} was rewritten", file=old)
        output = moved.get(outputs[0].path, outputs[0])
        mapped = _map_onto_output(output, w_removed, old.path, ours)
        moved[output.path] = replace(
            output, deletion_vector=tuple(sorted(set(output.deletion_vector or ()) | mapped)), data_change=True
        )
        dropped_adds.add(old.path)
    for path, output in moved.items():
        removes.append(w_added[path])
        l_added[path] = output
    adds = tuple(f for p, f in l_added.items() if p not in dropped_adds)
    return replace(intent, removes=tuple(removes), adds=adds)


def rule_5_concurrent_delete_read(winner: CommitRecord, intent: CommitRecord, table: TableMetadata) -> Verdict:
    """Rule 5: the winner removed a file this transaction read (or any file, if it read the whole table).

    With RLC, or when the winner is a plain OPTIMIZE and deletion vectors are on, the rule is about rows:
    the transaction is rebased (`_rebase_rows`) and fails only if a row it modifies was deleted or
    modified by the winner (D-23, D-25)."""
    if table.rlc_in_effect or (table.deletion_vectors and winner.op_class is OpClass.OPT):
        return _rebase_rows(winner, intent, table)
    read = set(intent.read_files)
    for file in winner.removes:
        if file.path in read:
            return conflict(ConcurrentDeleteReadException, winner, intent, table, f"removed {file.path}", file=file)
    if intent.reads_whole_table and winner.removes:
        return conflict(
            ConcurrentDeleteReadException,
            winner,
            intent,
            table,
            "this transaction read the whole table",
            file=winner.removes[0],
        )
    return intent


def rule_6_concurrent_delete_delete(winner: CommitRecord, intent: CommitRecord, table: TableMetadata) -> Verdict:
    """Rule 6: the winner removed a file this transaction also removes.

    With deletion vectors on, a plain OPTIMIZE still succeeds: it drops the output bins whose inputs are
    gone (D-24), which can leave it an empty commit; it never resurrects or duplicates rows.
    """
    # A remove of the entry the winner itself re-added (a deletion vector rebased by rule 5) removes
    # what is live now, not the file the winner removed.
    live_now = {f.path: f for f in winner.adds}
    both = {f.path for f in intent.removes if f.path in winner.removed_paths() and live_now.get(f.path) != f}
    if not both:
        return intent
    if table.deletion_vectors and intent.op_class is OpClass.OPT:
        kept_adds, dropped_inputs = [], set()
        for output in intent.adds:
            if set(output.lineage) & both:
                dropped_inputs |= set(output.lineage)
            else:
                kept_adds.append(output)
        if both <= dropped_inputs:
            removes = tuple(f for f in intent.removes if f.path not in dropped_inputs)
            return replace(intent, adds=tuple(kept_adds), removes=removes)
    first = min((f for f in intent.removes if f.path in both), key=lambda f: f.path)
    return conflict(ConcurrentDeleteDeleteException, winner, intent, table, f"both remove {first.path}", file=first)


#: §13.1 in rule order; each returns the (possibly rebased) intent or the named exception
RULES: tuple[Callable[[CommitRecord, CommitRecord, TableMetadata], Verdict], ...] = (
    rule_1_protocol_changed,
    rule_2_metadata_changed,
    rule_3_concurrent_transaction,
    rule_4_concurrent_append,
    rule_5_concurrent_delete_read,
    rule_6_concurrent_delete_delete,
)


def judge(winner: CommitRecord, intent: CommitRecord, table: TableMetadata) -> Verdict:
    """Apply the rules in order to one winning commit: the first exception fails the transaction;
    otherwise the intent, rebased by the rules that rebase, goes on to the next winner."""
    for rule in RULES:
        verdict = rule(winner, intent, table)
        if isinstance(verdict, ConcurrentModificationException):
            return verdict
        intent = verdict
    return intent
