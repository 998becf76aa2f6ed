"""The lease guard on real processes: a run whose lease lapsed is marked and stopped
(SIGTERM first, SIGKILL after the grace); a renewed lease leaves it alone; a run that
ended on its own, or a pid that now names another process, is not touched."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from schedulearn.agent import lease as leases
from schedulearn.agent import leaseguard
from schedulearn.agent.executors.process import SHIM
from schedulearn.agent.lease import Lease
from schedulearn.agent.state import JobRecord, StateStore
from schedulearn.protocol import Executor
from waiting import wait_until


@pytest.fixture
def store(tmp_path: Path) -> Iterator[StateStore]:
    state = StateStore(tmp_path / "state")
    yield state
    state.close()


def start_run(
    store: StateStore, job_id: int, script: str
) -> tuple[JobRecord, subprocess.Popen[bytes]]:
    """A run as the process executor starts it: the shim leading its own group."""
    job_dir = store.create_job_dir(job_id, 1)
    record = JobRecord(
        job_id=job_id,
        attempt=1,
        executor=Executor.SUBPROCESS,
        job_dir=str(job_dir),
        checkpoint_dir=str(store.default_checkpoint_dir(job_id)),
        started_at=time.time(),
    )
    proc = subprocess.Popen(
        ["/bin/sh", "-c", SHIM, str(job_dir / "exit_code"), "/bin/sh", "-c", script],
        start_new_session=True,
    )
    record.pid = proc.pid
    store.save(record)
    return record, proc


def lapsed(seconds_ago: float, grace: float) -> Lease:
    return Lease(expires=leases.now() - seconds_ago, grace=grace)


def test_a_lapsed_lease_stops_every_run_sigterm_first(store: StateStore) -> None:
    ready = store.root / "ready"
    polite, _ = start_run(
        store, 1, f"trap 'exit 0' TERM; touch {ready}-1; while :; do sleep 0.05; done"
    )
    stubborn, _ = start_run(
        store, 2, f"trap '' TERM; touch {ready}-2; while :; do sleep 0.05; done"
    )
    # Each shell has set its trap (a SIGTERM before that would kill it outright).
    wait_until(lambda: all(Path(f"{ready}-{n}").exists() for n in (1, 2)), 30, "the traps")
    leases.write(store.root, lapsed(1.0, grace=0.5))

    assert leaseguard.guard(store.root) == 0  # stops both, then nothing is left: it exits

    for record in (polite, stubborn):
        assert leases.stopped_by_lease(record.job_dir)
    # The guard is done once the jobs are gone; the shim writes the exit file just after.
    exit_file = Path(polite.job_dir) / "exit_code"
    wait_until(exit_file.exists, 10, "the polite job's shim to write its exit code")
    assert exit_file.read_text().strip() == "0"
    said = (store.root / leaseguard.LOG_FILE).read_text()
    assert "lease lapsed: SIGTERM to job 1.1" in said
    assert "job 2.1 outlived its grace (0.5s): SIGKILL" in said
    assert "job 1.1 outlived" not in said


def test_a_renewed_lease_leaves_the_run_alone_and_no_lease_ends_the_guard(
    store: StateStore,
) -> None:
    record, proc = start_run(store, 1, "sleep 60")
    leases.write(store.root, Lease(expires=leases.now() + 1.5, grace=0.1))
    guard = leaseguard.spawn(store.root)
    try:
        wait_until(lambda: leaseguard.guard_running(store.root), 10, "the guard to take its lock")
        # Renewed, as heartbeats do, until past the first lease's end: nothing is stopped.
        for _ in range(4):
            time.sleep(0.5)
            leases.write(store.root, Lease(expires=leases.now() + 1.5, grace=0.1))
        assert proc.poll() is None
        assert not leases.stopped_by_lease(record.job_dir)
        leases.clear(store.root)  # the agent left with nothing to enforce
        assert guard.wait(10) == 0
        assert proc.poll() is None
    finally:
        guard.kill()
        proc.kill()
        proc.wait()


def test_runs_that_ended_or_whose_pid_is_someone_elses_are_not_touched(
    store: StateStore,
) -> None:
    ended, proc = start_run(store, 1, "exit 3")
    proc.wait()
    ended.ended_at = time.time()
    store.save(ended)
    # A record whose pid now names a process that is not its shim.
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        reused, shim = start_run(store, 2, "exit 0")
        shim.wait()
        reused.pid = other.pid
        store.save(reused)
        leases.write(store.root, lapsed(0.0, grace=0.1))
        assert leaseguard.guard(store.root) == 0
        assert other.poll() is None
        assert (
            "lease lapsed with no run left to stop"
            in (store.root / leaseguard.LOG_FILE).read_text()
        )
        assert not leases.stopped_by_lease(reused.job_dir)
    finally:
        other.kill()
        other.wait()
    assert os.path.exists(ended.job_dir)
