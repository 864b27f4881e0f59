"""Figures, the machine they were measured on, and the two renderings: a console table and JSON.

Every figure that has a baseline carries the ratio to it, computed from numbers measured in the same
run against the same etcd, so a noisy machine moves the absolute numbers more than the ratios.
"""

from __future__ import annotations

import itertools
import json
import os
import platform
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from acidtables.core.coordination.embedded import find_etcd_binary


@dataclass(frozen=True)
class Goal:
    """A target a ratio must meet: `ratio >= target` (at_least) or `ratio <= target`."""

    text: str
    target: float
    at_least: bool

    def met(self, ratio: float) -> bool:
        return ratio >= self.target if self.at_least else ratio <= self.target


@dataclass(frozen=True)
class Figure:
    """One line of the results table."""

    benchmark: str
    name: str
    value: float
    unit: str
    #: the figure this one is divided by (a name in the same run), if any
    baseline: str | None = None
    ratio: float | None = None
    goal: Goal | None = None
    note: str = ""

    @property
    def met(self) -> bool | None:
        if self.goal is None or self.ratio is None:
            return None
        return self.goal.met(self.ratio)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["met"] = self.met
        return out


@dataclass
class Report:
    suite: str
    quick: bool
    machine: dict[str, Any]
    started_at: str
    figures: list[Figure] = field(default_factory=list)
    #: per-benchmark raw measurements (every sample), for anyone who wants more than the table
    details: dict[str, Any] = field(default_factory=dict)
    finished_at: str = ""

    def add(self, figure: Figure) -> Figure:
        self.figures.append(figure)
        return figure

    def to_json(self) -> dict[str, Any]:
        return {
            "suite": self.suite,
            "quick": self.quick,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "machine": self.machine,
            "figures": [f.to_json() for f in self.figures],
            "details": self.details,
        }

    def write_json(self, directory: Path) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        stamp = self.started_at.replace(":", "").replace("-", "").split(".")[0]
        name = f"{self.suite}-{'quick-' if self.quick else ''}{stamp}"
        path = directory / f"{name}.json"
        # two runs started in the same second (side by side, as the memory runs go) keep both documents
        for n in itertools.count(2):
            try:
                with path.open("x") as out:
                    out.write(json.dumps(self.to_json(), indent=2) + "\n")
                return path
            except FileExistsError:
                path = directory / f"{name}-{n}.json"
        raise AssertionError("unreachable")

    def finish(self, results_dir: Path | None) -> Path | None:
        """Stamp the end of the run (time, load) and write the JSON if asked; every suite ends so."""
        self.machine["load_average_at_end"] = list(os.getloadavg())
        self.finished_at = now_iso()
        return self.write_json(results_dir) if results_dir is not None else None

    def render(self) -> str:
        rows = [("benchmark", "figure", "value", "vs baseline", "goal")]
        for f in self.figures:
            ratio = "" if f.ratio is None else f"{f.ratio:.2f}x {f.baseline}"
            goal = ""
            if f.goal is not None:
                goal = f"{f.goal.text}: {'met' if f.met else 'NOT met'}"
            rows.append((f.benchmark, f.name, _value(f.value, f.unit), ratio, goal))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = []
        for n, row in enumerate(rows):
            cells = [c.rjust(widths[i]) if i == 2 else c.ljust(widths[i]) for i, c in enumerate(row)]
            lines.append("  ".join(cells).rstrip())
            if n == 0:
                lines.append("  ".join("-" * w for w in widths))
        return "\n".join(lines)


def _value(value: float, unit: str) -> str:
    if unit == "s":
        return f"{value * 1000:.2f} ms" if value < 1 else f"{value:.2f} s"
    if unit in ("commits/s", "ops/s", "rows/s"):
        return f"{value:,.0f} {unit}"
    if float(value).is_integer():
        return f"{int(value):,} {unit}".rstrip()
    return f"{value:.2f} {unit}".rstrip()


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def machine_info() -> dict[str, Any]:
    """What the figures depend on: cores, CPU model, memory, Python, etcd, and how busy the box was."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        model = platform.processor()
    mem_gib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
                break
    except OSError:
        pass
    try:
        etcd_version = subprocess.run(
            [find_etcd_binary(), "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout.splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        etcd_version = "unknown"
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory_gib": mem_gib,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "etcd": etcd_version,
        "load_average_at_start": list(os.getloadavg()),
    }
