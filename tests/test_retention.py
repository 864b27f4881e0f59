"""Retention (issue 18): expire sets how far back time travel reaches, vacuum deletes the files only
expired versions read. Commit times come from an injected clock, so a week passes in a line."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.helpers.object_store import BUCKET, s3_endpoint  # noqa: F401 (the fixture)
from tests.jobs import stage
from tests.test_object_store import stage as stage_object

from acidtables import Catalog, Table
from acidtables.core import InvalidArgumentError, VersionExpiredError
from acidtables.core.embedded import EmbeddedEtcd
from acidtables.core.etcd import Coordinator
from acidtables.core.services import Services
from acidtables.core.settings import EtcdSettings, Settings
from acidtables.core.storage import Storage

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
        monkeypatch.setattr("acidtables.core.etcd.KNOWN_HEAD_SECONDS", 0.0)
        assert theirs.begin("update").read_version == 1  # seen "long ago": asked again


def test_vacuum_leaves_another_tables_files_and_foreign_files_alone(timed: Catalog, clock: Clock) -> None:
    mine = timed.create_table("ns.mine", schema="id BIGINT, dt STRING", partition_by=["dt"])
    other = timed.create_table("ns.other", schema="id BIGINT, dt STRING", partition_by=["dt"])
    theirs = _hourly_overwrites(other, clock, 4)  # the other table's history, never expired
    ours = _hourly_overwrites(mine, clock, 4)
    foreign = Path(mine.location, "data", "not-ours.parquet")
    foreign.write_bytes(b"someone else's")
    mine.expire(retain_versions=1, retain_duration="0h", force=True)
    deleted = mine.vacuum(retain_duration="0h", force=True).paths
    assert sorted(deleted) == sorted(ours[:3])
    assert all(Path(other.location, p).exists() for p in theirs)  # every file the other table wrote
    assert Path(mine.location, ours[3]).exists() and foreign.read_bytes() == b"someone else's"
