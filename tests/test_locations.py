"""A location belongs to one table, and nothing that deletes touches what the table does not own.

Written from the rules, in both directions: a location equal to, inside or around another table's (any
namespace, or found through the other table's marker when a second catalog shares the disk), the
warehouse root and above, non-empty and symlinked directories, a file; drop and cleanup checking the
marker and deleting only what the table wrote, with the other tables and foreign files checked after.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.jobs import assert_files_intact, stage

from acidtables import Catalog, Table
from acidtables.core.coordination.coordinator import Coordinator
from acidtables.core.coordination.embedded import EmbeddedEtcd
from acidtables.core.log.services import Services
from acidtables.core.settings import EtcdSettings, Settings
from acidtables.core.storage.locations import contains, location_key
from acidtables.core.storage.storage import OWNER_MARKER
from acidtables.errors import InvalidArgumentError, LocationNotOwnedError, TableNotFoundError

SCHEMA = "id BIGINT, dt STRING"


def with_rows(table: Table, commits: int = 2) -> Table:
    for _ in range(commits):
        tx = table.begin("insert_into")
        tx.add_files([stage(tx, None)])
        tx.commit()
    return table


def files_under(path: str | Path) -> set[str]:
    return {str(p.relative_to(path)) for p in Path(path).rglob("*") if p.is_file()}


@pytest.fixture
def warehouse(catalog: Catalog) -> Path:
    return Path(catalog.settings.warehouse)


# --- create_table --------------------------------------------------------------------------------------


def test_the_warehouse_root_and_its_ancestors_are_refused(catalog: Catalog, warehouse: Path) -> None:
    for location in (warehouse, warehouse.parent, Path("/")):
        with pytest.raises(InvalidArgumentError, match="warehouse root") as caught:
            catalog.create_table("sales.t", schema=SCHEMA, location=str(location))
        assert str(location) in str(caught.value)
    assert catalog.list_tables() == []


@pytest.mark.parametrize(
    ("relative", "relation"),
    [("x/orders", "is the location of"), ("x/orders/sub", "lies inside"), ("x", "contains")],
    ids=["equal", "inside", "around"],
)
@pytest.mark.parametrize("namespace", ["sales", "other"])
def test_a_location_meeting_another_tables_is_refused_naming_both(
    catalog: Catalog, warehouse: Path, relative: str, relation: str, namespace: str
) -> None:
    first = with_rows(catalog.create_table("sales.orders", schema=SCHEMA, location=str(warehouse / "x/orders")))
    before = files_under(first.location)
    with pytest.raises(InvalidArgumentError, match=relation) as caught:
        catalog.create_table(f"{namespace}.second", schema=SCHEMA, location=str(warehouse / relative))
    assert str(warehouse / relative) in str(caught.value) and first.location in str(caught.value)
    assert "sales.orders" in str(caught.value)
    assert catalog.list_tables() == ["sales.orders"]
    assert files_under(first.location) == before
    assert_files_intact(first)


@pytest.mark.parametrize("spelling", ["{w}/x/./orders", "{w}//x/orders/", "file://{w}/x/orders", "{w}/x/y/../orders"])
def test_locations_are_compared_in_their_canonical_spelling(catalog: Catalog, warehouse: Path, spelling: str) -> None:
    catalog.create_table("sales.orders", schema=SCHEMA, location=str(warehouse / "x/orders"))
    with pytest.raises(InvalidArgumentError, match="is the location of"):
        catalog.create_table("sales.again", schema=SCHEMA, location=spelling.format(w=warehouse))


def test_a_table_of_another_catalog_is_found_through_its_marker(
    catalog: Catalog, etcd_server: EmbeddedEtcd, warehouse: Path
) -> None:
    """A second catalog (another etcd prefix) shares the disk: it knows none of the first one's tables,
    but the ownership marker above the location gives them away."""
    first = with_rows(catalog.create_table("sales.orders", schema=SCHEMA, location=str(warehouse / "orders")))
    settings = Settings(
        etcd=EtcdSettings((etcd_server.endpoint,), prefix="/elsewhere"), warehouse=str(warehouse / "w2")
    )
    with Catalog(settings) as second:
        with pytest.raises(InvalidArgumentError, match="lies inside") as caught:
            second.create_table("sales.inner", schema=SCHEMA, location=str(warehouse / "orders/data/inner"))
        assert "sales.orders" in str(caught.value)
    assert_files_intact(first)


def test_a_non_empty_directory_that_is_not_a_table_is_refused(catalog: Catalog, warehouse: Path) -> None:
    foreign = warehouse / "reports"
    foreign.mkdir(parents=True)
    (foreign / "q3.csv").write_text("a,b\n")
    with pytest.raises(InvalidArgumentError, match="not empty and it is not an acidtables table"):
        catalog.create_table("sales.t", schema=SCHEMA, location=str(foreign))
    assert files_under(foreign) == {"q3.csv"}


def test_a_regular_file_is_refused(catalog: Catalog, warehouse: Path) -> None:
    warehouse.mkdir(parents=True, exist_ok=True)
    (warehouse / "file").write_text("x")
    with pytest.raises(InvalidArgumentError, match="is a file"):
        catalog.create_table("sales.t", schema=SCHEMA, location=str(warehouse / "file"))


def test_a_symlink_into_another_tables_location_is_refused(catalog: Catalog, warehouse: Path, tmp_path: Path) -> None:
    first = with_rows(catalog.create_table("sales.orders", schema=SCHEMA, location=str(warehouse / "orders")))
    empty = Path(first.location) / "data" / "empty"
    empty.mkdir()
    alias = tmp_path / "alias"
    alias.symlink_to(empty)
    with pytest.raises(InvalidArgumentError, match="lies inside"):
        catalog.create_table("sales.alias", schema=SCHEMA, location=str(alias))
    assert_files_intact(first)


def test_a_new_empty_directory_is_claimed_with_a_marker(catalog: Catalog, warehouse: Path) -> None:
    (warehouse / "fresh").mkdir(parents=True)
    table = catalog.create_table("sales.t", schema=SCHEMA, location=str(warehouse / "fresh"))
    assert f'"table_id": "{table.table_id}"' in (Path(table.location) / OWNER_MARKER).read_text()


@given(st.lists(st.text(alphabet="abcxyz_-0123456789", min_size=1, max_size=6), min_size=1, max_size=4))
def test_a_location_contains_exactly_its_descendants(segments: list[str]) -> None:
    outer = "/w/" + "/".join(segments)
    assert contains(location_key(outer), location_key(outer + "/child"))
    assert contains(location_key(outer), location_key(outer + "/./"))
    assert not contains(location_key(outer + "/child"), location_key(outer))
    assert not contains(location_key(outer), location_key(outer + "x"))  # a sibling sharing a prefix
    assert location_key("file://" + outer) == location_key(outer)
    s3 = "s3a://Bucket/" + "/".join(segments)
    assert location_key(s3) == location_key(s3.replace("s3a://", "s3://") + "/")


# --- drop and cleanup ----------------------------------------------------------------------------------


def test_drop_with_data_deletes_only_what_the_table_wrote(catalog: Catalog, warehouse: Path, tmp_path: Path) -> None:
    doomed = with_rows(catalog.create_table("sales.doomed", schema=SCHEMA, location=str(warehouse / "doomed")))
    neighbour = with_rows(catalog.create_table("sales.neighbour", schema=SCHEMA, location=str(warehouse / "neighbour")))
    neighbour_files = files_under(neighbour.location)
    location = Path(doomed.location)
    (location / "README.txt").write_text("kept")  # someone else's file inside the location
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.parquet").write_text("x")
    (location / "data" / "_acid_txn=deadbeef").symlink_to(outside)  # a staging name that leads out
    (location / "data" / "link").symlink_to(outside)

    report = catalog.drop_table("sales.doomed", delete_data=True)

    assert report is not None and report.kept == ("README.txt",)
    assert (location / "data" / "link").is_symlink()  # not ours, kept; and nothing behind it touched
    assert files_under(location) - {"data/link/precious.parquet"} == {
        "README.txt",
        "_acidtables/owner.json",
        "_acidtables/dropped.json",
    }
    assert (outside / "precious.parquet").exists()
    assert files_under(neighbour.location) == neighbour_files
    assert_files_intact(neighbour)


def test_drop_with_data_refuses_a_location_the_table_does_not_own(catalog: Catalog) -> None:
    table = with_rows(catalog.create_table("sales.t", schema=SCHEMA))
    before = files_under(table.location)
    (Path(table.location) / OWNER_MARKER).write_text('{"table_id": "someone-else", "name": "x.y"}')
    with pytest.raises(LocationNotOwnedError, match=r"names table x\.y"):
        catalog.drop_table("sales.t", delete_data=True)
    assert catalog.list_tables() == ["sales.t"]  # not dropped either
    assert files_under(table.location) == before
    with pytest.raises(LocationNotOwnedError):
        table.cleanup(grace_seconds=0)
    (Path(table.location) / OWNER_MARKER).unlink()
    with pytest.raises(LocationNotOwnedError, match="no ownership marker"):
        table.cleanup(grace_seconds=0)
    assert files_under(table.location) == before - {OWNER_MARKER}


def test_cleanup_keeps_committed_files_foreign_directories_and_other_tables(catalog: Catalog) -> None:
    table = with_rows(catalog.create_table("sales.t", schema=SCHEMA))
    other = with_rows(catalog.create_table("sales.other", schema=SCHEMA))
    other_files = files_under(other.location)
    foreign = Path(table.location) / "data" / "dt=a"
    foreign.mkdir()
    (foreign / "part-0.parquet").write_text("not ours")
    with Catalog(catalog.settings) as dying:  # another writer, whose lease ends when it closes
        dead = dying.table("sales.t").begin("insert_into")
        dead.add_files([stage(dead, None)])  # staged, never committed: its process "died"
    dead_dir = Path(dead.staging_dir)
    report = table.cleanup(grace_seconds=0)
    assert not dead_dir.exists() and any(dead.txn_id in p for p in report.deleted)
    assert (foreign / "part-0.parquet").exists()
    assert_files_intact(table)
    assert files_under(other.location) == other_files


class FakeClock:
    def __init__(self, start_us: int) -> None:
        self.now = start_us

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clocked(etcd_server: EmbeddedEtcd, etcd_prefix: str, tmp_path: Path) -> Iterator[tuple[Catalog, FakeClock]]:
    settings = Settings(etcd=EtcdSettings((etcd_server.endpoint,), prefix=etcd_prefix), warehouse=str(tmp_path / "w"))
    clock = FakeClock(1_900_000_000_000_000)
    catalog = Catalog(settings, services=Services(settings, Coordinator(settings.etcd), clock=clock))
    try:
        yield catalog, clock
    finally:
        catalog.close()


def test_a_dropped_tables_location_is_free_only_after_its_leases_expired(
    clocked: tuple[Catalog, FakeClock], tmp_path: Path
) -> None:
    catalog, clock = clocked
    location = str(tmp_path / "w" / "orders")
    old = with_rows(catalog.create_table("sales.orders", schema=SCHEMA, location=location))
    running = old.begin("insert_into")  # a job of the old table, still running
    running.add_files([stage(running, None)])
    catalog.drop_table("sales.orders", delete_data=True)
    with pytest.raises(InvalidArgumentError, match="leases have expired"):
        catalog.create_table("sales.orders", schema=SCHEMA, location=location)
    clock.now += catalog.settings.commit.lease_ttl_seconds * 1_000_000
    new = with_rows(catalog.create_table("sales.orders", schema=SCHEMA, location=location), commits=1)
    assert new.table_id != old.table_id
    new_files = files_under(location)

    # every way through the stale handle fails as dropped, and none deletes the new table's files
    with pytest.raises(TableNotFoundError):
        running.commit()
    with pytest.raises(TableNotFoundError):
        old.begin("insert_into")
    with pytest.raises(TableNotFoundError):
        old.cleanup(grace_seconds=0)
    assert files_under(location) == new_files
    assert_files_intact(new)


def test_a_write_through_a_stale_handle_of_a_dropped_table_fails_as_not_found(catalog: Catalog) -> None:
    table = with_rows(catalog.create_table("sales.t", schema=SCHEMA))
    catalog.drop_table("sales.t")
    with pytest.raises(TableNotFoundError):
        table.begin("insert_into")
    assert os.path.isdir(table.location)  # data kept: delete_data was not asked for
