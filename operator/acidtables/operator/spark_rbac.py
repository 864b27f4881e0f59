"""The ServiceAccount, Role and RoleBinding Spark's driver needs in a job's namespace, which the operator
creates before a job's first driver pod there (issue 25, item 4: with `watchNamespaces: []` the chart
creates them only in the release namespace, so a job anywhere else failed with `serviceaccount not found`).

The rules are exactly the chart's (files/spark-rules.yaml, which its Role and the operator's rights
both read; tests/test_spark_rbac.py checks that the two say the same): the calls Spark's Kubernetes
scheduler makes in client mode for executors, in that namespace only. Creating a Role needs holding
its rights (Kubernetes' RBAC escalation check), so the operator's ClusterRole holds these too, and
nothing more.

The objects are labelled `app.kubernetes.io/managed-by: acidtables-operator`, so an uninstall finds them
(docs/chart.md, Uninstalling). Existing objects of that name are left as they are: the chart's, or an
administrator's, stay theirs.
"""

from __future__ import annotations

from typing import Any

#: what Spark's driver does in its namespace (charts/acidtables/files/spark-rules.yaml says why each)
SPARK_RULES: tuple[dict[str, Any], ...] = (
    {
        "apiGroups": [""],
        "resources": ["pods"],
        "verbs": ["get", "list", "watch", "create", "patch", "delete", "deletecollection"],
    },
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "deletecollection"]},
    {"apiGroups": [""], "resources": ["services"], "verbs": ["deletecollection"]},
)

MANAGED_BY = {"app.kubernetes.io/managed-by": "acidtables-operator", "app.kubernetes.io/name": "acidtables"}


def manifests(namespace: str, name: str) -> list[dict[str, Any]]:
    """The ServiceAccount `name`, its Role and its RoleBinding in `namespace`, in creation order."""
    meta = {"name": name, "namespace": namespace, "labels": dict(MANAGED_BY)}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": dict(meta)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": dict(meta),
            "rules": [dict(rule) for rule in SPARK_RULES],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": dict(meta),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
    ]


__all__ = ["MANAGED_BY", "SPARK_RULES", "manifests"]
