"""The user documentation works as written: every relative link and anchor of README.md and docs/*.md
leads somewhere, and every Python example in them runs in a test, as written (a new example without a
test fails here)."""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tests.helpers import docs
from tests.helpers.tables import staged_parquet

from acidtables import Catalog
from acidtables.core.coordination.embedded import EmbeddedEtcd

#: every Python example of the documentation, and the test that runs it as written
RUN_BY = {
    "README.md#python-0": "tests/test_docs.py::test_the_readme_quick_start_runs_as_written",
    "docs/python-api.md#python-0": "tests/test_docs.py::test_the_python_api_quick_start_runs_as_written",
    "docs/python-api.md#python-1": "tests/test_docs.py::test_the_connect_example_lists_the_configured_tables",
    "docs/sql.md#python-0": "tests/test_sql.py::test_the_sql_pages_example_runs_as_written",
    "docs/sql.md#python-1": "tests/test_spark_multi_table.py::test_the_sql_pages_transactions_run_as_written",
    "docs/spark.md#python-0": "tests/test_spark_operations.py::test_the_spark_pages_merge_runs_as_written",
    "docs/spark.md#python-1": "tests/test_spark_multi_table.py::test_the_spark_pages_transactions_run_as_written",
    "docs/streaming.md#python-0": "tests/test_stream_sink.py::test_the_streaming_pages_example_runs_as_written",
    "docs/metrics.md#python-0": "tests/test_docs.py::test_the_metrics_example_exposes_the_commit_counters",
    "docs/retention.md#python-0": "tests/test_docs.py::test_the_retention_example_keeps_what_its_duration_covers",
    "docs/repair.md#python-0": "tests/test_docs.py::test_the_repair_example_removes_the_missing_file_in_one_version",
    "docs/reading.md#python-0": "tests/test_docs.py::test_the_reading_example_reads_with_every_engine",
    "docs/reading.md#python-1": "tests/test_docs.py::test_the_mirror_example_reads_with_delta_rs_refusing_writers",
    "docs/transactions.md#python-0": "tests/test_docs.py::test_the_transactions_example_moves_both_tables_or_neither",
}


def run(block: docs.Block, names: dict[str, Any]) -> str:
    """Run an example in this process with `names` defined; what it printed."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(block.code, block.name, "exec"), names)
    return printed.getvalue()


def test_every_python_example_is_run_by_a_test() -> None:
    examples = {b.name for page in docs.PAGES for b in docs.blocks(page, "python")}
    assert examples == set(RUN_BY)
    for node in RUN_BY.values():
        path, name = node.split("::")
        assert f"def {name}(" in (docs.ROOT / path).read_text(), node


@pytest.mark.parametrize("page", docs.PAGES, ids=docs.page_name)
def test_every_relative_link_and_anchor_leads_somewhere(page: Path) -> None:
    broken = []
    for target in docs.links(page):
        path, _, anchor = target.partition("#")
        goal = (page.parent / path).resolve() if path else page
        if not goal.exists():
            broken.append(f"{target}: no {goal}")
        elif anchor and goal.suffix == ".md" and anchor not in docs.anchors(goal):
            broken.append(f"{target}: no heading #{anchor} in {docs.page_name(goal)}")
    assert broken == []


def test_the_readme_stays_a_front_page() -> None:
    """What it is, the two set-up commands, one quick start, and links to the rest."""
    readme = docs.ROOT / "README.md"
    headings = [line for line in readme.read_text().splitlines() if line.startswith("## ")]
    assert headings == ["## Set up", "## Quick start (PySpark)", "## Documentation", "## Status"]
    linked = {target.partition("#")[0] for target in docs.links(readme)}
    assert {docs.page_name(page) for page in docs.PAGES[1:]} <= linked


@pytest.mark.slow
def test_the_readme_quick_start_runs_as_written(tmp_path: Path) -> None:
    """In a process of its own: it starts and stops its own SparkSession and embedded etcd."""
    block = docs.block("README.md", "python")
    done = subprocess.run(
        [sys.executable, "-c", block.code],
        cwd=tmp_path,
        env={**os.environ, "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    shown = done.stdout
    assert re.search(r"\|\s*1\|2026-11-01\|\s*10\.0\|", shown), shown
    assert re.search(r"\|\s*2\|2026-11-01\|\s*5\.0\|", shown), shown  # updated to 0, then merged to 5.0
    assert re.search(r"\|\s*2\|2026-11-01\|\s*-3\.0\|", shown), shown  # version 1, by time travel
    assert "MERGE" in shown and "MAJOR COMPACT" in shown  # history()


def test_the_python_api_quick_start_runs_as_written() -> None:
    printed = run(docs.block("docs/python-api.md", "python"), {})
    lines = printed.splitlines()
    assert lines[0] == "1 0"
    assert lines[1] == "ConcurrentAppendException 2"
    assert "lost to" in lines[2] or "UPDATE" in lines[2]
    assert lines[3:6] == ["2", "1", "2"]
    assert lines[-1] == "2 UPDATE 1 1"


def test_the_connect_example_lists_the_configured_tables(
    catalog: Catalog, etcd_server: EmbeddedEtcd, etcd_prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog.create_table("sales.orders", schema="id BIGINT")
    monkeypatch.setenv("ACIDTABLES_ETCD_ENDPOINTS", etcd_server.endpoint)
    monkeypatch.setenv("ACIDTABLES_ETCD_PREFIX", etcd_prefix)
    monkeypatch.setenv("ACIDTABLES_WAREHOUSE", str(tmp_path / "warehouse"))
    assert run(docs.block("docs/python-api.md", "python", 1), {}) == "['sales.orders']\n"


def test_the_metrics_example_exposes_the_commit_counters() -> None:
    printed = run(docs.block("docs/metrics.md", "python"), {})
    for name in ("acidtables_commits_total", "acidtables_commit_conflicts_total", "acidtables_commit_retries_total"):
        assert f"# TYPE {name} counter" in printed, name


def test_the_repair_example_removes_the_missing_file_in_one_version(catalog: Catalog) -> None:
    table = catalog.create_table("sales.orders", schema="id BIGINT, dt STRING", partition_by=["dt"])
    with table.begin("insert_into") as tx:
        path = Path(tx.staging_dir) / "part-0.parquet"
        path.parent.mkdir(parents=True)
        pq.write_table(pa.table({"id": pa.array([1, 2], pa.int64()), "dt": ["a", "a"]}), path)
        tx.add_files([{"path": str(path), "partition": {"dt": "a"}, "rows": 2, "size_bytes": path.stat().st_size}])
        tx.commit()
    path.unlink()  # lost behind the table's back
    names: dict[str, Any] = {"catalog": catalog}
    printed = run(docs.block("docs/repair.md", "python"), names)
    assert names["plan"].rows_removed == 2 and names["done"].version == 2
    assert printed.strip() == repr([f.path for f in names["plan"].removed]) and "part-0.parquet" in printed
    assert table.snapshot().files == []


def test_the_retention_example_keeps_what_its_duration_covers(catalog: Catalog) -> None:
    """Every version is younger than the example's 168h: expire keeps them all and vacuum deletes nothing,
    not even the file only version 1 reads."""
    t = catalog.create_table("sales.orders", schema="id BIGINT, dt STRING", partition_by=["dt"])
    for txn_kind in ("insert_into", "insert_overwrite"):
        with t.begin(txn_kind) as tx:
            if txn_kind == "insert_overwrite":
                tx.remove_files(tx.scan("dt = 'a'"))
            tx.add_files([staged_parquet(tx, {"dt": "a"})])
            tx.commit()
    names: dict[str, Any] = {"t": t}
    run(docs.block("docs/retention.md", "python"), names)
    assert names["report"].oldest_version_kept == 0
    assert names["plan"].dry_run and list(names["plan"].paths) == []
    assert t.snapshot(version=1).row_count == 1  # still readable: nothing was deleted


def _commented(block: docs.Block) -> list[str]:
    """What each `print(...)  # shown` line of an example says it prints (the comment up to a colon)."""
    shown = []
    for line in block.code.splitlines():
        code, _, comment = line.partition("  # ")
        if code.strip().startswith("print(") and comment:
            shown.append(comment.split(": ")[0].removesuffix(" ..."))
    return shown


def test_the_reading_example_reads_with_every_engine() -> None:
    printed = run(docs.block("docs/reading.md", "python"), {}).splitlines()
    assert printed[0] == "[{'id': 1, 'amount': 10.0}, {'id': 2, 'amount': 10.0}, {'id': 3, 'amount': 25.0}]"
    assert printed[1:] == [
        "20.0",
        "[('2026-11-01', 2), ('2026-11-02', 1)]",
        "[('2026-11-01', 20.0), ('2026-11-02', 25.0)]",
        "45.0",
        "2",
        "1",
        "True",
    ]


def test_the_transactions_example_moves_both_tables_or_neither() -> None:
    block = docs.block("docs/transactions.md", "python")
    printed = run(block, {}).splitlines()
    assert printed == [
        "2 1",
        "True",
        "ConcurrentDeleteReadException sales.staging",
        "4 1 aborted",
        "[('sales.staging', 4), ('sales.orders', 1)]",
    ]
    assert printed == _commented(block)


def test_the_mirror_example_reads_with_delta_rs_refusing_writers() -> None:
    block = docs.block("docs/reading.md", "python", 1)
    printed = run(block, {}).splitlines()
    assert printed == ["0", "3 3", "1", "3", "3", "True", "3"]
    assert printed == _commented(block)
