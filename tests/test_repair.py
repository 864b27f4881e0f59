"""Missing data files (issue 24, item 4): a commit re-proves the files it adds, `fsck` names every
missing file, and `Table.repair` / `acidtables fsck --repair` commits one version without them, after
a dry run that changes nothing, and never while the storage does not answer."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tests.helpers.tables import staged_parquet
from tests.test_cli import cli_env, run, run_json  # noqa: F401 (cli_env is a fixture)

from acidtables import Catalog, DataFile, Table, Transaction
from acidtables.core import FileKind, Operation
from acidtables.core.log.operations import OpClass
from acidtables.errors import (
    ConcurrentDeleteReadException,
    InvalidArgumentError,
    TransactionConflictException,
)

SCHEMA = "id BIGINT, dt STRING"


def keyed_file(tx: Transaction, dt: str, ids: list[int], name: str) -> DataFile:
    """A merge-on-read changes file as the writers stage it (`_acid_op` and `_acid_seq` included)."""
    relative = f"{tx.storage.relative(tx.staging_dir)}/dt={dt}/{name}"
    path = Path(tx.storage.absolute(relative))
    path.parent.mkdir(parents=True, exist_ok=True)
    data = pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "_acid_op": pa.array(["U"] * len(ids), pa.string()),
            "_acid_seq": pa.nulls(len(ids), pa.int64()),
        }
    )
    with open(path, "xb") as out:
        pq.write_table(data, out)
    return DataFile(relative, {"dt": dt}, rows=len(ids), size_bytes=path.stat().st_size, kind=FileKind.CHANGES)


def two_partitions(catalog: Catalog, name: str = "sales.orders", policy: str | None = None) -> Table:
    """Version 2: one file of 2 rows in dt=a, one of 3 in dt=b."""
    keyed = policy == "maxcompute"
    table = catalog.create_table(
        name,
        schema=SCHEMA,
        partition_by=["dt"],
        primary_key=["id"] if keyed else (),
        conflict_policy=policy,
    )
    for dt, ids in (("a", [1, 2]), ("b", [3, 4, 5])):
        with table.begin("insert_into") as tx:
            if keyed:
                tx.add_files([keyed_file(tx, dt, ids, "part-0.parquet")])
            else:
                tx.add_files([staged_parquet(tx, {"dt": dt}, rows=len(ids))])
            tx.commit()
    return table


def delete_file_of(table: Table, dt: str) -> str:
    """Delete the data file of partition `dt` behind the table's back; its path as fsck names it."""
    (victim,) = [f for f in table.snapshot().files if f.partition["dt"] == dt]
    path = table.storage.absolute(victim.path)
    os.unlink(path)
    return path


# --- the commit re-proves what it adds -----------------------------------------------------------------


def test_a_staged_file_deleted_before_commit_fails_the_commit_and_nothing_is_committed(catalog: Catalog) -> None:
    table = catalog.create_table("sales.orders", schema=SCHEMA, partition_by=["dt"])
    tx = table.begin("insert_into")
    kept, vanished = staged_parquet(tx, {"dt": "a"}, rows=2), staged_parquet(tx, {"dt": "a"}, rows=1)
    tx.add_files([kept, vanished])
    os.unlink(vanished.path)  # between add_files and commit
    with pytest.raises(InvalidArgumentError) as caught:
        tx.commit()
    message = str(caught.value)
    assert message.startswith("commit(): 1 file(s) given to add_files() no longer exist")
    assert vanished.path in message and "Nothing was committed" in message
    assert tx.closed and table.version == 0
    assert not os.path.exists(kept.path)  # the failed job's staged files are gone too (G1)
    assert table.history()[0].operation is Operation.CREATE_TABLE


def test_a_commit_whose_files_are_all_present_still_commits(catalog: Catalog) -> None:
    table = catalog.create_table("sales.orders", schema=SCHEMA, partition_by=["dt"])
    with table.begin("insert_into") as tx:
        tx.add_files([staged_parquet(tx, {"dt": "a"}, rows=2)])
        assert tx.commit().version == 1


def test_a_re_added_file_is_not_re_proved_as_new(catalog: Catalog) -> None:
    """A deletion-vector update re-adds a file the table has: the re-proof concerns new files only."""
    table = catalog.create_table("sales.orders", schema=SCHEMA, partition_by=["dt"], row_level_concurrency=True)
    with table.begin("insert_into") as tx:
        tx.add_files([staged_parquet(tx, {"dt": "a"}, rows=2)])
        tx.commit()
    (live,) = table.snapshot().files
    with table.begin("delete") as tx:
        tx.remove_files([live])
        tx.add_files([DataFile(live.path, dict(live.partition), live.rows, live.size_bytes, deletion_vector=(0,))])
        assert tx.commit().version == 2
    assert table.snapshot().row_count == 1


# --- fsck names each missing file ------------------------------------------------------------------------


def test_fsck_names_each_missing_file_of_the_head(catalog: Catalog) -> None:
    table = two_partitions(catalog)
    gone = sorted([delete_file_of(table, "a"), delete_file_of(table, "b")])
    report = table.fsck()
    assert not report.ok and sorted(report.missing) == gone
    (files,) = [c for c in report.checks if c.name == "files"]
    for path in gone:
        assert any(p.startswith(f"{path} is missing") and "--repair" in p for p in files.problems), files.problems


# --- Table.repair ----------------------------------------------------------------------------------------


def test_a_dry_run_lists_the_missing_files_and_changes_nothing(catalog: Catalog) -> None:
    table = two_partitions(catalog)
    gone = delete_file_of(table, "a")
    report = table.repair(dry_run=True)
    assert report.dry_run and report.version is None and report.read_version == 2
    assert [f.path for f in report.removed] == [gone] and report.rows_removed == 2
    assert table.version == 2 and len(table.snapshot().files) == 2


def test_repair_commits_one_version_without_the_missing_files(catalog: Catalog) -> None:
    table = two_partitions(catalog)
    gone = delete_file_of(table, "a")
    report = table.repair()
    assert report.version == 3 and not report.dry_run and [f.path for f in report.removed] == [gone]
    snapshot = table.snapshot()
    assert [f.partition for f in snapshot.files] == [{"dt": "b"}] and snapshot.row_count == 3
    (entry,) = table.history(limit=1)
    assert entry.operation is Operation.REPAIR and entry.operation.display == "REPAIR"
    assert entry.time_version is not None  # rows left the table: a data change (D-20)
    assert (entry.files_removed, entry.files_added, entry.rows_removed) == (1, 0, 2)
    # the file is known to be gone now: fsck no longer reports it, although version 2 still names it
    assert table.fsck().ok, [(c.name, c.problems) for c in table.fsck().checks]
    assert table.repair().version is None  # nothing left to repair: nothing committed
    assert table.version == 3


def test_repair_of_a_healthy_table_commits_nothing(catalog: Catalog) -> None:
    table = two_partitions(catalog)
    report = table.repair()
    assert report.version is None and report.removed == () and table.version == 2


def test_a_repair_cannot_be_begun_by_hand(catalog: Catalog) -> None:
    table = two_partitions(catalog)
    with pytest.raises(InvalidArgumentError, match=r"Table\.repair\(\)"):
        table.begin("repair")
    with pytest.raises(InvalidArgumentError, match="dry_run must be True or False"):
        table.repair(dry_run="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("policy", "op_class"),
    [("maxcompute", OpClass.UD), ("maxcompute-transactional", OpClass.UD), ("delta", OpClass.DEL)],
)
def test_a_repair_is_a_delete_of_its_files_for_the_conflict_rules(
    catalog: Catalog, policy: str, op_class: OpClass
) -> None:
    """A writer that read version 2 commits after the repair (E = REPAIR, L = the writer): the matrices
    judge the repair as UD (seed 000 UD->II fails; seed 001 UD->II commits) and Delta as a DELETE of
    the file (a later DELETE that read it fails with ConcurrentDeleteReadException, §13.1)."""
    table = two_partitions(catalog, policy=policy)
    delete_file_of(table, "a")
    later = table.begin("delete" if policy == "delta" else "insert_into")
    if policy == "delta":
        later.remove_files(later.scan("dt = 'a'"))
    elif policy == "maxcompute":
        later.add_files([keyed_file(later, "a", [9], "part-9.parquet")])
    else:
        later.add_files([staged_parquet(later, {"dt": "a"}, rows=1)])
    repaired = table.repair()
    assert repaired.version == 3 and table.commits(3)[0].op_class is op_class
    if policy == "maxcompute":
        with pytest.raises(TransactionConflictException) as lost:
            later.commit()
        assert (lost.value.earlier_op, lost.value.later_op, lost.value.winning_operation) == ("UD", "II", "REPAIR")
    elif policy == "delta":
        with pytest.raises(ConcurrentDeleteReadException) as deleted:
            later.commit()
        assert deleted.value.winning_version == 3
    else:
        assert later.commit().version == 4  # seed 001: INSERT INTO after UD both commit
    assert [f.partition["dt"] for f in table.snapshot().files].count("b") == 1


# --- the command line ------------------------------------------------------------------------------------


def test_fsck_repair_from_the_command_line_dry_run_first(
    capsys: pytest.CaptureFixture[str],
    cli_env: None,  # noqa: F811
    catalog: Catalog,
) -> None:
    table = two_partitions(catalog)
    gone = delete_file_of(table, "a")

    checked = json.loads(run(capsys, "--json", "fsck", "sales.orders")[1])
    assert checked["ok"] is False and checked["missing_files"] == [gone]
    code, out, _ = run(capsys, "fsck", "sales.orders")
    assert code == 1 and f"missing: {gone}" in out

    plan = run_json(capsys, "fsck", "sales.orders", "--repair", "--dry-run")
    assert plan == {
        "table": "sales.orders",
        "dry_run": True,
        "read_version": 2,
        "version": None,
        "files_removed": 1,
        "rows_removed": 2,
        "files": [{"path": gone, "partition": {"dt": "a"}, "rows": 2, "size_bytes": plan["files"][0]["size_bytes"]}],
        "checkpoints_rewritten": [],
    }
    code, out, _ = run(capsys, "fsck", "sales.orders", "--repair", "--dry-run")
    assert code == 0 and "1 data file(s) are missing" in out and "Nothing was changed" in out and gone in out
    assert table.version == 2

    code, out, _ = run(capsys, "fsck", "sales.orders", "--repair")
    assert code == 0 and out.startswith("sales.orders: version 3 removes the entries of 1 missing data file(s)")
    assert table.version == 3
    again = run_json(capsys, "fsck", "sales.orders", "--repair")
    assert again["version"] is None and again["files"] == []
    code, out, _ = run(capsys, "fsck", "sales.orders", "--repair")
    assert code == 0 and "nothing to repair" in out


def test_fsck_repair_from_the_command_line_writes_an_unreadable_checkpoint_again(
    capsys: pytest.CaptureFixture[str],
    cli_env: None,  # noqa: F811
    catalog: Catalog,
) -> None:
    """A checkpoint whose list is gone: fsck names it and the repair, which writes it again from the log
    and commits no version; then fsck is clean."""
    table = two_partitions(catalog)
    assert catalog.services.snapshots.write_checkpoint(table.snapshot(), "cli")
    [(version, path)] = catalog.services.coordinator.checkpoints(table.table_id)
    Path(table.location, path).unlink()

    checked = json.loads(run(capsys, "--json", "fsck", "sales.orders")[1])  # exit code 1
    [problem] = next(c for c in checked["checks"] if c["name"] == "checkpoints")["problems"]
    assert path in problem and "`acidtables fsck sales.orders --repair` writes it again" in problem
    plan = run_json(capsys, "fsck", "sales.orders", "--repair", "--dry-run")
    assert plan["checkpoints_rewritten"] == [version] and plan["version"] is None
    assert catalog.services.coordinator.checkpoints(table.table_id) == [(version, path)]
    code, out, _ = run(capsys, "fsck", "sales.orders", "--repair")
    assert code == 0 and f"the checkpoints of versions {version} could not be read and were written again" in out
    assert table.version == 2
    [(_, rewritten)] = catalog.services.coordinator.checkpoints(table.table_id)
    assert rewritten != path and Path(table.location, rewritten).exists()
    assert run_json(capsys, "fsck", "sales.orders")["ok"] is True


def test_fsck_dry_run_without_repair_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
    cli_env: None,  # noqa: F811
    catalog: Catalog,
) -> None:
    two_partitions(catalog)
    code, _, err = run(capsys, "fsck", "sales.orders", "--dry-run")
    assert code == 2 and "--dry-run goes with --repair" in err
