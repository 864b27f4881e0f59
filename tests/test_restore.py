"""Table.restore (Delta Lake's RESTORE): one version whose files are an earlier version's, judged as an
overwrite of the whole table. Real etcd, real Parquet files; the SQL statement is in test_sql."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
from tests.helpers.tables import staged_parquet
from tests.jobs import with_deletion_vector

from acidtables import Catalog, Table
from acidtables.core.commit.transaction import Transaction
from acidtables.errors import ConcurrentDeleteReadException, DataFilesMissingError, InvalidArgumentError


def insert(table: Table, partition: str = "a", rows: int = 2) -> str:
    """One committed file; its path."""
    tx = table.begin("insert_into")
    f = staged_parquet(tx, {"dt": partition}, rows)
    tx.add_files([f])
    tx.commit()
    return table.storage.relative(f.path)


def delete_file(table: Table, path: str) -> None:
    tx = table.begin("delete")
    tx.record_read(files=[path])
    tx.remove_files([path])
    tx.commit()


def files(table: Table, version: int | None = None) -> dict[str, tuple[int, ...] | None]:
    """What a version reads: each file and its deletion vector."""
    return {f.path: f.deletion_vector for f in table.snapshot(version=version).files}


def partitioned(catalog: Catalog, name: str = "lake.r", **options: object) -> Table:
    return catalog.create_table(name, schema="id BIGINT, dt STRING", partition_by=["dt"], **options)  # type: ignore[arg-type]


def test_a_restore_commits_one_version_with_the_earlier_versions_files(catalog: Catalog) -> None:
    table = partitioned(catalog)
    first = insert(table, "a")
    insert(table, "b")
    wanted = files(table)
    delete_file(table, first)
    insert(table, "c")
    info = table.restore(version=2)
    assert info.version == 5 and not info.skipped and info.time_version is not None
    assert files(table) == wanted
    [entry] = table.history(limit=1)
    assert entry.operation.display == "RESTORE" and entry.files_added == 1 and entry.files_removed == 1
    with Catalog(catalog.settings) as fresh:  # what the log says, not what this process remembers
        again = fresh.table("lake.r")
        assert files(again) == wanted and files(again, version=4) != wanted
        assert again.fsck().ok


def test_a_restore_brings_back_a_file_without_the_deletion_vector_it_gained_since(catalog: Catalog) -> None:
    table = catalog.create_table("lake.dv", schema="id BIGINT, dt STRING", row_level_concurrency=True)
    tx = table.begin("insert_into")
    tx.add_files([staged_parquet(tx, rows=3)])
    tx.commit()
    [f] = table.snapshot().files
    tx = table.begin("delete")
    tx.record_read(files=[f])
    tx.remove_files([f])
    tx.add_files([with_deletion_vector(f, [0])])
    tx.commit()
    assert files(table) == {f.path: (0,)}
    table.restore(version=1)
    assert files(table) == {f.path: None}
    assert sum(f.live_rows for f in table.snapshot().files) == 3


def test_a_restore_to_a_time_takes_the_version_current_then(catalog: Catalog) -> None:
    table = partitioned(catalog)
    insert(table, "a")
    at = table.history(limit=1)[0].time_version
    wanted = files(table)
    insert(table, "b")
    table.restore(timestamp=at)
    assert files(table) == wanted


def test_restoring_what_the_table_already_holds_commits_nothing(catalog: Catalog) -> None:
    table = partitioned(catalog)
    insert(table, "a")
    info = table.restore(version=1)
    assert info.skipped and info.version == 1 and table.snapshot().version == 1


def test_a_restore_whose_files_are_gone_names_them_and_commits_nothing(catalog: Catalog) -> None:
    table = partitioned(catalog)
    first = insert(table, "a")
    delete_file(table, first)
    os.remove(table.storage.absolute(first))  # as vacuum does once the removal is past retention
    with pytest.raises(DataFilesMissingError, match=r"RESTORE of lake\.r to version 1 needs 1 data file") as caught:
        table.restore(version=1)
    assert caught.value.paths == (table.storage.absolute(first),)
    assert table.snapshot().version == 2


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda t: t.restore(), "give the version to restore"),
        (lambda t: t.restore(version=1, timestamp="2026-01-01"), "give the version to restore"),
        (lambda t: t.restore(version=9), "has no version 9"),
        (lambda t: t.begin("restore"), r"committed by Table\.restore"),
    ],
)
def test_bad_restores_name_the_problem(catalog: Catalog, call: Callable[[Table], object], message: str) -> None:
    table = partitioned(catalog)
    insert(table)
    with pytest.raises(Exception, match=message):
        call(table)
    assert table.snapshot().version == 1


def test_a_restore_is_refused_on_a_primary_key_table_with_the_statement_that_works(catalog: Catalog) -> None:
    table = partitioned(catalog, "lake.pk", primary_key=["id"])
    insert(table)
    insert(table)
    with pytest.raises(
        InvalidArgumentError, match=r"INSERT OVERWRITE lake\.pk SELECT \* FROM lake\.pk VERSION AS OF 1"
    ):
        table.restore(version=1)
    assert table.snapshot().version == 2


def test_a_restore_across_a_schema_change_is_refused(catalog: Catalog) -> None:
    table = partitioned(catalog)
    insert(table)
    catalog.alter_table("lake.r", add_columns="note STRING")
    with pytest.raises(InvalidArgumentError, match="does not change the schema"):
        table.restore(version=1)


def test_a_restore_loses_to_a_concurrent_delete_of_a_file_it_read(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    # an overwrite of the whole table under Delta's rules: a file it read was removed (rule 5)
    table = partitioned(catalog)
    first = insert(table, "a")
    insert(table, "b")
    insert(table, "c")
    re_add = Transaction.add_earlier_files

    def someone_deletes_first(tx: Transaction, *args: object, **kwargs: object) -> None:
        monkeypatch.setattr(Transaction, "add_earlier_files", re_add)
        delete_file(table, first)
        re_add(tx, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Transaction, "add_earlier_files", someone_deletes_first)
    with pytest.raises(ConcurrentDeleteReadException):
        table.restore(version=2)
    assert table.snapshot().version == 4 and first not in files(table)
