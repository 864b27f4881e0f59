"""A commit proves its files: every kind of bad added file is refused by name while staging, and
nothing of it ever becomes visible."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from tests.helpers.tables import staged_parquet, write_part

from acidtables import Catalog, DataFile, Table, Transaction
from acidtables.errors import InvalidArgumentError

SCHEMA = "id BIGINT, dt STRING"


@pytest.fixture
def table(catalog: Catalog) -> Table:
    t = catalog.create_table("sales.t", schema=SCHEMA, partition_by=["dt"])
    with t.begin("insert_into") as tx:
        tx.add_files([staged_parquet(tx, {"dt": "a"}, rows=3)])
        tx.commit()
    return t


def in_staging(tx: Transaction, relative: str, rows: int = 2, dt: str = "a") -> DataFile:
    directory, name = os.path.split(os.path.join(tx.staging_dir, relative))
    return write_part(directory, name, {"dt": dt}, rows)


BadFile = Callable[[Transaction, Catalog, Path], DataFile]

CASES: dict[str, tuple[BadFile, str]] = {
    "missing": (
        lambda tx, c, tmp: DataFile(f"{tx.staging_dir}/nope.parquet", {"dt": "a"}, rows=1, size_bytes=10),
        "does not exist",
    ),
    "outside the location": (
        lambda tx, c, tmp: write_part(str(tmp / "elsewhere"), "f.parquet", {"dt": "a"}),
        "not inside",
    ),
    "climbing out with ..": (
        lambda tx, c, tmp: replace(in_staging(tx, "f.parquet"), path="data/../../elsewhere/f.parquet"),
        "not inside",
    ),
    "another table's file": (
        lambda tx, c, tmp: write_part(c.table("sales.other").location + "/data", "f.parquet", {"dt": "a"}),
        "not inside",
    ),
    "another transaction's staged file": (
        lambda tx, c, tmp: in_staging(tx, "../_acid_txn=someoneelse/f.parquet"),
        "another transaction's staging directory",
    ),
    "wrong size": (lambda tx, c, tmp: replace(in_staging(tx, "f.parquet"), size_bytes=1), "bytes but its entry says 1"),
    "wrong row count": (lambda tx, c, tmp: replace(in_staging(tx, "f.parquet"), rows=7), "holds 2 rows"),
    "not Parquet": (
        lambda tx, c, tmp: _text_file(Path(tx.staging_dir) / "f.parquet"),
        "not a readable Parquet file",
    ),
    "partition directory spelling another value": (
        lambda tx, c, tmp: replace(in_staging(tx, "dt=b/f.parquet"), partition={"dt": "a"}),
        "lies in directory dt=b",
    ),
}


def _text_file(path: Path) -> DataFile:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("id,dt\n1,a\n")
    return DataFile(str(path), {"dt": "a"}, rows=1, size_bytes=path.stat().st_size)


@pytest.mark.parametrize("case", CASES)
def test_a_bad_added_file_is_refused_and_nothing_becomes_visible(
    catalog: Catalog, table: Table, tmp_path: Path, case: str
) -> None:
    catalog.create_table("sales.other", schema=SCHEMA, partition_by=["dt"])
    make, message = CASES[case]
    before = table.snapshot()
    tx = table.begin("insert_into")
    bad = make(tx, catalog, tmp_path)
    with pytest.raises(InvalidArgumentError, match=message) as caught:
        tx.add_files([bad])
    assert "add_files()" in str(caught.value)
    good = staged_parquet(tx, {"dt": "a"})
    tx.add_files([good])  # the transaction stays usable: the bad file just never entered it
    info = tx.commit()
    after = table.snapshot()
    assert set(after.files_by_path) - set(before.files_by_path) == {table.storage.relative(good.path)}
    assert info.files_added == 1


def test_a_deletion_vector_on_a_table_without_them_is_refused(table: Table) -> None:
    """Only row-level concurrency's readers apply deletion vectors; elsewhere (the Delta mirror, readers of
    the files) the hidden rows would come back."""
    (live,) = table.snapshot().files
    tx = table.begin("delete")
    tx.remove_files([live])
    with pytest.raises(InvalidArgumentError, match=r"has a deletion vector, but sales\.t does not use them"):
        tx.add_files([replace(live, deletion_vector=(0,))])
    tx.abort()
    assert table.snapshot().files == [live]


def test_a_re_added_file_must_keep_its_size_rows_and_partition(catalog: Catalog) -> None:
    table = catalog.create_table("sales.dv", schema=SCHEMA, partition_by=["dt"], row_level_concurrency=True)
    with table.begin("insert_into") as tx:
        tx.add_files([staged_parquet(tx, {"dt": "a"}, rows=3)])
        tx.commit()
    (live,) = table.snapshot().files
    tx = table.begin("delete")
    tx.remove_files([live])
    with pytest.raises(InvalidArgumentError, match="changes only its deletion vector"):
        tx.add_files([replace(live, rows=live.rows + 1, deletion_vector=(0,))])
    tx.add_files([replace(live, deletion_vector=(0,))])  # the same file with a vector is fine
    tx.commit()
    (after,) = table.snapshot().files
    assert after.deletion_vector == (0,) and after.live_rows == live.rows - 1


def test_a_file_already_live_cannot_be_added_again(table: Table) -> None:
    (live,) = table.snapshot().files
    tx = table.begin("insert_into")
    with pytest.raises(InvalidArgumentError, match=r"already in sales\.t"):
        tx.add_files([live])
    tx.abort()
