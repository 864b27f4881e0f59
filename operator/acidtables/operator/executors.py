"""What Spark's executor pods get from the driver pod (issue 25, item 2).

Spark's Kubernetes scheduler builds executor pods itself: the image, its `executor` argument, the
driver's address, cores and memory. Everything else an executor needs to read and write the table is
what the operator gave the driver pod: the warehouse volume, the etcd TLS secret, the settings and the
secrets' environment, the user and fsGroup, the ServiceAccount and pull secrets. Spark takes those from
a pod template file; the operator derives the template from the driver pod it creates (one definition,
so the two cannot drift), and hands it to the driver in an environment variable, which the job writes to
a file for `spark.kubernetes.executor.podTemplateFile`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

#: the environment variable carrying the template (JSON) into the driver container
TEMPLATE_VARIABLE = "ACIDTABLES_EXECUTOR_POD_TEMPLATE"
#: the template's container: Spark's `spark.kubernetes.executor.podTemplateContainerName`
CONTAINER_NAME = "executor"
#: driver-only settings an executor must not inherit (its own memory is Spark's to set)
_DRIVER_ONLY_ENV = frozenset({"SPARK_DRIVER_MEMORY", TEMPLATE_VARIABLE})
_POD_FIELDS = ("securityContext", "serviceAccountName", "imagePullSecrets", "volumes", "nodeSelector", "tolerations")
_CONTAINER_FIELDS = ("volumeMounts", "securityContext")


def executor_template(driver: Mapping[str, Any]) -> dict[str, Any]:
    """The executor pod template for a driver pod manifest: its pod-level settings and its container's
    environment, mounts and security context, under the container name Spark is told to use."""
    spec = driver["spec"]
    container = spec["containers"][0]
    # a failed executor's last log lines become its terminated state's message, which the operator
    # keeps on the job (executor_failures): Spark deletes the pod, and its own error does not say why
    executor: dict[str, Any] = {"name": CONTAINER_NAME, "terminationMessagePolicy": "FallbackToLogsOnError"}
    env = [e for e in container.get("env", ()) if e["name"] not in _DRIVER_ONLY_ENV]
    if env:
        executor["env"] = env
    executor.update({key: container[key] for key in _CONTAINER_FIELDS if key in container})
    pod_spec: dict[str, Any] = {key: spec[key] for key in _POD_FIELDS if key in spec}
    pod_spec["containers"] = [executor]
    labels = {key: value for key, value in driver["metadata"].get("labels", {}).items()}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": labels}, "spec": pod_spec}


def attach_executor_template(driver: dict[str, Any]) -> None:
    """Give the driver container its executors' template (call once the driver pod is complete)."""
    template = json.dumps(executor_template(driver), separators=(",", ":"), sort_keys=True)
    driver["spec"]["containers"][0].setdefault("env", []).append({"name": TEMPLATE_VARIABLE, "value": template})


__all__ = ["CONTAINER_NAME", "TEMPLATE_VARIABLE", "attach_executor_template", "executor_template"]
