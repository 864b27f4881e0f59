"""The randomized history checker (issue 10): a run under faults finds nothing wrong, and the checker
does find what it exists to find: a committer that lets a forbidden pair through, an acknowledged
commit the log lacks, a failed one the log has, a file gone from disk."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.jobs import stage

from acidtables import Catalog, Table
from acidtables.check.checker import Verdict, check_table
from acidtables.check.runner import RunConfig, run


def _history(*jobs: tuple[str, str, dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    invoked = {txn: {"kind": "invoke", "table": table, "txn_id": txn} for txn, table, _ in jobs}
    outcomes = {txn: {"txn_id": txn, **outcome} for txn, _, outcome in jobs}
    return invoked, outcomes


def _overwrite(table: Table, partition: str = "a") -> Any:
    tx = table.begin("insert_overwrite")
    tx.remove_files(tx.scan(f"dt = '{partition}'"))
    tx.add_files([stage(tx, partition)])
    tx.set_scope([{"dt": partition}])
    return tx


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
    monkeypatch.setattr("acidtables.core.committer.judge", lambda winner, intent, meta: intent)
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
    seed.add_files([stage(seed, "a")])
    seed.commit()
    one, two = _overwrite(table), _overwrite(table)
    one.commit()
    monkeypatch.setattr("acidtables.core.committer.judge", lambda winner, intent, meta: intent)
    two.commit()
    verdict = Verdict()
    check_table(catalog, table, {}, {}, verdict)
    assert any("both removed the same file" in a for a in verdict.anomalies), verdict.anomalies


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


@pytest.mark.slow
def test_a_run_under_faults_finds_no_anomaly(tmp_path: Path) -> None:
    result = run(RunConfig(seed=20261125, writers=2, duration_seconds=25.0, workdir=tmp_path / "run"))
    assert result.verdict.anomalies == [], result.summary()
    assert result.verdict.commits > 100 and result.verdict.jobs["fail"] > 0, result.summary()
    assert sum(result.faults.values()) >= 3, result.summary()
    assert (tmp_path / "run" / "faults.jsonl").read_text().count("\n") == sum(result.faults.values())
