"""Two operator processes at once: exactly one acts; after SIGKILL of the leader the standby takes over
within the lease time, and nothing is reconciled twice or lost in between."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from tests.helpers import envtest
from tests.helpers.operator_process import OperatorProcess
from tests.helpers.resources import catalog_name, events_for, table_resource
from tests.helpers.tables import etcd_client

from acidtables import Catalog
from acidtables.core.coordination.embedded import free_port

LEASE_SECONDS = 3


def leader(catalog: Catalog) -> str | None:
    host, port = catalog.settings.etcd.endpoints[0].removeprefix("http://").split(":")
    value, _ = etcd_client(host, int(port)).get(f"{catalog.settings.etcd.prefix}/leaders/operator")
    return value.decode() if value is not None else None


def test_one_of_two_operators_acts_and_the_standby_takes_over_after_sigkill(
    kube_api: envtest.KubeAPI, kube_namespace: str, operator_env: dict[str, str], catalog: Catalog, tmp_path: Path
) -> None:
    first = OperatorProcess(tmp_path / "a.log", {**operator_env, "ACIDTABLES_OPERATOR_ID": "a"}, [kube_namespace])
    # each replica its own ports, as each pod has: the standby died at start on the leader's health
    # port ("Address already in use"), so nobody took over and the wait below ran out (issue 30, item 10)
    second_env = {
        **operator_env,
        "ACIDTABLES_OPERATOR_ID": "b",
        "ACIDTABLES_METRICS_PORT": str(free_port()),
        "ACIDTABLES_HEALTH_PORT": str(free_port()),
    }
    second = OperatorProcess(tmp_path / "b.log", second_env, [kube_namespace])
    try:
        deadline = time.monotonic() + 30
        while leader(catalog) is None:
            assert time.monotonic() < deadline, first.log() + second.log()
            time.sleep(0.1)  # polling interval of the wait
        acting, standby = (first, second) if leader(catalog) == "a" else (second, first)
        envtest.apply(kube_api, kube_namespace, table_resource("one"))
        envtest.kubectl(
            kube_api, "wait", "--for=condition=Ready", "acidtable/one", "-n", kube_namespace, "--timeout=60s"
        )
        assert "is the operator leader" not in standby.log()

        acting.process.send_signal(signal.SIGKILL)
        acting.process.wait()
        killed_at = time.monotonic()
        envtest.apply(kube_api, kube_namespace, table_resource("two"))
        # the lease runs out, then the standby starts kopf and reconciles: seconds
        assert standby.process.poll() is None, standby.log()[-4000:]
        try:
            envtest.kubectl(
                kube_api, "wait", "--for=condition=Ready", "acidtable/two", "-n", kube_namespace, "--timeout=60s"
            )
        except subprocess.CalledProcessError as exc:
            raise AssertionError(f"the standby never made 'two' Ready: {exc.stderr}\n{standby.log()[-4000:]}") from None
        took_over = time.monotonic() - killed_at
        assert leader(catalog) == ("b" if acting is first else "a")
        assert "is the operator leader" in standby.log()
        # reported, not asserted on: how long the cluster had no acting operator (lease + start-up)
        print(f"standby took over and reconciled in {took_over:.1f} s (lease {LEASE_SECONDS} s)")
        created = [e for e in events_for(kube_api, kube_namespace, "one") if e["reason"] == "Created"]
        assert len(created) == 1  # the new leader adopted "one" without creating it again
        assert catalog.table(catalog_name(kube_namespace, "one")).version == 0
        assert catalog.table(catalog_name(kube_namespace, "two")).version == 0
    finally:
        codes = [first.stop(), second.stop()]
    assert 0 in codes, codes  # the survivor stopped cleanly on SIGTERM
