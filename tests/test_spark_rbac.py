"""Spark's ServiceAccount, Role and RoleBinding where jobs run (issue 25, item 4, the operator's half):
the operator creates them in a job's namespace with exactly the chart's rules, holds those rules itself
(RBAC's escalation check), and says on the job when it may not create them. kmock's emulated API server
with a real etcd (tests/helpers/kmock_operator.py)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]
from tests.helpers.kmock_operator import KmockOperator, running_operator
from tests.helpers.kmock_resources import NS, create, driver_pod, event_with, ready_table, with_condition
from tests.helpers.resources import condition, job_resource

from acidtables.core.coordination.embedded import EmbeddedEtcd
from acidtables.operator.spark_rbac import MANAGED_BY, SPARK_RULES

CHART = Path(__file__).resolve().parent.parent / "charts" / "acidtables" / "templates"
ACCOUNT = "acidtables-spark"


def chart_spark_rules() -> list[dict[str, Any]]:
    """The one definition of Spark's rules in the chart (files/spark-rules.yaml)."""
    rules: list[dict[str, Any]] = yaml.safe_load((CHART.parent / "files" / "spark-rules.yaml").read_text())
    return rules


def operator_rules(name: str) -> list[dict[str, Any]]:
    """The `dict ...` rules written out in the list `$name` of operator-rbac.yaml, as data."""
    text = (CHART / "operator-rbac.yaml").read_text()
    block = re.split(rf"\${name} := (?:concat \()?list", text, maxsplit=1)[1].split("-}}", 1)[0]
    rules = []
    for line in re.findall(r"\(dict (.*)\)\s*$", block, flags=re.MULTILINE):
        fields = dict(re.findall(r'"(\w+)" \(list ([^)]*)\)', line))
        rules.append({k: re.findall(r'"([^"]*)"', v) for k, v in fields.items()})
    return rules


def test_the_operator_grants_spark_exactly_what_the_chart_grants() -> None:
    assert [dict(r) for r in SPARK_RULES] == chart_spark_rules()


def test_the_charts_spark_role_and_the_operators_rights_read_the_one_definition() -> None:
    """Both templates take Spark's rules from files/spark-rules.yaml: no second copy to drift."""
    for template in ("spark-rbac.yaml", "operator-rbac.yaml"):
        text = (CHART / template).read_text()
        assert 'Files.Get "files/spark-rules.yaml"' in text, template
        assert '"deletecollection"' not in text and "deletecollection]" not in text, template


def test_the_operator_holds_every_right_it_grants_spark_and_may_create_the_account() -> None:
    held = operator_rules("sparkAccounts") + chart_spark_rules()
    for rule in SPARK_RULES:
        assert any(
            h["apiGroups"] == rule["apiGroups"] and h["resources"] == rule["resources"]
            and set(rule["verbs"]) <= set(h["verbs"]) for h in held
        ), rule  # fmt: skip
    assert {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["create"]} in held
    assert {
        "apiGroups": ["rbac.authorization.k8s.io"],
        "resources": ["roles", "rolebindings"],
        "verbs": ["create"],
    } in held


@pytest.fixture
def op(
    tmp_path: Path, etcd_server: EmbeddedEtcd, etcd_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[KmockOperator]:
    yield from running_operator(
        tmp_path,
        etcd_server.endpoint,
        etcd_prefix,
        monkeypatch.setenv,
        job_service_account=ACCOUNT,
        create_job_accounts=True,
    )


def test_a_job_in_a_namespace_without_sparks_account_gets_one(op: KmockOperator) -> None:
    ready_table(op)
    create(op, "compactionjobs", job_resource("compact", table="orders"))
    pod = driver_pod(op, "compact")
    assert pod["spec"]["serviceAccountName"] == ACCOUNT
    (account,) = op.objects("v1/serviceaccounts", NS)
    (role,) = op.objects("rbac.authorization.k8s.io/v1/roles", NS)
    (binding,) = op.objects("rbac.authorization.k8s.io/v1/rolebindings", NS)
    for made in (account, role, binding):
        assert made["metadata"]["name"] == ACCOUNT and made["metadata"]["labels"] == MANAGED_BY
    assert role["rules"] == chart_spark_rules()
    assert binding["roleRef"]["name"] == ACCOUNT
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NS}]


def test_an_existing_account_is_left_as_it_is(op: KmockOperator) -> None:
    labels = {"app.kubernetes.io/managed-by": "Helm"}
    manifest = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": ACCOUNT, "labels": labels}}
    op.request("POST", f"/api/v1/namespaces/{NS}/serviceaccounts", manifest)
    ready_table(op)
    create(op, "compactionjobs", job_resource("compact", table="orders"))
    driver_pod(op, "compact")
    (account,) = op.objects("v1/serviceaccounts", NS)
    assert account["metadata"]["labels"] == labels


def test_a_forbidden_account_creation_fails_the_job_and_says_what_to_do(op: KmockOperator) -> None:
    ready_table(op)
    message = (
        'serviceaccounts is forbidden: User "system:serviceaccount:acidtables:acidtables-operator" cannot create '
        'resource "serviceaccounts" in API group "" in the namespace "sales"'
    )
    op.refuse("POST", f"^/api/v1/namespaces/{NS}/serviceaccounts$", 403, "Forbidden", message)
    create(op, "compactionjobs", job_resource("compact", table="orders"))
    job = with_condition(op, "compactionjobs", "compact", "Failed")
    assert condition(job, "Failed")["reason"] == "SparkAccountForbidden"  # type: ignore[index]
    assert message in job["status"]["message"]
    event = event_with(op, "compact", "SparkAccountForbidden")
    assert event["type"] == "Warning" and "jobs.serviceAccount" in event["message"]
    assert not op.objects("v1/pods", NS)
