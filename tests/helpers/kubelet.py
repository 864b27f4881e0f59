"""Plays the scheduler and the kubelet for one namespace (or all) on the envtest API server, which has neither.

Every pod is bound to a Node object (`pods/binding`), its one container's command runs as a local
process (same etcd, same warehouse on local disk; `python` is this interpreter), and the pod's status
is written back through `pods/status`: Running when the process starts, then Succeeded or Failed with
the container's exit code and its termination message (what the process wrote to the file named by
ACIDTABLES_TERMINATION_LOG). A pod deleted while running has its process killed, as a kubelet would.
Pods whose name matches `hold` are left unscheduled (an image that never pulls, a full cluster), and
so are pods whose image matches `hold_images`. As a kubelet does, `$(VAR)` in a container's command and
arguments is the value of its env variable VAR.

What a process cannot have, and how the helper stands in for it: the pod's IP is 127.0.0.1 (written
to status.podIP and given to the downward API); each volume is a directory under the pod's work
directory (secrets and config maps written into it, emptyDirs empty) and an env value or an argument
naming a mount path names that directory instead; a container started with the single argument `executor` (a Spark
executor pod, whose image's entrypoint would start the executor JVM) runs that JVM from pyspark's jars.
"""

from __future__ import annotations

import base64
import contextlib
import fnmatch
import glob
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

NODE = "envtest-node"
POD_IP = "127.0.0.1"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


#: `$(NAME)` in a command or argument: the container's env variable NAME (`$$(NAME)` escapes it)
_VARIABLE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' expansion of a command or an argument: an unknown `$(NAME)` stays as it is."""
    return _VARIABLE.sub(lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), text)


class ApiServer(Protocol):
    """What the kubelet needs of an API server: its URL (the pods' service variables) and requests
    (envtest's `KubeAPI`, kmock's `KmockOperator`)."""

    url: str

    def request(self, method: str, path: str, body: Any = None) -> Any: ...


class Kubelet:
    def __init__(
        self,
        api: ApiServer,
        namespace: str | None,
        workdir: Path,
        *,
        hold: tuple[str, ...] = (),
        hold_images: tuple[str, ...] = (),
    ) -> None:
        self.api = api
        #: the namespace whose pods it runs; None: every namespace (processes are then keyed "ns/name")
        self.namespace = namespace
        self.workdir = workdir
        self.hold = hold
        self.hold_images = hold_images
        #: the address every pod has (its processes share this host's network)
        self.pod_ip = POD_IP
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        #: every pod whose process was started, as it was then (Spark deletes its executor pods)
        self.started: dict[str, dict[str, Any]] = {}
        self._started: set[str] = set()
        self._finished: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="test-kubelet", daemon=True)
        self.errors: list[str] = []

    def __enter__(self) -> Kubelet:
        self._ensure_node()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        for key, process in self.processes.items():
            if process.poll() is None:
                self._kill(key, process)

    def _kill(self, key: str, process: subprocess.Popen[bytes]) -> None:
        """Stop a pod's container at once: its process and every process it started (a Spark driver's
        JVM and Python workers), as a container's end takes all of them."""
        with contextlib.suppress(ProcessLookupError):  # the group has already gone
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()

    def log(self, pod: str) -> str:
        path = self.workdir / f"{pod}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def key(self, pod: dict[str, Any]) -> str:
        """How processes, logs and `started` name a pod: its name, or "ns/name" across namespaces."""
        meta = pod["metadata"]
        return meta["name"] if self.namespace else f"{meta['namespace']}/{meta['name']}"

    def _path(self, pod: dict[str, Any], sub: str = "") -> str:
        meta = pod["metadata"]
        return f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}{sub}"

    def running(self) -> list[str]:
        """Pods whose process runs now."""
        return [name for name, process in self.processes.items() if process.poll() is None]

    def pause(self, pod: str) -> None:
        """SIGSTOP the pod's processes (a node frozen mid-job); `resume` continues them."""
        os.killpg(self.processes[pod].pid, signal.SIGSTOP)

    def resume(self, pod: str) -> None:
        os.killpg(self.processes[pod].pid, signal.SIGCONT)

    def _ensure_node(self) -> None:
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}
        try:
            self.api.request("POST", "/api/v1/nodes", node)
        except urllib.error.HTTPError as exc:
            if exc.code != 409:
                raise

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            try:
                self._tick()
            except Exception as exc:  # keep playing; the test sees what went wrong
                self.errors.append(repr(exc))

    def _pods(self) -> list[dict[str, Any]]:
        path = f"/api/v1/namespaces/{self.namespace}/pods" if self.namespace else "/api/v1/pods"
        pods: list[dict[str, Any]] = self.api.request("GET", path)["items"]
        return pods

    def _held(self, pod: dict[str, Any]) -> bool:
        images = [c.get("image", "") for c in pod["spec"]["containers"]]
        return any(fnmatch.fnmatch(pod["metadata"]["name"], pattern) for pattern in self.hold) or any(
            fnmatch.fnmatch(image, pattern) for image in images for pattern in self.hold_images
        )

    def _tick(self) -> None:
        present = set()
        for pod in self._pods():
            key = self.key(pod)
            present.add(key)
            if self._held(pod):
                continue
            if not pod["spec"].get("nodeName"):
                self._bind(pod)
                continue
            if pod["metadata"].get("deletionTimestamp"):
                self._terminate(pod)
                continue
            if key not in self._started:
                self._start(pod)
            process = self.processes.get(key)
            if process is not None and key not in self._finished and process.poll() is not None:
                self._finish(pod, process.returncode)
        for key, process in self.processes.items():  # deleted pods: their processes go too
            if key not in present and process.poll() is None:
                self._kill(key, process)

    def _terminate(self, pod: dict[str, Any]) -> None:
        """A deleted pod: stop its process, then remove the object (the kubelet's final, graceless delete)."""
        process = self.processes.get(self.key(pod))
        if process is not None and process.poll() is None:
            self._kill(self.key(pod), process)
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
        try:
            self.api.request("DELETE", self._path(pod), options)
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise

    def _bind(self, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": NODE},
        }
        self.api.request("POST", self._path(pod, "/binding"), binding)

    def _base_env(self) -> dict[str, str]:
        """What the image gives every container before the pod's own env: here this host's paths,
        never this test process's other variables (a live Spark gateway's settings among them)."""
        base = ("PATH", "HOME", "JAVA_HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH")
        env = {name: os.environ[name] for name in base if name in os.environ}
        env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable  # what the job image sets
        return env

    def _address(self, pod: dict[str, Any]) -> str:
        """The pod's IP address."""
        return self.pod_ip

    def service_variables(self) -> dict[str, str]:
        """KUBERNETES_SERVICE_HOST and _PORT: the kubelet gives every container the API server's
        address (the `kubernetes` Service), which in-cluster clients, Spark's among them, start from."""
        url = urllib.parse.urlsplit(self.api.url)
        port = url.port or (443 if url.scheme == "https" else 80)
        return {"KUBERNETES_SERVICE_HOST": url.hostname or "", "KUBERNETES_SERVICE_PORT": str(port)}

    def _env(self, pod: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
        """What a container gets: the pod's env over the image's base and the service variables."""
        env = {**self._base_env(), **self.service_variables()}
        namespace = pod["metadata"]["namespace"]
        address = self._address(pod)
        fields = {
            "metadata.name": pod["metadata"]["name"],
            "metadata.namespace": namespace,
            "metadata.uid": pod["metadata"].get("uid", ""),
            "spec.nodeName": NODE,
            "spec.serviceAccountName": pod["spec"].get("serviceAccountName", "default"),
            "status.podIP": address,
            "status.podIPs": address,
            "status.hostIP": address,
        }
        for item in container.get("env") or []:
            source = item.get("valueFrom", {})
            if "value" in item:
                env[item["name"]] = expand(item["value"], env)
            elif "secretKeyRef" in source:
                ref = source["secretKeyRef"]
                env[item["name"]] = self._data(namespace, "secrets", ref["name"])[ref["key"]].decode()
            elif "fieldRef" in source:
                env[item["name"]] = fields[source["fieldRef"]["fieldPath"]]
        return env

    def _data(self, namespace: str, kind: str, name: str) -> dict[str, bytes]:
        found = self.api.request("GET", f"/api/v1/namespaces/{namespace}/{kind}/{name}")
        if kind == "secrets":
            return {key: base64.b64decode(value) for key, value in (found.get("data") or {}).items()}
        return {key: value.encode() for key, value in (found.get("data") or {}).items()}

    def _volume_directory(self, pod: dict[str, Any], volume: dict[str, Any]) -> Path:
        """Where a volume of the pod lives on this host: a directory of the pod's own."""
        return self.workdir / self.key(pod) / "volumes" / str(volume["name"])

    def _volumes(self, pod: dict[str, Any], container: dict[str, Any]) -> dict[str, Path]:
        """Each mounted volume as a local directory: mount path -> directory."""
        namespace = pod["metadata"]["namespace"]
        volumes = {volume["name"]: volume for volume in pod["spec"].get("volumes") or []}
        mounts: dict[str, Path] = {}
        for mount in container.get("volumeMounts") or []:
            volume = volumes[mount["name"]]
            directory = self._volume_directory(pod, volume)
            directory.mkdir(parents=True, exist_ok=True)
            files: dict[str, bytes] = {}
            if "secret" in volume:
                files = self._data(namespace, "secrets", volume["secret"]["secretName"])
            elif "configMap" in volume:
                files = self._data(namespace, "configmaps", volume["configMap"]["name"])
            for key, content in files.items():
                (directory / key).write_bytes(content)
            mounts[mount["mountPath"].rstrip("/")] = directory
        return mounts

    @staticmethod
    def _executor_command(env: dict[str, str]) -> list[str]:
        """What the Spark image's entrypoint runs for `executor`, from pyspark's own jars."""
        import pyspark

        jars = os.path.join(os.path.dirname(pyspark.__file__), "jars", "*")
        java = os.path.join(env["JAVA_HOME"], "bin", "java") if "JAVA_HOME" in env else "java"
        numbered = [key for key in env if key.startswith("SPARK_JAVA_OPT_")]
        options = [env[key] for key in sorted(numbered, key=lambda key: int(key.rsplit("_", 1)[1]))]
        memory = env.get("SPARK_EXECUTOR_MEMORY", "1g")
        return [
            java, *options, f"-Xms{memory}", f"-Xmx{memory}", "-cp", ":".join(sorted(glob.glob(jars))),
            "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend",
            "--driver-url", env["SPARK_DRIVER_URL"], "--executor-id", env["SPARK_EXECUTOR_ID"],
            "--cores", env["SPARK_EXECUTOR_CORES"], "--app-id", env["SPARK_APPLICATION_ID"],
            "--hostname", env["SPARK_EXECUTOR_POD_IP"], "--resourceProfileId", env["SPARK_RESOURCE_PROFILE_ID"],
            "--podName", env["SPARK_EXECUTOR_POD_NAME"],
        ]  # fmt: skip

    def _prepare(self, pod: dict[str, Any], command: list[str], env: dict[str, str]) -> list[str]:
        """The last word on a container's command and env before it starts (nothing to add here)."""
        return command

    def _start(self, pod: dict[str, Any]) -> None:
        key = self.key(pod)
        container = pod["spec"]["containers"][0]
        env = self._env(pod, container)
        command = [expand(part, env) for part in [*container.get("command", []), *container.get("args", [])]]
        for mount_path, directory in self._volumes(pod, container).items():
            for name, value in env.items():
                if value == mount_path or value.startswith(mount_path + "/"):
                    env[name] = str(directory) + value[len(mount_path) :]
            # as a whole argument or after `--flag=`, the same path here
            inside = re.compile(rf"(?:^|(?<==)){re.escape(mount_path)}(?=/|$)")
            command = [inside.sub(str(directory).replace("\\", "\\\\"), part) for part in command]
        if command == ["executor"]:
            command = self._executor_command(env)
        elif command and command[0] == "python":
            command[0] = sys.executable
        (self.workdir / key).parent.mkdir(parents=True, exist_ok=True)
        env["ACIDTABLES_TERMINATION_LOG"] = str(self.workdir / f"{key}.termination")
        command = self._prepare(pod, command, env)
        self._started.add(key)
        self.started[key] = pod
        with (self.workdir / f"{key}.log").open("wb") as out:
            # a session of its own: the container's processes are one group, killed together
            self.processes[key] = subprocess.Popen(
                command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self._status(
            pod,
            {
                "phase": "Running",
                "startTime": _now(),
                "podIP": self._address(pod),
                "podIPs": [{"ip": self._address(pod)}],
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": _now()}],
                "containerStatuses": [self._container(container, {"running": {"startedAt": _now()}})],
            },
        )

    def _finish(self, pod: dict[str, Any], code: int) -> None:
        key = self.key(pod)
        self._finished.add(key)
        container = pod["spec"]["containers"][0]
        message_file = self.workdir / f"{key}.termination"
        message = message_file.read_text()[:4096] if message_file.exists() else ""
        terminated = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "message": message,
            "startedAt": _now(),
            "finishedAt": _now(),
        }
        self._status(
            pod,
            {
                "phase": "Succeeded" if code == 0 else "Failed",
                "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": _now()}],
                "containerStatuses": [self._container(container, {"terminated": terminated})],
            },
        )

    @staticmethod
    def _container(container: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
        return {
            "name": container["name"],
            "image": container["image"],
            "imageID": "",
            "ready": "running" in state,
            "restartCount": 0,
            "state": state,
        }

    def _status(self, pod: dict[str, Any], status: dict[str, Any]) -> None:
        try:
            self.api.request("PATCH", self._path(pod, "/status"), {"status": status})
        except urllib.error.HTTPError as exc:
            if exc.code != 404:  # deleted meanwhile
                raise
