"""Log shipping: a job's output lines, numbered and sent to the server in batches.

Lines arrive from the executor one at a time (`add`, a plain function the
executor's reader calls). They are numbered in arrival order, continuing
from the last acknowledged number of this run, and sent at most every
`interval` seconds, or at once when `batch_lines` have piled up. A batch
is retried until the server acknowledges it; only then does the job's
record advance (`next_seq` and the per-stream resume positions), so a
restarted agent re-sends exactly what was not acknowledged.

While the server is unreachable, lines wait in memory up to `max_pending`;
beyond that the oldest are dropped and a marker line says how many.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

from schedulearn.agent.client import AgentClient, until_acked
from schedulearn.agent.executors.base import OutputLine
from schedulearn.agent.state import JobRecord, StateStore
from schedulearn.protocol import LogBatch, LogLine, LogStream


class LogShipper:
    """Ships one run's output; `run()` is its task, `close()` flushes and ends it."""

    def __init__(
        self,
        client: AgentClient,
        store: StateStore,
        record: JobRecord,
        node: str,
        interval: float = 0.2,
        batch_lines: int = 1000,
        max_pending: int = 100_000,
    ) -> None:
        self.client = client
        self.store = store
        self.record = record
        self.node = node
        self.interval = interval
        self.batch_lines = batch_lines
        self.max_pending = max_pending
        self._pending: deque[tuple[LogLine, int]] = deque()
        self._seq = record.next_seq
        self._dropped = 0
        self._wake = asyncio.Event()
        self._closing = False
        self.lines_shipped = 0

    def add(self, line: OutputLine) -> None:
        if len(self._pending) >= self.max_pending:
            self._pending.popleft()
            self._dropped += 1
        wire = LogLine(seq=self._seq, stream=line.stream, text=line.text, at=line.at)
        self._seq += 1
        self._pending.append((wire, line.position))
        if len(self._pending) == 1 or len(self._pending) >= self.batch_lines:
            self._wake.set()

    async def run(self) -> None:
        """Send batches until `close()` has been called and everything is acknowledged."""
        while True:
            if not self._pending:
                if self._closing:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            if len(self._pending) < self.batch_lines and not self._closing:
                # Let a burst of output gather into one batch.
                deadline = time.monotonic() + self.interval
                self._wake.clear()
                while len(self._pending) < self.batch_lines and not self._closing:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    try:
                        await asyncio.wait_for(self._wake.wait(), timeout=left)
                    except TimeoutError:
                        break
                    self._wake.clear()
            await self._send_one_batch()

    async def close(self) -> None:
        """Flush what is left (call after the executor has read the output to its end)."""
        self._closing = True
        self._wake.set()

    async def _send_one_batch(self) -> None:
        if self._dropped:
            marker = LogLine(
                seq=self._pending[0][0].seq,
                stream=LogStream.STDERR,
                text=f"[schedulearn: {self._dropped} lines dropped; the server was unreachable]",
                at=time.time(),
            )
            # The marker takes the number of the first surviving line, which moves up one.
            self._pending.appendleft((marker, -1))
            self._renumber_after_marker()
            self._dropped = 0
        count = min(self.batch_lines, len(self._pending))
        batch = [self._pending[i] for i in range(count)]
        body = LogBatch(attempt=self.record.attempt, node=self.node, lines=[w for w, _ in batch])
        job_id = self.record.job_id
        await until_acked(lambda: self.client.logs(job_id, body), f"logs of job {job_id}")
        for _ in range(count):
            self._pending.popleft()
        positions = self.record.log_positions
        for wire, position in batch:
            if position >= 0:
                positions[wire.stream.value] = position
        self.record.next_seq = batch[-1][0].seq + 1
        self.lines_shipped += count
        self.store.save(self.record)

    def _renumber_after_marker(self) -> None:
        items = list(self._pending)
        first = items[0][0].seq
        self._pending = deque(
            (wire.model_copy(update={"seq": first + i}), pos) for i, (wire, pos) in enumerate(items)
        )
        self._seq = first + len(items)
