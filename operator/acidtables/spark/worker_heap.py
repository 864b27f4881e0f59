"""A reused Spark Python worker's heap, settled once acidtables is imported in it.

Spark runs the data source's steps (planning, each write task, each commit) in Python workers it keeps
for the next task, and its daemon runs a full `gc.collect()` in a worker after every task it finishes
(pyspark.daemon). A worker that has imported pyspark, pyarrow, pandas and acidtables holds about 110,000
objects the collector walks each time: 52 ms of CPU after every task and every commit, measured, all of
it spent on modules that live as long as the process. On a 2-core machine those collections ran beside
Spark's own commit log write after each micro-batch and made it ~45 ms slower for a Python data
source than for Spark's Parquet sink (bench/README.md, the sink's phases). Moving what the imports made
into the collector's permanent generation (`gc.freeze`) leaves the per-task collection only what
tasks create.
"""

from __future__ import annotations

import gc
import os

#: what Spark sets in the environment of the Python workers it reuses (and only there)
REUSED_WORKER = "SPARK_REUSE_WORKER"


def settle_imports() -> None:
    """In a reused Spark Python worker: collect once, then freeze everything alive (the imported
    modules, and whatever the task that imported acidtables holds, once per process). Anywhere else
    (a driver, a worker Spark does not reuse): nothing."""
    if not os.environ.get(REUSED_WORKER):
        return
    gc.collect()
    gc.freeze()


__all__ = ["REUSED_WORKER", "settle_imports"]
