"""Installing the built wheel brings only what a role needs.

Builds the wheel of this checkout, then installs it into fresh virtual
environments with no network (`uv pip install --offline`, from uv's cache;
the dependency versions come from uv.lock through `uv export`, as a
deployment pinning the lock would):

- the base install (a training image) gets Schedulearn and nothing else,
  and `schedulearn.runtime`, the core and the simulator work there;
- `schedulearn[agent]` (an agent-only GPU host) gets no web framework,
  database or plotting package, and `schedulearn agent --help` runs;
- a command whose extra is missing says which extra to install.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Distributions the agent must never pull in (server, plots and their stacks).
NOT_ON_AN_AGENT = {
    "fastapi",
    "starlette",
    "uvicorn",
    "sqlalchemy",
    "sqlmodel",
    "alembic",
    "psycopg",
    "psycopg-binary",
    "prometheus-client",
    "jinja2",
    "python-multipart",
    "matplotlib",
    "numpy",
    "pillow",
}


def uv() -> str:
    found = shutil.which("uv")
    if found is None:
        pytest.fail("these tests build and install with uv: pip install uv", pytrace=False)
    return found


def run(*args: str | Path, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    """Run a command with this test session's virtual environment out of its way."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT")
    }
    return subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def ok(*args: str | Path) -> str:
    done = run(*args)
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    out = tmp_path_factory.mktemp("dist")
    ok(uv(), "build", "--offline", "--quiet", "--wheel", "--out-dir", out, REPO)
    (built,) = out.glob("schedulearn-*.whl")
    yield built


def new_venv(path: Path) -> Path:
    ok(uv(), "venv", "--quiet", "--python", sys.executable, path)
    return path / "bin" / "python"


def installed(python: Path) -> set[str]:
    """Distribution names installed in the environment of `python`, normalised."""
    code = "import importlib.metadata as m\nfor d in m.distributions(): print(d.metadata['Name'])"
    names = ok(python, "-c", code).split()
    return {re.sub(r"[-_.]+", "-", n).lower() for n in names}


def requires_dist(wheel: Path) -> list[str]:
    code = (
        "import sys, zipfile\n"
        "z = zipfile.ZipFile(sys.argv[1])\n"
        "meta = next(n for n in z.namelist() if n.endswith('.dist-info/METADATA'))\n"
        "print(z.read(meta).decode())"
    )
    metadata = ok(sys.executable, "-c", code, wheel)
    return [
        line.split(":", 1)[1].strip()
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist:")
    ]


def test_the_wheel_requires_nothing_without_an_extra(wheel: Path) -> None:
    requirements = requires_dist(wheel)
    assert requirements, "the wheel declares its extras' requirements"
    unconditional = [r for r in requirements if "extra ==" not in r]
    assert unconditional == []


def test_base_install_is_schedulearn_alone(wheel: Path, tmp_path: Path) -> None:
    python = new_venv(tmp_path / "base")
    ok(uv(), "pip", "install", "--offline", "--quiet", "--python", python, wheel)
    assert installed(python) == {"schedulearn"}
    # What a training image and a policy researcher use, with nothing else installed:
    code = (
        "import schedulearn.runtime, schedulearn.sim.runner, schedulearn.core.registry\n"
        "print(schedulearn.__version__, sorted(schedulearn.core.registry.available())[:1])"
    )
    assert (
        ok(python, "-c", code).split()[0]
        == ok(sys.executable, "-c", "import schedulearn; print(schedulearn.__version__)").strip()
    )

    script = python.parent / "schedulearn"
    bare = run(script, "jobs")
    assert bare.returncode == 1
    assert "pip install 'schedulearn[cli]'" in bare.stderr
    assert "Traceback" not in bare.stderr
    sim = run(script, "simulate", "--workload", "tetris")
    assert sim.returncode == 1
    assert "pip install 'schedulearn[sim]'" in sim.stderr


def test_agent_only_host_installs_the_agent_and_nothing_of_the_server(
    wheel: Path, tmp_path: Path
) -> None:
    pins = tmp_path / "pylock.toml"
    ok(
        uv(), "export", "--quiet", "--frozen", "--format", "pylock.toml", "--extra", "agent",
        "--no-dev", "--no-emit-project", "--output-file", pins,
    )  # fmt: skip
    python = new_venv(tmp_path / "agent")
    ok(uv(), "pip", "install", "--offline", "--quiet", "--python", python, "-r", pins)
    # The wheel with its extra resolves against what is installed: nothing more comes.
    before = installed(python)
    ok(
        uv(),
        "pip",
        "install",
        "--offline",
        "--quiet",
        "--python",
        python,
        f"schedulearn[agent] @ {wheel.as_uri()}",
    )
    after = installed(python)
    assert after - before == {"schedulearn"}
    assert {"httpx", "pydantic", "typer", "docker", "nvidia-ml-py"} <= after
    assert sorted(after & NOT_ON_AN_AGENT) == []

    script = python.parent / "schedulearn"
    helped = run(script, "agent", "--help")
    assert helped.returncode == 0, helped.stderr
    assert "--server" in helped.stdout

    server = run(script, "server")
    assert server.returncode == 1
    assert "pip install 'schedulearn[server]'" in server.stderr
    assert "fastapi" in server.stderr
    up = run(script, "up")
    assert up.returncode == 1
    assert "pip install 'schedulearn[server,agent]'" in up.stderr
    plots = run(script, "simulate", "--workload", "tetris", "--plot", tmp_path / "plots")
    assert plots.returncode == 1
    assert "pip install 'schedulearn[plots]'" in plots.stderr
