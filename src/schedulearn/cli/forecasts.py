"""Rendering of forecasts for the terminal: `schedulearn policy preview`'s table.

Owns how a `PolicyPreview` reads: one row per policy, the one in force
marked, with the predicted mean JCT, makespan and GPU utilisation of the
current queue side by side. The command itself lives with `policy` in
`cli.jobs` (`schedulearn policy preview`).
"""

from __future__ import annotations

from rich.table import Table

from schedulearn.protocol import PolicyPreview

# The columns left out, in this order, until the table fits a terminal.
PREVIEW_DROP = ("PREEMPTIONS", "PREDICTED", "UTILISATION", "MAKESPAN")


def span(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = round(max(0.0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def preview_table(preview: PolicyPreview) -> Table:
    table = Table(box=None, header_style="bold")
    for col in ("", "POLICY", "MEAN JCT", "MAKESPAN", "UTILISATION", "PREDICTED", "PREEMPTIONS"):
        table.add_column(col, no_wrap=True, justify="left" if col in ("", "POLICY") else "right")
    best = min(
        (p.mean_jct for p in preview.policies if p.mean_jct is not None and p.error is None),
        default=None,
    )
    for p in preview.policies:
        if p.error:
            table.add_row(
                "*" if p.in_force else "", p.spec, f"[red]{p.error}[/red]", "", "", "", ""
            )
            continue
        jct = span(p.mean_jct)
        if best is not None and p.mean_jct == best and len(preview.policies) > 1:
            jct = f"[green]{jct}[/green]"
        table.add_row(
            "[bold]*[/bold]" if p.in_force else "",
            f"[bold]{p.spec}[/bold]" if p.in_force else p.spec,
            jct,
            span(p.makespan),
            "?" if p.utilisation is None else f"{100 * p.utilisation:.0f}%",
            f"{p.predicted}/{p.predicted + p.unknown}",
            str(p.preemptions),
        )
    return table


def preview_note(preview: PolicyPreview) -> str:
    jobs = preview.pending + preview.running
    unknown = (
        f"; {preview.without_estimate} without a duration estimate (they run past the horizon)"
        if preview.without_estimate
        else ""
    )
    compared = (
        f" Figures are over the {preview.compared} of {jobs} jobs every policy above "
        "predicts an end for."
        if preview.compared < jobs
        else ""
    )
    return (
        f"current queue: {preview.pending} pending, {preview.running} running{unknown}. "
        f"* = in force ({preview.in_force}); simulated up to {span(preview.horizon_seconds)} "
        f"ahead; JCT counts from each job's submission.{compared}"
    )
