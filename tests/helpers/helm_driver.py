"""Helm's own engine (helm-sdkpy, Python 3.12+) driven from the test suite (Python 3.11) as a subprocess.

    python helm_driver.py lint CHART
    python helm_driver.py install RELEASE NAMESPACE CHART VALUES_JSON
    python helm_driver.py upgrade RELEASE NAMESPACE CHART VALUES_JSON
    python helm_driver.py uninstall RELEASE NAMESPACE
    python helm_driver.py render RELEASE NAMESPACE CHART STEPS_JSON [OBJECTS_JSON]

Prints one JSON document: {"ok": true, "result": ...} or {"ok": false, "error": "..."}; KUBECONFIG
names the API server. `render` needs none: it installs the first values of STEPS_JSON (a list of values
objects) and upgrades to each next one against an in-memory stub of the API (helm_stub_api.py) holding
OBJECTS_JSON, with Helm's release records in memory too, and answers one result per step: the rendered
manifest and NOTES, or Helm's error. Runs under the helm venv's interpreter, so it imports only
helm_sdkpy and the standard library.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from helm_sdkpy.actions import Configuration, Install, Uninstall, Upgrade  # type: ignore[import-not-found]
from helm_sdkpy.chart import Lint  # type: ignore[import-not-found]

ROOT = Path(__file__).resolve().parents[2]


async def render(release: str, namespace: str, chart: str, steps: list[dict[str, Any]], objects: Any) -> Any:
    """Each step's manifest and notes, or its error, from Helm's own install and upgrade actions."""
    sys.path.insert(0, str(ROOT))  # run as a script: make tests.helpers importable
    from tests.helpers.helm_stub_api import StubAPI

    answers: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as workdir, StubAPI(Path(workdir), objects, namespace) as stub:
        config = Configuration(namespace=namespace, kubeconfig=str(stub.kubeconfig))
        for index, values in enumerate(steps):
            try:
                # the stub validates nothing, so Helm's OpenAPI check is off; the tests validate instead
                if index == 0:
                    release_info = await Install(config).run(
                        release, chart, values=values, wait=False, disable_openapi_validation=True
                    )
                else:
                    release_info = await Upgrade(config).run(
                        release, chart, values=values, wait=False, disable_openapi_validation=True
                    )
            except Exception as exc:  # Helm's refusal is the answer the test reads
                answers.append({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
                continue
            notes = (release_info.get("info") or {}).get("notes", "")
            answers.append({"ok": True, "manifest": release_info.get("manifest", ""), "notes": notes})
    return answers


async def main(argv: list[str]) -> Any:
    command = argv[0]
    if command == "lint":
        return await Lint(Configuration(namespace="default")).run(argv[1])
    if command in ("install", "upgrade"):
        release, namespace, chart, values = argv[1], argv[2], argv[3], json.loads(argv[4])
        config = Configuration(namespace=namespace)
        if command == "install":
            return await Install(config).run(
                release,
                chart,
                values=values,
                create_namespace=True,
                wait=False,
                disable_openapi_validation=False,
                take_ownership=True,
            )
        return await Upgrade(config).run(
            release, chart, values=values, wait=False, disable_openapi_validation=False, take_ownership=True
        )
    if command == "render":
        objects = json.loads(argv[5]) if len(argv) > 5 else []
        return await render(argv[1], argv[2], argv[3], json.loads(argv[4]), objects)
    if command == "uninstall":
        return await Uninstall(Configuration(namespace=argv[2])).run(argv[1])
    raise SystemExit(f"unknown command {command}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["render"] and os.environ.get("HELM_DRIVER") != "memory":
        # Helm's release records in memory, not as Secrets in the stub. The engine (a Go library) reads
        # the environment the process started with, so setting os.environ here would not reach it.
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "HELM_DRIVER": "memory"})
    try:
        result = asyncio.run(main(sys.argv[1:]))
        print(json.dumps({"ok": True, "result": result}, default=str))
    except Exception as exc:  # every failure is an answer the test reads
        print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"}))
