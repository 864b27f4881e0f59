"""The test kubelet with a real container runtime: every pod runs as a podman container of the image
it names, in a network namespace of its own on a pod network (tests/helpers/pod_network.py).

What Kubernetes gives a container, given the same way: the pod's env with the downward API filled in
and the service variables of the API server (KUBERNETES_SERVICE_HOST and _PORT, which must therefore be
reachable from the pod network), the ServiceAccount's token, CA and namespace at
/var/run/secrets/kubernetes.io/serviceaccount, the pod's volumes (hostPath as it is; secrets, config
maps and emptyDirs as directories of the pod's own), the user of its security context, `command` as the
entry point and `args` after the image, the pod's name as host name (resolving to its address, as
the kubelet's /etc/hosts does), and a file at the container's
terminationMessagePath whose content becomes the terminated state's message. The token is
`TOKEN_PREFIX` + namespace + ":" + account, so a test can tell which account made which call (kmock),
or whatever `token` gives (a real API server's TokenRequest).

ACIDTABLES_PODMAN_ARGS and ACIDTABLES_PODMAN_RUN_ARGS carry what a sandbox needs (a runtime, lower
rlimits), as for the other image tests.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import urllib.error
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.helpers.kubelet import NODE, ApiServer, Kubelet, expand
from tests.helpers.pod_network import PodNetwork

#: where every pod finds its ServiceAccount's credentials
ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_PREFIX = "sa:"


def podman(*args: str) -> list[str]:
    """A podman command line with the sandbox's global arguments."""
    return ["podman", *shlex.split(os.environ.get("ACIDTABLES_PODMAN_ARGS", "")), *args]


def run_arguments() -> list[str]:
    """What `podman run` needs here besides the container's own settings."""
    return shlex.split(os.environ.get("ACIDTABLES_PODMAN_RUN_ARGS", ""))


#: the image's user, which the chart's pods run as (and own the warehouse as, through fsGroup)
POD_USER = 185


def give_to_pod_user(root: Path | str) -> None:
    """What fsGroup does for the chart's pods: the files under `root` become the image user's."""
    for directory, _, files in os.walk(root):
        os.chown(directory, POD_USER, 0)
        for name in files:
            os.chown(os.path.join(directory, name), POD_USER, 0)


def account_token(namespace: str, account: str) -> str:
    return f"{TOKEN_PREFIX}{namespace}:{account}"


class PodmanKubelet(Kubelet):
    """Runs the pods of `namespace` as podman containers on `network`."""

    def __init__(
        self,
        api: ApiServer,
        namespace: str,
        workdir: Path,
        *,
        network: PodNetwork,
        ca_file: Path,
        token: Callable[[str, str], str] = account_token,
        **kwargs: Any,
    ) -> None:
        """`token(namespace, account)` is what a pod of that account gets as its token: by default a
        name the test can recognise (kmock does not authenticate); a real API server's TokenRequest."""
        super().__init__(api, namespace, workdir, **kwargs)
        self.network = network
        self.ca_file = ca_file
        self.token = token
        self.tag = network.tag

    def container(self, key: str) -> str:
        return f"acpod-{self.tag}-{key.replace('/', '-')}"[:63]

    def _ensure_node(self) -> None:
        """No Node object: pods are bound by naming the node in their spec."""

    def _bind(self, pod: dict[str, Any]) -> None:
        """As the scheduler binds a pod (pods/binding); kmock has no such subresource, so there the
        node is named in the spec instead."""
        try:
            super()._bind(pod)
        except urllib.error.HTTPError:
            self.api.request("PATCH", self._path(pod), {"spec": {"nodeName": NODE}})

    def _base_env(self) -> dict[str, str]:
        return {}  # the image's own environment (ENV lines) applies

    def _address(self, pod: dict[str, Any]) -> str:
        return self.network.add(self.key(pod))[1]

    def _kill(self, key: str, process: subprocess.Popen[bytes]) -> None:
        subprocess.run(podman("rm", "--force", "--time", "0", self.container(key)), capture_output=True, timeout=120)
        process.wait(timeout=120)
        self.network.remove(key)

    def _account_directory(self, pod: dict[str, Any]) -> Path:
        namespace = pod["metadata"]["namespace"]
        account = pod["spec"].get("serviceAccountName") or "default"
        directory = self.workdir / self.key(pod) / "serviceaccount"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "token").write_text(self.token(namespace, account))
        (directory / "ca.crt").write_bytes(self.ca_file.read_bytes())
        (directory / "namespace").write_text(namespace)
        return directory

    def _host_volumes(self, pod: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
        """Mount path -> host path of each of the container's volumes."""
        volumes = {volume["name"]: volume for volume in pod["spec"].get("volumes") or []}
        mounts = self._volumes(pod, container)  # secrets, config maps and emptyDirs written out
        found: dict[str, str] = {}
        for mount in container.get("volumeMounts") or []:
            volume = volumes[mount["name"]]
            path = mount["mountPath"].rstrip("/")
            found[path] = volume["hostPath"]["path"] if "hostPath" in volume else str(mounts[path])
        return found

    def _finish(self, pod: dict[str, Any], code: int) -> None:
        """As the kubelet ends a container: with `FallbackToLogsOnError`, a failed container that wrote
        no termination message gets its log's tail (80 lines, 2 KiB at most) as the message."""
        key = self.key(pod)
        message_file = self.workdir / f"{key}.termination"
        policy = pod["spec"]["containers"][0].get("terminationMessagePolicy")
        if code != 0 and policy == "FallbackToLogsOnError" and not message_file.read_text().strip():
            tail = "\n".join(self.log(key).splitlines()[-80:])
            message_file.write_text(tail.encode()[-2048:].decode(errors="ignore"))
        super()._finish(pod, code)
        self.network.remove(key)

    def _image_missing(self, pod: dict[str, Any], container: dict[str, Any]) -> bool:
        """As the kubelet reports an image it cannot pull: ErrImagePull, the container waiting, nothing
        run. Only images podman already holds start (a sandbox reaches no registry)."""
        image = container["image"]
        if subprocess.run(podman("image", "exists", image), capture_output=True, timeout=120).returncode == 0:
            return False
        message = f'failed to pull and unpack image "{image}": not found in the local store, and no registry'
        self._status(pod, {"phase": "Pending", "containerStatuses": [
            self._container(container, {"waiting": {"reason": "ErrImagePull", "message": message}})]})  # fmt: skip
        return True

    def _start(self, pod: dict[str, Any]) -> None:
        key = self.key(pod)
        spec = pod["spec"]
        container = spec["containers"][0]
        if self._image_missing(pod, container):
            self._started.add(key)  # tried once: the pod stays waiting until it is deleted
            return
        netns, address = self.network.add(key)
        env = self._env(pod, container)
        command = [expand(part, env) for part in container.get("command") or []]
        args = [expand(part, env) for part in container.get("args") or []]
        user = (container.get("securityContext") or {}).get("runAsUser") or (spec.get("securityContext") or {}).get(
            "runAsUser"
        )
        pod_dir = self.workdir / key
        pod_dir.mkdir(parents=True, exist_ok=True)
        termination = self.workdir / f"{key}.termination"
        termination.write_text("")
        termination.chmod(0o666)
        line = podman("run", "--rm", "--name", self.container(key), *run_arguments())
        hostname = spec.get("hostname") or pod["metadata"]["name"][:63]
        # the kubelet's /etc/hosts: the pod's host name is its address
        line += ["--network", f"ns:{netns}", "--hostname", hostname, "--add-host", f"{hostname}:{address}"]
        if user is not None:
            line += ["--user", str(user)]
        line += ["-v", f"{termination}:{container.get('terminationMessagePath', '/dev/termination-log')}"]
        if spec.get("automountServiceAccountToken", True):
            line += ["-v", f"{self._account_directory(pod)}:{ACCOUNT_DIR}:ro"]
        for mount_path, host_path in self._host_volumes(pod, container).items():
            if Path(host_path).is_relative_to(self.workdir):  # emptyDir: writable by the pod's user
                Path(host_path).chmod(0o777)
            line += ["-v", f"{host_path}:{mount_path}"]
        for name, value in env.items():
            line += ["-e", f"{name}={value}"]
        if command:
            line += ["--entrypoint", json.dumps(command)]
        line += [container["image"], *args]
        self._started.add(key)
        self.started[key] = pod
        with (self.workdir / f"{key}.log").open("wb") as out:
            self.processes[key] = subprocess.Popen(line, stdout=out, stderr=subprocess.STDOUT)
        self._status(
            pod,
            {
                "phase": "Running",
                "podIP": address,
                "podIPs": [{"ip": address}],
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [self._container(container, {"running": {}})],
            },
        )
