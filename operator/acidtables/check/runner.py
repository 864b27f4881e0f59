"""The history runner (issue 10): writer processes run random jobs against real etcd while a nemesis
kills writers with SIGKILL, pauses etcd with SIGSTOP and kills and restarts it; then the checker proves
the history legal. Every run prints its seed first: `--seed` replays the same choices."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acidtables.core import Catalog, EmbeddedEtcd, EtcdSettings, Settings

from .checker import Verdict, check_cleanup, check_table, read_history
from .writer import run_writer

#: policy name on the command line -> create_table arguments
POLICIES: dict[str, dict[str, Any]] = {
    "maxcompute": {"conflict_policy": "maxcompute", "primary_key": ["id"]},
    "maxcompute-transactional": {"conflict_policy": "maxcompute-transactional"},
    "delta-ws": {"conflict_policy": "delta", "isolation_level": "WriteSerializable"},
    "delta-s": {"conflict_policy": "delta", "isolation_level": "Serializable"},
}
FAULTS = ("kill", "pause", "restart")
#: writers' lease: a killed writer's registrations are gone this long after it died
LEASE_SECONDS = 3


@dataclass
class RunConfig:
    seed: int
    writers: int = 3
    duration_seconds: float = 60.0
    faults: tuple[str, ...] = FAULTS
    policies: tuple[str, ...] = tuple(POLICIES)
    workdir: Path | None = None


@dataclass
class RunResult:
    seed: int
    verdict: Verdict
    faults: Counter[str] = field(default_factory=Counter)
    workdir: Path | None = None

    def summary(self) -> str:
        v = self.verdict
        jobs = ", ".join(f"{k} {n}" for k, n in sorted(v.jobs.items()))
        faults = ", ".join(f"{k} {n}" for k, n in sorted(self.faults.items())) or "none"
        lines = [
            f"seed {self.seed}: {v.commits} commits; jobs: {jobs}; faults: {faults}",
            f"anomalies: {len(v.anomalies)}",
            *(f"  {a}" for a in v.anomalies),
        ]
        return "\n".join(lines)


class Nemesis:
    """Injects one fault at a time, at random moments, and logs each with its time."""

    def __init__(self, rng: random.Random, etcd: EmbeddedEtcd, log: Path, faults: tuple[str, ...]) -> None:
        self.rng, self.etcd, self.faults = rng, etcd, faults
        self._log = open(log, "a", buffering=1)  # noqa: SIM115 (open for the run)
        self.counts: Counter[str] = Counter()

    def _say(self, kind: str, **detail: Any) -> None:
        self.counts[kind] += 1
        self._log.write(json.dumps({"time": time.time(), "fault": kind, **detail}) + "\n")

    def strike(self, writers: dict[int, Any], respawn: Any) -> None:
        kind = self.rng.choice(self.faults)
        if kind == "kill" and writers:
            number = self.rng.choice(sorted(writers))
            process = writers.pop(number)
            if process.pid is not None and process.is_alive():
                os.kill(process.pid, signal.SIGKILL)
                process.join()
                self._say("kill", writer=number)
            respawn()
        elif kind == "pause" and self.etcd.pid is not None:
            seconds = self.rng.uniform(0.5, 3.0)
            os.kill(self.etcd.pid, signal.SIGSTOP)
            self._say("pause", seconds=seconds)
            time.sleep(seconds)  # the fault's length, not synchronisation
            os.kill(self.etcd.pid, signal.SIGCONT)
        elif kind == "restart":
            self._say("restart")
            self.etcd.kill()
            self.etcd.start()


def run(config: RunConfig) -> RunResult:
    rng = random.Random(config.seed)
    owned = config.workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="acidtables-check-")) if owned else Path(config.workdir)  # type: ignore[arg-type]
    workdir.mkdir(parents=True, exist_ok=True)
    history = workdir / "history"
    history.mkdir(exist_ok=True)
    etcd = EmbeddedEtcd(workdir / "etcd")
    etcd.start()
    prefix = f"/check/{config.seed}"
    warehouse = str(workdir / "warehouse")
    settings = Settings(
        etcd=EtcdSettings((etcd.endpoint,), prefix=prefix, unavailable_timeout_seconds=30.0), warehouse=warehouse
    )
    try:
        with Catalog(settings) as catalog:
            names = []
            for policy in config.policies:
                name = f"check.{policy.replace('-', '_')}"
                catalog.create_table(name, schema="id BIGINT, dt STRING", partition_by=["dt"], **POLICIES[policy])
                names.append(name)
        until = time.time() + config.duration_seconds
        context = multiprocessing.get_context("spawn")
        writers: dict[int, Any] = {}
        counter = iter(range(10**6))

        def spawn() -> None:
            number = next(counter)
            process = context.Process(
                target=run_writer,
                args=(
                    etcd.endpoint,
                    prefix,
                    warehouse,
                    names,
                    rng.randrange(2**32),
                    str(history / f"writer-{number}.jsonl"),
                    until,
                ),
                daemon=True,
            )
            process.start()
            writers[number] = process

        for _ in range(config.writers):
            spawn()
        nemesis = Nemesis(rng, etcd, workdir / "faults.jsonl", config.faults)
        while time.time() < until - 2:
            time.sleep(rng.uniform(1.0, 4.0))  # the gap between faults, not synchronisation
            if config.faults and time.time() < until - 2:
                nemesis.strike(writers, spawn)
        for process in writers.values():
            process.join(timeout=config.duration_seconds + 60)
            if process.is_alive():
                process.kill()
        time.sleep(LEASE_SECONDS + 1)  # the dead writers' leases run out (their registrations go)
        verdict = Verdict()
        invoked, outcomes = read_history(history)
        with Catalog(settings) as catalog:
            for name in names:
                table = catalog.table(name)
                check_table(catalog, table, invoked, outcomes, verdict)
                committed = {r.txn_id for r in table.commits(0)}
                check_cleanup(table, committed, verdict)
        return RunResult(config.seed, verdict, nemesis.counts, workdir)
    finally:
        etcd.stop()
