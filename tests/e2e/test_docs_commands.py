"""Every command block of README.md, CONTRIBUTING.md and docs/*.md runs in a fresh clone.

The clone is a copy of the checkout's files (tracked and new, nothing
ignored) in an empty directory, so there is no `../shared` beside it, set
up with `uv sync` as a new user's would be (from this machine's uv cache:
the same packages, without downloading them again). One clone serves the
whole run: the first worker to need it makes it, under a file lock, and the
others wait for it. Each document is its own test (so parallel workers
share the documents out) with a new home directory and, when it needs one,
its own system started by its `up` block (or by the runner with the
README's `uv run schedulearn up`), stopped with Ctrl-C at the end of the
document; documents share nothing but the clone (their state lives in their
homes, their systems on free ports). How each block runs is in `doc_blocks`.
The one substitution: `schedulearn up` is given a free `--port`, so two
runs on one machine do not collide.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from doc_blocks import Block, Mode, blocks, documents

from schedulearn.cli.freeports import free_port
from waiting import wait_until, wait_until_serving

REPO = Path(__file__).resolve().parents[2]
BLOCK_SECONDS = 600  # the slowest documented command that runs to the end
# A long-running command must still be up (or done, rc 0) after LONG_SECONDS,
# or LONG_PRINTING_SECONDS once it has printed a line (it is past its start:
# imports, arguments, its servers up). Each such command is a benchmark or a
# server that would otherwise burn the CPUs the rest of the suite runs on.
LONG_SECONDS = 15
LONG_PRINTING_SECONDS = 5
UP = "schedulearn up"
TRACE = "DOCS_TEST_TRACE"  # marks every process one command started


def test_every_command_block_says_how_it_runs() -> None:
    found = [b for path in documents(REPO) for b in blocks(path)]
    assert len(found) > 20
    for block in found:
        assert block.commands, f"{block.where}: a command block with no command"
        if block.mode is Mode.SKIP:
            assert len(block.reason) > 20, f"{block.where}: say why the block is not run"
        if block.mode is Mode.UP:
            assert any(UP in c for c in block.commands), f"{block.where}: no `{UP}` in it"
    assert not [b.where for b in found if any("../shared" in c for c in b.commands)]


def _clone(into: Path) -> Path:
    """The checkout's files, as `git clone` of this working tree would give them."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    clone = into / "schedulearn"
    for name in filter(None, (n.decode() for n in listed)):
        source = REPO / name
        if source.is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, clone / name)

    def git(*args: str) -> None:
        subprocess.run(["git", *args], capture_output=True, check=True, cwd=clone)

    git("init", "-q")
    git("add", "-A")
    git("-c", "user.name=docs", "-c", "user.email=docs@example.com", "commit", "-qm", "x")
    return clone


def _uv_cache() -> str:
    """This machine's uv cache (a new HOME would otherwise mean an empty one)."""
    found = subprocess.run(["uv", "cache", "dir"], capture_output=True, text=True, check=True)
    return found.stdout.strip()


def _user(home: Path, clone: Path, uv_cache: str) -> dict[str, str]:
    """A new user in `home`: no SCHEDULEARN_* or virtualenv settings, the clone's tools first."""
    drop = (
        "SCHEDULEARN_",
        "VIRTUAL_ENV",
        "UV_PROJECT_ENVIRONMENT",
        "UV_PYTHON",
        "PYTEST_",
        "PYTHONDONTWRITEBYTECODE",  # a new user's Python keeps its bytecode
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    path = env.get("PATH", "")
    home.mkdir(parents=True, exist_ok=True)
    env.update(
        UV_CACHE_DIR=uv_cache,
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_DATA_HOME=str(home / ".local" / "share"),
        XDG_STATE_HOME=str(home / ".local" / "state"),
        # The clone's tools, as `source .venv/bin/activate` puts them (README.md: the
        # docs' bare `schedulearn` works in an activated shell; a `uv run` block
        # works in any), then ~/.local/bin (Debian's ~/.profile adds it: `uv tool install`).
        PATH=os.pathsep.join([str(clone / ".venv" / "bin"), str(home / ".local" / "bin"), path]),
        PYTHONUNBUFFERED="1",
    )
    return env


def _shell(
    command: str, env: dict[str, str], cwd: Path, trace: str, **popen: Any
) -> subprocess.Popen[str]:
    """`command` in a new session; all it starts inherits `TRACE=trace` (see `_reap`)."""
    return subprocess.Popen(
        ["bash", "-e", "-o", "pipefail", "-c", command],
        env={**env, TRACE: trace},
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        **popen,
    )


def _stop(process: subprocess.Popen[str], sig: int = signal.SIGINT) -> str:
    """Ctrl-C (or `sig`) to the whole process group; its output."""
    if process.poll() is None:
        os.killpg(process.pid, sig)
    try:
        said, _ = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        said, _ = process.communicate()
    return said


def _reap(trace: str) -> list[str]:
    """SIGKILL what a finished command left running; the command lines of those.

    A command may start servers in sessions of their own (bench/api_load.py
    does), which Ctrl-C to its process group does not reach: left alone they
    went on using the CPU for the rest of the CI run. They inherited the
    command's `TRACE` value, so they are found by their environment.
    """
    wanted = f"{TRACE}={trace}".encode()
    left = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):  # gone meanwhile, or not ours to read
            if wanted in (entry / "environ").read_bytes().split(b"\0"):
                left.append((entry / "cmdline").read_bytes().replace(b"\0", b" ")[:160].decode())
                os.kill(int(entry.name), signal.SIGKILL)
    return left


def _run(command: str, env: dict[str, str], cwd: Path, trace: str) -> tuple[int, str]:
    process = _shell(command, env, cwd, trace)
    try:
        said, _ = process.communicate(timeout=BLOCK_SECONDS)
    except subprocess.TimeoutExpired:
        return -1, _stop(process, signal.SIGKILL) + f"\n(still running after {BLOCK_SECONDS} s)"
    return process.returncode, said


def _long(command: str, env: dict[str, str], cwd: Path, trace: str) -> tuple[int, str]:
    """Start; check it is up (or finished cleanly) after LONG_SECONDS, or after
    LONG_PRINTING_SECONDS once it has printed; stop it with Ctrl-C."""
    process = _shell(command, env, cwd, trace)
    said: list[str] = []
    printed = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            said.append(line)
            printed.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    started = time.monotonic()
    while process.poll() is None:
        up = time.monotonic() - started
        if up >= LONG_SECONDS or (printed.is_set() and up >= LONG_PRINTING_SECONDS):
            os.killpg(process.pid, signal.SIGINT)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            reader.join(timeout=10)
            return 0, "".join(said)
        time.sleep(0.1)
    reader.join(timeout=10)
    return process.returncode, "".join(said)


def _lists_a_node(env: dict[str, str], cwd: Path) -> bool:
    listed = subprocess.run(
        ["schedulearn", "nodes", "--json"], env=env, cwd=cwd, capture_output=True, text=True
    )
    return listed.returncode == 0 and bool(json.loads(listed.stdout)["items"])


@contextmanager
def _document_run(clone: Path, home: Path, uv_cache: str) -> Iterator[_DocumentRun]:
    run = _DocumentRun(clone, _user(home, clone, uv_cache))
    try:
        yield run
    finally:
        if run.up is not None:
            started = time.monotonic()
            _stop(run.up)
            print(f"`{UP}` stopped in {time.monotonic() - started:.0f}s")
            for left in _reap(run.up_trace):
                print(f"killed, left running after `{UP}` stopped: {left}")


class _DocumentRun:
    """Runs one document's blocks in order; its system starts when a block needs it."""

    def __init__(self, clone: Path, env: dict[str, str]) -> None:
        self.clone = clone
        self.env = env
        self.up: subprocess.Popen[str] | None = None
        self.up_trace = uuid.uuid4().hex

    def start(self, command: str) -> None:
        port = free_port()
        command = command.replace(UP, f"{UP} --port {port}", 1)
        started = time.monotonic()
        self.up = _shell(command, self.env, self.clone, self.up_trace)
        up = self.up

        def running() -> None:
            assert up.poll() is None, f"`{UP}` ended:\n{up.communicate()[0][-3000:]}"

        def lists_a_node() -> bool:
            running()
            return _lists_a_node(self.env, self.clone)

        wait_until_serving(f"http://127.0.0.1:{port}", 120, running)
        # Each look runs the CLI (a new process, a second of CPU on a busy
        # machine): looking every 50 ms slowed the very start it waited for.
        wait_until(
            lists_a_node,
            120,
            f"`{command}` to list its node",
            every=1.0,
        )
        print(f"`{UP}` ready in {time.monotonic() - started:.0f}s")

    def block(self, block: Block) -> list[str]:
        """Problems running `block` (none when every command succeeded)."""
        if block.mode is Mode.SKIP:
            return []
        if block.mode is Mode.UP:
            self.start(next(c for c in block.commands if UP in c))
            others = [c for c in block.commands if UP not in c]
            return [p for c in others for p in self._command(block, c, Mode.RUN)]
        if block.mode is Mode.LONG:
            return [p for c in block.commands for p in self._command(block, c, Mode.LONG)]
        if block.mode is Mode.SYSTEM and self.up is None:
            self.start(f"uv run {UP}")
        return self._command(block, block.script, block.mode)

    def _command(self, block: Block, command: str, mode: Mode) -> list[str]:
        runner = _long if mode is Mode.LONG else _run
        started = time.monotonic()
        trace = uuid.uuid4().hex
        code, said = runner(command, self.env, self.clone, trace)
        print(f"{block.where} {mode.value} rc={code} {time.monotonic() - started:.0f}s")
        for left in _reap(trace):
            print(f"{block.where}: killed, left running after the command ended: {left}")
        if code == 0:
            return []
        return [f"{block.where} `{command}` exited {code}:\n{said[-2000:]}"]


@dataclass(frozen=True)
class _Clone:
    path: Path
    uv_cache: str


@pytest.fixture(scope="session")
def clone(tmp_path_factory: pytest.TempPathFactory) -> _Clone:
    """The run's one synced clone, made by whichever worker asks first."""
    base = tmp_path_factory.getbasetemp()
    # Under xdist each worker's base is popen-gwN inside the run's own directory.
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    root = shared / "docs-clone"
    root.mkdir(exist_ok=True)
    uv_cache = _uv_cache()
    with (shared / "docs-clone.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = root / "schedulearn"
        ready = root / "synced"
        if not ready.exists():
            shutil.rmtree(path, ignore_errors=True)  # a worker that failed half way
            _clone(root)
            # On the interpreter the caller chose with UV_PYTHON, if any (the
            # fresh user has no UV_PYTHON); later commands find it in .venv.
            python = os.environ.get("UV_PYTHON")
            synced = subprocess.run(
                ["uv", "sync", "--frozen", *(["--python", python] if python else [])],
                cwd=path,
                env=_user(root / "setup", path, uv_cache),
                capture_output=True,
                text=True,
                timeout=900,
            )
            assert synced.returncode == 0, synced.stderr[-3000:]
            ready.touch()
    assert not (path.parent / "shared").exists()
    return _Clone(path, uv_cache)


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("name", [str(d.relative_to(REPO)) for d in documents(REPO)])
def test_every_documented_command_succeeds_in_a_fresh_clone(
    clone: _Clone, name: str, tmp_path: Path
) -> None:
    problems: list[str] = []
    with _document_run(clone.path, tmp_path / "home", clone.uv_cache) as run:
        for block in blocks(clone.path / name):
            problems += run.block(block)
    assert not problems, "\n\n".join(problems)
