"""Every command imports only what it uses (issue 15: CLI start-up).

Each check runs in a fresh interpreter: load one command the way the
`schedulearn` script does, then list the heavy packages it pulled in.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from schedulearn.cli.main import COMMANDS

PROBE = """
import json, sys
from schedulearn.cli.main import load_command
load_command(sys.argv[1])
{probe}
print(json.dumps(sorted({{m.split('.')[0] if not m.startswith('schedulearn') else m
                         for m in sys.modules}})))
"""


def loaded_by(command: str, probe: str = "") -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(probe=probe), command],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return set(json.loads(done.stdout))


# What no user command needs at start: the server, the agent, the simulator,
# Rich and YAML (both loaded when a command prints or reads a file with them),
# and httpx (the CLI talks HTTP through the standard library).
HEAVY = {"fastapi", "uvicorn", "sqlalchemy", "sqlmodel", "docker", "rich", "yaml", "httpx"}


@pytest.mark.parametrize("command", ["jobs", "whoami", "show", "logs", "cancel", "nodes", "acct"])
def test_user_commands_load_no_server_agent_simulator_or_rich(command: str) -> None:
    found = loaded_by(command)
    assert not HEAVY & found, sorted(HEAVY & found)
    assert not {m for m in found if m.startswith(("schedulearn.sim", "schedulearn.agent"))}


def test_simulate_help_loads_no_simulator() -> None:
    found = loaded_by("simulate")
    assert not {m for m in found if m.startswith("schedulearn.sim")}
    assert not HEAVY & found


def test_a_command_and_its_client_load_no_httpx_rich_or_pydantic() -> None:
    # The client imports the wire models (pydantic) in the methods that read
    # them, and the CLI config is a dataclass: `jobs` and `whoami` load neither.
    probe = "import schedulearn.cli.client, schedulearn.cli.config"
    found = loaded_by("jobs", probe)
    assert "schedulearn.cli.client" in found  # the probe did import the client
    assert not {"httpx", "rich", "pydantic", "pydantic_settings"} & found
    assert "schedulearn.protocol" not in found


def test_every_command_named_loads() -> None:
    from schedulearn.cli.main import load_command

    for name in COMMANDS:
        assert load_command(name) is not None, name


def test_the_lazy_console_works_where_rich_wants_a_console() -> None:
    # A progress bar enters its console (`with console:`): the stand-in must too.
    from rich.progress import Progress

    from schedulearn.cli.common import err

    with Progress(console=err, transient=True) as bar:
        bar.add_task("x", total=1)
