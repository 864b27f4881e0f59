"""A full etcd (issue 18): a real etcd with a tiny backend quota fills up; writers get CoordinatorFull
naming the quota, reads keep working, nothing committed is lost, and once etcd's history is compacted,
its members defragmented, the alarm lifted and the log archived, commits resume."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.jobs import stage

from acidtables import Catalog, Table
from acidtables.core import CoordinatorFull, CoordinatorUnavailable
from acidtables.core.coordination.embedded import EmbeddedEtcd
from acidtables.core.settings import EtcdSettings, Settings

QUOTA = 4 << 20
NOTE = "x" * (120 << 10)  # user metadata that makes each commit's log entry 120 KiB


@pytest.fixture
def tiny_etcd(tmp_path: Path) -> Iterator[EmbeddedEtcd]:
    with EmbeddedEtcd(tmp_path / "etcd", quota_backend_bytes=QUOTA) as server:
        yield server


@pytest.fixture
def full_catalog(tiny_etcd: EmbeddedEtcd, tmp_path: Path) -> Iterator[Catalog]:
    settings = Settings(etcd=EtcdSettings((tiny_etcd.endpoint,)), warehouse=str(tmp_path / "warehouse"))
    commit = dataclasses.replace(settings.commit, log_window_versions=4)
    with Catalog(dataclasses.replace(settings, commit=commit)) as catalog:
        yield catalog


def _append(table: Table, note: str = NOTE) -> int:
    with table.begin("insert_into", user_metadata={"note": note}) as tx:
        tx.add_files([stage(tx, "a")])
        return tx.commit().version


def test_a_full_etcd_refuses_writes_clearly_keeps_reads_and_recovers(full_catalog: Catalog) -> None:
    table = full_catalog.create_table("ns.full", schema="id BIGINT, dt STRING", partition_by=["dt"])
    committed = []
    with pytest.raises(CoordinatorFull) as refused:
        for _ in range(200):  # each commit also leaves an old revision of the head: etcd fills up
            committed.append(_append(table))
    assert isinstance(refused.value, CoordinatorUnavailable)  # the family writers already handle
    assert "quota" in str(refused.value) and "Nothing was committed" in str(refused.value)
    assert len(committed) > 5
    staged = list(Path(table.location, "data").glob("_acid_txn=*"))
    assert len(staged) == len(committed)  # the refused commit's staged files went with it

    # reads keep working, and everything acknowledged is there
    assert table.version == committed[-1]
    assert [h.version for h in table.history()] == list(range(committed[-1], -1, -1))
    assert len(table.snapshot().files_by_path) == len(committed)
    usage = full_catalog.services.coordinator.endpoint_usage()
    assert usage[0].quota_bytes == QUOTA and (usage[0].used_fraction or 0) >= 0.8
    assert full_catalog.services.coordinator.alarms() == ["NOSPACE"]

    # compaction + defragmentation + the alarm lifted, then archiving the log: commits resume
    reclaimed = full_catalog.services.coordinator.reclaim_space()
    assert full_catalog.services.coordinator.alarms() == [], reclaimed
    table.archive()
    full_catalog.services.coordinator.reclaim_space()
    after = [_append(table, note="small") for _ in range(3)]
    assert after == [committed[-1] + 1, committed[-1] + 2, committed[-1] + 3]
    assert [h.version for h in table.history()] == list(range(after[-1], -1, -1))
    assert all(h.user_metadata["note"] == NOTE for h in table.history()[3:-1])
