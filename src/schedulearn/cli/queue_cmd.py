"""`schedulearn queue add|set|list|rm` (tenant queues) and `schedulearn usage`.

Thin over the server's API, like `cli.identity_cmd`: parse flags, make one
call, print a Rich table (or JSON with `--json`, CSV with `usage --csv`).
`queue add|set|rm` are for admins; `queue list` and `usage` for everyone.
A guarantee is `--guaranteed 8` (any GPU type) or, repeated, per type:
`--guaranteed v100=4 --guaranteed a100=2`. `--parent research` puts a queue
under another (a queue tree: children share their parent's guarantee
first); `queue list` shows children indented under their parent.
"""

from __future__ import annotations

import csv
import sys
from typing import Annotated

import typer
from rich.table import Table

from schedulearn.cli.client import Client
from schedulearn.cli.jobs import JsonOpt, ServerOpt, TokenOpt, _dump, connect, err, out
from schedulearn.protocol import (
    QueueCreate,
    QueueList,
    QueuePublic,
    QueueRemoved,
    QueueUpdate,
    UsageBy,
    UsageReport,
)

# --- the calls (on `Client`'s transport: retries, errors, protocol header) ------------


def _queues(client: Client) -> QueueList:
    return QueueList.model_validate(client._call("GET", "/queues").json())


def _add(client: Client, body: QueueCreate) -> QueuePublic:
    r = client._call("POST", "/queues", json=body.model_dump(mode="json", exclude_defaults=True))
    return QueuePublic.model_validate(r.json())


def _update(client: Client, name: str, body: QueueUpdate) -> QueuePublic:
    r = client._call(
        "PATCH", f"/queues/{name}", json=body.model_dump(mode="json", exclude_defaults=True)
    )
    return QueuePublic.model_validate(r.json())


def _remove(client: Client, name: str) -> QueueRemoved:
    return QueueRemoved.model_validate(client._call("DELETE", f"/queues/{name}").json())


def _usage(client: Client, by: UsageBy, since: str) -> UsageReport:
    r = client._call("GET", "/usage", params={"by": by.value, "since": since})
    return UsageReport.model_validate(r.json())


# --- parsing and rendering ------------------------------------------------------------


def parse_guarantee(values: list[str] | None) -> dict[str, int] | None:
    """`["8"]` -> {"": 8}; `["v100=4", "a100=2"]` -> per type; None when not given."""
    if not values:
        return None
    out: dict[str, int] = {}
    for value in values:
        gpu_type, _, count = value.rpartition("=")
        try:
            n = int(count)
        except ValueError:
            raise typer.BadParameter(
                f"--guaranteed {value!r}: give a number of GPUs (8) or TYPE=N (v100=4)"
            ) from None
        if n < 0:
            raise typer.BadParameter(f"--guaranteed {value!r}: GPUs must be 0 or more")
        out[gpu_type.strip()] = out.get(gpu_type.strip(), 0) + n
    return out


def _guarantee_text(q: QueuePublic) -> str:
    if not q.guaranteed:
        return "0"
    return ", ".join(f"{t}={n}" if t else str(n) for t, n in sorted(q.guaranteed.items()))


def queue_table(items: list[tuple[int, QueuePublic]]) -> Table:
    """One row per (depth, queue) (`QueueList.tree`): a child's name is indented two
    spaces per level, under its parent."""
    table = Table(box=None, header_style="bold")
    for column in ("queue", "guaranteed", "limit", "weight", "in use", "fair share", "waiting"):
        table.add_column(column)
    table.add_column("members")
    for depth, q in items:
        table.add_row(
            "  " * depth + q.name + ("" if q.declared else " (best-effort)"),
            _guarantee_text(q),
            "-" if q.limit is None else str(q.limit),
            f"{q.weight:g}",
            str(q.used),
            f"{q.share:.1f}",
            f"{q.pending_jobs} jobs, {q.pending_gpus} GPUs" if q.pending_jobs else "-",
            ", ".join(u + ("*" if u in q.default_for else "") for u in q.users) or "everyone",
        )
    return table


def _show(q: QueuePublic, as_json: bool, what: str) -> None:
    if as_json:
        _dump(q)
        return
    under = f" (under {q.parent})" if q.parent else ""
    out.print(f"{what} queue [bold]{q.name}[/bold]{under}: {q.summary}", highlight=False)
    out.print(queue_table([(0, q)]))


# --- commands -------------------------------------------------------------------------

NameArg = Annotated[str, typer.Argument(help="The queue's name (a team or a project)")]
GuaranteeOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--guaranteed",
        help="Guaranteed GPUs: N (any type) or TYPE=N (repeatable, one per GPU type)",
    ),
]
LimitOpt = Annotated[
    int | None, typer.Option("--limit", help="The most GPUs it may hold at once [no limit]")
]
WeightOpt = Annotated[
    float | None, typer.Option("--weight", help="Its share of idle GPUs relative to others [1]")
]
OvercommitOpt = Annotated[
    bool,
    typer.Option(
        "--overcommit",
        help="Accept guarantees that together exceed the cluster's GPUs (refused otherwise)",
    ),
]
DefaultForOpt = Annotated[
    list[str] | None,
    typer.Option("--default-for", help="Make it this user's default queue (repeatable)"),
]
ParentOpt = Annotated[
    str | None,
    typer.Option(
        "--parent",
        help="Put it under this queue: it shares the parent's guarantee with its "
        "siblings first, and its guarantee is part of the parent's",
    ),
]


def queue_add(
    name: NameArg,
    guaranteed: GuaranteeOpt = None,
    limit: LimitOpt = None,
    weight: WeightOpt = None,
    user: Annotated[
        list[str] | None,
        typer.Option("--user", help="A member who may submit to it (repeatable) [everyone]"),
    ] = None,
    default_for: DefaultForOpt = None,
    parent: ParentOpt = None,
    overcommit: OvercommitOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Add a queue (admin): `schedulearn queue add team-a --guaranteed 8 --user alice`,
    or under another: `schedulearn queue add ml-vision --parent research --guaranteed 4`."""
    body = QueueCreate(
        name=name,
        guaranteed=parse_guarantee(guaranteed) or {},
        limit=limit,
        weight=1.0 if weight is None else weight,
        parent=parent or None,
        users=user or [],
        default_for=default_for or [],
        overcommit=overcommit,
    )
    with connect(server, token) as client:
        _show(_add(client, body), as_json, "added")


def queue_set(
    name: NameArg,
    guaranteed: GuaranteeOpt = None,
    limit: LimitOpt = None,
    no_limit: Annotated[bool, typer.Option("--no-limit", help="Remove its limit")] = False,
    weight: WeightOpt = None,
    add_user: Annotated[
        list[str] | None, typer.Option("--add-user", help="Add a member (repeatable)")
    ] = None,
    remove_user: Annotated[
        list[str] | None, typer.Option("--remove-user", help="Remove a member (repeatable)")
    ] = None,
    default_for: DefaultForOpt = None,
    parent: ParentOpt = None,
    no_parent: Annotated[
        bool, typer.Option("--no-parent", help="Take it out of its parent: a root queue")
    ] = False,
    overcommit: OvercommitOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Change a queue's guarantee, limit, weight, parent or members (admin); in force
    from the next pass."""
    if parent and no_parent:
        raise typer.BadParameter("give --parent P or --no-parent, not both")
    body = QueueUpdate(
        guaranteed=parse_guarantee(guaranteed),
        limit=limit,
        clear_limit=no_limit,
        weight=weight,
        parent=parent or None,
        clear_parent=no_parent or parent == "",
        add_users=add_user or [],
        remove_users=remove_user or [],
        default_for=default_for or [],
        overcommit=overcommit,
    )
    with connect(server, token) as client:
        _show(_update(client, name, body), as_json, "changed")


def queue_list(server: ServerOpt = None, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Queues with their guarantee, limit, weight, GPUs in use, fair share and waiting work."""
    with connect(server, token) as client:
        listing = _queues(client)
    if as_json:
        _dump(listing)
        return
    if not listing.items:
        err.print(
            "no queues; every job shares the cluster under the policy in force. "
            "Add one with `schedulearn queue add NAME --guaranteed N`"
        )
        return
    out.print(queue_table(listing.tree()))
    out.print(listing.promised_text, highlight=False)
    for q in listing.items:
        under = listing.children_promised(q.name)
        if any(c.parent == q.name for c in listing.items):
            out.print(
                f"{q.name}: its children are promised {under} of its "
                f"{sum(q.guaranteed.values())} guaranteed GPUs",
                highlight=False,
            )
    for q in listing.items:
        if q.declared and q.used > q.guaranteed_gpus:
            out.print(
                f"{listing.summary_of(q)}: the excess is lent and may be taken back",
                highlight=False,
            )


def queue_rm(
    name: NameArg, server: ServerOpt = None, token: TokenOpt = None, as_json: JsonOpt = False
) -> None:
    """Remove a queue that has no pending or running jobs (admin)."""
    with connect(server, token) as client:
        removed = _remove(client, name)
    if as_json:
        _dump(removed)
        return
    out.print(f"removed queue {removed.name}", highlight=False)


def _hours(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def usage(
    by: Annotated[UsageBy, typer.Option("--by", help="One row per user or per queue")] = (
        UsageBy.USER
    ),
    since: Annotated[
        str, typer.Option("--since", help="A span back from now (12h, 7d, 2w) or a UTC date")
    ] = "30d",
    as_csv: Annotated[bool, typer.Option("--csv", help="Print CSV instead of a table")] = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """GPU-hours, jobs and mean wait per user or queue (like Slurm's sreport)."""
    with connect(server, token) as client:
        report = _usage(client, by, since)
    if as_json:
        _dump(report)
        return
    if as_csv:
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow([by.value, "gpu_hours", "jobs", "started", "mean_wait_seconds"])
        for r in report.rows:
            wait = "" if r.mean_wait_seconds is None else f"{r.mean_wait_seconds:.3f}"
            writer.writerow([r.key, f"{r.gpu_hours:.6f}", r.jobs, r.started, wait])
        return
    table = Table(box=None, header_style="bold")
    for column in (by.value, "GPU-hours", "jobs", "started", "mean wait"):
        table.add_column(column)
    for r in report.rows:
        table.add_row(
            r.key or "-",
            f"{r.gpu_hours:.2f}",
            str(r.jobs),
            str(r.started),
            _hours(r.mean_wait_seconds),
        )
    out.print(table)


def register(app: typer.Typer) -> None:
    queues = typer.Typer(help="Tenant queues: guarantees, limits, weights, parents, members.")
    queues.command("add")(queue_add)
    queues.command("set")(queue_set)
    queues.command("list")(queue_list)
    queues.command("rm")(queue_rm)
    app.add_typer(queues, name="queue", no_args_is_help=True)
    app.command("usage")(usage)
