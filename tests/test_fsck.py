"""`Table.fsck()` / `acidtables fsck` (issue 10 item 4): a healthy table passes every check, and each
kind of damage is found and named by the check it breaks, read-only."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.jobs import stage
from tests.test_cli import cli_env, run  # noqa: F401 (cli_env is a fixture)

from acidtables import Catalog, Table
from acidtables.core.log import manifests
from acidtables.core.log.archive import ARCHIVE_DIR
from acidtables.core.storage.storage import content_checksum


@pytest.fixture
def small(catalog: Catalog) -> Iterator[Catalog]:
    """Checkpoints every 5 versions, 8 versions in etcd: a short table has all three tiers."""
    commit = dataclasses.replace(catalog.settings.commit, checkpoint_interval=5, log_window_versions=8)
    with Catalog(dataclasses.replace(catalog.settings, commit=commit)) as small_catalog:
        yield small_catalog


def _busy_table(catalog: Catalog, name: str = "ns.checked") -> Table:
    table = catalog.create_table(name, schema="id BIGINT, dt STRING", partition_by=["dt"])
    for n in range(30):
        with table.begin("insert_overwrite" if n % 4 == 3 else "insert_into") as tx:
            if n % 4 == 3:
                tx.remove_files(tx.scan("dt = 'p0'"))
                tx.set_scope([{"dt": "p0"}])
            tx.add_files([stage(tx, f"p{n % 2}")])
            tx.commit()
        if (n + 1) % 5 == 0:  # each checkpoint written before the next is asked for (none combined away)
            assert catalog.services.flush()
    table.archive()
    return table


def _failed(table: Table) -> dict[str, list[str]]:
    return {c.name: c.problems for c in table.fsck().checks if not c.ok}


def test_a_healthy_table_passes_every_check(small: Catalog) -> None:
    table = _busy_table(small)
    assert list((Path(table.location) / ARCHIVE_DIR).iterdir())  # part of the log is archived
    report = table.fsck()
    assert report.ok, [(c.name, c.problems) for c in report.checks]
    examined = {c.name: c.examined for c in report.checks}
    assert examined["versions"] == 31 and examined["transactions"] == 31
    assert examined["checkpoints"] == 6  # versions 5, 10, ... 30
    assert examined["files"] == 30  # nothing expired: every file any version ever read
    assert examined["archive"] >= 1


def _key(catalog: Catalog, table: Table, *parts: str) -> str:
    return catalog.services.coordinator.keys.table(table.table_id) + "/".join(parts)


def _delete_data_file(catalog: Catalog, table: Table) -> str:
    victim = sorted(table.snapshot().files_by_path)[0]
    Path(table.location, victim).unlink()
    return "is missing"


def _resize_data_file(catalog: Catalog, table: Table) -> str:
    victim = sorted(table.snapshot().files_by_path)[0]
    with open(Path(table.location, victim), "ab") as out:
        out.write(b"x")
    return "bytes, its log entry says"


def _edit_checkpoint(catalog: Catalog, table: Table) -> str:
    """A checkpoint forged to prove itself, with a file fewer: a manifest rewritten without its first
    entry, and the list's checksums and counts redone."""
    (version, path) = catalog.services.coordinator.checkpoints(table.table_id)[-1]
    document = json.loads(Path(table.location, path).read_bytes())
    listed = document["snapshot"]["manifests"][0]
    manifest = manifests.Manifest.from_json(listed)
    fewer = manifests.decode(Path(table.location, manifest.path).read_bytes(), manifest).slice(1)
    data = manifests.encode(fewer)
    Path(table.location, manifest.path).write_bytes(data)
    listed.update(sha256=manifests.sha256(data), entries=fewer.num_rows)
    document["file_count"] -= 1
    document["checksum"] = content_checksum(document["snapshot"])
    Path(table.location, path).write_text(json.dumps(document))
    return f"differs from a replay of the log at version {version}"


def _drop_log_entry(catalog: Catalog, table: Table) -> str:
    catalog.services.coordinator.client.delete(_key(catalog, table, "log", f"{table.version - 1:020d}"))
    return f"missing [{table.version - 1}]"


def _drop_time_key(catalog: Catalog, table: Table) -> str:
    head = table.history(limit=1)[0]
    assert head.time_version is not None
    micros = int(head.time_version.timestamp() * 1_000_000)
    catalog.services.coordinator.client.delete(_key(catalog, table, "times", f"{micros:020d}"))
    return "is not in the time index"


def _drop_txn_key(catalog: Catalog, table: Table) -> str:
    head = table.history(limit=1)[0]
    catalog.services.coordinator.client.delete(_key(catalog, table, "txns", head.txn_id))
    return f"txn {head.txn_id} committed version {head.version} but its lookup says None"


def _stale_registration(catalog: Catalog, table: Table) -> str:
    head = table.history(limit=1)[0]
    catalog.services.coordinator.client.put(_key(catalog, table, "inflight", head.txn_id), b"{}")
    return "is registered in flight but committed"


def _tear_segment(catalog: Catalog, table: Table) -> str:
    segment = sorted((Path(table.location) / ARCHIVE_DIR).iterdir())[0]
    segment.write_bytes(segment.read_bytes()[:50])
    return "does not prove itself"


@pytest.mark.parametrize(
    ("damage", "check"),
    [
        (_delete_data_file, "files"),
        (_resize_data_file, "files"),
        (_edit_checkpoint, "checkpoints"),
        (_drop_log_entry, "versions"),
        (_drop_time_key, "time versions"),
        (_drop_txn_key, "transactions"),
        (_stale_registration, "in flight"),
        (_tear_segment, "archive"),
    ],
)
def test_each_kind_of_damage_is_named_by_its_check(
    small: Catalog, damage: Callable[[Catalog, Table], str], check: str
) -> None:
    table = _busy_table(small)
    words = damage(small, table)
    with Catalog(small.settings) as cold:  # a process with nothing cached, as an operator's would be
        failed = _failed(cold.table("ns.checked"))
    assert check in failed, failed
    assert any(words in problem for problem in failed[check]), failed


def test_the_command_line_exits_1_on_a_finding(
    capsys: pytest.CaptureFixture[str],
    cli_env: None,  # noqa: F811
    catalog: Catalog,
) -> None:
    table = _busy_table(catalog, "sales.checked")
    code, out, _ = run(capsys, "--json", "fsck", "sales.checked")
    assert code == 0 and json.loads(out)["ok"] is True
    _delete_data_file(catalog, table)
    code, out, _ = run(capsys, "fsck", "sales.checked")
    assert code == 1 and "PROBLEMS FOUND" in out and "files: " in out and "is missing" in out
