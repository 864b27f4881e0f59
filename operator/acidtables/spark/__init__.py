"""acidtables for PySpark: SparkTable (the delta-spark-style API) and the `acidtables` data source.

Spark writes and reads the Parquet data with its own native writer and reader; acidtables decides what a
snapshot is and commits through etcd (acidtables.core).
"""

from acidtables.spark.datasource import session_catalog, use_catalog
from acidtables.spark.merge import MergeBuilder
from acidtables.spark.prepared import Prepared
from acidtables.spark.session import local_session, spark_session, stop_session
from acidtables.spark.statements import sql
from acidtables.spark.table import SparkTable
from acidtables.spark.worker_heap import settle_imports

__all__ = [
    "MergeBuilder",
    "Prepared",
    "SparkTable",
    "local_session",
    "session_catalog",
    "spark_session",
    "sql",
    "stop_session",
    "use_catalog",
]

# last: what the imports above made stays out of a reused worker's per-task collection
settle_imports()
