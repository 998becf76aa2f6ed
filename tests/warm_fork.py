"""The warm parent's side of `warm_parent`: import a role's modules once,
then fork a process for each request a test process sends over a unix
socket, and report each one's end (its raw wait status) back on that
request's connection, reaping it only when the test side has read it.

Run as a script by `warm_parent` (`python warm_fork.py ROLE SOCKET PADDING`;
the padding is room for the forked processes' command lines). It never
runs threads: fork() copies only the calling thread.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Any

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

    # The child's own streams, as its interpreter's start would have made them
    # (typeshed marks the __std*__ originals Final: nothing else may replace them).
    sys.stdin = sys.__stdin__ = stream(0, "r")  # type: ignore[misc]
    sys.stdout = sys.__stdout__ = stream(1, "w", line_buffering=os.isatty(1))  # type: ignore[misc]
    sys.stderr = sys.__stderr__ = stream(  # type: ignore[misc]
        2, "w", errors="backslashreplace", line_buffering=True
    )
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
    (`warm_parent.ARGV_ROOM`) for it, the rest of their room zeroed."""
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
