"""The history checker's multi-table transactions (issue 44): every group all-or-nothing against what its
writer was told, its parts written by one etcd transaction, no reader's snapshots() holding one part
without the others; a run under faults with multi-table transactions and readers finds nothing wrong,
and a run with a planted bug (a group committed table by table, or snapshots() reading heads one by
one) is reported."""

from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import Any

import pytest
from tests.jobs import stage

from acidtables import Catalog, Table
from acidtables.check import plants
from acidtables.check.__main__ import main
from acidtables.check.checker import History, Verdict, check_multi, check_table
from acidtables.check.runner import RunConfig, run
from acidtables.core.coordination.tables import Tables

SCHEMA = "id BIGINT, dt STRING"


def _tables(catalog: Catalog) -> list[Table]:
    return [
        catalog.create_table("ns.a", schema=SCHEMA, partition_by=["dt"]),
        catalog.create_table(
            "ns.b", schema=SCHEMA, partition_by=["dt"], conflict_policy="maxcompute", primary_key=["id"]
        ),
        catalog.create_table("ns.c", schema=SCHEMA),
    ]


def _group(catalog: Catalog, history: History, names: list[str], **outcome: Any) -> str:
    """A multi-table append to `names`, committed; its invoke lines in `history`, and outcome lines as
    the commit answered unless `outcome` says otherwise. Returns its multi_txn_id."""
    group = catalog.transaction()
    parts = {name: group.begin(name, "insert_into") for name in names}
    for name, tx in parts.items():
        tx.add_files([stage(tx, "a" if name != "ns.c" else None)])
        history.invoked[tx.txn_id] = {
            "kind": "invoke",
            "table": name,
            "operation": "insert_into",
            "txn_id": tx.txn_id,
            "multi_txn_id": group.id,
            "multi_txn_tables": names,
        }
    infos = group.commit()
    for name, tx in parts.items():
        told = outcome or {"kind": "ok", "version": infos[name].version, "skipped": False}
        history.outcomes[tx.txn_id] = {"txn_id": tx.txn_id, "time": time.time(), **told}
    return group.id


def _read(catalog: Catalog, history: History, names: list[str]) -> dict[str, int]:
    began = time.time()
    seen = {name: s.version for name, s in catalog.snapshots(names).items()}
    history.reads.append({"kind": "read", "began": began, "versions": seen})
    return seen


def _verdict(catalog: Catalog, tables: list[Table], history: History) -> Verdict:
    verdict = Verdict()
    for table in tables:
        check_table(catalog, table, history.invoked, history.outcomes, verdict)
    check_multi(catalog, tables, history, verdict)
    return verdict


def test_committed_groups_and_atomic_reads_pass(catalog: Catalog) -> None:
    tables, history = _tables(catalog), History()
    _read(catalog, history, ["ns.a", "ns.b", "ns.c"])
    _group(catalog, history, ["ns.a", "ns.b"])
    _read(catalog, history, ["ns.a", "ns.b"])
    _group(catalog, history, ["ns.a", "ns.b", "ns.c"])
    assert _read(catalog, history, ["ns.c", "ns.a", "ns.b"]) == {"ns.c": 1, "ns.a": 2, "ns.b": 2}
    verdict = _verdict(catalog, tables, history)
    assert verdict.anomalies == []
    assert (verdict.multi_commits, dict(verdict.multi), verdict.reads) == (2, {"ok": 2}, 3)


def test_a_read_holding_one_part_without_the_other_is_reported(catalog: Catalog) -> None:
    tables, history = _tables(catalog), History()
    multi_id = _group(catalog, history, ["ns.a", "ns.b"])
    # what a torn read would have recorded: ns.a with the group, ns.b without
    history.reads.append({"kind": "read", "began": time.time(), "versions": {"ns.a": 1, "ns.b": 0}})
    verdict = _verdict(catalog, tables, history)
    assert any(
        f"saw multi-table transaction {multi_id} in part: ns.a version 1 (seen), ns.b version 1 (not seen)" in a
        for a in verdict.anomalies
    ), verdict.anomalies
    # a commit acknowledged before the read began that the read missed, too
    assert any(
        "saw ns.b at version 0, though version 1 was acknowledged before the read began" in a for a in verdict.anomalies
    )


def test_a_failed_or_aborted_group_that_left_a_part_is_reported(catalog: Catalog) -> None:
    tables, history = _tables(catalog), History()
    failed = _group(catalog, history, ["ns.a", "ns.c"], kind="fail", exception="ConcurrentAppendException")
    aborted = _group(catalog, history, ["ns.b", "ns.c"], kind="aborted")
    verdict = _verdict(catalog, tables, history)
    text = "\n".join(verdict.anomalies)
    assert (
        f"multi-table transaction {failed} was failed (ConcurrentAppendException) but left parts on ['ns.a', 'ns.c']"
    ) in text
    assert f"multi-table transaction {aborted} was aborted (aborted) but left parts on ['ns.b', 'ns.c']" in text
    assert "was aborted but committed version [2]" in text  # and per part, by check_table


def test_a_group_the_log_holds_but_no_writer_began_is_reported(catalog: Catalog) -> None:
    tables, history = _tables(catalog), History()
    multi_id = _group(catalog, history, ["ns.a", "ns.b"])
    _read(catalog, history, ["ns.a", "ns.b"])
    verdict = _verdict(catalog, tables, History(reads=history.reads))
    assert f"multi-table transaction {multi_id} is in ['ns.a', 'ns.b'] but no writer began it" in verdict.anomalies


def test_the_planted_split_commit_is_caught(catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    """A group committed table by table, each part its own compare-and-swap: the parts land at
    different etcd revisions, and a part that loses its compare is acknowledged all the same."""
    tables, history = _tables(catalog), History()
    monkeypatch.setattr(Tables, "compare_and_swap_many", plants.PLANTS["split-commit"][1])
    multi_id = _group(catalog, history, ["ns.a", "ns.b", "ns.c"])
    verdict = _verdict(catalog, tables, history)
    assert any(
        f"multi-table transaction {multi_id}'s parts were written at different etcd revisions (ns.a version 1 at " in a
        for a in verdict.anomalies
    ), verdict.anomalies

    # ns.b moves under the group between its read and its commit: its own compare loses, ns.a's wins
    group = catalog.transaction()
    parts = {name: group.begin(name, "insert_into") for name in ("ns.a", "ns.b")}
    for name, tx in parts.items():
        tx.add_files([stage(tx, "b")])
        history.invoked[tx.txn_id] = {"table": name, "txn_id": tx.txn_id, "multi_txn_id": group.id}
    rival = tables[1].begin("insert_into")
    rival.add_files([stage(rival, "c")])  # another partition: the part rebases and is acknowledged
    history.invoked[rival.txn_id] = {"table": "ns.b", "txn_id": rival.txn_id}
    history.outcomes[rival.txn_id] = {"kind": "ok", "version": rival.commit().version}
    infos = group.commit()
    for name, tx in parts.items():
        history.outcomes[tx.txn_id] = {"kind": "ok", "version": infos[name].version, "skipped": False}
    verdict = _verdict(catalog, tables, history)
    assert (
        f"multi-table transaction {group.id} was acknowledged on ['ns.a', 'ns.b'], its parts are in ['ns.a']"
    ) in verdict.anomalies
    # told it landed at the version the rival holds
    assert f"ns.b: txn {parts['ns.b'].txn_id} was acknowledged at version 2, the log has []" in verdict.anomalies


def test_the_planted_split_snapshots_is_caught(catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    """snapshots() reading each head in a request of its own: a group that lands between two of those
    reads is seen in part, which the reader check reports. The group lands there on cue (a hook on the
    planted read), not by chance."""
    tables, history = _tables(catalog), History()
    landed: list[str] = []
    read_one = plants._READ_HEADS

    def read_then_commit(self: Tables, table_ids: list[str]) -> Any:
        found = read_one(self, table_ids)
        if not landed:
            landed.append(_group(catalog, history, ["ns.a", "ns.b"]))
        return found

    monkeypatch.setattr(plants, "_READ_HEADS", read_then_commit)
    monkeypatch.setattr(Tables, "read_heads", plants.PLANTS["split-snapshots"][1])
    assert _read(catalog, history, ["ns.a", "ns.b"]) == {"ns.a": 0, "ns.b": 1}
    verdict = _verdict(catalog, tables, history)
    assert verdict.anomalies == [
        f"a reader's snapshots() at {history.reads[0]['began']:.3f} saw multi-table transaction {landed[0]} in part: "
        "ns.a version 1 (not seen), ns.b version 1 (seen); it read {'ns.a': 0, 'ns.b': 1}"
    ]


def test_an_unplanted_snapshots_read_with_the_same_cue_is_atomic(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same cue against the real snapshots() (one read of every head): the group lands after it."""
    tables, history = _tables(catalog), History()
    read_all = Tables.read_heads
    landed: list[str] = []

    def read_then_commit(self: Tables, table_ids: list[str]) -> Any:
        found = read_all(self, table_ids)
        if not landed:
            landed.append(_group(catalog, history, ["ns.a", "ns.b"]))
        return found

    monkeypatch.setattr(Tables, "read_heads", read_then_commit)
    assert _read(catalog, history, ["ns.a", "ns.b"]) == {"ns.a": 0, "ns.b": 0}
    assert _verdict(catalog, tables, history).anomalies == []


FAULTS = ("kill", "self-kill", "pause", "partition", "delay")


@pytest.mark.slow
def test_a_run_with_multi_table_transactions_under_faults_finds_no_anomaly(tmp_path: Path) -> None:
    result = run(RunConfig(seed=4401, writers=2, duration_seconds=14.0, faults=FAULTS, workdir=tmp_path / "run"))
    assert result.verdict.anomalies == [], result.summary()
    assert result.verdict.multi_commits > 0 and result.verdict.reads > 0, result.summary()
    assert sum(result.faults.values()) >= 2, result.summary()


@pytest.mark.slow
def test_a_run_with_the_split_commit_planted_is_reported(tmp_path: Path) -> None:
    result = run(
        RunConfig(
            seed=4402,
            writers=2,
            duration_seconds=12.0,
            faults=FAULTS,
            policies=("delta-ws", "maxcompute", "delta-rlc"),
            multi_table_rate=0.6,
            plant="split-commit",
            workdir=tmp_path / "run",
        )
    )
    assert any("were written at different etcd revisions" in a for a in result.verdict.anomalies), result.summary()


@pytest.mark.slow
def test_the_docs_planted_example_runs_as_written_and_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/checking.md's `--plant split-snapshots` example, as written (plus a seed and a workdir): it
    exits 1, and every anomaly is a read that saw a multi-table transaction in part."""
    docs = (Path(__file__).parent.parent / "docs" / "checking.md").read_text()
    (command,) = [line for line in docs.splitlines() if line.startswith("python -m acidtables.check ")]
    argv = shlex.split(command)[3:]
    assert main([*argv, "--seed", "4403", "--workdir", str(tmp_path / "run")]) == 1
    out = capsys.readouterr().out
    anomalies = [line for line in out.splitlines() if line.startswith("  ")]
    assert anomalies and all(" in part: " in a or "more reads saw" in a for a in anomalies), out
