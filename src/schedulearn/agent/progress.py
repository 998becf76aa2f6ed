"""Progress tailing: a job's `report(...)` lines, read and sent to the server.

The agent gives each run a progress file (`SCHEDULEARN_PROGRESS_FILE`,
`<job_dir>/progress.jsonl`; a container gets `<job_dir>/progress/`
mounted at `/schedulearn/progress`). `schedulearn.runtime.report`
appends one JSON object per line. `ProgressTail` reads complete new
lines every `interval` seconds, turns them into `ProgressReport`s and
sends them (`POST .../jobs/{id}/progress`); the read position in the
job's record advances only on the server's acknowledgement, so a
restarted agent sends exactly what was not acknowledged. A line that is
not a JSON object is skipped: progress is advisory, never fatal.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os

from schedulearn.agent.client import AgentClient, until_acked
from schedulearn.agent.state import PROGRESS_FILE, JobRecord, StateStore
from schedulearn.agent.waits import wait_set
from schedulearn.protocol import Executor, ProgressBatch, ProgressReport

log = logging.getLogger(__name__)

CONTAINER_PROGRESS_DIR = "/schedulearn/progress"
# The report's named fields, as `ProgressReport` declares them: numbers (whole
# ones where declared so) and records (`goodput`); any other number is a metric.
_RECORDS = frozenset(
    name
    for name, f in ProgressReport.model_fields.items()
    if name not in ("at", "metrics") and f.annotation not in (int | None, float | None)
)
_NAMED = frozenset(ProgressReport.model_fields) - {"at", "metrics"} - _RECORDS
_INTS = frozenset(n for n in _NAMED if ProgressReport.model_fields[n].annotation == int | None)
_MAX_BATCH = 500
_MAX_READ = 4 * 1024 * 1024


def progress_file(record: JobRecord) -> str:
    """Where on this host the run's reports land.

    A container gets the `progress` folder mounted (so it is created here);
    a process is told the file itself, which its first report creates (a
    job run as its owner's account gets it made beforehand, as the job
    cannot create files in the agent's directory).
    """
    if record.executor is Executor.DOCKER:
        folder = os.path.join(record.job_dir, "progress")
        os.makedirs(folder, exist_ok=True)
        return os.path.join(folder, PROGRESS_FILE)
    return os.path.join(record.job_dir, PROGRESS_FILE)


def parse_line(line: str) -> ProgressReport | None:
    """One `report()` line as a `ProgressReport`; None when it is not one."""
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("at"), int | float):
        return None
    fields: dict[str, object] = {"at": float(data["at"])}
    metrics: dict[str, float] = {}
    records: dict[str, object] = {}
    for key, value in data.items():
        if key in _RECORDS and isinstance(value, dict):
            records[key] = value
            continue
        if key == "at" or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if not math.isfinite(value):
            continue
        if key in _NAMED:
            fields[key] = int(value) if key in _INTS else float(value)
        elif len(metrics) < 50 and len(key) <= 100:
            metrics[key] = float(value)
    try:
        return ProgressReport.model_validate({**fields, **records, "metrics": metrics})
    except ValueError:
        if not records:
            return None
    # A record the server would refuse (a runtime of another version, a bug)
    # costs only itself: the figures beside it still go.
    try:
        return ProgressReport.model_validate({**fields, "metrics": metrics})
    except ValueError:
        return None


class ProgressTail:
    """Follows one run's progress file: `start()` begins, `finish()` sends the rest, `stop()`
    drops it.

    The file is first looked at one `interval` after the start, by a task
    made then: a run that ends sooner is read once, by `finish()`, and costs
    no task (a task per run cost about 2% of an agent's CPU under
    `bench/api_load.py`).
    """

    def __init__(
        self,
        client: AgentClient,
        store: StateStore,
        record: JobRecord,
        node: str,
        interval: float = 1.0,
    ) -> None:
        self.client = client
        self.store = store
        self.record = record
        self.node = node
        self.interval = interval
        self.path = progress_file(record)
        self._closing = asyncio.Event()
        self.sent = 0
        self._first_look: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._first_look = loop.call_later(self.interval, self._follow, loop)

    async def finish(self) -> None:
        """Send what the file holds now, and end."""
        self._closing.set()
        if self._first_look is not None:
            self._first_look.cancel()
        if self._task is None:
            await self._send_all()
        else:
            await self._task

    def stop(self) -> None:
        if self._first_look is not None:
            self._first_look.cancel()
        if self._task is not None and not self._task.done():
            self._task.cancel()

    def _follow(self, loop: asyncio.AbstractEventLoop) -> None:
        self._first_look = None
        self._task = loop.create_task(self._run())

    async def _run(self) -> None:
        while True:
            await self._send_all()
            if self._closing.is_set():
                return
            await wait_set(self._closing, self.interval)

    async def _send_all(self) -> None:
        while await self._send_new():
            pass  # more than one batch was waiting

    def _read_new(self) -> tuple[list[ProgressReport], int]:
        start = self.record.progress_position
        try:
            with open(self.path, "rb") as src:
                src.seek(start)
                chunk = src.read(_MAX_READ)
        except FileNotFoundError:
            return [], start
        end = chunk.rfind(b"\n")
        if end < 0:
            return [], start  # no complete line yet
        reports: list[ProgressReport] = []
        used = 0
        for raw in chunk[: end + 1].splitlines(keepends=True):
            used += len(raw)
            report = parse_line(raw.decode("utf-8", "replace"))
            if report is not None:
                reports.append(report)
            if len(reports) >= _MAX_BATCH:
                break
        return reports, start + used

    async def _send_new(self) -> bool:
        """Send one batch of new reports; True if there may be more to read."""
        reports, position = self._read_new()
        if position == self.record.progress_position:
            return False
        if reports:
            body = ProgressBatch(attempt=self.record.attempt, node=self.node, reports=reports)
            job_id = self.record.job_id
            await until_acked(
                lambda: self.client.progress(job_id, body), f"progress of job {job_id}"
            )
            self.sent += len(reports)
        self.record.progress_position = position
        self.store.save(self.record)
        return len(reports) >= _MAX_BATCH
