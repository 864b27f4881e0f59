"""Pause points for the streaming crash tests, in every Python process of a Spark driver under test.

A directory holding this file is put first on PYTHONPATH of a `tests.helpers.stream_driver` process,
so Python imports it at start-up in the driver and in each Python worker Spark starts (they inherit the
variable). With ACIDTABLES_TEST_PAUSE_AT naming a point, the first process to reach it creates the file
ACIDTABLES_TEST_PAUSE_FILE and waits there: for ever, so the test kills the whole driver at exactly that
point, or until the file ACIDTABLES_TEST_RESUME_FILE appears, so the test can let another run of the
query go first. The code under test has no hooks of its own: the functions are wrapped from here.

Points: `before_staging` and `after_staging` (around the staging of a micro-batch's rows: an executor's
write task on the data source's sink and on its batch writes, the driver's Spark write on SparkTable's)
and `after_commit` (the micro-batch committed, before Spark writes its commit log).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

POINT = os.environ.get("ACIDTABLES_TEST_PAUSE_AT", "")


def _pause() -> None:
    reached = Path(os.environ["ACIDTABLES_TEST_PAUSE_FILE"])
    try:
        with open(reached, "x") as marker:  # the first process to get here pauses; later ones go on
            marker.write(str(os.getpid()))
    except FileExistsError:
        return
    resume = os.environ.get("ACIDTABLES_TEST_RESUME_FILE")
    while resume is None or not os.path.exists(resume):
        time.sleep(0.05)


def _around(owner: Any, name: str, *, before: bool) -> None:
    original: Callable[..., Any] = getattr(owner, name)

    @functools.wraps(original)
    def paused(*args: Any, **kwargs: Any) -> Any:
        if before:
            _pause()
        result = original(*args, **kwargs)
        if not before:
            _pause()
        return result

    setattr(owner, name, paused)


def _install() -> None:
    from acidtables.spark import datasource, stream_batches, stream_sink, writes

    if POINT in ("before_staging", "after_staging"):
        before = POINT == "before_staging"
        _around(stream_sink, "stage_batches", before=before)  # the data source sink's write tasks
        _around(datasource, "stage_batches", before=before)  # the data source's batch write tasks
        _around(writes, "write_staged", before=before)  # SparkTable's micro-batch writes
    elif POINT == "after_commit":
        _around(stream_sink.AcidTablesStreamWriter, "commit_batch", before=False)
        _around(datasource.AcidTablesWriter, "commit", before=False)
        _around(stream_batches.BatchCommitter, "__call__", before=False)
    else:
        raise SystemExit(f"ACIDTABLES_TEST_PAUSE_AT={POINT!r}: not a pause point")


if POINT:
    _install()
