"""The agent's state directory: what it must remember about each job it runs.

A job outlives the agent that started it (an agent upgrade or crash must
not kill a week of training), so what the agent needs to find a job again
lives on disk, not in memory:

    <state_dir>/agent.db                              one `JobRecord` per run (SQLite)
    <state_dir>/jobs/<job_id>.<attempt>/stdout.log    subprocess output
    <state_dir>/jobs/<job_id>.<attempt>/stderr.log
    <state_dir>/jobs/<job_id>.<attempt>/output.log    every run's output, spooled (`logspool`)
    <state_dir>/jobs/<job_id>.<attempt>/exit_code     written by the job's shim
    <state_dir>/jobs/<job_id>.<attempt>/progress*     the job's progress file
    <state_dir>/checkpoints/<job_id>/                 default checkpoint volume
    <state_dir>/spare/                                directories kept for reuse (`spares`)

Who may read what (an agent started as root runs jobs as their owners,
`agent.accounts`): the state directory, `jobs/` and `checkpoints/` are
the agent's, mode 0711, so a job cannot list them but can reach by path
the files that are its own; `agent.db` (and the credentials kept here)
are 0600, output logs 0600 (the agent opens them and hands the job the
descriptors), `spare/` 0700. A job directory is the agent's (0711); in
it the job's account owns only its exit file and progress file, and it
owns its checkpoint directory (0700). Ownership is set again whenever a
spare directory is reused, so nothing passes from one account to another.

A record is written when the job starts, updated as log batches and
events are acknowledged by the server, and deleted only after the server
has acknowledged the job's exit. So a restarted agent re-adopts what
still runs and re-sends every exit report the server has not confirmed.

Why SQLite and not a file per record: each write is a transaction, so a
crash never leaves half a record, and it allocates no inode. Writing a
temporary file and renaming it into place did, for every update: on
ext4 a node that starts and ends many short jobs then spends most of its
CPU in the kernel looking for a free inode past the recently deleted
ones (measured with `perf` under `bench/api_load.py`). `synchronous=
NORMAL` keeps a commit through a crash of the agent, like the files did.
Records of an older agent (`record.json` in each job directory) are
imported on start.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import sqlite3
from dataclasses import dataclass, field, fields
from pathlib import Path

from schedulearn.agent.accounts import Account, give
from schedulearn.agent.spares import SparePool
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
    # Subprocess executor: the shim's pid (= its process group).
    pid: int | None = None
    # Docker executor.
    container_id: str | None = None
    # Subprocess executor with cgroups: the run's cgroup directories (`agent.cgroups`).
    cgroup: list[str] = field(default_factory=list)
    # Reporting progress, advanced only on the server's acknowledgement.
    started_acked: bool = False
    next_seq: int = 0
    # Output spool (`agent.logspool`): the source position per stream that the
    # spool holds up to, its size then, what its cap cut, and the byte of it
    # the server has acknowledged. Saved together, so a restart resumes exactly.
    log_positions: dict[str, int] = field(default_factory=dict)
    spool_bytes: int = 0
    spool_cut_bytes: int = 0
    spool_cut_lines: int = 0
    shipped_bytes: int = 0
    # The server cut this job's stored log: upload the spool whole at the end.
    full_log_wanted: bool = False
    full_log_sent: bool = False
    # Set once the job has ended; the exit report is re-sent until acknowledged.
    exit_code: int | None = None
    exit_message: str = ""
    ended_at: float | None = None
    # True when Schedulearn chose the checkpoint dir (and may delete it).
    own_checkpoint_dir: bool = True
    # After a preemption, upload the checkpoint dir before reporting the exit.
    upload_checkpoint: bool = False
    # The server's limit for that upload (None: its default).
    checkpoint_max_bytes: int | None = None
    # Bytes of the progress file already acknowledged by the server.
    progress_position: int = 0
    # The stop order this run got (kept so a restarted agent still uploads).
    stop_reason: str | None = None
    # The run ended before any stop order reached it: its exit is its own
    # (reported as `on_its_own`, so a preemption begun meanwhile does not
    # requeue a job that has finished).
    ended_on_its_own: bool = False

    @property
    def ended(self) -> bool:
        return self.ended_at is not None

    def to_json(self) -> str:
        # Read field by field, not with `asdict`: it deep-copies every value,
        # and a record is saved several times in each run's life.
        data = {name: getattr(self, name) for name in _RECORD_FIELDS}
        data["executor"] = self.executor.value
        return _ENCODER.encode(data)

    @classmethod
    def from_json(cls, text: str) -> JobRecord:
        data = json.loads(text)
        known = {f.name for f in fields(cls)}
        data = {k: v for k, v in data.items() if k in known}
        data["executor"] = Executor(data["executor"])
        return cls(**data)


_RECORD_FIELDS = tuple(f.name for f in fields(JobRecord))
# One encoder for every save: `json.dumps` with options builds a new one each call.
_ENCODER = json.JSONEncoder(sort_keys=True)
_LEGACY_RECORD = "record.json"
# The files an agent makes in a job directory; one holding only these can be reused.
EXIT_FILE = "exit_code"
PROGRESS_FILE = "progress.jsonl"
RUN_FILES = frozenset({"stdout.log", "stderr.log", "output.log", EXIT_FILE, PROGRESS_FILE})


class StateStore:
    """The job records and per-job directories under one agent's state dir."""

    def __init__(self, state_dir: Path) -> None:
        self.root = state_dir
        self.jobs_dir = state_dir / "jobs"
        self.checkpoints_dir = state_dir / "checkpoints"
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        self.checkpoints_dir.mkdir(parents=True, exist_ok=True)
        # Enterable, not listable: a job reaches its own files by path only.
        for folder in (state_dir, self.jobs_dir, self.checkpoints_dir):
            folder.chmod(0o711)
        (state_dir / "spare").mkdir(mode=0o700, exist_ok=True)
        (state_dir / "spare").chmod(0o700)
        self._spare_job_dirs = SparePool(
            state_dir / "spare" / "jobs", keep=RUN_FILES, blank=frozenset({EXIT_FILE})
        )
        self._spare_empty_dirs = SparePool(state_dir / "spare" / "empty")
        # Autocommit (isolation_level=None): every statement is its own transaction.
        db_path = state_dir / "agent.db"
        db_path.touch(mode=0o600, exist_ok=True)
        self._db = sqlite3.connect(
            db_path, isolation_level=None, check_same_thread=False, timeout=30
        )
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS runs (job_id INTEGER NOT NULL, attempt INTEGER NOT NULL, "
            "record TEXT NOT NULL, PRIMARY KEY (job_id, attempt))"
        )
        self._import_legacy_records()
        # SQLite gives its -wal and -shm files the database's mode; files an
        # older agent made with its umask are closed to other users here.
        for path in state_dir.glob("agent.db*"):
            path.chmod(0o600)

    def close(self) -> None:
        self._db.close()

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
        self._spare_job_dirs.make(path)
        path.chmod(0o711)
        return path

    def create_checkpoint_dir(self, record: JobRecord, account: Account | None = None) -> None:
        """The run's checkpoint directory, made (or kept) and given to `account`
        (None: the agent's own user), mode 0700."""
        path = record.checkpoint_dir
        if not os.path.isdir(path):  # else an earlier attempt's, or one just downloaded
            if record.own_checkpoint_dir and os.path.dirname(path) == str(self.checkpoints_dir):
                self._spare_empty_dirs.make(path)
            else:
                os.makedirs(path, exist_ok=True)
        try:
            give(path, account)
        except OSError as exc:
            if record.own_checkpoint_dir:
                raise
            # A shared path (NFS with root squashed) may refuse; the admin owns it.
            log.warning("could not give %s to the job's account: %s", path, exc)

    def save(self, record: JobRecord) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO runs (job_id, attempt, record) VALUES (?, ?, ?)",
            (record.job_id, record.attempt, record.to_json()),
        )

    def load_all(self) -> list[JobRecord]:
        """Every record; unreadable ones are reported and skipped."""
        records = []
        for job_id, attempt, text in self._db.execute(
            "SELECT job_id, attempt, record FROM runs ORDER BY job_id, attempt"
        ):
            try:
                records.append(JobRecord.from_json(text))
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("ignoring unreadable record of job %s.%s: %s", job_id, attempt, exc)
        return records

    def stale_dirs(self) -> list[Path]:
        """Job directories without a record (a start interrupted by a crash)."""
        live = {Path(r.job_dir).name for r in self.load_all()}
        return [d for d in self.jobs_dir.iterdir() if d.name not in live]

    def remove(self, record: JobRecord) -> None:
        """Forget a run whose exit the server has acknowledged."""
        self._db.execute(
            "DELETE FROM runs WHERE job_id = ? AND attempt = ?", (record.job_id, record.attempt)
        )
        self._spare_job_dirs.remove(record.job_dir)

    def remove_checkpoints(self, record: JobRecord) -> None:
        if not record.own_checkpoint_dir:
            return
        path = record.checkpoint_dir
        if os.path.isdir(path):
            self._spare_empty_dirs.remove(path)  # kept only if the job saved nothing
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path.rstrip("/") + ".attempt")

    def _import_legacy_records(self) -> None:
        for legacy in self.jobs_dir.glob(f"*/{_LEGACY_RECORD}"):
            try:
                self.save(JobRecord.from_json(legacy.read_text()))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("ignoring unreadable job record %s: %s", legacy, exc)
                continue
            legacy.unlink()
