"""Log shipping: a run's output, spooled on the agent's disk, sent to the server in batches.

Lines arrive from the executor one at a time (`add`, a plain function the
executor's reader calls) and go straight to the run's spool file
(`agent.logspool`), never into memory: a job printing faster than the
server takes it, or a server that is away for an hour, costs disk (up to
the per-job cap), not lines. The shipper reads the spool back from the
last acknowledged byte, numbers the lines (continuing the run's
`next_seq`) and sends a batch at most every `interval` seconds, or at
once when `batch_lines` have piled up. A batch is retried until the
server acknowledges it; only then does the job's record advance (the
acknowledged spool offset and `next_seq`, and the spool's own size and
source positions), so a restarted agent re-sends exactly what was not
acknowledged and re-reads into the spool exactly what it did not hold.

The spool's own progress (its size and the source positions it holds)
is also saved every `save_every_bytes` of output, acknowledged or not:
what the record stores is in the spool for good, so the executor frees
its raw output up to there (`executors.process`), and a job printing
while the server is away costs the node the spool's cap plus one such
step, not all it printed.

When the server has cut this job's stored log (its per-job cap; it says
so in its acknowledgement), the spool is uploaded whole when the run
ends (`upload_full`), before the exit is reported, so `logs --full` can
give every line.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from pathlib import Path

from schedulearn.agent.client import AgentClient, until_acked
from schedulearn.agent.executors.base import OutputLine
from schedulearn.agent.logspool import LogSpool, SpoolMark, spool_path
from schedulearn.agent.state import JobRecord, StateStore
from schedulearn.agent.waits import wait_set
from schedulearn.protocol import LogBatch

# One agent's default disk cap for one run's output.
DEFAULT_DISK_CAP_BYTES = 1024**3
# How much output may be in the spool but not yet in the record (so not yet
# freed at its source): an eighth of the cap, within these bounds.
SAVE_EVERY_MIN_BYTES = 64 << 10
SAVE_EVERY_MAX_BYTES = 8 << 20


def save_every(disk_cap_bytes: int) -> int:
    return min(SAVE_EVERY_MAX_BYTES, max(SAVE_EVERY_MIN_BYTES, disk_cap_bytes // 8))


def mark_of(record: JobRecord) -> SpoolMark:
    return SpoolMark(
        record.spool_bytes,
        dict(record.log_positions),
        record.spool_cut_bytes,
        record.spool_cut_lines,
    )


class LogShipper:
    """Ships one run's output: `start()` once the server knows the run, `finish()` to
    flush and end, `stop()` to drop it unsent.

    The shipping task is made when there is something to ship: most short
    runs print nothing, and a task per run cost about 2% of an agent's CPU
    under `bench/api_load.py`.
    """

    def __init__(
        self,
        client: AgentClient,
        store: StateStore,
        record: JobRecord,
        node: str,
        interval: float = 0.2,
        batch_lines: int = 1000,
        disk_cap_bytes: int = DEFAULT_DISK_CAP_BYTES,
    ) -> None:
        self.client = client
        self.store = store
        self.record = record
        self.node = node
        self.interval = interval
        self.batch_lines = batch_lines
        self.spool = LogSpool(
            spool_path(record.job_dir), disk_cap_bytes, mark_of(record), node=node
        )
        self._wake = asyncio.Event()
        self._closing = False
        self._unsent = 0  # lines added since the last batch was taken
        self.save_every_bytes = save_every(disk_cap_bytes)
        self._unsaved = 0  # bytes of output added since the record last saved the spool
        self.lines_shipped = 0
        self._may_ship = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Ship from now on: at once what a restarted agent's spool holds unsent,
        else from the first line."""
        self._may_ship = True
        if self.record.shipped_bytes < self.spool.size:
            self._ship()

    async def finish(self) -> None:
        """Flush what is left and end (call after the executor has read the output to its end)."""
        self.spool.finish(time.time())
        self._closing = True
        self._wake.set()
        if self._task is None:
            await self.run()  # nothing may be left; if something is, ships it here
        else:
            await self._task

    def stop(self) -> None:
        """Drop what is unsent (the run is not reported), and close the spool."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self.spool.close()

    def _ship(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.run())

    def add(self, line: OutputLine) -> None:
        self.spool.add(line.stream, line.at, line.text, line.position)
        self._unsent += 1
        self._unsaved += len(line.text) + 1
        if self._unsaved >= self.save_every_bytes:
            self._save_spool()
        if self._unsent == 1 or self._unsent >= self.batch_lines:
            self._wake.set()
        if self._task is None and self._may_ship:
            self._ship()

    def _save_spool(self) -> None:
        """Store the spool's progress in the record (with what was acknowledged so far)."""
        record = self.record
        mark = self.spool.checkpoint()
        record.spool_bytes, record.log_positions = mark.size, mark.positions
        record.spool_cut_bytes, record.spool_cut_lines = mark.cut_bytes, mark.cut_lines
        self.store.save(record)
        self._unsaved = 0

    async def run(self) -> None:
        """Send batches until `finish()` has been called and everything is acknowledged."""
        try:
            while True:
                if self.record.shipped_bytes >= self.spool.size:
                    if self._closing:
                        return
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                if self._unsent < self.batch_lines and not self._closing:
                    # Let a burst of output gather into one batch.
                    deadline = time.monotonic() + self.interval
                    self._wake.clear()
                    while self._unsent < self.batch_lines and not self._closing:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            break
                        if not await wait_set(self._wake, left):
                            break
                        self._wake.clear()
                await self._send_one_batch()
        finally:
            self.spool.close()

    async def _send_one_batch(self) -> None:
        record = self.record
        self._unsent = 0
        raw = self.spool.read(record.shipped_bytes, self.batch_lines)
        if not raw:
            return
        lines = [self.spool.wire(r, record.next_seq + i) for i, (r, _) in enumerate(raw)]
        body = LogBatch.model_construct(attempt=record.attempt, node=self.node, lines=lines)
        job_id = record.job_id
        ack = await until_acked(lambda: self.client.logs(job_id, body), f"logs of job {job_id}")
        if ack is not None and ack.full_log_wanted:
            record.full_log_wanted = True
        record.shipped_bytes = raw[-1][1]
        record.next_seq += len(raw)
        self.lines_shipped += len(raw)
        self._save_spool()


async def upload_full(client: AgentClient, record: JobRecord, node: str) -> str:
    """Upload the run's whole spool (the server asked for it); a note for the exit message
    when it could not be kept ("" when it was)."""
    path = spool_path(record.job_dir)
    if record.full_log_sent or not os.path.exists(path):
        return ""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    sha256 = digest.hexdigest()
    kept = await until_acked(
        lambda: client.put_full_log(record.job_id, record.attempt, node, Path(path), sha256, size),
        f"the full log of job {record.job_id}",
    )
    record.full_log_sent = True
    if kept is None:
        return (
            f"its full log ({size} bytes) was refused by the server (see the agent's log on "
            f"{node!r}); the server keeps the head and tail of it"
        )
    return ""
