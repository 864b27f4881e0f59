"""Minimal AcidTable and CompactionJob resources for the CRD tests (the real API server's in
test_crds.py, the CEL library's in test_crd_rules.py): each test changes only what it is about."""

from __future__ import annotations

from typing import Any


def table(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "schema": [
            {"name": "id", "type": "bigint", "nullable": False},
            {"name": "dt", "type": "string"},
            {"name": "amount", "type": "double"},
        ],
        "partitionBy": ["dt"],
    }
    base.update(spec)
    return {"apiVersion": "acidtables.io/v1alpha1", "kind": "AcidTable", "metadata": {"name": "t"}, "spec": base}


def job(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"table": "orders", "type": "minor"}
    base.update(spec)
    return {"apiVersion": "acidtables.io/v1alpha1", "kind": "CompactionJob", "metadata": {"name": "j"}, "spec": base}
