"""What each role imports, measured in a fresh interpreter.

The base install has no dependencies, so `schedulearn.runtime` (in every
training image), the core and the simulator must import nothing outside the
standard library; the agent and the user commands must not import the
server's or the plots' packages; the console script's front
(`cli.entry`) must import nothing third-party, because it runs exactly when
those packages are missing.
"""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from types import ModuleType

import schedulearn.core
import schedulearn.runtime
import schedulearn.sim

# Run in a child interpreter: this process has imported half the world already.
# Only what the imports add is counted (startup and .pth files are not ours).
PROBE = """
import importlib, json, sys
before = set(sys.modules)
for name in sys.argv[1:]:
    importlib.import_module(name)
added = {n.split(".")[0] for n in set(sys.modules) - before}
stdlib = set(sys.stdlib_module_names)
print(json.dumps(sorted(
    n for n in added
    if n not in stdlib and n != "schedulearn" and not n.startswith("_sysconfigdata")
    # multiprocessing registers the main module again as __mp_main__
    and n != "__mp_main__"
)))
"""

# Packages of the server and plots extras (and what they pull in).
SERVER_AND_PLOTS = {
    "fastapi",
    "starlette",
    "uvicorn",
    "sqlalchemy",
    "sqlmodel",
    "alembic",
    "psycopg",
    "prometheus_client",
    "jinja2",
    "python_multipart",
    "matplotlib",
    "numpy",
}


def third_party_imported(*modules: str) -> list[str]:
    """Top-level names of the non-stdlib modules that importing `modules` loads."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *modules],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    found: list[str] = json.loads(out)
    return found


def submodules(package: ModuleType, skip: frozenset[str] = frozenset()) -> list[str]:
    names = [m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]
    return [n for n in names if n not in skip]


def test_the_probe_sees_third_party_imports() -> None:
    # The check could fail: the wire models import pydantic.
    assert "pydantic" in third_party_imported("schedulearn.protocol")


def test_runtime_imports_only_the_standard_library() -> None:
    assert third_party_imported("schedulearn.runtime") == []
    modules = submodules(schedulearn.runtime)
    assert "schedulearn.runtime.checkpoint" in modules
    assert third_party_imported(*modules) == []


def test_core_and_simulator_import_only_the_standard_library() -> None:
    # The simulator is usable from the base install; only its plots need an extra.
    modules = submodules(schedulearn.core) + submodules(
        schedulearn.sim, skip=frozenset({"schedulearn.sim.plots"})
    )
    assert {"schedulearn.core.policies.fifo", "schedulearn.sim.runner"} <= set(modules)
    assert third_party_imported(*modules) == []


def test_version_needs_no_package_at_import() -> None:
    assert third_party_imported("schedulearn") == []
    assert schedulearn.__version__.count(".") >= 2


def test_console_script_front_imports_only_the_standard_library() -> None:
    assert third_party_imported("schedulearn.cli.entry") == []


def test_agent_and_user_commands_import_no_server_or_plots_package() -> None:
    found = third_party_imported(
        "schedulearn.cli.main",
        "schedulearn.agent.service",
        "schedulearn.agent.daemon",
        "schedulearn.agent.executors.process",
    )
    assert "typer" in found and "httpx" in found  # the probe saw the imports
    assert sorted(SERVER_AND_PLOTS & set(found)) == []


def test_server_command_module_loads_the_server_only_when_run() -> None:
    # The serving module is the one that brings uvicorn: imported by
    # `schedulearn server`/`up` only, never by cli.main at start.
    assert "uvicorn" in third_party_imported("schedulearn.cli.serving")
    assert "uvicorn" not in third_party_imported("schedulearn.cli.live")
