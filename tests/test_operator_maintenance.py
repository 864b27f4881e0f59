"""Table maintenance by the operator on a real kube-apiserver (issue 18): a table with spec.retention
is expired and vacuumed on its own, a quiet table's log leaves etcd for the archive, a retention under
the safety minimum is refused with an Event, and the work is counted in /metrics."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import envtest
from tests.helpers.operator_process import OperatorProcess
from tests.helpers.resources import catalog_name, events_for, eventually, get, table_resource
from tests.helpers.tables import staged_parquet
from tests.test_operator_metrics import scrape

from acidtables import Catalog, Table
from acidtables.errors import VersionExpiredError


@pytest.fixture
def maintaining(operator_env: dict[str, str], kube_namespace: str, tmp_path: Path) -> Iterator[OperatorProcess]:
    """An operator that looks at every table each second, runs retention every 2 s, calls a table quiet
    after 2 s, and allows retentions down to half a second."""
    env = {
        **operator_env,
        "ACIDTABLES_MAINTENANCE_CHECK_SECONDS": "1",
        "ACIDTABLES_MAINTENANCE_INTERVAL_SECONDS": "2",
        "ACIDTABLES_ARCHIVE_QUIET_SECONDS": "2",
        "ACIDTABLES_RETENTION_MINIMUM_SECONDS": "0.5",
    }
    running = OperatorProcess(tmp_path / "operator.log", env, [kube_namespace])
    try:
        yield running
    finally:
        assert running.stop() == 0, running.log()[-6000:]


def _overwrite(table: Table) -> str:
    with table.begin("insert_overwrite") as tx:
        tx.remove_files(tx.scan("dt = 'a'"))
        new = staged_parquet(tx, {"dt": "a"})
        tx.add_files([new])
        tx.set_scope([{"dt": "a"}])
        tx.commit()
    return new.path


def test_the_operator_expires_vacuums_and_archives_by_itself(
    kube_api: envtest.KubeAPI,
    kube_namespace: str,
    maintaining: OperatorProcess,
    operator_env: dict[str, str],
    catalog: Catalog,
) -> None:
    retention = {"versions": 2, "duration": "1s", "vacuum": True}
    envtest.apply(kube_api, kube_namespace, table_resource("kept", retention=retention))
    envtest.apply(kube_api, kube_namespace, table_resource("strict", retention={"duration": "100ms"}))
    for name in ("kept", "strict"):
        envtest.kubectl(
            kube_api, "wait", "--for=condition=Ready", f"acidtable/{name}", "-n", kube_namespace, "--timeout=60s"
        )
    table = catalog.table(catalog_name(kube_namespace, "kept"))
    written = [_overwrite(table) for _ in range(6)]  # versions 1..6; each removes the one before

    def settled() -> Any:
        status = get(kube_api, kube_namespace, "kept").get("status", {})
        expired = (status.get("lastExpire") or {}).get("oldestVersionKept")
        archived = (status.get("lastArchive") or {}).get("archivedUpTo")
        gone = not any(Path(p).exists() for p in written[:4])
        return status if expired == 5 and archived == 5 and gone else None

    status = eventually(settled, "expire to version 5, vacuum of versions 1-4's files, archive", maintaining)
    assert all(Path(p).exists() for p in written[4:])  # versions 5 and 6 read them
    assert sorted(table.snapshot(5).files_by_path) != sorted(table.snapshot().files_by_path)
    with pytest.raises(VersionExpiredError, match="has expired"):
        table.snapshot(4)
    assert [h.version for h in table.history()] == list(range(6, -1, -1))  # history stays
    assert set(status["lastVacuum"]) == {"time", "filesDeleted", "bytesDeleted"}
    keys, _ = catalog.services.coordinator.table_usage(table.table_id)
    assert keys == 6  # quiet: the head, one log entry, its txn and time index keys, the marker, retention

    refused = eventually(
        lambda: [e for e in events_for(kube_api, kube_namespace, "strict") if e["reason"] == "RetentionRefused"],
        "the refusal of a retention under the safety minimum",
        maintaining,
    )
    assert "shorter than the safety minimum" in refused[0]["message"] and refused[0]["type"] == "Warning"
    strict = get(kube_api, kube_namespace, "strict")["status"]
    assert "force=True" in strict["lastExpire"]["error"]

    port = operator_env["ACIDTABLES_METRICS_PORT"]
    namespace = kube_namespace.replace("-", "_")

    def counted() -> Any:
        samples = scrape(port)
        runs = {
            labels: value for (name, labels), value in samples.items() if name == "acidtables_maintenance_runs_total"
        }
        freed = samples.get(("acidtables_maintenance_files_freed_total", (("namespace", namespace), ("table", "kept"))))
        return samples if freed == 4 and any(("kind", "archive") in labels for labels in runs) else None

    samples = eventually(counted, "maintenance in /metrics", maintaining)
    labels = {"namespace": namespace, "table": "strict", "kind": "expire", "outcome": "refused"}
    refusals = ("acidtables_maintenance_runs_total", tuple(sorted(labels.items())))
    assert samples[refusals] >= 1
    endpoint = operator_env["ACIDTABLES_ETCD_ENDPOINTS"]
    assert samples[("acidtables_etcd_quota_bytes", (("endpoint", endpoint),))] == 8 << 30
    assert samples[("acidtables_etcd_usage_up", (("endpoint", endpoint),))] == 1
    etcd_bytes = samples[("acidtables_table_etcd_bytes", (("namespace", namespace), ("table", "kept")))]
    assert 0 < etcd_bytes < 10_000
    freed = samples[("acidtables_maintenance_bytes_freed_total", (("namespace", namespace), ("table", "kept")))]
    assert freed == sum(f.size_bytes for record in table.commits(1, 4) for f in record.adds)
