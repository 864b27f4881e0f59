"""Helm's own engine (helm-sdkpy, Python 3.12+) driven from the test suite (Python 3.11) as a subprocess.

    python helm_driver.py lint CHART
    python helm_driver.py install RELEASE NAMESPACE CHART VALUES_JSON
    python helm_driver.py upgrade RELEASE NAMESPACE CHART VALUES_JSON
    python helm_driver.py uninstall RELEASE NAMESPACE

Prints one JSON document: {"ok": true, "result": ...} or {"ok": false, "error": "..."}; KUBECONFIG
names the API server. Runs under the helm venv's interpreter, so it imports only helm_sdkpy.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any


async def main(argv: list[str]) -> Any:
    from helm_sdkpy.actions import Configuration, Install, Uninstall, Upgrade  # type: ignore[import-not-found]
    from helm_sdkpy.chart import Lint  # type: ignore[import-not-found]

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
    if command == "uninstall":
        return await Uninstall(Configuration(namespace=argv[2])).run(argv[1])
    raise SystemExit(f"unknown command {command}")


if __name__ == "__main__":
    try:
        result = asyncio.run(main(sys.argv[1:]))
        print(json.dumps({"ok": True, "result": result}, default=str))
    except Exception as exc:  # every failure is an answer the test reads
        print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"}))
