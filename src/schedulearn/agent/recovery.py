"""Recovery: the runs an earlier agent process left on this host.

Before registering, a starting agent asks each of its executors which
runs are still here: the state records (`agent.state`) say which were
started, and the container executors also find labelled containers
without a record (`record_for_orphan` gives them one). The registration
lists them; the server's reply says which it still counts as running
here (the set of runners follows them again, `Runners.adopt`) and which
it has written off.

A run the lease's guard is stopping (the lease lapsed while no agent
renewed it) is waited for first (`end_lease_stopped`): registering
without it lets the server run the job elsewhere at once.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from pathlib import Path

from schedulearn.agent import lease as leases
from schedulearn.agent.executors.base import ExecutorImpl, RunHandle
from schedulearn.agent.state import JobRecord, StateStore
from schedulearn.protocol import Executor

log = logging.getLogger(__name__)


async def recover(store: StateStore, executors: dict[Executor, ExecutorImpl]) -> list[RunHandle]:
    """The runs of earlier agent processes that the executors find on this host."""
    for stale in store.stale_dirs():
        shutil.rmtree(stale, ignore_errors=True)
    records = store.load_all()

    def record_for_orphan(job_id: int, attempt: int, container_id: str) -> JobRecord:
        return _record_for_orphan(store, job_id, attempt, container_id)

    handles: list[RunHandle] = []
    for executor in executors.values():
        handles.extend(await executor.recover(records, record_for_orphan))
    found = {(h.record.job_id, h.record.attempt) for h in handles}
    for record in records:
        if (record.job_id, record.attempt) not in found:
            log.warning(
                "job %s (attempt %s) ran under the %s executor, which this agent does "
                "not offer; start the agent with --executor %s to re-adopt it",
                record.job_id,
                record.attempt,
                record.executor.value,
                record.executor.value,
            )
    if handles:
        log.info("found %d runs of an earlier agent process", len(handles))
    return handles


def _record_for_orphan(
    store: StateStore, job_id: int, attempt: int, container_id: str
) -> JobRecord:
    """A state record for a labelled container found without one."""
    job_dir = store.create_job_dir(job_id, attempt)
    record = JobRecord(
        job_id=job_id,
        attempt=attempt,
        executor=Executor.DOCKER,
        job_dir=str(job_dir),
        checkpoint_dir=str(store.default_checkpoint_dir(job_id)),
        started_at=time.time(),
        container_id=container_id,
    )
    store.save(record)
    return record


async def end_lease_stopped(state_dir: Path, recovered: list[RunHandle]) -> None:
    """Wait for the runs the lease's guard is stopping to be gone: registering
    without them lets the server run them elsewhere at once."""
    lease = leases.read(state_dir)
    grace = lease.grace if lease is not None else 0.0
    dying = [h for h in recovered if h.is_alive() and leases.stopped_by_lease(h.record.job_dir)]
    if dying:
        log.info("waiting for %d runs stopped by the lapsed lease to end", len(dying))
        await asyncio.gather(*(h.stop(grace) for h in dying))


def still_running(recovered: list[RunHandle]) -> list[RunHandle]:
    """The recovered runs a registration lists: a run the lease's guard stopped
    is not, since the server counts it lost with its node and runs the job again."""
    return [h for h in recovered if not leases.stopped_by_lease(h.record.job_dir)]
