"""`acidtables release-finalizers` (operator/finalizers.py) against kmock's emulated API server: with the
operator gone, it takes only acidtables' finalizer off, so resources being deleted go, and other
controllers' finalizers stay."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.kmock_operator import KmockOperator
from tests.helpers.resources import GROUP, job_resource, table_resource

from acidtables.cli.main import main
from acidtables.operator.finalizers import FINALIZER, release_finalizers

OTHER = "example.com/backup"


@pytest.fixture
def kube(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[KmockOperator]:
    """The emulator alone: no operator runs, as after `helm uninstall`."""
    kube = KmockOperator(tmp_path, "http://127.0.0.1:1", "/unused")
    try:
        yield kube.start_kube(monkeypatch.setenv)
    finally:
        kube.stop()


def put(kube: KmockOperator, namespace: str, plural: str, manifest: dict[str, Any], finalizers: list[str]) -> None:
    manifest["metadata"].update(namespace=namespace, finalizers=finalizers)
    kube.request("POST", f"{GROUP}/namespaces/{namespace}/{plural}", manifest)


def names(kube: KmockOperator, plural: str) -> dict[str, list[str]]:
    return {
        o["metadata"]["name"]: o["metadata"].get("finalizers", [])
        for o in kube.objects(f"acidtables.io/v1alpha1/{plural}")
    }


def test_deleting_a_table_without_the_operator_completes_once_released(kube: KmockOperator) -> None:
    put(kube, "sales", "acidtables", table_resource("orders"), [FINALIZER])
    kube.request("DELETE", f"{GROUP}/namespaces/sales/acidtables/orders")
    assert "orders" in names(kube, "acidtables")  # what hangs today: the finalizer holds it
    (released,) = release_finalizers()
    assert (released.kind, released.namespace, released.name, released.deleting) == (
        "AcidTable",
        "sales",
        "orders",
        True,
    )
    assert "orders" not in names(kube, "acidtables")


def test_only_acidtables_finalizer_is_removed_and_only_in_the_namespace_asked(kube: KmockOperator) -> None:
    put(kube, "sales", "acidtables", table_resource("orders"), [OTHER, FINALIZER])
    put(kube, "sales", "compactionjobs", job_resource("compact"), [FINALIZER])
    put(kube, "hr", "acidtables", table_resource("people"), [FINALIZER])
    released = release_finalizers("sales")
    assert sorted((r.kind, r.name) for r in released) == [("AcidTable", "orders"), ("CompactionJob", "compact")]
    tables = names(kube, "acidtables")
    assert tables["orders"] == [OTHER] and tables["people"] == [FINALIZER]
    assert names(kube, "compactionjobs")["compact"] == []


def test_a_dry_run_changes_nothing(kube: KmockOperator) -> None:
    put(kube, "sales", "acidtables", table_resource("orders"), [FINALIZER])
    assert [r.name for r in release_finalizers(dry_run=True)] == ["orders"]
    assert names(kube, "acidtables")["orders"] == [FINALIZER]


def test_the_cli_command_renders_json(kube: KmockOperator, capsys: pytest.CaptureFixture[str]) -> None:
    put(kube, "sales", "acidtables", table_resource("orders"), [FINALIZER, OTHER])
    kube.request("DELETE", f"{GROUP}/namespaces/sales/acidtables/orders")
    assert main(["release-finalizers", "--namespace", "sales", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document == {
        "namespace": "sales",
        "dry_run": False,
        "released": [
            {"kind": "AcidTable", "namespace": "sales", "name": "orders", "deleting": True, "other_finalizers": [OTHER]}
        ],
    }
