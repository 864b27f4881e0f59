"""Plays the scheduler and the kubelet for one namespace on the envtest API server, which has neither.

Every pod is bound to a Node object (`pods/binding`), its one container's command runs as a local
process (same etcd, same warehouse on local disk; `python` is this interpreter), and the pod's status
is written back through `pods/status`: Running when the process starts, then Succeeded or Failed with
the container's exit code and its termination message (what the process wrote to the file named by
ACIDTABLES_TERMINATION_LOG). A pod deleted while running has its process killed, as a kubelet would.
Pods whose name matches `hold` are left unscheduled (an image that never pulls, a full cluster).

What a process cannot have, and how the helper stands in for it: the pod's IP is 127.0.0.1 (written
to status.podIP and given to the downward API); each volume is a directory under the pod's work
directory (secrets and config maps written into it, emptyDirs empty) and an env value naming a mount
path names that directory instead; a container started with the single argument `executor` (a Spark
executor pod, whose image's entrypoint would start the executor JVM) runs that JVM from pyspark's jars.
"""

from __future__ import annotations

import base64
import fnmatch
import glob
import os
import signal
import subprocess
import sys
import threading
import urllib.error
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.helpers.envtest import KubeAPI

NODE = "envtest-node"
POD_IP = "127.0.0.1"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Kubelet:
    def __init__(self, api: KubeAPI, namespace: str, workdir: Path, *, hold: tuple[str, ...] = ()) -> None:
        self.api = api
        self.namespace = namespace
        self.workdir = workdir
        self.hold = hold
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
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()

    def log(self, pod: str) -> str:
        path = self.workdir / f"{pod}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def running(self) -> list[str]:
        """Pods whose process runs now."""
        return [name for name, process in self.processes.items() if process.poll() is None]

    def pause(self, pod: str) -> None:
        """SIGSTOP the pod's process (a node frozen mid-job); `resume` continues it."""
        self.processes[pod].send_signal(signal.SIGSTOP)

    def resume(self, pod: str) -> None:
        self.processes[pod].send_signal(signal.SIGCONT)

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

    def _tick(self) -> None:
        pods = self.api.request("GET", f"/api/v1/namespaces/{self.namespace}/pods")["items"]
        present = set()
        for pod in pods:
            name = pod["metadata"]["name"]
            present.add(name)
            if any(fnmatch.fnmatch(name, pattern) for pattern in self.hold):
                continue
            if not pod["spec"].get("nodeName"):
                self._bind(name)
                continue
            if pod["metadata"].get("deletionTimestamp"):
                self._terminate(name)
                continue
            if name not in self._started:
                self._start(pod)
            process = self.processes.get(name)
            if process is not None and name not in self._finished and process.poll() is not None:
                self._finish(pod, process.returncode)
        for name, process in self.processes.items():  # deleted pods: their processes go too
            if name not in present and process.poll() is None:
                process.kill()
                process.wait()

    def _terminate(self, name: str) -> None:
        """A deleted pod: stop its process, then remove the object (the kubelet's final, graceless delete)."""
        process = self.processes.get(name)
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
        try:
            self.api.request("DELETE", f"/api/v1/namespaces/{self.namespace}/pods/{name}", options)
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise

    def _bind(self, name: str) -> None:
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": NODE},
        }
        self.api.request("POST", f"/api/v1/namespaces/{self.namespace}/pods/{name}/binding", binding)

    def _env(self, pod: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
        """What a container gets: the pod's env over a bare base (as an image would give), never this
        test process's own (a live Spark gateway's settings among them)."""
        base = ("PATH", "HOME", "JAVA_HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH")
        env = {name: os.environ[name] for name in base if name in os.environ}
        env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable  # what the job image sets
        fields = {
            "metadata.name": pod["metadata"]["name"],
            "metadata.namespace": self.namespace,
            "metadata.uid": pod["metadata"].get("uid", ""),
            "spec.nodeName": NODE,
            "spec.serviceAccountName": pod["spec"].get("serviceAccountName", "default"),
            "status.podIP": POD_IP,
            "status.podIPs": POD_IP,
            "status.hostIP": POD_IP,
        }
        for item in container.get("env") or []:
            source = item.get("valueFrom", {})
            if "value" in item:
                env[item["name"]] = item["value"]
            elif "secretKeyRef" in source:
                ref = source["secretKeyRef"]
                env[item["name"]] = self._data("secrets", ref["name"])[ref["key"]].decode()
            elif "fieldRef" in source:
                env[item["name"]] = fields[source["fieldRef"]["fieldPath"]]
        return env

    def _data(self, kind: str, name: str) -> dict[str, bytes]:
        found = self.api.request("GET", f"/api/v1/namespaces/{self.namespace}/{kind}/{name}")
        if kind == "secrets":
            return {key: base64.b64decode(value) for key, value in (found.get("data") or {}).items()}
        return {key: value.encode() for key, value in (found.get("data") or {}).items()}

    def _volumes(self, pod: dict[str, Any], container: dict[str, Any]) -> dict[str, Path]:
        """Each mounted volume as a local directory: mount path -> directory."""
        name = pod["metadata"]["name"]
        volumes = {volume["name"]: volume for volume in pod["spec"].get("volumes") or []}
        mounts: dict[str, Path] = {}
        for mount in container.get("volumeMounts") or []:
            volume = volumes[mount["name"]]
            directory = self.workdir / name / "volumes" / mount["name"]
            directory.mkdir(parents=True, exist_ok=True)
            files: dict[str, bytes] = {}
            if "secret" in volume:
                files = self._data("secrets", volume["secret"]["secretName"])
            elif "configMap" in volume:
                files = self._data("configmaps", volume["configMap"]["name"])
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

    def _start(self, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        container = pod["spec"]["containers"][0]
        command = [*container.get("command", []), *container.get("args", [])]
        env = self._env(pod, container)
        for mount_path, directory in self._volumes(pod, container).items():
            for key, value in env.items():
                if value == mount_path or value.startswith(mount_path + "/"):
                    env[key] = str(directory) + value[len(mount_path) :]
        if command == ["executor"]:
            command = self._executor_command(env)
        elif command and command[0] == "python":
            command[0] = sys.executable
        env["ACIDTABLES_TERMINATION_LOG"] = str(self.workdir / f"{name}.termination")
        self._started.add(name)
        self.started[name] = pod
        with (self.workdir / f"{name}.log").open("wb") as out:
            self.processes[name] = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
        self._status(
            name,
            {
                "phase": "Running",
                "startTime": _now(),
                "podIP": POD_IP,
                "podIPs": [{"ip": POD_IP}],
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": _now()}],
                "containerStatuses": [self._container(container, {"running": {"startedAt": _now()}})],
            },
        )

    def _finish(self, pod: dict[str, Any], code: int) -> None:
        name = pod["metadata"]["name"]
        self._finished.add(name)
        container = pod["spec"]["containers"][0]
        message_file = self.workdir / f"{name}.termination"
        message = message_file.read_text()[:4096] if message_file.exists() else ""
        terminated = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "message": message,
            "startedAt": _now(),
            "finishedAt": _now(),
        }
        self._status(
            name,
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

    def _status(self, name: str, status: dict[str, Any]) -> None:
        try:
            self.api.request("PATCH", f"/api/v1/namespaces/{self.namespace}/pods/{name}/status", {"status": status})
        except urllib.error.HTTPError as exc:
            if exc.code != 404:  # deleted meanwhile
                raise
