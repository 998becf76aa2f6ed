"""What every command against a server shares: the connection options, the
connection itself, JSON output, error lines and how times read.

Kept light on purpose (Typer and the standard library at import): each
command module imports this, and what a command does not use it must not
pay for at start-up. The client (and with it the wire models) is imported
when a command connects; Rich when something is printed through `out` or
`err`.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from schedulearn.cli.client import Client

# Several replicas: repeat --server or separate the URLs with commas (failover).
Servers = list[str] | None
ServerOpt = Annotated[
    Servers,
    typer.Option(
        "--server",
        help="Server URL; repeat it (or separate URLs with commas) for replicas to fail "
        "over between [env SCHEDULEARN_SERVER, config file]",
    ),
]
TokenOpt = Annotated[
    str | None, typer.Option("--token", help="API token [env SCHEDULEARN_TOKEN, config file]")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table")]


class _LazyConsole:
    """A Rich console made on first use (Rich is a tenth of a second to import)."""

    def __init__(self, stderr: bool) -> None:
        self._stderr = stderr
        self._console: Console | None = None

    def _real(self) -> Console:
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=self._stderr)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real(), name)

    # Dunder methods are looked up on the type, not through __getattr__:
    # Rich's Live (a progress bar) enters its console as a context manager.
    def __enter__(self) -> Console:
        return self._real().__enter__()

    def __exit__(self, *exc: object) -> None:
        self._real().__exit__(*exc)


out: Console = _LazyConsole(stderr=False)  # type: ignore[assignment]  # a stand-in until first use
err: Console = _LazyConsole(stderr=True)  # type: ignore[assignment]  # a stand-in until first use


def error(message: str) -> None:
    """An `error: ...` line on stderr (red on a terminal)."""
    label = "\x1b[31merror:\x1b[0m" if sys.stderr.isatty() else "error:"
    sys.stderr.write(f"{label} {message}\n")


def note(message: str) -> None:
    sys.stderr.write(message + "\n")


@contextmanager
def connect(server: Servers, token: str | None) -> Iterator[Client]:
    """A client for the server in force; an API error ends the command with its message."""
    from schedulearn.cli.client import ApiError, Client
    from schedulearn.cli.config import resolve

    config = resolve(server, token)
    try:
        with Client(config.server, config.token) as client:
            yield client
    except ApiError as exc:
        error(exc.message)
        raise typer.Exit(1) from None


def dump(obj: Any) -> None:
    """JSON on stdout: a wire model, a `cli.replies` dataclass, or plain data."""
    if hasattr(obj, "model_dump"):
        obj = obj.model_dump(mode="json")
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        obj = dataclasses.asdict(obj)
    sys.stdout.write(json.dumps(obj, indent=2) + "\n")


def span(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(max(0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def ago(t: float | None) -> str:
    if t is None:
        return "-"
    return span(time.time() - t) + " ago"


def until(t: float | None, active: bool) -> str:
    """A predicted time as 'in 5m02s'; '?' when an active job's is unknown."""
    if t is None:
        return "?" if active else "-"
    return "now" if t <= time.time() else "in " + span(t - time.time())


def clock(t: float) -> str:
    """An epoch time as local 'YYYY-MM-DD HH:MM:SS'."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
