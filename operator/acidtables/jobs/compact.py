"""`python -m acidtables.jobs compact`: one CompactionJob, run in its driver pod.

Groups commit one by one under the job's id (core.group_app_id), so a retried or duplicated pod never
commits a group twice; a group that loses to a concurrent commit is skipped and the conflict (its
exception, the winning version and operation) is reported. A job that committed nothing because it lost
is Conflicted, which the operator does not retry; anything else that stops it is Failed.

SIGTERM (the job deleted, its node drained) stops the job at once (termination.py): the group being
staged is aborted, Spark is stopped, and the outcome says what was committed before the signal.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import re
from collections.abc import Mapping, Sequence

from pyspark.sql import SparkSession

from acidtables.core import (
    AcidTablesError,
    Catalog,
    ConcurrentModificationException,
    InvalidArgumentError,
    exit_process,
)
from acidtables.spark import SparkTable, local_session, spark_session, stop_session
from acidtables.spark.compaction import staged_groups

from .outcome import JobOutcome
from .termination import TERMINATION, Terminated

logger = logging.getLogger(__name__)


def run_compaction(
    table: SparkTable,
    kind: str,
    *,
    job_id: str,
    where: str | None = None,
    target_file_bytes: int = 128 << 20,
    cluster_by: Sequence[str] = (),
    outcome: JobOutcome | None = None,
) -> JobOutcome:
    """Compact `table`, filling `outcome` (a new one by default) as each group commits, so that what an
    interrupted job did is known too."""
    outcome = outcome if outcome is not None else JobOutcome()
    if kind == "cluster":
        try:
            prepared = table.cluster(list(cluster_by), where=where, commit=False)
            # aborted if interrupted before its commit; a SIGTERM during the commit waits for its record
            with prepared, TERMINATION.held():
                prepared.transaction.set_app_transaction(f"compaction/{job_id}", 1)
                removed = prepared.transaction.intent().removes
                info = prepared.commit()
                if not info.skipped:
                    outcome.committed_versions.append(info.version)
                    outcome.files_removed, outcome.files_added = info.files_removed, info.files_added
                    outcome.bytes_rewritten = sum(f.size_bytes for f in removed)
        except ConcurrentModificationException as exc:
            outcome.phase, outcome.conflict, outcome.message = "Conflicted", _conflict(exc), str(exc)[:1000]
        return outcome
    for group in staged_groups(
        table.spark, table.table, kind, where=where, target_file_bytes=target_file_bytes, job_id=job_id
    ):
        try:
            # aborted if interrupted before its commit; a SIGTERM during the commit waits for its record
            with group, TERMINATION.held():
                info = group.commit()
                if not info.skipped:  # skipped: this job already committed the group (a rerun)
                    outcome.committed_versions.append(info.version)
                    outcome.files_removed += info.files_removed
                    outcome.files_added += info.files_added
                    outcome.bytes_rewritten += int(group.summary.get("bytes", 0))
        except ConcurrentModificationException as exc:  # skipped; its files stay for the next run
            outcome.conflict, outcome.message = _conflict(exc), str(exc)[:1000]
            outcome.groups_skipped += 1
    if outcome.groups_skipped and not outcome.committed_versions:
        outcome.phase = "Conflicted"
    return outcome


def _stopped(exc: Terminated, outcome: JobOutcome) -> str:
    """What a job stopped by SIGTERM says: the versions it committed, and what the step the signal waited
    for ended with (a commit whose outcome is unknown, a conflict), which it must not hide."""
    done = f"versions {outcome.committed_versions} were" if outcome.committed_versions else "nothing was"
    message = f"{exc} before it ended; {done} committed"
    if exc.__cause__ is not None:
        message += f"; the step it waited for ended with {type(exc.__cause__).__name__}: {exc.__cause__}"
    if outcome.message:
        message += f"; before that: {outcome.message}"
    return message


def _conflict(exc: ConcurrentModificationException) -> dict[str, object]:
    """The conflict as status shows it: which commit won, and the named exception."""
    return {
        "exception": type(exc).__name__,
        "message": str(exc)[:1000],
        "winningVersion": exc.winning_version,
        "winningOperation": exc.winning_operation,
    }


#: the executor pod template the operator derived from this driver pod (JSON; operator/executors.py)
EXECUTOR_TEMPLATE_VARIABLE = "ACIDTABLES_EXECUTOR_POD_TEMPLATE"


def api_server_url(env: Mapping[str, str]) -> str:
    """The API server as every pod finds it: KUBERNETES_SERVICE_HOST and _PORT, which the kubelet sets
    (a cluster without cluster DNS, or with another domain, has no kubernetes.default.svc)."""
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        raise InvalidArgumentError(
            "--executors needs the Kubernetes API server: KUBERNETES_SERVICE_HOST is not set (it is in every pod; "
            "outside one, run with --executors 0)"
        )
    return f"k8s://https://{f'[{host}]' if ':' in host else host}:{port}"


def executor_template_file(env: Mapping[str, str], directory: str) -> str | None:
    """The executors' pod template written where Spark reads it (the driver's writable /tmp), or None."""
    template = env.get(EXECUTOR_TEMPLATE_VARIABLE)
    if not template:
        return None
    path = os.path.join(directory, "acidtables-executor-pod.json")  # Spark reads JSON as YAML
    with open(path, "w") as out:
        out.write(template)
    return path


#: where every pod finds its ServiceAccount's token and the cluster's CA
ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

#: Spark's own setting for its log level, and the levels it takes (case aside)
LOG_LEVEL = "spark.log.level"
LOG_LEVELS = ("ALL", "TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF")
#: the driver JVM's log configuration at a job's `spark.log.level`: Spark's default layout, on stderr (the
#: pod's log) through a File appender on /dev/stderr, not log4j2's Console appender, because Spark adds a
#: filter to console appenders in a PySpark driver that holds them at WARN whatever spark.log.level and
#: setLogLevel say (Spark 4.3: "Setting Spark log level to INFO", then no INFO line), so "Registered
#: executor" and "Starting task" never showed (issue 40, item 8)
_LOG4J2 = """\
rootLogger.level = {level}
rootLogger.appenderRef.stderr.ref = stderr
appender.stderr.type = File
appender.stderr.name = stderr
appender.stderr.fileName = /dev/stderr
appender.stderr.append = true
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
# Spark's defaults for the noisiest third-party loggers
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = warn
logger.parquet.name = org.apache.parquet.CorruptStatistics
logger.parquet.level = error
"""


def log_level_conf(conf: dict[str, str], directory: str) -> None:
    """A job's `spark.log.level` made to reach its driver's log: a log4j2 configuration at that level,
    written to `directory` and given to the driver JVM (beside any Java options the job sets)."""
    level = conf.get(LOG_LEVEL)
    if level is None:
        return  # PySpark's default: WARN
    if level.strip().upper() not in LOG_LEVELS:
        raise InvalidArgumentError(f"--conf {LOG_LEVEL}={level!r}: the level must be one of {', '.join(LOG_LEVELS)}")
    path = os.path.join(directory, "acidtables-log4j2.properties")
    with open(path, "w") as out:
        out.write(_LOG4J2.format(level=level.strip().upper()))
    options = conf.get("spark.driver.extraJavaOptions", "")
    if "log4j.configurationFile" not in options:  # the job's own configuration wins
        conf["spark.driver.extraJavaOptions"] = f"{options} -Dlog4j.configurationFile=file:{path}".strip()


def executor_name_prefix(pod_name: str) -> str:
    """What the executors' pod names start with: the driver pod's name made a host name. Spark refuses a
    prefix that ends in `-` or `.`, and makes each executor's host name of `<prefix>-exec-N` with every
    character but letters, digits, `_` and `-` turned into `_`, which Kubernetes refuses in a host name:
    a dot in a job's name (`orders.v2-...`) left its executors uncreated. So only lowercase letters,
    digits and `-`, at most 40 characters (63 with `-exec-N`), and a name cut short ends in a digest of
    the whole one, so that two attempts of one long-named job never share executor names."""
    label = re.sub(r"[^a-z0-9-]+", "-", pod_name.lower()).strip("-")
    if len(label) > 40:
        digest = hashlib.sha256(pod_name.encode()).hexdigest()[:8]
        label = f"{label[:31].rstrip('-')}-{digest}"
    return label or "acidtables"


def spark_conf(
    args: argparse.Namespace, env: Mapping[str, str], template_dir: str = "/tmp", account_dir: str = ACCOUNT_DIR
) -> dict[str, str]:
    """Spark settings of a driver with executors on Kubernetes in client mode: the API server from the
    pod's environment, the driver's host and pod name from the downward API so executors are owned by
    this pod, the pod's service-account token (where there is none, Spark's client reads KUBECONFIG),
    the executors' pod template (the driver's volumes, environment and user), then the job's own
    `--conf`, its `spark.log.level` made effective (log_level_conf)."""
    conf = {}
    if args.executors:
        template = executor_template_file(env, template_dir)
        if template:
            conf["spark.kubernetes.executor.podTemplateFile"] = template
            conf["spark.kubernetes.executor.podTemplateContainerName"] = "executor"
        if os.path.exists(f"{account_dir}/token"):
            conf["spark.kubernetes.authenticate.oauthTokenFile"] = f"{account_dir}/token"
            conf["spark.kubernetes.authenticate.caCertFile"] = f"{account_dir}/ca.crt"
        conf.update(
            {
                "spark.master": api_server_url(env),
                "spark.submit.deployMode": "client",
                "spark.executor.instances": str(args.executors),
                "spark.executor.memory": args.executor_memory,
                # the pod's own address, and no spark.driver.bindAddress: with a bind address set,
                # Spark 4.3 tells executors that address (0.0.0.0) as the driver's instead of the host
                # (issue 30); the driver listens on the pod IP, which is all a pod has
                "spark.driver.host": env.get("POD_IP", ""),
                "spark.kubernetes.driver.pod.name": env.get("POD_NAME", ""),
                "spark.kubernetes.namespace": env.get("POD_NAMESPACE", "default"),
                "spark.kubernetes.container.image": env.get("ACIDTABLES_JOB_IMAGE", ""),
                "spark.kubernetes.executor.podNamePrefix": executor_name_prefix(env.get("POD_NAME", "")),
                # executors get no persistent volumes, so the driver owns none to clean up
                "spark.kubernetes.driver.ownPersistentVolumeClaim": "false",
                "spark.kubernetes.driver.reusePersistentVolumeClaim": "false",
            }
        )
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidArgumentError(f"--conf {item!r}: write KEY=VALUE")
        conf[key] = value
    log_level_conf(conf, template_dir)
    return conf


def _session(args: argparse.Namespace) -> SparkSession:
    name = f"acidtables-compact-{args.job_id[:8]}"
    memory = os.environ.get("SPARK_DRIVER_MEMORY", "2g")
    conf = spark_conf(args, os.environ)
    if not args.executors:
        return local_session(name, memory=memory, conf=conf)
    return spark_session(name, memory=memory, conf=conf)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m acidtables.jobs compact", description=__doc__)
    parser.add_argument("--table", required=True, help="the table's catalog name, namespace.table")
    parser.add_argument("--type", required=True, choices=["minor", "major", "cluster"])
    parser.add_argument("--job-id", required=True, help="the CompactionJob's uid: the commits' application id")
    parser.add_argument("--where", help="a condition on partition columns")
    parser.add_argument("--cluster-by", default="", help="comma-separated columns (type cluster)")
    parser.add_argument("--target-file-bytes", type=int, default=128 << 20)
    parser.add_argument("--executors", type=int, default=0, help="0: Spark in local mode in this pod")
    parser.add_argument("--executor-memory", default="4g")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting")
    parser.add_argument("--termination-log", help="where to write the outcome (default: $ACIDTABLES_TERMINATION_LOG)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    outcome = JobOutcome()
    spark = None
    TERMINATION.install()  # again (python -m acidtables.jobs installed it first): main() may run alone
    try:
        try:
            # Spark first: its JVM is a forked child, and forking once gRPC (the etcd client) runs its
            # threads can leave the child without the descriptors it needs (seen: the JVM exiting at once)
            spark = _session(args)
            with Catalog.connect() as catalog:
                table = catalog.table(args.table)
                run_compaction(
                    SparkTable(spark, table),
                    args.type,
                    job_id=args.job_id,
                    where=args.where,
                    target_file_bytes=args.target_file_bytes,
                    cluster_by=[c for c in args.cluster_by.split(",") if c],
                    outcome=outcome,
                )
        except AcidTablesError as exc:
            outcome.phase, outcome.message = "Failed", f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # the operator must learn why, whatever it was
            logger.exception("compaction failed")
            outcome.phase, outcome.message = "Failed", f"{type(exc).__name__}: {exc}"
    except Terminated as exc:  # during the work, or while a failure above was being described
        outcome.phase, outcome.message = "Failed", _stopped(exc, outcome)
    finally:
        TERMINATION.ignore()  # stopping Spark and the report are not to be cut short
        if spark is not None:
            try:
                stop_session(spark)
            except Exception:  # a JVM that died refuses to stop: the job's outcome is what the operator needs
                logger.warning("stopping Spark failed; the job's outcome stands", exc_info=True)
    outcome.write(args.termination_log)
    logger.info("compaction of %s: %s", args.table, outcome.to_json())
    TERMINATION.restore()
    return outcome.exit_code


if __name__ == "__main__":
    exit_process(main())
