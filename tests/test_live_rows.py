"""`rows` is what a read returns (issue 25: 35 physical merge-on-read rows were shown where a read
returns 15): core.maintenance.live_rows applies merge-on-read to the key columns of primary-key partitions with
change files, and the AcidTable status and `acidtables tables` show it beside the physical rows."""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from acidtables import Catalog, Table, Transaction
from acidtables.cli.commands import list_tables
from acidtables.core import DataFile, FileKind, LiveRowCounter
from acidtables.operator.status import table_status


def changes(tx: Transaction, dt: str, rows: list[tuple[int, str]]) -> DataFile:
    """A change file in the transaction's staging directory: (id, _acid_op) rows of partition dt."""
    os.makedirs(tx.staging_dir, exist_ok=True)
    path = os.path.join(tx.staging_dir, f"part-{len(os.listdir(tx.staging_dir)):05d}.parquet")
    data = pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "dt": [dt] * len(rows),
            "_acid_op": [r[1] for r in rows],
        }
    )
    with open(path, "xb") as out:
        pq.write_table(data, out)
    return DataFile(path, {"dt": dt}, len(rows), os.path.getsize(path), kind=FileKind.CHANGES)


def commit(table: Table, dt: str, rows: list[tuple[int, str]]) -> None:
    tx = table.begin("merge")
    tx.add_files([changes(tx, dt, rows)])
    tx.commit()


@pytest.fixture
def keyed(catalog: Catalog) -> Table:
    table = catalog.create_table("sales.keyed", schema="id BIGINT, dt STRING", partition_by=["dt"], primary_key=["id"])
    commit(table, "a", [(1, "U"), (2, "U"), (3, "U")])
    commit(table, "a", [(2, "U"), (3, "D"), (4, "U")])  # 2 updated, 3 deleted, 4 added
    commit(table, "b", [(1, "U")])  # the same key in another partition is another row
    return table


def test_live_rows_apply_merge_on_read_per_partition(keyed: Table) -> None:
    counts = LiveRowCounter().count(keyed.snapshot(), keyed.storage)
    assert (counts.live, counts.physical) == (4, 7)  # a: 1, 2, 4; b: 1


def test_a_counter_reads_only_partitions_whose_files_changed(keyed: Table, monkeypatch: pytest.MonkeyPatch) -> None:
    counter = LiveRowCounter()
    counter.count(keyed.snapshot(), keyed.storage)
    commit(keyed, "b", [(1, "D")])
    opened: list[str] = []
    real = keyed.storage.open_input

    def recorded(path: str) -> Any:
        opened.append(path)
        return real(path)

    monkeypatch.setattr(keyed.storage, "open_input", recorded)
    assert counter.count(keyed.snapshot(), keyed.storage).live == 3
    in_b = {f.path for f in keyed.snapshot().files if f.partition == {"dt": "b"}}
    assert sorted(opened) == sorted(in_b) and len(in_b) == 2  # partition a's files were not read again


def test_the_acidtable_status_shows_live_rows_beside_physical_rows(keyed: Table) -> None:
    status = table_status(keyed)
    assert (status["rows"], status["physicalRows"], status["deltaFiles"]) == (4, 7, 3)


def test_acidtables_tables_shows_live_rows_beside_physical_rows(catalog: Catalog, keyed: Table) -> None:
    (summary,) = list_tables(catalog, "sales").tables
    assert (summary.rows, summary.physical_rows) == (4, 7)
    assert summary.to_json()["rows"] == 4 and summary.to_json()["physical_rows"] == 7
