"""`schedulearn server` and `schedulearn up` (a server plus a local agent).

Also registers the user commands of `cli.jobs` (submit, jobs, show, logs,
cancel, nodes, policy, token, whoami). The `agent` command belongs to the
agent's own CLI module.

`up` owns the local set-up: it makes (or reuses) an admin token for you
and an agent token for its agent, writes the CLI config so `submit`
works from any shell, serves the API on uvicorn, starts the agent as a
child process once the server listens, and on Ctrl-C stops the agent
first (so it can stop its jobs and report them) and then the server.
"""

from __future__ import annotations

import getpass
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer
import uvicorn
from rich.console import Console

from schedulearn.cli import jobs as job_commands
from schedulearn.cli.config import config_path, load_file, save
from schedulearn.settings import ServerSettings

err = Console(stderr=True)

HostOpt = Annotated[str | None, typer.Option("--host", help="Listen address [127.0.0.1]")]
PortOpt = Annotated[int | None, typer.Option("--port", help="Listen port [8642]")]
DbOpt = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        help="sqlite:///path or postgresql://... [env SCHEDULEARN_DATABASE_URL; "
        "default: SQLite in your data directory]",
    ),
]
PolicyOpt = Annotated[
    str | None, typer.Option("--policy", help="Policy until an admin switches it [fifo]")
]


def _settings(
    host: str | None, port: int | None, database_url: str | None, policy: str | None
) -> ServerSettings:
    overrides: dict[str, object] = {}
    if host:
        overrides["host"] = host
    if port:
        overrides["port"] = port
    if database_url:
        overrides["database_url"] = database_url
    if policy:
        overrides["default_policy"] = policy
    return ServerSettings(**overrides)  # type: ignore[arg-type]


def _uvicorn_config(settings: ServerSettings) -> uvicorn.Config:
    from schedulearn.server import create_app

    return uvicorn.Config(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        access_log=False,  # per-request lines cost more than the request at 500/s
        timeout_graceful_shutdown=5,
        # Agents and busy clients keep connections open; a longer keep-alive
        # makes it rarer that a request races the server closing an idle one.
        timeout_keep_alive=30,
    )


def _check_port(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            err.print(
                f"[red]error:[/red] port {port} on {host} is in use (another Schedulearn?); "
                "stop it, or pass --port",
                highlight=False,
            )
            raise typer.Exit(1) from None


def server(
    host: HostOpt = None, port: PortOpt = None, database_url: DbOpt = None, policy: PolicyOpt = None
) -> None:
    """Run the API server and the scheduler (one process)."""
    settings = _settings(host, port, database_url, policy)
    _check_port(settings.host, settings.port)
    uvicorn.Server(_uvicorn_config(settings)).run()


# --- up ----------------------------------------------------------------------


def local_tokens(settings: ServerSettings) -> tuple[str, str]:
    """An admin token for this user and an agent token, reused from the CLI
    config when the database still knows them, made (and stored hashed) otherwise."""
    from schedulearn.server import auth, db

    database = db.Database(settings.database_url)
    try:
        db.migrate(database.engine)
        config = load_file()
        now = time.time()
        with database.session() as session:

            def known(token: str | None, role: auth.Role) -> bool:
                found = auth.TokenCache().load(session, auth.hash_token(token)) if token else None
                return found is not None and found.role is role

            admin = config.token
            if not known(admin, auth.Role.ADMIN):
                admin = auth.create_token(session, getpass.getuser(), auth.Role.ADMIN, now)
            agent = config.agent_token
            if not known(agent, auth.Role.AGENT):
                agent = auth.create_token(session, "local-agent", auth.Role.AGENT, now)
        assert admin is not None and agent is not None
        return admin, agent
    finally:
        database.close()


def agent_command(url: str, token: str, gpus: int | None, name: str) -> list[str]:
    """The local agent: the agent package's own entry point, as a child process."""
    cmd = [sys.executable, "-m", "schedulearn.agent", "--server", url, "--token", token]
    # Ctrl-C on `up` means "stop everything": the jobs too, not left to re-adopt.
    cmd += ["--name", name, "--stop-jobs-on-exit"]
    # One person's machine: jobs run as whoever ran `up`, root included.
    cmd += ["--run-jobs-as", "agent"]
    if gpus is not None:
        cmd += ["--gpus", str(gpus)]
    return cmd


def has_nvidia_gpus() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return bool(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return False


class _UpServer(uvicorn.Server):
    """uvicorn, plus the local agent: started once listening, stopped before the server."""

    def __init__(self, config: uvicorn.Config, agent_cmd: list[str], log_path: Path) -> None:
        super().__init__(config)
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
            self.agent_cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
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


def up(
    gpus: Annotated[
        int | None,
        typer.Option("--gpus", help="Virtual GPUs for the local agent [4 without NVIDIA GPUs]"),
    ] = None,
    host: HostOpt = None,
    port: PortOpt = None,
    database_url: DbOpt = None,
    policy: PolicyOpt = None,
    name: Annotated[str, typer.Option("--name", help="The local node's name")] = "local",
) -> None:
    """Run a server and a local agent; Ctrl-C stops both. Configures the CLI."""
    settings = _settings(host, port, database_url, policy)
    _check_port(settings.host, settings.port)
    if gpus is None and not has_nvidia_gpus():
        gpus = 4
    admin, agent_token = local_tokens(settings)
    url = f"http://{settings.host}:{settings.port}"
    path = save(
        load_file().model_copy(update={"server": url, "token": admin, "agent_token": agent_token})
    )
    log_path = config_path().parent / "agent.log"
    cmd = agent_command(url, agent_token, gpus, name)
    err.print(f"Schedulearn is up at [bold]{url}[/bold] (database: {settings.database_url})")
    what = f"{gpus} virtual GPUs" if gpus else "NVIDIA GPUs"
    err.print(f"  local agent {name!r}: {what}, log {log_path}")
    err.print(f"  CLI configured in {path}; try: schedulearn submit --gpus 1 -- echo hello")
    err.print(f"  web page: {url}/ui (sign in with the token in {path})")
    err.print("  Ctrl-C stops both.")
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    server_ = _UpServer(_uvicorn_config(settings), cmd, log_path)
    server_.run()
    if server_.agent and server_.agent.poll() is None:
        server_.agent.terminate()
        server_.agent.wait(timeout=20)


def register(app: typer.Typer) -> None:
    """Add this module's commands (and the user commands of `cli.jobs`) to the app."""
    app.command("server")(server)
    app.command("up")(up)
    job_commands.register(app)
