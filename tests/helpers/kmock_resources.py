"""What the kmock-tier operator tests do to resources: create and read them in the test namespace, wait
for a condition or an Event with a deadline ("within seconds", issue 25 item 5), find a job's driver
pod, and play the kubelet on it. Shared by tests/test_operator_kmock.py and tests/test_spark_rbac.py."""

from __future__ import annotations

import json
from typing import Any

from tests.helpers.kmock_operator import KmockOperator
from tests.helpers.resources import GROUP, condition, table_resource

NS = "sales"
#: what a condition, an Event or a pod must appear within: "within seconds" (issue 25, item 5)
SECONDS = 10.0


def create(op: KmockOperator, plural: str, manifest: dict[str, Any]) -> dict[str, Any]:
    manifest["metadata"]["namespace"] = NS
    created: dict[str, Any] = op.request("POST", f"{GROUP}/namespaces/{NS}/{plural}", manifest)
    return created


def get(op: KmockOperator, plural: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = op.request("GET", f"{GROUP}/namespaces/{NS}/{plural}/{name}")
    return found


def with_condition(op: KmockOperator, plural: str, name: str, type_: str, status: str = "True") -> Any:
    def check() -> dict[str, Any] | None:
        resource = get(op, plural, name)
        found = condition(resource, type_)
        return resource if found is not None and found["status"] == status else None

    return op.eventually(check, f"{plural}/{name} has {type_}={status}", SECONDS)


def events(op: KmockOperator, name: str) -> list[dict[str, Any]]:
    return [e for e in op.objects("v1/events", NS) if e.get("involvedObject", {}).get("name") == name]


def event_with(op: KmockOperator, name: str, reason: str) -> dict[str, Any]:
    found: dict[str, Any] = op.eventually(
        lambda: next((e for e in events(op, name) if e.get("reason") == reason), None),
        f"an Event {reason} on {name}",
        SECONDS,
    )
    return found


def ready_table(op: KmockOperator, name: str = "orders", **spec: Any) -> dict[str, Any]:
    create(op, "acidtables", table_resource(name, **spec))
    ready: dict[str, Any] = with_condition(op, "acidtables", name, "Ready")
    return ready


def driver_pod(op: KmockOperator, job: str, attempt: int = 1) -> dict[str, Any]:
    name = f"{job}-driver-{attempt}"
    found: dict[str, Any] = op.eventually(
        lambda: next((p for p in op.objects("v1/pods", NS) if p["metadata"]["name"] == name), None),
        f"driver pod {name}",
        SECONDS,
    )
    return found


def container(state: dict[str, Any]) -> dict[str, Any]:
    """A driver container's status, with the fields a kubelet always fills in."""
    return {"name": "driver", "image": "acidtables-test:1", "imageID": "", "ready": False, "restartCount": 0,
            "state": state}  # fmt: skip


def play_kubelet(op: KmockOperator, pod: str, phase: str, outcome: dict[str, Any] | None = None) -> None:
    """What a kubelet reports: the phase, and the driver's termination message once it ended."""
    status: dict[str, Any] = {"phase": phase}
    if phase in ("Succeeded", "Failed"):
        terminated = {"exitCode": 0 if phase == "Succeeded" else 1, "reason": "Completed" if phase == "Succeeded"
                      else "Error", "message": json.dumps(outcome) if outcome is not None else ""}  # fmt: skip
        status["containerStatuses"] = [container({"terminated": terminated})]
    op.request("PATCH", f"/api/v1/namespaces/{NS}/pods/{pod}/status", {"status": status})
