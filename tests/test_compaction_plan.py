"""Compaction planning in core (what the operator decides on and a job pod executes): pure functions
of a snapshot's file list."""

from __future__ import annotations

import pytest

from acidtables.core import CompactionGroup, DataFile, FileKind, group_app_id
from acidtables.core.log.records import Column, TableMetadata
from acidtables.core.maintenance.compaction import MAX_GROUP_FILES, plan_groups

KB = 1024


def meta(*, primary_key: bool = False) -> TableMetadata:
    columns = (Column("id", "BIGINT", not primary_key), Column("dt", "STRING"))
    return TableMetadata(
        table_id="t", name="s.t", location="/tmp/t", columns=columns, partition_by=("dt",),
        primary_key=("id",) if primary_key else (),
    )  # fmt: skip


def file(
    name: str, dt: str, size: int, *, kind: FileKind = FileKind.DATA, version: int = 1, dv: bool = False
) -> DataFile:
    return DataFile(
        path=f"data/{name}.parquet", partition={"dt": dt}, rows=10, size_bytes=size, kind=kind,
        deletion_vector=(0,) if dv else None, added_version=version,
    )  # fmt: skip


def test_minor_bins_small_files_per_partition_up_to_the_target() -> None:
    files = [file(f"a{i}", "a", 40 * KB, version=i) for i in range(5)] + [
        file("b0", "b", 40 * KB),
        file("b1", "b", 1 << 20),
    ]
    groups = plan_groups(meta(), files, "minor", 100 * KB)
    assert [[f.path for f in g] for g in groups] == [
        ["data/a0.parquet", "data/a1.parquet"],
        ["data/a2.parquet", "data/a3.parquet"],
        # a4 alone is already compact; b0 alone too, and b1 is big
    ]


def test_a_lone_file_with_a_deletion_vector_is_rewritten_to_apply_it() -> None:
    groups = plan_groups(meta(), [file("a0", "a", 40 * KB, dv=True)], "minor", 100 * KB)
    assert [[f.path for f in g] for g in groups] == [["data/a0.parquet"]]


def test_a_group_never_exceeds_the_file_limit() -> None:
    files = [file(f"a{i:03d}", "a", 1, version=i) for i in range(MAX_GROUP_FILES + 5)]
    assert [len(g) for g in plan_groups(meta(), files, "minor", 1 << 20)] == [MAX_GROUP_FILES, 5]


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ([file("a0", "a", 10, kind=FileKind.BASE)], []),  # one base file: nothing to merge
        ([file("a0", "a", 10, kind=FileKind.BASE), file("a1", "a", 10, kind=FileKind.CHANGES)], [2]),
        ([file("a0", "a", 10, kind=FileKind.CHANGES)], [1]),  # changes become a base
    ],
)
def test_major_on_a_primary_key_table_takes_whole_partitions(files: list[DataFile], expected: list[int]) -> None:
    assert [len(g) for g in plan_groups(meta(primary_key=True), files, "major", 1 << 20)] == expected


def test_minor_on_a_primary_key_table_merges_only_small_change_files() -> None:
    files = [
        file("a0", "a", 10, kind=FileKind.BASE),
        file("a1", "a", 10, kind=FileKind.CHANGES),
        file("a2", "a", 10, kind=FileKind.CHANGES),
    ]
    assert [[f.path for f in g] for g in plan_groups(meta(primary_key=True), files, "minor", 1 << 20)] == [
        ["data/a1.parquet", "data/a2.parquet"]
    ]


def test_a_groups_key_and_application_id_depend_on_its_files_only() -> None:
    files = (file("a0", "a", 10), file("a1", "a", 10))
    one = CompactionGroup({"dt": "a"}, files)
    same = CompactionGroup({"dt": "a"}, tuple(reversed(files)))
    other = CompactionGroup({"dt": "a"}, files[:1])
    assert one.key == same.key != other.key
    assert group_app_id("uid-1", one) == f"compaction/uid-1/{one.key}" != group_app_id("uid-2", one)
