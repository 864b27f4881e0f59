"""A table whose live log is larger than one gRPC answer (4 MiB) is read whole: history, the log
between versions, a cold load by another catalog, time travel, and a writer that fell far behind
and must be rebased onto every commit it missed. Range reads go in pages (core.coordination.connection)."""

from __future__ import annotations

import pytest
from tests.jobs import stage

from acidtables import Catalog, Table, Transaction
from acidtables.core.coordination.tables import LOG_ENTRIES_IN_A_TXN

COMMITS = 80
#: user metadata per commit: 80 commits of ~56 KiB are a 4.4 MiB log
NOTE = "x" * (56 << 10)


@pytest.fixture
def long_table(catalog: Catalog) -> tuple[Table, Transaction]:
    table = catalog.create_table("ns.long", schema="id BIGINT, dt STRING", partition_by=["dt"])
    laggard = table.begin("insert_into")  # pinned at version 0, commits after everything else
    laggard.add_files([stage(laggard, "late")])
    for number in range(COMMITS):
        with table.begin("insert_into", user_metadata={"note": NOTE, "n": str(number)}) as tx:
            tx.add_files([stage(tx, f"p{number % 4}")])
            tx.commit()
    return table, laggard


def test_a_log_larger_than_one_grpc_answer_reads_whole(long_table: tuple[Table, Transaction], catalog: Catalog) -> None:
    table, _ = long_table
    log_bytes = sum(len(entry.user_metadata.get("note", "")) for entry in table.history())
    assert log_bytes > 4 << 20  # the premise: no single answer could carry it

    history = table.history()
    assert [entry.version for entry in history] == list(range(COMMITS, -1, -1))
    assert [int(entry.user_metadata["n"]) for entry in history[:-1]] == list(range(COMMITS - 1, -1, -1))
    assert [record.version for record in table.commits(1, COMMITS)] == list(range(1, COMMITS + 1))

    with Catalog(catalog.settings) as cold:  # another process's first load of the table
        snapshot = cold.table("ns.long").snapshot()
    assert (snapshot.version, len(snapshot.files_by_path)) == (COMMITS, COMMITS)
    middle = history[COMMITS // 2]
    assert middle.time_version is not None
    assert table.snapshot(timestamp=middle.time_version).version == middle.version


def test_a_writer_far_behind_is_rebased_onto_every_commit_it_missed(long_table: tuple[Table, Transaction]) -> None:
    table, laggard = long_table
    assert COMMITS > LOG_ENTRIES_IN_A_TXN  # more than the failed compare-and-swap brings back
    info = laggard.commit()
    assert (info.version, info.retries) == (COMMITS + 1, 1)
    assert len(table.snapshot().files_by_path) == COMMITS + 1
