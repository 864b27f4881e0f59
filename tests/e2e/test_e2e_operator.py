"""e2e, on a real cluster: the chart with two operator replicas: exactly one acts (it holds the leader
key in etcd, and a table is created once), and when its pod is deleted the other takes over within the
lease time.

Needs only ACIDTABLES_E2E_KUBECONFIG and ACIDTABLES_E2E_IMAGE; the chart, its bundled etcd and the
warehouse claim are installed as tests/e2e/test_e2e_tables.py says, here with `replicas: 2`.
"""

from __future__ import annotations

import pytest
from tests.helpers.cluster import Release, skip_reason
from tests.helpers.resources import events_for, eventually, table_resource

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")]

CHART_VALUES = {"replicas": 2}


def leader(release: Release) -> str | None:
    found: str | None = release.run("leader", "leader")["leader"]
    return found


def test_of_two_operator_replicas_one_acts_and_the_other_takes_over_when_its_pod_goes(release: Release) -> None:
    replicas = sorted(p["metadata"]["name"] for p in release.wait_for_operator(2))
    acting = eventually(lambda: leader(release), "a leader elected", release, timeout_seconds=120)
    assert acting in replicas  # ACIDTABLES_OPERATOR_ID is the pod's name
    release.apply(table_resource("one"))
    release.wait_for_condition("acidtables", "one", "Ready")
    created = [e for e in events_for(release.cluster, release.namespace, "one") if e["reason"] == "Created"]
    assert len(created) == 1  # the standby did nothing

    release.cluster.delete(f"/api/v1/namespaces/{release.namespace}/pods/{acting}", grace_seconds=0)
    # the lease (5 s here) expires with its holder, and a standby campaigns and wins
    successor = eventually(
        lambda: (found := leader(release)) != acting and found, "another replica leading", release, 120
    )
    assert successor in [p["metadata"]["name"] for p in release.operator_pods()]
    release.apply(table_resource("two"))
    release.wait_for_condition("acidtables", "two", "Ready", timeout_seconds=120)
    assert len([e for e in events_for(release.cluster, release.namespace, "one") if e["reason"] == "Created"]) == 1
    assert release.run("read", "read", {"table": f"{release.namespace.replace('-', '_')}.one"})["version"] == 0
