"""`schedulearn server` and `schedulearn up` (a server plus a local agent).

The `agent` command belongs to the agent's own CLI module.

`up` owns the local set-up: it makes (or reuses) an admin token for you
and its local node's credential (`local_node_credential`, kept 0600 in the
agent's state directory, where the agent finds it: no join step and no
secret on the agent's command line), writes the CLI config (0600, never to the terminal) so `submit`
works from any shell, then hands over to `cli.serving`, which serves the
API on uvicorn, starts the agent as a child process once the server
listens, and on Ctrl-C stops the agent first (so it can stop its jobs and
report them) and then the server. That module is imported only by these
two commands: uvicorn and the server are the server extra's, and the
agent and user commands must run without them.
"""

from __future__ import annotations

import dataclasses
import getpass
import os
import socket
import sys
import time
from typing import TYPE_CHECKING, Annotated, TypedDict

import typer
from rich.console import Console

from schedulearn.cli import invocation
from schedulearn.cli.config import config_path, load_file, save
from schedulearn.settings import ServerSettings

if TYPE_CHECKING:
    from sqlmodel import Session

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


class _Overrides(TypedDict, total=False):
    """The `ServerSettings` fields `server` and `up` options may set."""

    host: str
    port: int
    database_url: str
    default_policy: str


def _settings(
    host: str | None, port: int | None, database_url: str | None, policy: str | None
) -> ServerSettings:
    overrides: _Overrides = {}
    if host:
        overrides["host"] = host
    if port:
        overrides["port"] = port
    if database_url:
        overrides["database_url"] = database_url
    if policy:
        overrides["default_policy"] = policy
    return ServerSettings(**overrides)


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
    # uvicorn (and the server it runs) come with the server extra, imported
    # only here so the agent and user commands run without them.
    from schedulearn.cli.serving import serve

    serve(settings)


# --- up ----------------------------------------------------------------------


def local_tokens(settings: ServerSettings, node: str = "local") -> tuple[str, str]:
    """An admin token for this user, reused from the CLI config when the database
    still knows it, made (and stored hashed) otherwise; and the local node's credential."""
    from schedulearn.server import auth, db
    from schedulearn.server.services import tokens

    database = db.Database(settings.database_url)
    try:
        db.migrate(database.engine)
        config = load_file()
        now = time.time()
        default = auth.PriorityRange(settings.user_priority_min, settings.user_priority_max)
        with database.session() as session:

            def works(token: str | None, role: auth.Role) -> bool:
                if not token:
                    return False
                found = auth.lookup(session, auth.hash_token(token), now, default)
                return not isinstance(found, auth.Refusal) and found[0].role is role

            admin = config.token
            if not works(admin, auth.Role.ADMIN):
                admin = tokens.issue(session, getpass.getuser(), auth.Role.ADMIN, now, "up")[1]
            agent = local_node_credential(session, node, now)
        assert admin is not None
        return admin, agent
    finally:
        database.close()


def local_node_credential(session: Session, node: str, now: float) -> str:
    """The local agent's credential: the one in its state directory while the
    database still holds it live for `node`, else a new one written there (0600)."""
    from schedulearn.agent import credential
    from schedulearn.agent.config import default_state_dir
    from schedulearn.server.services import enrollment

    state_dir = default_state_dir(node)
    try:
        stored = credential.load(state_dir)
    except credential.CredentialError:
        stored = None
    known = stored.credential if stored is not None and stored.node == node else None
    made = enrollment.local_credential(session, node, known, now)
    if made != known:
        credential.save(state_dir, credential.StoredCredential(node, made))
    return made


def agent_command(url: str, gpus: int | None, name: str) -> list[str]:
    """The local agent: the agent package's own entry point, as a child process.

    It reads its credential from its state directory, never from this command line."""
    cmd = [sys.executable, "-m", "schedulearn.agent", "--server", url]
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
    admin, _credential = local_tokens(settings, name)
    url = f"http://{settings.host}:{settings.port}"
    # The agent's credential lives in its own state directory, not in the CLI config.
    path = save(dataclasses.replace(load_file(), server=url, token=admin, agent_token=None))
    log_path = config_path().parent / "agent.log"
    cmd = agent_command(url, gpus, name)
    err.print(f"Schedulearn is up at [bold]{url}[/bold] (database: {settings.database_url})")
    what = f"{gpus} virtual GPUs" if gpus else "NVIDIA GPUs"
    err.print(f"  local agent {name!r}: {what}, log {log_path}")
    # The agent runs under this interpreter, and its jobs' PATH starts with its
    # directory (agent.jobenv): say which `python` jobs get.
    from schedulearn.agent import jobenv

    said = jobenv.python_line(jobenv.find_python(jobenv.job_path(None)))
    err.print(f"  {said}", soft_wrap=True, highlight=False)
    err.print(
        f"  your admin token and the agent's are in {path} (readable only by you); "
        "the CLI uses them from there",
        soft_wrap=True,  # a path broken over two lines cannot be copied
        highlight=False,
    )
    # The exact command for this install: in a clone the bare name is on no
    # other shell's PATH until its environment is activated (issue 35).
    cli = invocation.command()
    err.print(
        f"  from another shell: {cli} submit --gpus 1 -- echo hello",
        highlight=False,
        soft_wrap=True,
    )
    activate = invocation.activation()
    if activate is not None:
        err.print(
            f"  or `{activate}` once per shell, then `schedulearn ...`",
            highlight=False,
            soft_wrap=True,
        )
    err.print(
        f"  web page: {url}/ui (to sign in: {cli} web-login prints a one-time link)",
        highlight=False,
        soft_wrap=True,
    )
    err.print("  Ctrl-C stops both.")
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    from schedulearn.cli.serving import serve_with_agent

    serve_with_agent(settings, cmd, log_path)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
    app.command("server")(server)
    app.command("up")(up)
