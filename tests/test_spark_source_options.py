"""Every option of the `acidtables` data source is checked, naming it (issue 24, item 5): its name, its
type and range, and the step it belongs to; the first line of Spark's error carries the acidtables
error class and message, never Python's `ValueError: invalid literal for int()`."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from pyspark.sql import SparkSession

from acidtables import Catalog
from acidtables.errors import InvalidArgumentError
from acidtables.spark.source_options import parse_options

SCHEMA = "id BIGINT, dt STRING, amount DOUBLE"


def options(catalog: Catalog) -> dict[str, str]:
    return {
        "etcd.endpoints": ",".join(catalog.settings.etcd.endpoints),
        "etcd.prefix": catalog.settings.etcd.prefix,
        "warehouse": catalog.settings.warehouse,
    }


def first_line_of(run: Callable[[], object]) -> str:
    with pytest.raises(Exception) as caught:
        run()
    return str(caught.value).splitlines()[0]


# --- through Spark: the first line of its error --------------------------------------------------------

BAD_READS = [
    ("versionAsOf", "abc", "option versionAsOf='abc' is not a version; use a whole number 0 or more"),
    ("versionAsOf", "-1", "option versionAsOf='-1' is not a version"),
    ("timestampAsOf", "yesterday", "option timestampAsOf='yesterday' is not a time; use ISO-8601"),
    ("versionAsOff", "1", "unknown option 'versionasoff'; the options are path, table, versionAsOf"),
    ("commit.max_attempts", "0", "option commit.max_attempts='0' is not accepted: ACIDTABLES_COMMIT_MAX_ATTEMPTS"),
    (
        "etcd.request_timeout_seconds",
        "fast",
        "option etcd.request_timeout_seconds='fast' is not accepted: ACIDTABLES_ETCD_REQUEST_TIMEOUT_SECONDS='fast' "
        "is not a number of seconds",
    ),
]


@pytest.mark.parametrize(("option", "value", "message"), BAD_READS, ids=[f"{o}={v}" for o, v, _ in BAD_READS])
def test_a_bad_read_option_is_the_first_line_of_sparks_error(
    spark: SparkSession, catalog: Catalog, option: str, value: str, message: str
) -> None:
    catalog.create_table("ds.t", schema=SCHEMA)
    opts = {**options(catalog), option: value}
    line = first_line_of(lambda: spark.read.format("acidtables").options(**opts).load("ds.t").collect())
    assert f"InvalidArgumentError: format('acidtables'): {message}" in line, line
    assert "invalid literal" not in line and "Traceback" not in line


def test_a_version_and_a_time_together_are_refused(spark: SparkSession, catalog: Catalog) -> None:
    catalog.create_table("ds.t", schema=SCHEMA)
    reader = spark.read.format("acidtables").options(**options(catalog))
    reader = reader.option("versionAsOf", 0).option("timestampAsOf", "2026-01-01")
    line = first_line_of(lambda: reader.load("ds.t").collect())
    assert "InvalidArgumentError: format('acidtables'): give versionAsOf or timestampAsOf, not both" in line, line


BAD_WRITES = [
    ("versionAsOf", "1", "option versionAsOf is for reads; a write always commits on top of the newest version"),
    ("mergeSchema", "true", "unknown option 'mergeschema'; the options are path, table, versionAsOf"),
    ("commit.max_attempts", "many", "option commit.max_attempts='many' is not accepted"),
    ("etcd.endpoints", "etcd:2379", "option etcd.endpoints='etcd:2379' is not accepted: etcd endpoint 'etcd:2379'"),
]


@pytest.mark.parametrize(("option", "value", "message"), BAD_WRITES, ids=[f"{o}={v}" for o, v, _ in BAD_WRITES])
def test_a_bad_write_option_is_the_first_line_of_sparks_error_and_nothing_is_written(
    spark: SparkSession, catalog: Catalog, option: str, value: str, message: str
) -> None:
    table = catalog.create_table("ds.t", schema=SCHEMA)
    frame = spark.createDataFrame([(1, "a", 1.0)], SCHEMA)
    opts = {**options(catalog), option: value}
    line = first_line_of(lambda: frame.write.format("acidtables").options(**opts).mode("append").save("ds.t"))
    assert f"InvalidArgumentError: format('acidtables'): {message}" in line, line
    assert table.version == 0 and table.storage.list_dir("data") == []


def test_good_options_of_every_kind_still_read_and_write(spark: SparkSession, catalog: Catalog) -> None:
    catalog.create_table("ds.t", schema=SCHEMA)
    opts = {**options(catalog), "commit.max_attempts": "7", "etcd.request_timeout_seconds": "2.5"}
    frame = spark.createDataFrame([(1, "a", 1.0)], SCHEMA)
    frame.write.format("acidtables").options(**opts).mode("append").save("ds.t")
    back = spark.read.format("acidtables").options(**opts).option("versionAsOf", " 1 ").load("ds.t")
    assert [tuple(r) for r in back.collect()] == [(1, "a", 1.0)]
    by_option = spark.read.format("acidtables").options(**opts).option("table", "ds.t").load()
    assert by_option.count() == 1


# --- the rules themselves (no Spark) -------------------------------------------------------------------


def test_options_arrive_lower_cased_and_are_read_by_their_documented_names() -> None:
    parsed = parse_options(
        {"path": "ds.t", "versionasof": "3", "etcd.endpoints": "http://e:2379", "commit.max_attempts": "4"}, "read"
    )
    assert (parsed.table, parsed.version_as_of, parsed.timestamp_as_of, parsed.local) == ("ds.t", 3, None, None)
    assert parsed.settings == {"ACIDTABLES_ETCD_ENDPOINTS": "http://e:2379", "ACIDTABLES_COMMIT_MAX_ATTEMPTS": "4"}
    assert parse_options({"path": "ds.t", "timestampasof": "2026-11-22T10:00:00Z"}, "read").timestamp_as_of == (
        "2026-11-22T10:00:00Z"
    )
    assert parse_options({"table": "ds.t", "local": ""}, "write").local == ""


@pytest.mark.parametrize(
    ("given", "step", "message"),
    [
        ({}, "read", r"name the table, e\.g\. \.load\('sales\.orders'\)"),
        ({}, "write", r"name the table, e\.g\. \.save\('sales\.orders'\)"),
        ({"path": "a.b", "table": "c.d"}, "read", "the table is named twice, 'a.b' .* and 'c.d'"),
        ({"paths": '["a.b","c.d"]'}, "read", "reads one table"),
        ({"path": "a.b", "local": "", "warehouse": "/w"}, "read", "option local runs an embedded etcd"),
        ({"path": "a.b", "timestampasof": "1"}, "write", "option timestampAsOf is for reads"),
        ({"path": "a.b", "etcd.password": ""}, "read", r"option etcd.password=\*\*\* is empty"),
        ({"path": "a.b", "etcd.prefix": "no-slash"}, "read", "option etcd.prefix='no-slash' is not accepted"),
        ({"path": "a.b", "retention.minimum_seconds": "-1"}, "read", "must be 0 or more seconds"),
        (
            {"path": "a.b", "ignorechanges": "true"},
            "stream_read",
            "'ignorechanges' is not supported: .*skipChangeCommits",
        ),
        ({"path": "a.b", "readchangefeed": "true"}, "read", r"readChangeFeed does not apply to a read \(spark\.read\)"),
    ],
)
def test_each_rule_names_the_option(given: dict[str, str], step: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        parse_options(given, step)  # type: ignore[arg-type]
