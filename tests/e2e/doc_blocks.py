"""The command blocks of README.md, CONTRIBUTING.md and docs/*.md, and how each is run.

A fenced block in `sh`, `bash` or `console` is a command block. By default
it is run as it is (`run`). An HTML comment on the line before the fence
says otherwise:

    <!-- docs-test: system -->        needs the system running (`schedulearn up`)
    <!-- docs-test: up -->            starts the system (`schedulearn up`) used by
                                      the file's later `system` blocks
    <!-- docs-test: long -->          each command runs until stopped (a server, a
                                      long benchmark): started, checked, stopped,
                                      one by one
    <!-- docs-test: skip REASON -->   not run, and REASON says why

A `run` or `system` block runs as one bash script (`set -e`, so loops and
variables work); `up` and `long` blocks run command by command. In a
`console` block only the lines starting with `$ ` are commands; the rest
is example output.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from pathlib import Path

SHELLS = frozenset({"sh", "bash", "console", "shell"})
_FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
_MARK = re.compile(r"^\s*<!--\s*docs-test:\s*(\S+)\s*(.*?)\s*-->\s*$")


class Mode(enum.Enum):
    RUN = "run"
    SYSTEM = "system"
    UP = "up"
    LONG = "long"
    SKIP = "skip"


@dataclass(frozen=True)
class Block:
    """One command block: where it is, how it runs, its text as a script and its commands."""

    path: Path
    line: int
    mode: Mode
    reason: str
    script: str
    commands: tuple[str, ...]

    @property
    def where(self) -> str:
        return f"{self.path.name}:{self.line}"


def documents(root: Path) -> list[Path]:
    """README.md, CONTRIBUTING.md, then docs/*.md by name: the order a reader meets them."""
    return [root / "README.md", root / "CONTRIBUTING.md", *sorted((root / "docs").glob("*.md"))]


def _commands(lines: list[str], console: bool) -> tuple[str, ...]:
    """Whole commands: continuation lines joined; comments and (console) output dropped."""
    commands: list[str] = []
    pending = ""
    for raw in lines:
        line = raw.rstrip()
        if not pending:
            if console:
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            if not line.strip() or line.lstrip().startswith("#"):
                continue
        pending += line
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        commands.append(pending.strip())
        pending = ""
    if pending:
        commands.append(pending.strip())
    return tuple(commands)


def blocks(path: Path) -> list[Block]:
    """Every command block of one Markdown file, in order."""
    out: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        language = fence.group(2).lower()
        end = i + 1
        while end < len(lines) and not _FENCE.match(lines[end]):
            end += 1
        if language in SHELLS:
            mark = _MARK.match(lines[i - 1]) if i > 0 else None
            mode, reason = Mode.RUN, ""
            if mark is not None:
                try:
                    mode, reason = Mode(mark.group(1)), mark.group(2)
                except ValueError:
                    known = ", ".join(m.value for m in Mode)
                    raise ValueError(
                        f"{path.name}:{i}: unknown docs-test mode {mark.group(1)!r}; use {known}"
                    ) from None
            body = [line[len(fence.group(1)) :] for line in lines[i + 1 : end]]
            console = language == "console"
            commands = _commands(body, console)
            script = "\n".join(commands) if console else "\n".join(body)
            out.append(Block(path, i + 1, mode, reason, script, commands))
        i = end + 1
    return out
