"""The Delta Lake mirror (`mirror.formats` = `delta`): delta-rs reads every version acidtables offers, as
`Table.scan` reads it; Delta writers are refused; a crash leaves a readable earlier version that catches
up; vacuum never leaves Delta a version whose files are gone; what Delta cannot express is refused.

Files are committed through the core API (real Parquet files); test_scan_equivalence checks histories
Spark wrote.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from acidtables import Catalog, DataFile, Table
from acidtables.core import ColumnStats
from acidtables.core.coordination.coordinator import Coordinator
from acidtables.core.coordination.waiting import wait_for
from acidtables.core.log.services import Services, wall_clock_us
from acidtables.errors import InvalidArgumentError

deltalake = pytest.importorskip("deltalake")

_files = itertools.count()
MIRRORED = {"mirror.formats": "delta", "mirror.delta.checkpointInterval": "3"}


def commit(
    table: Table,
    rows: Mapping[str, Sequence[Any]] | None,
    partition: Mapping[str, Any] | None = None,
    *,
    operation: str = "insert_into",
    remove: Sequence[DataFile] = (),
) -> None:
    with table.begin(operation) as tx:
        if remove:
            tx.remove_files(remove)
        if rows is not None:
            path = Path(tx.staging_dir) / f"part-{next(_files):05d}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            data = pa.table(dict(rows))
            pq.write_table(data, path)
            tx.add_files([DataFile(str(path), dict(partition or {}), data.num_rows, path.stat().st_size)])
        tx.commit()


def sorted_rows(data: pa.Table, schema: pa.Schema) -> list[tuple[Any, ...]]:
    data = data.select(schema.names).cast(schema)
    return sorted((tuple(r.values()) for r in data.to_pylist()), key=lambda r: tuple((v is None, str(v)) for v in r))


def delta_rows(table: Table, version: int) -> list[tuple[Any, ...]]:
    schema = table.scan(version=version).schema
    return sorted_rows(deltalake.DeltaTable(table.location, version=version).to_pyarrow_table(), schema)


def delta_log(table: Table) -> list[str]:
    return sorted(p.name for p in (Path(table.location) / "_delta_log").iterdir())


@pytest.fixture
def events(catalog: Catalog) -> Table:
    """Six versions: appends into odd and NULL partitions, an overwrite, a column added, a delete."""
    table = catalog.create_table(
        "m.events", "id BIGINT, dt STRING, amount DOUBLE", partition_by=["dt"], properties=MIRRORED
    )
    commit(table, {"id": [1, 2], "amount": [1.0, 2.0]}, {"dt": "a/b=c %41"})
    commit(table, {"id": [3]}, {"dt": None})
    first = table.snapshot().files
    commit(table, {"id": [4], "amount": [4.0]}, {"dt": "ü x"}, operation="insert_overwrite", remove=first[:1])
    catalog.alter_table("m.events", add_columns="note STRING")
    commit(table, {"id": [5], "amount": [5.0], "note": ["n"]}, {"dt": "ü x"})
    commit(table, None, operation="delete", remove=[f for f in table.snapshot().files if f.partition["dt"] is None])
    # the background mirroring these commits asked for, done: a test that edits the log meets no writer
    assert catalog.services.flush(timeout_seconds=30)
    return table


def test_delta_readers_see_every_version_as_acidtables_does(events: Table) -> None:
    state = events.sync_mirror()
    assert (state.version, state.head, state.lag_versions) == (6, 6, 0)
    for version in range(events.version + 1):
        assert delta_rows(events, version) == sorted_rows(
            events.scan(version=version).to_arrow(), events.scan(version=version).schema
        ), version
    log = delta_log(events)
    assert "00000000000000000003.checkpoint.parquet" in log and "00000000000000000006.checkpoint.parquet" in log
    last = json.loads((Path(events.location) / "_delta_log" / "_last_checkpoint").read_text())
    assert last["version"] == 6
    history = deltalake.DeltaTable(events.location).history()
    assert [h["operation"] for h in history][:2] == ["DELETE", "WRITE"]


def test_delta_time_travel_by_timestamp_reads_what_acidtables_reads_as_of_it(events: Table) -> None:
    """Delta readers pick the newest version committed at or before a time by the commit files' times,
    which the mirror sets to each commit's. acidtables' read as of a time also takes the metadata-only
    commits after it (version_at), so its version can be later, with the same rows."""
    events.sync_mirror()
    for entry in events.history():
        if entry.version == 0:
            continue  # acidtables reads as of a time from the first data commit on
        at = entry.committed_at
        delta = deltalake.DeltaTable(events.location)
        delta.load_as_version(at)
        assert delta.version() == entry.version
        scan = events.scan(timestamp=at)
        data = scan.to_arrow()
        same = data.select([field.name for field in delta.schema().fields])
        schema = same.schema
        assert sorted_rows(delta.to_pyarrow_table(), schema) == sorted_rows(same, schema), entry.version


def test_the_committing_process_mirrors_in_the_background(events: Table) -> None:
    wait_for(lambda: events.mirror_state().lag_versions == 0, 30, message="the mirror to catch up")
    assert deltalake.DeltaTable(events.location).version() == events.version


def test_delta_writers_are_refused(events: Table) -> None:
    events.sync_mirror()
    before = delta_log(events)
    with pytest.raises(Exception, match="acidtablesCommits"):
        deltalake.write_deltalake(events.location, pa.table({"id": [9], "dt": ["x"]}), mode="append")
    assert delta_log(events) == before
    assert events.version == 6


def test_a_crash_leaves_an_earlier_version_that_catches_up(events: Table) -> None:
    events.sync_mirror()
    log = Path(events.location) / "_delta_log"
    for name in ("00000000000000000005.json", "00000000000000000006.json", "00000000000000000006.checkpoint.parquet"):
        (log / name).unlink()  # as if the writer died before writing them
    (log / "_last_checkpoint").write_text(json.dumps({"version": 3, "size": 4}))
    (log / ".00000000000000000005.json.1234abcd.tmp").write_bytes(b'{"add": {"pa')  # a torn temporary file
    assert deltalake.DeltaTable(events.location).version() == 4
    assert delta_rows(events, 4) == sorted_rows(events.scan(version=4).to_arrow(), events.scan(version=4).schema)
    assert events.mirror_state().lag_versions == 2
    events.sync_mirror()
    assert deltalake.DeltaTable(events.location).version() == 6


def test_vacuum_never_leaves_delta_a_version_whose_files_are_gone(catalog: Catalog, events: Table) -> None:
    events.sync_mirror()
    # a month later, so the files removed in the history are past every window vacuum keeps
    month = 30 * 86_400 * 1_000_000
    services = Services(catalog.settings, Coordinator(catalog.settings.etcd), clock=lambda: wall_clock_us() + month)
    with Catalog(catalog.settings, services=services) as later:
        table = later.table("m.events")
        table.expire(retain_versions=1, retain_duration="0s", force=True)
        report = table.vacuum(retain_duration="0s", force=True)
    assert report.files_deleted == 2  # the overwritten file and the deleted partition's
    log = delta_log(events)
    assert not [name for name in log if name[:20].isdigit() and int(name[:20]) < 6]
    assert delta_rows(events, 6) == sorted_rows(events.scan().to_arrow(), events.scan().schema)
    with pytest.raises(Exception):  # noqa: B017 - whichever error delta-rs names for a version it lacks
        deltalake.DeltaTable(events.location, version=4)


def test_turning_the_mirror_off_removes_its_log(catalog: Catalog, events: Table) -> None:
    events.sync_mirror()
    catalog.alter_table("m.events", properties={"mirror.formats": ""})
    state = events.sync_mirror()
    assert not state.enabled
    # the committing process's background writer may still be finishing a version it began before the
    # ALTER; its next run (the ALTER's own) removes what that left
    wait_for(lambda: delta_log(events) == [], 30, message="the Delta log removed")


def test_a_file_removed_and_added_back_in_one_commit_stays_for_delta_readers(catalog: Catalog) -> None:
    """An overwrite that keeps one of the files it replaces removes and adds the same path in one commit:
    Delta readers let a remove win over an add of the same version, so the mirror writes only the add."""
    table = catalog.create_table("m.kept", "id BIGINT", properties=MIRRORED)
    commit(table, {"id": [1, 2]})
    (kept,) = table.snapshot().files
    with table.begin("insert_overwrite") as tx:
        tx.remove_files([kept])
        tx.add_files([replace(kept, added_version=None)])
        tx.commit()
    table.sync_mirror()
    assert delta_rows(table, 2) == sorted_rows(table.scan().to_arrow(), table.scan().schema) == [(1,), (2,)]


def test_a_mirrored_table_refuses_names_stored_in_another_case(catalog: Catalog) -> None:
    """acidtables reads names regardless of case as Spark does, but Delta readers of the mirror match them
    exactly: a file spelling a column or struct field otherwise would read as NULL there."""
    table = catalog.create_table("m.cased", "id BIGINT, s STRUCT<a: INT>", properties=MIRRORED)
    struct = pa.struct([("A", pa.int32())])
    with pytest.raises(
        InvalidArgumentError, match=r"spells ID \(the table's id\), s\.A \(the table's s\.a\) in another case"
    ):
        commit(table, {"ID": [1], "s": pa.array([{"A": 7}], struct)})
    assert table.version == 0
    commit(table, {"id": [1], "s": pa.array([{"a": 7}], pa.struct([("a", pa.int32())]))})
    table.sync_mirror()
    assert deltalake.DeltaTable(table.location).to_pyarrow_table().to_pylist() == [{"id": 1, "s": {"a": 7}}]


def test_dropping_the_table_with_its_data_removes_its_delta_log(catalog: Catalog, events: Table) -> None:
    """Otherwise a Delta reader would still open the dropped table, then fail on its deleted files. Another
    mirrored table keeps its log, its files and its rows."""
    other = catalog.create_table("m.other", "id BIGINT", properties=MIRRORED)
    commit(other, {"id": [7]})
    other.sync_mirror()
    events.sync_mirror()
    location = Path(events.location)
    report = catalog.drop_table("m.events", delete_data=True)
    assert report is not None and "_delta_log" in report.deleted and not report.kept
    assert not (location / "_delta_log").exists()
    with pytest.raises(Exception):  # noqa: B017 - whichever error delta-rs names for a location with no table
        deltalake.DeltaTable(str(location))
    assert all(Path(other.location, f.path).exists() for f in other.snapshot().files)
    assert deltalake.DeltaTable(other.location).to_pyarrow_table().to_pylist() == [{"id": 7}]


def test_turning_it_on_later_mirrors_from_the_oldest_retained_version(catalog: Catalog) -> None:
    table = catalog.create_table("m.late", "id BIGINT")
    commit(table, {"id": [1]})
    commit(table, {"id": [2]})
    catalog.alter_table("m.late", properties={"mirror.formats": "delta"})
    table.sync_mirror()
    assert [delta_rows(table, v) for v in range(4)] == [[], [(1,)], [(1,), (2,)], [(1,), (2,)]]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"primary_key": ["id"]}, "has a primary key"),
        ({"row_level_concurrency": True}, "deletion vectors are acidtables' own"),
        ({"properties": {"mirror.formats": "delta,iceberg"}}, "names iceberg; the formats are delta"),
        ({"properties": {"mirror.formats": "delta", "mirror.delta.checkpointInterval": "0"}}, "whole number >= 1"),
    ],
)
def test_what_delta_cannot_express_is_refused(catalog: Catalog, options: dict[str, Any], message: str) -> None:
    properties = {"mirror.formats": "delta", **options.pop("properties", {})}
    with pytest.raises(InvalidArgumentError, match=message):
        catalog.create_table("m.refused", "id BIGINT", properties=properties, **options)
    assert catalog.list_tables("m") == []


def test_a_location_holding_another_writers_delta_log_is_refused(catalog: Catalog, tmp_path: Path) -> None:
    foreign = tmp_path / "foreign"
    deltalake.write_deltalake(str(foreign), pa.table({"id": [1]}))
    with pytest.raises(InvalidArgumentError, match="is not empty and it is not an acidtables table"):
        catalog.create_table("m.foreign", "id BIGINT", location=str(foreign), properties={"mirror.formats": "delta"})
    # a Delta writer that wrote into a table's location before its mirror was turned on
    table = catalog.create_table("m.shared", "id BIGINT")
    deltalake.write_deltalake(table.location, pa.table({"id": [1]}))
    with pytest.raises(InvalidArgumentError, match=r"already holds a Delta log .* that another Delta writer made"):
        catalog.alter_table("m.shared", properties={"mirror.formats": "delta"})
    assert table.version == 0


def test_polars_reads_the_mirror_at_a_version(events: Table) -> None:
    polars = pytest.importorskip("polars")
    events.sync_mirror()
    # through delta-rs's reader: Polars' own takes every `name=value` directory of a file's path for a
    # partition column, and acidtables' staging directories (`_acid_txn=...`) are such directories
    frame = polars.read_delta(events.location, version=2, use_pyarrow=True)
    assert sorted(frame["id"].to_list()) == [1, 2, 3]
    with pytest.raises(polars.exceptions.SchemaFieldNotFoundError, match="_acid_txn"):
        polars.read_delta(events.location, version=2)  # if this starts passing, docs/reading.md can drop the flag


def test_a_mirror_left_behind_the_retention_restarts_at_the_oldest_kept_version(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Versions that expired before the mirror wrote them are never offered: the chain starts again at
    a checkpoint of the oldest version kept."""
    import acidtables.core.commit.committer as committer

    table = catalog.create_table("m.behind", "id BIGINT", properties={"mirror.formats": "delta"})
    commit(table, {"id": [1]})
    assert catalog.services.flush(timeout_seconds=30)
    monkeypatch.setattr(committer, "schedule_mirror", lambda *args: None)  # nobody mirrors meanwhile
    for n in range(2, 6):
        commit(table, {"id": [n]})
    assert table.expire(retain_versions=1, retain_duration="0s", force=True).oldest_version_kept == 5
    table.sync_mirror()
    assert delta_log(table) == [
        "00000000000000000005.checkpoint.parquet",
        "00000000000000000005.json",
        "_last_checkpoint",
    ]
    assert delta_rows(table, 5) == [(1,), (2,), (3,), (4,), (5,)]


def test_infinite_bounds_are_left_out_of_the_stats_delta_readers_parse(catalog: Catalog) -> None:
    table = catalog.create_table("m.inf", "id BIGINT, x DOUBLE", properties=MIRRORED)
    with table.begin("insert_into") as tx:
        path = Path(tx.staging_dir) / "part-0.parquet"
        path.parent.mkdir(parents=True)
        pq.write_table(pa.table({"id": [1, 2], "x": [float("-inf"), float("inf")]}), path)
        stats = {"id": ColumnStats(1, 2, 0), "x": ColumnStats(float("-inf"), float("inf"), 0)}
        tx.add_files([DataFile(str(path), {}, 2, path.stat().st_size, stats)])
        tx.commit()
    table.sync_mirror()
    log = (Path(table.location) / "_delta_log" / "00000000000000000001.json").read_text().splitlines()
    add = next(json.loads(line)["add"] for line in log if line.startswith('{"add"'))
    found = json.loads(add["stats"])  # strict JSON: no Infinity
    assert found["minValues"] == {"id": 1} and found["maxValues"] == {"id": 2} and found["numRecords"] == 2
    assert found["nullCount"] == {"id": 0, "x": 0}
