"""`acidtables expire`, `vacuum` and `etcd-usage` (issue 18), in-process against the test etcd."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.helpers.tables import staged_parquet
from tests.test_cli import cli_env, run, run_json  # noqa: F401 (cli_env is a fixture)

from acidtables import Catalog, Table
from acidtables.core.coordination.waiting import wait_for
from acidtables.core.maintenance.retention import registration_window_seconds
from acidtables.core.settings import CommitSettings


@pytest.fixture
def rewritten(cli_env: None, catalog: Catalog) -> Table:  # noqa: F811
    """sales.daily at version 4: created, then four overwrites of its one partition."""
    table = catalog.create_table("sales.daily", schema="id BIGINT, dt STRING", partition_by=["dt"])
    for _ in range(4):
        with table.begin("insert_overwrite") as tx:
            tx.remove_files(tx.scan("dt = 'a'"))
            tx.add_files([staged_parquet(tx, {"dt": "a"}, rows=2)])
            tx.set_scope([{"dt": "a"}])
            tx.commit()
    return table


def test_expire_then_vacuum_from_the_command_line(capsys: pytest.CaptureFixture[str], rewritten: Table) -> None:
    expired = run_json(capsys, "expire", "sales.daily", "--retain-versions", "1", "--retain-duration", "0h", "--force")
    assert expired == {"table": "sales.daily", "versions_archived": 0, "keys_removed": 0, "oldest_version_kept": 4}

    # a removal younger than the registration window (register_after_seconds and its grace) is not judged
    # yet, whatever the retention: a transaction begun a moment ago may read its file unregistered
    young = run_json(capsys, "vacuum", "sales.daily", "--retain-duration", "0s", "--force", "--dry-run")
    assert young["files_deleted"] < 3
    plans: list[dict[str, Any]] = []

    def judged_all() -> bool:
        plans.append(run_json(capsys, "vacuum", "sales.daily", "--retain-duration", "0s", "--force", "--dry-run"))
        return bool(plans[-1]["files_deleted"] == 3)

    wait_for(
        judged_all,
        registration_window_seconds(CommitSettings.from_env().register_after_seconds) + 10,
        interval_seconds=0.5,
        message="the removals never came out of the registration window",
    )
    plan = plans[-1]
    assert plan["dry_run"] and plan["files_deleted"] == 3 and plan["bytes_deleted"] > 0
    assert all(Path(rewritten.location, p).exists() for p in plan["paths"])
    done = run_json(capsys, "vacuum", "sales.daily", "--retain-duration", "0s", "--force")
    assert done["paths"] == plan["paths"] and not done["dry_run"]
    assert not any(Path(rewritten.location, p).exists() for p in plan["paths"])

    code, out, _ = run(capsys, "vacuum", "sales.daily", "--retain-duration=0s", "--force")
    assert code == 0 and out == "sales.daily: deleted 0 files, 0 bytes\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["expire", "sales.daily", "--retain-duration", "1h"], "shorter than the safety minimum 168h"),
        # a number of seconds, as docs/retention.md allows: read as 3600 seconds, then judged as 1h is
        (["expire", "sales.daily", "--retain-duration", "3600"], "shorter than the safety minimum 168h"),
        (["vacuum", "sales.daily", "--retain-duration", "a week"], "retain_duration='a week' is not a duration"),
        (["expire", "sales.daily", "--retain-versions", "0"], "must be at least 1"),
        (["expire", "sales.nothing"], "no table sales.nothing"),
    ],
)
def test_maintenance_refuses_bad_arguments_naming_them(
    capsys: pytest.CaptureFixture[str], rewritten: Table, argv: list[str], message: str
) -> None:
    code, _, err = run(capsys, *argv)
    assert code in (1, 2) and message in err
    assert rewritten.snapshot(1).version == 1  # nothing expired


def test_etcd_usage_reports_the_quota_and_each_table(capsys: pytest.CaptureFixture[str], rewritten: Table) -> None:
    usage = run_json(capsys, "etcd-usage")
    (endpoint,) = usage["endpoints"]
    assert endpoint["quota_bytes"] == 8 << 30 and 0 < endpoint["db_size_bytes"] < endpoint["quota_bytes"]
    assert endpoint["db_in_use_bytes"] <= endpoint["db_size_bytes"]
    assert usage["alarms"] == [] and usage["warnings"] == []
    (daily,) = usage["tables"]  # 5 log entries, 5 txn ids, 4 data commits timed, the head
    assert daily["name"] == "sales.daily" and daily["keys"] == 5 + 5 + 4 + 1 and daily["bytes"] > 1000
    code, out, _ = run(capsys, "etcd-usage")
    assert code == 0 and "QUOTA" in out and "sales.daily" in out
