"""`schedulearn acct`: per-job accounting, like Slurm's `sacct`.

Thin over `GET /api/v1/acct` (`server.services.accounting`): parse the
filters, make one call, print a table fitted to the terminal (`cli.table`),
CSV with `--csv` or the reply as JSON with `--json`. Every job the filters
keep is listed, whoever owns it: a row holds only what everyone signed in
sees of a job (times, size, restarts, exit code), never its details.
"""

from __future__ import annotations

import csv
import sys
import time
from typing import TYPE_CHECKING, Annotated

import typer

from schedulearn.cli.common import JsonOpt, ServerOpt, TokenOpt, connect, dump, note, span
from schedulearn.cli.table import Column, print_table

if TYPE_CHECKING:
    from schedulearn.cli.client import Client
    from schedulearn.protocol import AcctReport, AcctRow

# The CSV's columns: the reply's fields, times as UTC ISO 8601 (as `sacct -P` prints them).
CSV_FIELDS = (
    "id",
    "name",
    "user",
    "queue",
    "state",
    "exit_code",
    "submitted",
    "started",
    "ended",
    "waited_seconds",
    "ran_seconds",
    "gpu_hours",
    "restarts",
    "preemptions",
)


def fetch(
    client: Client,
    user: str | None,
    queue: str | None,
    states: list[str] | None,
    since: str,
    limit: int,
) -> AcctReport:
    """The server's report (`GET /api/v1/acct`) for these filters."""
    from schedulearn.protocol import AcctReport

    params: dict[str, object] = {"since": since, "limit": limit}
    if user:
        params["user"] = user
    if queue:
        params["queue"] = queue
    if states:
        params["state"] = states
    return AcctReport.model_validate(client._call("GET", "/acct", params=params).json())


def _when(t: float | None) -> str:
    return "-" if t is None else time.strftime("%m-%d %H:%M", time.localtime(t))


def _iso(t: float | None) -> str:
    return "" if t is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


COLUMNS: list[Column[AcctRow]] = [
    Column("id", "ID", lambda r: str(r.id), keep=True),
    Column("user", "USER", lambda r: r.user, drop=4),
    Column("queue", "QUEUE", lambda r: r.queue, drop=6),
    Column("state", "STATE", lambda r: r.state.value, keep=True),
    Column("exit", "EXIT", lambda r: "-" if r.exit_code is None else str(r.exit_code), drop=5),
    Column("submitted", "SUBMITTED", lambda r: _when(r.submitted_at), drop=7),
    Column("waited", "WAITED", lambda r: span(r.waited_seconds), keep=True),
    Column("ran", "RAN", lambda r: span(r.ran_seconds), keep=True),
    Column("gpu_hours", "GPU-H", lambda r: f"{r.gpu_hours:.2f}", keep=True),
    Column("restarts", "RESTARTS", lambda r: str(r.restarts), drop=3),
    Column("preemptions", "PREEMPTED", lambda r: str(r.preemptions), drop=2),
]


def write_csv(report: AcctReport) -> None:
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(CSV_FIELDS)
    for r in report.rows:
        writer.writerow(
            [
                r.id,
                r.name,
                r.user,
                r.queue,
                r.state.value,
                "" if r.exit_code is None else r.exit_code,
                _iso(r.submitted_at),
                _iso(r.started_at),
                _iso(r.ended_at),
                f"{r.waited_seconds:.3f}",
                f"{r.ran_seconds:.3f}",
                f"{r.gpu_hours:.6f}",
                r.restarts,
                r.preemptions,
            ]
        )


def acct(
    user: Annotated[str | None, typer.Option("--user", "-u", help="Only this user's jobs")] = None,
    queue: Annotated[str | None, typer.Option("--queue", "-q", help="Only this queue's jobs")] = (
        None
    ),
    state: Annotated[
        list[str] | None, typer.Option("--state", "-s", help="Only jobs in this state (repeatable)")
    ] = None,
    since: Annotated[
        str,
        typer.Option(
            "--since",
            help="Jobs active since: a span back from now (12h, 7d, 2w) or a UTC date (2026-11-01)",
        ),
    ] = "7d",
    limit: Annotated[int, typer.Option("--limit", help="At most this many jobs")] = 1000,
    as_csv: Annotated[bool, typer.Option("--csv", help="Print CSV instead of a table")] = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Per job: waited, ran, GPU-hours, restarts, preemptions (like Slurm's sacct)."""
    if as_csv and as_json:
        raise typer.BadParameter("give --csv or --json, not both", param_hint="--csv")
    with connect(server, token) as client:
        report = fetch(client, user, queue, state, since, limit)
    if as_json:
        dump(report)
    elif as_csv:
        write_csv(report)
    else:
        print_table(report.rows, COLUMNS)
    if report.total > len(report.rows):
        note(f"{len(report.rows)} of {report.total} jobs; more with --limit {report.total}")


def register(app: typer.Typer) -> None:
    """Add this module's command to the app."""
    app.command("acct")(acct)
