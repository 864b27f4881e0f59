"""`acidtables release-finalizers` (operator/finalizers.py) against kmock's emulated API server: with the
operator gone, it takes only acidtables' finalizer off, so resources being deleted go, and other
controllers' finalizers stay."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import docs, envtest
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


# --- the same without the library: plain kubectl, as docs/chart.md gives it (issue 40, item 8) -------


def kubectl_binary() -> str | None:
    """kubectl on PATH, else the envtest assets' one."""
    assets = envtest.assets_dir()
    shipped = assets / "kubectl" if assets is not None else None
    return shutil.which("kubectl") or (str(shipped) if shipped is not None and shipped.exists() else None)


def test_the_plain_kubectl_loop_of_the_docs_releases_only_acidtables_finalizer(
    kube: KmockOperator, tmp_path: Path
) -> None:
    """docs/chart.md's loop, run as written by sh with a real kubectl against the emulated API server."""
    binary = kubectl_binary()
    if binary is None:
        pytest.skip(f"needs kubectl on PATH or in {envtest.ASSETS_VARIABLE}")
    (loop,) = [b.code for b in docs.blocks(docs.ROOT / "docs" / "chart.md", "sh") if "kubectl patch" in b.code]
    put(kube, "sales", "acidtables", table_resource("orders"), [OTHER, FINALIZER])
    kube.request("DELETE", f"{GROUP}/namespaces/sales/acidtables/orders")
    put(kube, "hr", "acidtables", table_resource("people"), [FINALIZER])
    put(kube, "hr", "acidtables", table_resource("theirs"), [OTHER])
    put(kube, "sales", "compactionjobs", job_resource("compact"), [FINALIZER, OTHER])
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "kubectl").symlink_to(binary)
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    done = subprocess.run(["sh", "-c", f"set -e\n{loop}"], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    tables = names(kube, "acidtables")
    assert (tables["orders"], tables["people"], tables["theirs"]) == ([OTHER], [], [OTHER])
    assert names(kube, "compactionjobs")["compact"] == [OTHER]
    assert done.stdout.count("patched") == 3, done.stdout
