"""A warm parent: `schedulearn server` and agent processes forked from a
process that has imported them already, instead of a new interpreter that
imports them again each time.

Why: the suite starts about 160 servers and 150 agents, and a server spent
1.0 of its 1.2 s of CPU to /readyz (2.2 of 2.7 s without the bytecode cache)
importing FastAPI, SQLAlchemy, pydantic and every route and model. A warm
parent imports that once per test process, and each server or agent a test
needs is `fork()`ed from it: 0.2 s of CPU to /readyz.

What a test gets is still a real, separate process on 127.0.0.1, in its own
session when asked (so `killpg` and SIGKILL do what they do to any
process), with its own environment, working directory, standard streams
(the same file descriptors `subprocess.Popen` would give it, passed over a
unix socket) and `sys.argv`; after the fork it runs the very module
`python -m ...` runs (`runpy`, as `-m` does), so `schedulearn server` and the
agent take their own code path from `main()` on: settings from the
environment, database, scheduler, uvicorn. What differs is only what was
imported before `main()`. Its `/proc/PID/cmdline` is the command's own
(written over the parent's padded arguments, then NUL bytes). A command
whose environment sets `PYTHON*` variables unlike this process's (an
earlier release on PYTHONPATH) cannot be honoured by a fork and starts
afresh, as does every command when SCHEDULEARN_TEST_WARM_PARENT=0.

`popen(args, ...)` is a drop-in for `subprocess.Popen` for those commands
(`WARM_COMMANDS`); every other command, and any keyword it does not know,
goes to `subprocess.Popen` unchanged. The returned `Forked` is a `Popen`:
`poll`, `wait`, `send_signal`, `kill`, `terminate` and `returncode` behave
as for a child, and the process stays a zombie (its pid not reused) until
`poll` or `wait` has seen its end, as a child's does.

One warm parent per role (server, agent) per test process, started on first
use; it exits when the test process that started it does (its stdin, a
pipe, reaches end of file). The parent never runs threads: fork() copies
only the calling thread, and a lock another thread held would stay held
in the child.

The parent's side is `warm_fork.py`, run as a script.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

# Commands forked from a warm parent: (argv after the interpreter) prefix -> role.
WARM_COMMANDS: dict[tuple[str, ...], str] = {
    ("-m", "schedulearn.cli.main", "server"): "server",
    ("-m", "schedulearn.cli.main", "agent"): "agent",
    ("-m", "schedulearn.agent"): "agent",
}
ARGV_ROOM = 8192  # bytes of argument strings the parent keeps for a command line
_FORK_SCRIPT = Path(__file__).with_name("warm_fork.py")
_KNOWN_KEYWORDS = frozenset({"stdin", "stdout", "stderr", "env", "cwd", "start_new_session"})
_DISABLE_VARIABLE = "SCHEDULEARN_TEST_WARM_PARENT"  # "0": every process exec'd afresh


def _role(args: Sequence[str]) -> str | None:
    if not args or args[0] != sys.executable:
        return None
    rest = tuple(args[1:])
    return next(
        (role for prefix, role in WARM_COMMANDS.items() if rest[: len(prefix)] == prefix), None
    )


def popen(args: Sequence[str], **kw: Any) -> subprocess.Popen[bytes]:
    """`subprocess.Popen(args, **kw)`, forked from a warm parent when `args` is
    one of `WARM_COMMANDS` and every keyword is one it passes on."""
    role = _role(args)
    if (
        role is None
        or set(kw) - _KNOWN_KEYWORDS
        or os.environ.get(_DISABLE_VARIABLE) == "0"
        or _starts_otherwise(kw.get("env"))
    ):
        return subprocess.Popen(list(args), **kw)
    return _parents.get(role).spawn(list(args), **kw)


def _starts_otherwise(env: Mapping[str, str] | None) -> bool:
    """Whether `env` sets a variable the interpreter reads only at its start
    (PYTHONPATH: an earlier release's code, say) unlike this process's: a
    process forked from the warm parent could not honour it."""
    if env is None:
        return False
    names = {k for k in (*env, *os.environ) if k.startswith("PYTHON")} - _READ_LATER
    return any(env.get(k) != os.environ.get(k) for k in names)


_READ_LATER = frozenset({"PYTHONUNBUFFERED"})  # the forked process's streams heed it


class Forked(subprocess.Popen[bytes]):
    """A process forked by a warm parent, handled as a `Popen` child.

    Its end arrives over `conn` as the raw wait status; the parent reaps it
    only when this side closes `conn` (after it has read the status), so,
    as with a child, its pid is not reused while a test may still signal it.
    """

    def __init__(self, args: list[str], pid: int, conn: socket.socket) -> None:
        # Popen's own __init__ would start a process: set what its methods read.
        self.args = args
        self.pid = pid
        self.returncode: int | None = None
        self.stdin = self.stdout = self.stderr = None
        self.universal_newlines = False
        self.text_mode = False
        self._child_created = False  # no ResourceWarning from Popen.__del__
        self._waitpid_lock = threading.Lock()
        self._sigint_wait_secs = 0.25
        self._communication_started = False
        self._conn: socket.socket | None = conn

    def _status(self, timeout: float | None) -> int | None:
        """The exit code once the parent has reported it; None while it runs."""
        if self.returncode is not None or self._conn is None:
            return self.returncode
        self._conn.settimeout(timeout)
        try:
            data = b""
            while not data.endswith(b"\n"):
                chunk = self._conn.recv(64)
                if not chunk:
                    raise RuntimeError(f"the warm parent of pid {self.pid} is gone")
                data += chunk
        except (TimeoutError, BlockingIOError):
            return None
        self.returncode = os.waitstatus_to_exitcode(int(data))
        self._conn.close()  # the parent reaps it now
        self._conn = None
        return self.returncode

    def _internal_poll(self, *args: Any, **kw: Any) -> int | None:
        return self._status(0.0)

    def _wait(self, timeout: float | None) -> int:
        code = self._status(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def __del__(self) -> None:
        if self._conn is not None:
            self._conn.close()


class _Parent:
    """The test process's end of one warm parent."""

    def __init__(self, role: str) -> None:
        self.role = role
        self.dir = Path(tempfile.mkdtemp(prefix=f"warm-{role}-"))
        self.socket = self.dir / "sock"
        self.log = self.dir / "parent.log"
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, str(_FORK_SCRIPT), role, str(self.socket), "." * ARGV_ROOM],
                stdin=subprocess.PIPE,  # its end of file says this process is gone
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                start_new_session=True,  # a test's killpg of its own group spares it
            )

    def _connect(self) -> socket.socket:
        from waiting import wait_until

        def connected() -> socket.socket:
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                conn.connect(str(self.socket))
            except OSError:
                conn.close()
                raise
            return conn

        return wait_until(connected, 120, f"the warm {self.role} parent", ignore=(OSError,))

    def spawn(
        self,
        args: list[str],
        stdin: IO[Any] | int | None = None,
        stdout: IO[Any] | int | None = None,
        stderr: IO[Any] | int | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        start_new_session: bool = False,
    ) -> Forked:
        fds = [_fd(stdin, 0), _fd(stdout, 1)]
        fds.append(fds[1] if stderr == subprocess.STDOUT else _fd(stderr, 2))
        request = {
            "args": args,
            "env": dict(os.environ if env is None else env),
            "cwd": os.fspath(cwd) if cwd is not None else os.getcwd(),
            "new_session": start_new_session,
        }
        conn = self._connect()
        socket.send_fds(conn, [json.dumps(request).encode() + b"\n"], fds)
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = conn.recv(64)
            if not chunk:
                raise RuntimeError(f"the warm {self.role} parent failed:\n{self.log.read_text()}")
            reply += chunk
        return Forked(args, int(reply), conn)

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def _fd(stream: IO[Any] | int | None, default: int) -> int:
    if stream is None:
        return default
    if isinstance(stream, int):
        if stream == subprocess.DEVNULL:
            return os.open(os.devnull, os.O_RDWR)  # closed with the process
        if stream < 0:
            raise ValueError(f"warm_parent.popen takes files or descriptors, not {stream}")
        return stream
    return stream.fileno()


class _Parents:
    """This test process's warm parents, one per role, started on first use."""

    def __init__(self) -> None:
        self._by_role: dict[str, _Parent] = {}
        self._pid = os.getpid()
        atexit.register(self.close)

    def get(self, role: str) -> _Parent:
        if self._pid != os.getpid():  # a forked test process starts its own
            self._by_role, self._pid = {}, os.getpid()
        if role not in self._by_role:
            self._by_role[role] = _Parent(role)
        return self._by_role[role]

    def close(self) -> None:
        if self._pid == os.getpid():
            for parent in self._by_role.values():
                parent.close()


_parents = _Parents()
