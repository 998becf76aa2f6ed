"""A warm parent: `schedulearn server` and agent processes forked from a
process that has imported them already, instead of a new interpreter that
imports them again each time.

Why: the suite starts about 160 servers and 150 agents, and a server spent
2.2 of its 2.7 s of CPU to /readyz importing FastAPI, SQLAlchemy, pydantic
and every route and model (about 1,000 s of the suite's CPU in all, on a
2-core machine). A warm parent imports that once per test process, and each
server or agent a test needs is `fork()`ed from it.

What a test gets is still a real, separate process on 127.0.0.1, in its own
session when asked (so `killpg` and SIGKILL do what they do to any
process), with its own environment, working directory, standard streams
(the same file descriptors `subprocess.Popen` would give it, passed over a
unix socket) and `sys.argv`; after the fork it runs the very module
`python -m ...` runs (`runpy`, as `-m` does), so `schedulearn server` and the
agent take their own code path from `main()` on: settings from the
environment, database, scheduler, uvicorn. What differs is only what was
imported before `main()`, and that the process's `/proc/PID/cmdline` names
the warm parent.

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

The parent's side is this same file run as a script (`_serve`).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import shutil
import signal
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
# What each role's parent imports before it forks: what the command itself
# imports on its way to serving, found with `python -X importtime` on a
# server that answered a request and an agent that ran a job (the server's
# app is imported behind /healthz, its routes and the database's dialect on
# first use; the agent's daemon inside its command). Packages are imported
# whole (`_WALK`): every module of the server in the server's parent.
PRELOAD: dict[str, tuple[str, ...]] = {
    "server": (
        "schedulearn.cli.params",  # what cli.main imports; cli.main itself is run, not imported
        "typer.core",
        "schedulearn.cli.live",
        "schedulearn.cli.serving",
        "schedulearn.server",
        "schedulearn.core",
        "sqlalchemy.dialects.sqlite",
        "sqlalchemy.dialects.postgresql.psycopg",
        "psycopg",
        "uvicorn.loops.auto",
        "uvicorn.loops.uvloop",
        "uvicorn.protocols.http.httptools_impl",
        "uvicorn.protocols.websockets.websockets_sansio_impl",
        "uvicorn.lifespan.on",
    ),
    "agent": (
        "schedulearn.cli.params",  # what cli.main imports; cli.main itself is run, not imported
        "typer.core",
        "schedulearn.cli.agent_cmd",
        "schedulearn.agent",
        "schedulearn.failover",
    ),
}
# The modules `-m` executes for those commands: never preloaded (runpy warns
# when the module it runs was imported before).
_RUN = frozenset({"schedulearn.cli.main", "schedulearn.agent.__main__"})
_WALK = frozenset({"schedulearn.server", "schedulearn.core", "schedulearn.agent"})
_ARGV_ROOM = 8192  # bytes of argument strings the parent keeps for a command line
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
                [sys.executable, __file__, role, str(self.socket), "." * _ARGV_ROOM],
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


# ---- the warm parent's side ------------------------------------------------------


def _serve(role: str, path: str) -> None:
    """Import the role's modules, then fork a process for each request until
    stdin reaches end of file (the test process is gone)."""
    import importlib
    import pkgutil

    from schedulearn.startup import loading

    with loading():  # as the commands load their modules: frozen, not collected
        for name in PRELOAD[role]:
            module = importlib.import_module(name)
            if name in _WALK:
                for found in pkgutil.walk_packages(module.__path__, name + "."):
                    if not found.name.endswith(".__main__"):  # run by -m, never imported
                        importlib.import_module(found.name)
    if loaded := _RUN & set(sys.modules):
        raise SystemExit(f"preloading {PRELOAD[role]} imported {sorted(loaded)}, which -m runs")
    if threading.active_count() != 1:
        raise SystemExit(f"importing {PRELOAD[role]} started threads: cannot fork safely")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    running: dict[int, socket.socket] = {}  # pid -> the connection its end goes to
    ended: dict[socket.socket, int] = {}  # reported, reaped when the test side closes
    while True:
        readable, _, _ = select.select([listener, sys.stdin, *ended], [], [], 0.05)
        if sys.stdin in readable and not os.read(sys.stdin.fileno(), 1024):
            return  # the test process is gone; what it started lives on, as children would
        if listener in readable:
            conn, _ = listener.accept()
            pid = _fork_one(conn, listener, [*running.values(), *ended])
            if pid is not None:
                running[pid] = conn
        for conn in [c for c in ended if c in readable]:
            if not conn.recv(64):  # the test side read the end: reap, as its wait() would
                os.waitpid(ended.pop(conn), 0)
                conn.close()
        for pid in list(running):
            info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            if info is None:
                continue
            conn = running.pop(pid)
            status = _wait_status(info)
            try:
                conn.sendall(b"%d\n" % status)
                ended[conn] = pid
            except OSError:  # nobody listens for it any more
                os.waitpid(pid, 0)
                conn.close()


def _wait_status(info: os.waitid_result) -> int:
    """The `waitpid` status of a `waitid` result (which WNOWAIT leaves unreaped)."""
    if info.si_code == os.CLD_EXITED:
        return (info.si_status & 0xFF) << 8
    core = 0x80 if info.si_code == os.CLD_DUMPED else 0
    return info.si_status | core


def _fork_one(
    conn: socket.socket, listener: socket.socket, others: list[socket.socket]
) -> int | None:
    message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    while not message.endswith(b"\n"):
        more = conn.recv(1 << 20)
        if not more:
            return None
        message += more
    request = json.loads(message)
    pid = os.fork()
    if pid:
        for fd in fds:
            os.close(fd)
        conn.sendall(b"%d\n" % pid)
        return pid
    code = 1
    try:
        listener.close()
        conn.close()
        for other in others:
            other.close()
        code = _run_child(request, fds)
    finally:
        os._exit(code)


def _run_child(request: dict[str, Any], fds: list[int]) -> int:
    """In the forked process: become what `python ARGS` would be, and run it."""
    import io
    import runpy
    import traceback

    if request["new_session"]:
        os.setsid()
    stdin, stdout, stderr = fds
    os.dup2(stdin, 0)
    os.dup2(stdout, 1)
    os.dup2(stderr, 2)
    for fd in set(fds) - {0, 1, 2}:
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    # The signal dispositions a new interpreter starts with.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGTERM, signal.SIGQUIT, signal.SIGCHLD, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    # The standard streams a new interpreter would open on these descriptors.
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))

    def stream(fd: int, mode: str, **kw: Any) -> io.TextIOWrapper:
        raw = open(fd, mode + "b", buffering=0 if unbuffered and mode == "w" else -1, closefd=False)  # noqa: SIM115
        return io.TextIOWrapper(raw, encoding="utf-8", write_through=unbuffered, **kw)

    sys.stdin = sys.__stdin__ = stream(0, "r")
    sys.stdout = sys.__stdout__ = stream(1, "w", line_buffering=os.isatty(1))
    sys.stderr = sys.__stderr__ = stream(2, "w", errors="backslashreplace", line_buffering=True)
    args: list[str] = request["args"]
    _show_command_line(args)
    module = args[2]  # [python, "-m", MODULE, ...]
    sys.argv = [module, *args[3:]]  # runpy puts the module's file first, as -m does
    sys.path[0] = os.getcwd()  # as -m does
    code = 0
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:  # the interpreter ends by the signal itself
        _finish()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:  # what the interpreter prints for an uncaught exception
        traceback.print_exc()
        code = 1
    _finish()
    return code


def _show_command_line(args: list[str]) -> None:
    """Make /proc/PID/cmdline (what `ps` and a curious job read) the command's
    own: written over the parent's argument strings, which are padded
    (`_ARGV_ROOM`) for it, the rest of their room zeroed."""
    import ctypes

    fields = Path("/proc/self/stat").read_text().rpartition(")")[2].split()
    start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end (fields 48, 49)
    text = b"\0".join(os.fsencode(a) for a in args) + b"\0"
    if len(text) > end - start:
        raise RuntimeError(f"a command line of {len(text)} bytes; the parent keeps {end - start}")
    ctypes.memmove(start, text.ljust(end - start, b"\0"), end - start)


def _finish() -> None:
    """The interpreter's own shutdown: wait for non-daemon threads, run atexit, flush."""
    threading._shutdown()  # type: ignore[attr-defined]  # what Py_Finalize calls first
    atexit._run_exitfuncs()
    for s in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            s.flush()


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2])
