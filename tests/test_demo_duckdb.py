"""The demos' last step: DuckDB queries a table the demo wrote through `Table.scan(...).to_duckdb(...)`,
and says how to get DuckDB where it is not installed instead of failing the demo."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from tests.test_table_scan import add

from acidtables import Catalog
from acidtables.cli.demo.duckdb_read import INSTALL, QUERY, duckdb_read
from acidtables.cli.main import main


@pytest.fixture
def events(catalog: Catalog) -> str:
    table = catalog.create_table("demo.events", "id BIGINT, v STRING, dt STRING", partition_by=["dt"])
    add(table, pa.table({"id": [1, 2, 3], "v": ["x", "y", "y"]}), {"dt": "a"})
    add(table, pa.table({"id": [7], "v": ["z"]}), {"dt": "b"})
    return table.name


def test_duckdb_queries_the_table_the_demo_wrote(catalog: Catalog, events: str) -> None:
    pytest.importorskip("duckdb")
    found = duckdb_read(catalog, events)
    assert found.missing is None and found.version == 2 and found.query == QUERY
    assert found.columns == ("dt", "row_count", "distinct_v", "min_id", "max_id")
    assert found.rows == (("a", 3, 2, 1, 3), ("b", 1, 1, 7, 7))
    text = found.to_text()
    assert "demo.events.scan(version=2).to_duckdb(connection, 'events')" in text
    assert QUERY in text and text.splitlines()[-1].split() == ["b", "1", "1", "7", "7"]
    assert found.to_json()["rows"] == [["a", 3, 2, 1, 3], ["b", 1, 1, 7, 7]]


def test_without_duckdb_the_step_says_how_to_get_it(
    catalog: Catalog, events: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "duckdb", None)  # what `import duckdb` meets where it is not installed
    found = duckdb_read(catalog, events)
    assert found.missing == INSTALL and found.rows == ()
    assert "pip install 'acidtables[duckdb]'" in found.to_text()
    assert found.to_json()["missing"] == INSTALL


def test_the_core_demo_ends_with_duckdb(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("duckdb")
    monkeypatch.setenv("ACIDTABLES_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert main(["demo", "--core"]) == 0
    out = capsys.readouterr().out
    last = out[out.index("DuckDB querying demo.delta_writeserializable") :].splitlines()
    assert last[1].strip() == QUERY
    assert last[2].split() == ["dt", "row_count", "distinct_v", "min_id", "max_id"]
    assert [line.split()[0] for line in last[3:]] == ["a", "b"]
