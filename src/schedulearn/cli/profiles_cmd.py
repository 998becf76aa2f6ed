"""`schedulearn profiles` (list the throughput profiles) and `schedulearn profiles
import FILE` (store a Gavel throughput table, admin).

The file is read here, through the core's own Gavel reader
(`core.throughput.ProfileTable.from_gavel`), so the server receives
typed profiles and a bad file is refused before anything is sent. A
file written by `schedulearn profiles --json` can be imported as well.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from schedulearn.cli.jobs import JsonOpt, ServerOpt, TokenOpt, _dump, connect, err, out
from schedulearn.core.throughput import ProfileTable
from schedulearn.protocol import ProfileImport, ProfileIn, ProfileList

app = typer.Typer(
    help="Throughput profiles: how fast each model trains on each GPU type.",
    invoke_without_command=True,
)


@app.callback()
def profiles(
    ctx: typer.Context, server: ServerOpt = None, token: TokenOpt = None, as_json: JsonOpt = False
) -> None:
    """List the throughput profiles (measured from running jobs, or imported)."""
    if ctx.invoked_subcommand is not None:
        return
    with connect(server, token) as client:
        listing = client.profiles()
    if as_json:
        _dump(listing)
        return
    if not listing.items:
        out.print(
            "no throughput profiles yet: jobs that name a --model and report samples_per_sec "
            "add them, or import a table with `schedulearn profiles import FILE`"
        )
        return
    table = Table(box=None, header_style="bold")
    for col in ("MODEL", "BATCH", "GPU", "GPUS", "STEPS/S", "SAMPLES/S", "SOURCE", "UPDATED"):
        table.add_column(col, no_wrap=True)
    for p in listing.items:
        table.add_row(
            p.model,
            str(p.batch_size or "-"),
            p.gpu_type,
            f"{p.gpu_count}{' spread' if p.spread else ''}",
            f"{p.steps_per_sec:.4g}",
            "-" if p.samples_per_sec is None else f"{p.samples_per_sec:.4g}",
            p.source,
            time.strftime("%Y-%m-%d %H:%M", time.localtime(p.updated_at)),
        )
    out.print(table)


def read_profiles(path: Path) -> list[ProfileIn]:
    """Profiles from a Gavel throughput JSON file, or from `profiles --json` output."""
    try:
        data: Any = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise typer.BadParameter(f"cannot read {path}: {exc}") from None
    if isinstance(data, dict) and "items" in data:
        listing = ProfileList.model_validate(data)
        return [
            ProfileIn(
                model=p.model,
                batch_size=p.batch_size,
                gpu_type=p.gpu_type,
                gpu_count=p.gpu_count,
                spread=p.spread,
                steps_per_sec=p.steps_per_sec,
            )
            for p in listing.items
        ]
    try:
        table = ProfileTable.from_gavel(data)
    except (ValueError, AttributeError, TypeError) as exc:
        raise typer.BadParameter(
            f"{path} is neither a Gavel throughput file (GPU type -> \"('MODEL (batch size "
            f"N)', SCALE)\" -> {{'null': steps/s}}) nor `schedulearn profiles --json` "
            f"output: {exc}"
        ) from None
    return [
        ProfileIn(
            model=p.model,
            batch_size=p.batch_size,
            gpu_type=p.gpu_type,
            gpu_count=p.gpu_count,
            spread=p.spread,
            steps_per_sec=p.steps_per_second,
        )
        for p in table.profiles()
    ]


@app.command("import")
def import_file(
    file: Annotated[Path, typer.Argument(help="Gavel's simulation_throughputs.json, or similar")],
    source: Annotated[
        str | None, typer.Option("--source", help="Name stored with them [the file's name]")
    ] = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Store the profiles of a throughput table (admin); the latest for a key wins."""
    items = read_profiles(file)
    if not items:
        err.print(f"[red]error:[/red] {file} holds no profiles", highlight=False)
        raise typer.Exit(1)
    body = ProfileImport(source=source or file.name, profiles=items)
    with connect(server, token) as client:
        reply = client.import_profiles(body)
    if as_json:
        _dump(reply)
        return
    out.print(f"stored {reply.stored} profiles from {file} (source {body.source!r})")


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="profiles")
