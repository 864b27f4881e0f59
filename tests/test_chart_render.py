"""The chart as Helm's own engine renders it, with no API server: every manifest of every documented
values combination is valid Kubernetes 1.36, the bundled etcd comes up on one node, its member count
cannot be changed under it, and NOTES print commands that fit the values.

Helm (helm-sdkpy, Python 3.12) installs and upgrades against tests/helpers/helm_stub_api.py, which
answers discovery and keeps what Helm creates, so templates' `lookup` sees an earlier release; the
manifests are then checked with kubernetes-validate's OpenAPI schemas of Kubernetes 1.36 in strict mode
(unknown fields are errors). What only a real API server shows (admission, defaulting, CRD
establishment, RBAC escalation checks) is tests/test_chart.py's, where KUBEBUILDER_ASSETS is set.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import celpy
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml  # type: ignore[import-untyped]
from celpy.adapter import json_to_cel
from kubernetes_validate.utils import all_versions  # type: ignore[import-untyped]
from tests.helpers import docs as doc_pages
from tests.helpers.helm import render, require_helm_python

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "acidtables"
RELEASE, NAMESPACE = "lake", "acidtables"
ETCD = f"{RELEASE}-acidtables-etcd"
#: the release the issue asks for; kubernetes-validate 1.37.0 ships its schemas (and 1.37's)
KUBERNETES = "1.36"
#: kinds of the Prometheus operator: kubernetes-validate has no schema for them (they are not
#: Kubernetes'), and their CRDs are not vendored here, so only their presence is checked
NOT_KUBERNETES = {"monitoring.coreos.com/v1"}
SCHEMA_REFUSAL = "values don't meet the specifications of the schema"

#: each combination docs/chart.md and values.yaml document
COMBINATIONS: dict[str, dict[str, Any]] = {
    "single-node-defaults": {},
    "external-etcd-tls": {
        "etcd": {
            "bundled": {"enabled": False},
            "external": {
                "endpoints": ["https://etcd-0.etcd.db:2379", "https://etcd-1.etcd.db:2379"],
                "credentialsSecret": "etcd-auth",
                "tlsSecret": "etcd-tls",
                "clientCertificate": True,
            },
        }
    },
    "bundled-etcd-tls": {"etcd": {"bundled": {"tls": {"enabled": True, "secretName": "etcd-server-tls"}}}},
    "warehouse-volume": {
        "warehouse": {"location": "/warehouse", "volume": {"persistentVolumeClaim": {"claimName": "lake"}}}
    },
    "warehouse-host-path": {
        "warehouse": {
            "location": "/warehouse",
            "volume": {"hostPath": {"path": "/var/lib/acidtables", "type": "DirectoryOrCreate"}},
        }
    },
    "object-store": {
        "warehouse": {
            "location": "s3a://lake/warehouse",
            "s3": {"endpoint": "http://minio.storage:9000", "region": "eu-west-1", "credentialsSecret": "lake-s3"},
        }
    },
    "watch-namespaces": {"watchNamespaces": ["sales", "data-team"]},
    "etcd-3-members": {"etcd": {"bundled": {"replicas": 3}}},
    "etcd-5-members-required-spread": {"etcd": {"bundled": {"replicas": 5, "antiAffinity": "required"}}},
    "operator-standby-no-metrics-service": {"replicas": 2, "metrics": {"enabled": False}},
    "prometheus-operator": {"metrics": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}}},
    # the quick start on kind (docs/kubernetes.md), as the file it installs with
    "readme-kind": yaml.safe_load(
        (Path(__file__).resolve().parents[1] / "charts" / "acidtables" / "values-kind.yaml").read_text()
    ),
}


@pytest.fixture(scope="module")
def helm_python() -> Path:
    return require_helm_python()


@pytest.fixture(scope="module")
def rendered(helm_python: Path) -> Callable[[str], dict[str, Any]]:
    """One Helm install per combination, rendered on first use and shared by the module's tests."""

    @cache
    def one(combination: str) -> dict[str, Any]:
        (answer,) = render(helm_python, RELEASE, NAMESPACE, CHART, [COMBINATIONS[combination]])
        assert answer["ok"], answer["error"]
        return answer

    return one


def documents(manifest: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(manifest) if d]


def only(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind]
    return found


def invalid(doc: dict[str, Any]) -> str | None:
    """kubernetes-validate's complaint about one object under Kubernetes 1.36's schemas, or None."""
    try:
        used = kubernetes_validate.validate(doc, KUBERNETES, strict=True)
    except kubernetes_validate.ValidationError as error:
        return f"{doc['kind']} {doc['metadata']['name']}: {error.message} at {'.'.join(map(str, error.path))}"
    assert used == KUBERNETES  # the schemas of that release, not an older fallback
    return None


def test_the_validator_has_the_kubernetes_schemas_ci_validates_against() -> None:
    # validate() would quietly fall back to the newest release it has below the one asked for
    assert KUBERNETES in {re.sub(r"^(\d+\.\d+).*", r"\1", v) for v in all_versions()}


@pytest.mark.parametrize("combination", COMBINATIONS)
def test_every_rendered_manifest_is_valid_kubernetes(
    rendered: Callable[[str], dict[str, Any]], combination: str
) -> None:
    docs = documents(rendered(combination)["manifest"])
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "ServiceAccount", "CustomResourceDefinition"} <= kinds
    checked = [d for d in docs if d["apiVersion"] not in NOT_KUBERNETES]
    assert [problem for d in checked if (problem := invalid(d))] == []
    # every namespaced object lands in the release namespace or a watched one
    namespaces = {NAMESPACE, *COMBINATIONS[combination].get("watchNamespaces", [])}
    assert {d["metadata"]["namespace"] for d in docs if "namespace" in d["metadata"]} <= namespaces


def test_the_validator_refuses_a_broken_manifest(rendered: Callable[[str], dict[str, Any]]) -> None:
    """The check above can fail: a port as a word, and a misspelt field, are each refused."""
    deployment = only(documents(rendered("single-node-defaults")["manifest"]), "Deployment")
    assert invalid(deployment) is None
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["ports"][0]["containerPort"] = "metrics"
    assert "containerPort" in (invalid(deployment) or "")
    container["ports"][0]["containerPort"] = 9108
    container["imagePullPolicy "] = "Always"
    assert invalid(deployment) is not None


def test_the_prometheus_operator_kinds_are_rendered_where_enabled(rendered: Callable[[str], dict[str, Any]]) -> None:
    docs = documents(rendered("prometheus-operator")["manifest"])
    assert sorted(d["kind"] for d in docs if d["apiVersion"] in NOT_KUBERNETES) == ["PrometheusRule", "ServiceMonitor"]
    defaults = documents(rendered("single-node-defaults")["manifest"])
    assert [d for d in defaults if d["apiVersion"] in NOT_KUBERNETES] == []


# --- the bundled etcd ----------------------------------------------------------------------------------


def etcd_of(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], list[str]]:
    statefulset = only(docs, "StatefulSet")
    return statefulset, statefulset["spec"]["template"]["spec"]["containers"][0]["command"]


def operator_env(docs: list[dict[str, Any]]) -> dict[str, Any]:
    container = only(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value") for e in container["env"]}


def test_by_default_one_etcd_member_with_a_preferred_spread_and_no_disruption_budget(
    rendered: Callable[[str], dict[str, Any]],
) -> None:
    docs = documents(rendered("single-node-defaults")["manifest"])
    statefulset, command = etcd_of(docs)
    assert statefulset["spec"]["replicas"] == 1
    anti = statefulset["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    # preferred only: a single node can hold every member, nothing stays Pending
    assert list(anti) == ["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]["topologyKey"] == (
        "kubernetes.io/hostname"
    )
    assert f"--initial-cluster={ETCD}-0=http://{ETCD}-0.{ETCD}.{NAMESPACE}.svc:2380" in command
    assert [d for d in docs if d["kind"] == "PodDisruptionBudget"] == []
    assert operator_env(docs)["ACIDTABLES_ETCD_ENDPOINTS"] == f"http://{ETCD}-0.{ETCD}.{NAMESPACE}.svc:2379"


def test_three_etcd_members_keep_a_quorum_through_disruptions(rendered: Callable[[str], dict[str, Any]]) -> None:
    docs = documents(rendered("etcd-3-members")["manifest"])
    statefulset, command = etcd_of(docs)
    assert statefulset["spec"]["replicas"] == 3
    (initial,) = [c for c in command if c.startswith("--initial-cluster=")]
    assert [m.split("=")[0] for m in initial.removeprefix("--initial-cluster=").split(",")] == [
        f"{ETCD}-0",
        f"{ETCD}-1",
        f"{ETCD}-2",
    ]
    budget = only(docs, "PodDisruptionBudget")
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"] == statefulset["spec"]["selector"]["matchLabels"]
    assert len(operator_env(docs)["ACIDTABLES_ETCD_ENDPOINTS"].split(",")) == 3


def test_a_required_spread_puts_no_two_members_on_one_node(rendered: Callable[[str], dict[str, Any]]) -> None:
    statefulset, _ = etcd_of(documents(rendered("etcd-5-members-required-spread")["manifest"]))
    anti = statefulset["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert list(anti) == ["requiredDuringSchedulingIgnoredDuringExecution"]
    assert (
        anti["requiredDuringSchedulingIgnoredDuringExecution"][0]["labelSelector"]["matchLabels"]
        == (statefulset["spec"]["selector"]["matchLabels"])
    )


@pytest.mark.parametrize(
    ("bundled", "reason"),
    [({"replicas": 2}, "replicas"), ({"replicas": 4}, "replicas"), ({"antiAffinity": "soft"}, "antiAffinity")],
    ids=["2 members", "4 members", "unknown spread"],
)
def test_a_member_count_without_a_majority_gain_is_refused_by_the_schema(
    helm_python: Path, bundled: dict[str, Any], reason: str
) -> None:
    (answer,) = render(helm_python, RELEASE, NAMESPACE, CHART, [{"etcd": {"bundled": bundled}}])
    assert not answer["ok"]
    assert SCHEMA_REFUSAL in answer["error"] and reason in answer["error"]


@pytest.mark.parametrize(("installed", "upgraded"), [(1, 3), (3, 1), (3, 5)])
def test_an_upgrade_that_changes_the_member_count_is_refused_saying_what_to_do(
    helm_python: Path, installed: int, upgraded: int
) -> None:
    steps = [{"etcd": {"bundled": {"replicas": n}}} for n in (installed, upgraded)]
    first, second = render(helm_python, RELEASE, NAMESPACE, CHART, steps)
    assert first["ok"], first["error"]
    assert not second["ok"]
    error = second["error"]
    assert f"etcd.bundled.replicas is {upgraded}" in error
    assert f"created as a {installed}-member cluster" in error and f"Keep etcd.bundled.replicas={installed}" in error
    assert "etcdctl snapshot save" in error and "etcdutl snapshot restore" in error
    names = " ".join(f"data-{ETCD}-{i}" for i in range(installed))
    assert f"kubectl delete pvc -n {NAMESPACE} {names}" in error


def test_an_upgrade_that_keeps_the_member_count_goes_through(helm_python: Path) -> None:
    steps: list[dict[str, Any]] = [
        {"etcd": {"bundled": {"replicas": 3}}},
        {"etcd": {"bundled": {"replicas": 3}}, "replicas": 2},
    ]
    assert [answer["ok"] for answer in render(helm_python, RELEASE, NAMESPACE, CHART, steps)] == [True, True]


def test_a_statefulset_scaled_by_hand_still_counts_the_members_it_was_created_with(helm_python: Path) -> None:
    """`kubectl scale` changes spec.replicas, not the membership in the volumes: the flag tells."""
    (installed,) = render(helm_python, RELEASE, NAMESPACE, CHART, [{"etcd": {"bundled": {"replicas": 3}}}])
    statefulset = only(documents(installed["manifest"]), "StatefulSet")
    statefulset["spec"]["replicas"] = 1
    (answer,) = render(
        helm_python, RELEASE, NAMESPACE, CHART, [{"etcd": {"bundled": {"replicas": 1}}}], objects=[statefulset]
    )
    assert not answer["ok"] and "created as a 3-member cluster" in answer["error"]


def claims(*names: str) -> list[dict[str, Any]]:
    return [
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": n, "namespace": NAMESPACE}}
        for n in names
    ]


@pytest.mark.parametrize(
    ("left", "replicas"),
    [((0, 1, 2), 1), ((0,), 3), ((0, 1, 2), 5)],
    ids=["3 claims, 1 member", "1 claim, 3 members", "3 claims, 5 members"],
)
def test_an_install_over_claims_of_an_etcd_of_another_size_is_refused(
    helm_python: Path, left: tuple[int, ...], replicas: int
) -> None:
    names = [f"data-{ETCD}-{i}" for i in left]
    (answer,) = render(
        helm_python, RELEASE, NAMESPACE, CHART, [{"etcd": {"bundled": {"replicas": replicas}}}], claims(*names)
    )
    assert not answer["ok"]
    assert f"etcd.bundled.replicas is {replicas}" in answer["error"] and ", ".join(names) in answer["error"]
    assert f"kubectl delete pvc -n {NAMESPACE} {' '.join(names)}" in answer["error"]


def test_an_install_over_claims_of_the_same_size_or_of_other_releases_goes_through(helm_python: Path) -> None:
    """A re-install after `helm uninstall` (which keeps the claims) with the same count brings the data back."""
    left = claims(*(f"data-{ETCD}-{i}" for i in range(3)), "data-other-acidtables-etcd-0", f"data-{ETCD}-x-0")
    (answer,) = render(helm_python, RELEASE, NAMESPACE, CHART, [{"etcd": {"bundled": {"replicas": 3}}}], left)
    assert answer["ok"], answer["error"]
    external = COMBINATIONS["external-etcd-tls"]
    (answer,) = render(helm_python, RELEASE, NAMESPACE, CHART, [external], claims(f"data-{ETCD}-0"))
    assert answer["ok"], answer["error"]  # no bundled etcd: its old claims are not this chart's concern


# --- NOTES ---------------------------------------------------------------------------------------------


def commands(notes: str) -> list[str]:
    return [line.strip() for line in notes.splitlines() if line.strip().startswith(("kubectl ", "curl "))]


def test_notes_name_examples_that_exist_and_the_resources_they_create(
    rendered: Callable[[str], dict[str, Any]],
) -> None:
    lines = commands(rendered("single-node-defaults")["notes"])
    created: set[str] = set()
    for line in lines:
        if match := re.search(r" -f (\S+)", line):
            for doc in documents((ROOT / match.group(1)).read_text()):
                created.add(f"{doc['kind'].lower()}/{doc['metadata']['name']}")
    waited = {m.group(1) for line in lines if (m := re.search(r"kubectl wait .* (\S+/\S+)", line))}
    assert waited and waited <= created
    # a job's wait ends on any outcome: Finished, which the operator sets on success and failure alike
    job_waits = [line for line in lines if line.startswith("kubectl wait") and "compactionjob/" in line]
    assert job_waits and all("--for=condition=Finished" in line for line in job_waits)


def test_notes_on_one_node_use_the_release_namespace_and_the_metrics_service(
    rendered: Callable[[str], dict[str, Any]],
) -> None:
    notes = rendered("single-node-defaults")["notes"]
    lines = commands(notes)
    assert f"kubectl get pods -n {NAMESPACE} -l app.kubernetes.io/instance={RELEASE}" in lines
    assert f"kubectl rollout status -n {NAMESPACE} statefulset/{ETCD}" in lines
    assert f"kubectl apply -n {NAMESPACE} -f examples/orders.yaml" in lines
    assert f"kubectl port-forward -n {NAMESPACE} service/{RELEASE}-acidtables-metrics 9108:9108" in lines
    assert "one member: no fault tolerance" in notes


def test_notes_follow_watched_namespaces_external_etcd_and_a_disabled_metrics_service(
    rendered: Callable[[str], dict[str, Any]],
) -> None:
    watched = commands(rendered("watch-namespaces")["notes"])
    assert "kubectl apply -n sales -f examples/orders.yaml" in watched
    external = rendered("external-etcd-tls")["notes"]
    assert "https://etcd-0.etcd.db:2379" in external and "statefulset/" not in external
    standby = commands(rendered("operator-standby-no-metrics-service")["notes"])
    assert f"kubectl port-forward -n {NAMESPACE} deployment/{RELEASE}-acidtables-operator 9108:9108" in standby
    assert not [line for line in standby if "service/" in line]
    assert "Secret lake-s3 must exist" in rendered("object-store")["notes"]


def job_image(docs: list[dict[str, Any]]) -> tuple[str, str]:
    """(the operator container's image, the job image it hands to driver pods)."""
    container = only(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    return container["image"], env["ACIDTABLES_JOB_IMAGE"]


def test_the_jobs_run_the_operators_image_unless_told_otherwise(rendered: Callable[[str], dict[str, Any]]) -> None:
    """One image runs the operator and the jobs: the kind install (docs/kubernetes.md) names it once."""
    operator, jobs = job_image(documents(rendered("readme-kind")["manifest"]))
    assert operator == jobs == "localhost/acidtables:0.1.0"
    default_operator, default_jobs = job_image(documents(rendered("single-node-defaults")["manifest"]))
    assert default_operator == default_jobs


def test_the_readme_kind_install_mounts_its_claim_in_the_operator(rendered: Callable[[str], dict[str, Any]]) -> None:
    docs = documents(rendered("readme-kind")["manifest"])
    pod = only(docs, "Deployment")["spec"]["template"]["spec"]
    claims = [v["persistentVolumeClaim"]["claimName"] for v in pod.get("volumes", []) if "persistentVolumeClaim" in v]
    assert claims == ["warehouse"]


def test_a_job_waits_for_its_table_as_long_as_the_chart_says(rendered: Callable[[str], dict[str, Any]]) -> None:
    """tableWaitTimeoutSeconds reaches the operator (issue 40, item 1): a job applied with its table waits
    that long for it to be Ready before it fails with NoTable."""
    env = operator_env(documents(rendered("single-node-defaults")["manifest"]))
    assert env["ACIDTABLES_TABLE_WAIT_TIMEOUT_SECONDS"] == env["ACIDTABLES_DRIVER_START_TIMEOUT_SECONDS"] == "300"


def test_executors_get_the_start_deadline_the_chart_says(rendered: Callable[[str], dict[str, Any]]) -> None:
    """executorStartTimeoutSeconds reaches the operator (issue 40, item 2): a running driver whose
    executors have not started by then fails its job instead of waiting for ever."""
    env = operator_env(documents(rendered("single-node-defaults")["manifest"]))
    assert env["ACIDTABLES_EXECUTOR_START_TIMEOUT_SECONDS"] == "300"


def test_the_bundled_etcd_and_the_operator_agree_on_the_transaction_limits(
    rendered: Callable[[str], dict[str, Any]],
) -> None:
    """etcd.maxTxnOps / maxRequestBytes start the bundled etcd and reach the operator (which passes them to
    its jobs), so the number of tables one multi-table transaction may hold is etcd's own (issue 44)."""
    docs = documents(rendered("single-node-defaults")["manifest"])
    etcd = only(docs, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]["command"]
    assert "--max-txn-ops=128" in etcd and "--max-request-bytes=1572864" in etcd
    env = operator_env(docs)
    assert (env["ACIDTABLES_ETCD_MAX_TXN_OPS"], env["ACIDTABLES_ETCD_MAX_REQUEST_BYTES"]) == ("128", "1572864")


# --- resources outside the watched namespaces (issue 40, item 5) ----------------------------------


def admission(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The release's ValidatingAdmissionPolicy and its binding."""
    return only(docs, "ValidatingAdmissionPolicy"), only(docs, "ValidatingAdmissionPolicyBinding")


def admitted(policy: dict[str, Any], namespace: str, kind: str = "CompactionJob") -> tuple[bool, str]:
    """What the API server decides for a creation in `namespace`: (allowed, the message if refused),
    the policy's CEL evaluated with cel-python as tests/test_crd_rules.py evaluates the CRDs' rules."""
    (validation,) = policy["spec"]["validations"]
    request = json_to_cel(
        {"namespace": namespace, "name": "orders-major-1", "operation": "CREATE",
         "kind": {"group": "acidtables.io", "version": "v1alpha1", "kind": kind}}
    )  # fmt: skip
    environment = celpy.Environment()
    allowed = environment.program(environment.compile(validation["expression"])).evaluate({"request": request})
    message = environment.program(environment.compile(validation["messageExpression"])).evaluate({"request": request})
    return bool(allowed), str(message)


def test_a_release_watching_namespaces_refuses_its_kinds_elsewhere_naming_the_value_to_change(
    rendered: Callable[[str], dict[str, Any]],
) -> None:
    """A job in a namespace the operator does not watch used to get nothing at all for as long as it
    existed; the API server now refuses it when it is created, saying which chart value to change."""
    policy, binding = admission(documents(rendered("watch-namespaces")["manifest"]))
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["apiGroups"] == ["acidtables.io"] and set(rule["resources"]) == {"acidtables", "compactionjobs"}
    assert rule["operations"] == ["CREATE"]  # an object left behind by a narrower upgrade can still be released
    assert policy["spec"]["failurePolicy"] == "Fail"
    for namespace in ("sales", "data-team"):
        assert admitted(policy, namespace)[0], namespace
    allowed, message = admitted(policy, "other")
    assert not allowed
    assert message == (
        f"the acidtables operator of release {RELEASE} (namespace {NAMESPACE}) serves sales, data-team only, so it "
        "would never act on CompactionJob orders-major-1 in namespace other: add other to the chart value "
        f"watchNamespaces (helm upgrade {RELEASE} -n {NAMESPACE} --reuse-values --set "
        "watchNamespaces={sales,data-team,other}), or create it in sales, data-team"
    )
    assert not admitted(policy, "other", kind="AcidTable")[0]


def test_a_release_watching_every_namespace_refuses_none(rendered: Callable[[str], dict[str, Any]]) -> None:
    docs = documents(rendered("single-node-defaults")["manifest"])
    assert not [d for d in docs if d["kind"].startswith("ValidatingAdmissionPolicy")]
    kind = documents(rendered("readme-kind")["manifest"])  # the quick start watches sales alone
    assert admitted(admission(kind)[0], "sales")[0] and not admitted(admission(kind)[0], "other")[0]


# --- what an offline cluster needs, and releasing finalizers from the image (issue 40, item 8) ------


def images(docs: list[dict[str, Any]]) -> set[str]:
    """Every image the rendered release runs: its pods' containers, and the jobs' image it hands on."""
    found = set()
    for doc in docs:
        pod = (doc.get("spec") or {}).get("template", {}).get("spec") or {}
        for container in [*pod.get("containers", []), *pod.get("initContainers", [])]:
            found.add(container["image"])
            found |= {e["value"] for e in container.get("env", []) if e["name"] == "ACIDTABLES_JOB_IMAGE"}
    return found


def test_the_quick_start_loads_every_image_the_kind_install_runs(rendered: Callable[[str], dict[str, Any]]) -> None:
    """An offline node pulls nothing: the quick start loads the acidtables image and the bundled etcd's."""
    quick_start = doc_pages.block("docs/kubernetes.md", "sh", 0).code
    loaded = set(re.findall(r"^kind load docker-image (\S+)", quick_start, re.M))
    assert (
        images(documents(rendered("readme-kind")["manifest"]))
        == loaded
        == {
            "localhost/acidtables:0.1.0",
            "registry.k8s.io/etcd:3.6.5-0",
        }
    )
    assert "registry.k8s.io/etcd:3.6.5-0" in (ROOT / "docs" / "kubernetes.md").read_text().split("### Offline")[1]


def test_releasing_finalizers_from_the_image_runs_as_the_operator_with_the_rights_it_needs(
    helm_python: Path,
) -> None:
    """docs/chart.md's `kubectl run`: the quick start's release (acidtables in sales) has that
    ServiceAccount there, the pod runs the release's image, and the account may list and patch both
    kinds in the namespace the command names."""
    (line,) = [b.code for b in doc_pages.blocks(ROOT / "docs" / "chart.md", "sh") if b.code.startswith("kubectl run")]
    words = shlex.split(line)
    options = dict(w.split("=", 1) for w in words if w.startswith("--") and "=" in w)
    namespace, served = words[words.index("-n") + 1], words[words.index("--namespace") + 1]
    assert words[words.index("--") + 1 :][:2] == ["acidtables", "release-finalizers"]
    account = json.loads(options["--overrides"])["spec"]["serviceAccountName"]
    (answer,) = render(helm_python, "acidtables", namespace, CHART, [COMBINATIONS["readme-kind"]])
    docs = documents(answer["manifest"])
    assert [d for d in docs if d["kind"] == "ServiceAccount" and d["metadata"]["name"] == account]
    assert {d["metadata"]["namespace"] for d in docs if d["metadata"]["name"] == account} >= {namespace}
    assert options["--image"] in images(docs)
    bindings = [d for d in docs if d["kind"] == "RoleBinding" and d["metadata"]["namespace"] == served]
    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Role" and d["metadata"]["namespace"] == served}
    granted = {
        (resource, verb)
        for binding in bindings
        if {"kind": "ServiceAccount", "name": account, "namespace": namespace} in binding["subjects"]
        for rule in roles[binding["roleRef"]["name"]]["rules"]
        if "acidtables.io" in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert {(kind, verb) for kind in ("acidtables", "compactionjobs") for verb in ("list", "patch")} <= granted
