"""The operator's maintenance schedule (operator.maintenance): each table runs at its own fixed point
within +-10 % of the interval, the same across operator restarts, so tables do not all wake at once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from acidtables.operator.maintenance import JITTER, due, jittered

HOUR = timedelta(hours=1)


def test_the_jitter_is_fixed_per_table_and_spreads_tables_over_the_interval() -> None:
    spreads = [jittered(HOUR, f"uid-{n}") for n in range(200)]
    assert all(HOUR * (1 - JITTER) <= s <= HOUR * (1 + JITTER) for s in spreads)
    assert max(spreads) - min(spreads) > HOUR * JITTER  # spread out, not bunched
    assert len(set(spreads)) == 200
    assert jittered(HOUR, "uid-7") == spreads[7]  # a restarted operator keeps each table's point


def test_due_when_never_run_or_once_the_tables_own_interval_passed() -> None:
    now = datetime(2026, 11, 25, 12, tzinfo=UTC)
    assert due(None, now, HOUR, "uid-1")
    point = jittered(HOUR, "uid-1")
    last = (now - point).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert due(last, now, HOUR, "uid-1")
    assert not due(last, now - timedelta(seconds=1), HOUR, "uid-1")
