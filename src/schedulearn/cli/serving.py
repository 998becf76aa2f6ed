"""Serve the API on uvicorn: `schedulearn server`, and `schedulearn up`'s
server with its local agent as a child process.

Owns the uvicorn server objects and, for `up`, the agent child: started
once the server listens, stopped before the server on Ctrl-C. Only
`cli.live` imports this module, inside those two commands, because
uvicorn and the server come with the `server` extra.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from types import FrameType

import uvicorn
from rich.console import Console

from schedulearn.settings import ServerSettings
from schedulearn.startup import loading

err = Console(stderr=True)


def uvicorn_config(settings: ServerSettings) -> uvicorn.Config:
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    from schedulearn.server.guard import BodyDeadline, ReadTurns, guarded_protocol
    from schedulearn.server.startup import Starting

    def build() -> object:
        with loading():
            from schedulearn.server import create_app

            return create_app(settings)

    # Listen at once; the app is imported and started behind /healthz
    # (issue 14: a restart answered nothing for 10-18 s on a loaded machine).
    backend = "sqlite" if settings.database_url.startswith("sqlite") else "postgresql"

    def health_of(app: object) -> dict[str, str]:
        from schedulearn.server.api.ops import health_of

        return health_of(app)

    starting = Starting(
        build,
        {"status": "ok", "database": backend, "policy": settings.default_policy},
        health_of,
    )
    # Slow clients are timed out below the app (`server.guard`), which also
    # answers /healthz as the bytes arrive.
    app = BodyDeadline(
        ReadTurns(starting, settings.max_concurrent_reads),
        settings.body_timeout_seconds,
        settings.body_min_bytes_per_second,
    )
    return uvicorn.Config(
        app,
        http=guarded_protocol(AutoHTTPProtocol, settings.header_timeout_seconds, starting.health),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        access_log=False,  # per-request lines cost more than the request at 500/s
        timeout_graceful_shutdown=5,
        # Agents and busy clients keep connections open; a longer keep-alive
        # makes it rarer that a request races the server closing an idle one.
        timeout_keep_alive=30,
    )


def private_files() -> int:
    """From now on, every file and folder this process makes is its user's alone
    (umask 077): the database, its WAL, uploaded checkpoints and logs, the
    token file. Returns the umask before, for children that are not the server."""
    return os.umask(0o077)


def serve(settings: ServerSettings) -> None:
    """Run the API server and the scheduler until Ctrl-C."""
    private_files()
    uvicorn.Server(uvicorn_config(settings)).run()


class _UpServer(uvicorn.Server):
    """uvicorn, plus the local agent: started once listening, stopped before the server."""

    def __init__(
        self, config: uvicorn.Config, agent_cmd: list[str], log_path: Path, agent_umask: int
    ) -> None:
        super().__init__(config)
        # The agent's files (and its jobs') keep the user's own umask.
        self.agent_umask = agent_umask
        self.agent_cmd = agent_cmd
        self.log_path = log_path
        self.agent: subprocess.Popen[bytes] | None = None
        self._stopping = False
        self._stop_asked = 0.0

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.should_exit:
            return
        log = self.log_path.open("ab")
        # Its own session: the terminal's Ctrl-C reaches `up` only, which
        # then stops the agent in order.
        self.agent = subprocess.Popen(
            self.agent_cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            umask=self.agent_umask,
        )
        threading.Thread(target=self._watch_agent, daemon=True).start()

    def _watch_agent(self) -> None:
        assert self.agent is not None
        code = self.agent.wait()
        if not self._stopping:
            err.print(
                f"[red]the local agent exited (code {code}); see {self.log_path}[/red]",
                highlight=False,
            )
            self.should_exit = True

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._stopping and time.monotonic() - self._stop_asked < 2.0:
            # One Ctrl-C delivered twice: the terminal signals the whole
            # process group, and `uv run` without a TTY forwards it too.
            return
        if self._stopping:  # a second Ctrl-C: stop now
            if self.agent and self.agent.poll() is None:
                self.agent.kill()
            super().handle_exit(sig, frame)
            return
        self._stopping = True
        self._stop_asked = time.monotonic()
        err.print("stopping the agent, then the server...")
        threading.Thread(
            target=self._stop_agent_then_server, args=(sig, frame), daemon=True
        ).start()

    def _stop_agent_then_server(self, sig: int, frame: FrameType | None) -> None:
        if self.agent and self.agent.poll() is None:
            self.agent.send_signal(signal.SIGTERM)
            try:
                self.agent.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.agent.kill()
                self.agent.wait()
        super().handle_exit(sig, frame)


def serve_with_agent(settings: ServerSettings, agent_cmd: list[str], log_path: Path) -> None:
    """Run the server and, once it listens, the local agent; Ctrl-C stops both."""
    server = _UpServer(uvicorn_config(settings), agent_cmd, log_path, private_files())
    server.run()
    if server.agent and server.agent.poll() is None:
        server.agent.terminate()
        server.agent.wait(timeout=20)
