"""Retention (issue 18): expire sets how far back time travel reaches, vacuum deletes the files only
expired versions read. Commit times come from an injected clock, so a week passes in a line."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from tests.helpers.object_store import BUCKET, s3_endpoint  # noqa: F401 (the fixture)
from tests.jobs import compact, seed_partition, stage
from tests.test_object_store import stage as stage_object

from acidtables import Catalog, Table
from acidtables.core import InvalidArgumentError, VersionExpiredError
from acidtables.core.coordination.coordinator import Coordinator
from acidtables.core.coordination.embedded import EmbeddedEtcd
from acidtables.core.log.services import Services
from acidtables.core.maintenance.retention import registration_window_seconds
from acidtables.core.settings import EtcdSettings, Settings
from acidtables.core.storage.storage import Storage

HOUR_US = 3600 * 1_000_000
START_US = 1_790_000_000 * 1_000_000


class Clock:
    """Wall-clock microseconds that move only when the test says so."""

    def __init__(self) -> None:
        self.now = START_US

    def __call__(self) -> int:
        return self.now

    def advance(self, hours: float) -> None:
        self.now += int(hours * HOUR_US)


@pytest.fixture
def clock() -> Clock:
    return Clock()


def _open(settings: Settings, clock: Clock) -> Catalog:
    return Catalog(settings, services=Services(settings, Coordinator(settings.etcd), clock=clock))


@pytest.fixture
def timed(catalog: Catalog, clock: Clock) -> Iterator[Catalog]:
    with _open(catalog.settings, clock) as timed_catalog:
        yield timed_catalog


def _overwrite(table: Table, partition: str = "a") -> str:
    """Replace the partition's file; returns the new file's path."""
    with table.begin("insert_overwrite") as tx:
        tx.remove_files(tx.scan(f"dt = '{partition}'"))
        new = stage(tx, partition)
        tx.add_files([new])
        tx.set_scope([{"dt": partition}])
        tx.commit()
    return tx.storage.relative(new.path)


def _hourly_overwrites(table: Table, clock: Clock, count: int) -> list[str]:
    """`count` overwrites of one partition an hour apart: version v holds only the file of commit v."""
    paths = []
    for _ in range(count):
        clock.advance(1)
        paths.append(_overwrite(table))
    return paths


def test_expire_keeps_both_limits_and_time_travel_behind_them_fails_at_planning(timed: Catalog, clock: Clock) -> None:
    table = timed.create_table("ns.t", schema="id BIGINT, dt STRING", partition_by=["dt"])
    _hourly_overwrites(table, clock, 40)  # versions 1..40, one an hour
    history = table.history()
    changes = table.changes(1, 40)

    report = table.expire(retain_versions=5, retain_duration="10h", force=True)  # the duration keeps more
    assert report.oldest_version_kept == 30  # current at now - 10h, when version 31 had not landed yet
    table.snapshot(30)
    with pytest.raises(VersionExpiredError, match=r"version 29 has expired.*retain_versions=5, retain_duration=10h"):
        table.snapshot(29)
    with pytest.raises(VersionExpiredError, match="keeps versions 30 and newer"):
        table.snapshot(timestamp=(clock.now - 20 * HOUR_US) / 1e6)
    assert table.history() == history and table.changes(1, 40) == changes  # history stays

    assert table.expire(retain_versions=3, retain_duration="1h", force=True).oldest_version_kept == 38
    # a longer retention later never brings expired versions back (their files may be gone)
    assert table.expire(retain_versions=1000, retain_duration="168h").oldest_version_kept == 38


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"retain_duration": "1h"}, r"retain_duration=1h is shorter than the safety minimum 168h.*force=True"),
        ({"retain_duration": "7 days"}, r"expire\(\): retain_duration='7 days' is not a duration"),
        ({"retain_duration": -5}, "must be a duration of 0 or more"),
        ({"retain_versions": 0}, "retain_versions must be an int >= 1"),
    ],
)
def test_expire_refuses_bad_retention_naming_it(timed: Catalog, kwargs: dict[str, object], message: str) -> None:
    table = timed.create_table("ns.bad", schema="id BIGINT")
    with pytest.raises(InvalidArgumentError, match=message):
        table.expire(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="shorter than the safety minimum"):
        table.vacuum(retain_duration="167h")


def test_vacuum_deletes_exactly_the_files_only_expired_versions_read(timed: Catalog, clock: Clock) -> None:
    table = timed.create_table("ns.v", schema="id BIGINT, dt STRING", partition_by=["dt"])
    with table.begin("insert_into") as tx:  # a file every version reads: never eligible
        tx.add_files([stage(tx, "keep")])
        tx.commit()
    paths = _hourly_overwrites(table, clock, 30)  # versions 2..31; paths[i] is read by version i + 2 only
    location = Path(table.location)

    assert table.vacuum(retain_duration="1h", force=True).files_deleted == 0  # nothing expired yet
    table.expire(retain_versions=10, retain_duration="0h", force=True)  # keeps 22..31
    pinned = table.begin("update")  # a running transaction reading version 31 keeps its files
    pinned.register_in_flight()

    # vacuum's own duration: files removed within the last 15 hours stay (removed at 17.. by then)
    plan = table.vacuum(retain_duration="15h", dry_run=True, force=True)
    assert plan.dry_run and all((location / p).exists() for p in plan.paths)
    sizes = sum((location / p).stat().st_size for p in plan.paths)
    report = table.vacuum(retain_duration="15h", force=True)
    assert report.paths == plan.paths and report.files_deleted == plan.files_deleted  # the dry run was exact
    removed_at = {paths[i]: i + 3 for i in range(len(paths) - 1)}  # the overwrite after it removed it
    cutoff_version = 31 - 15  # committed more than 15 hours before now
    expected = sorted(p for p, v in removed_at.items() if v <= cutoff_version)
    assert sorted(report.paths) == expected
    assert report.bytes_deleted == plan.bytes_deleted == sizes > 0
    for path in expected:
        assert not (location / path).exists()
    for path in set(paths) - set(expected):
        assert (location / path).exists()
    assert len(table.snapshot().files_by_path) == 2
    for version in range(22, 32):  # every retained version still reads all its files
        assert all((location / f.path).exists() for f in table.snapshot(version).files)

    clock.advance(24)
    again = table.vacuum(retain_duration="1h", force=True)
    assert sorted(again.paths) == sorted(p for p, v in removed_at.items() if cutoff_version < v <= 22)
    assert table.vacuum(retain_duration="1h", force=True).files_deleted == 0  # idempotent
    pinned.abort()


def test_vacuum_keeps_the_snapshot_a_registered_transaction_reads(timed: Catalog, clock: Clock) -> None:
    table = timed.create_table("ns.pin", schema="id BIGINT, dt STRING", partition_by=["dt"])
    paths = _hourly_overwrites(table, clock, 10)
    reader = table.begin("update")  # pinned at version 10, before the retention moves past it
    reader.register_in_flight()
    paths += _hourly_overwrites(table, clock, 10)
    clock.advance(200)
    table.expire(retain_versions=1, retain_duration="0h", force=True)
    deleted = set(table.vacuum(retain_duration="0h", force=True).paths)
    assert paths[9] not in deleted and (Path(table.location) / paths[9]).exists()  # the reader's file
    assert deleted == set(paths[:9])
    reader.abort()
    table.expire(retain_versions=1, retain_duration="0h", force=True)
    assert set(table.vacuum(retain_duration="0h", force=True).paths) == set(paths[9:19])


def test_vacuum_keeps_the_snapshot_of_a_transaction_too_young_to_be_registered(timed: Catalog, clock: Clock) -> None:
    """A transaction is registered register_after_seconds after it begins; a forced zero-retention vacuum
    in between must not delete its snapshot's files (issue 41, item 3). Vacuum judges no removal younger
    than the registration window, so it cannot."""
    table = timed.create_table("ns.young", schema="id BIGINT, dt STRING", partition_by=["dt"])
    paths = _hourly_overwrites(table, clock, 3)  # version 3 holds only paths[2]
    young = table.begin("update")  # pinned at version 3, not registered (that comes 1 s after it began)
    assert young.scan("dt = 'a'")[0].path.endswith(paths[2])
    clock.advance(1)
    paths.append(_overwrite(table))  # removes paths[2]; the vacuum below runs at the same instant
    table.expire(retain_versions=1, retain_duration="0h", force=True)
    report = table.vacuum(retain_duration="0s", force=True)
    assert paths[2] not in report.paths and (Path(table.location) / paths[2]).exists()  # the young one's file
    assert set(report.paths) == set(paths[:2])  # older removals are judged as before
    window = registration_window_seconds(timed.settings.commit.register_after_seconds)
    clock.advance(window / 3600 + 1 / 3600)  # past the window: such a transaction is registered, or done
    young.abort()
    assert set(table.vacuum(retain_duration="0s", force=True).paths) == {paths[2]}


@pytest.fixture
def s3_timed(etcd_server: EmbeddedEtcd, etcd_prefix: str, s3_endpoint: str, clock: Clock) -> Iterator[Catalog]:  # noqa: F811
    settings = Settings(
        etcd=EtcdSettings((etcd_server.endpoint,), prefix=etcd_prefix),
        warehouse=f"s3a://{BUCKET}/r-{uuid.uuid4().hex[:8]}",
    )
    with _open(settings, clock) as catalog:
        yield catalog


def test_vacuum_on_an_object_store(s3_timed: Catalog, clock: Clock) -> None:
    table = s3_timed.create_table("ns.s3", schema="id BIGINT, dt STRING", partition_by=["dt"])
    written = []
    for n in range(6):
        clock.advance(1)
        with table.begin("insert_overwrite") as tx:
            tx.remove_files(tx.scan("dt = 'a'"))
            new = stage_object(tx, name=f"part-{n}.parquet")
            tx.add_files([new])
            tx.set_scope([{"dt": "a"}])
            tx.commit()
        written.append(new.path)
    table.expire(retain_versions=2, retain_duration="0h", force=True)  # keeps 5 and 6
    plan = table.vacuum(retain_duration="0h", dry_run=True, force=True)
    report = table.vacuum(retain_duration="0h", force=True)
    assert report.paths == plan.paths and sorted(report.paths) == sorted(written[:4])
    left = {f.path for f in Storage(table.location).walk("data")}
    assert left == set(written[4:])
    assert len(table.snapshot(5).files) == 1


def test_a_process_that_saw_the_table_long_ago_starts_its_transaction_from_the_current_head(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """begin() takes no round trip from a head this process saw recently; one seen long ago (a snapshot
    whose files a retention may have let vacuum delete since) is read again."""
    table = catalog.create_table("ns.stale", schema="id BIGINT, dt STRING", partition_by=["dt"])
    with Catalog(catalog.settings) as other:
        theirs = other.table("ns.stale")
        theirs.begin("insert_into").abort()  # this process now knows version 0
        _overwrite(table)
        assert theirs.begin("update").read_version == 0  # recently seen: no round trip
        monkeypatch.setattr("acidtables.core.coordination.tables.KNOWN_HEAD_SECONDS", 0.0)
        assert theirs.begin("update").read_version == 1  # seen "long ago": asked again


def test_vacuum_leaves_another_tables_files_and_foreign_files_alone(timed: Catalog, clock: Clock) -> None:
    mine = timed.create_table("ns.mine", schema="id BIGINT, dt STRING", partition_by=["dt"])
    other = timed.create_table("ns.other", schema="id BIGINT, dt STRING", partition_by=["dt"])
    theirs = _hourly_overwrites(other, clock, 4)  # the other table's history, never expired
    ours = _hourly_overwrites(mine, clock, 4)
    foreign = Path(mine.location, "data", "not-ours.parquet")
    foreign.write_bytes(b"someone else's")
    clock.advance(1)  # the last removal older than the registration window
    mine.expire(retain_versions=1, retain_duration="0h", force=True)
    deleted = mine.vacuum(retain_duration="0h", force=True).paths
    assert sorted(deleted) == sorted(ours[:3])
    assert all(Path(other.location, p).exists() for p in theirs)  # every file the other table wrote
    assert Path(mine.location, ours[3]).exists() and foreign.read_bytes() == b"someone else's"


# --- a compaction on a quiet table (issue 24, item 3) ---------------------------------------------------


def _tokens(table: Table, timestamp: float) -> Counter[str]:
    """The rows a read as of `timestamp` returns, read from the Parquet files on disk (their `token`
    column): a file vacuum deleted fails the read."""
    snapshot = table.snapshot(timestamp=timestamp)
    return Counter(
        token
        for f in snapshot.files
        for token in pq.read_table(table.storage.absolute(f.path), columns=["token"]).column("token").to_pylist()
    )


def _appends_then_compaction(table: Table, clock: Clock, appends: int = 4) -> list[str]:
    """`appends` appends an hour apart (versions 1..appends), an hour later a minor compaction of their
    files into one holding the same rows, then an hour of quiet; returns the compaction's input paths."""
    for n in range(appends):
        clock.advance(1)
        with table.begin("insert_into") as tx:
            tx.add_files([stage(tx, "a", tokens=[f"r{n}-0", f"r{n}-1"])])
            tx.commit()
    clock.advance(1)
    job = compact(table, "a")
    inputs = sorted(f.path for f in job.tx.snapshot.files)
    job.tx.commit()
    clock.advance(1)
    return inputs


def _quiet(catalog: Catalog, name: str) -> Table:
    return catalog.create_table(name, schema="id BIGINT, token STRING, dt STRING", partition_by=["dt"])


@pytest.mark.parametrize("how", ["deletion vector", "restore"])
def test_a_file_removed_long_ago_and_added_back_is_judged_by_its_latest_removal(
    timed: Catalog, clock: Clock, how: str
) -> None:
    """A deletion vector's update removes a file's entry and adds the same path back; a restore adds back
    a path removed long ago. Compacted away a moment ago, such a file left the table a moment ago, and a
    reader that planned before the compaction still reads it: vacuum must judge it by that removal."""
    table = timed.create_table("ns.again", "id BIGINT, token STRING, dt STRING", partition_by=["dt"],
                               row_level_concurrency=how == "deletion vector")  # fmt: skip
    seed_partition(table, "a", files=1)
    [file] = table.snapshot().files
    clock.advance(200)
    if how == "deletion vector":
        with table.begin("delete") as tx:
            tx.remove_files([file])
            tx.add_files([replace(file, deletion_vector=(0,), added_version=None)])
            tx.commit()
    else:
        with table.begin("insert_overwrite") as tx:
            tx.remove_files([file])
            tx.add_files([stage(tx, "a")])
            tx.commit()
        clock.advance(1)
        table.restore(version=1)
    clock.advance(200)
    pinned = table.snapshot()
    assert file.path in pinned.files_by_path
    compact(table, "a").tx.commit()  # now: the file leaves the table
    table.expire(retain_versions=1)
    assert file.path not in table.vacuum(dry_run=True).paths
    table.vacuum()
    assert Path(table.location, file.path).exists(), "a file that left the table a moment ago was vacuumed"
    assert pinned.version < table.version
    clock.advance(24 * 7 + 1)  # once the removal is older than the retention, it goes
    table.expire(retain_versions=1)
    assert file.path in table.vacuum().paths
    assert all(Path(table.location, f.path).exists() for f in table.snapshot().files)  # the live ones stay


def test_expire_and_vacuum_after_a_compaction_on_a_quiet_table_free_its_inputs(timed: Catalog, clock: Clock) -> None:
    other = _quiet(timed, "ns.neighbour")
    theirs = _appends_then_compaction(other, clock, appends=2)  # never expired: its inputs must stay
    table = _quiet(timed, "ns.quiet")
    inputs = _appends_then_compaction(table, clock)
    head = table.version
    assert head == 5
    [output] = table.snapshot().files
    times = [h.time_version.timestamp() for h in table.history() if h.time_version is not None]
    last_data, first_data = max(times), min(times)
    moments = (last_data, last_data + 1800, clock.now / 1e6)  # at, after and long after the last data commit
    before = {t: _tokens(table, t) for t in moments}
    assert all(len(rows) == 8 for rows in before.values())
    history = table.history()

    report = table.expire(retain_versions=1, retain_duration="0s", force=True)
    assert report.oldest_version_kept == head  # not head - 1: the compaction's version holds the same rows
    vacuumed = table.vacuum(retain_duration="1s", force=True)

    assert sorted(vacuumed.paths) == inputs and vacuumed.files_deleted == 4
    assert not any(Path(table.location, p).exists() for p in inputs)
    assert Path(table.location, output.path).exists()  # the live file
    assert all(Path(other.location, p).exists() for p in theirs)  # another table's compaction inputs
    assert {t: _tokens(table, t) for t in moments} == before  # reads by time: the same rows, from the head
    assert table.history() == history and [h.version for h in history] == list(range(head, -1, -1))
    with pytest.raises(VersionExpiredError, match="version 4 has expired"):
        table.snapshot(4)
    with pytest.raises(VersionExpiredError):  # before the last data commit: an expired version, named at planning
        table.snapshot(timestamp=first_data)


@pytest.mark.parametrize(
    ("retain_duration", "oldest"),
    [
        ("1h", 5),  # as of the compaction's time: the compaction
        ("2h", 5),  # as of the last append's time: its rows, which the compaction holds too
        ("3h", 3),  # as of the third append's time: the fourth append changed the rows since
    ],
)
def test_expire_keeps_the_version_a_read_as_of_the_retention_reads(
    timed: Catalog, clock: Clock, retain_duration: str, oldest: int
) -> None:
    table = _quiet(timed, "ns.window")
    _appends_then_compaction(table, clock)  # appends at 1h..4h, compaction at 5h, now 6h
    cutoff = clock.now / 1e6 - int(retain_duration[0]) * 3600
    assert table.version_at(cutoff) == oldest
    assert table.expire(retain_versions=1, retain_duration=retain_duration, force=True).oldest_version_kept == oldest
    assert table.snapshot(timestamp=cutoff).version == oldest  # still readable
