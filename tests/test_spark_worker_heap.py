"""Spark's reused Python workers collect garbage after every task (pyspark.daemon's `gc.collect()`); a
worker that imports acidtables freezes what the imports made, once, so those collections walk only
what tasks create (acidtables.spark.worker_heap; the figures are in bench/README.md)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from acidtables.spark.worker_heap import REUSED_WORKER, settle_imports


def test_a_reused_spark_worker_freezes_what_importing_acidtables_made(spark: Any) -> None:
    def worker_state(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Runs in a Spark Python worker (shipped by value): import acidtables there, then say what
        the collector holds."""
        import gc
        import os

        import acidtables.spark  # noqa: F401 - the import under test

        for _ in batches:
            pass
        reused = os.environ.get("SPARK_REUSE_WORKER", "")
        yield pa.RecordBatch.from_pydict({"frozen": [gc.get_freeze_count()], "reused": [reused]})

    rows = spark.range(2, numPartitions=2).mapInArrow(worker_state, "frozen BIGINT, reused STRING").collect()
    assert len(rows) == 2
    for row in rows:
        assert row.reused, "Spark reuses its Python workers by default (spark.python.worker.reuse)"
        # pyspark, pyarrow, pandas and acidtables: about 100,000 objects no per-task collection walks
        assert row.frozen > 50_000


def test_anywhere_but_a_reused_worker_nothing_is_frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(REUSED_WORKER, raising=False)
    before = gc.get_freeze_count()
    settle_imports()
    assert gc.get_freeze_count() == before
