"""The real kube-apiserver tier itself: the fixture serves a 1.36 API server that enforces RBAC."""

from __future__ import annotations

import urllib.error

import pytest
from tests.helpers import envtest


def test_the_server_is_kubernetes_1_36_and_kubectl_reaches_it(kube_api: envtest.KubeAPI, kube_namespace: str) -> None:
    version = kube_api.request("GET", "/version")
    assert (version["major"], version["minor"].rstrip("+")) == ("1", "36")
    assert kube_namespace in envtest.kubectl(kube_api, "get", "namespaces", "-o", "name")


def test_rbac_is_enforced_for_anyone_but_the_admin(kube_api: envtest.KubeAPI, kube_namespace: str) -> None:
    with pytest.raises(urllib.error.HTTPError) as refused:
        kube_api.request("GET", f"/api/v1/namespaces/{kube_namespace}/pods", token="not-a-token")
    assert refused.value.code == 401
