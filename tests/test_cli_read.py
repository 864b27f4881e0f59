"""`acidtables read`: a table's rows on stdout in each format, through the same `main(argv)` users run."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from acidtables import Catalog, DataFile, Table
from acidtables.cli.main import main
from acidtables.core.coordination.embedded import EmbeddedEtcd


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, etcd_server: EmbeddedEtcd, etcd_prefix: str, tmp_path: Path) -> None:
    monkeypatch.setenv("ACIDTABLES_ETCD_ENDPOINTS", etcd_server.endpoint)
    monkeypatch.setenv("ACIDTABLES_ETCD_PREFIX", etcd_prefix)
    monkeypatch.setenv("ACIDTABLES_WAREHOUSE", str(tmp_path / "warehouse"))


@pytest.fixture
def orders(cli_env: None, catalog: Catalog) -> Table:
    """sales.orders: version 1 holds ids 1-2 in dt=a, version 2 adds id 3 in the NULL partition."""
    table = catalog.create_table(
        "sales.orders", "id BIGINT, dt STRING, day DATE, price DECIMAL(10,2), note STRING", partition_by=["dt"]
    )
    for partition, ids in (("a", [1, 2]), (None, [3])):
        data = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "day": pa.array([date(2026, 11, i) for i in ids]),
                "price": pa.array([Decimal(f"{i}.10") for i in ids], pa.decimal128(10, 2)),
                "note": pa.array([f"ü{i}" for i in ids]),
            }
        )
        with table.begin("insert_into") as tx:
            path = Path(tx.staging_dir) / "part-0.parquet"
            path.parent.mkdir(parents=True)
            pq.write_table(data, path)
            tx.add_files([DataFile(str(path), {"dt": partition}, len(ids), path.stat().st_size)])
            tx.commit()
    return table


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_table_format_aligns_the_rows_and_says_the_version(orders: Table, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "read", "sales.orders", "--where", "id < 3", "--columns", "id,note")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["id", "note"]
    assert sorted(line.split() for line in lines[1:3]) == [["1", "ü1"], ["2", "ü2"]]
    assert lines[3] == "(2 rows, version 2)"


def test_json_lines_keep_every_digit_and_time_travel_works(orders: Table, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "read", "sales.orders", "--format", "json", "--version", "1")
    assert code == 0, err
    rows = sorted((json.loads(line) for line in out.splitlines()), key=lambda r: r["id"])
    assert rows == [
        {"id": 1, "dt": "a", "day": "2026-11-01", "price": "1.10", "note": "ü1"},
        {"id": 2, "dt": "a", "day": "2026-11-02", "price": "2.10", "note": "ü2"},
    ]
    code, out, _ = run(capsys, "--json", "read", "sales.orders", "--where", "dt IS NULL")  # --json means json lines
    assert code == 0
    assert [json.loads(line)["id"] for line in out.splitlines()] == [3]


def test_csv_has_a_header_and_nulls_empty(orders: Table, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    code = main(["read", "sales.orders", "--format", "csv", "--columns", "id,dt", "--limit", "5"])
    out = capsysbinary.readouterr().out.decode()
    assert code == 0
    parsed = list(csv.reader(io.StringIO(out)))
    assert parsed[0] == ["id", "dt"]
    assert sorted(parsed[1:]) == [["1", "a"], ["2", "a"], ["3", ""]]


def test_parquet_to_a_file_reads_back_as_the_table(orders: Table, tmp_path: Path) -> None:
    target = tmp_path / "rows.parquet"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with open(target, "wb") as out:
        done = subprocess.run(
            [sys.executable, "-m", "acidtables.cli.main", "read", "sales.orders", "--format", "parquet"],
            stdout=out,
            stderr=subprocess.PIPE,
            env=env,
            timeout=120,
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()
    read_back = pq.read_table(target)
    assert read_back.equals(orders.scan().to_arrow())


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["--where", "nope = 1"], 1, "column 'nope', which the table does not have"),
        (["--columns", "id,,dt"], 2, "--columns 'id,,dt' has an empty name"),
        (["--columns", "id,missing"], 1, "no column 'missing'"),
        (["--version", "7"], 1, "no version 7"),
        (["--version", "-1"], 2, "must not be negative"),
        (["--version", "1", "--timestamp", "2026-11-28T00:00:00Z"], 2, "not allowed with argument"),
        (["--format", "xml"], 2, "invalid choice: 'xml'"),
    ],
)
def test_bad_input_is_named(
    orders: Table, capsys: pytest.CaptureFixture[str], argv: list[str], code: int, message: str
) -> None:
    got, out, err = run(capsys, "read", "sales.orders", *argv)
    assert (got, out) == (code, "")
    assert message in err


def test_parquet_is_refused_on_a_terminal(
    orders: Table, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal: Any = Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    code = main(["read", "sales.orders", "--format", "parquet"])
    assert code == 2
    assert terminal.getvalue() == ""
    assert "goes to a file or a pipe" in capsys.readouterr().err


def test_nested_columns_are_refused_by_csv_and_nan_is_spelled_in_json(
    cli_env: None, catalog: Catalog, capsys: pytest.CaptureFixture[str]
) -> None:
    table = catalog.create_table("sales.odd", "id BIGINT, x DOUBLE, tags ARRAY<STRING>")
    data = pa.table({"id": [1, 2], "x": [float("nan"), float("-inf")], "tags": [["a"], None]})
    with table.begin("insert_into") as tx:
        path = Path(tx.staging_dir) / "part-0.parquet"
        path.parent.mkdir(parents=True)
        pq.write_table(data, path)
        tx.add_files([DataFile(str(path), {}, 2, path.stat().st_size)])
        tx.commit()
    code, out, err = run(capsys, "read", "sales.odd", "--format", "csv")
    assert (code, out) == (2, "") and "cannot hold the nested column(s) tags" in err
    code, out, err = run(capsys, "read", "sales.odd", "--format", "json")
    assert code == 0, err
    assert sorted(out.splitlines()) == [
        '{"id": 1, "x": "NaN", "tags": ["a"]}',
        '{"id": 2, "x": "-Infinity", "tags": null}',
    ]
