"""What users watch the operator with: the chart's ServiceMonitor and PrometheusRule, installed on the
real API server, and the Grafana dashboard in examples/. Every query must parse as PromQL and name only
metrics the operator exports; a rule or panel over a misspelt or removed metric is silent forever."""

from __future__ import annotations

import json
import re
import urllib.error
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import promql_parser
import pytest
from prometheus_client import CollectorRegistry
from tests.helpers import envtest
from tests.helpers.helm import helm, require_helm_python

from acidtables.metrics import ClusterMetrics

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "examples" / "grafana-dashboard.json"
METRIC = re.compile(r"\bacidtables_[a-z_]+\b")


def exported_names() -> set[str]:
    """Every sample name the operator's /metrics can show."""
    registry = CollectorRegistry()
    ClusterMetrics(registry)
    names: set[str] = set()
    for family in registry.collect():
        if family.type == "counter":
            names.add(f"{family.name}_total")
        elif family.type == "histogram":
            names |= {f"{family.name}_bucket", f"{family.name}_sum", f"{family.name}_count"}
        else:
            names.add(family.name)
    return names


def check_query(expr: str) -> set[str]:
    """Parse one query (Grafana's $variables given values) and return the metrics it names."""
    concrete = expr.replace("$__rate_interval", "5m").replace("$namespace", ".*")
    promql_parser.parse(concrete)  # raises on a syntax error
    return set(METRIC.findall(concrete))


def test_every_dashboard_panel_parses_and_uses_exported_metrics() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exported = exported_names()
    used: set[str] = set()
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names = check_query(target["expr"])
            assert names and names <= exported, (panel["title"], names - exported)
            used |= names
    # what the deployment issue asks the dashboard to show
    wanted = {
        "acidtables_cluster_commits_total",
        "acidtables_cluster_conflicts_total",
        "acidtables_cluster_retries_total",
        "acidtables_cluster_commit_duration_seconds_bucket",
        "acidtables_compaction_jobs_total",
        "acidtables_operator_status_lag_seconds_bucket",
    }
    assert wanted <= used, wanted - used


@pytest.fixture
def prometheus_operator_crds(kube_api: envtest.KubeAPI) -> None:
    """Stand-ins for the Prometheus operator's ServiceMonitor and PrometheusRule CRDs (group, kinds and
    scope as theirs; any spec accepted), so the server can take the chart's objects. The objects' own
    fields are checked below, not by the Prometheus operator's schema, which is not installed here."""
    for plural, kind in (("servicemonitors", "ServiceMonitor"), ("prometheusrules", "PrometheusRule")):
        crd = {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.monitoring.coreos.com"},
            "spec": {
                "group": "monitoring.coreos.com",
                "scope": "Namespaced",
                "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": True,
                        "schema": {
                            "openAPIV3Schema": {
                                "type": "object",
                                "properties": {
                                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                                },
                            }
                        },
                    }
                ],
            },
        }
        try:
            kube_api.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        except urllib.error.HTTPError as exc:
            if exc.code != 409:
                raise
    envtest.kubectl(
        kube_api, "wait", "--for=condition=Established", "crd/servicemonitors.monitoring.coreos.com",
        "crd/prometheusrules.monitoring.coreos.com", "--timeout=30s",
    )  # fmt: skip


@pytest.fixture
def monitored_release(kube_api: envtest.KubeAPI, prometheus_operator_crds: None) -> Iterator[tuple[str, str]]:
    python = require_helm_python()
    name, namespace = f"r{uuid.uuid4().hex[:6]}", f"mon-{uuid.uuid4().hex[:8]}"
    values = {
        "metrics": {
            "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
            "prometheusRule": {"enabled": True, "statusLagSeconds": 5},
        }
    }
    chart = str(ROOT / "charts" / "acidtables")
    answer = helm(python, kube_api.kubeconfig, "install", name, namespace, chart, json.dumps(values))
    assert answer["ok"], answer
    try:
        yield name, namespace
    finally:
        helm(python, kube_api.kubeconfig, "uninstall", name, namespace)
        envtest.delete_namespace(kube_api, namespace)


def _get(kube_api: envtest.KubeAPI, path: str) -> Any:
    return kube_api.request("GET", path)


def test_the_service_monitor_scrapes_the_metrics_service_and_every_alert_is_sound(
    kube_api: envtest.KubeAPI, monitored_release: tuple[str, str]
) -> None:
    name, namespace = monitored_release
    monitoring = f"/apis/monitoring.coreos.com/v1/namespaces/{namespace}"
    monitor = _get(kube_api, f"{monitoring}/servicemonitors/{name}-acidtables")
    service = _get(kube_api, f"/api/v1/namespaces/{namespace}/services/{name}-acidtables-metrics")
    assert monitor["metadata"]["labels"]["release"] == "prometheus"  # what a Prometheus selects monitors by
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()  # it selects the metrics Service
    ports = {port["name"] for port in service["spec"]["ports"]}
    assert [endpoint["port"] for endpoint in monitor["spec"]["endpoints"]] == ["metrics"] and "metrics" in ports

    rules = _get(kube_api, f"{monitoring}/prometheusrules/{name}-acidtables")["spec"]["groups"][0]["rules"]
    alerts = {rule["alert"]: rule for rule in rules}
    assert {
        "AcidTablesConflictRateHigh",
        "AcidTablesCompactionFailing",
        "AcidTablesEtcdUnreachable",
        "AcidTablesStatusLag",
    } <= alerts.keys()
    exported = exported_names()
    for alert, rule in alerts.items():
        names = check_query(rule["expr"])
        assert names and names <= exported, (alert, names - exported)
    assert "> 5" in alerts["AcidTablesStatusLag"]["expr"]  # the value reached the rule
    assert "acidtables_operator_status_lag_seconds_bucket" in alerts["AcidTablesStatusLag"]["expr"]
