"""ID versions, time versions, snapshots (MVCC), time travel, incremental reads, checkpoints, spilling."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from tests.helpers.tables import HeldCheckpoints, catalog_with, etcd_client
from tests.jobs import compact, insert_into, live_tokens, seed_partition, stage

from acidtables import Catalog, Table
from acidtables.core.log.records import CommitRecord, DataFile
from acidtables.core.log.services import Services
from acidtables.core.settings import EtcdSettings, Settings
from acidtables.errors import (
    CorruptMetadataError,
    InvalidArgumentError,
    TableAlreadyExistsError,
    TableNotFoundError,
    TransactionClosedError,
    VersionNotFoundError,
)


class SteppingClock:
    """An injected clock: each reading is `step` µs after the last, or set explicitly."""

    def __init__(self, start: datetime, step_us: int = 1_000_000) -> None:
        self.now = int(start.timestamp() * 1_000_000)
        self.step = step_us

    def __call__(self) -> int:
        self.now += self.step
        return self.now


def table(catalog: Catalog) -> Table:
    return catalog.create_table("sales.orders", schema="id BIGINT, dt STRING", partition_by=["dt"])


def test_every_commit_takes_the_next_id_version_and_only_data_changes_get_a_time_version(catalog: Catalog) -> None:
    t = table(catalog)
    seed_partition(t, "p1")
    compacted = compact(t, "p1").tx.commit()
    clustered = compact(t, "p1", operation="cluster").tx.commit()
    appended = insert_into(t, "p1").tx.commit()
    assert [h.version for h in reversed(t.history())] == [0, 1, 2, 3, 4, 5]
    assert compacted.time_version is None and clustered.time_version is None
    first, second = t.history()[-2], t.history()[-3]
    assert first.time_version is not None and second.time_version is not None
    assert appended.time_version is not None and appended.time_version > second.time_version > first.time_version


def test_time_versions_increase_even_when_the_clock_goes_backwards(catalog: Catalog) -> None:
    # D-19: commit time = max(wall clock, previous + 1 µs)
    t = table(catalog)
    backwards = SteppingClock(datetime(2026, 11, 22, 12, tzinfo=UTC), step_us=-5_000_000)
    skewed = Catalog(
        catalog.settings, services=Services(catalog.settings, catalog.services.coordinator, clock=backwards)
    )
    times = [insert_into(skewed.table(t.name), "p1").tx.commit().time_version for _ in range(3)]
    assert times[0] < times[1] < times[2]  # type: ignore[operator]
    assert times[2] - times[0] == timedelta(microseconds=2)  # type: ignore[operator]


def test_a_pinned_snapshot_never_changes_while_commits_land(catalog: Catalog) -> None:
    t = table(catalog)
    seed_partition(t, "p1")
    pinned = t.snapshot()
    before = set(pinned.files_by_path)
    reader = t.begin("update")  # a reader transaction pins the same version
    for _ in range(20):
        insert_into(t, "p1").tx.commit()
    compact(t, "p1").tx.commit()
    assert set(pinned.files_by_path) == before
    assert reader.snapshot.version == pinned.version and set(reader.snapshot.files_by_path) == before
    assert t.snapshot(version=pinned.version).files_by_path.keys() == before
    assert len(t.snapshot().files) == 1  # while the head moved on


def test_time_travel_by_timestamp_finds_the_newest_data_commit_at_or_before_it(catalog: Catalog) -> None:
    clock = SteppingClock(datetime(2026, 11, 22, 10, tzinfo=UTC), step_us=60_000_000)  # a minute per reading
    c = Catalog(catalog.settings, services=Services(catalog.settings, catalog.services.coordinator, clock=clock))
    t = table(c)
    v1 = insert_into(t, "p1").tx.commit()
    v2 = insert_into(t, "p1").tx.commit()
    assert v1.time_version is not None and v2.time_version is not None
    assert t.snapshot(timestamp=v1.time_version).version == v1.version
    assert t.snapshot(timestamp=v2.time_version - timedelta(microseconds=1)).version == v1.version
    assert t.snapshot(timestamp=v2.time_version.isoformat()).version == v2.version
    with pytest.raises(VersionNotFoundError, match="no data commit at or before"):
        t.snapshot(timestamp=v1.time_version - timedelta(seconds=1))


def test_time_travel_after_the_last_data_commit_reads_the_compaction_that_kept_its_rows(catalog: Catalog) -> None:
    # issue 24 item 3: a compaction has no time version but holds the rows of the version before it,
    # so a read as of any time after that data commit reads the newest version holding them
    t = table(catalog)
    v1 = insert_into(t, "p1").tx.commit()
    v2 = insert_into(t, "p1").tx.commit()
    compacted = compact(t, "p1").tx.commit()
    for n in range(17):  # a run of commits without a time version longer than one read of the log
        altered = catalog.alter_table(t.name, properties={"owner": f"team-{n}"})
    assert v2.time_version is not None and (compacted.time_version, altered.time_version) == (None, None)
    assert [t.version_at(v2.time_version), t.version_at(datetime.now(UTC))] == [altered.version] * 2
    # a time still to come is refused, as Delta refuses it: a commit could still land before it
    with pytest.raises(VersionNotFoundError, match="DELTA_TIMESTAMP_GREATER_THAN_COMMIT"):
        t.version_at(datetime.now(UTC) + timedelta(days=1))
    assert t.snapshot(timestamp=v2.time_version).version == t.version == altered.version
    assert live_tokens(t.snapshot(timestamp=v2.time_version)) == live_tokens(t.snapshot(v2.version))
    # a later data commit ends the run: a time before it still reads the run's newest version
    later = insert_into(t, "p2").tx.commit()
    assert later.time_version is not None and v1.time_version is not None
    assert t.version_at(later.time_version - timedelta(microseconds=1)) == altered.version
    assert t.version_at(later.time_version) == later.version
    assert t.version_at(v1.time_version) == v1.version  # a data commit followed by one: itself


def test_changes_by_id_version_leave_out_compaction_unless_asked(catalog: Catalog) -> None:
    t = table(catalog)
    a = insert_into(t, "p1").tx.commit()
    b = insert_into(t, "p1").tx.commit()
    c = compact(t, "p1").tx.commit()
    d = insert_into(t, "p2").tx.commit()
    changes = t.changes(start_version=a.version, end_version=d.version)
    assert [ch.version for ch in changes] == [a.version, b.version, d.version]
    assert all(ch.operation.display == "INSERT INTO" for ch in changes)
    physical = t.changes(start_version=a.version, include_rewrites=True)
    assert [ch.version for ch in physical] == [a.version, b.version, c.version, d.version]
    assert len(physical[2].removed) == 2 and len(physical[2].added) == 1


def test_changes_by_time_range_include_only_data_commits_in_the_range(catalog: Catalog) -> None:
    clock = SteppingClock(datetime(2026, 11, 22, 10, tzinfo=UTC), step_us=60_000_000)
    c = Catalog(catalog.settings, services=Services(catalog.settings, catalog.services.coordinator, clock=clock))
    t = table(c)
    infos = [insert_into(t, "p1").tx.commit() for _ in range(4)]
    compact(t, "p1").tx.commit()
    times = [i.time_version for i in infos]
    assert all(x is not None for x in times)
    window = t.changes(start_time=times[1], end_time=times[2])
    assert [ch.version for ch in window] == [infos[1].version, infos[2].version]
    assert [ch.version for ch in t.changes(start_time=times[3])] == [infos[3].version]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"start_version": 3, "end_version": 2}, "after end_version"),
        ({"start_version": -1}, "non-negative"),
        ({"start_version": 1, "start_time": "2026-01-01"}, "not both"),
        ({"start_time": "yesterday"}, "not a time"),
        ({"end_version": 99}, "no version 99"),
    ],
)
def test_bad_change_ranges_get_a_clear_error(catalog: Catalog, kwargs: dict[str, object], message: str) -> None:
    t = table(catalog)
    insert_into(t, "p1").tx.commit()
    with pytest.raises((InvalidArgumentError, VersionNotFoundError), match=message):
        t.changes(**kwargs)  # type: ignore[arg-type]


def test_snapshot_of_a_missing_version_names_the_newest(catalog: Catalog) -> None:
    t = table(catalog)
    with pytest.raises(VersionNotFoundError, match="newest is 0"):
        t.snapshot(version=5)


def test_a_commit_returns_before_its_checkpoint_is_written(catalog: Catalog) -> None:
    """A checkpoint costs what the table holds, so it is written off the commit path (issue 32): the
    commit that reaches the interval returns while its checkpoint is still being written, and closing the
    catalog finishes it."""
    writer = catalog_with(catalog, checkpoint_interval=2)
    t = table(writer)
    held = HeldCheckpoints(writer)
    for _ in range(2):
        insert_into(t, "p1").tx.commit()  # version 2 asks for a checkpoint, and returns
    assert held.writing.wait(30)
    storage = writer.services.storage(t.location)
    assert storage.list_dir("_acidtables/checkpoints") == []
    assert not writer.services.flush(timeout_seconds=0.05)  # still being written
    held.release.set()
    writer.close()
    (written,) = storage.list_dir("_acidtables/checkpoints")
    assert Path(written.path).name.startswith(f"{2:020d}-")


def test_checkpoints_let_a_cold_reader_skip_the_history(catalog: Catalog) -> None:
    writer = catalog_with(catalog, checkpoint_interval=10)
    t = table(writer)
    for _ in range(25):
        insert_into(t, "p1").tx.commit()
    assert writer.services.flush()  # checkpoints are written off the commit path
    storage = writer.services.storage(t.location)
    checkpoints = sorted(p.path for p in storage.list_dir("_acidtables/checkpoints"))
    assert [Path(p).name[:20] for p in checkpoints] == [f"{10:020d}", f"{20:020d}"]
    # every log entry the newest checkpoint covers is made unreadable: a cold load that read any of
    # them would fail (CorruptMetadataError), so loading proves it read only the log after version 20
    host, port = catalog.settings.etcd.endpoints[0].removeprefix("http://").split(":")
    raw = etcd_client(host, int(port))
    for version in range(1, 21):
        raw.put(f"{catalog.settings.etcd.prefix}/tables/{t.table_id}/log/{version:020d}", b"\xff not json")
    cold = catalog_with(catalog, checkpoint_interval=10)
    snap = cold.table(t.name).snapshot()
    assert snap.version == 25 and len(snap.files) == 25
    assert set(snap.files_by_path) == set(t.snapshot().files_by_path)
    with pytest.raises(CorruptMetadataError):  # the damage is real: an older version needs those entries
        cold.table(t.name).snapshot(version=15)
    writer.close()
    cold.close()


def test_a_large_commit_record_goes_to_an_immutable_commit_file(catalog: Catalog) -> None:
    small = catalog_with(catalog, inline_record_max_bytes=2048)
    t = table(small)
    tx = t.begin("insert_into")
    files = [stage(tx, f"p{i}") for i in range(40)]  # > 2 KiB of file entries, 40 partitions
    tx.add_files(files)
    info = tx.commit()
    raw = small.services.coordinator.read_log(t.table_id, info.version - 1, info.version)[0]
    assert set(raw) == {"version", "txn_id", "operation", "commit_file", "checksum"}
    stored = json.loads(Path(t.location, raw["commit_file"]).read_text())
    assert CommitRecord.from_json(stored).version == info.version
    assert len(t.snapshot().files) == 40 and len(t.snapshot().partitions()) == 40
    with pytest.raises(FileExistsError):  # immutable: the name can never be written again
        small.services.storage(t.location).write_exclusive(raw["commit_file"], b"{}")
    small.close()


def test_abort_deletes_staged_files_and_nothing_becomes_visible(catalog: Catalog) -> None:
    t = table(catalog)
    job = insert_into(t, "p1")
    assert job.staged_paths
    job.tx.abort()
    assert job.staged_paths == []
    assert t.version == 0 and t.snapshot().files == []
    with pytest.raises(TransactionClosedError, match="aborted"):
        job.tx.commit()


def test_abort_on_error_inside_a_with_block(catalog: Catalog) -> None:
    t = table(catalog)
    with pytest.raises(RuntimeError), t.begin("insert_into") as tx:
        tx.add_files([stage(tx, "p1")])
        raise RuntimeError("the job failed")
    assert not Path(tx.staging_dir).exists() and t.version == 0


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda tx: tx.add_files([DataFile("x.parquet", partition={"day": "1"})]), "partitioned by"),
        (lambda tx: tx.add_files([DataFile("", partition={"dt": "1"})]), "needs a path"),
        (lambda tx: tx.add_files([DataFile("x.parquet", partition={"dt": "1"}, rows=-1)]), "negative"),
        (lambda tx: tx.remove_files(["data/none.parquet"]), "not an active file"),
        (lambda tx: tx.add_files(["x.parquet"]), "expected DataFile"),
        (lambda tx: tx.set_app_transaction("", 1), "non-empty"),
        (lambda tx: tx.set_scope([{"day": "x"}]), "partition columns"),
    ],
)
def test_bad_staging_calls_name_the_problem(catalog: Catalog, make: object, message: str) -> None:
    t = table(catalog)
    tx = t.begin("insert_into")
    with pytest.raises(InvalidArgumentError, match=message):
        make(tx)  # type: ignore[operator]
    tx.abort()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"schema": "id"}, "must be '<name> <TYPE>'"),
        ({"schema": "id BIGINT, id STRING"}, "appears twice"),
        ({"schema": "id BIGINT, _acid_txn STRING"}, "'_acid_txn' starts with '_acid_'"),
        ({"schema": "id BIGINT", "location": "/tmp/runs[1]/t"}, "contains \\[ \\], which readers such as Spark"),
        ({"schema": "id BIGINT", "partition_by": ["dt"]}, "partition_by column 'dt' is not in the schema"),
        ({"schema": "id BIGINT", "conflict_policy": "maxcompute"}, "for primary-key tables"),
        (
            {"schema": "id BIGINT", "primary_key": ["id"], "conflict_policy": "delta"},
            "uses conflict_policy 'maxcompute'",
        ),
        ({"schema": "id BIGINT", "conflict_policy": "optimistic"}, "use one of maxcompute"),
        ({"schema": "id BIGINT", "isolation_level": "Snapshot"}, "Serializable"),
        ({"schema": "id BIGINT", "primary_key": ["id"], "isolation_level": "Serializable"}, "delta policy only"),
        ({"schema": "id BIGINT", "primary_key": ["id"], "row_level_concurrency": True}, "needs the delta policy"),
    ],
)
def test_bad_table_definitions_name_the_problem(catalog: Catalog, kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        catalog.create_table("sales.bad", **kwargs)  # type: ignore[arg-type]
    assert catalog.list_tables() == []


def test_policy_defaults_follow_the_primary_key(catalog: Catalog) -> None:
    pk = catalog.create_table("a.pk", schema="id BIGINT", primary_key=["id"])
    plain = catalog.create_table("a.plain", schema="id BIGINT")
    assert pk.metadata.conflict_policy.value == "maxcompute" and pk.metadata.isolation_level is None
    assert plain.metadata.conflict_policy.value == "delta"
    assert plain.metadata.isolation_level is not None and plain.metadata.isolation_level.value == "WriteSerializable"


def test_catalog_lists_finds_and_drops_tables(catalog: Catalog) -> None:
    t = table(catalog)
    insert_into(t, "p1").tx.commit()
    catalog.create_table("other.t", schema="id BIGINT")
    assert catalog.list_tables() == ["other.t", "sales.orders"]
    assert catalog.list_tables("sales") == ["sales.orders"]
    with pytest.raises(TableAlreadyExistsError):
        catalog.create_table("sales.orders", schema="id BIGINT")
    catalog.drop_table("sales.orders", delete_data=True)
    assert catalog.list_tables() == ["other.t"]
    # only the tombstone is left: the location is free again once the dropped table's leases expire
    left = sorted(str(p.relative_to(t.location)) for p in Path(t.location).rglob("*") if p.is_file())
    assert left == ["_acidtables/dropped.json", "_acidtables/owner.json"]
    with pytest.raises(TableNotFoundError, match=r"no table sales\.orders"):
        catalog.table("sales.orders")
    with pytest.raises(TableNotFoundError):
        t.begin("insert_into")


def test_connect_without_settings_names_both_variables() -> None:
    from acidtables.errors import ConfigurationError

    with pytest.raises(ConfigurationError) as caught:
        Catalog.connect(env={})
    assert "ACIDTABLES_ETCD_ENDPOINTS" in str(caught.value) and "ACIDTABLES_WAREHOUSE" in str(caught.value)


def test_connect_reads_the_environment(catalog: Catalog, tmp_path: Path) -> None:
    env = {
        "ACIDTABLES_ETCD_ENDPOINTS": ",".join(catalog.settings.etcd.endpoints),
        "ACIDTABLES_ETCD_PREFIX": catalog.settings.etcd.prefix,
        "ACIDTABLES_WAREHOUSE": str(tmp_path),
        "ACIDTABLES_COMMIT_MAX_ATTEMPTS": "7",
    }
    table(catalog)
    with Catalog.connect(env=env) as connected:
        assert connected.list_tables() == ["sales.orders"]
        assert connected.settings.commit.max_attempts == 7


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"ACIDTABLES_ETCD_ENDPOINTS": "etcd:2379"}, "must look like http://host:2379"),
        ({"ACIDTABLES_ETCD_USER": "u"}, "both ACIDTABLES_ETCD_USER and ACIDTABLES_ETCD_PASSWORD"),
        ({"ACIDTABLES_ETCD_REQUEST_TIMEOUT_SECONDS": "soon"}, "not a number"),
        ({"ACIDTABLES_COMMIT_MAX_ATTEMPTS": "0"}, "at least 1"),
    ],
)
def test_bad_settings_name_the_variable(env: dict[str, str], message: str) -> None:
    from acidtables.errors import ConfigurationError

    base = {"ACIDTABLES_ETCD_ENDPOINTS": "http://127.0.0.1:1", "ACIDTABLES_WAREHOUSE": "/tmp/w"}
    with pytest.raises(ConfigurationError, match=message):
        Settings.from_env({**base, **env})


def test_local_catalog_runs_an_embedded_etcd_and_stops_it(tmp_path: Path) -> None:
    with Catalog.local(tmp_path) as local:
        t = local.create_table("demo.t", schema="id BIGINT")
        insert_into(t, None).tx.commit()
        owned = local._owned
        assert owned is not None and owned.is_running()
        assert Path(t.location).is_relative_to(tmp_path / "warehouse")
        with Catalog.local(tmp_path) as second:  # a second process/catalog reuses the running etcd
            assert second._owned is None and second.table("demo.t").version == 1
    assert not owned.is_running()


def test_history_limit_reads_only_the_newest_entries(catalog: Catalog) -> None:
    t = table(catalog)
    for _ in range(5):
        insert_into(t, "p1").tx.commit()
    newest = t.history(limit=2)
    assert [h.version for h in newest] == [5, 4]
    assert newest[0].rows_added == 2 and newest[0].files_added == 1 and newest[0].operation.display == "INSERT INTO"
    assert live_tokens(t.snapshot(), "p1").total() == 10


def test_an_etcd_settings_object_rejects_an_empty_endpoint_list() -> None:
    from acidtables.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="no etcd endpoints"):
        EtcdSettings(())


def test_the_snapshot_cached_after_a_commit_knows_which_version_added_each_file(catalog: Catalog) -> None:
    # merge-on-read orders rows by the version that added their file; the committer's cached snapshot
    # is built from its own staged record, which had no version yet
    t = table(catalog)
    first = insert_into(t, "p1").tx.commit()
    second = insert_into(t, "p1").tx.commit()
    assert sorted(f.added_version for f in t.snapshot().files) == [first.version, second.version]  # type: ignore[type-var]


def test_a_table_location_is_kept_in_one_spelling(
    catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Readers list a table's files with the location cleaned up (absolute, no //, . or ..); the log's
    file keys must be spelled the same way, so the location is stored that way."""
    messy = catalog.create_table("a.messy", schema="id BIGINT", location=f"{tmp_path}//x/./y/../z/")
    assert messy.location == f"{tmp_path}/x/z"
    monkeypatch.chdir(tmp_path)
    relative = catalog.create_table("a.relative", schema="id BIGINT", location="rel/t")
    assert relative.location == f"{tmp_path}/rel/t"
    assert catalog.table("a.relative").location == f"{tmp_path}/rel/t"
