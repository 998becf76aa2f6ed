"""The agent's state directory: one small record per job it runs.

A job outlives the agent that started it (an agent upgrade or crash must
not kill a week of training), so what the agent needs to find a job again
lives on disk, not in memory:

    <state_dir>/jobs/<job_id>.<attempt>/record.json   this module's `JobRecord`
    <state_dir>/jobs/<job_id>.<attempt>/stdout.log    subprocess output
    <state_dir>/jobs/<job_id>.<attempt>/stderr.log
    <state_dir>/jobs/<job_id>.<attempt>/exit_code     written by the job's shim
    <state_dir>/jobs/<job_id>.<attempt>/progress/     the job's progress file
    <state_dir>/checkpoints/<job_id>/                 default checkpoint volume

A record is written when the job starts, updated as log batches and
events are acknowledged by the server, and deleted only after the server
has acknowledged the job's exit. So a restarted agent re-adopts what
still runs and re-sends every exit report the server has not confirmed.
Writes go to a temporary file and are renamed into place, so a crash
never leaves half a record.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from schedulearn.protocol import Executor

log = logging.getLogger(__name__)


@dataclass(slots=True)
class JobRecord:
    """What the agent remembers about one run (attempt) of one job."""

    job_id: int
    attempt: int
    executor: Executor
    job_dir: str
    checkpoint_dir: str
    started_at: float
    # Subprocess executor: the shim's pid (= its process group), and its
    # start time in clock ticks since boot, so a reused pid is never mistaken
    # for the job.
    pid: int | None = None
    pid_start_ticks: int | None = None
    # Docker executor.
    container_id: str | None = None
    # Reporting progress, advanced only on the server's acknowledgement.
    started_acked: bool = False
    next_seq: int = 0
    log_positions: dict[str, int] = field(default_factory=dict)
    # Set once the job has ended; the exit report is re-sent until acknowledged.
    exit_code: int | None = None
    exit_message: str = ""
    ended_at: float | None = None
    # True when Schedulearn chose the checkpoint dir (and may delete it).
    own_checkpoint_dir: bool = True
    # After a preemption, upload the checkpoint dir before reporting the exit.
    upload_checkpoint: bool = False
    # Bytes of the progress file already acknowledged by the server.
    progress_position: int = 0
    # The stop order this run got (kept so a restarted agent still uploads).
    stop_reason: str | None = None

    @property
    def ended(self) -> bool:
        return self.ended_at is not None

    @property
    def path(self) -> Path:
        return Path(self.job_dir) / "record.json"

    def to_json(self) -> str:
        data = asdict(self)
        data["executor"] = self.executor.value
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> JobRecord:
        data = json.loads(text)
        known = {f.name for f in fields(cls)}
        data = {k: v for k, v in data.items() if k in known}
        data["executor"] = Executor(data["executor"])
        return cls(**data)


class StateStore:
    """The job records and per-job directories under one agent's state dir."""

    def __init__(self, state_dir: Path) -> None:
        self.root = state_dir
        self.jobs_dir = state_dir / "jobs"
        self.checkpoints_dir = state_dir / "checkpoints"
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        self.checkpoints_dir.mkdir(parents=True, exist_ok=True)

    def job_dir(self, job_id: int, attempt: int) -> Path:
        return self.jobs_dir / f"{job_id}.{attempt}"

    def default_checkpoint_dir(self, job_id: int) -> Path:
        # Shared by every attempt of the job: a preempted job resumes from it.
        return self.checkpoints_dir / str(job_id)

    def create_job_dir(self, job_id: int, attempt: int) -> Path:
        path = self.job_dir(job_id, attempt)
        if path.exists():
            # A stale directory of the same attempt (a start that never got
            # as far as a record): start clean rather than mix old logs in.
            shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        return path

    def save(self, record: JobRecord) -> None:
        path = record.path
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(record.to_json())
        os.replace(tmp, path)

    def load_all(self) -> list[JobRecord]:
        """Every record on disk; unreadable ones are reported and skipped."""
        records = []
        for job_dir in sorted(self.jobs_dir.iterdir()):
            path = job_dir / "record.json"
            if not path.is_file():
                continue
            try:
                records.append(JobRecord.from_json(path.read_text()))
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("ignoring unreadable job record %s: %s", path, exc)
        return records

    def stale_dirs(self) -> list[Path]:
        """Job directories without a record (a start interrupted by a crash)."""
        return [d for d in self.jobs_dir.iterdir() if not (d / "record.json").is_file()]

    def remove(self, record: JobRecord) -> None:
        """Forget a run whose exit the server has acknowledged."""
        shutil.rmtree(record.job_dir, ignore_errors=True)

    def remove_checkpoints(self, record: JobRecord) -> None:
        if record.own_checkpoint_dir:
            shutil.rmtree(record.checkpoint_dir, ignore_errors=True)
            path = Path(record.checkpoint_dir)
            path.with_name(path.name + ".attempt").unlink(missing_ok=True)
