"""Shared fixtures: one real etcd for the whole session, and a fresh key prefix per test.

Starting etcd costs about a second, so the server is shared; tests stay independent by
writing only under their own random prefix instead of wiping the server between tests.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from tests.helpers import envtest
from tests.helpers.operator_process import OperatorProcess

from acidtables import Catalog
from acidtables.core.coordination.embedded import EmbeddedEtcd, free_port
from acidtables.core.settings import EtcdSettings, Settings


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line per reason a test was skipped, with how many it kept from running (pytest's own -rs list
    prints a line per test location, which buries the failures). Each reason says what would run them."""
    reasons: Counter[str] = Counter()
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        reasons[reason.removeprefix("Skipped: ")] += 1
    if not reasons:
        return
    terminalreporter.section(f"skipped: {sum(reasons.values())} tests, by reason", sep="-")
    for reason, count in reasons.most_common():
        terminalreporter.write_line(f"{count:5d}  {reason}")


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedEtcd]:
    server = EmbeddedEtcd(tmp_path_factory.mktemp("etcd"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def etcd_prefix() -> str:
    return f"/acidtables-test/{uuid4().hex}"


@pytest.fixture
def catalog(etcd_server: EmbeddedEtcd, etcd_prefix: str, tmp_path: Path) -> Iterator[Catalog]:
    """A catalog on the session's etcd, under a fresh prefix, with a warehouse in the test's tmp dir."""
    settings = Settings(
        etcd=EtcdSettings((etcd_server.endpoint,), prefix=etcd_prefix),
        warehouse=str(tmp_path / "warehouse"),
    )
    cat = Catalog(settings)
    try:
        yield cat
    finally:
        cat.close()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local SparkSession for the whole run (starting Spark costs seconds; tests share it)."""
    from acidtables.spark import local_session, stop_session

    session = local_session("acidtables-tests")
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        stop_session(session)


# --- the real kube-apiserver tier (KUBEBUILDER_ASSETS) ------------------------------------------------

#: set by .ci/run when it unpacked the assets: the tier must run, a skip is a failure
REQUIRE_ENVTEST = "ACIDTABLES_REQUIRE_ENVTEST"


@pytest.fixture(scope="session")
def kube_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[envtest.KubeAPI]:
    """etcd 3.6 and kube-apiserver 1.36 from KUBEBUILDER_ASSETS, one pair for the session."""
    assets = envtest.assets_dir()
    if assets is None:
        reason = (
            f"the real kube-apiserver tier needs {envtest.ASSETS_VARIABLE} "
            "(a directory holding etcd, kube-apiserver and kubectl)"
        )
        if os.environ.get(REQUIRE_ENVTEST):
            pytest.fail(f"{REQUIRE_ENVTEST} is set but {reason}")
        pytest.skip(reason)
    missing = envtest.missing_binaries(assets)
    if missing:
        pytest.fail(f"{envtest.ASSETS_VARIABLE}={assets} has no executable {', '.join(missing)}")
    api = envtest.start(assets, tmp_path_factory.mktemp("kube-apiserver"))
    try:
        yield api
    finally:
        api.stop()


@pytest.fixture
def kube_namespace(kube_api: envtest.KubeAPI) -> Iterator[str]:
    """A fresh namespace per test; emptied and finalized afterwards (there is no namespace controller)."""
    name = f"t-{uuid4().hex[:12]}"
    kube_api.request(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    try:
        yield name
    finally:
        envtest.delete_namespace(kube_api, name)


@pytest.fixture(scope="session")
def acidtables_crds(kube_api: envtest.KubeAPI) -> None:
    """crds/ applied as they are, and established (served) before any test uses them."""
    crds = Path(__file__).resolve().parents[1] / "crds"
    envtest.kubectl(kube_api, "apply", "--server-side", "-f", str(crds))
    envtest.kubectl(
        kube_api,
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/acidtables.acidtables.io",
        "crd/compactionjobs.acidtables.io",
    )


@pytest.fixture
def operator_env(
    kube_api: envtest.KubeAPI, acidtables_crds: None, etcd_server: EmbeddedEtcd, etcd_prefix: str, tmp_path: Path
) -> dict[str, str]:
    """The environment an operator process of this test runs with: the API server, etcd, a warehouse."""
    return {
        "KUBECONFIG": str(kube_api.kubeconfig),
        "ACIDTABLES_ETCD_ENDPOINTS": etcd_server.endpoint,
        "ACIDTABLES_ETCD_PREFIX": etcd_prefix,
        "ACIDTABLES_WAREHOUSE": str(tmp_path / "warehouse"),
        # a driver pod that has not started in this long fails its attempt (tests hold one on purpose)
        "ACIDTABLES_DRIVER_START_TIMEOUT_SECONDS": "15",
        # a standby takes over this soon after the leader dies
        "ACIDTABLES_LEADER_LEASE_SECONDS": "3",
        "ACIDTABLES_METRICS_PORT": str(free_port()),
        "ACIDTABLES_HEALTH_PORT": str(free_port()),
        "ACIDTABLES_AUTOCOMPACT_INTERVAL_SECONDS": "1",
    }


@pytest.fixture
def operator(operator_env: dict[str, str], kube_namespace: str, tmp_path: Path) -> Iterator[OperatorProcess]:
    """`acidtables operator --namespace <the test's namespace>`, stopped with SIGTERM afterwards."""
    running = OperatorProcess(tmp_path / "operator.log", operator_env, [kube_namespace])
    try:
        yield running
    finally:
        code = running.stop()
        assert code == 0, f"the operator exited with {code} on SIGTERM; its log:\n{running.log()[-6000:]}"
