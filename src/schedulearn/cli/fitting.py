"""Rich tables that fit the width they are printed at (`simulate`, `policy preview`).

Rich fits a table too wide for its console by squeezing every column, which
at 80 columns cut both figures ("6,…") and headers ("UTILISA…"). Here a
table is fitted the way `cli.table` fits the plain listings instead: on a
terminal, whole columns are left out, least useful first, until the rest
fit at their full width, and a note on stderr names what was left out;
piped into a file or another program, nothing is left out or cut: the
table is printed at its natural width, however wide.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


def print_fitted(out: Console, table: Table, drop: Sequence[str], note: Console) -> None:
    """Print `table` on `out`; on a terminal first leave out columns, by header
    in `drop` order, until it fits, and say which on `note`."""
    if not out.is_terminal:
        # Nothing to fit: the whole table at full width, one line per row.
        # `print(width=...)` can only narrow a console, so a wider one is made
        # on the same file.
        from rich.console import Console

        width = max(out.width, natural_width(out, table))
        Console(file=out.file, width=width, no_color=out.no_color).print(table)
        return
    left_out = fit(out, table, drop, out.width)
    out.print(table)
    if left_out:
        note.print(
            f"[dim]left out to fit {out.width} columns: {', '.join(left_out)} "
            "(a wider terminal, or piped into a file, shows every column)[/dim]",
            highlight=False,
        )


def fit(console: Console, table: Table, drop: Sequence[str], width: int) -> list[str]:
    """Remove columns of `table` (headers named in `drop`, in that order) until
    it fits `width` unsqueezed; the headers removed. Columns not in `drop` stay,
    even when the table still does not fit."""
    left_out: list[str] = []
    for header in drop:
        if natural_width(console, table) <= width:
            break
        kept = [c for c in table.columns if c.header != header]
        if len(kept) < len(table.columns):
            table.columns[:] = kept
            left_out.append(header)
    return left_out


def natural_width(console: Console, table: Table) -> int:
    """The width `table` takes with no column squeezed."""
    # Measured as if the console were as wide as any table could be.
    options = console.options.update_width(100_000)
    return console.measure(table, options=options).maximum
