"""The agent's heartbeat, sent from a thread of its own.

A node that misses heartbeats past the server's node timeout is marked
down and every job on it is requeued, so the heartbeat must go out even
while the agent's event loop is busy: starting a burst of runs (forks,
file work), reading a flood of output, unpacking a checkpoint. So it has
its own thread, its own event loop and its own HTTP connection; nothing
the main loop does can hold it up.

It reads what it reports (the running runs, GPU samples) through plain
functions, and hands what the server answers back to the main loop
(`on_reply`, `on_error`), which acts on it (register again, give up on
a refused credential).

The lease each reply grants is renewed here too (`agent.leasekeeper`),
counted from when the request was sent, so a busy main loop cannot let it
lapse. Once it has lapsed no heartbeat goes out: the main loop registers
again instead (`LeaseKeeper.check` tells it).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

from schedulearn.agent import lease as leases
from schedulearn.agent.client import AgentClient, ServerUnavailable
from schedulearn.agent.lease import Lease
from schedulearn.agent.leasekeeper import LeaseKeeper
from schedulearn.protocol import Heartbeat, HeartbeatReply

log = logging.getLogger(__name__)


class HeartbeatThread:
    """`start()` it once registered; `stop()` ends it (and joins the thread)."""

    def __init__(
        self,
        server: str,
        token: Callable[[], str],
        body: Callable[[], Heartbeat | None],
        interval: Callable[[], float],
        on_reply: Callable[[HeartbeatReply], object],
        on_error: Callable[[Exception], object],
        lease: LeaseKeeper | None = None,
    ) -> None:
        self.server = server
        self._token = token
        self._body = body
        self._interval = interval
        self._on_reply = on_reply
        self._on_error = on_error
        self._lease = lease
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="heartbeat", daemon=True)
        self.sent = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _main(self) -> None:
        asyncio.run(self._loop())

    async def _loop(self) -> None:
        client = AgentClient(self.server, self._token())
        warned = False
        try:
            while not self._stop.is_set():
                # This loop serves the heartbeat alone: blocking it is fine.
                if self._stop.wait(self._interval()):
                    return
                if self._lease is not None and self._lease.check():
                    continue  # lapsed: the main loop registers again
                body = self._body()
                if body is None:  # not registered (again) yet
                    continue
                client.set_token(self._token())
                sent_at = leases.now()
                try:
                    reply = await client.heartbeat(body)
                except ServerUnavailable as exc:
                    if not warned:
                        log.warning("heartbeat to %s failed (%s)", self.server, exc)
                        warned = True
                    continue
                except Exception as exc:
                    # Refused (the main loop decides: register again, or stop).
                    self._on_error(exc)
                    continue
                warned = False
                self.sent += 1
                if self._lease is not None:
                    self._lease.renew(granted(reply, sent_at))
                self._on_reply(reply)
        finally:
            await client.close()


def granted(reply: HeartbeatReply, sent_at: float) -> Lease | None:
    """The lease a reply grants (None: none, or the server no longer knows the node)."""
    if reply.lease_seconds is None or reply.reregister:
        return None
    return Lease.granted(sent_at, reply.lease_seconds, reply.lease_grace_seconds)
