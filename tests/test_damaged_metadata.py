"""Damaged metadata is contained and named: every key and file acidtables reads back, damaged in each
way (garbage, truncated, valid JSON of the wrong shape), raises one CorruptMetadataError naming the table
and the key or file; the damaged table takes no commit; the other tables of the namespace keep working."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.tables import catalog_with, etcd_client, staged_parquet

from acidtables import Catalog, Table
from acidtables.cli.commands import list_tables
from acidtables.core.coordination.embedded import EmbeddedEtcd
from acidtables.core.log import manifests
from acidtables.errors import CorruptMetadataError

SCHEMA = "id BIGINT, dt STRING"

Damage = Callable[[bytes], bytes]
DAMAGE: dict[str, Damage] = {
    "garbage": lambda raw: b"\xff\xfe\x00 not json",
    "truncated": lambda raw: raw[: len(raw) // 2],
    "wrong shape": lambda raw: b'[1, "two", {"three": 3}]',
}


def commit_rows(table: Table, count: int = 1) -> None:
    for _ in range(count):
        with table.begin("insert_into") as tx:
            tx.add_files([staged_parquet(tx, {"dt": "a"})])
            tx.commit()


@pytest.fixture
def raw(etcd_server: EmbeddedEtcd) -> Any:
    host, port = etcd_server.endpoint.removeprefix("http://").split(":")
    return etcd_client(host, int(port))


def fresh(catalog: Catalog) -> Catalog:
    """Another process's view: no snapshot cached from before the damage."""
    return Catalog(catalog.settings)


def damage_key(raw: Any, key: str, how: str) -> None:
    value, _ = raw.get(key)
    assert value is not None, f"no key {key}"
    raw.put(key, DAMAGE[how](value))


def key_of(catalog: Catalog, table: Table, *parts: str) -> str:
    return "/".join((catalog.settings.etcd.prefix, "tables", table.table_id, *parts))


def assert_neighbour_works(catalog: Catalog) -> None:
    neighbour = catalog.table("sales.neighbour")
    commit_rows(neighbour)
    assert neighbour.snapshot().version == neighbour.version


@pytest.fixture
def tables(catalog: Catalog) -> Table:
    damaged = catalog.create_table("sales.orders", schema=SCHEMA, partition_by=["dt"])
    commit_rows(damaged, 3)
    commit_rows(catalog.create_table("sales.neighbour", schema=SCHEMA, partition_by=["dt"]))
    return damaged


@pytest.mark.parametrize("how", DAMAGE)
@pytest.mark.parametrize("part", ["head", "log"])
def test_a_damaged_head_or_log_entry_is_named_and_takes_no_commit(
    catalog: Catalog, tables: Table, raw: Any, how: str, part: str
) -> None:
    key = key_of(catalog, tables, "head") if part == "head" else key_of(catalog, tables, "log", f"{2:020d}")
    damage_key(raw, key, how)
    with fresh(catalog) as other:
        table = other.table("sales.orders")
        with pytest.raises(CorruptMetadataError) as caught:
            table.snapshot()
        assert caught.value.table == "sales.orders" and "sales.orders" in str(caught.value)
        assert part in caught.value.key
        with pytest.raises(CorruptMetadataError):
            commit_rows(table)
        assert_neighbour_works(other)
        summaries = {s.name: s for s in list_tables(other, "sales").tables}
        assert summaries["sales.orders"].damaged and summaries["sales.neighbour"].damaged is None


@pytest.mark.parametrize("how", DAMAGE)
def test_a_commit_begun_before_the_head_was_damaged_writes_nothing_on_top(
    catalog: Catalog, tables: Table, raw: Any, how: str
) -> None:
    tx = tables.begin("insert_into")
    tx.add_files([staged_parquet(tx, {"dt": "a"})])
    key = key_of(catalog, tables, "head")
    damage_key(raw, key, how)
    damaged_value, _ = raw.get(key)
    with pytest.raises(CorruptMetadataError, match="was not committed"):
        tx.commit()
    assert raw.get(key)[0] == damaged_value


@pytest.mark.parametrize("how", DAMAGE)
def test_a_damaged_catalog_entry_is_named_and_listed_as_damaged(
    catalog: Catalog, tables: Table, raw: Any, how: str
) -> None:
    damage_key(raw, f"{catalog.settings.etcd.prefix}/catalog/sales/orders", how)
    with pytest.raises(CorruptMetadataError, match=r"sales\.orders") as caught:
        catalog.table("sales.orders")
    assert caught.value.key.endswith("catalog/sales/orders")
    assert catalog.list_tables("sales") == ["sales.neighbour", "sales.orders"]
    summaries = {s.name: s for s in list_tables(catalog, "sales").tables}
    assert summaries["sales.orders"].damaged and summaries["sales.neighbour"].version == 1
    assert_neighbour_works(catalog)


@pytest.mark.parametrize("how", DAMAGE)
def test_a_damaged_time_index_entry_is_named(catalog: Catalog, tables: Table, raw: Any, how: str) -> None:
    *_, (_, meta) = list(raw.get_prefix(key_of(catalog, tables, "times", "")))
    key = meta.key.decode()  # the newest data commit's entry, which "as of now" reads
    raw.put(key, DAMAGE[how](b"3") if how != "truncated" else b"")
    with pytest.raises(CorruptMetadataError) as caught:
        tables.version_at(datetime.now(UTC))
    assert "times" in caught.value.key and caught.value.table == "sales.orders"
    assert_neighbour_works(catalog)


@pytest.mark.parametrize("part", ["list", "manifest"])
@pytest.mark.parametrize("how", [*DAMAGE, "checksum", "missing"])
def test_a_damaged_checkpoint_is_ignored_with_a_warning_and_the_log_is_read(
    catalog: Catalog, raw: Any, how: str, part: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Either part of a checkpoint damaged (its manifest list, or a manifest the list names): readers
    warn, naming the file, and replay the log to the same snapshot."""
    writer = catalog_with(catalog, checkpoint_interval=2)
    table = writer.create_table("sales.cp", schema=SCHEMA, partition_by=["dt"])
    commit_rows(table, 3)  # a checkpoint at version 2
    assert writer.services.flush()  # written off the commit path
    expected = set(table.snapshot().files_by_path)
    (checkpoint,) = Path(table.location, "_acidtables", "checkpoints").iterdir()
    (manifest,) = Path(table.location, "_acidtables", "manifests").iterdir()
    victim = checkpoint if part == "list" else manifest
    if how == "missing":
        victim.unlink()
    elif how == "checksum" and part == "list":
        document = json.loads(checkpoint.read_bytes())
        document["snapshot"]["manifests"][0]["entries"] -= 1  # an entry fewer, checksum kept
        checkpoint.write_text(json.dumps(document))
    elif how == "checksum":  # a well-formed manifest, an entry fewer than the list's checksum names
        entries = manifests.decode(manifest.read_bytes(), listed_manifest(checkpoint))
        manifest.write_bytes(manifests.encode(entries.slice(1)))
    else:
        victim.write_bytes(DAMAGE[how](victim.read_bytes()))
    with fresh(catalog) as other, caplog.at_level(logging.WARNING):
        snapshot = other.table("sales.cp").snapshot()
    assert set(snapshot.files_by_path) == expected
    assert any("is ignored" in r.getMessage() and checkpoint.name in r.getMessage() for r in caplog.records)
    writer.close()


def listed_manifest(checkpoint: Path) -> manifests.Manifest:
    (only,) = json.loads(checkpoint.read_bytes())["snapshot"]["manifests"]
    return manifests.Manifest.from_json(only)


@pytest.mark.parametrize("how", DAMAGE)
def test_a_damaged_commit_file_is_named(catalog: Catalog, how: str) -> None:
    small = catalog_with(catalog, inline_record_max_bytes=16)
    table = small.create_table("sales.big", schema=SCHEMA, partition_by=["dt"])
    commit_rows(table)
    (commit_file,) = Path(table.location, "_acidtables", "commits").iterdir()
    commit_file.write_bytes(DAMAGE[how](commit_file.read_bytes()))
    with fresh(catalog) as other, pytest.raises(CorruptMetadataError) as caught:
        other.table("sales.big").history()
    assert caught.value.table == "sales.big"
    small.close()


def test_cleanup_reports_a_missing_log_entry_instead_of_crashing(catalog: Catalog, tables: Table, raw: Any) -> None:
    history = tables.history()
    lost = next(h for h in history if h.version == 2)
    raw.delete(key_of(catalog, tables, "log", f"{2:020d}"))
    report = tables.cleanup(grace_seconds=0)
    assert [path for path, _ in report.kept_damaged] == [f"data/_acid_txn={lost.txn_id}"]
    assert "missing" in report.kept_damaged[0][1]
    assert Path(tables.location, "data", f"_acid_txn={lost.txn_id}").is_dir()
