"""A local SparkSession tuned for small machines: the demo, tests and benchmarks use it."""

from __future__ import annotations

import os
import subprocess
import sys

from pyspark.sql import SparkSession


def local_session(app_name: str = "acidtables", *, cores: int = 2, memory: str = "2g") -> SparkSession:
    """local[cores], no UI, few shuffle partitions, no _SUCCESS markers in staged directories; the
    `acidtables` data source is registered."""
    from .datasource import register

    # Python workers (UDFs, the acidtables data source) must import the same packages as the driver;
    # PySpark reads the interpreter from the environment when the context starts.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(max(2, cores)))
        .config("spark.default.parallelism", str(max(2, cores)))
        .config("spark.driver.memory", memory)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs", "false")
        .config(
            "spark.sql.sources.commitProtocolClass",
            "org.apache.spark.sql.execution.datasources.SQLHadoopMapReduceCommitProtocol",
        )
        .config("spark.driver.extraJavaOptions", "-Dlog4j2.level=ERROR")
        .getOrCreate()
    )
    register(session)
    return session


def stop_session(session: SparkSession, *, timeout_seconds: float = 30.0) -> None:
    """Stop Spark and wait until its JVM has exited.

    `SparkSession.stop()` leaves the JVM that PySpark launched running until this Python process exits
    (it watches its stdin), so a command that promises to leave nothing running closes that pipe and
    waits, killing the JVM only if it overstays `timeout_seconds`.
    """
    from pyspark import SparkContext

    session.stop()
    gateway = SparkContext._gateway
    if gateway is None:
        return
    process = getattr(gateway, "proc", None)
    gateway.shutdown()
    SparkContext._gateway = None
    SparkContext._jvm = None
    if process is None:
        return
    if process.stdin is not None:
        process.stdin.close()
    try:
        process.wait(timeout=timeout_seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
