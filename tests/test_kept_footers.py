"""A stream's driver keeps no Parquet footer of a file once its commit proved it (issue 42).

The Spark writer reads each staged file's footer to describe it (`acidtables.spark.files.footer`), and
the commit's proof (`add_files`) reads it again to check the row count and schema; `Storage` keeps the
first read for the second. It used to keep every footer it ever read, up to 4,096 per table location,
each about 10 KiB of native memory tracemalloc does not see: `SparkTable.write_stream` commits a file a
micro-batch in the driver, so its driver grew by a footer a batch for its first 4,096 batches, whether
the table kept those files or compacted them away. These tests run the writer's describe-then-prove
sequence on real files through core commits (no Spark session: the describing is the writer's own
function), and count what stays.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from tests.helpers.tables import staged_parquet

from acidtables import Catalog, Transaction
from acidtables.core.log.records import DataFile
from acidtables.core.storage.storage import DATA_DIR, Storage
from acidtables.spark.files import footer

COMMITS = 300


def _described(tx: Transaction) -> DataFile:
    """A staged file described as the Spark writer describes it: its path relative to the location and
    its rows and statistics from its footer."""
    staged = staged_parquet(tx, {"dt": "2026-11-01"}, rows=3)
    relative = tx.storage.relative(staged.path)
    rows, stats = footer(tx.storage, relative)
    return replace(staged, path=relative, rows=rows, stats=stats)


def _counting_data_reads(storage: Storage, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every data file `storage` opens from now on (a footer read opens its file once)."""
    opened: list[str] = []
    original: Callable[[str], Any] = storage.open_input

    def open_input(relative: str) -> Any:
        if relative.startswith(f"{DATA_DIR}/"):
            opened.append(relative)
        return original(relative)

    monkeypatch.setattr(storage, "open_input", open_input)
    return opened


def test_commits_keep_no_footer_once_proven_and_read_each_file_once(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = catalog.create_table("s.events", schema="id BIGINT, dt STRING", partition_by=["dt"])
    storage = table.storage
    opened = _counting_data_reads(storage, monkeypatch)
    for _ in range(COMMITS):
        with table.begin("insert_into") as tx:
            assert tx.storage is storage  # one Storage per location: the proof finds what the writer read
            tx.add_files([_described(tx)])
            tx.commit()
    assert storage.kept_footers == 0  # was COMMITS: every footer read, kept up to 4,096
    # the writer's read serves the proof: one read per file, as before
    assert len(opened) == COMMITS
    assert len(set(opened)) == COMMITS
    assert table.snapshot().row_count == 3 * COMMITS


def test_a_transaction_that_ends_before_its_proof_keeps_no_footer(catalog: Catalog) -> None:
    table = catalog.create_table("s.events", schema="id BIGINT, dt STRING", partition_by=["dt"])
    storage = table.storage
    tx = table.begin("insert_into")
    _described(tx)
    _described(tx)
    assert storage.kept_footers == 2  # described, waiting for their proof
    tx.abort()  # its staged files are discarded, and their footers with them
    assert storage.kept_footers == 0


def test_a_discarded_file_keeps_no_footer(catalog: Catalog) -> None:
    # the writer discards a row-less file Spark wrote right after describing it
    table = catalog.create_table("s.events", schema="id BIGINT, dt STRING", partition_by=["dt"])
    with table.begin("insert_into") as tx:
        kept, dropped = _described(tx), _described(tx)
        assert tx.storage.kept_footers == 2
        tx.storage.discard_staged(tx.txn_id, [dropped.path])
        assert tx.storage.kept_footers == 1
        tx.add_files([kept])
        tx.commit()
    assert table.storage.kept_footers == 0


def test_a_footer_read_to_check_a_live_file_is_not_kept(catalog: Catalog) -> None:
    # fsck and other readers of committed files read each footer once: nothing is worth keeping
    table = catalog.create_table("s.events", schema="id BIGINT, dt STRING", partition_by=["dt"])
    with table.begin("insert_into") as tx:
        tx.add_files([_described(tx)])
        tx.commit()
    (live,) = table.snapshot().files
    assert table.storage.parquet_footer(table.storage.relative(live.path)).num_rows == 3
    assert table.storage.kept_footers == 0
