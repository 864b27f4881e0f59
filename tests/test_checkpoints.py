"""Checkpoints as manifests (issue 32): each checkpoint read back equals a replay of the log, a new one
rewrites only the manifests of the partitions touched since the previous, summaries add up, tables
with the first format's JSON checkpoint upgrade in place, and a crash while writing one leaves a
readable table."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.helpers.tables import catalog_with, commit_into

from acidtables import Catalog, Table
from acidtables.core.log import checkpoints, manifests
from acidtables.core.log.checkpoints import Previous, proven_checkpoint, read_snapshot, write_checkpoint
from acidtables.core.log.file_set import FileSet
from acidtables.core.log.file_totals import FileTotals, PartitionTotals
from acidtables.core.log.manifest_files import ManifestFiles
from acidtables.core.log.operations import OpClass, Operation, Policy
from acidtables.core.log.records import Column, ColumnStats, CommitRecord, DataFile, FileKind, TableMetadata
from acidtables.core.log.snapshot import Snapshot, SnapshotBuilder
from acidtables.core.schema.ddl import parse_schema
from acidtables.core.storage.storage import Storage, content_checksum

SCHEMA = parse_schema("id BIGINT, dt STRING", method="test")


def record(version: int, adds: list[DataFile], removes: list[DataFile], location: str = "") -> CommitRecord:
    metadata = None
    if version == 0:
        columns = (Column("id", "BIGINT"), Column("dt", "STRING"))
        metadata = TableMetadata("t1", "sales.t", location, columns, partition_by=("dt",))
    return CommitRecord(
        txn_id=f"txn{version}",
        version=version,
        read_version=version - 1,
        operation=Operation.INSERT_INTO,
        op_class=OpClass.INS,
        policy=Policy.DELTA,
        isolation_level=None,
        committed_at=version,
        time_version=version + 1,
        adds=tuple(adds),
        removes=tuple(removes),
        app_ids={"job": version},
        metadata=metadata,
    )


def entry(path: int, partition: int, version: int, deleted: int) -> DataFile:
    return DataFile(
        path=f"data/p{path}.parquet",
        partition={"dt": f"d{partition}"} if partition >= 0 else {"dt": None},
        rows=10 + version,
        size_bytes=100 + path,
        stats={"id": ColumnStats(path, path + version, 0)},
        deletion_vector=tuple(range(deleted)) if deleted else None,
        kind=FileKind.CHANGES if path % 3 == 0 else FileKind.DATA,
        extra={"n": version},
    )


#: a commit: files (path, partition, rows deleted) added or replaced, then paths removed; -1 is NULL
commits = st.lists(
    st.tuples(
        st.lists(st.tuples(st.integers(0, 30), st.integers(-1, 5), st.integers(0, 3)), max_size=5),
        st.sets(st.integers(0, 30), max_size=4),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(history=commits, every=st.integers(1, 6), target=st.integers(1, 8), data=st.data())
def test_every_checkpoint_reads_back_as_the_replayed_snapshot(
    tmp_path_factory: pytest.TempPathFactory,
    data: st.DataObject,
    history: list[tuple[list[tuple[int, int, int]], set[int]]],
    every: int,
    target: int,
) -> None:
    """Checkpoints every `every` commits, each built on the previous (manifests of about `target`
    entries, so tables outgrow and shrink below their buckets): each reads back as the replay, proves
    itself, and its partition summaries add up to the snapshot's files, rows and bytes."""
    location = tmp_path_factory.mktemp("t")
    storage = Storage(str(location))
    whole: list[int] = []
    write_all = checkpoints._ManifestWriter.all

    def all_recorded(writer: checkpoints._ManifestWriter, buckets: int) -> list[manifests.Manifest]:
        whole.append(writer.snapshot.version)
        return write_all(writer, buckets)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(manifests, "TARGET_ENTRIES", target)
        patch.setattr(manifests, "ROW_GROUP_ENTRIES", 2)  # partitions across row groups, as in large tables
        patch.setattr(checkpoints._ManifestWriter, "all", all_recorded)
        builder = SnapshotBuilder().apply_all([record(0, [], [], str(location))])
        previous: tuple[int, dict[str, Any]] | None = None
        since: list[CommitRecord] = []
        moved = False
        for version, (added, removed) in enumerate(history, start=1):
            live = builder.peek().files_by_path
            removes = [live[f"data/p{p}.parquet"] for p in sorted(removed) if f"data/p{p}.parquet" in live]
            adds = [entry(p, part, version, deleted) for p, part, deleted in added]
            adds = list({f.path: f for f in adds}.values())
            gone = {f.path for f in removes}
            # a live path re-added in another partition without its removal: its old bucket is not
            # named by the record, and the writer falls back to writing every manifest
            moved = moved or any(
                f.path in live and f.path not in gone and live[f.path].partition != f.partition for f in adds
            )
            step = record(version, adds, removes)
            builder.apply(step)
            since.append(step)
            if version % every:
                continue
            snapshot = builder.peek()
            base = None if previous is None else Previous(previous[0], previous[1], since)
            path = write_checkpoint(storage, snapshot, f"txn{version}", base)
            content = proven_checkpoint(storage.read(path), version)
            assert_answers_lazily(read_snapshot(storage, content), snapshot, data)
            assert read_snapshot(storage, content).to_json() == snapshot.to_json()
            if (
                base is not None
                and not moved
                and not manifests.needs_new_buckets(len(snapshot.files_by_path), base.buckets)
            ):
                assert version not in whole, "built on the previous checkpoint, not rewritten whole"
            assert_summaries_add_up(content, snapshot)
            previous, since, moved = (version, content), [], False
        if previous is not None and since:  # the log after the last checkpoint, on its lazy snapshot
            tail = SnapshotBuilder(read_snapshot(storage, previous[1])).apply_all(since).peek()
            assert_answers_lazily(tail, builder.peek(), data)
            assert tail.to_json() == builder.peek().to_json()


def assert_answers_lazily(got: Snapshot, expected: Snapshot, data: st.DataObject) -> None:
    """A snapshot whose base is a checkpoint's manifests answers its size, a batch of paths and the
    files of some partitions as the replayed snapshot does, decoding no more than those partitions."""
    files = got.files_by_path
    assert isinstance(files, FileSet) and isinstance(files.base, ManifestFiles)
    want = dict(expected.files_by_path)
    assert len(files) == len(want) and files.base.decoded == 0
    partitions = sorted({manifests.partition_key(f.partition) for f in want.values()} | {'{"dt":"d9"}'})
    chosen = set(data.draw(st.lists(st.sampled_from(partitions), max_size=3), label="partitions"))

    def keep(partition: Mapping[str, Any]) -> bool:
        return manifests.partition_key(partition) in chosen

    taken = files.in_partitions(keep)
    assert sorted(taken, key=lambda f: f.path) == sorted(
        (f for f in want.values() if keep(f.partition)), key=lambda f: f.path
    )
    in_base = sum(p.files for m in files.base.manifests for p in m.partitions if p.key in chosen)
    assert files.base.decoded == in_base, "only the chosen partitions' entries were decoded"
    # the first lookup scans the manifests' paths, the second builds an index, the third uses it
    for lookup in ("scan", "index", "indexed"):
        asked = data.draw(st.lists(st.sampled_from([*sorted(want), "data/none.parquet"]), max_size=6), label=lookup)
        assert files.find(asked) == {p: want[p] for p in asked if p in want}, lookup
    small = data.draw(st.integers(100, 131), label="small file bytes")
    assert got.totals(small) == FileTotals.of(want.values(), small)
    by_partition: dict[str, list[DataFile]] = {}
    for f in want.values():
        by_partition.setdefault(manifests.partition_key(f.partition), []).append(f)
    expected_totals = {key: PartitionTotals.of(members, small) for key, members in by_partition.items()}
    assert {manifests.partition_key(p): t for p, t in got.partition_totals(small)} == expected_totals


def assert_summaries_add_up(content: dict[str, Any], snapshot: Snapshot) -> None:
    by_partition: dict[str, list[int]] = {}
    for f in snapshot.files_by_path.values():
        counts = by_partition.setdefault(manifests.partition_key(f.partition), [0, 0, 0])
        counts[0] += 1
        counts[1] += f.live_rows
        counts[2] += f.size_bytes
    summarised: dict[str, list[int]] = {}
    for raw in content["manifests"]:
        manifest = manifests.Manifest.from_json(raw)
        assert sum(p.files for p in manifest.partitions) == manifest.entries
        for p in manifest.partitions:
            assert p.key not in summarised, "a partition is in one manifest"
            summarised[p.key] = [p.files, p.live_rows, p.size_bytes]
    assert summarised == by_partition


# --- through the catalog -----------------------------------------------------------------------------


@pytest.fixture
def small_manifests(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(manifests, "TARGET_ENTRIES", 2)


@pytest.fixture
def writer(catalog: Catalog) -> Iterator[Catalog]:
    other = catalog_with(catalog, checkpoint_interval=4)
    try:
        yield other
    finally:
        other.close()


def listed(catalog: Catalog, table: Table) -> dict[str, Any]:
    """The newest checkpoint's manifest list, proven."""
    version, path = catalog.services.coordinator.checkpoints(table.table_id)[-1]
    return proven_checkpoint(Path(table.location, path).read_bytes(), version)


def by_partition(content: dict[str, Any]) -> dict[str, str]:
    """partition key -> the manifest holding it."""
    return {p[0]: m["path"] for m in content["manifests"] for p in m["partitions"]}


def test_a_checkpoint_rewrites_only_the_manifests_of_partitions_touched_since_the_last(
    writer: Catalog, small_manifests: None
) -> None:
    table = writer.create_table("sales.cp", schema=SCHEMA, partition_by=["dt"])
    commit_into(table, *(f"d{i}" for i in range(8)))  # v1
    commit_into(table, *(f"d{i}" for i in range(8)))  # v2
    commit_into(table, "d0")  # v3
    commit_into(table, "d1")  # v4: a checkpoint
    assert writer.services.flush()
    first = listed(writer, table)
    assert first["buckets"] >= 4 and len(first["manifests"]) > 2
    for _ in range(4):  # v5..v8: a checkpoint after commits into d3 alone
        commit_into(table, "d3")
    assert writer.services.flush()
    second = listed(writer, table)
    before, after = by_partition(first), by_partition(second)
    d3 = manifests.partition_key({"dt": "d3"})
    changed = {key for key in after if after[key] != before[key]}
    rewritten = {key for key in after if after[key] == after[d3]}
    assert changed == rewritten and d3 in changed and len(changed) < len(after)
    with catalog_with(writer, checkpoint_interval=4) as fresh:
        assert fresh.table("sales.cp").snapshot().to_json() == table.snapshot().to_json()


def test_a_table_with_a_json_checkpoint_is_read_and_upgraded_at_its_next_checkpoint(writer: Catalog) -> None:
    """The first format (one JSON document of every file) stays readable; the next checkpoint is a
    manifest list built from the snapshot, and no data file changes."""
    table = writer.create_table("sales.old", schema=SCHEMA, partition_by=["dt"])
    for i in range(3):
        commit_into(table, f"d{i}")
    snapshot = table.snapshot()
    old = old_format_checkpoint(writer, snapshot)
    data_files = {p: p.stat().st_mtime_ns for p in Path(table.location, "data").rglob("*.parquet")}
    with catalog_with(writer, checkpoint_interval=4) as reader:
        assert reader.table("sales.old").snapshot().to_json() == snapshot.to_json()
    commit_into(table, "d9")  # v4: a checkpoint, built on the JSON one
    assert writer.services.flush()
    content = listed(writer, table)
    assert content["version"] == 4 and "manifests" in content and old != content
    assert {p: p.stat().st_mtime_ns for p in data_files} == data_files  # no data file rewritten
    with catalog_with(writer, checkpoint_interval=4) as reader:
        assert reader.table("sales.old").snapshot().to_json() == table.snapshot().to_json()


def old_format_checkpoint(catalog: Catalog, snapshot: Snapshot) -> dict[str, Any]:
    """A checkpoint as acidtables wrote them before manifests, registered as the writer did."""
    content = snapshot.to_json()
    document = {
        "version": snapshot.version,
        "file_count": len(content["files"]),
        "checksum": content_checksum(content),
        "snapshot": content,
    }
    storage = catalog.services.storage(snapshot.metadata.location)
    path = storage.checkpoint_file(snapshot.version, "old")
    storage.write_exclusive(path, json.dumps(document).encode())
    catalog.services.coordinator.put_checkpoint(snapshot.metadata.table_id, snapshot.version, path)
    return content


@pytest.mark.parametrize("crash_at", ["a manifest", "the list"])
def test_a_crash_while_writing_a_checkpoint_leaves_a_readable_table(
    writer: Catalog, crash_at: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process dies while writing a manifest or the list (before the etcd key): readers replay the
    log, and the next checkpoint is written whole."""
    table = writer.create_table("sales.crash", schema=SCHEMA, partition_by=["dt"])
    real_write = Storage.write_exclusive
    suffix = ".parquet" if crash_at == "a manifest" else ".json"

    def crash(storage: Storage, relative: str, data: bytes) -> None:
        if ("/manifests/" in relative or "/checkpoints/" in relative) and relative.endswith(suffix):
            real_write(storage, relative, data[: len(data) // 2])  # torn, and the writing stops
            raise OSError("the writer died here")
        real_write(storage, relative, data)

    monkeypatch.setattr(Storage, "write_exclusive", crash)
    for i in range(4):
        commit_into(table, f"d{i}")  # v4 asks for a checkpoint, which dies
    writer.services.flush()
    assert writer.services.coordinator.checkpoints(table.table_id) == []
    monkeypatch.setattr(Storage, "write_exclusive", real_write)
    with catalog_with(writer, checkpoint_interval=4) as reader:
        assert reader.table("sales.crash").snapshot().to_json() == table.snapshot().to_json()
    for i in range(4):
        commit_into(table, f"e{i}")
    assert writer.services.flush()
    assert listed(writer, table)["version"] == 8
    with catalog_with(writer, checkpoint_interval=4) as reader:
        assert reader.table("sales.crash").snapshot().to_json() == table.snapshot().to_json()


def test_a_checkpoint_in_a_format_this_version_does_not_know_is_skipped_saying_so(writer: Catalog) -> None:
    """A manifest list a newer acidtables wrote (a format number this one does not read) is not
    guessed at: readers say why they skip it and replay the log."""
    table = writer.create_table("sales.newer", schema=SCHEMA, partition_by=["dt"])
    for i in range(4):
        commit_into(table, f"d{i}")
    assert writer.services.flush()
    version, path = writer.services.coordinator.checkpoints(table.table_id)[-1]
    document = json.loads(Path(table.location, path).read_bytes())
    document["format"] = 3
    Path(table.location, path).write_text(json.dumps(document))
    with pytest.raises(ValueError, match="format 3, which this acidtables does not read"):
        proven_checkpoint(Path(table.location, path).read_bytes(), version)
    with catalog_with(writer, checkpoint_interval=4) as reader:
        assert reader.table("sales.newer").snapshot().to_json() == table.snapshot().to_json()


def test_a_process_that_commits_many_files_asks_for_checkpoints_sooner(catalog: Catalog) -> None:
    """Large commits: a checkpoint once `checkpoint_actions` file adds and removes have been committed
    since the last, long before `checkpoint_interval` versions, so a reader never replays more than
    about that many entries."""
    with catalog_with(catalog, checkpoint_interval=1000, checkpoint_actions=5) as busy:
        table = busy.create_table("sales.busy", schema=SCHEMA, partition_by=["dt"])
        for _ in range(5):
            commit_into(table, "a", "b", "c")  # 3 adds each: due at the 2nd, 4th commit (6 >= 5)
        assert busy.services.flush()
        assert [v for v, _ in busy.services.coordinator.checkpoints(table.table_id)] == [2, 4]


def test_a_drop_with_data_deletes_the_tables_manifests_and_no_other_tables(writer: Catalog) -> None:
    """Manifests live in the table's own location: a drop with data removes them with its checkpoints,
    and a neighbour's checkpoint, manifests and data files stay and still read."""
    doomed = writer.create_table("sales.doomed", schema=SCHEMA, partition_by=["dt"])
    neighbour = writer.create_table("sales.neighbour", schema=SCHEMA, partition_by=["dt"])
    for i in range(4):
        commit_into(doomed, f"d{i}")
        commit_into(neighbour, f"d{i}")
    assert writer.services.flush()
    kept = sorted(p for p in Path(neighbour.location).rglob("*") if p.is_file())
    assert any("/_acidtables/manifests/" in str(p) for p in kept)
    assert list(Path(doomed.location, "_acidtables", "manifests").iterdir())
    writer.drop_table("sales.doomed", delete_data=True)
    assert not Path(doomed.location, "_acidtables", "manifests").exists()
    assert not Path(doomed.location, "_acidtables", "checkpoints").exists()
    assert sorted(p for p in Path(neighbour.location).rglob("*") if p.is_file()) == kept
    with catalog_with(writer, checkpoint_interval=4) as reader:
        assert reader.table("sales.neighbour").snapshot().to_json() == neighbour.snapshot().to_json()


def _age(paths: list[Path], hours: float) -> None:
    """Make files `hours` old: vacuum deletes metadata only once it is older than its retention."""
    past = time.time() - hours * 3600
    for path in paths:
        os.utime(path, (past, past))


def test_vacuum_deletes_the_checkpoints_and_manifests_no_retained_version_needs(
    writer: Catalog, small_manifests: None
) -> None:
    """Checkpoints before the one the oldest retained version starts from, manifests no kept checkpoint
    names (rewritten since, or left by a writer that died before registering its list) go, once old
    enough; every retained version still reads the same, and fsck finds nothing."""
    table = writer.create_table("sales.meta", schema=SCHEMA, partition_by=["dt"])
    for version in range(1, 21):  # checkpoints at 4, 8, 12, 16 and 20, each rewriting touched buckets
        commit_into(table, f"d{version % 6}", f"d{version % 3}")
        if version % 4 == 0:
            assert writer.services.flush()
    storage = writer.services.storage(table.location)
    leftover = [storage.manifest_file(21, 0, "died"), storage.checkpoint_file(21, "died")]
    for path in leftover:
        storage.write_exclusive(path, b"a writer died before registering this")
    location = Path(table.location)
    _age([p for p in (location / "_acidtables").rglob("*") if p.is_file()], hours=200)
    young = storage.manifest_file(21, 0, "writing")  # a checkpoint being written right now
    storage.write_exclusive(young, b"not yet listed")

    assert table.expire(retain_versions=6, retain_duration="0h", force=True).oldest_version_kept == 15
    retained = {v: table.snapshot(v).to_json() for v in range(15, 21)}
    registered = dict(writer.services.coordinator.checkpoints(table.table_id))
    kept = [registered[v] for v in (12, 16, 20)]  # 12: where a reader of version 15 starts
    named = {m["path"] for path in kept for m in json.loads((location / path).read_bytes())["snapshot"]["manifests"]}
    every = {str(p.relative_to(location)) for p in (location / "_acidtables").rglob("*") if p.is_file()}
    manifest_files = {p for p in every if "/manifests/" in p}
    expected = sorted({registered[4], registered[8], leftover[1], *(manifest_files - named - {young})})
    assert leftover[0] in expected and len(expected) > 4

    # the newest list cannot be read: which manifests are named is unknown, and the head's readers may
    # still need them (a storage hiccup), so none goes
    good = (location / kept[-1]).read_bytes()
    (location / kept[-1]).write_bytes(b"{torn")
    _age([location / kept[-1]], hours=200)
    unsure = table.vacuum(retain_duration="1h", force=True, dry_run=True)
    assert sorted(unsure.metadata) == [p for p in expected if "/checkpoints/" in p]
    (location / kept[-1]).write_bytes(good)

    plan = table.vacuum(retain_duration="1h", force=True, dry_run=True)
    assert sorted(plan.metadata) == expected and all((location / p).exists() for p in expected)
    report = table.vacuum(retain_duration="1h", force=True)
    assert report.metadata == plan.metadata
    assert not any((location / p).exists() for p in expected)
    assert (location / young).exists() and all((location / p).exists() for p in (*kept, *named))
    with catalog_with(writer, checkpoint_interval=4) as reader:
        again = reader.table("sales.meta")
        assert {v: again.snapshot(v).to_json() for v in retained} == retained
        report_fsck = again.fsck()
        assert report_fsck.ok, report_fsck
    assert table.vacuum(retain_duration="1h", force=True).metadata == ()  # nothing more to delete


def test_application_ids_are_copied_only_by_the_commits_that_record_one() -> None:
    """A snapshot's application-id map is shared with the next version unless that commit records an
    id (the file map's rule: a commit costs what it changes); an earlier snapshot never changes."""
    builder = SnapshotBuilder()
    builder.apply(record(0, [], []))  # records {"job": 0}
    first = builder.peek()
    quiet = dataclasses.replace(record(1, [entry(1, 0, 1, 0)], []), app_ids={})
    builder.apply(quiet)
    assert builder.peek().app_ids is first.app_ids
    builder.apply(dataclasses.replace(record(2, [], []), app_ids={"other": 7}))
    latest = builder.build()
    assert dict(latest.app_ids) == {"job": (0, 0), "other": (7, 2)}
    assert dict(first.app_ids) == {"job": (0, 0)}


def test_a_first_lookup_scans_and_keeps_nothing_and_a_second_builds_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that looks paths up once (vacuum, a job's single commit, the operator) keeps no index
    of a million paths; one that looks up again (a writer committing on) gets it. Both answer alike and
    decode only the entries asked for."""
    monkeypatch.setattr(manifests, "TARGET_ENTRIES", 8)
    monkeypatch.setattr(manifests, "ROW_GROUP_ENTRIES", 4)  # rows spread over several row groups
    storage = Storage(str(tmp_path))
    added = [entry(p, p % 3, 1, p % 2) for p in range(40)]
    snapshot = SnapshotBuilder().apply_all([record(0, [], [], str(tmp_path)), record(1, added, [])]).peek()
    content = proven_checkpoint(storage.read(write_checkpoint(storage, snapshot, "t", None)), 1)
    base = read_snapshot(storage, content).files_by_path.base
    assert isinstance(base, ManifestFiles) and len(base.manifests) > 2
    want = dict(snapshot.files_by_path)
    asked = ["data/p39.parquet", "data/none.parquet", "data/p0.parquet", "data/p17.parquet"]
    assert base.present(asked) == {"data/p39.parquet", "data/p0.parquet", "data/p17.parquet"}
    assert base._index is None  # the scan kept nothing
    assert base.find(asked) == {p: want[p] for p in asked if p in want}
    assert base._index is not None and len(base._index) == 40
    again = ["data/p5.parquet", "data/p6.parquet", "data/p7.parquet", "data/none.parquet"]
    assert base.find(again) == {p: want[p] for p in again if p in want}
    assert base.decoded == 6, "only the entries asked for were decoded"
