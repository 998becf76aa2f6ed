"""The `schedulearn` console script: checks that the packages the command
needs are installed, says which extra to install when they are not, then
runs the Typer app of `cli.main`.

The base install of Schedulearn has no dependencies (a training image needs
only `schedulearn.runtime`); each role comes with an extra (pyproject.toml):
`cli`, `agent`, `server`, `sim`, `plots`, `all`. This module owns the map
from a command to the extras it needs and from an extra to the modules it
brings, so it must import nothing but the standard library: it runs exactly
when those packages are missing.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Sequence

# The modules each extra installs, by import name (what find_spec looks up).
# Extras that include `cli` list only what they add to it.
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "cli": ("typer", "rich", "pydantic", "pydantic_settings", "yaml", "httpx", "platformdirs"),
    "agent": ("docker", "pynvml"),
    "server": (
        "fastapi",
        "uvicorn",
        "sqlmodel",
        "sqlalchemy",
        "alembic",
        "psycopg",
        "prometheus_client",
        "jinja2",
        "python_multipart",
    ),
    "sim": (),  # the simulator is standard library only; its command needs `cli`
    "plots": ("matplotlib",),
}

# Commands that need more than `cli` (which every command needs: the app
# imports it). `up` runs a server and a local agent.
COMMAND_EXTRAS: dict[str, tuple[str, ...]] = {
    "server": ("server",),
    "up": ("server", "agent"),
    "agent": ("agent",),
    "simulate": ("sim",),
}


def command_of(argv: Sequence[str]) -> str | None:
    """The subcommand named on the command line (the app has no options
    before it but --help), or None for `schedulearn` alone or `--help`."""
    for arg in argv:
        if not arg.startswith("-"):
            return arg
        if arg == "--":
            return None
    return None


def extras_needed(argv: Sequence[str]) -> tuple[str, ...]:
    """The extras the command line needs: its command's, else `cli`;
    `plots` (which includes `sim`) for `simulate --plot`."""
    command = command_of(argv)
    if command == "simulate" and any(a == "--plot" or a.startswith("--plot=") for a in argv):
        return ("plots",)
    return COMMAND_EXTRAS.get(command or "", ("cli",))


def missing_modules(extras: Sequence[str]) -> list[str]:
    """Modules of `extras` (and of `cli`, always) that are not installed."""
    wanted = [*EXTRA_MODULES["cli"]]
    for extra in extras:
        wanted += [m for m in EXTRA_MODULES[extra] if m not in wanted]
    return [m for m in wanted if importlib.util.find_spec(m) is None]


def install_hint(command: str | None, extras: Sequence[str], missing: Sequence[str]) -> str:
    """What to tell the user: which command needs which extra, and how to get it."""
    what = f"`schedulearn {command}`" if command else "the `schedulearn` command"
    spec = f"schedulearn[{','.join(extras)}]"
    names = " and ".join(extras) + (" extras" if len(extras) > 1 else " extra")
    return (
        f"error: {what} needs the {names} of Schedulearn, "
        f"which is not installed here (missing: {', '.join(missing)}).\n"
        f"Install it with:  pip install '{spec}'   (or, in a clone: uv sync)"
    )


def extra_of_module(name: str) -> str | None:
    """The extra that brings the (top-level) module `name`, if any."""
    top = name.split(".")[0]
    for extra, modules in EXTRA_MODULES.items():
        if top in modules:
            return extra
    return None


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the `schedulearn` script."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--version"]:
        # Answered from the package metadata alone: no third-party import.
        from schedulearn import __version__

        print(f"schedulearn {__version__}")
        return
    command = command_of(args)
    extras = extras_needed(args)
    missing = missing_modules(extras)
    if missing:
        print(install_hint(command, extras, missing), file=sys.stderr)
        raise SystemExit(1)
    # Plain help and usage errors: Typer's Rich rendering imports Rich,
    # Markdown and Pygments (half a second on a busy machine) and boxes the
    # text to the terminal. TYPER_USE_RICH=1 brings it back.
    os.environ.setdefault("TYPER_USE_RICH", "0")
    try:
        from schedulearn.cli.main import app

        app(args=args, prog_name="schedulearn")
    except ModuleNotFoundError as exc:
        # A command found a missing package later than the check above could
        # tell (an option's own needs): name the extra, not a traceback.
        extra = extra_of_module(exc.name or "")
        if extra is None:
            raise
        print(install_hint(command, (extra,), [exc.name or ""]), file=sys.stderr)
        raise SystemExit(1) from None
