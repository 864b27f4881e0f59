"""`Table.scan`: a table's rows in Arrow without Spark, from files committed through the core API.

Each test builds the file set a rule is about (a NULL partition, a column added later, a file stored
under other names and narrower types, a deletion vector, a primary-key partition with updates and
tombstones) and checks the rows; `test_scan_equivalence` checks the same against Spark's reads of real
histories. The filter tests compare against the same condition evaluated in Python, NULL rules included.
"""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import date
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from acidtables import Catalog, DataFile, Table
from acidtables.core import FileKind, TableScan, read_schema
from acidtables.core.read.data_files import plain_dataset, table_columns_digest
from acidtables.errors import DataFilesMissingError, InvalidArgumentError, VersionExpiredError, VersionNotFoundError

_files = itertools.count()


def add(
    table: Table,
    data: pa.Table,
    partition: Mapping[str, Any] | None = None,
    *,
    operation: str = "insert_into",
    kind: FileKind = FileKind.DATA,
    remove: Sequence[DataFile] = (),
) -> DataFile:
    """Commit one real Parquet file holding `data` (stored columns only) into `partition`."""
    with table.begin(operation) as tx:
        path = Path(tx.staging_dir) / f"part-{next(_files):05d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(data, path)
        file = DataFile(
            path=str(path),
            partition=dict(partition or {}),
            rows=data.num_rows,
            size_bytes=path.stat().st_size,
            kind=kind,
        )
        if remove:
            tx.remove_files(remove)
        tx.add_files([file])
        tx.commit()
    return next(f for f in table.snapshot().files if f.path.endswith("/" + path.name))


def rows(scan: TableScan) -> list[dict[str, Any]]:
    return sorted(scan.to_arrow().to_pylist(), key=lambda r: tuple((v is None, str(v)) for v in r.values()))


@pytest.fixture
def sales(catalog: Catalog) -> Table:
    """Three partitions, one of them NULL, and a column (`note`) the first file does not hold."""
    table = catalog.create_table(
        "s.sales", "id BIGINT, dt STRING, amount DOUBLE, day DATE, note STRING", partition_by=["dt"]
    )
    days = pa.array([date(2026, 11, 1), date(2026, 11, 2)])
    add(table, pa.table({"id": [1, 2], "amount": [10.0, None], "day": days}), {"dt": "2026-11-01"})
    add(table, pa.table({"id": [3, 4], "amount": [30.0, 40.0], "day": days, "note": ["x", None]}), {"dt": None})
    add(table, pa.table({"id": [5], "amount": [50.0], "day": days[:1], "note": ["y"]}), {"dt": "a/b=c %41"})
    return table


def test_rows_with_partition_values_from_the_log_and_null_for_columns_a_file_lacks(sales: Table) -> None:
    scan = sales.scan()
    assert scan.schema == read_schema(sales.metadata)
    assert [(r["id"], r["dt"], r["note"]) for r in rows(scan)] == [
        (1, "2026-11-01", None),
        (2, "2026-11-01", None),
        (3, None, "x"),
        (4, None, None),
        (5, "a/b=c %41", "y"),
    ]


@pytest.mark.parametrize(
    ("where", "expected_ids"),
    [
        ("amount > 25", [3, 4, 5]),
        ("amount >= 30 AND amount < 50", [3, 4]),
        ("NOT amount > 25", [1]),  # NULL amount (id 2) is neither > 25 nor NOT > 25
        ("amount IS NULL", [2]),
        ("amount IS NOT NULL AND id <> 1", [3, 4, 5]),
        ("id IN (1, 3, 9)", [1, 3]),
        ("id NOT IN (1, 3)", [2, 4, 5]),
        ("amount NOT IN (10, NULL)", []),  # NOT IN with a NULL is never true
        ("amount IN (10, NULL)", [1]),
        ("id BETWEEN 2 AND 4", [2, 3, 4]),
        ("dt = '2026-11-01'", [1, 2]),
        ("dt IS NULL", [3, 4]),
        ("dt <=> NULL", [3, 4]),
        ("note <=> 'x'", [3]),
        ("dt LIKE 'a/%'", [5]),
        ("dt NOT LIKE 'a/%'", [1, 2]),
        ("day = DATE '2026-11-02'", [2, 4]),
        ("day >= '2026-11-02'", [2, 4]),
        ("id * 10 + 1 = 31", [3]),
        ("-id = -5", [5]),
        ("(id = 1 OR id = 5) AND dt IS NOT NULL", [1, 5]),
        ("ID = 1", [1]),  # column names are case-insensitive, as in Spark
        ("amount = 10.0", [1]),
        ("id = 1.5", []),
        ("TRUE", [1, 2, 3, 4, 5]),
    ],
)
def test_where_returns_the_rows_spark_would(sales: Table, where: str, expected_ids: list[int]) -> None:
    assert [r["id"] for r in rows(sales.scan(where=where))] == expected_ids


def test_where_on_a_partition_opens_only_that_partitions_files(sales: Table) -> None:
    for file in sales.snapshot().files:
        if file.partition["dt"] != "2026-11-01":
            os.remove(sales.storage.absolute(file.path))  # a read that opened these would fail
    scan = sales.scan(where="dt = '2026-11-01' AND amount > 5")
    assert {f.partition["dt"] for f in scan.files} == {"2026-11-01"}
    assert [r["id"] for r in rows(scan)] == [1]
    with pytest.raises(DataFilesMissingError, match=r"s\.sales"):
        sales.scan().to_arrow()


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("nope = 1", "column 'nope', which the table does not have; its columns: id, dt, amount, day, note"),
        ("upper(dt) = 'A'", "upper"),
        ("id = ", "is not a SQL condition"),
        ("day = 'yesterday'", "'yesterday' is not a date32"),
        ("id IN (SELECT 1)", "IN"),
        ("", "non-empty"),
    ],
)
def test_bad_where_is_a_clear_error(sales: Table, where: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=r"s\.sales") as caught:
        sales.scan(where=where)
    assert message in str(caught.value)


def test_columns_limit_and_their_errors(sales: Table) -> None:
    scan = sales.scan(columns=["amount", "ID"], where="note IS NOT NULL")
    assert scan.schema.names == ["amount", "id"]
    assert sorted(scan.to_arrow().to_pylist(), key=lambda r: r["id"]) == [
        {"amount": 30.0, "id": 3},
        {"amount": 50.0, "id": 5},
    ]
    assert sales.scan(limit=2).to_arrow().num_rows == 2
    assert sales.scan(limit=0).to_arrow().num_rows == 0
    for bad, message in [
        (["id", "missing"], "no column 'missing' in the table; its columns: id, dt, amount, day, note"),
        (["id", "Id"], "names id more than once"),
        ([], "names no column"),
        ("id", "must be a list"),
    ]:
        with pytest.raises(InvalidArgumentError, match=r"s\.sales") as caught:
            sales.scan(columns=bad)
        assert message in str(caught.value)
    with pytest.raises(InvalidArgumentError, match="limit"):
        sales.scan(limit=-1)


def test_time_travel_pins_a_version(sales: Table) -> None:
    scan = sales.scan(version=1)
    add(sales, pa.table({"id": [6], "amount": [1.0]}), {"dt": "2026-11-01"})
    assert [r["id"] for r in rows(scan)] == [1, 2]  # made before the commit, read after it
    assert [r["id"] for r in rows(sales.scan())] == [1, 2, 3, 4, 5, 6]
    assert sales.scan(version=0).to_arrow().num_rows == 0
    with pytest.raises(VersionNotFoundError, match="no version 99"):
        sales.scan(version=99)
    sales.expire(retain_versions=1, retain_duration="0s", force=True)
    with pytest.raises(VersionExpiredError, match="version 1 has expired"):
        sales.scan(version=1)


def test_files_stored_under_other_names_and_narrower_types_read_as_the_table(catalog: Catalog) -> None:
    table = catalog.create_table("s.widened", "id BIGINT, amount DOUBLE")
    add(table, pa.table({"ID": pa.array([1], pa.int32()), "Amount": pa.array([1.5], pa.float32())}))
    add(table, pa.table({"id": pa.array([2], pa.int64()), "amount": pa.array([2.5], pa.float64())}))
    got = table.scan().to_arrow()
    assert got.schema == pa.schema([("id", pa.int64()), ("amount", pa.float64())])
    assert sorted(got.to_pylist(), key=lambda r: r["id"]) == [{"id": 1, "amount": 1.5}, {"id": 2, "amount": 2.5}]


def test_struct_fields_stored_in_another_case_read_as_the_tables(catalog: Catalog) -> None:
    """Spark's reader matches struct fields regardless of case, at any depth: so does the scan (a cast
    alone would read a field spelled `A` as NULL)."""
    table = catalog.create_table(
        "s.nested_case", "id BIGINT, s STRUCT<a: INT, t: STRUCT<b: STRING>>, l ARRAY<STRUCT<c: INT>>"
    )
    stored = pa.table(
        {
            "id": [1],
            "s": pa.array(
                [{"A": 7, "T": {"B": "x"}}], pa.struct([("A", pa.int32()), ("T", pa.struct([("B", pa.string())]))])
            ),
            "l": pa.array([[{"C": 3}]], pa.list_(pa.struct([("C", pa.int32())]))),
        }
    )
    add(table, stored)
    assert table.scan().to_arrow().to_pylist() == [{"id": 1, "s": {"a": 7, "t": {"b": "x"}}, "l": [{"c": 3}]}]
    assert [r["id"] for r in rows(table.scan(where="s.a = 7"))] == [1]


def test_a_file_whose_commit_recorded_the_tables_columns_is_planned_without_reading_its_footer(
    catalog: Catalog,
) -> None:
    """The commit's proof reads each new file's footer and keeps a digest of its stored columns; a read
    whose table has the same columns plans such a file without opening it (the scan still reads it).
    A file that differs (a column missing, a narrower type) is opened while planning, as before."""
    table = catalog.create_table("s.digests", "id BIGINT, amount DOUBLE, dt STRING", partition_by=["dt"])
    fits = add(table, pa.table({"id": [1], "amount": [1.5]}), {"dt": "a"})
    lacks = add(table, pa.table({"id": [2]}), {"dt": "a"})
    narrower = add(table, pa.table({"id": pa.array([3], pa.int32()), "amount": [3.5]}), {"dt": "b"})
    meta = table.metadata
    assert fits.schema_digest == table_columns_digest(meta)
    assert None not in {lacks.schema_digest, narrower.schema_digest}
    assert table_columns_digest(meta) not in {lacks.schema_digest, narrower.schema_digest}
    files = [fits, lacks, narrower]
    schema = read_schema(meta)

    def gone(file: DataFile) -> Path:
        path = Path(table.storage.absolute(file.path))
        moved = path.with_name(path.name + ".away")
        path.rename(moved)
        return moved

    moved = gone(fits)  # planning never opens it...
    dataset, others = plain_dataset(table.storage, files, schema, meta)
    assert [f.path for f in others] == [narrower.path]  # read file by file and widened, as before
    assert len(dataset.files) == 2
    with pytest.raises(FileNotFoundError):
        dataset.to_table()  # ...the scan does
    moved.rename(moved.with_name(moved.name.removesuffix(".away")))
    assert [(r["id"], r["amount"]) for r in rows(table.scan())] == [(1, 1.5), (2, None), (3, 3.5)]
    moved = gone(lacks)
    with pytest.raises(FileNotFoundError):
        plain_dataset(table.storage, files, schema, meta)  # its footer is read while planning
    moved.rename(moved.with_name(moved.name.removesuffix(".away")))

    # a column added later: no file has the table's columns any more, so every footer is read again
    catalog.alter_table("s.digests", add_columns="note STRING")
    assert table_columns_digest(table.metadata) != fits.schema_digest
    assert [(r["id"], r["note"]) for r in rows(table.scan())] == [(1, None), (2, None), (3, None)]


def test_the_recorded_column_digest_is_the_footers_never_the_callers(catalog: Catalog) -> None:
    """An entry that claims the table's columns for a file stored otherwise would have Arrow read it
    unconverted: add_files keeps the digest of what the footer says."""
    table = catalog.create_table("s.claims", "id BIGINT, amount DOUBLE")
    claimed = table_columns_digest(table.metadata)
    with table.begin("insert_into") as tx:
        path = Path(tx.staging_dir) / "part-narrow.parquet"
        path.parent.mkdir(parents=True)
        pq.write_table(pa.table({"ID": pa.array([7], pa.int32()), "amount": [7.5]}), path)
        tx.add_files([DataFile(str(path), {}, 1, path.stat().st_size, schema_digest=claimed)])
        tx.commit()
    (file,) = table.snapshot().files
    assert file.schema_digest not in {None, claimed}
    got = table.scan().to_arrow()
    assert got.schema == pa.schema([("id", pa.int64()), ("amount", pa.float64())])
    assert got.to_pylist() == [{"id": 7, "amount": 7.5}]


def test_deletion_vectors_hide_their_rows(catalog: Catalog) -> None:
    table = catalog.create_table("s.dv", "id BIGINT, dt STRING", partition_by=["dt"], row_level_concurrency=True)
    first = add(table, pa.table({"id": [1, 2, 3, 4]}), {"dt": "a"})
    with table.begin("delete") as tx:
        tx.remove_files([first])
        tx.add_files([replace(first, deletion_vector=(1, 3), added_version=None)])
        tx.commit()
    assert [r["id"] for r in rows(table.scan())] == [1, 3]
    assert [r["id"] for r in rows(table.scan(where="id > 1"))] == [3]
    assert [r["id"] for r in rows(table.scan(version=1))] == [1, 2, 3, 4]


def test_primary_key_partitions_are_merged_newest_row_per_key(catalog: Catalog) -> None:
    table = catalog.create_table("s.pk", "id BIGINT, dt STRING, amount DOUBLE", partition_by=["dt"], primary_key=["id"])
    add(table, pa.table({"id": [1, 2, 3], "amount": [1.0, 2.0, 3.0]}), {"dt": "a"})
    add(table, pa.table({"id": [1], "amount": [9.0]}), {"dt": "b"})  # another partition: another row
    # an update of 1 and a tombstone for 2, then an older sequence for 3 that must lose to version 1
    delta = {"id": [1, 2], "amount": [10.0, None], "_acid_op": ["U", "D"], "_acid_seq": pa.nulls(2, pa.int64())}
    add(table, pa.table(delta), {"dt": "a"}, operation="update")
    old = pa.table({"id": [3], "amount": [33.0], "_acid_op": ["U"], "_acid_seq": pa.array([0], pa.int64())})
    add(table, old, {"dt": "a"}, operation="update")
    assert [(r["id"], r["dt"], r["amount"]) for r in rows(table.scan())] == [
        (1, "a", 10.0),
        (1, "b", 9.0),
        (3, "a", 3.0),
    ]
    # a filter on a non-key column applies to the merged row, never to an older version of it
    assert [r["id"] for r in rows(table.scan(where="amount = 1.0"))] == []
    # columns that leave the key out: the merge still groups by it, and it is not returned
    assert sorted(r["amount"] for r in table.scan(columns=["amount"]).to_arrow().to_pylist()) == [3.0, 9.0, 10.0]
    assert table.scan(where="amount > 9.5", columns=["dt"]).to_arrow().to_pylist() == [{"dt": "a"}]
    assert [(r["id"], r["amount"]) for r in rows(table.scan(version=1))] == [(1, 1.0), (2, 2.0), (3, 3.0)]


def test_a_partition_value_is_one_value_however_it_was_given(catalog: Catalog) -> None:
    """2026, "2026" and 2026.0 of an INT partition column are one partition: the merge groups a key's rows
    by it (and conflict detection compares it), so the log spells it one way."""
    table = catalog.create_table(
        "s.years", "id BIGINT NOT NULL, amount DOUBLE, year INT", primary_key=["id"], partition_by=["year"]
    )
    for amount, year in [(10.0, 2026), (11.0, "2026"), (12.0, 2026.0)]:
        add(table, pa.table({"id": [1], "amount": [amount]}), {"year": year})
    assert [f.partition for f in table.snapshot().files] == [{"year": 2026}] * 3
    assert all(type(f.partition["year"]) is int for f in table.snapshot().files)
    assert table.scan().to_arrow().to_pylist() == [{"id": 1, "amount": 12.0, "year": 2026}]
    for bad in ("x", 2026.5, True):
        with pytest.raises(InvalidArgumentError, match=r"add_files\(\): .* partition value .* for column year \(INT\)"):
            add(table, pa.table({"id": [2], "amount": [1.0]}), {"year": bad})


def test_to_batches_streams_and_the_engines_get_the_same_rows(sales: Table) -> None:
    reader = sales.scan(where="id > 1").to_batches()
    assert isinstance(reader, pa.RecordBatchReader)
    batches = list(reader)
    assert max(b.num_rows for b in batches) <= 2  # no batch holds more than one file's rows
    assert sorted(r["id"] for b in batches for r in b.to_pylist()) == [2, 3, 4, 5]
    frame = sales.scan(columns=["id", "dt"]).to_pandas()
    assert sorted(frame["id"].tolist()) == [1, 2, 3, 4, 5]
    assert isinstance(sales.scan().to_dataset(), ds.FileSystemDataset)  # lazy: engines push their filters down
    assert sales.scan(where="amount > 25").to_dataset().to_table().num_rows == 3


def test_polars_and_duckdb_read_the_rows(sales: Table) -> None:
    polars = pytest.importorskip("polars")
    duckdb = pytest.importorskip("duckdb")
    frame = sales.scan(where="dt IS NOT NULL").to_polars()
    assert isinstance(frame, polars.DataFrame)
    assert sorted(frame["id"].to_list()) == [1, 2, 5]
    connection = duckdb.connect()
    sales.scan().to_duckdb(connection, "sales")
    assert connection.sql("SELECT count(*), sum(amount) FROM sales WHERE dt IS NULL").fetchall() == [(2, 70.0)]


def test_a_missing_engine_is_named(sales: Table, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "polars", None)  # what `import polars` meets where it is not installed
    with pytest.raises(ModuleNotFoundError, match=r"to_polars\(\) needs polars.*acidtables\[polars\]"):
        sales.scan().to_polars()


def test_int96_timestamps_spark_writes_read_at_any_date(catalog: Catalog) -> None:
    """Spark writes TIMESTAMP as INT96 by default; read as nanoseconds, 9999-12-31 would overflow."""
    from datetime import UTC, datetime

    table = catalog.create_table("s.times", "id BIGINT, at TIMESTAMP")
    moments = [datetime(1, 1, 1, tzinfo=UTC), datetime(9999, 12, 31, tzinfo=UTC)]
    with table.begin("insert_into") as tx:
        path = Path(tx.staging_dir) / "part-0.parquet"
        path.parent.mkdir(parents=True)
        data = pa.table({"id": [1, 2], "at": pa.array(moments, pa.timestamp("us", tz="UTC"))})
        pq.write_table(data, path, use_deprecated_int96_timestamps=True)
        assert pq.ParquetFile(path).schema.column(1).physical_type == "INT96"
        tx.add_files([DataFile(str(path), {}, 2, path.stat().st_size)])
        tx.commit()
    assert [r["at"] for r in rows(table.scan())] == moments


@pytest.fixture
def odd(catalog: Catalog) -> Table:
    """NaN and NULL among doubles, decimals that differ past a double's precision, dates and text."""
    from decimal import Decimal

    table = catalog.create_table("s.odd", "id BIGINT, x DOUBLE, d DECIMAL(20,18), day DATE, s STRING")
    add(
        table,
        pa.table(
            {
                "id": [1, 2, 3],
                "x": [1.0, float("nan"), None],
                "d": pa.array([Decimal("0.100000000000000001"), Decimal("0.1"), None], pa.decimal128(20, 18)),
                "day": [date(2026, 1, 1), date(2026, 1, 2), None],
                "s": ["a", "b", None],
            }
        ),
    )
    return table


@pytest.mark.parametrize(
    ("where", "expected_ids"),
    [
        ("x > 0", [1, 2]),  # NaN sorts above every number in Spark
        ("x >= 1", [1, 2]),
        ("x < 5", [1]),
        ("x = 'NaN'", [2]),  # and equals NaN
        ("x != 1", [2]),
        ("d = 0.1", [2]),  # a decimal literal compares exactly with a DECIMAL column
        ("d > 0.1", [1]),
        ("x = 99999999999999999999", []),  # past BIGINT: a DECIMAL literal, not an overflow
        ("d < 1", [1, 2]),  # an integer beside a DECIMAL column is a DECIMAL(n, 0): exact, no precision error
        ("d BETWEEN 0 AND 1", [1, 2]),
        ("d + 1 > 1", [1, 2]),
        ("d = 0", []),
        ("x = 1e0", [1]),
    ],
)
def test_where_follows_sparks_nan_and_decimal_rules(odd: Table, where: str, expected_ids: list[int]) -> None:
    assert [r["id"] for r in rows(odd.scan(where=where))] == expected_ids
    # what engines get (DuckDB, Polars) too: Arrow's pruning by float statistics would lose the NaN row
    assert sorted(odd.scan(where=where).to_dataset().to_table()["id"].to_pylist()) == expected_ids


@pytest.mark.parametrize(
    ("where", "expected_ids"),
    [
        ("x = y", [1]),  # NaN equals NaN
        ("x <=> y", [1]),
        ("x != y", [2, 3]),  # a NULL side is NULL
        ("x > y", [3]),  # NaN is above every number
        ("x >= y", [1, 3]),
        ("x < y", [2]),
        ("x <= y", [1, 2]),
        ("id < x", [1, 3]),  # an integer column beside a double one: NaN is above it
        ("id = CAST(1.5 AS INT)", [1]),  # Spark's cast truncates
    ],
)
def test_two_columns_compare_in_sparks_nan_order(catalog: Catalog, where: str, expected_ids: list[int]) -> None:
    table = catalog.create_table("s.pairs", "id BIGINT, x DOUBLE, y DOUBLE")
    nan = float("nan")
    add(table, pa.table({"id": [1, 2, 3, 4], "x": [nan, 1.0, nan, None], "y": [nan, 2.0, 5.0, nan]}))
    assert [r["id"] for r in rows(table.scan(where=where))] == expected_ids


def test_a_nan_inside_a_struct_is_never_pruned_away(catalog: Catalog) -> None:
    table = catalog.create_table("s.nested", "id BIGINT, s STRUCT<v: DOUBLE>")
    add(table, pa.table({"id": [1, 2], "s": [{"v": 1.0}, {"v": float("nan")}]}))
    for where in ("s.v != 1", "s.v > 100"):
        assert [r["id"] for r in rows(table.scan(where=where))] == [2], where
        assert table.scan(where=where).to_dataset().to_table()["id"].to_pylist() == [2], where


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("day >= TIMESTAMP '2026-01-01 10:00:00'", "a date compared with a timestamp"),
        ("s = 1", "a text compared with a number"),
        ("s = 0.1D", "a text compared with a number"),  # a typed literal is a number too
        ("s > -0.1F", "a text compared with a number"),
        ("s = DATE '2026-01-01'", "a text compared with a date"),
        ("id + 9223372036854775807 > 0", "overflows on the table's rows"),
        ("id = TRUE", "a number compared with a boolean"),
        ("id = CAST('x' AS BIGINT)", "the literal 'x' is not a number"),
    ],
)
def test_comparisons_spark_casts_differently_are_refused_by_name(odd: Table, where: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=r"s\.odd") as caught:
        odd.scan(where=where).to_arrow()
    assert message in str(caught.value)
