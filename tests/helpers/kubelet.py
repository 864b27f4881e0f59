"""Plays the scheduler and the kubelet for one namespace on the envtest API server, which has neither.

Every pod is bound to a Node object (`pods/binding`), its one container's command runs as a local
process (same etcd, same warehouse on local disk; `python` is this interpreter), and the pod's status
is written back through `pods/status`: Running when the process starts, then Succeeded or Failed with
the container's exit code and its termination message (what the process wrote to the file named by
ACIDTABLES_TERMINATION_LOG). A pod deleted while running has its process killed, as a kubelet would.
Pods whose name matches `hold` are left unscheduled (an image that never pulls, a full cluster).
"""

from __future__ import annotations

import base64
import fnmatch
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


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Kubelet:
    def __init__(self, api: KubeAPI, namespace: str, workdir: Path, *, hold: tuple[str, ...] = ()) -> None:
        self.api = api
        self.namespace = namespace
        self.workdir = workdir
        self.hold = hold
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
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

    def _env(self, container: dict[str, Any]) -> dict[str, str]:
        """What a container gets: the pod's env over a bare base (as an image would give), never this
        test process's own (a live Spark gateway's settings among them)."""
        base = ("PATH", "HOME", "JAVA_HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH")
        env = {name: os.environ[name] for name in base if name in os.environ}
        env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable  # what the job image sets
        for item in container.get("env") or []:
            if "value" in item:
                env[item["name"]] = item["value"]
            elif "secretKeyRef" in item.get("valueFrom", {}):
                ref = item["valueFrom"]["secretKeyRef"]
                secret = self.api.request("GET", f"/api/v1/namespaces/{self.namespace}/secrets/{ref['name']}")
                env[item["name"]] = base64.b64decode(secret["data"][ref["key"]]).decode()
        return env

    def _start(self, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        container = pod["spec"]["containers"][0]
        command = [*container.get("command", []), *container.get("args", [])]
        if command and command[0] == "python":
            command[0] = sys.executable
        env = self._env(container)
        env["ACIDTABLES_TERMINATION_LOG"] = str(self.workdir / f"{name}.termination")
        self._started.add(name)
        with (self.workdir / f"{name}.log").open("wb") as out:
            self.processes[name] = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
        self._status(
            name,
            {
                "phase": "Running",
                "startTime": _now(),
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
