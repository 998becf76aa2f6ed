"""Tables readable at 80 columns (issue 35): `simulate` run as a real process
on a pseudo-terminal 80 columns wide leaves out whole columns rather than
cutting figures and headers, and says which; piped, every column is printed
whole. `policy preview`'s table is printed through the same `print_fitted`,
to a pipe and to a terminal."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import re
import struct
import subprocess
import sys
import termios

from rich.console import Console

from schedulearn.cli.fitting import print_fitted
from schedulearn.cli.forecasts import PREVIEW_DROP, preview_table
from schedulearn.protocol import PolicyForecast, PolicyPreview

SIMULATE = [
    "simulate", "-w", "poisson:n=40:rate=0.01", "-p", "fifo,tiresias,srtf", "-c", "2x4",
]  # fmt: skip
SIMULATE_HEADERS = ["policy", "jobs", "mean JCT", "makespan", "p95", "wait", "GPU util"]


def _cli() -> list[str]:
    return [sys.executable, "-m", "schedulearn.cli.main"]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    return {**env, "NO_COLOR": "1", "TERM": "xterm"}


def _on_terminal(columns: int, args: list[str]) -> str:
    """What the command writes (stdout and stderr) to a terminal this wide."""
    parent, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    proc = subprocess.Popen(
        [*_cli(), *args], stdin=child, stdout=child, stderr=child, env=_env(), close_fds=True
    )
    os.close(child)
    chunks = []
    while True:
        try:
            chunk = os.read(parent, 65536)
        except OSError:  # the child end closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(parent)
    assert proc.wait(timeout=120) == 0
    return _plain(b"".join(chunks).decode()).replace("\r", "")


def _plain(text: str) -> str:
    """`text` without the terminal's escape sequences (bold, cursor)."""
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)


def _header_line(text: str) -> str:
    return next(line for line in text.splitlines() if "policy" in line)


def test_simulate_at_80_columns_leaves_out_columns_and_cuts_nothing() -> None:
    text = _on_terminal(80, SIMULATE)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text
    header = _header_line(text)
    for name in SIMULATE_HEADERS:
        assert f" {name} " in header  # whole, on the header's one line
    assert " wall " not in header and " migrate " not in header
    assert "left out to fit 80 columns: wall, migrate" in text


def test_simulate_on_a_wide_terminal_shows_every_column() -> None:
    text = _on_terminal(200, SIMULATE)
    header = _header_line(text)
    for name in [*SIMULATE_HEADERS, "median", "p99", "preempt", "migrate", "fairness", "wall"]:
        assert f" {name} " in header
    assert "left out" not in text


def test_simulate_piped_prints_every_column_whole_whatever_columns_says() -> None:
    done = subprocess.run(
        [*_cli(), *SIMULATE],
        capture_output=True,
        text=True,
        timeout=120,
        env={**_env(), "COLUMNS": "60"},
        check=True,
    )
    header = _header_line(done.stdout)
    for name in [*SIMULATE_HEADERS, "median", "p99", "preempt", "migrate", "fairness", "wall"]:
        assert f" {name} " in header
    assert "…" not in done.stdout and "left out" not in done.stderr


def _preview() -> PolicyPreview:
    def row(spec: str, in_force: bool) -> PolicyForecast:
        return PolicyForecast(
            spec=spec,
            in_force=in_force,
            mean_jct=5400.0,
            makespan=20_000.0,
            utilisation=0.93,
            predicted=12,
            unknown=3,
            preemptions=4,
            wall_seconds=0.1,
        )

    return PolicyPreview(
        at=0.0,
        in_force="fifo:backfill=true",
        pending=12,
        running=3,
        without_estimate=0,
        horizon_seconds=86_400.0,
        policies=[
            row("fifo:backfill=true", True),
            row("tiresias:queues=2,threshold=3600", False),
            row("gandiva:fairness_weight=0.5", False),
        ],
    )


def _print_preview(terminal: bool, width: int) -> tuple[str, str]:
    out, note = io.StringIO(), io.StringIO()
    console = Console(file=out, width=width, force_terminal=terminal, no_color=True)
    print_fitted(console, preview_table(_preview()), PREVIEW_DROP, Console(file=note))
    return _plain(out.getvalue()), _plain(note.getvalue())


def test_policy_preview_piped_keeps_every_header_whole() -> None:
    # A pipe's console is 80 wide by default: the table is wider, and is
    # printed whole rather than cut to it.
    text, note = _print_preview(terminal=False, width=80)
    header = text.splitlines()[0]
    for name in ("POLICY", "MEAN JCT", "MAKESPAN", "UTILISATION", "PREDICTED", "PREEMPTIONS"):
        assert name in header
    assert "tiresias:queues=2,threshold=3600" in text
    assert "…" not in text and note == ""


def test_policy_preview_on_a_narrow_terminal_leaves_out_columns() -> None:
    text, note = _print_preview(terminal=True, width=70)
    assert max(len(line) for line in text.splitlines()) <= 70
    header = text.splitlines()[0]
    assert "MEAN JCT" in header and "PREEMPTIONS" not in header
    assert "tiresias:queues=2,threshold=3600" in text and "…" not in text
    assert note.startswith("left out to fit 70 columns: PREEMPTIONS")
