"""A file the table cannot read never commits, and no reader or compaction turns one into zero rows
(issue 24, item 1).

The core-API recipe of docs/python-api.md on a primary-key table once lost every row: plain Parquet files (no
merge-on-read columns) committed, read back as nothing, and the next MAJOR compaction rewrote their
partitions into nothing. Now a plain file is a change file of upserts, every added file's Parquet schema
is proven against the table's, a rewrite that keeps fewer rows than it must is refused before its
commit, and fsck checks the schemas of the files the head reads.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from tests.helpers.tables import source_options
from tests.spark_jobs import next_name

from acidtables import Catalog
from acidtables.core import OP_COLUMN, Table, Transaction
from acidtables.core.schema.file_schema import readable_as
from acidtables.errors import InvalidArgumentError, RowsLostError
from acidtables.spark import SparkTable
from acidtables.spark import scan as spark_scan

SCHEMA = "id BIGINT NOT NULL, amount DOUBLE, dt STRING"

#: (conflict policy, isolation level, primary key): every policy docs/conflict-policies.md documents
POLICIES = [
    ("maxcompute", None, ["id"]),
    ("maxcompute-transactional", None, []),
    ("delta", "WriteSerializable", []),
    ("delta", "Serializable", []),
]


def write(txn: Transaction, dt: str, columns: dict[str, pa.Array | list[Any]], name: str = "part") -> dict[str, Any]:
    """The helper of docs/python-api.md: one Parquet file in the staging directory, described for add_files."""
    path = Path(txn.staging_dir) / f"{name}-{len(list(Path(txn.staging_dir).rglob('*.parquet')))}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    data = pa.table(columns)
    pq.write_table(data, path)
    return {"path": str(path), "partition": {"dt": dt}, "rows": data.num_rows, "size_bytes": path.stat().st_size}


def readme_rows(ids: list[int], dt: str, amount: float = 1.0) -> dict[str, list[Any]]:
    return {"id": ids, "amount": [amount] * len(ids), "dt": [dt] * len(ids)}


def create(catalog: Catalog, policy: str, level: str | None, key: list[str]) -> Table:
    kw: dict[str, Any] = {"conflict_policy": policy, "primary_key": key}
    if level:
        kw["isolation_level"] = level
    return catalog.create_table(next_name(), schema=SCHEMA, partition_by=["dt"], **kw)


def eight_appends(table: Table) -> None:
    """Eight core-API INSERT INTOs of plain Parquet files (24 rows over two partitions)."""
    for i in range(8):
        txn = table.begin("insert_into")
        dt = f"2026-11-0{i % 2 + 1}"
        txn.add_files([write(txn, dt, readme_rows([3 * i + 1, 3 * i + 2, 3 * i + 3], dt))])
        txn.commit()


@pytest.mark.parametrize(("policy", "level", "key"), POLICIES, ids=lambda v: str(v))
def test_the_readme_recipe_keeps_every_row_through_reads_and_compactions(
    spark: SparkSession, catalog: Catalog, policy: str, level: str | None, key: list[str]
) -> None:
    table = create(catalog, policy, level, key)
    eight_appends(table)
    t = SparkTable(spark, table)
    expected = sorted(range(1, 25))
    assert sorted(r.id for r in t.read().collect()) == expected
    t.compact("minor")
    assert sorted(r.id for r in t.read().collect()) == expected
    t.compact("major")
    assert sorted(r.id for r in t.read().collect()) == expected
    assert table.snapshot().row_count == 24
    assert table.fsck().ok
    # the data source's own (Arrow) reader agrees
    source = spark.read.format("acidtables").options(**source_options(catalog)).load(table.name)
    assert source.count() == 24


def test_a_plain_file_on_a_primary_key_table_upserts_by_key(spark: SparkSession, catalog: Catalog) -> None:
    """A plain Parquet file is a change file of upserts: a later file's row for a key replaces the
    earlier one, and a file with `_acid_op` can still delete."""
    table = create(catalog, "maxcompute", None, ["id"])
    for amount in (1.0, 2.0):
        txn = table.begin("insert_into")
        txn.add_files([write(txn, "a", readme_rows([1, 2], "a", amount))])
        txn.commit()
    txn = table.begin("delete")
    txn.add_files([write(txn, "a", {"id": [2], "amount": pa.array([None], pa.float64()), "_acid_op": ["D"]})])
    txn.commit()
    t = SparkTable(spark, table)
    assert [(r.id, r.amount) for r in t.read().collect()] == [(1, 2.0)]
    t.compact("major")
    assert [(r.id, r.amount) for r in t.read().collect()] == [(1, 2.0)]


HOSTILE: dict[str, tuple[dict[str, Any], str]] = {
    "missing key": ({"amount": [1.0]}, "primary-key column id (BIGINT) is missing"),
    "wrong type": ({"id": ["one"], "amount": [1.0]}, "column id is string, which cannot be read as BIGINT"),
    "narrowing": ({"id": pa.array([1], pa.int64()), "amount": pa.array([1], pa.int64())}, "column amount is int64"),
    "extra column": ({"id": [1], "amount": [1.0], "amout": [2.0]}, "column amout (double) is not a column"),
    "null key": ({"id": pa.array([None], pa.int64()), "amount": [1.0]}, "primary-key column id holds 1 NULL"),
    "unknown op": ({"id": [1], "_acid_op": ["X"]}, "_acid_op holds ['X']"),
    "null op": ({"id": [1], "_acid_op": pa.array([None], pa.string())}, "_acid_op holds 1 NULL"),
    "op type": ({"id": [1], "_acid_op": [1]}, "_acid_op is int64, not a STRING"),
    "nanoseconds": (
        {"id": [1], "ts": pa.array([datetime.datetime(2026, 1, 1)], pa.timestamp("ns"))},
        "coerce_timestamps='us'",
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_file_never_commits_and_the_message_names_the_problem(catalog: Catalog, case: str) -> None:
    table = catalog.create_table(
        next_name(),
        schema="id BIGINT NOT NULL, amount DOUBLE, ts TIMESTAMP, dt STRING",
        partition_by=["dt"],
        primary_key=["id"],
    )
    columns, message = HOSTILE[case]
    txn = table.begin("insert_into")
    with pytest.raises(InvalidArgumentError) as caught:
        txn.add_files([write(txn, "a", columns)])
    assert message in str(caught.value)
    assert table.name in str(caught.value) and "nothing was committed" in str(caught.value)
    txn.abort()
    assert table.snapshot().version == 0 and table.snapshot().row_count == 0


def test_merge_on_read_columns_belong_to_primary_key_tables_only(catalog: Catalog) -> None:
    table = create(catalog, "delta", None, [])
    txn = table.begin("insert_into")
    with pytest.raises(InvalidArgumentError, match=r"_acid_op \(string\) is not a column of the table"):
        txn.add_files([write(txn, "a", {"id": [1], "_acid_op": ["U"]})])
    with pytest.raises(InvalidArgumentError, match=r"changes file \(merge-on-read\), which only a primary-key"):
        txn.add_files([{**write(txn, "a", {"id": [1]}), "kind": "changes"}])
    txn.abort()


def test_what_the_reader_can_read_commits(spark: SparkSession, catalog: Catalog) -> None:
    """A nullable column left out reads as NULL; narrower integers and floats widen; a partition column
    stored in the file is allowed (the log's value is the row's); names match case-insensitively."""
    table = catalog.create_table(
        next_name(), schema="id BIGINT NOT NULL, amount DOUBLE, note STRING, dt STRING", partition_by=["dt"]
    )
    txn = table.begin("insert_into")
    txn.add_files(
        [
            write(txn, "a", {"ID": pa.array([1], pa.int32()), "amount": pa.array([1.5], pa.float32())}),
            write(txn, "a", {"id": [2], "note": ["x"], "dt": ["a"]}),
        ]
    )
    txn.commit()
    rows = sorted((r.id, r.amount, r.note, r.dt) for r in SparkTable(spark, table).read().collect())
    assert rows == [(1, 1.5, None, "a"), (2, None, "x", "a")]


@pytest.mark.parametrize(
    ("file_type", "table_type", "readable"),
    [
        (pa.int32(), "BIGINT", True),
        (pa.uint32(), "BIGINT", True),
        (pa.uint64(), "BIGINT", False),
        (pa.int64(), "INT", False),
        (pa.float32(), "DOUBLE", True),
        (pa.int64(), "DOUBLE", False),
        (pa.float64(), "FLOAT", False),
        (pa.decimal128(5, 2), "DECIMAL(10,4)", True),
        (pa.decimal128(12, 2), "DECIMAL(10,2)", False),
        (pa.int32(), "DECIMAL(10,0)", True),
        (pa.int64(), "DECIMAL(10,0)", False),
        (pa.date32(), "TIMESTAMP", False),
        (pa.date32(), "TIMESTAMP_NTZ", True),
        (pa.timestamp("ns", "UTC"), "TIMESTAMP", False),
        (pa.timestamp("us"), "TIMESTAMP", True),
        (pa.list_(pa.int32()), "ARRAY<BIGINT>", True),
        (pa.list_(pa.string()), "ARRAY<BIGINT>", False),
        (pa.map_(pa.string(), pa.int64()), "MAP<STRING, BIGINT>", True),
        (pa.struct([("a", pa.int64())]), "STRUCT<a: BIGINT, b: STRING>", True),
        (pa.struct([("a", pa.string())]), "STRUCT<a: BIGINT>", False),
        (pa.null(), "STRING", False),
        (pa.bool_(), "INT", False),
    ],
)
def test_readable_as_follows_sparks_parquet_reader(file_type: pa.DataType, table_type: str, readable: bool) -> None:
    """Each pair as Spark 4's Parquet reader answered it when read with that schema (see the module)."""
    assert readable_as(file_type, table_type) is readable


def test_a_compaction_that_would_lose_rows_is_refused_before_its_commit(
    spark: SparkSession, catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reader as it was (NULL `_acid_op` dropped by `!= 'D'`): the major compaction would write
    nothing where 12 live rows must be kept; it is refused, and the table keeps every row."""
    table = create(catalog, "maxcompute", None, ["id"])
    eight_appends(table)
    before = table.snapshot().version
    t = SparkTable(spark, table)
    monkeypatch.setattr(spark_scan, "row_operation", lambda: F.col(OP_COLUMN))
    with pytest.raises(RowsLostError, match="must be kept; refused before its commit"):
        t.compact("major")
    monkeypatch.undo()
    assert table.snapshot().version == before
    assert t.read().count() == 24
    staged = [p for p in Path(table.location).rglob("*.parquet") if "_acid_txn=" in str(p)]
    committed = {Path(table.location) / f.path for f in table.snapshot().files}
    assert set(staged) == committed  # the refused groups' staged outputs are gone


def test_fsck_names_a_file_the_table_cannot_read(catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file committed before the proof existed (the proof switched off here) is named by fsck."""
    from acidtables.core.commit import file_checks

    table = create(catalog, "maxcompute", None, ["id"])
    monkeypatch.setattr(file_checks, "check_file_schema", lambda *a, **k: None)
    txn = table.begin("insert_into")
    txn.add_files([write(txn, "a", {"amount": [1.0]})])
    txn.commit()
    monkeypatch.undo()
    report = table.fsck()
    assert not report.ok
    failed = {c.name: c.problems for c in report.checks if not c.ok}
    assert list(failed) == ["files"]
    assert "primary-key column id (BIGINT) is missing" in failed["files"][0]
