"""A real kube-apiserver for tests: etcd and kube-apiserver from `KUBEBUILDER_ASSETS`, on loopback.

The envtest convention (controller-runtime's): a directory holding `etcd`, `kube-apiserver` and
`kubectl`, named by KUBEBUILDER_ASSETS, so a user with their own envtest assets runs the same tier.
One server per test session, its own state directory, a static bearer token in `system:masters`
for the test client; RBAC is on, so other identities get exactly what their Roles grant. Stopped by
PID, the API server first (its graceful shutdown needs etcd).
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import signal
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acidtables.core.coordination.embedded import free_port
from acidtables.core.coordination.waiting import wait_for

ASSETS_VARIABLE = "KUBEBUILDER_ASSETS"
BINARIES = ("etcd", "kube-apiserver", "kubectl")


def assets_dir() -> Path | None:
    """The assets directory KUBEBUILDER_ASSETS names, or None when it is unset."""
    raw = os.environ.get(ASSETS_VARIABLE, "").strip()
    return Path(raw) if raw else None


def missing_binaries(assets: Path) -> list[str]:
    return [name for name in BINARIES if not os.access(assets / name, os.X_OK)]


@dataclass
class KubeAPI:
    """A running API server: where it is, how to reach it, and the files it keeps."""

    assets: Path
    state: Path
    url: str
    token: str
    ca_file: Path
    kubeconfig: Path
    _processes: list[subprocess.Popen[bytes]] = field(default_factory=list, repr=False)

    @property
    def kubectl(self) -> Path:
        return self.assets / "kubectl"

    def calls(self, user: str, namespace: str) -> set[tuple[str, str]]:
        """(resource, verb) of every request `user` made in `namespace`, from the audit log."""
        path = self.state / "audit.log"
        found = set()
        for line in path.read_text().splitlines() if path.exists() else []:
            event = json.loads(line)
            target = event.get("objectRef") or {}
            if event["user"]["username"] == user and target.get("namespace") == namespace:
                resource = target.get("resource", "") + (
                    f"/{target['subresource']}" if target.get("subresource") else ""
                )
                found.add((resource, event["verb"]))
        return found

    def log(self, name: str = "kube-apiserver") -> str:
        path = self.state / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def request(self, method: str, path: str, body: Any = None, *, token: str | None = None) -> Any:
        """One API call as the admin (or `token`); the decoded JSON answer. Raises urllib's HTTPError."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {token or self.token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/merge-patch+json" if method == "PATCH" else "application/json"
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        context = ssl.create_default_context(cafile=str(self.ca_file))
        with urllib.request.urlopen(req, context=context, timeout=30) as answer:
            raw = answer.read()
        return json.loads(raw) if raw else None

    def ready(self) -> bool:
        try:
            req = urllib.request.Request(self.url + "/readyz", headers={"Authorization": f"Bearer {self.token}"})
            context = ssl.create_default_context(cafile=str(self.ca_file)) if self.ca_file.exists() else None
            if context is None:
                return False
            with urllib.request.urlopen(req, context=context, timeout=5) as answer:
                return bool(answer.read().strip() == b"ok")
        except (OSError, urllib.error.URLError, ssl.SSLError):
            return False

    def stop(self) -> None:
        """SIGTERM to kube-apiserver, wait; then etcd (started in that order, stopped in reverse)."""
        for process in reversed(self._processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        self._processes.clear()


def _spawn(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def start(assets: Path, state: Path, *, timeout_seconds: float = 60.0, host: str = "127.0.0.1") -> KubeAPI:
    """Start etcd and kube-apiserver from `assets` with their state under `state`; wait for /readyz.
    The API server listens on `host` (loopback; or the node's address on a pod network, for pods in
    network namespaces of their own), etcd on loopback."""
    (state / "pki").mkdir(parents=True, exist_ok=True)
    (state / "etcd").mkdir(exist_ok=True)
    etcd_port, peer_port, port = free_port(), free_port(), free_port(host)
    token = secrets.token_hex(24)
    (state / "tokens.csv").write_text(f'{token},admin,admin-uid,"system:masters"\n')
    # what service accounts do, so a test can compare the calls an account made with what its Role grants
    (state / "audit-policy.yaml").write_text(
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\n"
        "rules:\n  - level: Metadata\n    userGroups: [system:serviceaccounts]\n  - level: None\n"
    )
    api = KubeAPI(
        assets=assets,
        state=state,
        url=f"https://{host}:{port}",
        token=token,
        ca_file=state / "pki" / "apiserver.crt",
        kubeconfig=state / "kubeconfig",
    )
    etcd_url = f"http://127.0.0.1:{etcd_port}"
    peer_url = f"http://127.0.0.1:{peer_port}"
    api._processes.append(
        _spawn(
            [
                str(assets / "etcd"),
                "--name=default",
                f"--data-dir={state / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=default={peer_url}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
            state / "etcd.log",
        )
    )
    try:
        api._processes.append(
            _spawn(
                [
                    str(assets / "kube-apiserver"),
                    f"--etcd-servers={etcd_url}",
                    f"--bind-address={host}",
                    f"--advertise-address={host}",
                    f"--secure-port={port}",
                    f"--cert-dir={state / 'pki'}",
                    f"--service-account-issuer=https://{host}:{port}",
                    f"--service-account-signing-key-file={state / 'pki' / 'apiserver.key'}",
                    f"--service-account-key-file={state / 'pki' / 'apiserver.key'}",
                    f"--token-auth-file={state / 'tokens.csv'}",
                    "--authorization-mode=RBAC",
                    "--disable-admission-plugins=ServiceAccount",
                    "--service-cluster-ip-range=10.0.0.0/24",
                    "--endpoint-reconciler-type=none",
                    # as kubeadm sets it: a node's logs and proxies by its address, not a host name to resolve
                    "--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
                    f"--audit-policy-file={state / 'audit-policy.yaml'}",
                    f"--audit-log-path={state / 'audit.log'}",
                ],
                state / "kube-apiserver.log",
            )
        )

        def up() -> bool:
            for name, process in zip(("etcd", "kube-apiserver"), api._processes, strict=True):
                if process.poll() is not None:
                    raise RuntimeError(f"{name} exited with {process.returncode}; its log:\n{api.log(name)[-4000:]}")
            return api.ready()

        try:
            wait_for(up, timeout_seconds, interval_seconds=0.1)
        except TimeoutError:
            raise TimeoutError(
                f"kube-apiserver did not answer /readyz within {timeout_seconds:g} s; its log:\n{api.log()[-4000:]}"
            ) from None
        write_kubeconfig(api)
        return api
    except BaseException:
        api.stop()
        raise


def service_account_token(api: KubeAPI, namespace: str, account: str, seconds: int = 3600) -> str:
    """A token of the ServiceAccount `namespace/account` from the TokenRequest API, as the kubelet gets
    one for a pod (urllib.error.HTTPError 404 when there is no such account)."""
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": seconds}}
    answer = api.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token", request)
    return str(answer["status"]["token"])


def write_kubeconfig(api: KubeAPI, *, token: str | None = None, path: Path | None = None) -> Path:
    """A kubeconfig for the admin (or for `token`), as kubectl, the kubernetes client and kopf read it."""
    target = path or api.kubeconfig
    ca = base64.b64encode(api.ca_file.read_bytes()).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "envtest", "cluster": {"server": api.url, "certificate-authority-data": ca}}],
        "users": [{"name": "user", "user": {"token": token or api.token}}],
        "contexts": [{"name": "envtest", "context": {"cluster": "envtest", "user": "user"}}],
        "current-context": "envtest",
    }
    target.write_text(json.dumps(config))  # JSON is YAML
    return target


def kubectl(api: KubeAPI, *args: str, kubeconfig: Path | None = None, stdin: str | None = None) -> str:
    """Run the shipped kubectl against the server; its stdout. Raises CalledProcessError with stderr.
    A `--timeout=Ns` of its own (kubectl wait) is given time to run out, so kubectl says what it saw."""
    own = [int(a.removeprefix("--timeout=").removesuffix("s")) for a in args if re.fullmatch(r"--timeout=\d+s", a)]
    result = subprocess.run(
        [str(api.kubectl), f"--kubeconfig={kubeconfig or api.kubeconfig}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=max([120, *(seconds + 30 for seconds in own)]),
    )
    if result.returncode != 0:
        raise subprocess.CalledProcessError(result.returncode, result.args, result.stdout, result.stderr)
    return result.stdout


def apply(api: KubeAPI, namespace: str, resource: Mapping[str, Any]) -> str:
    """`kubectl apply` of one resource in `namespace`; raises CalledProcessError with the server's refusal."""
    return kubectl(api, "apply", "-n", namespace, "-f", "-", stdin=json.dumps(resource))


def delete_namespace(api: KubeAPI, name: str) -> None:
    """What the missing namespace controller would do: empty the namespace, then finalize it."""
    kinds = ["acidtables.acidtables.io", "compactionjobs.acidtables.io", "pods", "leases.coordination.k8s.io"]
    for kind in kinds:
        try:
            items = json.loads(kubectl(api, "get", kind, "-n", name, "-o", "json"))["items"]
        except subprocess.CalledProcessError:
            continue  # a kind the server does not know (CRDs not installed)
        for item in items:
            meta = item["metadata"]
            if meta.get("finalizers"):
                kubectl(
                    api,
                    "patch",
                    kind,
                    meta["name"],
                    "-n",
                    name,
                    "--type=merge",
                    "-p",
                    '{"metadata":{"finalizers":null}}',
                )
        kubectl(api, "delete", kind, "--all", "-n", name, "--wait=false", "--ignore-not-found")
    try:
        api.request("DELETE", f"/api/v1/namespaces/{name}")
        namespace = api.request("GET", f"/api/v1/namespaces/{name}")
        namespace["spec"]["finalizers"] = []
        api.request("PUT", f"/api/v1/namespaces/{name}/finalize", namespace)
    except urllib.error.HTTPError as exc:
        if exc.code != 404:
            raise
