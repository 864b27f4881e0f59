"""The log in two tiers (issue 18, design §2): etcd keeps a short window, older entries move to archive
segments in the table location, and every reader answers exactly as before archiving."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.jobs import stage

from acidtables import Catalog, Table
from acidtables.core import ConcurrentModificationException, CorruptMetadataError, VersionExpiredError
from acidtables.core.coordination.archiving import ArchiveMarker
from acidtables.core.coordination.embedded import EmbeddedEtcd
from acidtables.core.log.archive import ARCHIVE_DIR

WINDOW = 20
TESTS_DIR = Path(__file__).parent


@pytest.fixture
def small_window(catalog: Catalog) -> Iterator[Catalog]:
    """The test's catalog with a 20-version window in etcd and a checkpoint every 10 versions."""
    commit = dataclasses.replace(catalog.settings.commit, log_window_versions=WINDOW, checkpoint_interval=10)
    with Catalog(dataclasses.replace(catalog.settings, commit=commit)) as small:
        yield small


def _keys(catalog: Catalog, table: Table, kind: str) -> list[str]:
    coordinator = catalog.services.coordinator
    prefix = coordinator.keys.table(table.table_id) + kind + "/"
    return [m.key.decode() for _, m in coordinator.client.get_prefix(prefix)]


def _append(table: Table, partition: str, app: tuple[str, int] | None = None) -> Any:
    with table.begin("insert_into") as tx:
        if app:
            tx.set_app_transaction(*app)
        tx.add_files([stage(tx, partition)])
        return tx.commit()


def _overwrite(table: Table, partition: str) -> Any:
    with table.begin("insert_overwrite") as tx:
        tx.remove_files(tx.scan(f"dt = '{partition}'"))
        tx.add_files([stage(tx, partition)])
        tx.set_scope([{"dt": partition}])
        return tx.commit()


def _answers(table: Table, infos: list[Any]) -> dict[str, Any]:
    """Everything a reader can ask of the log, spelled so two runs compare with ==."""
    middle = infos[len(infos) // 2]
    early = infos[3]
    return {
        "history": table.history(),
        "commits": [r.to_json() for r in table.commits(0)],
        "snapshots": {v: sorted(table.snapshot(v).files_by_path) for v in (0, 5, 17, 33, 64, table.version)},
        "by_time": [table.version_at(i.time_version) for i in (early, middle) if i.time_version],
        "snapshot_by_time": sorted(table.snapshot(timestamp=early.time_version).files_by_path),
        "changes": [(c.version, [f.path for f in c.added]) for c in table.changes(2, 40)],
        "changes_by_time": [
            c.version for c in table.changes(start_time=early.time_version, end_time=middle.time_version)
        ],
        "find_commit": [table.find_commit(i.txn_id) for i in (infos[0], early, middle, infos[-1])],
        "app_ids": dict(table.snapshot().app_ids),
    }


def test_archived_history_answers_exactly_as_etcd_did(catalog: Catalog, small_window: Catalog) -> None:
    table = catalog.create_table("ns.t", schema="id BIGINT, dt STRING", partition_by=["dt"])
    infos = []
    for n in range(90):  # the test's own catalog keeps the default window of 100: nothing is archived yet
        infos.append(_overwrite(table, f"p{n % 3}") if n % 5 == 4 else _append(table, f"p{n % 4}", (f"job{n}", 1)))
    assert not (Path(table.location) / ARCHIVE_DIR).exists()
    before = _answers(table, infos)

    report = small_window.table("ns.t").archive()
    assert (report.archived_upto, report.versions_archived) == (90 - WINDOW, 90 - WINDOW + 1)
    assert len(_keys(catalog, table, "log")) == WINDOW
    assert len(_keys(catalog, table, "txns")) == WINDOW
    assert all(int(k.rsplit("/", 1)[1]) > 70 for k in _keys(catalog, table, "checkpoints"))

    with Catalog(catalog.settings) as cold:  # a process that never saw the table before archiving
        assert _answers(cold.table("ns.t"), infos) == before
    assert _answers(table, infos) == before
    # an idempotent retry of an archived application version is still recognised as applied
    again = _append(table, "p0", ("job10", 1))
    assert again.skipped and again.version == infos[10].version


def test_commits_keep_etcd_within_the_window_without_anyone_archiving(small_window: Catalog) -> None:
    table = small_window.create_table("ns.busy", schema="id BIGINT, dt STRING", partition_by=["dt"])
    bound = WINDOW + WINDOW // 4 + 1
    for n in range(200):
        _append(table, f"p{n % 4}")
        if n % 25 == 0:
            small_window.services.flush()
            assert len(_keys(small_window, table, "log")) <= bound
    small_window.services.flush()
    keys, size = small_window.services.coordinator.table_usage(table.table_id)
    assert len(_keys(small_window, table, "log")) <= bound
    assert keys <= 4 * bound + 4  # log, txns and times per version, a few checkpoints, head and marker
    assert size < 150_000
    assert [h.version for h in table.history()] == list(range(200, -1, -1))


def test_a_transaction_older_than_the_window_is_judged_through_the_archive(small_window: Catalog) -> None:
    # never registered (a registered one keeps its entries in etcd): its conflict check must use the archive
    unregistered = dataclasses.replace(small_window.settings.commit, register_after_seconds=3600.0)
    with Catalog(dataclasses.replace(small_window.settings, commit=unregistered)) as catalog:
        _judged_through_the_archive(catalog)


def _judged_through_the_archive(small_window: Catalog) -> None:
    table = small_window.create_table("ns.old", schema="id BIGINT, dt STRING", partition_by=["dt"])
    _append(table, "a")
    conflicting = table.begin("insert_overwrite")  # reads partition a; a later overwrite of a beats it
    conflicting.remove_files(conflicting.scan("dt = 'a'"))
    conflicting.add_files([stage(conflicting, "a")])
    conflicting.set_scope([{"dt": "a"}])
    rebased = table.begin("insert_into")  # an append anywhere: the rules let it through
    rebased.add_files([stage(rebased, "b")])
    _overwrite(table, "a")
    for n in range(500):
        _append(table, f"q{n % 3}")
    table.archive()
    assert min(int(k.rsplit("/", 1)[1]) for k in _keys(small_window, table, "log")) > conflicting.read_version + 450

    with pytest.raises(ConcurrentModificationException):
        conflicting.commit()
    info = rebased.commit()
    assert info.version == 503 and info.retries == 1
    assert len(table.snapshot().files_by_path) == 1 + 500 + 1  # a (overwritten), the q appends, b


def test_a_registered_transaction_keeps_the_entries_it_needs_in_etcd(small_window: Catalog) -> None:
    table = small_window.create_table("ns.pinned", schema="id BIGINT, dt STRING", partition_by=["dt"])
    for n in range(10):
        _append(table, f"p{n}")
    long_running = table.begin("insert_into")
    long_running.register_in_flight()
    for n in range(60):
        _append(table, f"p{n}")
    table.archive()
    assert min(int(k.rsplit("/", 1)[1]) for k in _keys(small_window, table, "log")) == long_running.read_version + 1
    long_running.abort()
    table.archive()
    assert len(_keys(small_window, table, "log")) == WINDOW


def test_a_torn_segment_is_skipped_for_another_and_a_missing_one_is_named(
    catalog: Catalog, small_window: Catalog
) -> None:
    table = catalog.create_table("ns.torn", schema="id BIGINT, dt STRING", partition_by=["dt"])
    for n in range(40):
        _append(table, f"p{n % 2}")
    expected = table.history()
    # an archiver that died after writing its segment, before etcd let go: the next run writes another
    archive = catalog.services.log(table.table_id, table.location).archive
    batch = catalog.services.coordinator.archive_batch(table.table_id, ArchiveMarker(), 40 - WINDOW)
    archive.write(batch.entries, batch.times, batch.checkpoints)
    small_window.table("ns.torn").archive()
    segments = sorted((Path(table.location) / ARCHIVE_DIR).iterdir())
    assert len(segments) == 2  # same versions twice
    for torn in segments:  # whichever a reader picks first, a torn copy is skipped for the whole one
        whole = torn.read_bytes()
        torn.write_bytes(whole[:100])  # as if the write had been cut short
        with Catalog(catalog.settings) as cold:
            assert cold.table("ns.torn").history() == expected
        torn.write_bytes(whole)
    for segment in segments:
        segment.unlink()
    with Catalog(catalog.settings) as cold, pytest.raises(CorruptMetadataError, match="no readable archive segment"):
        cold.table("ns.torn").history()


def test_an_archive_segment_holds_what_etcd_held(catalog: Catalog, small_window: Catalog) -> None:
    table = catalog.create_table("ns.seg", schema="id BIGINT, dt STRING", partition_by=["dt"])
    for n in range(30):
        _append(table, f"p{n % 2}")
    raw = catalog.services.coordinator.read_log(table.table_id, -1, 30 - WINDOW)
    small_window.table("ns.seg").archive(keep_versions=WINDOW)
    (segment,) = (Path(table.location) / ARCHIVE_DIR).iterdir()
    content = json.loads(segment.read_bytes())["segment"]
    assert content["entries"] == raw
    assert (content["first"], content["last"]) == (0, 30 - WINDOW)
    assert [v for _, v in content["times"]] == list(range(1, 30 - WINDOW + 1))
    assert content["checkpoints"] == []  # the catalog writing it checkpoints every 100 versions


@pytest.mark.parametrize(
    "point",
    ["after-segment", "mid-batch", "before-marker-step", "before-txn-keys", "after-txn-keys", "expire-after-record"],
)
def test_an_archiver_killed_anywhere_leaves_nothing_lost_or_doubled(
    catalog: Catalog, etcd_server: EmbeddedEtcd, tmp_path: Path, point: str
) -> None:
    table = catalog.create_table("ns.crash", schema="id BIGINT, dt STRING", partition_by=["dt"])
    for n in range(60):
        _append(table, f"p{n % 3}")
    history = table.history()
    snapshots = {v: sorted(table.snapshot(v).files_by_path) for v in (3, 27, 45, 60)}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")])}
    warehouse = catalog.settings.warehouse
    command = [sys.executable, "-m", "helpers.crash_archiver", etcd_server.endpoint, catalog.settings.etcd.prefix]
    done = subprocess.run([*command, warehouse, "ns.crash", point], env=env, capture_output=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()[-2000:]
    # what the dead archiver left is readable as it is...
    with Catalog(catalog.settings) as cold:
        assert cold.table("ns.crash").history() == history
        assert [cold.table("ns.crash").find_commit(h.txn_id) for h in history] == [h.version for h in history]
    # ...and the next run finishes the job
    table.archive(keep_versions=10)
    assert [int(k.rsplit("/", 1)[1]) for k in _keys(catalog, table, "log")] == list(range(51, 61))
    assert len(_keys(catalog, table, "txns")) == 10
    with Catalog(catalog.settings) as cold:
        again = cold.table("ns.crash")
        assert again.history() == history
        if point == "expire-after-record":
            assert sorted(again.snapshot(60).files_by_path) == snapshots[60]
            with pytest.raises(VersionExpiredError):
                again.snapshot(45)
        else:
            assert {v: sorted(again.snapshot(v).files_by_path) for v in snapshots} == snapshots
        assert [again.find_commit(h.txn_id) for h in history] == [h.version for h in history]


@pytest.mark.slow
def test_five_thousand_commits_stay_within_the_window_and_read_back_whole(catalog: Catalog) -> None:
    """At the default window (100 versions): etcd holds at most the window, half more between archiving
    runs, and the keys of a commit; everything older answers from the archive."""
    table = catalog.create_table("ns.long", schema="id BIGINT, dt STRING", partition_by=["dt"])
    window = catalog.settings.commit.log_window_versions
    infos = []
    most_keys = most_bytes = 0
    for n in range(5000):
        infos.append(_append(table, f"p{n % 8}", (f"job{n}", 1)))
        if n % 250 == 249:
            catalog.services.flush()
            keys, size = catalog.services.coordinator.table_usage(table.table_id)
            most_keys, most_bytes = max(most_keys, keys), max(most_bytes, size)
            assert len(_keys(catalog, table, "log")) <= window + window // 2 + 1
    assert most_bytes < 150_000, most_bytes
    assert most_keys <= 3 * (window + window // 2 + 1) + 5, most_keys

    with Catalog(catalog.settings) as cold:
        old = cold.table("ns.long")
        assert [h.version for h in old.history()] == list(range(5000, -1, -1))
        assert [c.version for c in old.changes(10, 30)] == list(range(10, 31))
        early = infos[41]
        assert old.version_at(early.time_version) == early.version
        assert len(old.snapshot(early.version).files_by_path) == early.version
        assert len(old.snapshot(timestamp=early.time_version).files_by_path) == early.version
        assert old.find_commit(early.txn_id) == early.version
        retry = _append(old, "p0", ("job41", 1))
        assert retry.skipped and retry.version == early.version


def test_a_segment_read_while_it_was_being_written_is_read_again(
    catalog: Catalog, small_window: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by CI: a reader listing the archive while an archiver writes a segment must never take
    the half-written file for the segment, nor remember it as unreadable for good. Segments are
    published whole (written aside, then linked to their name), and a segment judged unreadable is
    read again before a version is called missing."""
    table = catalog.create_table("ns.race", schema="id BIGINT, dt STRING", partition_by=["dt"])
    for n in range(40):
        _append(table, f"p{n % 2}")
    expected = table.history()
    small_window.table("ns.race").archive()
    (segment,) = (Path(table.location) / ARCHIVE_DIR).glob("*.json")
    assert not list((Path(table.location) / ARCHIVE_DIR).glob(".*"))  # no temporary file left behind
    with Catalog(catalog.settings) as cold:
        reader = cold.table("ns.race")
        archive = cold.services.log(reader.table_id, reader.location).archive
        real_read = archive.storage.read
        torn = {"left": 1}

        def read_once_torn(relative: str) -> bytes:
            if relative.endswith(segment.name) and torn["left"]:
                torn["left"] -= 1
                return b""  # what a reader saw of a segment being written, before publishing was atomic
            return real_read(relative)

        monkeypatch.setattr(archive.storage, "read", read_once_torn)
        assert reader.history() == expected
        assert torn["left"] == 0


def test_an_archiver_that_loses_the_marker_goes_on_and_reports_where_the_archive_ends(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another archiver (a committing process's background one) moves the marker between this one's
    segment and its compare-and-swap: this one loses, reads the marker again, and its report says where
    the archive really ends, not where its own view of it stopped."""
    table = catalog.create_table("ns.race", schema="id BIGINT, dt STRING", partition_by=["dt"])
    for n in range(30):
        _append(table, f"p{n % 3}")
    coordinator = catalog.services.coordinator
    advance = coordinator.advance_archive
    raced: list[bool] = []

    def other_archiver_first(*args: Any, **kwargs: Any) -> Any:
        if not raced:
            raced.append(True)
            assert table.archive(keep_versions=10).archived_upto == 20  # the other one, to the end
        return advance(*args, **kwargs)

    monkeypatch.setattr(coordinator, "advance_archive", other_archiver_first)
    report = table.archive(keep_versions=10)
    assert raced and report.archived_upto == 20 and report.versions_archived == 0
    assert [int(k.rsplit("/", 1)[1]) for k in _keys(catalog, table, "log")] == list(range(21, 31))
