"""The envtest API server dressed up as a small cluster, so the e2e tier (tests/e2e/) can run here.

A real cluster has controllers, a kubelet per node, a pod network and DNS; envtest has only the API
server. `ClusterKubelet` extends the test kubelet (tests/helpers/kubelet.py) with the least of each
that the chart and the e2e scenarios use, and no more:

- controllers: a Deployment's pods (`replicas` of them, replaced when deleted, with the Deployment's
  status), a StatefulSet's pods `<name>-<i>` (with the claims of its volumeClaimTemplates), the
  Endpoints of each Service with a selector, pods whose controlling owner is gone deleted (the garbage
  collector), and a deleted namespace emptied and finalized;
- the kubelet: every namespace; a container that exits under `restartPolicy: Always` starts again;
  a pod gets its ServiceAccount's token as a kubeconfig (KUBECONFIG; the in-cluster files would be
  under /var/run/secrets, which a local process cannot have); `PATH` starts with the directories given
  (this interpreter's, so `python` and `acidtables` are the image's, and the envtest assets for `etcd`);
  a persistentVolumeClaim or hostPath volume is one directory shared by every pod that mounts it;
  the pods' logs are served to the API server as a kubelet serves them (`kubectl logs` works);
- the network: every pod has one address, `pod_ip`; a container port is a free port of this host,
  told to the process where its command line or env names it (`0.0.0.0:2379`, `--port=9108`, an env
  value "9108"), and `<pod>.<service>.<namespace>.svc:<port>` in a pod's env or command becomes that
  pod's address and port (`kubernetes.default.svc` the API server's).

What stays out: images (every container runs from this checkout), resource limits, security contexts,
probes (a started container is Ready), rolling updates. Pod addresses must not be loopback for the API
server to proxy to them (Endpoints refuse 127.0.0.0/8): tests/helpers/e2e_local.py runs the whole thing
in a network namespace of its own with a private address on its loopback device.
"""

from __future__ import annotations

import http.server
import json
import re
import secrets
import ssl
import threading
import time
import urllib.error
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.helpers import envtest
from tests.helpers.envtest import KubeAPI
from tests.helpers.kubelet import NODE, Kubelet

from acidtables.core.coordination.embedded import free_port

#: `<pod>.<service>.<namespace>.svc[.cluster.local][:port]` and `kubernetes.default.svc[:port]`
_SERVICE_NAME = re.compile(r"(?<![\w.-])([a-z0-9][-a-z0-9.]*?)\.svc(?:\.cluster\.local)?(?::(\d+))?(?![\w.-])")
#: a listening address with a port on the pod's own command line
_LISTEN = re.compile(r"(?<![\w.])(0\.0\.0\.0|127\.0\.0\.1|localhost|\[::\]):(\d+)\b")
#: when a container that keeps exiting may start again
_RESTART_BACKOFF_SECONDS = 1.0
#: the controllers run every this many kubelet ticks (of 0.1 s)
_CONTROL_EVERY_TICKS = 4


def _selected(labels: dict[str, str], selector: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(key) == value for key, value in selector.items())


def _owner(obj: dict[str, Any]) -> dict[str, Any] | None:
    return next((o for o in obj["metadata"].get("ownerReferences") or [] if o.get("controller")), None)


class ClusterKubelet(Kubelet):
    #: envtest's API server: its files (CA, state) are this kubelet's to hand to pods
    api: KubeAPI

    def __init__(self, api: KubeAPI, workdir: Path, *, pod_ip: str, path: Sequence[str] = (), **kwargs: Any) -> None:
        super().__init__(api, None, workdir, **kwargs)
        self.pod_ip = pod_ip
        self.path = list(path)
        self._ports: dict[tuple[str, str, int], int] = {}
        self._not_before: dict[str, float] = {}
        self._finalized: set[str] = set()
        self._endpoints: dict[str, Any] = {}
        self._log_server: http.server.HTTPServer | None = None
        self._ticks = 0

    # --- the node: its logs endpoint -------------------------------------------------------------

    def __enter__(self) -> ClusterKubelet:
        super().__enter__()
        self._serve_logs()
        return self

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        if self._log_server is not None:
            self._log_server.shutdown()
            self._log_server.server_close()

    def _serve_logs(self) -> None:
        """`/containerLogs/<ns>/<pod>/<container>` over TLS, where the Node says its kubelet is; the
        API server does not verify a kubelet's certificate unless told to, so its own serves here."""
        kubelet = self

        class Logs(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urllib.parse.urlparse(self.path)
                parts = url.path.strip("/").split("/")
                if len(parts) != 4 or parts[0] != "containerLogs":
                    self.send_error(404)
                    return
                text = kubelet.log(f"{parts[1]}/{parts[2]}")
                tail = urllib.parse.parse_qs(url.query).get("tailLines")
                if tail:
                    text = "\n".join(text.splitlines()[-int(tail[0]) :]) + "\n"
                body = text.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        port = free_port()
        server = http.server.ThreadingHTTPServer((self.pod_ip, port), Logs)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.api.ca_file, self.api.state / "pki" / "apiserver.key")
        server.socket = context.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, name="test-kubelet-logs", daemon=True).start()
        self._log_server = server
        status = {
            "addresses": [{"type": "InternalIP", "address": self.pod_ip}, {"type": "Hostname", "address": NODE}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "test kubelet"}],
        }
        self.api.request("PATCH", f"/api/v1/nodes/{NODE}/status", {"status": status})

    # --- the network -------------------------------------------------------------------------------

    def port(self, namespace: str, pod: str, container_port: int) -> int:
        """The host port that stands for `container_port` of the pod (chosen the first time it is asked)."""
        key = (namespace, pod, container_port)
        if key not in self._ports:
            self._ports[key] = free_port()
        return self._ports[key]

    def _rewrite(self, pod: dict[str, Any], text: str) -> str:
        meta = pod["metadata"]
        own = {int(p["containerPort"]) for c in pod["spec"]["containers"] for p in c.get("ports") or []}

        def service(match: re.Match[str]) -> str:
            labels, port = match.group(1).split("."), match.group(2)
            if labels == ["kubernetes", "default"]:
                return self.api.url.removeprefix("https://")
            if len(labels) != 3:  # a Service's own name: nothing here needs one
                raise ValueError(f"the test kubelet resolves pod names <pod>.<service>.<ns>.svc only: {match[0]}")
            address = self.pod_ip
            return f"{address}:{self.port(labels[2], labels[0], int(port))}" if port else address

        def listen(match: re.Match[str]) -> str:
            port = int(match.group(2))
            return f"{match.group(1)}:{self.port(meta['namespace'], meta['name'], port)}" if port in own else match[0]

        text = _SERVICE_NAME.sub(service, text)
        text = _LISTEN.sub(listen, text)
        if text.isdigit() and int(text) in own:  # a port given alone, as ACIDTABLES_METRICS_PORT is
            text = str(self.port(meta["namespace"], meta["name"], int(text)))
        return text

    def _prepare(self, pod: dict[str, Any], command: list[str], env: dict[str, str]) -> list[str]:
        for name in list(env):
            if name != "PATH":
                env[name] = self._rewrite(pod, env[name])
        env["PATH"] = ":".join([*self.path, env.get("PATH", "")])
        if pod["spec"].get("automountServiceAccountToken", True) is not False:
            kubeconfig = self._service_account_kubeconfig(pod)
            if kubeconfig is not None:
                env["KUBECONFIG"] = str(kubeconfig)
        return [self._rewrite(pod, part) for part in command]

    def _service_account_kubeconfig(self, pod: dict[str, Any]) -> Path | None:
        meta = pod["metadata"]
        account = pod["spec"].get("serviceAccountName") or "default"
        try:
            token = envtest.service_account_token(self.api, meta["namespace"], account, seconds=7200)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:  # no such account (envtest has no `default` one): no credentials
                return None
            raise
        path = self.workdir / f"{self.key(pod)}.kubeconfig"
        return envtest.write_kubeconfig(self.api, token=token, path=path)

    # --- volumes -------------------------------------------------------------------------------------

    def _volume_directory(self, pod: dict[str, Any], volume: dict[str, Any]) -> Path:
        if "persistentVolumeClaim" in volume:  # one claim, one directory, whoever mounts it
            claim = str(volume["persistentVolumeClaim"]["claimName"])
            return self.workdir / "claims" / str(pod["metadata"]["namespace"]) / claim
        if "hostPath" in volume:
            return self.workdir / "host" / str(volume["hostPath"]["path"]).strip("/")
        return super()._volume_directory(pod, volume)

    # --- restarts --------------------------------------------------------------------------------------

    def _start(self, pod: dict[str, Any]) -> None:
        if time.monotonic() < self._not_before.get(self.key(pod), 0.0):
            return
        super()._start(pod)

    def _finish(self, pod: dict[str, Any], code: int) -> None:
        key = self.key(pod)
        if pod["spec"].get("restartPolicy", "Always") == "Always" and not pod["metadata"].get("deletionTimestamp"):
            self._started.discard(key)  # a later tick starts it again, as a kubelet restarts a container
            self.processes.pop(key, None)
            self._not_before[key] = time.monotonic() + _RESTART_BACKOFF_SECONDS
            return
        super()._finish(pod, code)

    # --- the controllers ---------------------------------------------------------------------------------

    def _tick(self) -> None:
        self._ticks += 1
        try:
            if self._ticks % _CONTROL_EVERY_TICKS == 1:  # the controllers' lists cost more than the pods'
                self._control()
            super()._tick()
        except Exception as exc:  # kept in `errors` by the caller; written down now for a run in progress
            with (self.workdir / "errors.log").open("a") as out:
                out.write(f"{time.strftime('%H:%M:%S')} {exc!r}\n")
            raise

    def _list(self, path: str) -> list[dict[str, Any]] | None:
        try:
            items: list[dict[str, Any]] = self.api.request("GET", path)["items"]
        except urllib.error.HTTPError as exc:
            if exc.code == 404:  # a kind this server does not serve (yet): its CRD is not installed
                return None
            raise
        return items

    def _control(self) -> None:
        pods = self._pods()
        deployments = self._list("/apis/apps/v1/deployments") or []
        statefulsets = self._list("/apis/apps/v1/statefulsets") or []
        for deployment in deployments:
            self._deployment(deployment, pods)
        for statefulset in statefulsets:
            self._statefulset(statefulset, pods)
        self._collect_garbage(pods, deployments, statefulsets)
        for service in self._list("/api/v1/services") or []:
            self._service_endpoints(service, pods)
        for namespace in self._list("/api/v1/namespaces") or []:
            name = namespace["metadata"]["name"]
            if namespace["metadata"].get("deletionTimestamp") and name not in self._finalized:
                self._finalized.add(name)
                envtest.delete_namespace(self.api, name)  # what the namespace controller would do

    def _create_pod(
        self, namespace: str, name: str, kind: str, owner: dict[str, Any], template: dict[str, Any]
    ) -> dict[str, Any]:
        meta = template.get("metadata") or {}
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "labels": dict(meta.get("labels") or {}),
                "annotations": dict(meta.get("annotations") or {}),
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",  # a list's items carry no apiVersion and kind
                        "kind": kind,
                        "name": owner["metadata"]["name"],
                        "uid": owner["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": json.loads(json.dumps(template["spec"])),
        }
        try:
            created: dict[str, Any] = self.api.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod)
        except urllib.error.HTTPError as exc:
            if exc.code in (403, 409):  # a namespace being deleted, or a name still in use
                return pod
            raise
        return created

    @staticmethod
    def _live(pod: dict[str, Any]) -> bool:
        return not pod["metadata"].get("deletionTimestamp") and pod.get("status", {}).get("phase") not in (
            "Succeeded",
            "Failed",
        )

    def _owned(self, owner: dict[str, Any], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
        uid = owner["metadata"]["uid"]
        return [p for p in pods if (_owner(p) or {}).get("uid") == uid]

    def _workload_status(self, kind: str, owner: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        ready = sum(1 for p in pods if p.get("status", {}).get("phase") == "Running")
        status = {
            "observedGeneration": owner["metadata"].get("generation", 1),
            "replicas": len(pods),
            "readyReplicas": ready,
            "availableReplicas": ready,
            "updatedReplicas": len(pods),
        }
        if kind == "statefulsets":
            status.pop("updatedReplicas")
            status["currentReplicas"] = len(pods)
        current = owner.get("status") or {}
        if all(current.get(key) == value for key, value in status.items()):
            return
        meta = owner["metadata"]
        path = f"/apis/apps/v1/namespaces/{meta['namespace']}/{kind}/{meta['name']}/status"
        try:
            self.api.request("PATCH", path, {"status": status})
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise

    def _deployment(self, deployment: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        meta, spec = deployment["metadata"], deployment["spec"]
        live = [p for p in self._owned(deployment, pods) if self._live(p)]
        wanted = int(spec.get("replicas", 1))
        template_hash = meta["uid"].replace("-", "")[:10]
        template = json.loads(json.dumps(spec["template"]))
        template.setdefault("metadata", {}).setdefault("labels", {})["pod-template-hash"] = template_hash
        for _ in range(wanted - len(live)):
            name = f"{meta['name']}-{template_hash}-{secrets.token_hex(3)[:5]}"
            live.append(self._create_pod(meta["namespace"], name, "Deployment", deployment, template))
        for extra in live[wanted:]:
            self.api.request("DELETE", self._path(extra))
        self._workload_status("deployments", deployment, live[:wanted])

    def _statefulset(self, statefulset: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        meta, spec = statefulset["metadata"], statefulset["spec"]
        owned = {p["metadata"]["name"]: p for p in self._owned(statefulset, pods)}
        members = []
        for ordinal in range(int(spec.get("replicas", 1))):
            name = f"{meta['name']}-{ordinal}"
            if name in owned:
                members.append(owned[name])
                continue
            template = json.loads(json.dumps(spec["template"]))
            template["spec"]["hostname"], template["spec"]["subdomain"] = name, spec.get("serviceName", "")
            for claim in spec.get("volumeClaimTemplates") or []:
                claim_name = claim["metadata"]["name"]
                template["spec"].setdefault("volumes", []).append(
                    {"name": claim_name, "persistentVolumeClaim": {"claimName": f"{claim_name}-{name}"}}
                )
            members.append(self._create_pod(meta["namespace"], name, "StatefulSet", statefulset, template))
        self._workload_status("statefulsets", statefulset, members)

    def _collect_garbage(
        self, pods: list[dict[str, Any]], deployments: list[dict[str, Any]], statefulsets: list[dict[str, Any]]
    ) -> None:
        """Pods whose controlling owner is gone go too (as the garbage collector deletes them)."""
        jobs = self._list("/apis/acidtables.io/v1alpha1/compactionjobs")
        existing = {o["metadata"]["uid"] for o in [*deployments, *statefulsets, *pods, *(jobs or [])]}
        known = {"Deployment", "StatefulSet", "Pod"} | ({"CompactionJob"} if jobs is not None else set())
        for pod in pods:
            owner = _owner(pod)
            if owner and owner["kind"] in known and owner["uid"] not in existing and self._live(pod):
                try:
                    self.api.request("DELETE", self._path(pod))
                except urllib.error.HTTPError as exc:
                    if exc.code != 404:
                        raise

    def _service_endpoints(self, service: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        meta, spec = service["metadata"], service["spec"]
        selector = spec.get("selector") or {}
        if not selector:
            return
        subsets = []
        for pod in pods:
            labels = pod["metadata"].get("labels") or {}
            if pod["metadata"]["namespace"] != meta["namespace"] or not _selected(labels, selector):
                continue
            if pod.get("status", {}).get("phase") != "Running" or pod["metadata"].get("deletionTimestamp"):
                continue
            named = {
                p.get("name"): int(p["containerPort"]) for c in pod["spec"]["containers"] for p in c.get("ports") or []
            }
            ports = []
            for service_port in spec.get("ports") or []:
                target = service_port.get("targetPort", service_port["port"])
                container_port = named.get(target) if isinstance(target, str) else int(target)
                if container_port is not None:
                    mapped = self.port(meta["namespace"], pod["metadata"]["name"], container_port)
                    ports.append({"name": service_port.get("name", ""), "port": mapped, "protocol": "TCP"})
            address = {
                "ip": self.pod_ip,
                "nodeName": NODE,
                "targetRef": {
                    "kind": "Pod",
                    "name": pod["metadata"]["name"],
                    "namespace": meta["namespace"],
                    "uid": pod["metadata"]["uid"],
                },
            }
            subsets.append({"addresses": [address], "ports": ports})
        key = f"{meta['namespace']}/{meta['name']}"
        if self._endpoints.get(key) == subsets:
            return
        path = f"/api/v1/namespaces/{meta['namespace']}/endpoints/{meta['name']}"
        endpoints: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": {"name": meta["name"]},
            "subsets": subsets,
        }
        try:
            current = self.api.request("GET", path)
            endpoints["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            self.api.request("PUT", path, endpoints)
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise
            try:
                self.api.request("POST", f"/api/v1/namespaces/{meta['namespace']}/endpoints", endpoints)
            except urllib.error.HTTPError as again:
                if again.code not in (403, 409):  # a namespace being deleted; a race with ourselves
                    raise
        self._endpoints[key] = subsets
