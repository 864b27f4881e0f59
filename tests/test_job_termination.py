"""A job pod's SIGTERM (jobs/termination.py): it interrupts the job at once, except during a commit, which
ends and is recorded first; one signal is enough, and a second never cuts the clean-up short.

A SIGTERM that interrupted a commit's etcd call could leave a committed version out of the outcome the
operator reads ("nothing was committed"). The whole job, signalled mid-write, runs in
tests/test_process_exit.py; these pin the handler's rules in this process."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from acidtables.errors import CommitOutcomeUnknown
from acidtables.jobs.compact import _stopped
from acidtables.jobs.outcome import JobOutcome
from acidtables.jobs.termination import Terminated, Termination


@pytest.fixture
def termination() -> Iterator[Termination]:
    handling = Termination()
    previous = signal.getsignal(signal.SIGTERM)
    handling.install()
    try:
        yield handling
    finally:
        signal.signal(signal.SIGTERM, previous)


def sigterm() -> None:
    os.kill(os.getpid(), signal.SIGTERM)


def test_a_sigterm_interrupts_the_job_at_once(termination: Termination) -> None:
    reached = []
    with pytest.raises(Terminated, match="stopped by SIGTERM"):
        sigterm()
        reached.append("after the signal")
    assert reached == []


def test_a_sigterm_during_a_commit_waits_for_the_commit_and_its_record(termination: Termination) -> None:
    recorded = []
    with pytest.raises(Terminated, match="stopped by SIGTERM"), termination.held():
        sigterm()  # as if it arrived while etcd was answering the commit
        recorded.append("version 7")  # the outcome's record of what was committed
    assert recorded == ["version 7"]
    # held steps nest: the signal is raised when the outermost one ends
    recorded.clear()
    termination.install()
    with pytest.raises(Terminated), termination.held():
        with termination.held():
            sigterm()
        recorded.append("after the inner step")
    assert recorded == ["after the inner step"]


def test_the_signal_is_raised_over_the_commits_own_error(termination: Termination) -> None:
    """A commit that lost its conflict while the signal waited: the job stops, not goes on to the next
    group."""
    with pytest.raises(Terminated), termination.held():
        sigterm()
        raise RuntimeError("lost to a concurrent commit")


def test_one_sigterm_is_enough_and_a_second_does_not_interrupt_the_clean_up(termination: Termination) -> None:
    with pytest.raises(Terminated):
        sigterm()
    cleaned = []
    sigterm()  # during the clean-up that the first began: ignored
    cleaned.append("Spark stopped, outcome written")
    assert cleaned == ["Spark stopped, outcome written"]
    termination.restore()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the test process's own, put back


def test_held_does_nothing_where_no_handler_is_installed() -> None:
    """run_compaction runs in other processes too (bench/stream.py): there it must change nothing."""
    done = []
    with Termination().held():
        done.append(1)
    assert done == [1] and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_commit_of_unknown_outcome_is_not_reported_as_nothing_committed(termination: Termination) -> None:
    """etcd trouble and a drained node come together: the commit the signal waited for lost its answer,
    and the outcome must say so, not that nothing was committed."""
    outcome = JobOutcome(committed_versions=[4])
    with pytest.raises(Terminated) as caught, termination.held():
        sigterm()
        raise CommitOutcomeUnknown("etcd's answer was lost; Table.find_commit('t-1') tells", txn_id="t-1")
    message = _stopped(caught.value, outcome)
    assert message.startswith("stopped by SIGTERM before it ended; versions [4] were committed")
    assert "CommitOutcomeUnknown: etcd's answer was lost; Table.find_commit('t-1') tells" in message


def test_installing_twice_still_restores_what_was_there_first() -> None:
    previous = signal.getsignal(signal.SIGTERM)
    handling = Termination()
    try:
        handling.install()
        handling.install()  # as `python -m acidtables.jobs` and then main() do
        handling.restore()
        assert signal.getsignal(signal.SIGTERM) == previous
    finally:
        signal.signal(signal.SIGTERM, previous)
