"""The `acidtables` command line, run in-process through `main(argv)` against the test etcd.

Commands reach etcd the way users' do, through `Catalog.connect()` and the ACIDTABLES_* variables,
which each test points at the session's etcd under its own key prefix.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.tables import staged_parquet

from acidtables import Catalog, Table
from acidtables.cli.main import main
from acidtables.cli.output import EXIT_CONFLICT, render_error
from acidtables.core.coordination.embedded import EmbeddedEtcd, free_port
from acidtables.core.coordination.waiting import wait_for
from acidtables.errors import TransactionConflictException

RFC3339_UTC = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$"


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, etcd_server: EmbeddedEtcd, etcd_prefix: str, tmp_path: Path) -> None:
    monkeypatch.setenv("ACIDTABLES_ETCD_ENDPOINTS", etcd_server.endpoint)
    monkeypatch.setenv("ACIDTABLES_ETCD_PREFIX", etcd_prefix)
    monkeypatch.setenv("ACIDTABLES_WAREHOUSE", str(tmp_path))


@pytest.fixture
def orders(cli_env: None, catalog: Catalog) -> Table:
    """sales.orders at version 1: created, then one INSERT INTO of 3 rows in one real Parquet file."""
    table = catalog.create_table("sales.orders", schema="id BIGINT, dt STRING", partition_by=["dt"])
    with table.begin("insert_into") as tx:
        tx.add_files([staged_parquet(tx, {"dt": "a"}, rows=3)])
        tx.commit()
    return table


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code, out, err = run(capsys, "--json", *argv)
    assert code == 0, err
    return json.loads(out)


def _processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes containing `text`, as `pgrep -f` would find them."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # exited while we looked
            continue
        if text in cmdline:
            found.append(cmdline)
    return found


# --- tables, describe, history ------------------------------------------------------------------------


def file_bytes(table: Table) -> int:
    (only,) = table.snapshot().files
    return only.size_bytes


def test_tables_lists_each_table_with_policy_and_version(orders: Table, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "tables")

    assert code == 0, err
    header, row = out.splitlines()
    assert header.split() == ["NAME", "POLICY", "ISOLATION", "VERSION", "FILES", "ROWS", "PHYSICAL", "ROWS", "BYTES"]
    assert row.split() == ["sales.orders", "delta", "WriteSerializable", "1", "1", "3", "3", str(file_bytes(orders))]


def test_tables_json_has_one_entry_per_table(orders: Table, capsys: pytest.CaptureFixture[str]) -> None:
    document = run_json(capsys, "tables", "sales")

    assert document["namespace"] == "sales"
    (entry,) = document["tables"]
    assert entry == {
        "name": "sales.orders",
        "namespace": "sales",
        "table": "orders",
        "conflict_policy": "delta",
        "isolation_level": "WriteSerializable",
        "version": 1,
        "active_files": 1,
        "rows": 3,
        "physical_rows": 3,
        "size_bytes": file_bytes(orders),
        "damaged": None,
    }


def test_tables_in_an_empty_namespace_says_there_are_none(orders: Table, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "tables", "marketing")

    assert code == 0
    assert out == "no tables in namespace marketing\n"


def test_describe_shows_definition_and_state(orders: Table, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "describe", "sales.orders")

    assert code == 0, err
    lines = out.splitlines()
    assert "conflict policy:        delta" in lines
    assert "isolation level:        WriteSerializable" in lines
    assert "partition by:           dt" in lines
    assert "version:                1" in lines
    assert f"bytes:                  {file_bytes(orders)}" in lines
    assert any(line.split() == ["id", "BIGINT", "yes"] for line in lines)


def test_describe_json_has_the_metadata_keys(orders: Table, capsys: pytest.CaptureFixture[str]) -> None:
    # global options also work after the command
    code, out, err = run(capsys, "describe", "sales.orders", "--json")

    assert code == 0, err
    document = json.loads(out)
    assert document["name"] == "sales.orders"
    assert document["schema"] == [
        {"name": "id", "type": "BIGINT", "nullable": True},
        {"name": "dt", "type": "STRING", "nullable": True},
    ]
    assert document["partition_by"] == ["dt"]
    assert document["primary_key"] == []
    assert document["conflict_policy"] == "delta"
    assert document["isolation_level"] == "WriteSerializable"
    assert document["row_level_concurrency"] is False
    assert document["location"] == orders.location
    assert document["version"] == 1
    assert (document["active_files"], document["rows"], document["size_bytes"]) == (1, 3, file_bytes(orders))
    for key in ("time_version", "committed_at", "created_at"):
        assert document[key] is not None
        assert re.match(RFC3339_UTC, document[key]), document[key]


def test_history_lists_commits_newest_first(orders: Table, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "history", "sales.orders")

    assert code == 0, err
    header, *rows = out.splitlines()
    assert header.startswith("VERSION  TIME VERSION")
    assert [row.split()[0] for row in rows] == ["1", "0"]
    assert "INSERT INTO" in rows[0]
    assert "CREATE TABLE" in rows[1]


def test_history_json_respects_the_limit(orders: Table, capsys: pytest.CaptureFixture[str]) -> None:
    document = run_json(capsys, "history", "sales.orders", "--limit", "1")

    assert document["name"] == "sales.orders"
    (entry,) = document["entries"]
    assert entry["version"] == 1
    assert entry["operation"] == "INSERT INTO"
    assert (entry["files_added"], entry["rows_added"], entry["read_version"]) == (1, 3, 0)
    assert re.match(RFC3339_UTC, entry["time_version"])


def test_history_names_the_other_tables_of_a_multi_table_commit(
    orders: Table, catalog: Catalog, capsys: pytest.CaptureFixture[str]
) -> None:
    catalog.create_table("sales.audit", schema="id BIGINT, dt STRING", partition_by=["dt"])
    with catalog.transaction() as tx:
        for name in ("sales.orders", "sales.audit"):
            part = tx.begin(name, "insert_into")
            part.add_files([staged_parquet(part, {"dt": "b"})])
    code, out, err = run(capsys, "history", "sales.orders")
    assert code == 0, err
    header, *rows = out.splitlines()
    assert header.rstrip().endswith("TOGETHER WITH")
    assert rows[0].rstrip().endswith("sales.audit") and not rows[1].rstrip().endswith("sales.audit")
    (entry,) = run_json(capsys, "history", "sales.audit", "--limit", "1")["entries"]
    assert entry["multi_txn_id"] == tx.id and set(entry["multi_txn_tables"]) == {"sales.orders", "sales.audit"}


# --- errors and exit codes ----------------------------------------------------------------------------


def test_missing_table_exits_1_naming_it(orders: Table, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "describe", "sales.missing")

    assert code == 1
    assert out == ""
    assert "no table sales.missing" in err
    assert "Traceback" not in err


def test_missing_table_under_json_is_an_error_object(orders: Table, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--json", "history", "sales.missing")

    assert code == 1
    assert out == ""
    document = json.loads(err)
    assert document["error"] == "TableNotFoundError"
    assert "sales.missing" in document["message"]


def test_verbose_adds_the_traceback(orders: Table, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--verbose", "describe", "sales.missing")

    assert code == 1
    assert "Traceback" in err
    assert "no table sales.missing" in err


def test_unreachable_etcd_exits_4_within_bounded_time(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ACIDTABLES_ETCD_ENDPOINTS", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("ACIDTABLES_WAREHOUSE", str(tmp_path))
    monkeypatch.setenv("ACIDTABLES_ETCD_UNAVAILABLE_TIMEOUT_SECONDS", "1")

    code, out, err = run(capsys, "tables")

    assert code == 4
    assert out == ""
    # the bound the variable sets is the one applied (core's tests prove the loop keeps to its bound)
    assert "did not answer" in err and "within 1 s" in err


def test_missing_settings_point_to_local(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("ACIDTABLES_ETCD_ENDPOINTS", raising=False)
    monkeypatch.delenv("ACIDTABLES_WAREHOUSE", raising=False)

    code, _, err = run(capsys, "tables")

    assert code == 1
    assert "ACIDTABLES_ETCD_ENDPOINTS" in err
    assert "--local" in err


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param([], id="no-command"),
        pytest.param(["describe"], id="missing-name"),
        pytest.param(["history", "sales.orders", "--limit", "0"], id="bad-limit"),
        pytest.param(["frobnicate"], id="unknown-command"),
    ],
)
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, *argv)

    assert code == 2
    assert out == ""
    assert err.startswith("usage: acidtables")


def test_usage_error_under_json_is_an_error_object(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--json", "describe")

    assert code == 2
    assert json.loads(err)["error"] == "UsageError"


def test_conflict_renders_its_fields_and_exits_3(catalog: Catalog, capsys: pytest.CaptureFixture[str]) -> None:
    # the read-only commands cannot lose a commit, so take a real conflict from core (seed 000, II->II)
    table = catalog.create_table("s.t", schema="id BIGINT, dt STRING", partition_by=["dt"], primary_key=["id"])
    earlier, later = table.begin("insert_into"), table.begin("insert_into")
    for tx in (earlier, later):
        tx.add_files([staged_parquet(tx, {"dt": "a"})])
    earlier.commit()
    with pytest.raises(TransactionConflictException) as raised:
        later.commit()

    code = render_error(raised.value, as_json=True, verbose=False, err=sys.stderr)

    assert code == EXIT_CONFLICT == 3
    document = json.loads(capsys.readouterr().err)
    assert document["error"] == "TransactionConflictException"
    assert (document["earlier_op"], document["later_op"]) == ("II", "II")
    assert document["winning_version"] == 1
    assert document["read_version"] == 0
    assert document["scope"] == "dt=a"


# --- local etcd: --local and the etcd command ---------------------------------------------------------


def test_bare_local_before_the_command_uses_the_default_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("ACIDTABLES_HOME", str(home))

    code, out, err = run(capsys, "--local", "tables")

    assert code == 0, err
    assert out == "no tables\n"
    assert (home / "etcd").is_dir()
    assert _processes_mentioning(str(home)) == []


@pytest.mark.parametrize("where", ["the file", "under the file"])
def test_local_given_a_regular_file_says_it_is_not_a_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    regular = tmp_path / "notes.txt"
    regular.write_text("mine")
    path = regular if where == "the file" else regular / "home"

    code, out, err = run(capsys, f"--local={path}", "tables")

    assert code != 0 and out == ""
    assert f"{path} is not a directory" in err and "unexpected" not in err.lower()
    assert regular.read_text() == "mine"  # nothing lost


def test_etcd_command_serves_until_sigterm(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACIDTABLES_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "acidtables.cli", "etcd", "--data-dir", str(home)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    prefix = "export ACIDTABLES_ETCD_ENDPOINTS="
    try:
        wait_for(lambda: any(line.startswith(prefix) for line in lines) or proc.poll() is not None, 60)
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        endpoint = next(line for line in lines if line.startswith(prefix))[len(prefix) :].strip()
        marker = json.loads((home / "etcd-endpoint.json").read_text())
        assert marker["endpoint"] == endpoint  # so Catalog.local(home) reuses this etcd
        with Catalog.local(home) as local:
            local.create_table("s.t", schema="id BIGINT")
            assert local.list_tables() == ["s.t"]
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        reader.join(timeout=10)

    assert proc.returncode == 0
    assert lines[-1] == "etcd stopped\n"
    assert not (home / "etcd-endpoint.json").exists()
    with pytest.raises(ProcessLookupError):
        os.kill(marker["pid"], 0)


# --- demo ---------------------------------------------------------------------------------------------

#: (policy, isolation level, earlier, later) -> (outcome, exception, later retries), from conflict-rules
#: §3.1 (MaxCompute flavours) and §8.1 / §13.1 (delta); the UPDATE pairs share partition dt=a, the
#: compaction runs on dt=b
EXPECTED_DEMO = {
    ("maxcompute", None, "INSERT INTO", "INSERT INTO"): ("later_failed", "TransactionConflictException", 0),
    ("maxcompute", None, "INSERT INTO", "UPDATE"): ("later_failed", "TransactionConflictException", 0),
    ("maxcompute", None, "UPDATE", "UPDATE"): ("later_failed", "TransactionConflictException", 0),
    ("maxcompute", None, "INSERT INTO", "MINOR COMPACT"): ("both_committed", None, 1),
    ("maxcompute-transactional", None, "INSERT INTO", "INSERT INTO"): ("both_committed", None, 1),
    ("maxcompute-transactional", None, "INSERT INTO", "UPDATE"): ("later_failed", "TransactionConflictException", 0),
    ("maxcompute-transactional", None, "UPDATE", "UPDATE"): ("later_failed", "TransactionConflictException", 0),
    ("maxcompute-transactional", None, "INSERT INTO", "MINOR COMPACT"): ("both_committed", None, 1),
    ("delta", "WriteSerializable", "INSERT INTO", "INSERT INTO"): ("both_committed", None, 1),
    ("delta", "WriteSerializable", "INSERT INTO", "UPDATE"): ("both_committed", None, 1),
    ("delta", "WriteSerializable", "UPDATE", "UPDATE"): ("later_failed", "ConcurrentAppendException", 0),
    ("delta", "WriteSerializable", "INSERT INTO", "MINOR COMPACT"): ("both_committed", None, 1),
    ("delta", "Serializable", "INSERT INTO", "INSERT INTO"): ("both_committed", None, 1),
    ("delta", "Serializable", "INSERT INTO", "UPDATE"): ("later_failed", "ConcurrentAppendException", 0),
    ("delta", "Serializable", "UPDATE", "UPDATE"): ("later_failed", "ConcurrentAppendException", 0),
    ("delta", "Serializable", "INSERT INTO", "MINOR COMPACT"): ("both_committed", None, 1),
}


@pytest.fixture
def demo_tmp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The demo's temporary directory lands here, so its etcd can be looked for by path afterwards."""
    monkeypatch.setenv("ACIDTABLES_HOME", str(tmp_path / "home"))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    return scratch


def test_demo_json_outcomes_match_the_conflict_rules(demo_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    document = run_json(capsys, "demo", "--core")

    outcomes = {
        (s["policy"], s["isolation_level"], s["earlier"], s["later"]): (
            s["outcome"],
            s["exception"],
            s["later_retries"],
        )
        for s in document["scenarios"]
    }
    assert outcomes == EXPECTED_DEMO
    for scenario in document["scenarios"]:
        assert isinstance(scenario["earlier_version"], int)
        assert (scenario["later_version"] is None) == (scenario["outcome"] == "later_failed")


def test_demo_time_travel_reads_the_first_load_by_version_and_by_time(
    demo_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    travel = run_json(capsys, "demo", "--core")["time_travel"]

    by_version, by_time, now = travel["snapshots"]
    assert by_version["version"] == by_time["version"] == travel["changes_since_version"]
    assert by_version["rows"] == by_time["rows"]
    assert now["version"] > by_version["version"]
    assert [c["operation"] for c in travel["changes"]][:1] == ["INSERT INTO"]
    # the compaction changed no data, so changes() leaves it out (D-18)
    assert [r["operation"] for r in travel["rewrites_left_out"]] == ["MINOR COMPACT"]


def test_demo_leaves_no_etcd_and_no_files(demo_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "demo", "--core")

    assert code == 0, err
    assert "later failed: TransactionConflictException" in out
    assert "both committed (later rebased, 1 retry)" in out
    assert _processes_mentioning(str(demo_tmp)) == []
    assert list(demo_tmp.iterdir()) == []
