"""`Storage.discard_staged` is the one place a transaction's files are deleted, and it deletes nothing
outside that transaction's staging directory, whatever it is given."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from acidtables.core.storage.storage import Storage


@pytest.fixture
def storage(tmp_path: Path) -> Storage:
    storage = Storage(str(tmp_path / "t"))
    for relative in (
        "data/_acid_txn=mine/_acid_write=0000/part-0.parquet",
        "data/_acid_txn=other/_acid_write=0000/part-0.parquet",
        "data/_acid_txn=mine-too/part-0.parquet",
        "data/dt=a/part-0.parquet",
    ):
        storage.write_exclusive(relative, b"rows")
    return storage


def surviving(storage: Storage) -> set[str]:
    return {f.path for f in storage.walk("data")}


def test_discarding_listed_paths_deletes_only_those_inside_the_own_staging_directory(storage: Storage) -> None:
    doomed = storage.discard_staged(
        "mine",
        [
            "data/_acid_txn=mine/_acid_write=0000/part-0.parquet",
            "data/_acid_txn=other/_acid_write=0000/part-0.parquet",  # another transaction's file
            "data/_acid_txn=mine/../_acid_txn=other/_acid_write=0000/part-0.parquet",  # climbs out
            "data/_acid_txn=mine-too/part-0.parquet",  # a sibling whose name starts the same
            "data/dt=a/part-0.parquet",  # a file the table had before
            storage.absolute("data/dt=a/part-0.parquet"),
            "/etc/hostname",
        ],
    )
    assert doomed == ["data/_acid_txn=mine/_acid_write=0000/part-0.parquet"]
    assert surviving(storage) == {
        "data/_acid_txn=other/_acid_write=0000/part-0.parquet",
        "data/_acid_txn=mine-too/part-0.parquet",
        "data/dt=a/part-0.parquet",
    }


def test_discarding_everything_removes_the_staging_directory_and_nothing_else(storage: Storage) -> None:
    storage.discard_staged("mine")
    assert not storage.exists("data/_acid_txn=mine")
    assert surviving(storage) == {
        "data/_acid_txn=other/_acid_write=0000/part-0.parquet",
        "data/_acid_txn=mine-too/part-0.parquet",
        "data/dt=a/part-0.parquet",
    }


@pytest.mark.parametrize("spelling", ["", ".", "data/..", "./"])
def test_the_location_itself_is_never_deleted(storage: Storage, spelling: str) -> None:
    before = surviving(storage)
    with pytest.raises(OSError, match="not inside"):
        storage.delete(spelling)
    assert surviving(storage) == before


def test_a_listing_skips_an_entry_deleted_between_the_listing_and_its_stat(
    storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """cleanup() lists staging directories while transactions beside it end and delete theirs: an entry
    gone before its stat is simply not there (CI once saw FileNotFoundError escape the listing)."""
    real_scandir = os.scandir

    def scandir_then_delete(path: str | os.PathLike[str]) -> list[os.DirEntry[str]]:
        entries = list(real_scandir(path))
        # the other transaction ends meanwhile and deletes its directory
        os.remove(storage.absolute("data/_acid_txn=other/_acid_write=0000/part-0.parquet"))
        os.rmdir(storage.absolute("data/_acid_txn=other/_acid_write=0000"))
        os.rmdir(storage.absolute("data/_acid_txn=other"))
        return entries

    monkeypatch.setattr(os, "scandir", scandir_then_delete)
    listed = {f.path for f in storage.list_dir("data")}

    assert listed == {"data/_acid_txn=mine", "data/_acid_txn=mine-too", "data/dt=a"}
