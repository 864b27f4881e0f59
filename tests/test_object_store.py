"""The location rules, drop, cleanup and the commit's proof of its files on an S3-protocol server (moto
on loopback): the same guarantees as on local disk, on `s3a://` locations."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tests.helpers.object_store import BUCKET, s3_endpoint  # noqa: F401 (the fixture)
from tests.helpers.tables import catalog_with

from acidtables import Catalog, DataFile, Table, Transaction
from acidtables.core import parse_predicate
from acidtables.core.coordination.embedded import EmbeddedEtcd, free_port
from acidtables.core.log import manifests
from acidtables.core.settings import EtcdSettings, Settings
from acidtables.core.storage.storage import OWNER_MARKER, S3_ENDPOINT, STAT_LIMIT, Storage
from acidtables.errors import InvalidArgumentError, LocationNotOwnedError, StorageUnavailableError

SCHEMA = "id BIGINT, dt STRING"


@pytest.fixture
def warehouse(s3_endpoint: str) -> str:  # noqa: F811
    return f"s3a://{BUCKET}/w-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def s3_catalog(etcd_server: EmbeddedEtcd, etcd_prefix: str, warehouse: str) -> Iterator[Catalog]:
    catalog = Catalog(Settings(etcd=EtcdSettings((etcd_server.endpoint,), prefix=etcd_prefix), warehouse=warehouse))
    try:
        yield catalog
    finally:
        catalog.close()


def parquet(rows: int) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.table({"id": pa.array(range(rows), pa.int64())}), sink)
    return sink.getvalue()


def stage(tx: Transaction, rows: int = 2, name: str = "part-0.parquet", dt: str = "a") -> DataFile:
    relative = f"{tx.storage.relative(tx.staging_dir)}/dt={dt}/{name}"
    payload = parquet(rows)
    tx.storage.write_exclusive(relative, payload)
    return DataFile(relative, {"dt": dt}, rows=rows, size_bytes=len(payload))


def with_rows(table: Table, commits: int = 2) -> Table:
    for i in range(commits):
        with table.begin("insert_into") as tx:
            tx.add_files([stage(tx, name=f"part-{i}.parquet")])
            tx.commit()
    return table


def objects(location: str) -> set[str]:
    return {f.path for f in Storage(location).walk("")}


def test_commits_and_snapshots_on_an_object_store(s3_catalog: Catalog) -> None:
    table = with_rows(s3_catalog.create_table("sales.t", schema=SCHEMA, partition_by=["dt"]), 3)
    assert table.location.startswith("s3a://")
    assert len(table.snapshot().files) == 3 and table.snapshot().row_count == 6
    assert OWNER_MARKER in objects(table.location)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (lambda tx: DataFile(f"{tx.storage.relative(tx.staging_dir)}/x.parquet", {"dt": "a"}, 1, 10), "does not exist"),
        (lambda tx: DataFile(stage(tx).path, {"dt": "a"}, 2, 1), "bytes but its entry says 1"),
        (lambda tx: DataFile(stage(tx).path, {"dt": "a"}, 5, stage(tx, name="p1.parquet").size_bytes), "holds 2 rows"),
        (lambda tx: DataFile(stage(tx, dt="b").path, {"dt": "a"}, 2, len(parquet(2))), "lies in directory dt=b"),
    ],
    ids=["missing", "size", "rows", "partition"],
)
def test_a_commit_proves_its_files_on_an_object_store(s3_catalog: Catalog, bad, message: str) -> None:  # type: ignore[no-untyped-def]
    table = s3_catalog.create_table("sales.t", schema=SCHEMA, partition_by=["dt"])
    tx = table.begin("insert_into")
    with pytest.raises(InvalidArgumentError, match=message):
        tx.add_files([bad(tx)])
    tx.abort()
    assert table.version == 0


@pytest.mark.parametrize(
    ("relative", "relation"),
    [("x/orders", "is the location of"), ("x/orders/sub", "lies inside"), ("x", "contains")],
    ids=["equal", "inside", "around"],
)
def test_object_store_locations_meeting_another_tables_are_refused(
    s3_catalog: Catalog, warehouse: str, relative: str, relation: str
) -> None:
    first = with_rows(
        s3_catalog.create_table("sales.orders", schema=SCHEMA, partition_by=["dt"], location=f"{warehouse}/x/orders")
    )
    before = objects(first.location)
    spelled = f"{warehouse}/{relative}".replace("s3a://", "s3://")  # another spelling of the same objects
    with pytest.raises(InvalidArgumentError, match=relation):
        s3_catalog.create_table("other.t", schema=SCHEMA, location=spelled)
    assert objects(first.location) == before


def test_the_object_store_warehouse_root_and_a_foreign_prefix_are_refused(s3_catalog: Catalog, warehouse: str) -> None:
    with pytest.raises(InvalidArgumentError, match="warehouse root"):
        s3_catalog.create_table("sales.t", schema=SCHEMA, location=warehouse)
    Storage(f"{warehouse}/reports").write_exclusive("q3.csv", b"a,b\n")
    with pytest.raises(InvalidArgumentError, match="not empty"):
        s3_catalog.create_table("sales.t", schema=SCHEMA, location=f"{warehouse}/reports")
    assert objects(f"{warehouse}/reports") == {"q3.csv"}


def test_drop_and_cleanup_on_an_object_store_delete_only_what_the_table_wrote(s3_catalog: Catalog) -> None:
    doomed = with_rows(s3_catalog.create_table("sales.doomed", schema=SCHEMA, partition_by=["dt"]))
    neighbour = with_rows(s3_catalog.create_table("sales.neighbour", schema=SCHEMA, partition_by=["dt"]))
    neighbour_objects = objects(neighbour.location)
    Storage(doomed.location).write_exclusive("README.txt", b"kept")
    with Catalog(s3_catalog.settings) as dying:  # another writer, whose lease ends when it closes
        dead = dying.table("sales.doomed").begin("insert_into")
        dead.add_files([stage(dead, name="dead.parquet")])
    report = doomed.cleanup(grace_seconds=0)
    assert any(dead.txn_id in p for p in report.deleted)
    assert not [p for p in objects(doomed.location) if dead.txn_id in p]
    assert len(doomed.snapshot().files) == 2 and all(
        Storage(doomed.location).file_size(f.path) == f.size_bytes for f in doomed.snapshot().files
    )

    s3_catalog.drop_table("sales.doomed", delete_data=True)
    assert objects(doomed.location) == {"README.txt", OWNER_MARKER, "_acidtables/dropped.json"}
    assert objects(neighbour.location) == neighbour_objects


def test_a_mismatched_marker_on_an_object_store_refuses_drop_and_cleanup(s3_catalog: Catalog) -> None:
    table = with_rows(s3_catalog.create_table("sales.t", schema=SCHEMA, partition_by=["dt"]))
    storage = Storage(table.location)
    storage.delete(OWNER_MARKER)
    storage.write_exclusive(OWNER_MARKER, b'{"table_id": "other", "name": "x.y"}')
    before = objects(table.location)
    with pytest.raises(LocationNotOwnedError):
        s3_catalog.drop_table("sales.t", delete_data=True)
    with pytest.raises(LocationNotOwnedError):
        table.cleanup(grace_seconds=0)
    assert objects(table.location) == before


# --- missing files (issue 24, item 4) -------------------------------------------------------------------


@pytest.mark.parametrize("files", [3, STAT_LIMIT + 4], ids=["one request each", "one listing"])
def test_missing_files_on_an_object_store_are_found_alike_by_requests_and_by_a_listing(
    s3_catalog: Catalog, files: int
) -> None:
    table = s3_catalog.create_table("sales.t", schema=SCHEMA, partition_by=["dt"])
    with table.begin("insert_into") as tx:
        tx.add_files([stage(tx, name=f"part-{i}.parquet") for i in range(files)])
        tx.commit()
    paths = sorted(f.path for f in table.snapshot().files)
    gone = paths[1::2]
    for path in gone:
        table.storage.delete(path)
    outside = "data/elsewhere/never-written.parquet"  # not under the listed directory: asked on its own
    assert table.storage.missing([*paths, outside], under="data") == [*gone, outside]
    assert sorted(table.fsck().missing) == sorted(table.storage.absolute(p) for p in gone)


def test_a_staged_object_deleted_before_commit_fails_the_commit(s3_catalog: Catalog) -> None:
    table = s3_catalog.create_table("sales.t", schema=SCHEMA, partition_by=["dt"])
    tx = table.begin("insert_into")
    files = [stage(tx, name=f"part-{i}.parquet") for i in range(STAT_LIMIT + 2)]  # proved by one listing
    tx.add_files(files)
    tx.storage.delete(files[5].path)
    with pytest.raises(InvalidArgumentError, match=r"commit\(\): 1 file\(s\) given to add_files\(\) no longer exist"):
        tx.commit()
    assert table.version == 0 and not [p for p in objects(table.location) if tx.txn_id in p]


def test_repair_refuses_while_the_object_store_does_not_answer(
    s3_catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = with_rows(s3_catalog.create_table("sales.t", schema=SCHEMA, partition_by=["dt"]), 2)
    victim = sorted(f.path for f in table.snapshot().files)[0]
    table.storage.delete(victim)
    monkeypatch.setenv(S3_ENDPOINT, f"http://127.0.0.1:{free_port()}")  # nothing listens there
    with Catalog(s3_catalog.settings) as cut_off:  # a process whose storage cannot reach the store
        stranded = cut_off.table("sales.t")
        for attempt in (lambda: stranded.repair(), lambda: stranded.repair(dry_run=True), stranded.fsck):
            with pytest.raises(StorageUnavailableError, match="did not answer"):
                attempt()
    assert table.version == 2  # nothing committed: an unreachable store is not a store without files
    monkeypatch.undo()
    report = table.repair()
    assert report.version == 3 and [f.path for f in report.removed] == [table.storage.absolute(victim)]


def test_a_checkpoint_of_several_manifests_on_an_object_store_reads_back_cold(
    s3_catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Manifests are fetched side by side from an object store and proven each: a new catalog reads the
    snapshot from them as the writer has it, and prunes to one partition's entries."""
    monkeypatch.setattr(manifests, "TARGET_ENTRIES", 2)  # several buckets of a few partitions
    writer = catalog_with(s3_catalog, checkpoint_interval=4)
    try:
        table = writer.create_table("sales.cp", schema=SCHEMA, partition_by=["dt"])
        for i in range(4):
            with table.begin("insert_into") as tx:
                tx.add_files([stage(tx, name=f"part-{i}-{n}.parquet", dt=f"d{n}") for n in range(6)])
                tx.commit()
        assert writer.services.flush()
        version, path = writer.services.coordinator.checkpoints(table.table_id)[-1]
        listed = json.loads(Storage(table.location).read(path))["snapshot"]["manifests"]
        assert version == 4 and len(listed) > 2
        expected = table.snapshot().to_json()
    finally:
        writer.close()
    with catalog_with(s3_catalog) as reader:
        cold = reader.table("sales.cp").snapshot()
        assert cold.to_json() == expected
        assert sorted(f.path for f in cold.prune(parse_predicate("dt = 'd3'", cold.metadata.column_types))) == sorted(
            f["path"] for f in expected["files"] if f["partition"] == {"dt": "d3"}
        )
