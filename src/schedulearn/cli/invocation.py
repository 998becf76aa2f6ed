"""How a shell of this install runs the `schedulearn` command (issue 35).

In a clone, `uv run schedulearn up` works, but the bare `schedulearn` of
the docs is on no shell's PATH until the environment is activated; an
install by `pip install --user` may put it in a directory that is not on
PATH either. `command` names the form that works for the install that is
running, so `up`'s hints and the CLI's "cannot reach the server" message
say what to type rather than a name the shell may not find.

Standard library only, and reads only what it is given: the environment,
the interpreter and the working directory (the tests pass their own).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

NAME = "schedulearn"


def _same(a: Path, b: Path) -> bool:
    try:
        return a.samefile(b)
    except OSError:
        return False


def command(
    env: Mapping[str, str] | None = None,
    executable: str | None = None,
    cwd: Path | None = None,
) -> str:
    """The command line that runs this install's `schedulearn` from the user's shell.

    - started by `uv run` (which sets UV_RUN_RECURSION_DEPTH and puts the
      project's environment first on PATH for this process only):
      `uv run schedulearn`, with `--project DIR` when not run from DIR;
    - this interpreter's script found first on PATH: `schedulearn`;
    - otherwise the script's full path (or `python -m` when there is none).
    """
    env = os.environ if env is None else env
    python = Path(executable or sys.executable)
    here = Path.cwd() if cwd is None else cwd
    script = python.parent / NAME
    venv = env.get("VIRTUAL_ENV")
    if env.get("UV_RUN_RECURSION_DEPTH") and venv:
        project = Path(venv).parent
        if _same(here, project):
            return f"uv run {NAME}"
        return f"uv run --project {shlex.quote(str(project))} {NAME}"
    found = shutil.which(NAME, path=env.get("PATH", ""))
    if found is not None and _same(Path(found), script):
        return NAME
    if script.exists():
        return shlex.quote(str(script))
    return f"{shlex.quote(str(python))} -m schedulearn.cli.main"


def activation(env: Mapping[str, str] | None = None) -> str | None:
    """Under `uv run`, the command that puts the bare `schedulearn` on a shell's
    PATH (activating the project's environment); None otherwise."""
    env = os.environ if env is None else env
    venv = env.get("VIRTUAL_ENV")
    if not (env.get("UV_RUN_RECURSION_DEPTH") and venv):
        return None
    return f"source {shlex.quote(str(Path(venv) / 'bin' / 'activate'))}"
