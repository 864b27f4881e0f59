"""Automatic compaction's conflict-aware choice (operator/autocompact.py), as a pure function."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from acidtables.core import InFlight, PartitionFiles
from acidtables.operator.autocompact import Thresholds, choose, duration, explain

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
LIMITS = Thresholds(min_small_files=3, min_delta_files=3, quiet_for=timedelta(minutes=10))


def part(dt: str, small: int = 5, changes: int = 0, version: int = 1) -> PartitionFiles:
    return PartitionFiles({"dt": dt}, small, small, changes, 100, version)


def writing(dt: str | None, operation: str = "insert_into") -> InFlight:
    return InFlight("t1", operation, partitions=None if dt is None else ({"dt": dt},))


def long_ago(_: int) -> datetime:
    return NOW - timedelta(hours=1)


def just_now(_: int) -> datetime:
    return NOW


def test_maxcompute_compacts_a_busy_partition_with_minor_and_a_quiet_one_with_major() -> None:
    busy = choose("maxcompute", False, LIMITS, [part("p", changes=5)], [writing("p")], long_ago, NOW)
    assert busy is not None and (busy.kind, busy.where) == ("minor", "dt = 'p'")
    assert "1 running write(s)" in busy.reason
    quiet = choose("maxcompute", False, LIMITS, [part("p", changes=5)], [], long_ago, NOW)
    assert quiet is not None and quiet.kind == "major"
    recent = choose("maxcompute", False, LIMITS, [part("p", changes=5)], [], just_now, NOW)
    assert recent is not None and recent.kind == "minor" and "not quiet yet" in recent.reason


def test_a_transactional_table_leaves_partitions_with_running_writes_alone() -> None:
    assert choose("maxcompute-transactional", False, LIMITS, [part("p")], [writing("p")], long_ago, NOW) is None
    assert choose("maxcompute-transactional", False, LIMITS, [part("p")], [writing(None)], long_ago, NOW) is None
    other = choose("maxcompute-transactional", False, LIMITS, [part("p")], [writing("q")], long_ago, NOW)
    assert other is not None and other.where == "dt = 'p'"


def test_delta_never_stands_in_the_way_of_an_update_but_ignores_blind_appends() -> None:
    parts = [part("p", small=9), part("q", small=4)]
    chosen = choose("delta", False, LIMITS, parts, [writing("p", "update")], long_ago, NOW)
    assert chosen is not None and chosen.where == "dt = 'q'"
    beside_append = choose("delta", False, LIMITS, parts, [writing("p")], long_ago, NOW)
    assert beside_append is not None and beside_append.where == "dt = 'p'"
    with_vectors = choose("delta", True, LIMITS, parts, [writing("p", "update")], long_ago, NOW)
    assert with_vectors is not None and with_vectors.where == "dt = 'p'"  # deletion vectors: no conflict


def test_below_the_thresholds_nothing_is_chosen() -> None:
    assert choose("delta", False, LIMITS, [part("p", small=2)], [], long_ago, NOW) is None


def test_durations_read_as_the_crd_spells_them() -> None:
    assert duration("1h30m", timedelta()) == timedelta(minutes=90)
    assert duration("500ms", timedelta()) == timedelta(milliseconds=500)
    assert duration(None, timedelta(minutes=10)) == timedelta(minutes=10)


# --- what automatic compaction waits for, said in status (issue 40, item 7) ------------------------

EXAMPLE = Thresholds(min_small_files=16, small_file_bytes=32 << 20, min_delta_files=64)


def test_below_the_thresholds_the_fullest_partition_is_said_against_them() -> None:
    spread = [part("2026-11-01", small=15, changes=15), part("2026-11-02", small=13, changes=13), part("x", small=2)]
    assert choose("maxcompute", False, EXAMPLE, spread, [], just_now, NOW) is None
    verdict = explain("maxcompute", EXAMPLE, spread, [])
    assert verdict.to_status() == {
        "reason": "BelowThresholds",
        "message": "the fullest of 3 partitions, dt=2026-11-01, has 15 small files (under 32Mi; minor.minSmallFiles "
        "16) and 15 delta files (major.minDeltaFiles 64): a job starts when a partition reaches either",
    }
    assert explain("delta", EXAMPLE, [], []).message == "the table has no files yet: nothing to compact"


def test_partitions_over_the_thresholds_that_writers_hold_are_said_with_the_rule() -> None:
    over = [part("p", small=20), part("q", small=1)]
    assert choose("maxcompute-transactional", False, EXAMPLE, over, [writing("p")], long_ago, NOW) is None
    verdict = explain("maxcompute-transactional", EXAMPLE, over, [writing("p")])
    assert verdict.reason == "WritersBusy"
    assert verdict.message == (
        "1 partitions over the thresholds, the fullest dt=p with 20 small files (under 32Mi; minor.minSmallFiles "
        "16) and 0 delta files (major.minDeltaFiles 64), but 1 transaction(s) write there: a small-file merge "
        "would lose to the write committing first (seed 001); it compacts once they end"
    )
    update = explain("delta", EXAMPLE, over, [writing("p", "update")])
    assert "an UPDATE, DELETE or MERGE that read those files would fail after it" in update.message
