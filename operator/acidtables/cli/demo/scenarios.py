"""What the demos run, as data: one table per conflict policy and pairs of overlapping jobs on it."""

from __future__ import annotations

from dataclasses import dataclass

from acidtables.core import Operation

#: the demo tables' columns; `dt` is the partition column, `id` the primary key where there is one
SCHEMA = "id BIGINT, v STRING, dt STRING"


@dataclass(frozen=True)
class PolicySpec:
    """One demo table: a conflict policy and its settings."""

    policy: str
    isolation_level: str | None = None
    primary_key: bool = False

    @property
    def label(self) -> str:
        return f"{self.policy} ({self.isolation_level})" if self.isolation_level else self.policy

    @property
    def table_name(self) -> str:
        suffix = f"_{self.isolation_level.lower()}" if self.isolation_level else ""
        return f"demo.{self.policy.replace('-', '_')}{suffix}"


@dataclass(frozen=True)
class Job:
    """One side of a scenario: an operation on one partition (`dt=<partition>`)."""

    operation: Operation
    partition: str


@dataclass(frozen=True)
class Scenario:
    earlier: Job
    later: Job

    @property
    def partitions(self) -> str:
        if self.earlier.partition == self.later.partition:
            return f"same (dt={self.earlier.partition})"
        return f"different (dt={self.earlier.partition}, dt={self.later.partition})"


POLICIES: tuple[PolicySpec, ...] = (
    PolicySpec("maxcompute", primary_key=True),
    PolicySpec("maxcompute-transactional"),
    PolicySpec("delta", "WriteSerializable"),
    PolicySpec("delta", "Serializable"),
)

#: the transaction core's pairs (`demo --core`, which stages files with pyarrow): chosen so each policy
#: shows both outcomes; conflict-rules §3.1 and §8.1 say which to expect
CORE_SCENARIOS: tuple[Scenario, ...] = (
    Scenario(Job(Operation.INSERT_INTO, "a"), Job(Operation.INSERT_INTO, "a")),
    Scenario(Job(Operation.INSERT_INTO, "a"), Job(Operation.UPDATE, "a")),
    Scenario(Job(Operation.UPDATE, "a"), Job(Operation.UPDATE, "a")),
    Scenario(Job(Operation.INSERT_INTO, "a"), Job(Operation.MINOR_COMPACT, "b")),
)

#: the Spark demo's pairs: the same idea with the jobs Spark runs (an overwrite, a delete of some rows)
SPARK_SCENARIOS: tuple[Scenario, ...] = (
    Scenario(Job(Operation.INSERT_INTO, "a"), Job(Operation.INSERT_INTO, "a")),
    Scenario(Job(Operation.INSERT_OVERWRITE, "a"), Job(Operation.INSERT_INTO, "a")),
    Scenario(Job(Operation.UPDATE, "a"), Job(Operation.UPDATE, "a")),
    Scenario(Job(Operation.UPDATE, "a"), Job(Operation.DELETE, "b")),
    Scenario(Job(Operation.INSERT_INTO, "b"), Job(Operation.MINOR_COMPACT, "b")),
)

#: the table the time-travel part runs on (its row counts are plain: no merge-on-read)
TIME_TRAVEL_POLICY = POLICIES[2]

#: what every demo table starts with: (partition, files, rows per file); dt=b has two files to compact
INITIAL_LOAD = (("a", 2, 2), ("b", 2, 2))
