"""The CLI with no server answering (issue 35, done-when 4): a command given one
address that nothing listens on, or one that takes no connection (a listening
socket whose backlog is full, as a host that drops packets), gives up without
retrying, names the address it tried, and says how to start a server with the
command this install answers to. Real `schedulearn` processes, real sockets
on 127.0.0.1.

How long it takes is measured by `bench/cli_unreachable.py`; the bound here
(well under the 20 s the CLI used to keep retrying, and the 30 s it waited
for a connection) only catches a CLI that keeps trying.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from schedulearn.cli.freeports import free_port

GIVES_UP_WITHIN = 10  # seconds; see the docstring


def _user(home: Path) -> dict[str, str]:
    """A user with no configuration, the interpreter's scripts first on PATH."""
    drop = ("SCHEDULEARN_", "UV_RUN_RECURSION_DEPTH", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env |= {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "schedulearn.cli.main", *args],
        env=_user(home), capture_output=True, text=True, timeout=GIVES_UP_WITHIN,
    )  # fmt: skip


@contextmanager
def takes_no_connection() -> Iterator[str]:
    """An address whose connections are never made: a listening socket that
    never accepts, its backlog filled first."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        address = listener.getsockname()
        fillers = []
        try:
            for _ in range(8):  # more than the backlog of 0 (1-2 on Linux) holds
                filler = socket.socket()
                filler.setblocking(False)
                filler.connect_ex(address)
                fillers.append(filler)
            yield f"http://{address[0]}:{address[1]}"
        finally:
            for filler in fillers:
                filler.close()


@pytest.mark.parametrize(
    "args",
    [["jobs"], ["acct"], ["show", "1"], ["submit", "--", "true"]],
    ids=["jobs", "acct", "show", "submit"],
)
def test_a_closed_port_fails_at_once_naming_it(tmp_path: Path, args: list[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    said = _run(tmp_path, args[0], "--server", url, *args[1:])
    assert said.returncode == 1, said
    assert f"cannot reach the server at {url} " in said.stderr, said.stderr
    # This install's scripts are first on PATH: the bare name is the command.
    assert "start one with `schedulearn up`" in said.stderr, said.stderr


def test_an_address_that_takes_no_connection_fails_naming_it(tmp_path: Path) -> None:
    with takes_no_connection() as url:
        said = _run(tmp_path, "jobs", "--server", url)
    assert said.returncode == 1, said
    assert f"cannot reach the server at {url} (timed out)" in said.stderr, said.stderr
