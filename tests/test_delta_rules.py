"""The Delta Lake rules (seeds 003/004, conflict-rules §8.1 and §13.1), run as real interleavings.

Three table settings cover both recovered matrices: `files` (unpartitioned, deletion vectors off) and
`partitioned-dv` (partitioned, deletion vectors on) are the "without row-level concurrency" table;
`rlc` (unpartitioned, deletion vectors on) is the "with row-level concurrency" table. Each matrix row is
run in both orders, at both isolation levels, on the same file or row ("can conflict") and, for the
"can conflict" rows, on different partitions or rows (must not conflict). The expected results are
written here from §8.1 and §13.1, not derived from the code under test.
"""

from __future__ import annotations

import itertools
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tests.jobs import assert_invariants, live_tokens, stage, tokens_of, with_deletion_vector

from acidtables import Catalog, Table, Transaction
from acidtables.core.log.records import CONFLICT_DETECTION_PROPERTY, ColumnStats, DataFile
from acidtables.errors import (
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentModificationException,
    ConcurrentTransactionException,
    InvalidArgumentError,
    MetadataChangedException,
    ProtocolChangedException,
)

SER, WS = "Serializable", "WriteSerializable"
_n = itertools.count()


@dataclass
class DeltaJob:
    tx: Transaction
    name: str
    removed: Counter[str]
    added: Counter[str]


def make_table(catalog: Catalog, setting: str, level: str) -> Table:
    """`setting`: files (no deletion vectors), partitioned-dv, rlc, and the two first with
    acidtables.conflictDetection=statistics (files-statistics, partitioned-statistics)."""
    partitioned = setting.startswith("partitioned")
    statistics = setting.endswith("-statistics")
    return catalog.create_table(
        f"lake.t{next(_n)}",
        schema="id BIGINT, dt STRING, v STRING",
        partition_by=["dt"] if partitioned else [],
        isolation_level=level,
        row_level_concurrency=setting in ("partitioned-dv", "partitioned-statistics", "rlc"),
        properties={CONFLICT_DETECTION_PROPERTY: "statistics"} if statistics else None,
    )


def part(table: Table, name: str = "p1") -> str | None:
    return name if table.metadata.partition_by else None


def seed(table: Table) -> None:
    """Two files: ids 1-4 (tokens t1..t4) and 5-8, in every partition the tests use."""
    for p in ("p1", "p2") if table.metadata.partition_by else (None,):
        tx = table.begin("insert_into")
        tx.add_files(
            [
                stage(tx, p, tokens=[f"t{i}{p or ''}" for i in range(1, 5)], ids=[1, 2, 3, 4]),
                stage(tx, p, tokens=[f"t{i}{p or ''}" for i in range(5, 9)], ids=[5, 6, 7, 8]),
            ]
        )
        tx.commit()


def ins(table: Table, row_id: int = 100, partition: str = "p1") -> DeltaJob:
    tx = table.begin("insert_into")
    token = f"i{row_id}-{next(_n)}"
    tx.add_files([stage(tx, part(table, partition), tokens=[token], ids=[row_id])])
    return DeltaJob(tx, "INSERT", Counter(), Counter([token]))


def modify(table: Table, op: str, row_id: int = 2, partition: str = "p1") -> DeltaJob:
    """UPDATE/DELETE/MERGE of one row: a deletion vector when the table has them, else a rewrite."""
    p = part(table, partition)
    tx = table.begin(op)
    where = f"id = {row_id}" if p is None else f"dt = '{p}' AND id = {row_id}"
    if op == "merge":
        where = where.replace(f"id = {row_id}", f"id IN ({row_id}, {200 + row_id})")
    candidates = tx.scan(where)
    victim_token = f"t{row_id}{p or ''}"
    victim = next(f for f in candidates if victim_token in tokens_of(f))
    pos = tokens_of(victim).index(victim_token)
    tx.remove_files([victim])
    if table.metadata.row_level_concurrency:
        tx.add_files([with_deletion_vector(victim, [pos])])
    else:
        kept = [t for t in tokens_of(victim) if t != victim_token]
        ids = [int(t[1]) for t in kept] or [0]  # tokens are t<id><partition>, ids 1-8
        tx.add_files([stage(tx, p, tokens=kept, ids=ids)])
    added: list[str] = []
    if op in ("update", "merge"):
        new = f"u{row_id}-{next(_n)}"
        tx.add_files([stage(tx, p, tokens=[new], ids=[row_id])])
        added.append(new)
    if op == "merge":
        inserted = f"m{200 + row_id}-{next(_n)}"  # "when not matched insert" of a new key
        tx.add_files([stage(tx, p, tokens=[inserted], ids=[200 + row_id])])
        added.append(inserted)
    return DeltaJob(tx, op.upper(), Counter([victim_token]), Counter(added))


def optimize(table: Table, op: str = "minor_compact", partition: str = "p1") -> DeltaJob:
    """Compaction (or clustering = Z-order) of a partition's files into one ordered output."""
    p = part(table, partition)
    tx = table.begin(op)
    inputs = [f for f in tx.snapshot.files if p is None or f.partition.get("dt") == p]
    tx.remove_files(inputs)
    tokens, ids = [], []
    for f in inputs:
        hidden = set(f.deletion_vector or ())
        tokens += [t for i, t in enumerate(tokens_of(f)) if i not in hidden]
    ids = [int(str(f.stats["id"].min)) for f in inputs] + [int(str(f.stats["id"].max)) for f in inputs]
    out = stage(tx, p, tokens=tokens, ids=ids, lineage=[f.path for f in inputs], ordered=True)
    tx.add_files([out])
    return DeltaJob(tx, "OPTIMIZE" if op != "cluster" else "OPTIMIZE ZORDER", Counter(), Counter())


def job(table: Table, kind: str, *, row_id: int | None = None, partition: str = "p1") -> DeltaJob:
    """A job of a §8.1 class; `row_id` picks the row an INS adds or an UPD/DEL/MRG modifies."""
    if kind == "INS":
        return ins(table, 100 if row_id is None else row_id, partition)
    if kind in ("UPD", "DEL", "MRG"):
        return modify(
            table, {"UPD": "update", "DEL": "delete", "MRG": "merge"}[kind], 2 if row_id is None else row_id, partition
        )
    if kind == "OPT":
        return optimize(table, partition=partition)
    if kind == "OPTZ":
        return optimize(table, "cluster", partition=partition)
    raise ValueError(kind)


def run(table: Table, earlier: DeltaJob, later: DeltaJob, expected: type[Exception] | None) -> None:
    base = live_tokens(table.snapshot())
    won = earlier.tx.commit()
    after_e = base - earlier.removed + earlier.added
    if expected is None:
        info = later.tx.commit()
        assert (info.version, info.retries) == (won.version + 1, 1)
        assert live_tokens(table.snapshot()) == after_e - later.removed + later.added
        assert_invariants(table)
    else:
        with pytest.raises(ConcurrentModificationException) as caught:
            later.tx.commit()
        assert type(caught.value) is expected, f"raised {type(caught.value).__name__}: {caught.value}"
        assert caught.value.winning_version == won.version
        assert live_tokens(table.snapshot()) == after_e
        assert_invariants(table)


UDM = ("UPD", "DEL", "MRG")
A, DR, DD = ConcurrentAppendException, ConcurrentDeleteReadException, ConcurrentDeleteDeleteException


def without_rlc_cases() -> list[Any]:
    """§8.1 'Without RLC', overlapping on the same file. `files`: DVs off; `partitioned-dv`: DVs on."""
    out = []
    for setting in ("files", "partitioned-dv"):
        dv = setting == "partitioned-dv"
        for level in (SER, WS):
            rows: list[tuple[str, str, type[Exception] | None]] = [("INS", "INS", None)]
            for m in UDM:
                rows += [("INS", m, A if level == SER else None), (m, "INS", None)]
                rows += [(m2, m, A) for m2 in UDM]  # the winner's rewritten/re-added file is in L's read
                rows += [("OPT", m, None if dv else DR), (m, "OPT", None if dv else DD)]
                rows += [("OPTZ", m, DR), (m, "OPTZ", DD)]
            rows += [("OPT", "INS", None), ("INS", "OPT", None)]
            rows += [("OPT", "OPT", None if dv else DD), ("OPTZ", "OPTZ", DD), ("OPT", "OPTZ", DD)]
            rows += [("OPTZ", "OPT", None if dv else DD)]
            out += [pytest.param(setting, level, e, lj, x, id=f"{setting}-{level}-{e}->{lj}") for e, lj, x in rows]
    return out


@pytest.mark.parametrize(("setting", "level", "earlier", "later", "expected"), without_rlc_cases())
def test_without_row_level_concurrency(
    catalog: Catalog, setting: str, level: str, earlier: str, later: str, expected: type[Exception] | None
) -> None:
    table = make_table(catalog, setting, level)
    seed(table)
    e, lj = job(table, earlier), job(table, later)
    run(table, e, lj, expected)


def rlc_cases() -> list[Any]:
    """§8.1 'With RLC' (unpartitioned, DVs on): conflicts only on the same row, or with ZORDER."""
    out = []
    for level in (SER, WS):
        rows: list[tuple[str, str, dict[str, int], dict[str, int], type[Exception] | None]] = [
            ("INS", "INS", {}, {}, None),
        ]
        for m in UDM:
            # an insert of a row the modifier's condition selects: a phantom under Serializable (D-23)
            rows += [("INS", m, {"row_id": 2}, {"row_id": 2}, A if level == SER else None)]
            rows += [("INS", m, {"row_id": 300}, {"row_id": 2}, None)]
            rows += [(m, "INS", {"row_id": 2}, {"row_id": 2}, None)]
            for m2 in UDM:
                same = A if m2 in ("UPD", "MRG") else DR  # D-23: a new row version that still matches -> append
                rows += [(m2, m, {"row_id": 2}, {"row_id": 2}, same)]
                rows += [(m2, m, {"row_id": 2}, {"row_id": 3}, None)]  # different rows of the same file
            rows += [
                ("OPT", m, {}, {}, None),
                (m, "OPT", {}, {}, None),
                ("OPTZ", m, {}, {}, DR),
                (m, "OPTZ", {}, {}, DD),
            ]
        rows += [("OPT", "INS", {}, {}, None), ("INS", "OPT", {}, {}, None)]
        rows += [("OPT", "OPT", {}, {}, None), ("OPTZ", "OPTZ", {}, {}, DD)]
        for e, lj, ekw, lkw, x in rows:
            tag = f"{ekw.get('row_id', '')}/{lkw.get('row_id', '')}"
            out.append(pytest.param(level, e, lj, ekw, lkw, x, id=f"rlc-{level}-{e}->{lj}-rows{tag}"))
    return out


@pytest.mark.parametrize(("level", "earlier", "later", "e_kw", "l_kw", "expected"), rlc_cases())
def test_with_row_level_concurrency(
    catalog: Catalog,
    level: str,
    earlier: str,
    later: str,
    e_kw: dict[str, int],
    l_kw: dict[str, int],
    expected: type[Exception] | None,
) -> None:
    table = make_table(catalog, "rlc", level)
    seed(table)
    e = job(table, earlier, row_id=None if earlier == "OPT" else e_kw.get("row_id"))
    lj = job(table, later, row_id=l_kw.get("row_id"))
    run(table, e, lj, expected)


# §8.1 as the document prints it. Pairs are unordered; "can" means the pair conflicts when it overlaps
# (§13.1 decides in which order and with which exception), "cannot" that it never does. "dv: zorder"
# reads "with deletion vectors enabled: cannot conflict unless ZORDER BY is used".
WITHOUT_RLC_MATRIX = [
    # pair                Serializable     WriteSerializable
    ("INS", "INS",        "cannot",        "cannot"),
    ("INS", "UDM",        "can",           "cannot"),
    ("UDM", "UDM",        "can",           "can"),
    ("OPT", "INS",        "cannot",        "cannot"),
    ("OPT", "UDM",        "can; dv: zorder", "can; dv: zorder"),
    ("OPT", "OPT",        "can; dv: zorder", "can; dv: zorder"),
]  # fmt: skip
WITH_RLC_MATRIX = [
    ("INS", "INS",        "cannot",        "cannot"),
    ("INS", "UDM",        "same row",      "cannot"),
    ("UDM", "UDM",        "same row",      "same row"),
    ("OPT", "INS",        "cannot",        "cannot"),
    ("OPT", "UDM",        "zorder",        "zorder"),
    ("OPT", "OPT",        "zorder",        "zorder"),
]  # fmt: skip
_GROUP = {"INS": "INS", "UPD": "UDM", "DEL": "UDM", "MRG": "UDM", "OPT": "OPT", "OPTZ": "OPT"}


def _can_conflict(cell: str, *, dv: bool, zorder: bool, same_row: bool) -> bool:
    return {
        "cannot": False,
        "can": True,
        "can; dv: zorder": zorder or not dv,
        "same row": same_row,
        "zorder": zorder,
    }[cell]


def _cell(matrix: list[tuple[str, str, str, str]], earlier: str, later: str, level: str) -> str:
    pair = {_GROUP[earlier], _GROUP[later]}
    (row,) = [r for r in matrix if {r[0], r[1]} == pair]
    return row[2] if level == SER else row[3]


def test_the_cases_above_are_the_recovered_matrices() -> None:
    """Every case's expectation agrees with the literal §8.1 tables: a "cannot" pair never fails, and a
    pair that can conflict fails in at least one of its two orders."""
    outcomes: dict[tuple[str, str, frozenset[str], bool], list[bool]] = {}
    for case in without_rlc_cases():
        setting, level, earlier, later, expected = case.values
        zorder = "OPTZ" in (earlier, later)
        can = _can_conflict(
            _cell(WITHOUT_RLC_MATRIX, earlier, later, level),
            dv=setting == "partitioned-dv",
            zorder=zorder,
            same_row=True,
        )
        outcomes.setdefault((setting, level, frozenset((earlier, later)), can), []).append(expected is not None)
    for case in rlc_cases():
        level, earlier, later, e_kw, l_kw, expected = case.values
        same_row = earlier == "OPT" or e_kw.get("row_id") == l_kw.get("row_id")
        zorder = "OPTZ" in (earlier, later)
        can = _can_conflict(_cell(WITH_RLC_MATRIX, earlier, later, level), dv=True, zorder=zorder, same_row=same_row)
        pair = frozenset((earlier, later, str(e_kw.get("row_id")), str(l_kw.get("row_id"))))
        outcomes.setdefault(("rlc", level, pair, can), []).append(expected is not None)
    for (setting, level, pair, can_conflict), failures in outcomes.items():
        if not can_conflict:
            assert not any(failures), (setting, level, sorted(pair), "the matrix says cannot conflict")
        else:
            assert any(failures), (setting, level, sorted(pair), "the matrix says can conflict")


@pytest.mark.parametrize("level", [SER, WS])
@pytest.mark.parametrize(("earlier", "later"), [(a, b) for a in ("UPD", "DEL", "OPT") for b in ("UPD", "DEL", "OPT")])
def test_jobs_on_different_partitions_never_conflict(catalog: Catalog, level: str, earlier: str, later: str) -> None:
    table = make_table(catalog, "partitioned-dv", level)
    seed(table)
    run(table, job(table, earlier, partition="p1"), job(table, later, partition="p2"), None)


@pytest.mark.parametrize("level", [SER, WS])
def test_two_merges_inserting_the_same_new_key_conflict(catalog: Catalog, level: str) -> None:
    # D-23: with row-level concurrency, no duplicate keys from two "when not matched insert" clauses
    table = make_table(catalog, "rlc", level)
    seed(table)
    first = modify(table, "merge", row_id=2)
    second = table.begin("merge")
    second.scan("id IN (3, 202)")
    second.add_files([stage(second, None, ids=[202])])
    first.tx.commit()
    with pytest.raises(ConcurrentAppendException):
        second.commit()


def test_update_after_optimize_moves_its_deletion_vector_onto_the_output_row(catalog: Catalog) -> None:
    # D-25 row ids: the hidden row must be exactly row t3 at its new position in the compacted file
    table = make_table(catalog, "rlc", WS)
    seed(table)
    first = modify(table, "delete", row_id=1)
    first.tx.commit()
    opt, upd = optimize(table), modify(table, "update", row_id=3)
    opt.tx.commit()
    upd.tx.commit()
    [output] = [f for f in table.snapshot().files if f.lineage]
    hidden = [tokens_of(output)[i] for i in output.deletion_vector or ()]
    assert hidden == ["t3"]
    assert "t1" not in tokens_of(output)


def test_overwrite_after_blind_append_keeps_the_appended_row_under_write_serializable(catalog: Catalog) -> None:
    # D-34: Delta's WriteSerializable semantics; Serializable prevents it (next test)
    table = make_table(catalog, "partitioned-dv", WS)
    seed(table)
    overwrite = table.begin("insert_overwrite")
    overwrite.remove_files(overwrite.scan("dt = 'p1'"))
    appended = ins(table)
    appended.tx.commit()
    overwrite.commit()
    assert set(live_tokens(table.snapshot(), "p1")) == set(appended.added)


def test_overwrite_after_blind_append_fails_under_serializable(catalog: Catalog) -> None:
    table = make_table(catalog, "partitioned-dv", SER)
    seed(table)
    overwrite = table.begin("insert_overwrite")
    overwrite.remove_files(overwrite.scan("dt = 'p1'"))
    ins(table).tx.commit()
    with pytest.raises(ConcurrentAppendException):
        overwrite.commit()


def test_merge_without_explicit_partition_conflicts_with_update_in_another_partition(catalog: Catalog) -> None:
    # seed 003/004: a MERGE whose condition does not name the target partition reads the whole table
    table = make_table(catalog, "partitioned-dv", WS)
    seed(table)
    merge = table.begin("merge")
    # not understood, so recorded as a read of the whole table (a scan() in a MERGE refuses it instead: it
    # would return every file to remove)
    merge.record_read(predicate="t.user_id = s.user_id")
    merge.add_files([stage(merge, "p1", ids=[9])])
    modify(table, "update", partition="p2").tx.commit()
    with pytest.raises(ConcurrentAppendException):
        merge.commit()


def test_merge_naming_the_target_partition_does_not_conflict_with_another_partition(catalog: Catalog) -> None:
    table = make_table(catalog, "partitioned-dv", WS)
    seed(table)
    merge = table.begin("merge")
    merge.scan("dt = 'p1' AND id IN (1, 2)")
    merge.add_files([stage(merge, "p1", ids=[9])])
    modify(table, "update", partition="p2").tx.commit()
    assert merge.commit().retries == 1


@pytest.mark.parametrize("setting", ["files", "rlc"])
@pytest.mark.parametrize("later", ["INS", "UPD", "OPT"])
def test_metadata_change_fails_every_overlapping_write(catalog: Catalog, setting: str, later: str) -> None:
    table = make_table(catalog, setting, WS)
    seed(table)
    lj = job(table, later)
    catalog.alter_table(table.name, properties={"owner": "data-eng"})
    with pytest.raises(MetadataChangedException):
        lj.tx.commit()


def test_isolation_level_change_fails_overlapping_writes_and_applies_to_new_ones(catalog: Catalog) -> None:
    # D-32
    table = make_table(catalog, "files", WS)
    seed(table)
    running = modify(table, "update")
    catalog.alter_table(table.name, isolation_level=SER)
    with pytest.raises(MetadataChangedException):
        running.tx.commit()
    upd = modify(table, "update", row_id=3)
    ins(table).tx.commit()
    with pytest.raises(ConcurrentAppendException):  # blind appends now conflict
        upd.tx.commit()


def test_protocol_change_fails_a_blind_append(catalog: Catalog) -> None:
    table = make_table(catalog, "files", WS)
    lj = ins(table)
    upgrade = table.begin("upgrade_protocol")
    upgrade.upgrade_protocol(writer_version=2, features=["deletionVectors"])
    upgrade.commit()
    with pytest.raises(ProtocolChangedException):
        lj.tx.commit()


def test_concurrent_create_of_the_same_table_raises_protocol_changed(catalog: Catalog) -> None:
    # The race: both writers checked the name was free before either created it (two-phase create)
    first = catalog.prepare_create_table("lake.race", schema="id BIGINT")
    second = catalog.prepare_create_table("lake.race", schema="id BIGINT, v STRING")
    marker = os.path.join(second.storage.location, "_acidtables", "owner.json")
    assert os.path.exists(marker)  # prepared: the location is claimed
    created = first.commit()
    with pytest.raises(ProtocolChangedException):
        second.commit()
    assert catalog.list_tables("lake") == ["lake.race"]
    assert catalog.table("lake.race").table_id == created.table_id
    # the loser's claimed location was given back
    assert not os.path.exists(marker)


@pytest.mark.parametrize("policy", ["delta", "maxcompute-transactional"])
def test_two_writers_with_the_same_application_id_conflict(catalog: Catalog, policy: str) -> None:
    table = catalog.create_table(f"lake.app_{policy.replace('-', '_')}", schema="id BIGINT", conflict_policy=policy)
    first, second = ins(table), ins(table)
    first.tx.set_app_transaction("stream-1", 7)
    second.tx.set_app_transaction("stream-1", 8)
    first.tx.commit()
    with pytest.raises(ConcurrentTransactionException):
        second.tx.commit()


def test_an_already_applied_application_version_is_skipped(catalog: Catalog) -> None:
    table = make_table(catalog, "files", WS)
    first = ins(table)
    first.tx.set_app_transaction("stream-1", 7)
    landed = first.tx.commit()
    replayed = ins(table)
    replayed.tx.set_app_transaction("stream-1", 7)
    info = replayed.tx.commit()
    assert info.skipped and info.version == landed.version
    assert table.version == landed.version
    assert live_tokens(table.snapshot()) == Counter(first.added)


def test_compaction_output_counts_as_a_rewrite_not_an_append(catalog: Catalog) -> None:
    # D-15: files a compaction adds have dataChange=false and are not appends
    table = make_table(catalog, "files", SER)
    seed(table)
    upd = modify(table, "update")
    optimize(table).tx.commit()
    with pytest.raises(ConcurrentDeleteReadException):
        upd.tx.commit()
    adds = table.commits(table.version)[0].adds
    assert adds and all(not f.data_change for f in adds)


def test_files_added_are_recorded_relative_to_the_location(catalog: Catalog) -> None:
    table = make_table(catalog, "files", WS)
    j = ins(table)
    j.tx.commit()
    [f] = table.snapshot().files
    assert isinstance(f, DataFile) and f.path.startswith("data/")


# --- what a job read is recorded whatever it writes (§17, D-21, INS-R) ---------------------------------

SETTINGS = ("files", "partitioned-dv", "rlc", "files-statistics", "partitioned-statistics")


def no_match(table: Table, op: str) -> DeltaJob:
    """A DELETE / UPDATE / MERGE whose predicate (row 100 of p1) matches nothing: it writes nothing."""
    tx = table.begin(op)
    p = part(table)
    assert tx.scan("id = 100" if p is None else f"dt = '{p}' AND id = 100") == []  # statistics prune every file
    return DeltaJob(tx, op.upper(), Counter(), Counter())


def reading_insert(table: Table, partition: str = "p1") -> DeltaJob:
    """INS-R: an INSERT whose query read the target's partition (rows 1-8) and appends a derived row."""
    tx = table.begin("insert_into")
    p = part(table, partition)
    tx.scan(None if p is None else f"dt = '{p}'")
    token = f"d{next(_n)}"
    tx.add_files([stage(tx, p, tokens=[token], ids=[300])])
    return DeltaJob(tx, "INSERT", Counter(), Counter([token]))


@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("op", ["delete", "update", "merge"])
def test_a_write_that_matched_nothing_adds_no_version_under_serializable(
    catalog: Catalog, setting: str, op: str
) -> None:
    # Delta's skipRecordingEmptyCommits: it changed nothing, so it is serialised at its read version and
    # an append of a row it looked for cannot fail it; no version records it (so D-21 holds: no version
    # records its delete and still holds the appended row)
    table = make_table(catalog, setting, SER)
    seed(table)
    later = no_match(table, op)
    won = ins(table, row_id=100).tx.commit()
    history = table.history()
    info = later.tx.commit()
    assert info.skipped and info.version == later.tx.read_version == won.version - 1
    assert table.history() == history and table.snapshot().version == won.version
    assert_invariants(table)


@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("op", ["delete", "update", "merge"])
def test_a_write_that_matched_nothing_still_meets_an_append_of_what_it_read_under_write_serializable(
    catalog: Catalog, setting: str, op: str
) -> None:
    # Delta records the empty commit at WriteSerializable; a blind append cannot fail it there (rule 4)
    table = make_table(catalog, setting, WS)
    seed(table)
    later = no_match(table, op)
    run(table, ins(table, row_id=100), later, None)


@pytest.mark.parametrize("setting", SETTINGS)
def test_a_write_that_matched_nothing_is_recorded_with_its_read_under_write_serializable(
    catalog: Catalog, setting: str
) -> None:
    table = make_table(catalog, setting, WS)
    seed(table)
    info = no_match(table, "delete").tx.commit()
    record = table.commits(info.version)[0]
    assert not info.skipped
    assert record.read_predicates and not record.blind_append and not (record.adds or record.removes)
    assert info.time_version is not None  # a DELETE is a data operation even when it deleted nothing


def test_a_write_that_changed_something_is_judged_under_serializable(catalog: Catalog) -> None:
    # the control for the skip: a DELETE that deleted a row fails against an append of a row it would
    # have deleted (rule 4)
    table = make_table(catalog, "partitioned-dv", SER)
    seed(table)
    delete = modify(table, "delete", row_id=1)
    run(table, ins(table, row_id=1), delete, ConcurrentAppendException)


@pytest.mark.parametrize("level", [SER, WS])
@pytest.mark.parametrize("setting", SETTINGS)
def test_an_insert_that_read_the_target_is_not_a_blind_append(catalog: Catalog, level: str, setting: str) -> None:
    table = make_table(catalog, setting, level)
    seed(table)
    info = reading_insert(table).tx.commit()
    assert info.is_blind_append is False
    assert table.history(limit=1)[0].is_blind_append is False
    assert table.commits(info.version)[0].op_class.value == "INS-R"


@pytest.mark.parametrize("level", [SER, WS])
@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("earlier", ["INS", "UPD", "DEL"])
def test_an_insert_that_read_the_target_is_judged_like_a_merge(
    catalog: Catalog, level: str, setting: str, earlier: str
) -> None:
    """Rules 4 and 5 apply to INS-R (S5 footnote 1): a blind append where it read fails it only under
    Serializable; an UPDATE's new rows fail it at both levels; so does a DELETE's rewritten (or, with
    deletion vectors, re-added) file, which rule 4 sees first, except at row level, where a re-added
    file adds no row and L modifies none."""
    table = make_table(catalog, setting, level)
    seed(table)
    winner = job(table, earlier)
    later = reading_insert(table)
    if earlier == "INS":
        expected: type[Exception] | None = ConcurrentAppendException if level == SER else None
    elif earlier == "UPD":
        expected = ConcurrentAppendException
    else:
        expected = None if setting == "rlc" else ConcurrentAppendException
    run(table, winner, later, expected)


@pytest.mark.parametrize("level", [SER, WS])
def test_an_insert_that_read_one_partition_ignores_writes_to_another(catalog: Catalog, level: str) -> None:
    table = make_table(catalog, "partitioned-dv", level)
    seed(table)
    run(table, modify(table, "update", partition="p2"), reading_insert(table, "p1"), None)


# --- rule 4 and the appended files' statistics (issue 24, item 6) ---------------------------------------
#
# With RLC, §13.1 rule 4 compares rows: "it fails if any row W added satisfies L's row predicate". Core
# knows an added file's rows by its statistics only (min/max, null count), so an added file conflicts
# unless its statistics prove that no row of it satisfies the predicate; unknown statistics conflict.
# Without RLC, rule 4 compares partition values only: "an unpartitioned table ... matches any file", and
# D-22 "only predicates on target partition columns narrow the read set". There, statistics never
# rescue a read of a data column, however clearly they put the appended rows outside it - unless the
# table sets acidtables.conflictDetection=statistics (issue 24 item 6), which judges the appended files
# by their statistics as RLC does: fewer false conflicts than Delta Lake, and no missed one.


def _column_stats(values: list[Any]) -> ColumnStats:
    known = [v for v in values if v is not None]
    return ColumnStats(min(known) if known else None, max(known) if known else None, len(values) - len(known))


def staged_rows(
    tx: Transaction, partition: str | None, ids: list[int], v: list[str | None], stats: tuple[str, ...] = ("id", "v")
) -> DataFile:
    """A real file of rows (id, v) with truthful statistics on the columns named in `stats` only (a
    writer that recorded none for the others)."""
    n = next(_n)
    data = {"id": pa.array(ids, pa.int64()), "v": pa.array(v, pa.string())}
    if partition is None:  # unpartitioned: dt is a stored column, NULL here
        data["dt"] = pa.nulls(len(ids), pa.string())
    path = Path(tx.staging_dir) / f"part-{n:05d}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "xb") as out:
        pq.write_table(pa.table(data), out)
    columns: dict[str, list[Any]] = {"id": list(ids), "v": list(v)}
    return DataFile(
        path=str(path),
        partition={} if partition is None else {"dt": partition},
        rows=len(ids),
        size_bytes=path.stat().st_size,
        stats={name: _column_stats(columns[name]) for name in stats},
        extra={"tokens": [f"s{n}-{i}" for i in range(len(ids))]},
    )


def described_table(catalog: Catalog, setting: str, level: str) -> Table:
    """One file of ids 1-4 with v 'a'-'d', statistics on both columns: `id = 100` and `v IS NULL`
    provably match none of its rows."""
    table = make_table(catalog, setting, level)
    tx = table.begin("insert_into")
    tx.add_files([staged_rows(tx, part(table), [1, 2, 3, 4], ["a", "b", "c", "d"])])
    tx.commit()
    return table


def reading(table: Table, op: str, predicate: str) -> DeltaJob:
    """A DELETE / UPDATE whose predicate on data columns matches no row (statistics prune every file),
    and which writes a row of its own (id 500), so that it is judged: a job that changes nothing is not
    recorded at Serializable (test_a_write_that_matched_nothing_adds_no_version_under_serializable)."""
    tx = table.begin(op)
    p = part(table)
    assert tx.scan(predicate if p is None else f"dt = '{p}' AND ({predicate})") == []
    token = f"w{next(_n)}"
    tx.add_files([stage(tx, p, tokens=[token], ids=[500])])
    return DeltaJob(tx, op.upper(), Counter(), Counter([token]))


def blind_append(
    table: Table, ids: list[int], v: list[str | None], stats: tuple[str, ...] = ("id", "v"), partition: str = "p1"
) -> DeltaJob:
    tx = table.begin("insert_into")
    f = staged_rows(tx, part(table, partition), ids, v, stats)
    tx.add_files([f])
    return DeltaJob(tx, "INSERT", Counter(), Counter(tokens_of(f)))


APPENDS = [
    # predicate, appended ids, appended v, statistics recorded, can the statistics prove no row matches
    pytest.param("id = 100", [300], ["x"], ("id", "v"), True, id="outside"),
    pytest.param("id = 100", [100], ["x"], ("id", "v"), False, id="inside"),
    pytest.param("id = 100", [50, 150], ["x", "y"], ("id", "v"), False, id="overlapping-range"),
    pytest.param("id = 100", [300], ["x"], (), False, id="no-statistics"),
    pytest.param("v IS NULL", [300], ["x"], ("id", "v"), True, id="is-null-vs-no-nulls"),
    pytest.param("v IS NULL", [300, 301], ["x", None], ("id", "v"), False, id="is-null-vs-a-null"),
    pytest.param("v IS NULL", [300], ["x"], ("id",), False, id="is-null-vs-unknown-nulls"),
    pytest.param("v = 'zz'", [300, 301], [None, None], ("id", "v"), True, id="compare-vs-only-nulls"),
    pytest.param("id > 100 AND v IS NOT NULL", [300], [None], ("id", "v"), True, id="is-not-null-vs-only-nulls"),
    pytest.param("id > 100 AND v IS NOT NULL", [300], ["x"], ("id", "v"), False, id="is-not-null-vs-a-value"),
]


@pytest.mark.parametrize("level", [SER, WS])
@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize(("predicate", "ids", "v", "stats", "provably_outside"), APPENDS)
def test_a_blind_append_meets_a_read_of_data_columns_by_statistics_with_rlc_or_when_chosen(
    catalog: Catalog,
    level: str,
    setting: str,
    predicate: str,
    ids: list[int],
    v: list[str | None],
    stats: tuple[str, ...],
    provably_outside: bool,
) -> None:
    """WriteSerializable skips blind appends (rule 4, D-26). Under Serializable, with RLC or with
    conflictDetection=statistics the appended file conflicts unless its statistics prove no row satisfies
    the predicate; otherwise any append into a partition the job read conflicts (§13.1 rule 4, D-22)."""
    table = described_table(catalog, setting, level)
    later = reading(table, "delete", predicate)
    by_statistics = setting == "rlc" or setting.endswith("-statistics")
    conflicts = level == SER and (not by_statistics or not provably_outside)
    run(table, blind_append(table, ids, v, stats), later, ConcurrentAppendException if conflicts else None)


@pytest.mark.parametrize("level", [SER, WS])
def test_a_blind_append_to_a_partition_the_job_did_not_read_never_conflicts(catalog: Catalog, level: str) -> None:
    # the partition part of the predicate narrows the read set as before, whatever the appended rows
    table = described_table(catalog, "partitioned-dv", level)
    later = reading(table, "update", "id = 100")
    run(table, blind_append(table, [100], ["x"], partition="p2"), later, None)


def updated_to(table: Table, new_id: int) -> DeltaJob:
    """An UPDATE of row 2 (hidden by a deletion vector) whose new version has id `new_id`."""
    tx = table.begin("update")
    [victim] = tx.scan("id = 2")
    tx.remove_files([victim])
    tx.add_files([with_deletion_vector(victim, [1])])
    new = staged_rows(tx, None, [new_id], ["b2"])
    tx.add_files([new])
    return DeltaJob(tx, "UPDATE", Counter([tokens_of(victim)[1]]), Counter(tokens_of(new)))


@pytest.mark.parametrize("level", [SER, WS])
@pytest.mark.parametrize(("new_id", "expected"), [(100, ConcurrentAppendException), (2, None)])
def test_with_rlc_an_updates_new_row_conflicts_only_when_its_statistics_may_match_at_both_levels(
    catalog: Catalog, level: str, new_id: int, expected: type[Exception] | None
) -> None:
    # not a blind append, so WriteSerializable checks it too; D-23: a new row version matching L's predicate
    table = described_table(catalog, "rlc", level)
    later = reading(table, "delete", "id = 100")
    run(table, updated_to(table, new_id), later, expected)


@pytest.mark.parametrize("op", ["update", "merge"])
def test_statistics_clear_a_no_match_update_or_merge_on_a_partitioned_table_under_serializable(
    catalog: Catalog, op: str
) -> None:
    # the case: a no-match write on a data column against a blind append into the partition it read
    table = described_table(catalog, "partitioned-statistics", SER)
    later = reading(table, op, "id = 100")
    run(table, blind_append(table, [300], ["x"]), later, None)
    # the same append with a matching row still conflicts: no missed conflict
    later = reading(table, op, "id = 100")
    run(table, blind_append(table, [100], ["x"]), later, ConcurrentAppendException)


def test_a_predicate_statistics_cannot_judge_keeps_the_conservative_answer(catalog: Catalog) -> None:
    # a predicate on a column the appended file recorded no statistics for
    table = described_table(catalog, "files-statistics", SER)
    later = reading(table, "delete", "v = 'zz'")
    run(table, blind_append(table, [300], ["x"], stats=("id",)), later, ConcurrentAppendException)


@pytest.mark.parametrize(
    ("policy", "value", "message"),
    [
        ("delta", "rows", "use one of partitions, statistics"),
        ("maxcompute-transactional", "statistics", "applies to the delta policy only"),
    ],
)
def test_conflict_detection_takes_a_known_mode_on_a_delta_table(
    catalog: Catalog, policy: str, value: str, message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        catalog.create_table(
            f"lake.t{next(_n)}",
            schema="id BIGINT",
            conflict_policy=policy,
            properties={CONFLICT_DETECTION_PROPERTY: value},
        )
    table = catalog.create_table(f"lake.t{next(_n)}", schema="id BIGINT", conflict_policy=policy)
    with pytest.raises(InvalidArgumentError, match=message):
        catalog.alter_table(table.name, properties={CONFLICT_DETECTION_PROPERTY: value})
    assert CONFLICT_DETECTION_PROPERTY not in catalog.table(table.name).metadata.properties


def test_switching_to_statistics_is_a_metadata_change_that_later_writes_use(catalog: Catalog) -> None:
    table = described_table(catalog, "files", SER)
    overlapping = reading(table, "delete", "id = 100")
    catalog.alter_table(table.name, properties={CONFLICT_DETECTION_PROPERTY: "statistics"})
    with pytest.raises(MetadataChangedException):
        overlapping.tx.commit()
    table = catalog.table(table.name)
    assert table.metadata.conflict_detection == "statistics"
    later = reading(table, "delete", "id = 100")
    run(table, blind_append(table, [300], ["x"]), later, None)
