"""AcidTable and CompactionJob manifests, reads of them and of their Events, and a deadline wait: the
pieces of the operator scenarios that do not care which API server they talk to.

The envtest tier (tests/test_operator_*.py, `envtest.KubeAPI`) and the real-cluster tier (tests/e2e/,
`cluster.Cluster`) both call them: anything with `request(method, path, body)` returning decoded JSON
is a `KubeClient`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

#: a Prometheus sample's key: its name and its labels, sorted
SampleKey = tuple[str, tuple[tuple[str, str], ...]]

GROUP = "/apis/acidtables.io/v1alpha1"
#: the label the operator puts on the CompactionJobs it creates itself
AUTOMATIC_LABEL = "acidtables.io/automatic"

SPEC: dict[str, Any] = {
    "schema": [
        {"name": "id", "type": "bigint", "nullable": False},
        {"name": "dt", "type": "string"},
        {"name": "amount", "type": "double"},
    ],
    "partitionBy": ["dt"],
}


class KubeClient(Protocol):
    def request(self, method: str, path: str, body: Any = None) -> Any: ...


class HasLog(Protocol):
    """Whatever shows the operator's log in a failure message (a process, or pods of a Deployment)."""

    def log(self) -> str: ...


def table_resource(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "acidtables.io/v1alpha1",
        "kind": "AcidTable",
        "metadata": {"name": name},
        "spec": {**SPEC, **spec},
    }


def job_resource(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "acidtables.io/v1alpha1",
        "kind": "CompactionJob",
        "metadata": {"name": name},
        # 1 GiB: the test session's own Spark, etcd and API server share the machine with each driver
        "spec": {"table": "events", "type": "minor", "spark": {"driverMemory": "1g"}, **spec},
    }


def catalog_name(namespace: str, name: str) -> str:
    return f"{namespace.replace('-', '_')}.{name.replace('-', '_')}"


def get(api: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    """The AcidTable `name`."""
    result: dict[str, Any] = api.request("GET", f"{GROUP}/namespaces/{namespace}/acidtables/{name}")
    return result


def get_job(api: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    result: dict[str, Any] = api.request("GET", f"{GROUP}/namespaces/{namespace}/compactionjobs/{name}")
    return result


def automatic_jobs(api: KubeClient, namespace: str) -> list[dict[str, Any]]:
    items = api.request("GET", f"{GROUP}/namespaces/{namespace}/compactionjobs")["items"]
    return [j for j in items if (j["metadata"].get("labels") or {}).get(AUTOMATIC_LABEL) == "true"]


def condition(resource: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in resource.get("status", {}).get("conditions", []) if c["type"] == type_), None)


def events_for(api: KubeClient, namespace: str, name: str) -> list[dict[str, Any]]:
    items = api.request("GET", f"/api/v1/namespaces/{namespace}/events")["items"]
    return [e for e in items if e["involvedObject"].get("name") == name]


def eventually(check: Callable[[], Any], what: str, operator: HasLog, timeout_seconds: float = 60.0) -> Any:
    """Poll `check` until it returns something truthy (a deadline, not a sleep), naming `what` and
    showing the operator's log when it never does."""
    return poll(check, what, operator.log, timeout_seconds=timeout_seconds, interval_seconds=0.2)


def poll(
    check: Callable[[], Any],
    what: str,
    log: Callable[[], str],
    *,
    timeout_seconds: float,
    interval_seconds: float,
) -> Any:
    """`check`'s first truthy answer within `timeout_seconds`; else an AssertionError naming `what`,
    the last answer and the tail of `log()` (the operator's, whichever way the test runs it)."""
    deadline = time.monotonic() + timeout_seconds
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval_seconds)  # polling interval of the wait, not synchronisation
    raise AssertionError(
        f"{what} did not happen within {timeout_seconds:g} s (last: {last!r}); operator log:\n" + log()[-8000:]
    )


def metric_samples(text: str) -> dict[SampleKey, float]:
    """Every sample of a /metrics page, its value by its name and sorted labels."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
