"""The documented path on kind (docs/kubernetes.md), checked for agreement end to end (issue 30, items
6-9): the image name its build commands produce is the one the kind values run, `kubectl get acidtables`
shows the columns the page promises, every example runs on the values the page installs with, and the
pods of its compaction fit a small node.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]
from tests.helpers.helm import render, require_helm_python

from acidtables.operator.config import OperatorConfig
from acidtables.operator.pods import driver_pod

ROOT = Path(__file__).resolve().parents[1]
KUBERNETES = (ROOT / "docs" / "kubernetes.md").read_text()
KIND_VALUES = yaml.safe_load((ROOT / "charts" / "acidtables" / "values-kind.yaml").read_text())
#: what the quick start on kind installs: release `acidtables` in namespace `sales`
RELEASE, NAMESPACE = "acidtables", "sales"


def quick_start() -> list[list[str]]:
    """The shell commands of the "Quick start on kind" block, as words."""
    block = KUBERNETES.split("## Quick start on kind\n", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return [shlex.split(line, comments=True) for line in block.splitlines() if line.strip()]


def stored_by_docker(reference: str) -> str:
    """The name Docker, containerd and the kubelet give a reference: without a registry host (a first
    part with a dot or a port, or `localhost`), Docker Hub's."""
    first, _, rest = reference.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return reference
    return f"docker.io/{reference}" if rest else f"docker.io/library/{reference}"


def stored_by_podman(reference: str) -> str:
    """The name buildah and podman give an image they build under an unqualified name: `localhost/`."""
    first, _, rest = reference.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return reference
    return f"localhost/{reference}"


def kind_image() -> str:
    """The image the kind values run, as the node's kubelet resolves it."""
    return stored_by_docker(f"{KIND_VALUES['image']['repository']}:{KIND_VALUES['image']['tag']}")


def test_every_build_path_of_the_readme_names_the_image_the_kind_values_run() -> None:
    commands = quick_start()
    built = [words[words.index("-t") + 1] for words in commands if words[:2] == ["docker", "build"]]
    loaded = [words[-1] for words in commands if words[:3] == ["kind", "load", "docker-image"]]
    assert built and loaded
    # what is built is what kind runs, and it is loaded (beside the bundled etcd's image, which
    # test_chart_render's test_the_quick_start_loads_every_image_the_kind_install_runs checks)
    assert {stored_by_docker(name) for name in built} == {kind_image()}
    assert kind_image() in {stored_by_docker(name) for name in loaded}
    # the path without Docker: `make image IMAGE=...` (buildah), then podman save and kind load image-archive
    made = re.findall(r"`make image IMAGE=(\S+)`", KUBERNETES)
    saved = re.findall(r"podman save -o \S+ (\S+?)\s*&&", KUBERNETES)
    assert made and saved
    assert {stored_by_podman(name) for name in made} == {kind_image()}
    assert kind_image() in {stored_by_podman(name) for name in saved}


def test_kubectl_get_acidtables_shows_every_column_the_readme_promises() -> None:
    line = next(line for line in KUBERNETES.splitlines() if line.startswith("kubectl get -n sales acidtables "))
    promised = [word.strip().lower() for word in line.split("#", 1)[1].split(",")]
    crd = yaml.safe_load((ROOT / "crds" / "acidtables.io_acidtables.yaml").read_text())
    columns = [c["name"].lower() for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert [name for name in promised if name not in columns] == []
    assert "rows" in columns  # the table's live rows: what a read returns


@pytest.fixture(scope="module")
def kind_release() -> list[dict[str, Any]]:
    """The chart rendered as the quick start installs it on kind."""
    (answer,) = render(require_helm_python(), RELEASE, NAMESPACE, ROOT / "charts" / "acidtables", [KIND_VALUES])
    assert answer["ok"], answer
    return [doc for doc in yaml.safe_load_all(answer["manifest"]) if doc]


def _operator(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


def test_every_example_runs_on_the_kind_values_as_written(kind_release: list[dict[str, Any]]) -> None:
    """A pod in an example runs the release's image, reaches its etcd under its prefix, and finds the
    warehouse where the operator does (the same claim at the same path)."""
    operator = _operator(kind_release)
    env = {e["name"]: e.get("value") for e in operator["env"]}
    assert stored_by_docker(operator["image"]) == kind_image()
    pods = 0
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") not in ("Job", "Pod", "Deployment"):
                continue
            spec = doc["spec"]["template"]["spec"] if "template" in doc["spec"] else doc["spec"]
            volumes = {v["name"]: v for v in spec.get("volumes", [])}
            for container in spec["containers"]:
                pods += 1
                assert stored_by_docker(container["image"]) == kind_image(), path.name
                theirs = {e["name"]: e.get("value") for e in container.get("env", [])}
                for name in ("ACIDTABLES_ETCD_ENDPOINTS", "ACIDTABLES_ETCD_PREFIX", "ACIDTABLES_WAREHOUSE"):
                    assert theirs.get(name) == env[name], f"{path.name}: {name}"
                mounts = {m["mountPath"]: volumes[m["name"]] for m in container.get("volumeMounts", [])}
                warehouse = mounts.get(env["ACIDTABLES_WAREHOUSE"])
                assert warehouse is not None, f"{path.name} does not mount the warehouse"
                assert warehouse["persistentVolumeClaim"] == KIND_VALUES["warehouse"]["volume"]["persistentVolumeClaim"]
    assert pods >= 1


def _cpu(quantity: str) -> float:
    return float(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


def test_the_readme_compaction_with_executors_fits_a_two_core_kind_node(kind_release: list[dict[str, Any]]) -> None:
    """kind's control plane requests about 0.95 CPU of a 2-core node; the release's operator and etcd,
    the example's driver and its executors must fit in what is left, with Spark's memory overhead
    counted in the driver's request."""
    job = yaml.safe_load((ROOT / "examples" / "compaction.yaml").read_text())
    job["metadata"].update({"namespace": NAMESPACE, "uid": "0" * 8})
    spark = job["spec"]["spark"]
    assert spark["executors"] >= 2  # the kind path reaches the end with executors
    pod = driver_pod(job, 1, "sales.orders", OperatorConfig(job_image=kind_image()))
    requests = pod["spec"]["containers"][0]["resources"]["requests"]
    command = pod["spec"]["containers"][0]["command"]
    conf = dict(command[i + 1].split("=", 1) for i, word in enumerate(command) if word == "--conf")
    executor_cpu = _cpu(conf["spark.kubernetes.executor.request.cores"])
    release = [
        _cpu(c["resources"]["requests"]["cpu"])
        for d in kind_release
        if d["kind"] in ("Deployment", "StatefulSet")
        for c in d["spec"]["template"]["spec"]["containers"]
    ]
    total = sum(release) + _cpu(requests["cpu"]) + spark["executors"] * executor_cpu
    assert round(total, 3) <= 2.0 - 0.95, f"requests of {total:.2f} CPU do not fit beside kind's control plane"
    heap_mib = int(spark["driverMemory"].rstrip("g")) * 1024
    assert requests["memory"] == f"{heap_mib + max(384, heap_mib // 10)}Mi"
