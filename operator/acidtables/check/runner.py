"""The history runner (issue 10): writer processes run random jobs against real etcd (one member,
or a cluster of three) while a nemesis injects faults; then the checker proves the history legal.
Every run prints its seed first: `--seed` replays the same choices.

Faults (each logged with its time in faults.jsonl):
  kill       SIGKILL of a writer process from outside, at whatever point it is
  self-kill  writers kill themselves at chosen points: mid-staging, staged, inside commit()
  pause      SIGSTOP of an etcd member for 0.5-3 s, then SIGCONT
  restart    SIGKILL of an etcd member, started again on its data directory
  leader     (cluster only) SIGKILL of the member that leads, started again 0.5-2 s later
  partition  the proxies between writers and etcd keep every reply for 0.5-3 s, then drop the
             connections: requests apply, their answers never arrive (ambiguous commits)
  delay      the proxies pass replies on 0.2-1.5 s late for a few seconds (client deadlines expire)

A share of the writers' jobs are multi-table transactions over two or three of the run's tables
(issue 44), and reader processes pin several tables at one instant with catalog.snapshots() all run
long, through the same proxies; the checker proves every group all-or-nothing and every read atomic.
`plant` runs the writers and readers with a bug planted (acidtables.check.plants), which the checker
must report.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acidtables.core import Catalog, EmbeddedEtcd, EtcdSettings, Settings, Table
from acidtables.core.commit.txn_ids import lease_of
from acidtables.core.coordination.waiting import wait_for
from acidtables.core.storage.storage import txn_of_staging_dir

from .checker import Verdict, check_cleanup, check_multi, check_table, read_history
from .cluster import DIVERGING_RELEASES, EtcdCluster, etcd_binary, etcd_version, member_digests
from .plants import PLANTS
from .proxy import HoldingProxy
from .writer import LEASE_SECONDS, MULTI_TABLE_RATE, run_reader, run_writer

#: policy name on the command line -> create_table arguments
POLICIES: dict[str, dict[str, Any]] = {
    "maxcompute": {"conflict_policy": "maxcompute", "primary_key": ["id"], "partition_by": ["dt"]},
    "maxcompute-transactional": {"conflict_policy": "maxcompute-transactional", "partition_by": ["dt"]},
    "delta-ws": {"conflict_policy": "delta", "isolation_level": "WriteSerializable", "partition_by": ["dt"]},
    "delta-s": {"conflict_policy": "delta", "isolation_level": "Serializable", "partition_by": ["dt"]},
    # row-level concurrency is in effect on an unpartitioned table only (conflict-rules §1.2)
    "delta-rlc": {"conflict_policy": "delta", "row_level_concurrency": True},
}
FAULTS = ("kill", "self-kill", "pause", "restart", "leader", "partition", "delay")
#: faults that need a cluster
CLUSTER_FAULTS = frozenset({"leader"})
#: share of jobs that end with a self-kill when that fault is on
SELF_KILL_RATE = 0.02


@dataclass
class RunConfig:
    seed: int
    writers: int = 3
    duration_seconds: float = 60.0
    faults: tuple[str, ...] = FAULTS
    policies: tuple[str, ...] = tuple(POLICIES)
    workdir: Path | None = None
    #: etcd members: 1, or 3 for a cluster whose leader the nemesis can kill
    members: int = 1
    #: the etcd to run (default: cluster.etcd_binary(), the newest one found)
    etcd_binary: str | None = None
    #: kill members (restart, leader) even on an etcd release known to diverge when they die
    #: (etcd-io/etcd#13766); off, those faults are left out there, so a run reports acidtables' anomalies
    #: and not etcd's
    member_kills_on_diverging_etcd: bool = False
    #: reader processes taking catalog.snapshots() of several tables throughout
    readers: int = 1
    #: share of the writers' jobs that are multi-table transactions (with two tables or more)
    multi_table_rate: float = MULTI_TABLE_RATE
    #: a bug planted in the writers and readers (a name in acidtables.check.plants.PLANTS), or None
    plant: str | None = None


@dataclass
class RunResult:
    seed: int
    verdict: Verdict
    faults: Counter[str] = field(default_factory=Counter)
    workdir: Path | None = None
    members: int = 1
    etcd_version: str = ""

    def summary(self) -> str:
        v = self.verdict
        jobs = ", ".join(f"{k} {n}" for k, n in sorted(v.jobs.items()))
        faults = ", ".join(f"{k} {n}" for k, n in sorted(self.faults.items())) or "none"
        topology = f"{self.members} etcd {self.etcd_version} member{'s' if self.members > 1 else ''}"
        multi = ", ".join(f"{k} {n}" for k, n in sorted(v.multi.items())) or "none"
        lines = [
            f"seed {self.seed} ({topology}): {v.commits} commits; jobs: {jobs}; faults: {faults}",
            f"multi-table transactions: {multi}; {v.multi_commits} committed; {v.reads} snapshots() reads checked",
            f"anomalies: {len(v.anomalies)}",
            *(f"  {a}" for a in v.anomalies),
        ]
        return "\n".join(lines)


class Nemesis:
    """Injects one fault at a time, at random moments, and logs each with its time."""

    def __init__(
        self,
        rng: random.Random,
        members: list[EmbeddedEtcd],
        cluster: EtcdCluster | None,
        proxies: list[HoldingProxy],
        log: Path,
        faults: tuple[str, ...],
    ) -> None:
        self.rng, self.members, self.cluster, self.proxies = rng, members, cluster, proxies
        # self-kills are the writers' own; the nemesis strikes with the rest, on a cluster mostly at
        # its leader (what a 3-member etcd is there to test)
        self.faults = tuple(f for f in faults if f != "self-kill")
        if cluster is not None and "leader" in self.faults:
            self.faults += ("leader",) * len(self.faults)
        self._log = open(log, "a", buffering=1)  # noqa: SIM115 (open for the run)
        self.counts: Counter[str] = Counter()

    def _say(self, kind: str, **detail: Any) -> None:
        self.counts[kind] += 1
        self._log.write(json.dumps({"time": time.time(), "fault": kind, **detail}) + "\n")

    def strike(self, writers: dict[int, Any]) -> None:
        """One fault; a writer it kills is left for the runner to replace."""
        if not self.faults:
            return
        kind = self.rng.choice(self.faults)
        if kind == "kill" and writers:
            number = self.rng.choice(sorted(writers))
            process = writers[number]
            if process.pid is not None and process.is_alive():
                os.kill(process.pid, signal.SIGKILL)
                process.join()
                self._say("kill", writer=number)
        elif kind == "pause":
            member = self.rng.choice(self.members)
            if member.pid is not None:
                seconds = self.rng.uniform(0.5, 3.0)
                os.kill(member.pid, signal.SIGSTOP)
                self._say("pause", member=member.endpoint, seconds=round(seconds, 2))
                time.sleep(seconds)  # the fault's length, not synchronisation
                os.kill(member.pid, signal.SIGCONT)
        elif kind == "restart":
            member = self.rng.choice(self.members)
            self._say("restart", member=member.endpoint)
            member.kill()
            member.start()
        elif kind == "leader" and self.cluster is not None:
            leader = self.cluster.leader()
            if leader is not None:
                seconds = self.rng.uniform(0.5, 2.0)
                self._say("leader", member=leader.endpoint, seconds=round(seconds, 2))
                leader.kill()
                time.sleep(seconds)  # the fault's length: the others elect a new leader meanwhile
                leader.start()
        elif kind == "partition":
            seconds = self.rng.uniform(0.5, 3.0)
            self._say("partition", seconds=round(seconds, 2))
            for proxy in self.proxies:
                proxy.arm()
            time.sleep(seconds)  # the fault's length
            for proxy in self.proxies:
                proxy.disarm()
        elif kind == "delay":
            late, seconds = self.rng.uniform(0.2, 1.5), self.rng.uniform(1.0, 4.0)
            self._say("delay", late=round(late, 2), seconds=round(seconds, 2))
            for proxy in self.proxies:
                proxy.delay(late)
            time.sleep(seconds)  # the fault's length
            for proxy in self.proxies:
                proxy.delay(0)


def run(config: RunConfig) -> RunResult:
    if config.plant is not None and config.plant not in PLANTS:
        raise ValueError(f"unknown planted bug {config.plant!r}; known: {', '.join(PLANTS)}")
    rng = random.Random(config.seed)
    owned = config.workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="acidtables-check-")) if owned else Path(config.workdir)  # type: ignore[arg-type]
    workdir.mkdir(parents=True, exist_ok=True)
    history = workdir / "history"
    history.mkdir(exist_ok=True)
    faults = tuple(f for f in config.faults if config.members > 1 or f not in CLUSTER_FAULTS)
    binary = config.etcd_binary or etcd_binary()
    version = etcd_version(binary)
    member_kills = {"restart", "leader"} & set(faults)
    if version in DIVERGING_RELEASES and member_kills and not config.member_kills_on_diverging_etcd:
        faults = tuple(f for f in faults if f not in member_kills)
        print(
            f"note: etcd {version} ({binary}) can lose acknowledged writes when a member is killed under load "
            f"(etcd-io/etcd#13766, fixed in 3.5.3), so this run leaves out {', '.join(sorted(member_kills))}; "
            "point ACIDTABLES_ETCD_BINARY or KUBEBUILDER_ASSETS at a current etcd to run them, or name them "
            "in --faults to run them anyway",
            flush=True,
        )
    elif version in DIVERGING_RELEASES and member_kills:
        print(
            f"warning: etcd {version} ({binary}) can lose acknowledged writes when a member is killed under "
            "load (etcd-io/etcd#13766, fixed in 3.5.3): the checker will report them. Point "
            "ACIDTABLES_ETCD_BINARY or KUBEBUILDER_ASSETS at a current etcd.",
            flush=True,
        )
    with ExitStack() as stack:
        cluster: EtcdCluster | None = None
        if config.members > 1:
            cluster = EtcdCluster(workdir / "etcd", config.members, binary).start()
            stack.callback(cluster.stop)
            members = cluster.members
        else:
            single = EmbeddedEtcd(workdir / "etcd", binary=binary).start()
            stack.callback(single.stop)
            members = [single]
        proxies = [stack.enter_context(HoldingProxy(m.host, m.client_port, max_connections=256)) for m in members]
        prefix = f"/check/{config.seed}"
        warehouse = str(workdir / "warehouse")
        direct = tuple(m.endpoint for m in members)
        settings = Settings(
            etcd=EtcdSettings(direct, prefix=prefix, unavailable_timeout_seconds=30.0), warehouse=warehouse
        )
        with Catalog(settings) as catalog:
            names = []
            for policy in config.policies:
                name = f"check.{policy.replace('-', '_')}"
                catalog.create_table(name, schema="id BIGINT, dt STRING", **POLICIES[policy])
                names.append(name)
        until = time.time() + config.duration_seconds
        context = multiprocessing.get_context("spawn")
        writers: dict[int, Any] = {}
        counter = iter(range(10**6))
        kill_rate = SELF_KILL_RATE if "self-kill" in faults else 0.0

        def spawn() -> None:
            number = next(counter)
            process = context.Process(
                target=run_writer,
                args=(
                    tuple(p.endpoint for p in proxies),
                    prefix,
                    warehouse,
                    names,
                    rng.randrange(2**32),
                    str(history / f"writer-{number}.jsonl"),
                    until,
                    kill_rate,
                    config.multi_table_rate,
                    config.plant,
                ),
                daemon=True,
            )
            process.start()
            writers[number] = process

        readers = [
            context.Process(
                target=run_reader,
                args=(
                    tuple(p.endpoint for p in proxies),
                    prefix,
                    warehouse,
                    names,
                    rng.randrange(2**32),
                    str(history / f"reader-{number}.jsonl"),
                    until,
                    config.plant,
                ),
                daemon=True,
            )
            for number in range(config.readers if len(names) > 1 else 0)
        ]
        for reader in readers:
            reader.start()

        def replace_the_dead() -> None:
            for number, process in list(writers.items()):
                if not process.is_alive() and process.exitcode == -signal.SIGKILL and time.time() < until - 1:
                    writers.pop(number)
                    spawn()

        for _ in range(config.writers):
            spawn()
        nemesis = Nemesis(rng, members, cluster, proxies, workdir / "faults.jsonl", faults)
        while time.time() < until - 2:
            next_fault = time.time() + rng.uniform(1.0, 4.0)
            while time.time() < min(next_fault, until - 2):
                replace_the_dead()
                time.sleep(0.2)  # a polling interval for dead writers, not synchronisation
            if time.time() < until - 2:
                nemesis.strike(writers)
                replace_the_dead()
        for process in [*writers.values(), *readers]:
            process.join(timeout=config.duration_seconds + 60)
            if process.is_alive():
                process.kill()
        verdict = Verdict()
        written = read_history(history)
        with Catalog(settings) as catalog:
            tables = [catalog.table(name) for name in names]
            # every writer is gone; once their process leases run out, cleanup() may judge their staged
            # files (an unregistered transaction counts as running while its writer's lease lives)
            leases = _writer_leases(tables)
            wait_for(
                lambda: not catalog.services.coordinator.live_leases(leases),
                LEASE_SECONDS * 10,
                message="the dead writers' leases expired",
            )
            for table in tables:
                committed = check_table(catalog, table, written.invoked, written.outcomes, verdict)
                check_cleanup(table, committed, verdict)
            check_multi(catalog, tables, written, verdict)
        if len(members) > 1:
            check_members_agree(members, prefix, version, verdict)
        counts = nemesis.counts + written.kills
        return RunResult(config.seed, verdict, counts, workdir, config.members, version)


def _writer_leases(tables: list[Table]) -> set[int]:
    """The process leases named by the ids of every transaction that staged files (core.commit.txn_ids)."""
    leases: set[int] = set()
    for table in tables:
        for entry in table.storage.list_dir("data"):
            txn_id = txn_of_staging_dir(entry.path.rsplit("/", 1)[-1])
            lease = None if txn_id is None else lease_of(txn_id)
            if lease is not None:
                leases.add(lease)
    return leases


def check_members_agree(
    members: list[EmbeddedEtcd], prefix: str, version: str, verdict: Verdict, *, timeout_seconds: float = 30.0
) -> None:
    """Every member holds the same keys and values once the followers caught up; a difference is etcd's
    own divergence, which makes acknowledged commits vanish from the majority's view."""
    digests: dict[str, str] = {}

    def agree() -> bool:
        digests.update(member_digests(members, prefix))
        return len(set(digests.values())) == 1

    try:
        wait_for(agree, timeout_seconds, message="the etcd members converged")
    except TimeoutError:
        groups: dict[str, list[str]] = {}
        for endpoint, digest in digests.items():
            groups.setdefault(digest, []).append(endpoint)
        sides = " | ".join(", ".join(endpoints) for endpoints in groups.values())
        verdict.add(
            f"etcd {version}'s members hold different data after the run ({sides}): "
            "etcd diverged, so acknowledged commits can be missing from what the majority serves "
            f"(etcd-io/etcd#13766 affects {', '.join(DIVERGING_RELEASES)})"
        )
