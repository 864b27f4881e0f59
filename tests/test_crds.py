"""The CRDs in crds/, applied as they are to a real kube-apiserver 1.36: what it accepts and refuses.

Every schema rule and every CEL rule gets a resource that breaks it, and the server must refuse it
with that rule's own message; every example in examples/ must be accepted.
"""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]
from tests.helpers import envtest
from tests.helpers.crd_specs import job, table

ROOT = Path(__file__).resolve().parents[1]
CRDS = ROOT / "crds"
EXAMPLES = ROOT / "examples"


def refused(kube_api: envtest.KubeAPI, namespace: str, resource: dict[str, Any]) -> str:
    """The server's refusal of `resource` (kubectl's stderr); fails when the server accepts it."""
    with pytest.raises(subprocess.CalledProcessError) as caught:
        envtest.apply(kube_api, namespace, resource)
    return str(caught.value.stderr)


def without(resource: dict[str, Any], field: str) -> dict[str, Any]:
    out = copy.deepcopy(resource)
    del out["spec"][field]
    return out


def test_every_example_is_accepted(kube_api: envtest.KubeAPI, acidtables_crds: None, kube_namespace: str) -> None:
    examples = sorted(EXAMPLES.glob("*.yaml"))
    assert examples
    for path in examples:
        for document in yaml.safe_load_all(path.read_text()):
            envtest.apply(kube_api, kube_namespace, document)
    names = envtest.kubectl(kube_api, "get", "acidtables", "-n", kube_namespace, "-o", "name").split()
    # every example table (the streaming example's `clicks` among them), and nothing else
    declared = [
        f"acidtable.acidtables.io/{document['metadata']['name']}"
        for path in examples
        for document in yaml.safe_load_all(path.read_text())
        if document and document.get("kind") == "AcidTable"
    ]
    assert sorted(names) == sorted(declared) and {"clicks", "events", "orders"} <= {n.split("/")[1] for n in names}
    # the category `acid` reaches both kinds, as do the short names; the plural stays the tables alone
    listed = envtest.kubectl(kube_api, "get", "acid", "-n", kube_namespace, "-o", "name").split()
    assert sorted(listed) == sorted([*names, "compactionjob.acidtables.io/orders-major-1"])
    assert sorted(envtest.kubectl(kube_api, "get", "atbl,cjob", "-n", kube_namespace, "-o", "name").split()) == sorted(
        listed
    )


@pytest.mark.parametrize(
    ("resource", "message"),
    [
        (without(table(), "schema"), "spec.schema: Required value"),
        (table(schema=[]), "spec.schema: Invalid value: 0: spec.schema in body should have at least 1 items"),
        (table(schema=[{"name": "1bad", "type": "bigint"}]), "spec.schema[0].name in body should match"),
        (table(schema=[{"name": "id"}]), "spec.schema[0].type: Required value"),
        (table(conflictPolicy="paxos"), 'spec.conflictPolicy: Unsupported value: "paxos"'),
        (table(isolationLevel="Snapshot"), 'spec.isolationLevel: Unsupported value: "Snapshot"'),
        (table(deletionPolicy="Forget"), 'spec.deletionPolicy: Unsupported value: "Forget"'),
        (table(compaction={"minor": {"minSmallFiles": 1}}), "spec.compaction.minor.minSmallFiles: Invalid value: 1"),
        (table(compaction={"targetFileBytes": "lots"}), "spec.compaction.targetFileBytes in body should match"),
        (
            table(compaction={"major": {"quietFor": "ten minutes"}}),
            "spec.compaction.major.quietFor in body should match",
        ),
        (table(retention={"versions": 0}), "spec.retention.versions: Invalid value: 0"),
        (table(rowLevelConcurrency="yes"), 'spec.rowLevelConcurrency: Invalid value: "string"'),
        (table(partitionBy=["day"]), "every partitionBy column must be a column of the schema"),
        (table(primaryKey=["key"]), "every primaryKey column must be a column of the schema"),
        (table(conflictPolicy="maxcompute"), "conflictPolicy maxcompute needs a primaryKey"),
        (table(primaryKey=["id"], isolationLevel="Serializable"), "isolationLevel applies to the delta conflict"),
        (
            table(conflictPolicy="maxcompute-transactional", rowLevelConcurrency=True),
            "rowLevelConcurrency needs the delta conflict policy",
        ),
        (without(job(), "type"), "spec.type: Required value"),
        (without(job(), "table"), "spec.table: Required value"),
        (job(type="full"), 'spec.type: Unsupported value: "full"'),
        (job(spark={"executors": -1}), "spec.spark.executors: Invalid value: -1"),
        (job(spark={"driverMemory": "2 GB"}), "spec.spark.driverMemory in body should match"),
        (job(backoffLimit=99), "spec.backoffLimit: Invalid value: 99"),
        (job(type="cluster"), "clusterBy is required for type cluster and only allowed there"),
        (job(clusterBy=["id"]), "clusterBy is required for type cluster and only allowed there"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_a_broken_resource_is_refused_with_its_rules_message(
    kube_api: envtest.KubeAPI, acidtables_crds: None, kube_namespace: str, resource: dict[str, Any], message: str
) -> None:
    assert message in refused(kube_api, kube_namespace, resource)
    kind = resource["kind"].lower() + "s"
    assert envtest.kubectl(kube_api, "get", kind, "-n", kube_namespace, "-o", "name") == ""


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"partitionBy": []}, "partitionBy is immutable"),
        ({"primaryKey": ["id", "dt"]}, "primaryKey is immutable"),
        ({"location": "/elsewhere"}, "location is immutable"),
        ({"conflictPolicy": "maxcompute-transactional"}, "conflictPolicy is immutable"),
        (
            {"schema": [{"name": "id", "type": "bigint", "nullable": False}, {"name": "dt", "type": "string"}]},
            "schema columns may only be added",
        ),
        (
            {
                "schema": [
                    {"name": "id", "type": "bigint", "nullable": False},
                    {"name": "dt", "type": "string"},
                    {"name": "amount", "type": "string"},
                ]
            },
            "schema columns may only be added",
        ),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_an_immutable_field_changed_after_creation_is_refused(
    kube_api: envtest.KubeAPI, acidtables_crds: None, kube_namespace: str, change: dict[str, Any], message: str
) -> None:
    original = table(primaryKey=["id"], location="/lake/t", conflictPolicy="maxcompute")
    envtest.apply(kube_api, kube_namespace, original)
    changed = copy.deepcopy(original)
    changed["spec"].update(change)
    assert message in refused(kube_api, kube_namespace, changed)
    stored = json.loads(envtest.kubectl(kube_api, "get", "acidtable", "t", "-n", kube_namespace, "-o", "json"))
    assert stored["spec"]["partitionBy"] == ["dt"] and stored["metadata"]["generation"] == 1


def test_adding_a_column_is_accepted_and_bumps_the_generation(
    kube_api: envtest.KubeAPI, acidtables_crds: None, kube_namespace: str
) -> None:
    original = table()
    envtest.apply(kube_api, kube_namespace, original)
    grown = copy.deepcopy(original)
    grown["spec"]["schema"].append({"name": "note", "type": "string"})
    envtest.apply(kube_api, kube_namespace, grown)
    stored = json.loads(envtest.kubectl(kube_api, "get", "acidtable", "t", "-n", kube_namespace, "-o", "json"))
    assert [c["name"] for c in stored["spec"]["schema"]] == ["id", "dt", "amount", "note"]
    assert stored["metadata"]["generation"] == 2
    # defaults the schema declares are filled in by the server
    assert stored["spec"]["deletionPolicy"] == "Retain" and stored["spec"]["schema"][1]["nullable"] is True


def test_a_compaction_jobs_spec_cannot_change(
    kube_api: envtest.KubeAPI, acidtables_crds: None, kube_namespace: str
) -> None:
    envtest.apply(kube_api, kube_namespace, job())
    assert "a CompactionJob's spec cannot change once created" in refused(kube_api, kube_namespace, job(type="major"))


def test_status_is_written_through_its_subresource_only(
    kube_api: envtest.KubeAPI, acidtables_crds: None, kube_namespace: str
) -> None:
    envtest.apply(kube_api, kube_namespace, table())
    path = f"/apis/acidtables.io/v1alpha1/namespaces/{kube_namespace}/acidtables/t"
    kube_api.request("PATCH", path, {"status": {"version": 7}})  # the main resource ignores status
    assert (
        "status" not in kube_api.request("GET", path) or kube_api.request("GET", path)["status"].get("version") is None
    )
    kube_api.request("PATCH", path + "/status", {"status": {"version": 7}})
    stored = kube_api.request("GET", path)
    assert stored["status"]["version"] == 7 and stored["metadata"]["generation"] == 1
