"""Job events on their way to the server: every runner's, sent together.

A runner hands its event (started, exited, failed to start) to the
agent's `EventOutbox` and waits for the server's acknowledgement. One
request is on the way at a time and events that arrive meanwhile go in
the next, so an idle agent reports at once and a busy one sends many
events per request (which the server records in one transaction).

Delivery keeps `until_acked`'s promise for each event: retried with
backoff while the server is unreachable or could not record it, given
up only when the server refuses it for good. A batch refused as a whole
(a 4xx) is sent again event by event, so one bad event cannot hold up
the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from schedulearn.agent.client import (
    AgentClient,
    AuthRejected,
    ProtocolRefused,
    Rejected,
    ServerUnavailable,
    until_acked,
)
from schedulearn.agent.retry import Retry
from schedulearn.protocol import Ack, EventBatch, JobEvent, JobEventReport

log = logging.getLogger(__name__)

_Entry = tuple[JobEventReport, "asyncio.Future[Ack]"]


class EventOutbox:
    """`await send(report)` -> the server's `Ack` (`ignored` if it refused the event for good)."""

    def __init__(self, client: AgentClient, max_batch: int = 500) -> None:
        self.client = client
        self.max_batch = max_batch
        self.requests = 0  # batches sent, for the curious (tests, benchmarks)
        self._queue: list[_Entry] = []
        self._task: asyncio.Task[None] | None = None

    async def send(self, report: JobEventReport) -> Ack:
        future: asyncio.Future[Ack] = asyncio.get_running_loop().create_future()
        self._queue.append((report, future))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain(), name="event-outbox")
        return await future

    async def close(self) -> None:
        """Stop sending; runners still waiting are cancelled with their tasks."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _drain(self) -> None:
        # Not `Retry.run`: between tries the batch changes (acknowledged events
        # leave it, events that arrived meanwhile join it), so this loop drives
        # the same `Retry` by hand.
        retry = Retry("send job events")
        while self._queue:
            # A runner that gave up waiting (its task was cancelled) needs no report.
            self._queue = [e for e in self._queue if not e[1].done()]
            batch, self._queue = self._queue[: self.max_batch], self._queue[self.max_batch :]
            if not batch:
                return
            try:
                acks = await self._post(batch)
            except Exception as exc:
                if retry.retryable(exc):
                    self._queue[:0] = batch
                    await retry.pause(exc)
                    continue
                # A bad token, a protocol the server does not speak, or a bug:
                # no retry can help.
                if not isinstance(exc, AuthRejected | ProtocolRefused):
                    log.exception("could not send %d job events", len(batch))
                for _, future in batch:
                    _settle(future, exc)
                continue
            unrecorded = [entry for entry, ack in zip(batch, acks, strict=True) if not ack.ok]
            for (_, future), ack in zip(batch, acks, strict=True):
                if ack.ok:
                    _settle(future, ack)
            if unrecorded:
                self._queue[:0] = unrecorded
                await retry.pause(f"the server did not record {len(unrecorded)} of them")
            else:
                retry.succeeded()

    async def _post(self, batch: list[_Entry]) -> list[Ack]:
        self.requests += 1
        try:
            reply = await self.client.events(EventBatch(events=[r for r, _ in batch]))
        except (AuthRejected, ProtocolRefused):
            raise
        except Rejected as exc:
            log.warning("the server refused a batch of job events (%s); sending them singly", exc)
            return [await self._send_alone(report) for report, _ in batch]
        if len(reply.acks) != len(batch):
            raise ServerUnavailable(f"{len(reply.acks)} acknowledgements for {len(batch)} events")
        return reply.acks

    async def _send_alone(self, report: JobEventReport) -> Ack:
        # Not validated again: the server judges it (and may refuse it for good).
        event = JobEvent.model_construct(**report.model_dump(exclude={"job_id"}))
        what = f"{report.kind.value} event of job {report.job_id}"
        ack = await until_acked(lambda: self.client.event(report.job_id, event), what)
        # Refused for good: acknowledged as ignored, so the runner goes on.
        return ack or Ack(ignored=True)


def _settle(future: asyncio.Future[Ack], result: Ack | BaseException) -> None:
    if future.done():
        return
    if isinstance(result, BaseException):
        future.set_exception(result)
    else:
        future.set_result(result)
