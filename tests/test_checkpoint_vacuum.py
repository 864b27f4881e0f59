"""Vacuum beside the checkpointer (issue 41, item 2): a forced zero-retention vacuum, in another process
(another catalog: its own etcd lease), deletes nothing a checkpoint being written will name; a
checkpoint registers only files that exist, and only while its writer's registration lives; and an
unreadable checkpoint stops pinning every manifest once a newer one can be read.

Interleavings run in two phases, as transactions do: the checkpoint is staged (its writer registered,
its files written), the vacuum runs, then the checkpoint is registered."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.tables import catalog_with, commit_into

from acidtables import Catalog, Table
from acidtables.core.errors import CoordinatorUnavailable
from acidtables.core.log import manifests
from acidtables.core.log.archive import Archive
from acidtables.core.log.checkpoint_writer import StagedCheckpoint, stage_checkpoint
from acidtables.core.log.checkpoints import proven_checkpoint
from acidtables.core.log.snapshot import SnapshotBuilder
from acidtables.core.storage.storage import FileInfo, Storage

SCHEMA = "id BIGINT, dt STRING"


@pytest.fixture(autouse=True)
def small_manifests(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two entries a manifest: a checkpoint has many, and the next reuses those it did not touch."""
    monkeypatch.setattr(manifests, "TARGET_ENTRIES", 2)


@pytest.fixture
def writer(catalog: Catalog) -> Iterator[Catalog]:
    """The process whose background checkpointer writes checkpoints every 4 versions."""
    other = catalog_with(catalog, checkpoint_interval=4)
    try:
        yield other
    finally:
        other.close()


@pytest.fixture
def vacuumer(catalog: Catalog) -> Iterator[Catalog]:
    """Another process: its own coordinator, and so its own etcd lease."""
    other = catalog_with(catalog, checkpoint_interval=4)
    try:
        yield other
    finally:
        other.close()


def eight_versions(writer: Catalog, name: str) -> Table:
    """A table with checkpoints registered at versions 4 and 8, over six partitions."""
    table = writer.create_table(name, schema=SCHEMA, partition_by=["dt"])
    for version in range(1, 9):
        commit_into(table, f"d{version % 6}", f"d{(version + 3) % 6}")
        if version % 4 == 0:
            assert writer.services.flush()
    return table


def registered(catalog: Catalog, table: Table) -> dict[int, str]:
    return dict(catalog.services.coordinator.checkpoints(table.table_id))


def named(table: Table, list_path: str) -> set[str]:
    """The manifest list and the manifests it names (relative paths)."""
    document = json.loads(Path(table.location, list_path).read_bytes())
    return {list_path, *(m["path"] for m in document["snapshot"]["manifests"])}


def metadata_files(table: Table) -> set[str]:
    location = Path(table.location)
    return {
        str(p.relative_to(location))
        for sub in ("checkpoints", "manifests")
        for p in (location / "_acidtables" / sub).rglob("*")
        if p.is_file()
    }


def stage(catalog: Catalog, table: Table, version: int, txn_id: str) -> StagedCheckpoint:
    staged = catalog.services.snapshots.stage_checkpoint(table.snapshot(version), txn_id)
    assert staged is not None
    return staged


def replayed(catalog: Catalog, table: Table, version: int) -> dict[str, Any]:
    """The snapshot of `version` replayed from the whole log (no checkpoint read)."""
    log = catalog.services.log(table.table_id, table.location)
    builder = SnapshotBuilder()
    builder.apply_all(catalog.services.decode_log_entry(table.location, e) for e in log.read(-1, version))
    return builder.build().to_json()


def test_a_forced_vacuum_in_another_process_deletes_nothing_a_checkpoint_being_written_names(
    catalog: Catalog, writer: Catalog, vacuumer: Catalog
) -> None:
    """The checkpoint of version 11 is staged on the one of 8 (reusing the manifests of the partitions
    untouched since); another process then registers one of 10 written whole, so for retention the
    checkpoint of 8 is dead. A forced zero-retention vacuum keeps every file the staged checkpoint names,
    its own and the reused ones, and deletes what really is dead; the checkpoint then registers and is
    what a reader of version 11 starts from."""
    table = eight_versions(writer, "sales.race")
    for _ in range(3):
        commit_into(table, "d0")  # versions 9..11 touch one partition: 11 reuses the others' manifests
    staged = stage(writer, table, 11, "staged")
    will_name = named(table, staged.path)
    own = {p for p in will_name if "-staged" in p}
    reused = will_name - own
    assert reused and reused <= named(table, registered(writer, table)[8]), "it builds on checkpoint 8"

    # another process writes the checkpoint of 10 whole (no base), and registers it
    other = vacuumer.table("sales.race")
    whole = stage_checkpoint(
        vacuumer.services.coordinator,
        vacuumer.services.storage(other.location),
        other.snapshot(10),
        "whole",
        None,
        lease_ttl_seconds=30,
    )
    assert whole is not None and whole.register()
    assert not reused & named(table, registered(writer, table)[10]), "only the staged checkpoint names these"
    assert other.expire(retain_versions=1, retain_duration="0s", force=True).oldest_version_kept == 11

    before = metadata_files(table)
    report = other.vacuum(retain_duration="0s", force=True)
    checkpoints = registered(writer, table)
    kept = will_name | named(table, checkpoints[10]) | named(table, checkpoints[8])  # 8: what 11 builds on
    assert set(report.metadata) == before - kept
    assert registered(writer, table)[4] in report.metadata, "what is dead still goes"
    assert all(Path(table.location, p).exists() for p in will_name)

    assert staged.register()
    assert registered(writer, table)[11] == staged.path
    with catalog_with(catalog, checkpoint_interval=4) as reader:
        again = reader.table("sales.race")
        assert reader.services.snapshots.load(again.table_id, again.location, 11).to_json() == replayed(
            catalog, table, 11
        )
        assert again.fsck().ok
    # registered, it is judged like any other: the checkpoint of 8 goes now, what 11 reuses stays
    after = other.vacuum(retain_duration="0s", force=True)
    assert registered(writer, table)[8] in after.metadata and not set(after.metadata) & will_name


def test_a_checkpoint_staged_while_vacuum_lists_the_files_is_kept(
    writer: Catalog, vacuumer: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer registers and writes its files just as the vacuum starts listing: the vacuum reads
    etcd only after listing, so it sees the writer of every file it listed, and deletes none of them,
    however old their modification times say they are."""
    table = eight_versions(writer, "sales.listing")
    for _ in range(3):
        commit_into(table, "d0")
    other = vacuumer.table("sales.listing")
    assert other.expire(retain_versions=1, retain_duration="0s", force=True).oldest_version_kept == 11
    staged: list[StagedCheckpoint] = []
    real_walk = Storage.walk

    def walk(storage: Storage, relative: str) -> Iterator[FileInfo]:
        if not staged:  # the first listing of the vacuum
            staged.append(stage(writer, table, 11, "listing"))
            # and its files older than the vacuum's cutoff, as mtimes tell (a store whose clock is
            # behind): only the order of listing and reading etcd protects them, not their age
            past = time.time() - 3600
            for path in named(table, staged[0].path) - named(table, registered(writer, table)[8]):
                os.utime(Path(table.location, path), (past, past))
        yield from real_walk(storage, relative)

    monkeypatch.setattr(Storage, "walk", walk)
    report = other.vacuum(retain_duration="0s", force=True)
    monkeypatch.setattr(Storage, "walk", real_walk)
    will_name = named(table, staged[0].path)
    assert report.metadata and not set(report.metadata) & will_name
    assert staged[0].register()
    assert all(Path(table.location, p).exists() for p in will_name)


def test_checkpoints_archived_while_vacuum_reads_their_registrations_are_kept(
    writer: Catalog, vacuumer: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The archiver moves the keys of checkpoints 4 and 8 into a segment right after the vacuum lists the
    segments: etcd was read before, so the vacuum found them there (and an archiver running between the
    two reads writes its segment before etcd lets go), and it keeps the checkpoint a reader of version 5
    starts from."""
    table = eight_versions(writer, "sales.archived")
    for version in range(9, 13):
        commit_into(table, f"d{version % 6}")
    assert writer.services.flush()
    checkpoints = registered(writer, table)
    assert sorted(checkpoints) == [4, 8, 12]
    other = vacuumer.table("sales.archived")
    assert other.expire(retain_versions=8, retain_duration="0s", force=True).oldest_version_kept == 5
    real = Archive.all_checkpoints
    archived: list[int] = []

    def all_checkpoints(archive: Archive) -> tuple[list[tuple[int, str]], bool]:
        found = real(archive)
        if not archived:  # the archiver runs as soon as the vacuum has listed the segments
            archived.append(table.archive(keep_versions=1).archived_upto)
        return found

    monkeypatch.setattr(Archive, "all_checkpoints", all_checkpoints)
    report = other.vacuum(retain_duration="0s", force=True)
    assert archived == [11] and writer.services.coordinator.checkpoints(table.table_id) == [(12, checkpoints[12])]
    kept = named(table, checkpoints[4]) | named(table, checkpoints[8]) | named(table, checkpoints[12])
    assert not set(report.metadata) & kept
    assert all(Path(table.location, p).exists() for p in kept)


def test_a_checkpoint_whose_files_vanished_before_its_registration_is_not_registered(
    catalog: Catalog, writer: Catalog, caplog: pytest.LogCaptureFixture
) -> None:
    """A manifest the staged checkpoint names is deleted behind its back: it is not registered, its
    writer's registration ends, and readers replay the log as before."""
    table = eight_versions(writer, "sales.vanished")
    commit_into(table, "d0")
    staged = stage(writer, table, 9, "vanishing")
    gone = sorted(named(table, staged.path) - {staged.path})[0]
    Path(table.location, gone).unlink()

    with caplog.at_level(logging.WARNING, logger="acidtables.core.log.checkpoint_writer"):
        assert not staged.register()
    assert "1 manifest(s) it names are gone" in caplog.text and gone in caplog.text
    assert 9 not in registered(writer, table)
    _, writers = writer.services.coordinator.checkpoints_and_writers(table.table_id)
    assert writers == {}
    with catalog_with(catalog, checkpoint_interval=4) as reader:
        assert reader.table("sales.vanished").snapshot(9).to_json() == replayed(catalog, table, 9)


def test_a_checkpoint_whose_writer_lost_its_lease_is_never_registered_and_its_files_are_vacuumed(
    catalog: Catalog, writer: Catalog, vacuumer: Catalog
) -> None:
    """The writer's lease expires while its checkpoint is staged (etcd unreachable too long, or the
    process died): its registration goes with the lease, so a vacuum takes its files as a dead writer's
    leftovers, and the checkpoint can never be registered, not even while its files are all there."""
    table = eight_versions(writer, "sales.expired")
    commit_into(table, "d0")
    staged = stage(writer, table, 9, "expiring")
    own = {p for p in named(table, staged.path) if "-expiring" in p}
    lease = writer.services.coordinator.process_lease_id(30)
    vacuumer.services.coordinator.client.revoke_lease(lease)

    assert not staged.register()  # every file is there; its registration is not
    assert 9 not in registered(writer, table)
    other = vacuumer.table("sales.expired")
    report = other.vacuum(retain_duration="0s", force=True)
    assert own <= set(report.metadata)
    assert not any(Path(table.location, p).exists() for p in own)


def test_a_table_with_an_unreadable_checkpoint_shrinks_again_once_a_newer_one_can_be_read(
    catalog: Catalog, writer: Catalog, vacuumer: Catalog, caplog: pytest.LogCaptureFixture
) -> None:
    """The list of checkpoint 8 is gone (as a vacuum racing the checkpointer once left it): while it is
    the newest, vacuum keeps every manifest (what it names is unknown); once checkpoint 12 is registered
    and readable, the manifests only 8 could have named go, and every retained version still reads."""
    table = eight_versions(writer, "sales.lost")
    lost = registered(writer, table)[8]
    only_lost = named(table, lost) - {lost}
    Path(table.location, lost).unlink()
    other = vacuumer.table("sales.lost")
    assert other.expire(retain_versions=5, retain_duration="0s", force=True).oldest_version_kept == 4

    with caplog.at_level(logging.WARNING, logger="acidtables.core.maintenance.metadata_files"):
        pinned = other.vacuum(retain_duration="0s", force=True)
    assert "no newer checkpoint can be read either, so vacuum keeps every manifest" in caplog.text
    assert not any("/manifests/" in p for p in pinned.metadata)

    for _ in range(4):
        commit_into(table, "d1")  # version 12 asks for a checkpoint, written whole (8 cannot be built on)
    assert writer.services.flush()
    newest = registered(writer, table)[12]
    assert not named(table, newest) & only_lost
    assert other.expire(retain_versions=5, retain_duration="0s", force=True).oldest_version_kept == 8
    retained = {v: other.snapshot(v).to_json() for v in range(8, 13)}

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="acidtables.core.maintenance.metadata_files"):
        shrunk = other.vacuum(retain_duration="0s", force=True)
    assert "keeps every manifest" not in caplog.text
    assert "readers of versions 8..11 replay the log instead" in caplog.text
    assert only_lost <= set(shrunk.metadata)
    assert metadata_files(table) == named(table, newest)
    with catalog_with(catalog, checkpoint_interval=4) as reader:
        again = reader.table("sales.lost")
        assert {v: again.snapshot(v).to_json() for v in retained} == retained
    assert other.vacuum(retain_duration="0s", force=True).metadata == ()


def test_a_checkpoint_is_not_written_when_a_newer_one_was_registered_after_it_chose_its_base(
    writer: Catalog, vacuumer: Catalog
) -> None:
    """Chosen on checkpoint 8, the checkpoint of 9 finds, once its writer is registered, that the
    checkpoint of 10 is: it writes nothing and leaves no registration behind."""
    table = eight_versions(writer, "sales.overtaken")
    commit_into(table, "d0")
    commit_into(table, "d0")
    other = vacuumer.table("sales.overtaken")
    assert vacuumer.services.snapshots.write_checkpoint(other.snapshot(10), "newer")
    snapshots = writer.services.snapshots
    previous = snapshots._previous(table.table_id, table.location, 9)  # chosen before 10 was registered
    assert previous is not None and previous.version == 8
    before = metadata_files(table)
    staged = stage_checkpoint(
        writer.services.coordinator,
        writer.services.storage(table.location),
        table.snapshot(9),
        "overtaken",
        previous,
        lease_ttl_seconds=30,
    )
    assert staged is None
    assert metadata_files(table) == before
    assert writer.services.coordinator.checkpoints_and_writers(table.table_id)[1] == {}


def test_a_checkpoint_proves_itself_before_it_is_registered(writer: Catalog) -> None:
    """A torn list (the store kept half of it) is not registered."""
    table = eight_versions(writer, "sales.torn")
    commit_into(table, "d0")
    staged = stage(writer, table, 9, "torn")
    path = Path(table.location, staged.path)
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    assert not staged.register()
    assert 9 not in registered(writer, table)
    with pytest.raises(ValueError):
        proven_checkpoint(path.read_bytes(), 9)


def test_repair_writes_an_unreadable_checkpoint_again_and_vacuum_then_deletes_the_old_one(
    catalog: Catalog, writer: Catalog, vacuumer: Catalog
) -> None:
    """fsck names a torn checkpoint and the repair; `repair()` writes it again from the log, commits no
    version, and registers it in place of the old one, whose files the next vacuum deletes."""
    table = eight_versions(writer, "sales.repaired")
    torn = registered(writer, table)[8]
    old = named(table, torn)
    Path(table.location, torn).write_bytes(b"{torn")
    other = vacuumer.table("sales.repaired")
    [problem] = next(c for c in other.fsck().checks if c.name == "checkpoints").problems
    assert torn in problem and "readers of the versions it starts replay the log instead" in problem
    assert "`acidtables fsck sales.repaired --repair` writes it again" in problem

    assert other.repair(dry_run=True).checkpoints == (8,)
    assert registered(writer, table)[8] == torn
    report = other.repair()
    assert report.checkpoints == (8,) and report.version is None and other.version == 8
    rewritten = registered(writer, table)[8]
    assert rewritten != torn and other.fsck().ok
    with catalog_with(catalog, checkpoint_interval=4) as reader:
        again = reader.table("sales.repaired")
        assert reader.services.snapshots.load(again.table_id, again.location, 8).to_json() == replayed(
            catalog, table, 8
        )
    swept = other.vacuum(retain_duration="0s", force=True)
    assert torn in swept.metadata and not set(swept.metadata) & named(table, rewritten)
    assert old - named(table, registered(writer, table)[4]) <= set(swept.metadata)
    assert other.repair().checkpoints == ()


def test_a_registration_that_fails_leaves_no_writer_registered(
    writer: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """etcd does not answer the registration: the error is raised, and the writer's registration is
    ended anyway, so its files do not stay protected for the rest of the process's life."""
    table = eight_versions(writer, "sales.unanswered")
    commit_into(table, "d0")
    staged = stage(writer, table, 9, "unanswered")
    coordinator = writer.services.coordinator
    assert list(coordinator.checkpoints_and_writers(table.table_id)[1]) == [staged.writer]

    def unanswered(*_: object) -> bool:
        raise CoordinatorUnavailable("etcd did not answer a checkpoint registration")

    monkeypatch.setattr(coordinator, "register_checkpoint", unanswered)
    with pytest.raises(CoordinatorUnavailable):
        staged.register()
    assert coordinator.checkpoints_and_writers(table.table_id)[1] == {}
