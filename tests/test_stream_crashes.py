"""Exactly once across crashes: a Spark driver running a stream into a table is killed (SIGKILL, the
whole process group: JVM and Python workers) at each point of a micro-batch, and the query restarted
from its checkpoint in the test's own session writes every row once. And two runs of one query on one
checkpoint: the later commit fails with ConcurrentTransactionException and nothing is written twice.

The driver is a process of its own (`tests.helpers.stream_driver`); `stream_pauses` stops it at the
point under test (and resumes it, for the two-runs test) without any hook in the code under test.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from tests.helpers.streams import FOREACH_APP, drop_batch, query_id, start_events_query
from tests.helpers.tables import source_options

from acidtables import Catalog

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
PAUSES = Path(__file__).resolve().parent / "helpers" / "stream_pauses"
SCHEMA = "id BIGINT, dt STRING, amount DOUBLE"
FIRST = [(1, "d1", 1.0), (2, "d2", 2.0)]
SECOND = [(3, "d1", 3.0)]
#: a driver starts Spark (seconds) before it reaches any point; generous for a loaded 2-core machine
REACH_SECONDS = 240


class Driver:
    """The stream driver, in a process group of its own so that one signal kills JVM and workers too."""

    def __init__(self, catalog: Catalog, tmp: Path, table: str, sink: str, point: str) -> None:
        self.paused, self.resume = tmp / "paused", tmp / "resume"
        settings = catalog.settings
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(PAUSES), str(REPO), os.environ.get("PYTHONPATH", "")]),
            "ACIDTABLES_TEST_PAUSE_AT": point,
            "ACIDTABLES_TEST_PAUSE_FILE": str(self.paused),
            "ACIDTABLES_TEST_RESUME_FILE": str(self.resume),
        }
        args = [settings.etcd.endpoints[0], settings.etcd.prefix, settings.warehouse, table]
        args += [str(tmp / "inbox"), str(tmp / "checkpoint"), sink]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.helpers.stream_driver", *args],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )

    def wait_paused(self) -> None:
        deadline = time.monotonic() + REACH_SECONDS
        while not self.paused.exists():
            if self.process.poll() is not None:
                _, err = self.process.communicate()
                raise AssertionError(
                    f"the driver ended (code {self.process.returncode}) before pausing: {err.decode()}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"the driver did not reach its pause point within {REACH_SECONDS} s")
            time.sleep(0.1)  # polling a file the driver creates; the deadline bounds it

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def finish(self) -> tuple[int, str]:
        """Let it go on from its pause; its exit code and its error's first line."""
        self.resume.touch()
        _, err = self.process.communicate(timeout=REACH_SECONDS)
        return self.process.returncode, err.decode()


@pytest.fixture
def drivers() -> Iterator[list[Driver]]:
    started: list[Driver] = []
    yield started
    for driver in started:
        driver.kill()


def table_rows(spark: SparkSession, catalog: Catalog, table: str) -> list[tuple[Any, ...]]:
    read = spark.read.format("acidtables").options(**source_options(catalog)).load(table)
    return sorted(tuple(r) for r in read.select("id", "dt", "amount").collect())


def batches_committed(catalog: Catalog, table: str, app: str) -> list[int]:
    return [c.app_ids[app] for c in catalog.table(table).commits(1) if app in c.app_ids]


def application(sink: str, checkpoint: Path) -> str:
    """What keys the batches: the query's id, or the foreachBatch pattern's own application id."""
    return FOREACH_APP if sink == "foreach" else query_id(checkpoint)


#: every point for the data source's sink and the foreachBatch pattern; SparkTable's sink, which is that
#: pattern with Spark's writer, at the point only it handles itself (a replay skipped before writing)
KILLS = [
    *[(sink, point) for sink in ("source", "foreach") for point in ("before_staging", "after_staging", "after_commit")],
    ("table", "after_commit"),
]


@pytest.mark.parametrize(("sink", "point"), KILLS)
def test_a_driver_killed_at_any_point_of_a_batch_leaves_every_row_once(
    spark: SparkSession, catalog: Catalog, tmp_path: Path, drivers: list[Driver], sink: str, point: str
) -> None:
    catalog.create_table("sc.events", schema=SCHEMA, partition_by=["dt"])
    drop_batch(tmp_path / "inbox", "a", FIRST)
    drop_batch(tmp_path / "inbox", "b", SECOND)
    driver = Driver(catalog, tmp_path, "sc.events", sink, point)
    drivers.append(driver)
    driver.wait_paused()
    driver.kill()

    query = application(sink, tmp_path / "checkpoint")
    if point == "after_commit":  # batch 0 landed; Spark never recorded it
        assert batches_committed(catalog, "sc.events", query) == [0]
        assert table_rows(spark, catalog, "sc.events") == sorted(FIRST)
    else:  # nothing of the batch is visible
        assert catalog.table("sc.events").version == 0

    restarted = start_events_query(
        spark, catalog, "sc.events", tmp_path / "inbox", tmp_path / "checkpoint", sink, source_options(catalog)
    )
    assert restarted.awaitTermination(REACH_SECONDS)
    assert table_rows(spark, catalog, "sc.events") == sorted(FIRST + SECOND)
    assert batches_committed(catalog, "sc.events", query) == [0, 1]


@pytest.mark.parametrize("sink", ["source", "table"])
def test_two_runs_on_one_checkpoint_the_later_commit_fails_and_nothing_is_doubled(
    spark: SparkSession, catalog: Catalog, tmp_path: Path, drivers: list[Driver], sink: str
) -> None:
    catalog.create_table("sc.events", schema=SCHEMA, partition_by=["dt"])
    drop_batch(tmp_path / "inbox", "a", FIRST)
    first_run = Driver(catalog, tmp_path, "sc.events", sink, "after_staging")
    drivers.append(first_run)
    first_run.wait_paused()  # batch 0 staged, its transaction open

    second_run = start_events_query(
        spark, catalog, "sc.events", tmp_path / "inbox", tmp_path / "checkpoint", sink, source_options(catalog)
    )
    assert second_run.awaitTermination(REACH_SECONDS)  # batch 0, committed by the second run
    query = query_id(tmp_path / "checkpoint")
    assert batches_committed(catalog, "sc.events", query) == [0]

    code, error = first_run.finish()
    assert code == 1 and "ConcurrentTransactionException" in error, error
    assert f"application id {query!r}" in error
    assert table_rows(spark, catalog, "sc.events") == sorted(FIRST)
    assert batches_committed(catalog, "sc.events", query) == [0]
