"""The operator: how soon an AcidTable's status shows a commit, and what following commits costs it.

Runs against the real kube-apiserver of KUBEBUILDER_ASSETS (the test tier's envtest assets) and an
embedded etcd, with the operator as its own process (`acidtables operator`), exactly as the tests run it.

* status_lag: a commit by another process, then the time until the resource's status shows its version;
  median and p99 over the commits. Baseline: the same commits seen by core's change feed in this
  process, i.e. etcd's watch, so the ratio is what the operator adds on top of etcd.
* operator_cpu: the operator's CPU seconds per minute while commits arrive at 1,000 per minute.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from tests.helpers import envtest
from tests.helpers.operator_process import OperatorProcess
from tests.helpers.tables import staged_parquet

from acidtables import Catalog, Table
from acidtables.core import ChangeFeed

from .core import bench_env, log
from .report import Figure, Goal, Report, machine_info, now_iso

BENCHMARKS = ("status_lag", "operator_cpu")
ROOT = Path(__file__).resolve().parents[1]


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _p99(samples: Sequence[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def run(*, quick: bool = False, only: Sequence[str] = BENCHMARKS, results_dir: Path | None = None) -> Report:
    report = Report(suite="operator", quick=quick, machine=machine_info(), started_at=now_iso())
    assets = envtest.assets_dir()
    if assets is None:
        log(f"operator suite skipped: set {envtest.ASSETS_VARIABLE} to envtest assets (etcd, kube-apiserver, kubectl)")
        report.finish(results_dir)
        return report
    commits = 50 if quick else 200
    with bench_env() as env, tempfile.TemporaryDirectory(prefix="acidtables-bench-kube-") as tmp:
        api = envtest.start(assets, Path(tmp) / "kube")
        operator = None
        try:
            envtest.kubectl(api, "apply", "--server-side", "-f", str(ROOT / "crds"))
            envtest.kubectl(api, "wait", "--for=condition=Established", "crd/acidtables.acidtables.io")
            namespace = "bench"
            api.request(
                "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
            )
            operator = OperatorProcess(
                Path(tmp) / "operator.log",
                {
                    "KUBECONFIG": str(api.kubeconfig),
                    "ACIDTABLES_ETCD_ENDPOINTS": env.server.endpoint,
                    "ACIDTABLES_ETCD_PREFIX": env.settings.etcd.prefix,
                    "ACIDTABLES_WAREHOUSE": env.settings.warehouse,
                    "ACIDTABLES_METRICS_PORT": "0",
                },
                [namespace],
            )
            resource = {
                "apiVersion": "acidtables.io/v1alpha1",
                "kind": "AcidTable",
                "metadata": {"name": "lag"},
                "spec": {
                    "schema": [{"name": "id", "type": "bigint"}, {"name": "dt", "type": "string"}],
                    "partitionBy": ["dt"],
                },
            }
            envtest.kubectl(api, "apply", "-n", namespace, "-f", "-", stdin=json.dumps(resource))
            envtest.kubectl(api, "wait", "--for=condition=Ready", "acidtable/lag", "-n", namespace, "--timeout=120s")
            with Catalog(env.settings) as catalog:
                table = catalog.table("bench.lag")
                path = f"/apis/acidtables.io/v1alpha1/namespaces/{namespace}/acidtables/lag"
                if "status_lag" in only:
                    _status_lag(api, path, catalog, table, commits, report)
                if "operator_cpu" in only:
                    _operator_cpu(operator, table, 0.25 if quick else 0.5, report)
        finally:
            if operator is not None:
                operator.stop()
            api.stop()
    written = report.finish(results_dir)
    if written is not None:
        log(f"results written to {written}")
    return report


def _commit(table: Table) -> int:
    with table.begin("insert_into") as tx:
        tx.add_files([staged_parquet(tx, {"dt": "a"})])
        version: int = tx.commit().version
        return version


def _status_lag(api: envtest.KubeAPI, path: str, catalog: Catalog, table: Table, commits: int, report: Report) -> None:
    feed = ChangeFeed(catalog.services.coordinator)
    feed.start()
    status_lags, feed_lags = [], []
    for _ in range(commits):
        committed = time.monotonic()
        version = _commit(table)
        seen_by_feed = None
        while seen_by_feed is None:
            got = feed.next(1.0)
            heads = [c.value for c in got if c.kind == "head" and c.value] if isinstance(got, list) else []
            if any(head.get("version") == version for head in heads):
                seen_by_feed = time.monotonic()
        while api.request("GET", path).get("status", {}).get("version") != version:
            time.sleep(0.002)  # the poll interval bounds the resolution of the measurement
        status_lags.append(time.monotonic() - committed)
        feed_lags.append(seen_by_feed - committed)
    feed.close()
    median, p99 = statistics.median(status_lags), _p99(status_lags)
    baseline = statistics.median(feed_lags)
    log(f"status lag over {commits} commits: median {median * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms")
    report.details["status_lag"] = {"status_lag_seconds": status_lags, "feed_lag_seconds": feed_lags}
    report.add(Figure("status_lag", "commit seen by core's change feed (etcd watch), median", baseline, "s"))
    report.add(
        Figure(
            "status_lag",
            "commit shown in AcidTable status, median",
            median,
            "s",
            baseline="feed",
            ratio=median / baseline,
        )
    )
    report.add(
        Figure(
            "status_lag",
            "commit shown in AcidTable status, p99",
            p99,
            "s",
            baseline="2 s goal",
            ratio=p99 / 2.0,
            goal=Goal("p99 <= 2 s", 1.0, at_least=False),
        )
    )


def _operator_cpu(operator: OperatorProcess, table: Table, minutes: float, report: Report) -> None:
    pid = operator.process.pid
    interval = 60.0 / 1000  # 1,000 commits a minute
    count = int(minutes * 1000)
    before = _cpu_seconds(pid)
    started = time.monotonic()
    for n in range(count):
        _commit(table)
        pause = started + (n + 1) * interval - time.monotonic()
        if pause > 0:
            time.sleep(pause)  # pacing the load, not synchronisation
    elapsed_minutes = (time.monotonic() - started) / 60
    used = (_cpu_seconds(pid) - before) / elapsed_minutes
    log(f"operator CPU: {used:.2f} s per minute at {count / elapsed_minutes:.0f} commits/minute")
    report.details["operator_cpu"] = {"commits": count, "minutes": elapsed_minutes}
    report.add(
        Figure(
            "operator_cpu",
            "operator CPU seconds per minute at 1,000 commits/minute",
            used,
            "s",
            baseline="one core",
            ratio=used / 60,
        )
    )
