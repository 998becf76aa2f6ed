"""Plain-text tables for the terminal and for pipes (`jobs`, `nodes`).

Owns how a listing fits a width. On a terminal the table fits its width:
columns marked `keep` (a job's id and state) are never cut; the command
is the first thing shortened, then columns are dropped from the least
useful up (`drop` order). Piped into another program (or a file), nothing
is cut: every column at full width, one line per row, so `grep` and `awk`
see the whole text. `--format id,state,command` picks the columns (like
`squeue -o`).

Deliberately no Rich: this module is imported by every listing command,
and Rich costs a tenth of a second of start-up.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TextIO, TypeVar

Row = TypeVar("Row")

_ELLIPSIS = "…"
_GAP = "  "
_ANSI = {"green": "32", "red": "31", "yellow": "33", "cyan": "36", "magenta": "35", "dim": "2"}


class FormatError(ValueError):
    """A `--format` naming a column that does not exist (the message lists them)."""


@dataclass(frozen=True)
class Column(Generic[Row]):
    """One column: its `--format` key, header and how a row renders in it."""

    key: str
    header: str
    cell: Callable[[Row], str]
    # Never shortened nor dropped to fit a terminal.
    keep: bool = False
    # Shortened (down to `min_width`) before any column is dropped.
    shrink: bool = False
    min_width: int = 12
    # Columns are dropped to fit a terminal highest `drop` first (0: never).
    drop: int = 0
    colour: Callable[[Row], str | None] | None = None


def parse_format(text: str, columns: Sequence[Column[Row]]) -> list[Column[Row]]:
    """The columns `--format` names, in its order (comma-separated, any case)."""
    by_key = {c.key: c for c in columns}
    picked: list[Column[Row]] = []
    for raw in text.split(","):
        key = raw.strip().lower()
        if not key:
            continue
        if key not in by_key:
            raise FormatError(
                f"--format: no column {raw.strip()!r}; choose from {', '.join(by_key)}"
            )
        picked.append(by_key[key])
    if not picked:
        raise FormatError(f"--format names no column; choose from {', '.join(by_key)}")
    return picked


def terminal_width(stream: TextIO) -> int | None:
    """The width to fit, or None when `stream` is not a terminal (nothing is cut)."""
    try:
        if not stream.isatty():
            return None
    except (AttributeError, ValueError):
        return None
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except OSError:
        return shutil.get_terminal_size().columns


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 1)] + _ELLIPSIS


def fit(columns: Sequence[Column[Row]], cells: list[list[str]], width: int | None) -> list[int]:
    """The indices of the columns that fit `width` (all of them when None): drop
    columns (highest `drop` first) until the shrinkable ones can take up the rest."""
    shown = list(range(len(columns)))
    if width is None:
        return shown
    natural = _natural(columns, cells)
    while _total([natural[i] for i in shown]) > width:
        shrinkable = [i for i in shown if columns[i].shrink]
        squeezed = _total([_squeezed(columns[i], natural[i]) for i in shown])
        if shrinkable and squeezed <= width:
            break
        droppable = [i for i in shown if columns[i].drop and not columns[i].keep]
        if not droppable:
            break
        shown.remove(max(droppable, key=lambda i: columns[i].drop))
    return shown


def _natural(columns: Sequence[Column[Row]], cells: list[list[str]]) -> list[int]:
    return [max([len(c.header), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]


def _squeezed(column: Column[Row], natural: int) -> int:
    return min(natural, max(column.min_width, len(column.header))) if column.shrink else natural


def _total(widths: Sequence[int]) -> int:
    return sum(widths) + len(_GAP) * max(0, len(widths) - 1)


def render(
    rows: Sequence[Row],
    columns: Sequence[Column[Row]],
    width: int | None,
    colour: bool = False,
) -> str:
    """The table as text: headers, then one line per row (no trailing spaces)."""
    cells = [[c.cell(r) for c in columns] for r in rows]
    shown = fit(columns, cells, width)
    natural = _natural(columns, cells)
    widths = {i: natural[i] for i in shown}
    if width is not None:
        over = _total(list(widths.values())) - width
        for i in shown:
            if over <= 0:
                break
            if columns[i].shrink:
                floor = max(columns[i].min_width, len(columns[i].header))
                take = min(over, widths[i] - floor)
                if take > 0:
                    widths[i] -= take
                    over -= take
    lines = [_line([columns[i].header for i in shown], [widths[i] for i in shown], width)]
    for row, values in zip(rows, cells, strict=True):
        texts = []
        for i in shown:
            text = values[i] if width is None or columns[i].keep else _cut(values[i], widths[i])
            texts.append(text)
        line = _line(texts, [widths[i] for i in shown], None)
        if colour:
            line = _coloured(row, [columns[i] for i in shown], texts, [widths[i] for i in shown])
        lines.append(line)
    return "\n".join(lines)


def _line(texts: Sequence[str], widths: Sequence[int], cut: int | None) -> str:
    parts = [t.ljust(w) for t, w in zip(texts, widths, strict=True)]
    line = _GAP.join(parts).rstrip()
    return line if cut is None else line[:cut]


def _coloured(
    row: Row, columns: Sequence[Column[Row]], texts: Sequence[str], widths: Sequence[int]
) -> str:
    """The line with the cells that have a colour wrapped in ANSI codes."""
    out = []
    for column, text, w in zip(columns, texts, widths, strict=True):
        code = _ANSI.get((column.colour(row) if column.colour else None) or "")
        out.append((f"\x1b[{code}m{text}\x1b[0m" if code else text) + " " * (w - len(text)))
    return _GAP.join(out).rstrip()


def print_table(
    rows: Sequence[Row], columns: Sequence[Column[Row]], stream: TextIO | None = None
) -> None:
    """Print to a terminal fitted to its width (coloured), or to a pipe in full."""
    stream = stream or sys.stdout
    width = terminal_width(stream)
    colour = width is not None and "NO_COLOR" not in os.environ
    stream.write(render(rows, columns, width, colour) + "\n")
