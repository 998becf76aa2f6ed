"""The environment a job starts from on this node: PATH, the admin's `--env`, and
the interpreter a job's `python` is. docs/job-environment.md is the contract.

A process job's environment is built in this order, each later layer winning:

1. from the agent's own environment only the variables of `INHERITED`
   (locale, time zone, terminal, and the agent's HOME, USER, LOGNAME and
   SHELL): never anything else of it, so neither the node's credential nor
   whatever secret the agent's service manager gave it reaches a job;
2. PATH: the agent's `--path`, else the directory of the interpreter the
   agent runs under (its virtual environment's `bin`) followed by the
   agent's own PATH, so that `python` and `schedulearn` in a job are the
   agent's, whether or not that environment was activated;
3. HOME, USER, LOGNAME and SHELL of the job's account, for a job run as
   its owner (`agent.accounts`);
4. the agent's `--env KEY=VALUE` variables;
5. the job's own `env` (`submit --env`) and its secrets;
6. Schedulearn's variables (`agent.launchers.job_env`): `SCHEDULEARN_*`,
   `CUDA_VISIBLE_DEVICES` and a gang's rendezvous variables.

A container job gets only layers 4 to 6: everything else (PATH, HOME,
`python`) is its image's. Layers 4 to 6 are merged in `launchers.job_env`
for both executors; this module checks the admin's input and builds the
rest. Nothing here starts a job.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

# Names `--env` may not set: Schedulearn sets them per job (a job is kept to
# its GPUs by them), and PATH has its own option.
RESERVED_PREFIX = "SCHEDULEARN_"
RESERVED_NAMES = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
        "MASTER_ADDR",
        "MASTER_PORT",
        "WORLD_SIZE",
        "NODE_RANK",
        "PATH",
    }
)
# The only variables of the agent's own environment a job gets (an allowlist:
# an agent's environment holds what its service manager or admin put there,
# tokens and cloud keys among them). HOME, USER, LOGNAME and SHELL are the
# account's for a job run as its owner (layer 3 replaces them). Anything else
# a job needs on this node, the admin gives with `--env`.
INHERITED = frozenset({"LANG", "LANGUAGE", "TZ", "TERM", "HOME", "USER", "LOGNAME", "SHELL"})
INHERITED_PREFIXES = ("LC_",)
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# How long the startup description may wait for the job's `python` to say its version.
PROBE_SECONDS = 10.0


class JobEnvError(ValueError):
    """An `--env` or `--path` the agent cannot use; the message says what to change."""


def parse_env(texts: Iterable[str]) -> dict[str, str]:
    """`--env KEY=VALUE` options as a mapping; the value may contain `=`."""
    env: dict[str, str] = {}
    for text in texts:
        name, sep, value = text.partition("=")
        if not sep:
            raise JobEnvError(
                f"--env {text!r} has no '='; write it as KEY=VALUE, e.g. --env HF_HOME=/data/hf"
            )
        if not _NAME.match(name):
            raise JobEnvError(
                f"--env {text!r}: {name!r} is not a variable name; use letters, digits "
                "and '_', not starting with a digit"
            )
        if name == "PATH":
            raise JobEnvError("--env cannot set PATH; give the job PATH with --path DIRS")
        if name.startswith(RESERVED_PREFIX) or name in RESERVED_NAMES:
            raise JobEnvError(
                f"--env cannot set {name}: Schedulearn sets it for each job "
                f"(reserved: {RESERVED_PREFIX}*, {', '.join(sorted(RESERVED_NAMES - {'PATH'}))}); "
                "choose another name"
            )
        if "\0" in value:
            raise JobEnvError(f"--env {name}: the value holds a NUL byte, which no variable can")
        env[name] = value
    return env


def check_path(text: str) -> str:
    """`--path DIRS`: absolute directories separated by ':'."""
    dirs = text.split(os.pathsep)
    if not text or not all(dirs):
        raise JobEnvError(
            f"--path {text!r} has an empty entry; give absolute directories separated by "
            f"'{os.pathsep}', e.g. --path /opt/venv/bin:/usr/bin:/bin"
        )
    relative = [d for d in dirs if not os.path.isabs(d)]
    if relative:
        # A relative entry is looked up from each job's working directory: a
        # job's files would decide which programs run.
        raise JobEnvError(
            f"--path {text!r}: {', '.join(relative)} is not absolute; give absolute "
            "directories (a relative one is searched from each job's working directory)"
        )
    return text


def default_path(interpreter: str, agent_path: str | None) -> str:
    """The interpreter's directory, then the agent's PATH without it again."""
    first = os.path.dirname(os.path.abspath(interpreter))
    rest = (agent_path if agent_path is not None else os.defpath).split(os.pathsep)
    return os.pathsep.join([first, *(d for d in rest if d and d != first)])


def job_path(
    path_option: str | None,
    interpreter: str | None = None,
    agent_env: Mapping[str, str] | None = None,
) -> str:
    """The PATH a process job gets: `--path`, else `default_path` of the
    interpreter (this one) and the agent's environment (this process's)."""
    if path_option is not None:
        return path_option
    source = os.environ if agent_env is None else agent_env
    return default_path(interpreter or sys.executable, source.get("PATH"))


def inherited(name: str) -> bool:
    """Whether a job takes the agent's own value of variable `name` (layer 1)."""
    return name in INHERITED or name.startswith(INHERITED_PREFIXES)


def base_env(path: str, agent_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Layers 1 and 2: the allowed part of the agent's environment, with the job PATH."""
    source = os.environ if agent_env is None else agent_env
    env = {k: v for k, v in source.items() if inherited(k)}
    env["PATH"] = path
    return env


@dataclass(frozen=True, slots=True)
class JobPython:
    """What `python` is on a job PATH: where, which version, whether it has Schedulearn."""

    path: str | None
    version: str = ""
    has_schedulearn: bool = False
    problem: str = ""


_PROBE = (
    "import importlib.util, sys; "
    "print(sys.version.split()[0], importlib.util.find_spec('schedulearn') is not None)"
)


def find_python(path: str, env: Mapping[str, str] | None = None) -> JobPython:
    """Run the `python` (or else `python3`) found on `path` once, as a job's would run
    (in `env`, by default the agent's own as `base_env` gives it to jobs)."""
    found = shutil.which("python", path=path) or shutil.which("python3", path=path)
    if found is None:
        return JobPython(None)
    try:
        done = subprocess.run(
            [found, "-c", _PROBE],
            env={**(base_env(path) if env is None else env), "PATH": path},
            capture_output=True,
            text=True,
            timeout=PROBE_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return JobPython(found, problem=f"could not run it: {exc}")
    words = done.stdout.split()
    if done.returncode != 0 or len(words) != 2:
        said = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return JobPython(found, problem=f"it failed: {said}")
    return JobPython(found, words[0], words[1] == "True")


def closed_to_others(program: str) -> str | None:
    """The first directory other users cannot enter (no `o+x`) on the way to
    `program` or to what its symlinks lead to (a venv's `python` links to the
    interpreter it was made from), or None: a job run as its owner cannot run
    a program behind such a directory."""
    for target in dict.fromkeys([Path(program).parent, Path(os.path.realpath(program)).parent]):
        for directory in [*reversed(target.parents), target]:
            try:
                mode = directory.stat().st_mode
            except OSError:
                break
            if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
                return str(directory)
    return None


def python_line(python: JobPython) -> str:
    """`process jobs: python is PATH (Python 3.x, with schedulearn)`, or why not."""
    if python.path is None:
        said = "no `python` or `python3` on the job PATH"
    elif python.problem:
        said = f"python is {python.path} ({python.problem})"
    else:
        has = (
            "with schedulearn"
            if python.has_schedulearn
            else "without schedulearn: jobs that import schedulearn.runtime fail"
        )
        said = f"python is {python.path} (Python {python.version}, {has})"
    return f"process jobs: {said}"


def describe(
    path: str,
    extra_env: Mapping[str, str],
    path_given: bool,
    processes: bool,
    containers: bool,
    jobs_as_owners: bool,
    python: JobPython | None = None,
) -> list[str]:
    """The lines the agent prints at start: the job's `python`, PATH and `--env` names."""
    lines: list[str] = []
    if processes:
        python = python if python is not None else find_python(path)
        lines.append(python_line(python))
        origin = "from --path" if path_given else "this agent's interpreter first"
        lines.append(f"process jobs: PATH={path} ({origin})")
        closed = closed_to_others(python.path) if python.path and jobs_as_owners else None
        if closed is not None:
            lines.append(
                f"process jobs run as their owners cannot enter {closed} (no access for "
                "other users); open it (chmod o+rx), or give --path with directories they can read"
            )
    if containers:
        lines.append("container jobs: PATH and python are their image's")
    if extra_env:
        lines.append(f"every job also gets --env {', '.join(sorted(extra_env))}")
    return lines
