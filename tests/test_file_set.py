"""FileSet, a snapshot's file map that commits extend without copying (issue 32): every version answers
exactly as a plain dict replaying the same commits, earlier versions never change, and lookups stay
shallow however many commits pile up."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from acidtables.core.log.file_set import FileSet
from acidtables.core.log.records import DataFile


def data_file(path: str, version: int) -> DataFile:
    return DataFile(path=path, partition={}, rows=version, size_bytes=1)


#: a commit: (paths added or re-added, paths removed), over a small space of paths so they meet
commits = st.lists(
    st.tuples(st.sets(st.integers(0, 40), max_size=6), st.sets(st.integers(0, 40), max_size=6)), max_size=60
)


@settings(max_examples=300, deadline=None)
@given(commits)
def test_every_version_answers_as_a_replayed_dict_and_never_changes(history: list[tuple[set[int], set[int]]]) -> None:
    versions: list[tuple[FileSet, dict[str, DataFile]]] = [(FileSet(), {})]
    for n, (added, removed) in enumerate(history, start=1):
        files, expected = versions[-1]
        adds = [data_file(f"p{i}", n) for i in sorted(added)]
        gone = [f"p{i}" for i in sorted(removed)]
        expected = dict(expected)
        for path in gone:  # a commit's removes apply before its adds, as SnapshotBuilder applies a record
            expected.pop(path, None)
        expected.update((f.path, f) for f in adds)
        versions.append((files.changed(adds, gone), expected))
    for files, expected in versions:  # the oldest last: nothing built later changed them
        for i in range(41):
            path = f"p{i}"
            assert files.get(path) == expected.get(path)
            assert (path in files) == (path in expected)
        assert dict(files) == expected and len(files) == len(expected)


def test_one_file_commits_on_a_large_set_keep_lookups_shallow() -> None:
    """10,000 one-file commits over 100,000 files: no more layers than the merges allow (log2 of the
    changes), and the base is never copied (it is still the object the set started from)."""
    base = {f"b{i}": data_file(f"b{i}", 0) for i in range(100_000)}
    files = FileSet(base)
    for n in range(10_000):
        files = files.changed([data_file(f"n{n}", n)], [f"b{n}"])
        assert files.depth <= math.log2(n + 1) + 2
    assert files._base is base
    assert len(files) == 100_000 and "b0" not in files and files["n9999"].rows == 9_999
