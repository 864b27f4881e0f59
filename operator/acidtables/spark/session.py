"""A local SparkSession tuned for small machines: the demo, tests and benchmarks use it."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping

from pyspark.sql import SparkSession

from acidtables.core import Catalog, ObjectStore


def object_store_conf(store: ObjectStore) -> dict[str, str]:
    """Hadoop S3A settings for s3a:// and s3:// table locations, from the same reading of the
    environment as the table library's own file access (credentials: S3A's default chain reads the
    AWS_* variables). Needs the hadoop-aws jar, which the job image carries."""
    conf = {
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.s3a.endpoint.region": store.region,
    }
    if store.endpoint:
        conf["spark.hadoop.fs.s3a.endpoint"] = store.endpoint
        conf["spark.hadoop.fs.s3a.path.style.access"] = "true"  # MinIO and friends serve buckets by path
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(store.endpoint.startswith("https://")).lower()
    return conf


def session_conf(memory: str) -> dict[str, str]:
    """What every acidtables SparkSession sets, local or with executors: UTC session time (time
    travel and partition values), no _SUCCESS markers in staged directories, the plain commit protocol
    (the table's commit is the etcd transaction), and the object store."""
    return {
        "spark.driver.memory": memory,
        "spark.sql.session.timeZone": "UTC",
        "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
        "spark.sql.sources.commitProtocolClass": (
            "org.apache.spark.sql.execution.datasources.SQLHadoopMapReduceCommitProtocol"
        ),
        "spark.driver.extraJavaOptions": "-Dlog4j2.level=ERROR",
        **object_store_conf(ObjectStore.from_env()),
    }


#: the variables Spark's JVM copies into Hadoop's S3 settings at start, naming the host as it does so
_AWS_CREDENTIALS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
_launching = threading.Lock()


def host_name_resolves() -> bool:
    """Whether this machine's host name resolves to an address, as the JVM's InetAddress.getLocalHost()
    needs it to."""
    try:
        socket.getaddrinfo(socket.gethostname(), None)
    except (OSError, UnicodeError):
        return False
    return True


def _hostless_credentials() -> dict[str, str]:
    """The AWS credentials to hand Spark through its conf rather than its environment, or none.

    When AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are set, Spark's JVM copies them into Hadoop's S3A
    settings at start and labels the copy with InetAddress.getLocalHost(), which throws
    UnknownHostException where the host name resolves to nothing (a chroot, a fresh container or VM), so
    the JVM dies before the session exists. There, local_session gives the same credentials to S3A and to
    the Python workers (the data source) through the session's conf, and starts the JVM without them."""
    present = {name: os.environ[name] for name in _AWS_CREDENTIALS if os.environ.get(name)}
    if "AWS_ACCESS_KEY_ID" not in present or "AWS_SECRET_ACCESS_KEY" not in present or host_name_resolves():
        return {}
    return present


def _credentials_conf(credentials: Mapping[str, str]) -> dict[str, str]:
    if not credentials:
        return {}
    conf = {
        "spark.hadoop.fs.s3a.access.key": credentials["AWS_ACCESS_KEY_ID"],
        "spark.hadoop.fs.s3a.secret.key": credentials["AWS_SECRET_ACCESS_KEY"],
    }
    if "AWS_SESSION_TOKEN" in credentials:
        conf["spark.hadoop.fs.s3a.session.token"] = credentials["AWS_SESSION_TOKEN"]
    # the acidtables data source reads files from Python workers, which take the JVM's environment
    conf.update({f"spark.executorEnv.{name}": value for name, value in credentials.items()})
    return conf


@contextlib.contextmanager
def _launched_without(names: tuple[str, ...]) -> Iterator[None]:
    """PySpark starts the JVM with this process's environment: leave `names` out of it for the launch
    (other threads of this process miss them only while the session starts)."""
    with _launching:
        hidden = {name: os.environ.pop(name) for name in names if name in os.environ}
        try:
            yield
        finally:
            os.environ.update(hidden)


def local_session(
    app_name: str = "acidtables",
    *,
    cores: int = 2,
    memory: str = "2g",
    conf: Mapping[str, str] | None = None,
    catalog: Catalog | None = None,
) -> SparkSession:
    """local[cores], no UI, few shuffle partitions, then `conf`; the `acidtables` data source is
    registered, and with `catalog` the session carries it (use_catalog: `sql()` and `format("acidtables")`
    use it unless told otherwise).

    Local Spark talks to itself only, so it is told to use the loopback address: otherwise its JVM
    resolves the machine's host name first and does not start at all where that name resolves to
    nothing (containers, chroots, fresh VMs: `UnknownHostException` and JAVA_GATEWAY_EXITED). There, AWS
    credentials in the environment reach S3A and the Python workers through the session's conf instead
    (see _hostless_credentials)."""
    os.environ.setdefault("SPARK_LOCAL_HOSTNAME", "localhost")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    credentials = _hostless_credentials()
    with _launched_without(tuple(credentials)):
        return spark_session(
            app_name,
            memory=memory,
            catalog=catalog,
            conf={
                "spark.master": f"local[{cores}]",
                "spark.ui.enabled": "false",
                "spark.ui.showConsoleProgress": "false",
                "spark.sql.shuffle.partitions": str(max(2, cores)),
                "spark.default.parallelism": str(max(2, cores)),
                **_credentials_conf(credentials),
                **(conf or {}),
            },
        )


def spark_session(
    app_name: str, *, memory: str, conf: Mapping[str, str], catalog: Catalog | None = None
) -> SparkSession:
    """A SparkSession with session_conf() and then `conf` (which names the master), the `acidtables`
    data source registered (carrying `catalog`, if given: use_catalog)."""
    from .datasource import register

    # Python workers (UDFs, the acidtables data source) must import the same packages as the driver;
    # PySpark reads the interpreter from the environment when the context starts.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    for key, value in {**session_conf(memory), **conf}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark, catalog)
    return spark


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
