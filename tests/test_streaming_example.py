"""examples/streaming-job.yaml as written, minus Kubernetes: its AcidTable made a table as the operator
makes it, its container's script run as a process of its own (a Spark driver) against the test's etcd
and warehouse, compaction committing while the stream commits, the pod "restarted" (SIGTERM, then the
same script again on the same checkpoint), and every row accounted for: the rate source numbers its rows
0, 1, 2, ..., so the table must hold each id from 0 to its highest exactly once.
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]
from pyspark.sql import SparkSession

from acidtables import Catalog
from acidtables.operator.definition import TableDefinition
from acidtables.spark import SparkTable

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "streaming-job.yaml"
#: a process of its own starts Spark before its first batch; generous for a loaded 2-core machine
START_SECONDS = 240


def example() -> tuple[dict[str, Any], dict[str, Any]]:
    table, deployment = yaml.safe_load_all(EXAMPLE.read_text())
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return table, container


def start_stream(catalog: Catalog, tmp: Path, log: Path) -> subprocess.Popen[bytes]:
    _, container = example()
    settings = catalog.settings
    env = {**os.environ, **{e["name"]: e["value"] for e in container["env"]}}
    env.update(
        ACIDTABLES_ETCD_ENDPOINTS=settings.etcd.endpoints[0],
        ACIDTABLES_ETCD_PREFIX=settings.etcd.prefix,
        ACIDTABLES_WAREHOUSE=settings.warehouse,
        CHECKPOINT=str(tmp / "checkpoint"),
        ROWS_PER_SECOND="20",
        TRIGGER="1 second",
    )
    assert container["command"] == ["python", "-c"]
    return subprocess.Popen(
        [sys.executable, "-c", container["args"][0]], env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT
    )


def wait_for_batches(catalog: Catalog, process: subprocess.Popen[bytes], log: Path, at_least: int) -> None:
    deadline = time.monotonic() + START_SECONDS
    while sum(1 for c in catalog.table("sales.clicks").commits(1) if c.app_ids) < at_least:
        assert process.poll() is None, f"the stream ended (code {process.returncode}):\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"fewer than {at_least} batches within {START_SECONDS} s"
        time.sleep(0.2)  # polling the table's log; the deadline bounds it


def stop(process: subprocess.Popen[bytes]) -> int:
    """As Kubernetes stops a pod: SIGTERM, then SIGKILL after the grace period; the exit code."""
    process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait(timeout=30)


def logged_batches(log: Path) -> list[int]:
    """The micro-batch ids the script printed, in order."""
    return [int(m.group(1)) for m in re.finditer(r"^batch (\d+): \d+ rows$", log.read_text(), re.MULTILINE)]


def test_the_streaming_example_loses_and_doubles_nothing_beside_compaction(
    spark: SparkSession, catalog: Catalog, tmp_path: Path
) -> None:
    spec, _ = example()
    definition = TableDefinition.from_spec(spec["spec"])
    catalog.create_table("sales.clicks", list(definition.columns), **definition.create_options())
    log = tmp_path / "stream.log"
    clicks = SparkTable(spark, catalog.table("sales.clicks"))
    compactions = 0

    first = start_stream(catalog, tmp_path, log)
    try:
        wait_for_batches(catalog, first, log, 3)
        for _ in range(2):  # compaction commits between the stream's commits
            compactions += len(clicks.compact("minor", target_file_bytes=1 << 20))
            wait_for_batches(catalog, first, log, 3 + compactions + 2)
    finally:
        code = stop(first)
    # python is a container's first process there, which SIGTERM does not end by itself: the script stops
    # its query and exits cleanly, not at the SIGKILL of the grace period
    assert code == 0, log.read_text()[-3000:]
    committed = sum(1 for c in catalog.table("sales.clicks").commits(1) if c.app_ids)

    second = start_stream(catalog, tmp_path, log)  # the pod restarted: the same checkpoint
    try:
        wait_for_batches(catalog, second, log, committed + 2)
        compactions += len(clicks.compact("minor", target_file_bytes=1 << 20))
        wait_for_batches(catalog, second, log, committed + 4)
    finally:
        code = stop(second)
    assert code == 0, log.read_text()[-3000:]

    ids = sorted(r.id for r in clicks.read().select("id").collect())
    assert ids == list(range(len(ids))), "a row of the rate source is missing or doubled"
    assert compactions >= 2, "compaction had nothing to do: the test did not exercise it"
    history = catalog.table("sales.clicks").commits(1)
    batch_ids = [next(iter(c.app_ids.values())) for c in history if c.app_ids]
    assert len(batch_ids) == len(set(batch_ids)) and batch_ids == sorted(batch_ids)
    # a line per micro-batch, none skipped; the second run may print again the batch the first was stopped in
    logged = logged_batches(log)
    assert all(b - a in (0, 1) for a, b in itertools.pairwise(logged)), logged
    assert logged[-1] >= batch_ids[-1] - 1, (logged, batch_ids)
