"""Bad input reaches users as InvalidArgumentError, named, before any work: expressions that do not
parse or name unknown columns, time-travel arguments that are not times, names and partition values a
file system cannot hold, locations no file system serves, a file where the data directory must be."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession
from tests.spark_jobs import next_name

from acidtables import Catalog
from acidtables.errors import InvalidArgumentError
from acidtables.spark import SparkTable

SCHEMA = "id BIGINT, dt STRING, amount DOUBLE"


@pytest.fixture
def t(spark: SparkSession, catalog: Catalog) -> SparkTable:
    table = SparkTable(spark, catalog.create_table(next_name(), schema=SCHEMA, partition_by=["dt"]))
    table.insert_into(spark.createDataFrame([(1, "a", 1.0)], SCHEMA))
    return table


@pytest.mark.parametrize("where", ["nope = 1", "id =", "amount +", "dt IN ("])
def test_a_read_expression_that_does_not_resolve_is_named_with_sparks_reason(t: SparkTable, where: str) -> None:
    with pytest.raises(InvalidArgumentError, match=r"read\(\): condition .* is not valid for") as caught:
        t.read(where=where)
    assert repr(where) in str(caught.value)


@pytest.mark.parametrize("timestamp", [float("nan"), float("inf"), -float("inf"), 1e20, object(), [1]])
def test_time_travel_refuses_what_is_not_a_time(t: SparkTable, timestamp: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="timestamp"):
        t.read(timestamp=timestamp)


@pytest.mark.parametrize("version", ["3", 1.5, -1, True])
def test_time_travel_refuses_what_is_not_a_version(t: SparkTable, version: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="version"):
        t.read(version=version)


@pytest.mark.parametrize(
    ("condition", "clause", "named"),
    [
        ("t.id = s.nope", None, "condition"),
        ("t.id = s.id", ("update", "s.nope > 1", None), "update condition"),
        ("t.id = s.id", ("update", None, {"amount": "s.nope + 1"}), "value of amount"),
        ("t.id ==", None, "condition"),
    ],
)
def test_a_merge_expression_that_does_not_resolve_fails_before_any_job(
    t: SparkTable, condition: str, clause: tuple[str, str | None, dict[str, str] | None] | None, named: str
) -> None:
    source = t.spark.createDataFrame([(1, "a", 5.0)], SCHEMA)
    builder = t.merge(source, condition)
    builder = (
        builder.when_matched_update(clause[2] or {"amount": "s.amount"}, clause[1])
        if clause
        else builder.when_matched_update_all()
    )
    before = t.table.version
    with pytest.raises(InvalidArgumentError, match=rf"merge\(\): {named} .* is not valid for"):
        builder.execute()
    assert t.table.version == before
    assert not [e for e in t.table.storage.list_dir("data") if t.table.find_commit(e.path.rsplit("=", 1)[-1]) is None]


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), -1, True, "30"])
def test_wait_for_table_refuses_what_is_not_a_timeout(catalog: Catalog, timeout: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="timeout_seconds must be 0 or more and finite"):
        catalog.wait_for_table("s.anything", timeout_seconds=timeout)


def test_a_name_too_long_for_a_directory_is_refused(catalog: Catalog) -> None:
    with pytest.raises(InvalidArgumentError, match="at most 128"):
        catalog.create_table("sales." + "x" * 129, schema=SCHEMA)
    with pytest.raises(InvalidArgumentError, match="at most 128"):
        catalog.create_table("n" * 200 + ".t", schema=SCHEMA)


def test_a_partition_value_too_long_for_a_directory_is_refused(t: SparkTable) -> None:
    with pytest.raises(InvalidArgumentError, match="too long for a directory name"):
        t.insert_into(t.spark.createDataFrame([(2, "é" * 200, 1.0)], SCHEMA))


@pytest.mark.parametrize("location", ["foo://bucket/t", "nosuch://x"])
def test_a_location_no_file_system_serves_is_refused(catalog: Catalog, location: str) -> None:
    with pytest.raises(InvalidArgumentError, match="is not a file system acidtables can use"):
        catalog.create_table("sales.t", schema=SCHEMA, location=location)
    assert catalog.list_tables() == []


def test_a_file_where_the_data_directory_must_be_is_refused_by_name(spark: SparkSession, catalog: Catalog) -> None:
    table = catalog.create_table(next_name(), schema=SCHEMA)
    (Path(table.location) / "data").write_text("someone's file")
    with pytest.raises(InvalidArgumentError, match="is a file, where the table keeps its data directory"):
        SparkTable(spark, table).insert_into(spark.createDataFrame([(1, "a", 1.0)], SCHEMA))
    assert (Path(table.location) / "data").read_text() == "someone's file"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.text(min_size=0, max_size=300))
def test_any_table_name_is_accepted_or_refused_by_name(catalog: Catalog, name: str) -> None:
    try:
        table = catalog.create_table(name, schema="id BIGINT")
    except InvalidArgumentError as exc:
        assert "create_table()" in str(exc)
        return
    except Exception as exc:  # the property: nothing else ever escapes
        pytest.fail(f"create_table({name!r}) raised {type(exc).__name__}: {exc}")
    catalog.drop_table(table.name, delete_data=True)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(location=st.text(min_size=1, max_size=80))
def test_any_location_is_accepted_or_refused_by_name(catalog: Catalog, tmp_path: Path, location: str) -> None:
    """Relative spellings resolve under the test's directory; whatever the string, the outcome is a
    table or InvalidArgumentError, and the warehouse is never claimed."""
    import os

    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        table = catalog.create_table(next_name(), schema="id BIGINT", location=location)
    except InvalidArgumentError:
        return
    except Exception as exc:
        pytest.fail(f"create_table(location={location!r}) raised {type(exc).__name__}: {exc}")
    finally:
        os.chdir(cwd)
    assert table.location != catalog.settings.warehouse
    catalog.drop_table(table.name, delete_data=True)


def test_a_file_where_the_metadata_directory_must_be_is_refused_by_name(catalog: Catalog) -> None:
    from tests.helpers.tables import staged_parquet

    from acidtables.core.settings import CommitSettings, Settings

    small = Catalog(
        Settings(
            etcd=catalog.settings.etcd,
            warehouse=catalog.settings.warehouse,
            commit=CommitSettings(inline_record_max_bytes=16),
        )
    )
    table = small.create_table(next_name(), schema=SCHEMA)
    (Path(table.location) / "_acidtables" / "commits").write_text("someone's file")
    tx = table.begin("insert_into")
    tx.add_files([staged_parquet(tx)])
    with pytest.raises(InvalidArgumentError, match="metadata directory must be a directory of its own"):
        tx.commit()
    assert table.version == 0
    small.close()


def test_a_misspelt_create_table_option_is_named_with_the_ones_there_are(catalog: Catalog) -> None:
    with pytest.raises(InvalidArgumentError, match=r"unknown option partition; the options are partition_by, "):
        catalog.create_table("ns.typo", schema="id BIGINT, dt STRING", partition=["dt"])  # type: ignore[call-arg]
    assert catalog.list_tables("ns") == []


def test_register_after_seconds_takes_zero_and_refuses_a_negative_naming_the_setting() -> None:
    from acidtables.core.settings import CommitSettings
    from acidtables.errors import ConfigurationError

    variable = "ACIDTABLES_COMMIT_REGISTER_AFTER_SECONDS"
    assert CommitSettings.from_env({variable: "0"}).register_after_seconds == 0
    assert CommitSettings.from_env({}).register_after_seconds == 1.0
    for bad in ("-1", "soon"):
        with pytest.raises(ConfigurationError, match=variable):
            CommitSettings.from_env({variable: bad})
