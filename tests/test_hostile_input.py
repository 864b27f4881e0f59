"""Hostile input at the public entry points, as hypothesis properties (issue 10, item 5).

Each property feeds one entry point what a careless or unlucky user could give it (random DDL, partition
values full of `/`, `=`, `%`, quotes and backslashes, SQL that Spark and core's parser read differently,
arguments of every type, argv lists, damaged etcd records and checkpoint files) and checks the one
promise: a named error (a subclass of AcidTablesError, saying what was wrong) or the right answer, judged
by an independent oracle (Spark's own evaluation over the rows in memory, the log, a fresh process's
view). Never another exception type, a commit from a refused statement, a damaged neighbour table or a
wrong row. Examples found on the way are pinned with @example, so they run on every push.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from tests.helpers.tables import catalog_with, etcd_client
from tests.spark_jobs import next_name

from acidtables import Catalog, Table, Transaction
from acidtables.cli.main import main
from acidtables.core import parse_predicate, parse_schema
from acidtables.core.coordination.embedded import EmbeddedEtcd
from acidtables.core.log.records import DataFile
from acidtables.core.schema.types import PRIMITIVE_TYPES
from acidtables.core.storage.storage import HIVE_NULL
from acidtables.errors import (
    AcidTablesError,
    CorruptMetadataError,
    InvalidArgumentError,
    VersionNotFoundError,
)
from acidtables.spark import SparkTable


def examples(count: int) -> settings:
    """`count` examples, no deadline (a Spark job's time varies with what runs beside it), and the
    test's fixtures shared by its examples: each example makes its own tables under fresh names.
    Core-only properties get hundreds; Spark-backed ones about ten, so the file runs in about a minute."""
    return settings(max_examples=count, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def fresh(catalog: Catalog) -> Catalog:
    """Another process's view of the same etcd and warehouse: nothing cached from before."""
    return Catalog(catalog.settings)


@pytest.fixture
def raw(etcd_server: EmbeddedEtcd) -> Any:
    host, port = etcd_server.endpoint.removeprefix("http://").split(":")
    return etcd_client(host, int(port))


# --- schema strings ----------------------------------------------------------------------------------

_ODD_TYPES = [
    "decimal(10, 2)",
    "DECIMAL(38,38)",
    "DECIMAL(0,0)",
    "DECIMAL(39,1)",
    "DECIMAL(5,6)",
    "DECIMAL(\u0661\u0660,\u0662)",  # Arabic-Indic digits: \d matches them, Spark does not
    "CHAR(3)",
    "varchar(0)",
    "VARCHAR(\u0663)",
    "VOID",
    "INTERVAL",
    "TEXT",
    "NUMBER",
    "timestamp_ltz",
    "string not null",
    "BIGINT NOT  NULL",
    "",
    "<",
    "ARRAY<>",
    "MAP<STRING>",
    "STRUCT<>",
]
_COLUMN_NAMES = st.one_of(
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True),
    st.sampled_from(["id", "ID", "`id`", "`dt`", "_acid_op", "_ACID_x", "1a", "a-b", "é", "`a b`", "`", "a\n"]),
)


def _struct(fields: list[tuple[str, str]]) -> str:
    return "STRUCT<" + ", ".join(f"{name}: {type_}" for name, type_ in fields) + ">"


_TYPES = st.recursive(
    st.one_of(
        st.sampled_from([*PRIMITIVE_TYPES, *(t.lower() for t in PRIMITIVE_TYPES), *_ODD_TYPES]),
        st.builds(lambda p, s: f"DECIMAL({p},{s})", st.integers(-1, 40), st.integers(-1, 40)),
    ),
    lambda inner: st.one_of(
        st.builds(lambda t: f"ARRAY<{t}>", inner),
        st.builds(lambda k, v: f"MAP<{k}, {v}>", inner, inner),
        st.builds(_struct, st.lists(st.tuples(_COLUMN_NAMES, inner), min_size=1, max_size=3)),
    ),
    max_leaves=4,
)
_COLUMN_DDL = st.builds(
    lambda name, space, type_, not_null: f"{name}{space}{type_}{' NOT NULL' if not_null else ''}",
    _COLUMN_NAMES,
    st.sampled_from([" ", "  ", "\t", "\n"]),
    _TYPES,
    st.booleans(),
)
SCHEMAS = st.one_of(
    st.lists(_COLUMN_DDL, min_size=0, max_size=4).map(", ".join),
    st.lists(_COLUMN_DDL, min_size=1, max_size=3).map(lambda cs: ", ".join(cs) + ", "),  # an empty last column
    st.text(max_size=40),
    st.from_regex(r"[ -~]{0,40}", fullmatch=True),
)


@examples(150)
@given(schema=SCHEMAS)
@example(schema="amount DECIMAL(\u0661\u0660,\u0662)")
@example(schema="tags STRUCT<`a\n`: INT>")
def test_a_schema_string_is_refused_by_name_or_round_trips_exactly(
    spark: SparkSession, catalog: Catalog, schema: str
) -> None:
    """Accepted means: every column a plain identifier with a type in its one spelling, the same columns
    read back by another process, the spelling a fixed point of the parser, and a type Spark can build
    (a table accepted here but unreadable there would fail at its first write)."""
    name = next_name()
    try:
        table = catalog.create_table(name, schema=schema)
    except InvalidArgumentError as exc:
        assert str(exc).startswith("create_table(): "), exc
        assert catalog.list_tables(name.split(".")[0]).count(name) == 0
        return
    columns = table.metadata.columns
    for column in columns:
        assert IDENTIFIER.fullmatch(column.name), column
        for field in re.findall(r"(?:<|, )([^<>:,]+): ", column.type):
            assert IDENTIFIER.fullmatch(field), f"field {field!r} of {column}"
        assert column.type.isascii(), column
    assert parse_schema(table.metadata.schema_ddl, method="create_table") == columns
    with fresh(catalog) as other:
        assert other.table(name).metadata.columns == columns
    from pyspark.sql.types import _parse_datatype_string

    for column in columns:
        _parse_datatype_string(column.type)  # Spark's parser, the one every write and read uses


# --- table names ---------------------------------------------------------------------------------------


@examples(100)
@given(
    name=st.one_of(
        st.from_regex(r"([A-Za-z_]\w{0,5}\.)?[A-Za-z_]\w{0,5}\n?", fullmatch=True),
        st.text(alphabet=st.characters(codec="utf-8"), max_size=12),
    )
)
@example(name="sales.orders\n")
def test_an_accepted_table_name_is_a_plain_identifier_found_under_its_name(catalog: Catalog, name: str) -> None:
    """test_input_errors checks that nothing but InvalidArgumentError escapes; this checks what is accepted:
    the name a table is listed and found under is the one given, made only of identifier characters."""
    try:
        table = catalog.create_table(name, schema="id BIGINT")
    except InvalidArgumentError as exc:
        assert "create_table()" in str(exc)
        return
    namespace, short = table.name.split(".")
    assert IDENTIFIER.fullmatch(namespace) and IDENTIFIER.fullmatch(short), table.name
    assert table.name == (name if "." in name else f"default.{name}")
    assert catalog.table(name).table_id == table.table_id
    assert table.name in catalog.list_tables(namespace)
    catalog.drop_table(table.name, delete_data=True)


# --- partition values through the core ----------------------------------------------------------------

#: values that mean something to a path, a URL decoder, Hive, SQL or JSON
NASTY = [
    "a",
    "",
    " ",
    " a ",
    "..",
    ".",
    "/",
    "a/b",
    "../x",
    "=",
    "a=b",
    "%",
    "%25",
    "%2F",
    "a%b",
    HIVE_NULL,
    "'",
    "it''s",
    "\\",
    "a\\'b",
    "\\n",
    "\n",
    "\t",
    "\x00",
    "\x7f",
    "é",
    "日本",
    "😀",
    "NULL",
    "null",
    '"',
    "{}",
    "[x]",
    "*",
    "?",
]
PARTITION_VALUES = st.one_of(
    st.sampled_from(NASTY),
    st.text(max_size=12),
    st.text(alphabet=st.sampled_from("/=%'\\. é日\n"), min_size=1, max_size=8),
    st.text(alphabet="é", min_size=100, max_size=200),  # 200-400 bytes: too long for a directory
)


def spark_literal(value: str | None) -> str:
    """`value` as a Spark SQL string literal (Spark reads backslash escapes in '...')."""
    if value is None:
        return "NULL"
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def stage_id_file(tx: Transaction, partition: dict[str, str | None], rows: int) -> DataFile:
    """A Parquet file of `rows` ids (a partition column lives in the log, not in the file, as Spark writes)."""
    os.makedirs(tx.staging_dir, exist_ok=True)
    n = len(os.listdir(tx.staging_dir))
    path = os.path.join(tx.staging_dir, f"part-{n:05d}.parquet")
    with open(path, "xb") as out:
        pq.write_table(pa.table({"id": pa.array(range(rows), pa.int64())}), out)
    return DataFile(path=path, partition=partition, rows=rows, size_bytes=os.path.getsize(path))


def checkpointing_every_two(catalog: Catalog) -> Catalog:
    """A second catalog on the same etcd and warehouse that writes a checkpoint every 2 versions."""
    return catalog_with(catalog, checkpoint_interval=2)


def neighbour(catalog: Catalog) -> tuple[Table, int, set[str]]:
    """A second table of the same catalog, with one commit: what it must still hold afterwards."""
    table = catalog.create_table(next_name(), schema="id BIGINT, dt STRING", partition_by=["dt"])
    with table.begin("insert_into") as tx:
        tx.add_files([stage_id_file(tx, {"dt": "n"}, 2)])
        tx.commit()
    return table, table.version, set(table.snapshot().files_by_path)


def assert_neighbour_untouched(table: Table, version: int, files: set[str]) -> None:
    assert table.version == version
    assert set(table.snapshot().files_by_path) == files
    assert table.fsck().ok


@examples(60)
@given(values=st.lists(st.one_of(st.none(), PARTITION_VALUES), min_size=1, max_size=4, unique=True))
@example(values=["\ud800", "b"])  # a lone surrogate is no UTF-8, yet JSON's \u escape keeps it exactly
def test_core_keeps_any_partition_value_exactly_or_refuses_it_by_name(
    catalog: Catalog, values: list[str | None]
) -> None:
    """Through the transaction core (no Spark): each value is committed and read back exactly, by this
    process, another one and from a checkpoint; a predicate naming the value never prunes its file; fsck
    passes; the neighbour keeps its state."""
    other_table, other_version, other_files = neighbour(catalog)
    checkpointing = checkpointing_every_two(catalog)
    try:
        table = checkpointing.create_table(next_name(), schema="id BIGINT, dt STRING", partition_by=["dt"])
        refused: list[str | None] = []
        for value in values:
            tx = table.begin("insert_into")
            try:
                tx.add_files([stage_id_file(tx, {"dt": value}, 1 + len(value or ""))])
                tx.commit()
            except InvalidArgumentError as exc:
                assert "dt" in str(exc) or repr(value) in str(exc), exc
                refused.append(value)
                tx.abort()
        kept = [v for v in values if v not in refused]
        assert table.version == len(kept)
        with fresh(catalog) as other:
            views = [table.snapshot(), other.table(table.name).snapshot()]
        for snapshot in views:
            assert sorted(map(repr, (f.partition["dt"] for f in snapshot.files))) == sorted(map(repr, kept))
            assert {f.partition["dt"]: f.rows for f in snapshot.files} == {v: 1 + len(v or "") for v in kept}
        for value in kept:
            predicate = "dt IS NULL" if value is None else f"dt = {spark_literal(value)}"
            found = table.snapshot().prune(parse_predicate(predicate, table.metadata.column_types))
            assert value in [f.partition["dt"] for f in found], f"{predicate!r} pruned the file of {value!r}"
        report = table.fsck()
        assert report.ok, [c.problems for c in report.checks]
        assert_neighbour_untouched(other_table, other_version, other_files)
    finally:
        checkpointing.close()


# --- history, changes and time travel arguments --------------------------------------------------------

ANY_ARGUMENT = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(min_value=-3, max_value=8),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1.0, 2.5, -0.0, 1e300]),
    st.text(max_size=12),
    st.sampled_from(["1", "3", "-1", "now", "2026-11-22", "yesterday", "0x10"]),
    st.binary(max_size=4),
    st.lists(st.integers(), max_size=2),
    st.datetimes(timezones=st.one_of(st.none(), st.timezones())),
    st.timedeltas(),
)


@pytest.fixture
def three_commits(catalog: Catalog) -> Table:
    table = catalog.create_table(next_name(), schema="id BIGINT, dt STRING", partition_by=["dt"])
    for dt in ("a", "b", "c"):
        with table.begin("insert_into") as tx:
            tx.add_files([stage_id_file(tx, {"dt": dt}, 1)])
            tx.commit()
    return table


def _is_version(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _outcome(call: Callable[[], Any]) -> Any:
    """The result, or the named error: anything else fails the property with its type."""
    try:
        return call()
    except (InvalidArgumentError, VersionNotFoundError) as exc:
        return exc
    except Exception as exc:
        pytest.fail(f"raised {type(exc).__name__} instead of a named error: {exc}")


@examples(150)
@given(version=ANY_ARGUMENT)
def test_time_travel_by_version_answers_exactly_or_names_the_argument(three_commits: Table, version: Any) -> None:
    got = _outcome(lambda: three_commits.snapshot(version=version))
    if version is None:
        assert got.version == 3
    elif _is_version(version) and 0 <= version <= 3:
        assert got.version == version and len(got.files) == version
    elif _is_version(version) and version > 3:
        assert isinstance(got, VersionNotFoundError) and str(version) in str(got)
    else:
        assert isinstance(got, InvalidArgumentError) and "version" in str(got)


def _expected_at(table: Table, time_us: int) -> int | None:
    """The newest data commit at or before `time_us`, from the history (not the time index); None for a
    time still to come, which is refused (Delta's DELTA_TIMESTAMP_GREATER_THAN_COMMIT)."""
    if time_us > time.time_ns() // 1000:
        return None
    found = [h.version for h in table.history() if h.time_version and _us(h.time_version) <= time_us]
    return max(found) if found else None


def _us(when: datetime) -> int:
    return (when - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


def _commit_times(table: Table) -> st.SearchStrategy[Any]:
    """Exactly the commit times, a µs either side, in every spelling time travel takes."""
    times = sorted(h.time_version for h in table.history() if h.time_version)
    moments = st.sampled_from(times).flatmap(
        lambda t: st.sampled_from([t, t - timedelta(microseconds=1), t + timedelta(microseconds=1)])
    )
    zone = st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)), timezone(-timedelta(hours=11))])
    return st.one_of(
        moments,
        st.builds(lambda t, z: t.astimezone(z), moments, zone),
        moments.map(lambda t: t.replace(tzinfo=None)),  # naive means UTC
        st.builds(lambda t, z: t.astimezone(z).isoformat(), moments, zone),
        moments.map(lambda t: t.isoformat().replace("+00:00", "Z")),
        moments.map(lambda t: t.replace(tzinfo=None).isoformat(sep=" ")),
    )


@examples(150)
@given(data=st.data())
def test_time_travel_by_time_answers_exactly_or_names_the_argument(three_commits: Table, data: st.DataObject) -> None:
    """A commit's own time finds that commit, a µs before it the one before, in any zone or spelling;
    anything that is not a time is refused by name."""
    timestamp = data.draw(st.one_of(_commit_times(three_commits), ANY_ARGUMENT), label="timestamp")
    if timestamp is None:
        return  # no time given: the current version, which the version property covers
    got = _outcome(lambda: three_commits.snapshot(timestamp=timestamp))
    when = _as_time(timestamp)
    if when is None:
        assert isinstance(got, InvalidArgumentError) and "timestamp" in str(got), got
        return
    expected = _expected_at(three_commits, when)
    if expected is None:
        assert isinstance(got, VersionNotFoundError), got
    else:
        assert not isinstance(got, Exception), got
        assert got.version == expected


def _as_time(value: Any) -> int | None:
    """What a time argument means in µs, by the documented rules; None where it means no time."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        if not math.isfinite(value):
            return None
        try:
            datetime.fromtimestamp(value, tz=UTC)
        except (OverflowError, OSError, ValueError):
            return None
        return int(value * 1_000_000)
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            return None
    if isinstance(value, datetime):
        return _us(value if value.tzinfo else value.replace(tzinfo=UTC))
    return None


@examples(100)
@given(limit=ANY_ARGUMENT)
def test_history_limit_answers_exactly_or_names_the_argument(three_commits: Table, limit: Any) -> None:
    got = _outcome(lambda: three_commits.history(limit))
    if limit is None:
        assert [h.version for h in got] == [3, 2, 1, 0]
    elif _is_version(limit) and limit >= 1:
        assert [h.version for h in got] == [3, 2, 1, 0][:limit]
    else:
        assert isinstance(got, InvalidArgumentError) and "limit" in str(got)


@examples(150)
@given(start=ANY_ARGUMENT, end=ANY_ARGUMENT)
@example(start=0, end=0)
def test_changes_by_version_answer_exactly_or_name_the_argument(three_commits: Table, start: Any, end: Any) -> None:
    got = _outcome(lambda: three_commits.changes(start, end))
    first = 1 if start is None else start
    last = 3 if end is None else end
    if not (_is_version(first) and _is_version(last)) or first < 0 or last < 0:
        assert isinstance(got, InvalidArgumentError) and "_version" in str(got), got
    elif first > last:
        assert isinstance(got, InvalidArgumentError) and "after" in str(got), got
    elif last > 3:
        assert isinstance(got, VersionNotFoundError), got
    else:
        # version 0 creates the table and adds no file: it is never a change
        assert [c.version for c in got] == [v for v in range(max(first, 1), last + 1)]


@examples(150)
@given(start=ANY_ARGUMENT, end=ANY_ARGUMENT)
def test_changes_by_time_answer_exactly_or_name_the_argument(three_commits: Table, start: Any, end: Any) -> None:
    if start is None and end is None:
        return  # a version range then
    got = _outcome(lambda: three_commits.changes(start_time=start, end_time=end))
    start_us = 0 if start is None else _as_time(start)
    end_us = 2**62 if end is None else _as_time(end)
    if start_us is None or end_us is None:
        assert isinstance(got, InvalidArgumentError) and "_time" in str(got), got
    elif start_us > end_us:
        assert isinstance(got, InvalidArgumentError) and "after" in str(got), got
    else:
        times = {h.version: _us(h.time_version) for h in three_commits.history() if h.time_version}
        assert [c.version for c in got] == sorted(v for v, t in times.items() if start_us <= t <= end_us)


# --- partition values through Spark -------------------------------------------------------------------

PV_SCHEMA = "id BIGINT, dt STRING"


def normalized(rows: Iterator[Any] | list[Any]) -> list[str]:
    """Rows as sortable, comparable text: NaN equals NaN, None sorts, -0.0 stays -0.0."""
    return sorted(repr(tuple(row)) for row in rows)


def refusals(values: Sequence[str | None]) -> list[str]:
    """What a write of these partition values must be refused for, if anything (test_input_errors and
    docs/spark.md: '' and Hive's NULL spelling read back as NULL; a directory name holds 255 bytes). Values
    with several faults may be refused for any one of them: the writer names the first it meets."""
    reasons = []
    if any(v in ("", HIVE_NULL) for v in values):
        reasons.append("NULL")
    if any(v is not None and len(f"dt={v}".encode()) > 255 for v in values):
        reasons.append("too long for a directory name")
    if any(v is not None and "\x00" in v for v in values):
        reasons.append("NUL")  # Spark escapes every other control character in a directory name, not this one
    return reasons


@examples(8)
@given(values=st.lists(st.one_of(st.none(), PARTITION_VALUES), min_size=1, max_size=3, unique=True))
@example(values=["a\\b", "it's", None])
@example(values=[" a ", "..", "%2F/="])
@example(values=["\x00"])  # found: Spark leaves NUL unescaped, and Hadoop's mkdirs failed raw
@example(values=["", "\x00"])  # found: two faults at once; the writer names the one it meets first
def test_spark_writes_and_reads_any_partition_value_exactly_or_refuses_it_by_name(
    spark: SparkSession, catalog: Catalog, values: list[str | None]
) -> None:
    """Through Spark's writer (Hive-style directories, escaped as Spark escapes): the rows come back with
    the values written, by a plain read and by a predicate naming the value; an overwrite and a truncate
    of one partition leave the others alone; fsck passes; the neighbour keeps its state."""
    other_table, other_version, other_files = neighbour(catalog)
    t = SparkTable(spark, catalog.create_table(next_name(), schema=PV_SCHEMA, partition_by=["dt"]))
    rows = [(i, v) for i, v in enumerate(values)]
    whys = refusals(values)
    try:
        t.insert_into(spark.createDataFrame(rows, PV_SCHEMA))
    except InvalidArgumentError as exc:
        assert any(why in str(exc) for why in whys) and "dt" in str(exc), exc
        assert t.table.version == 0
        assert_neighbour_untouched(other_table, other_version, other_files)
        return
    assert not whys, f"accepted {values!r}, which must be refused: {', '.join(whys)}"
    assert normalized(t.read().collect()) == normalized(rows)
    assert sorted(map(repr, (f.partition["dt"] for f in t.table.snapshot().files))) == sorted(map(repr, values))
    # read one partition by its value, replace it, then empty another: the rest stays as written
    first = values[0]
    where = "dt IS NULL" if first is None else f"dt = {spark_literal(first)}"
    assert normalized(t.read(where=where).collect()) == normalized([rows[0]]), where
    t.insert_overwrite(spark.createDataFrame([(100,)], "id BIGINT"), partition={"dt": first})
    expected = [(100, first), *rows[1:]]
    assert normalized(t.read().collect()) == normalized(expected)
    last = values[-1]
    t.truncate(partition={"dt": last})
    expected = [r for r in expected if r[1] != last]
    assert normalized(t.read().collect()) == normalized(expected)
    report = t.table.fsck()
    assert report.ok, [c.problems for c in report.checks]
    assert_neighbour_untouched(other_table, other_version, other_files)


# --- SQL predicates, SET expressions and merge conditions ----------------------------------------------

SCHEMA = "id BIGINT, dt STRING, amount DOUBLE, day DATE"
_NAN, _INF = float("nan"), float("inf")
_D1, _D2 = datetime(2026, 11, 1).date(), datetime(2026, 11, 2).date()
#: written by three tasks, so files differ in partition and in statistics; NaN, infinities, -0.0, NULLs
#: and partition values with a quote, a backslash and spaces among them
BATCHES: list[list[tuple[Any, ...]]] = [
    [(1, "a", 1.0, _D1), (2, "a", -0.0, _D2), (3, "it's", _NAN, None), (4, None, 5.0, _D1)],
    [(5, "b\\c", -_INF, _D2), (6, " a ", None, _D1), (7, "a", 2.5, None), (8, "b\\c", 100.0, _D1)],
    [(9, "2026-11-1", _INF, _D2), (10, "a", 0.0, _D1), (11, None, None, None), (12, "it's", -3.0, _D2)],
]
ROWS = [row for batch in BATCHES for row in batch]
DT_VALUES = sorted({r[1] for r in ROWS if r[1] is not None})


def predicate_table(spark: SparkSession, catalog: Catalog, **options: Any) -> SparkTable:
    """ROWS in one write of three tasks (one per batch), so files differ in partition and statistics."""
    t = SparkTable(spark, catalog.create_table(next_name(), schema=SCHEMA, partition_by=["dt"], **options))
    t.insert_into(spark.createDataFrame(spark.sparkContext.parallelize(ROWS, len(BATCHES)), SCHEMA))
    return t


def _literals(column: str) -> st.SearchStrategy[str]:
    common = st.sampled_from(["NULL", "1", "'1'", "1.5", "TRUE"])
    by_column = {
        "id": st.one_of(st.integers(-1, 13).map(str), st.sampled_from(["1e1", "-1", "9223372036854775807", "3L"])),
        "dt": st.one_of(
            st.sampled_from(DT_VALUES).map(spark_literal),
            st.sampled_from(
                ["'a'", "'it''s'", "'b\\\\c'", "'b\\c'", '"a"', "'A'", "' a'", "DATE '2026-11-01'", "'2026-11-1'"]
            ),
        ),
        "amount": st.sampled_from(["0", "-0.0", "2.5", "1e308", "-1", "double('NaN')", "double('-Infinity')", "100"]),
        "day": st.sampled_from(
            [
                "DATE '2026-11-01'",
                "'2026-11-01'",
                "'2026-11-1'",
                "'2026-11-01 10:00'",
                "DATE '2026-11-02'",
                "'2026-11-02'",
            ]
        ),
    }
    return st.one_of(by_column[column], common)


def _column_atom(column: str) -> st.SearchStrategy[str]:
    lit = _literals(column)
    return st.one_of(
        st.builds(
            lambda op, v: f"{column} {op} {v}", st.sampled_from(["=", "==", "!=", "<>", "<", "<=", ">", ">="]), lit
        ),
        st.builds(lambda v, op: f"{v} {op} {column}", lit, st.sampled_from(["=", "<", ">="])),
        st.sampled_from([f"{column} IS NULL", f"{column} IS NOT NULL"]),
        st.builds(
            lambda n, vs: f"{column} {n}IN ({', '.join(vs)})",
            st.sampled_from(["", "NOT "]),
            st.lists(lit, min_size=1, max_size=3),
        ),
        st.builds(lambda n, lo, hi: f"{column} {n}BETWEEN {lo} AND {hi}", st.sampled_from(["", "NOT "]), lit, lit),
    )


#: conditions core's parser does not read (it must then read the whole table), comments, and errors
_OPAQUE = [
    "id % 2 = 0",
    "length(dt) > 1",
    "dt LIKE 'a%'",
    "upper(dt) = 'A'",
    "amount + 1 > 2",
    "isnan(amount)",
    "coalesce(dt, 'x') = 'x'",
    "CASE WHEN id > 3 AND dt = 'a' THEN false ELSE true END",
    '"a" = dt',
    "dt = 'a' -- AND dt = 'b'\n",
    "id > 2 -- AND dt = 'b'",
    "/* AND dt = 'b' */ id > 2",
    "TRUE",
    "FALSE",
    "NULL",
    "dt = 'x\\' OR dt = '",
    "dt = 'a' 'b'",
    "nope = 1",
    "id =",
    "(id = 1",
    "dt = 'unterminated",
    "id = 1 AND",
    "sum(amount) > 0",
    "amount",
    "",
    "t.id = 1",
]
_ATOMS = st.one_of(*(_column_atom(c) for c in ("id", "dt", "amount", "day")), st.sampled_from(_OPAQUE))
PREDICATES = st.one_of(
    st.recursive(
        _ATOMS,
        lambda inner: st.one_of(
            st.builds(lambda a, op, b: f"{a} {op} {b}", inner, st.sampled_from(["AND", "OR", "and", "or"]), inner),
            inner.map(lambda a: f"NOT {a}"),
            inner.map(lambda a: f"({a})"),
        ),
        max_leaves=4,
    ),
    st.text(max_size=20),
)


def oracle(spark: SparkSession, build: Callable[[DataFrame], DataFrame]) -> list[str] | Exception:
    """Spark's own answer over the rows in memory (no files, no pruning), or the error it gives."""
    try:
        return normalized(build(spark.createDataFrame(ROWS, SCHEMA)).collect())
    except Exception as exc:
        return exc


def row_by_row(spark: SparkSession, build: Callable[[DataFrame], DataFrame], *, kept: bool) -> list[str]:
    """Spark's answer one row at a time, for an expression Spark fails on for some rows (a cast under
    ANSI): a statement that succeeded never evaluated those rows (pruning skipped their files), so a row
    Spark fails on counts as untouched: kept as it was (`kept`, a delete or an update) or not returned
    (a read)."""
    out: list[Any] = []
    for row in ROWS:
        try:
            out += build(spark.createDataFrame([row], SCHEMA)).collect()
        except Exception:
            out += [row] if kept else []
    return normalized(out)


def _resolves(spark: SparkSession, build: Callable[[DataFrame], DataFrame]) -> bool:
    """Whether Spark accepts the expression at all (parse and analysis), before any row is evaluated."""
    try:
        build(spark.createDataFrame([], SCHEMA)).schema  # noqa: B018
    except Exception:
        return False
    return True


@pytest.fixture
def shared(spark: SparkSession, catalog: Catalog) -> SparkTable:
    """One table for the read-only property (hypothesis runs every example inside one test call)."""
    return predicate_table(spark, catalog)


@examples(40)
@given(where=PREDICATES)
@example(where="dt = 'b\\\\c'")
@example(where="id % 2 = 0 OR dt = 'a' AND dt = 'b'")
@example(where="day = '2026-11-1'")
@example(where="amount > 3")
@example(where="id > 2 -- AND dt = 'b'")
@example(where="dt = 1 AND dt IS NULL")  # Spark fails on dt 'a' (ANSI); pruning reads only NULL partitions
def test_read_where_gives_sparks_answer_or_a_named_error(spark: SparkSession, shared: SparkTable, where: str) -> None:
    """Pruning by partition values and statistics must never drop a row Spark's own filter keeps."""
    version = shared.table.version
    build = lambda df: df.filter(F.expr(where))  # noqa: E731
    expected = oracle(spark, build)
    try:
        got = normalized(shared.read(where=where).collect())
    except InvalidArgumentError as exc:
        assert not _resolves(spark, build), f"refused {where!r}, which Spark accepts: {exc}"
        assert "read()" in str(exc) and repr(where) in str(exc)
        return
    except AcidTablesError:
        raise
    except Exception as exc:
        assert isinstance(expected, Exception), f"{where!r}: {type(exc).__name__} where Spark answers"
        return  # a row Spark itself cannot evaluate fails the read when it is collected, as in Spark
    if isinstance(expected, Exception):  # Spark fails on some row, which pruning kept out of the read
        expected = row_by_row(spark, build, kept=False)
    assert got == expected, where
    assert shared.table.version == version


def test_a_nan_written_by_either_writer_is_found_by_a_predicate_spark_says_it_matches(
    spark: SparkSession, catalog: Catalog
) -> None:
    """NaN is above every number in Spark. Spark's Parquet writer makes it a file's max, pyarrow's (the
    data source's executors) leaves it out: neither file may be pruned by `amount > 3`, by core or by
    Spark's own Parquet filter pushdown (found by test_read_where_gives_sparks_answer_or_a_named_error)."""
    t = SparkTable(spark, catalog.create_table(next_name(), schema="id BIGINT, amount DOUBLE"))
    t.insert_into(spark.createDataFrame([(1, 1.0), (2, _NAN)], "id BIGINT, amount DOUBLE"))
    options = {
        "etcd.endpoints": ",".join(catalog.settings.etcd.endpoints),
        "etcd.prefix": catalog.settings.etcd.prefix,
        "warehouse": catalog.settings.warehouse,
    }
    rows = spark.createDataFrame([(3, 2.0), (4, _NAN)], "id BIGINT, amount DOUBLE").coalesce(1)
    rows.write.format("acidtables").options(**options).mode("append").save(t.name)
    assert sorted(r["id"] for r in t.read(where="amount > 3").collect()) == [2, 4]
    assert sorted(r["id"] for r in t.read(where="amount < 1.5").collect()) == [1]


def assert_refused_without_commit(t: SparkTable, version: int, exc: InvalidArgumentError, method: str) -> None:
    assert str(exc).startswith(f"{method}(): "), exc
    assert t.table.version == version, f"a refused {method} committed"
    assert t.table.in_flight() == []


_TABLE_KINDS = st.sampled_from([{}, {"row_level_concurrency": True}])


@examples(10)
@given(where=PREDICATES, options=_TABLE_KINDS)
@example(where="id % 2 = 0 OR dt = 'a' AND dt = 'b'", options={})
@example(where="cast(dt AS INT) = 1", options={})  # fails on a row, at run time (ANSI)
def test_delete_removes_exactly_the_rows_spark_matches_or_commits_nothing(
    spark: SparkSession, catalog: Catalog, where: str, options: dict[str, Any]
) -> None:
    """Copy-on-write and deletion vectors alike: the rows left are the ones Spark's own filter does not
    match (a file pruned wrongly would keep rows it should delete), or the statement is refused by name."""
    t = predicate_table(spark, catalog, **options)
    version = t.table.version
    build = lambda df: df.filter(~F.coalesce(F.expr(where), F.lit(False)))  # noqa: E731
    expected = oracle(spark, build)
    try:
        t.delete(where)
    except InvalidArgumentError as exc:
        assert isinstance(expected, Exception), f"refused {where!r}, which Spark evaluates: {exc}"
        assert_refused_without_commit(t, version, exc, "delete")
        return
    if isinstance(expected, Exception):  # Spark fails on some row, which pruning kept out of the delete
        assert _resolves(spark, build), f"{where!r} committed, but Spark refuses it: {expected}"
        expected = row_by_row(spark, build, kept=True)
    assert normalized(t.read().collect()) == expected, where
    assert t.table.fsck().ok


SET_EXPRESSIONS = st.one_of(
    st.sampled_from(
        [
            "0",
            "amount + 1",
            "id * 2",
            "-amount",
            "NULL",
            "'x'",  # not a number: Spark's cast fails on every updated row (ANSI)
            "'1.5'",
            "dt",
            "day",  # a DATE cannot be cast to DOUBLE
            "amount / 0",
            "raise_error('boom')",
            "sum(amount)",
            "nope + 1",
            "amount +",
            "",
            "id % 3",
            "CASE WHEN amount > 0 THEN 1 ELSE 2 END",
            "double('NaN')",
        ]
    ),
    st.text(max_size=10),
)


@examples(10)
@given(where=st.one_of(st.none(), PREDICATES), value=SET_EXPRESSIONS)
@example(where="id = 999", value="nope + 1")  # matches no row: still refused, the expression is wrong
@example(where="id = 1", value="'x'")
@example(where=None, value="sum(amount)")  # an aggregate resolves alone, not beside the other columns
def test_update_sets_exactly_what_spark_computes_or_commits_nothing(
    spark: SparkSession, catalog: Catalog, where: str | None, value: str
) -> None:
    """The value is resolved before any job (cast to the column's type, beside the other columns), and a
    row Spark cannot compute it for refuses the whole statement, by name, with nothing committed."""
    t = predicate_table(spark, catalog)
    version = t.table.version

    def build(df: DataFrame) -> DataFrame:
        matched = F.coalesce(F.expr(where), F.lit(False)) if where is not None else F.lit(True)
        updated = F.when(matched, F.expr(value).cast("double")).otherwise(F.col("amount"))
        return df.select("id", "dt", updated.alias("amount"), "day")

    expected = oracle(spark, build)
    try:
        t.update(where, {"amount": value})
    except InvalidArgumentError as exc:
        assert isinstance(expected, Exception), f"refused {where!r} SET {value!r}, which Spark evaluates: {exc}"
        assert_refused_without_commit(t, version, exc, "update")
        return
    if isinstance(expected, Exception):  # Spark fails on some row, which pruning kept out of the update
        assert _resolves(spark, build), f"{where!r} SET {value!r} committed, but Spark refuses it: {expected}"
        expected = row_by_row(spark, build, kept=True)
    assert normalized(t.read().collect()) == expected, (where, value)
    assert t.table.fsck().ok


_MERGE_ATOMS = st.sampled_from(
    [
        "t.id = s.id",
        "t.dt = s.dt",
        "t.dt = 'a'",
        "t.dt = 'b\\\\c'",
        "t.dt IS NULL",
        "s.amount > 50",
        "t.amount > 3",
        "s.id = 1",
        "t.id % 2 = 0",
        "t.day = '2026-11-1'",
        "t.id = s.id + 100",
        "s.nope = 1",
        "t.id =",
        "id = 1",  # ambiguous: both sides have id
        "TRUE",
    ]
)
MERGE_CONDITIONS = st.recursive(
    _MERGE_ATOMS,
    lambda inner: st.one_of(
        st.builds(lambda a, op, b: f"{a} {op} {b}", inner, st.sampled_from(["AND", "OR"]), inner),
        inner.map(lambda a: f"({a})"),
        inner.map(lambda a: f"NOT {a}"),
    ),
    max_leaves=3,
)
SOURCE_ROWS = [(1, "a", 10.0, _D1), (5, "b\\c", 60.0, _D2), (50, "z", 70.0, None)]
MERGE_VALUES = st.sampled_from(
    ["s.amount", "t.amount + s.amount", "s.day", "'x'", "s.nope", "s.amount /", "NULL", "s.dt", "sum(s.amount)"]
)


def merge_oracle(spark: SparkSession, condition: str, update_when: str | None, value: str) -> list[str] | Exception:
    """MERGE by its definition, from Spark's evaluation on every (target, source) pair: a target row
    matched once is updated to `value` where `update_when` holds, a target row matched twice is an
    error, a source row matched by no target row is inserted."""
    try:
        target = spark.createDataFrame([(i, *r) for i, r in enumerate(ROWS)], f"_ti INT, {SCHEMA}").alias("t")
        source = spark.createDataFrame([(i, *r) for i, r in enumerate(SOURCE_ROWS)], f"_si INT, {SCHEMA}").alias("s")
        update = F.coalesce(F.expr(update_when), F.lit(False)) if update_when else F.lit(True)
        matching = target.crossJoin(source).filter(F.coalesce(F.expr(condition), F.lit(False)))
        pairs = matching.select("t._ti", "s._si", update.alias("u"), F.expr(value).cast("double").alias("v")).collect()
    except Exception as exc:
        return exc
    by_target: dict[int, list[Any]] = {}
    for p in pairs:
        by_target.setdefault(p["_ti"], []).append(p)
    if any(len(found) > 1 for found in by_target.values()):
        return InvalidArgumentError("matched more than one source row")
    out = []
    for i, row in enumerate(ROWS):
        found = by_target.get(i)
        out.append((*row[:2], found[0]["v"], row[3]) if found and found[0]["u"] else row)
    matched_sources = {p["_si"] for p in pairs}
    out += [r for i, r in enumerate(SOURCE_ROWS) if i not in matched_sources]
    return normalized(out)


@examples(6)
@given(
    condition=MERGE_CONDITIONS,
    update_when=st.one_of(st.none(), st.sampled_from(["s.amount > 50", "t.dt = 'a'", "t.nope > 1"])),
    value=MERGE_VALUES,
)
@example(condition="s.id = 1 OR t.dt = 'a' AND t.dt = 'b'", update_when=None, value="s.amount")
@example(condition="t.id = s.id", update_when=None, value="s.day")  # a DATE cannot be a DOUBLE
@example(condition="t.id = s.id", update_when=None, value="s.dt")  # 'a' is not a number (ANSI)
def test_merge_gives_the_rows_its_definition_gives_or_commits_nothing(
    spark: SparkSession, catalog: Catalog, condition: str, update_when: str | None, value: str
) -> None:
    """The target files a merge reads are pruned by the part of its condition about the target alone;
    an OR (or anything else) that makes a conjunct not hold for every match must not narrow them."""
    t = predicate_table(spark, catalog)
    version = t.table.version
    expected = merge_oracle(spark, condition, update_when, value)
    source = spark.createDataFrame(SOURCE_ROWS, SCHEMA)
    merge = t.merge(source, condition).when_matched_update({"amount": value}, update_when)
    try:
        merge.when_not_matched_insert_all().execute()
    except InvalidArgumentError as exc:
        assert isinstance(expected, Exception), f"refused {condition!r}, which has an answer: {exc}"
        assert_refused_without_commit(t, version, exc, "merge")
        return
    assert not isinstance(expected, Exception), f"{condition!r} committed, but: {expected}"
    assert normalized(t.read().collect()) == expected, condition
    assert t.table.fsck().ok


# --- command-line arguments ----------------------------------------------------------------------------


@pytest.fixture
def cli_table(monkeypatch: pytest.MonkeyPatch, etcd_server: EmbeddedEtcd, catalog: Catalog) -> Table:
    """sales.orders, at version 3, for commands run the way users run them (Catalog.connect())."""
    monkeypatch.setenv("ACIDTABLES_ETCD_ENDPOINTS", etcd_server.endpoint)
    monkeypatch.setenv("ACIDTABLES_ETCD_PREFIX", catalog.settings.etcd.prefix)
    monkeypatch.setenv("ACIDTABLES_WAREHOUSE", catalog.settings.warehouse)
    table = catalog.create_table("sales.orders", schema="id BIGINT, dt STRING", partition_by=["dt"])
    for dt in ("a", "b", "c"):
        with table.begin("insert_into") as tx:
            tx.add_files([stage_id_file(tx, {"dt": dt}, 1)])
            tx.commit()
    return table


#: every command but the three that run until stopped (etcd, demo, operator); never --local, which
#: would start an etcd under the user's home (and argparse takes any prefix of it, so no "--l...")
_COMMANDS = st.sampled_from(["tables", "describe", "history", "expire", "vacuum", "fsck", "etcd-usage"])
_NAMES = st.sampled_from(["sales.orders", "sales.missing", "sales", "a b", "default.x", ".", "sales.orders\n"])
_ARGV_WORDS = st.one_of(
    _COMMANDS,
    _NAMES,
    st.sampled_from(["--json", "--verbose", "-v", "--limit", "--retain-versions", "--retain-duration", "--force"]),
    st.sampled_from(["--dry-run", "--help", "-h", "--nope", "-x", "--", "-", "--json=1", "--limit=0"]),
    st.sampled_from(["0", "1", "-1", "3", "99999999999999999999", "1.5", "1e3", "168h", "0s", "7d", "1h30m"]),
    st.sampled_from(["99999999999999d", "1e308", "nan", "inf", "-5h", "\u0663h", "", " ", "\x00"]),
    st.text(max_size=8).filter(lambda w: not w.startswith("--l")),
)
CLI_EXIT_CODES = {0, 1, 2, 3, 4}


@examples(300)
@given(
    argv=st.one_of(
        st.lists(_ARGV_WORDS, max_size=6),
        st.builds(lambda c, n, rest: [c, n, *rest], _COMMANDS, _NAMES, st.lists(_ARGV_WORDS, max_size=4)),
    )
)
@example(argv=["expire", "sales.orders", "--retain-duration", "99999999999999d"])
@example(argv=["vacuum", "sales.orders", "--retain-duration", "1e308", "--dry-run"])
@example(argv=["history", "sales.orders", "--limit", "99999999999999999999"])
def test_any_command_line_exits_with_a_documented_code_and_a_message(
    cli_table: Table, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """Exit codes 0..4 as the CLI documents them, a message on stderr for each failure, and never a
    traceback or an "unexpected error" (a raw exception of another type) unless --verbose asked."""
    code = main(argv)
    out, err = capsys.readouterr()
    assert code in CLI_EXIT_CODES, (argv, code, err)
    verbose = any(w in ("--verbose", "-v") or re.fullmatch(r"--v(e(r(b(o(se?)?)?)?)?)?", w) for w in argv)
    if code == 0:
        assert out.strip(), argv
        return
    assert err.strip(), f"{argv}: exit {code} without a message"
    assert "unexpected error" not in err, (argv, err)
    if not verbose:
        assert "Traceback" not in err, (argv, err)


# --- commit records damaged in etcd or in their commit file ---------------------------------------------

_JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=6)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=6,
)
_RECORD_KEYS = ["version", "txn_id", "operation", "read_version", "adds", "removes", "committed_at", "metadata"]


def _damage(data: st.DataObject, value: bytes, fields: Sequence[str] = _RECORD_KEYS) -> bytes:
    """One way a stored value goes bad: cut short, bytes flipped, replaced by JSON of another shape, or
    some of its `fields` dropped or given values of another type."""
    how = data.draw(st.sampled_from(["truncate", "flip", "json", "fields"]), label="how")
    # offsets are drawn independently of the value's length (txn ids and times make it vary from run
    # to run, and hypothesis replays draws) and then taken modulo it
    offset = st.integers(0, 2**16)
    if how == "truncate":
        return value[: data.draw(offset, label="cut at") % len(value)]
    if how == "flip":
        damaged = bytearray(value)
        for _ in range(data.draw(st.integers(1, 4), label="flips")):
            at = data.draw(offset, label="at") % len(value)
            damaged[at] ^= data.draw(st.integers(1, 255), label="xor")
        return bytes(damaged)
    if how == "json":
        return json.dumps(data.draw(_JSON, label="json")).encode()
    # the record's own fields, each replaced by a value of another type or dropped
    record = json.loads(value)
    for key in data.draw(st.lists(st.sampled_from(fields), min_size=1, max_size=3, unique=True), label="keys"):
        if data.draw(st.booleans(), label="drop"):
            record.pop(key, None)
        else:
            record[key] = data.draw(_JSON, label=key)
    return json.dumps(record).encode()


def _same_document(a: bytes, b: bytes) -> bool:
    try:
        return bool(json.loads(a) == json.loads(b))
    except ValueError:
        return a == b


def log_key(catalog: Catalog, table: Table, version: int) -> str:
    return "/".join((catalog.settings.etcd.prefix, "tables", table.table_id, "log", f"{version:020d}"))


def names_version(exc: CorruptMetadataError, version: int) -> bool:
    """Whether the error points at the damaged version: its key (`log/2`, an etcd key ending in the
    padded version) or its message (`log entry 2`, a commit file "of log entry 2")."""
    return re.search(rf"log(/| entry )0*{version}\b", f"{exc.key} {exc}") is not None


@examples(60)
@given(data=st.data(), in_file=st.booleans())
def test_a_damaged_commit_record_is_named_with_its_table_and_version_and_harms_no_other_table(
    catalog: Catalog, raw: Any, data: st.DataObject, in_file: bool
) -> None:
    """A record damaged where it is kept (its etcd log entry, or the commit file a large record lives in):
    every read that needs it (a snapshot, the history, the changes at its version, a new commit) raises
    CorruptMetadataError naming the table and the version, or answers exactly what the log held before;
    fsck reports it; a second table of the catalog keeps working."""
    other_table, other_version, other_files = neighbour(catalog)
    writer = catalog_with(catalog, inline_record_max_bytes=16 if in_file else 262144)
    try:
        table = writer.create_table(next_name(), schema="id BIGINT, dt STRING", partition_by=["dt"])
        for dt in ("a", "b", "c"):
            with table.begin("insert_into") as tx:
                tx.add_files([stage_id_file(tx, {"dt": dt}, 1)])
                tx.commit()
    finally:
        writer.close()
    table = catalog.table(table.name)  # the writer's catalog is closed: its tables make no more requests
    before = {"snapshot": sorted(table.snapshot().files_by_path), "history": [h.to_json() for h in table.history()]}
    version = data.draw(st.integers(1 if in_file else 0, 3), label="version")  # version 0 is always inline
    key = log_key(catalog, table, version)
    value, _ = raw.get(key)
    commit_file = Path(table.location, json.loads(value)["commit_file"]) if in_file else None
    if commit_file is not None:
        value = commit_file.read_bytes()
    damaged = _damage(data, value)
    if _same_document(damaged, value):
        return  # dropped a field the record did not have: nothing was damaged
    if commit_file is not None:
        commit_file.write_bytes(damaged)
    else:
        raw.put(key, damaged)
    with fresh(catalog) as other:
        view = other.table(table.name)
        reads: dict[str, Callable[[], Any]] = {
            "snapshot": lambda: sorted(view.snapshot().files_by_path),
            "history": lambda: [h.to_json() for h in view.history()],
        }
        for name, read in reads.items():
            try:
                answer = read()
            except CorruptMetadataError as exc:
                assert exc.table == table.name and table.name in str(exc), exc
                assert names_version(exc, version), (exc.key, str(exc))
                continue
            assert answer == before[name], f"{name} answered differently after the damage to version {version}"
        if version > 0:
            with pytest.raises(CorruptMetadataError) as caught:
                view.changes(version, version)
            assert names_version(caught.value, version), (caught.value.key, str(caught.value))
        report = view.fsck()
        assert not report.ok and any(str(version) in p for c in report.checks for p in c.problems), report
        with pytest.raises(CorruptMetadataError), view.begin("insert_into") as tx:
            tx.add_files([stage_id_file(tx, {"dt": "d"}, 1)])
            tx.commit()
        assert view.version == 3, "a commit was written on top of the damage"
        # the other table: readable and writable as before
        neighbour_view = other.table(other_table.name)
        assert neighbour_view.version == other_version
        with neighbour_view.begin("insert_into") as tx:
            tx.add_files([stage_id_file(tx, {"dt": "n"}, 1)])
            tx.commit()
        assert len(neighbour_view.snapshot().files) == len(other_files) + 1
        assert neighbour_view.fsck().ok


# --- a damaged checkpoint file --------------------------------------------------------------------------


@examples(40)
@given(data=st.data())
def test_a_damaged_checkpoint_is_ignored_with_a_warning_and_the_log_gives_the_same_snapshot(
    catalog: Catalog, data: st.DataObject, caplog: pytest.LogCaptureFixture
) -> None:
    """A checkpoint is an optimisation: damaged any way, it is skipped with a warning naming it, the
    snapshot rebuilt from the log is the one it replaced (same files, same statistics), and fsck names it."""
    writer = checkpointing_every_two(catalog)
    try:
        table = writer.create_table(next_name(), schema="id BIGINT, dt STRING", partition_by=["dt"])
        for dt in ("a", "b", "c"):  # a checkpoint at version 2
            with table.begin("insert_into") as tx:
                tx.add_files([stage_id_file(tx, {"dt": dt}, 1 + len(dt))])
                tx.commit()
    finally:
        writer.close()
    with fresh(catalog) as other:
        expected = other.table(table.name).snapshot().to_json()
    (checkpoint,) = Path(table.location, "_acidtables", "checkpoints").iterdir()
    (manifest,) = Path(table.location, "_acidtables", "manifests").iterdir()
    part = data.draw(st.sampled_from(["list", "list content", "manifest"]), label="part")
    if part == "manifest":  # the Parquet file the list names, cut short or with bytes flipped
        value = manifest.read_bytes()
        damaged = _damage_bytes(data, value)
        if damaged == value:
            return
        manifest.write_bytes(damaged)
    else:
        value = checkpoint.read_bytes()
        if part == "list":
            damaged = _damage(data, value, ["format", "version", "checksum", "file_count", "snapshot"])
        else:
            damaged = _damage_content(data, value)
        if _same_document(damaged, value):
            return
        checkpoint.write_bytes(damaged)
    caplog.clear()
    with fresh(catalog) as other, caplog.at_level(logging.WARNING):
        view = other.table(table.name)
        got = view.snapshot().to_json()
        report = view.fsck()
    assert got == expected
    assert any("is ignored" in r.getMessage() and checkpoint.name in r.getMessage() for r in caplog.records)
    assert not report.ok and any(checkpoint.name in p for c in report.checks for p in c.problems), report


def _damage_content(data: st.DataObject, value: bytes) -> bytes:
    """The manifest list inside the checkpoint damaged (a field of a manifest it names), its checksum,
    version and file count kept."""
    document = json.loads(value)
    listed = document["snapshot"]["manifests"]
    at = data.draw(st.integers(0, 2**16), label="manifest") % len(listed)
    field = data.draw(st.sampled_from(sorted(listed[at])), label="field")
    listed[at][field] = data.draw(_JSON, label="value")
    return json.dumps(document).encode()


def _damage_bytes(data: st.DataObject, value: bytes) -> bytes:
    """A binary file cut short or with bytes flipped."""
    offset = st.integers(0, 2**16)
    if data.draw(st.booleans(), label="truncate"):
        return value[: data.draw(offset, label="cut at") % len(value)]
    damaged = bytearray(value)
    for _ in range(data.draw(st.integers(1, 4), label="flips")):
        damaged[data.draw(offset, label="at") % len(value)] ^= data.draw(st.integers(1, 255), label="xor")
    return bytes(damaged)
