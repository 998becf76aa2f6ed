"""`schedulearn node add|rm`: enroll a node (a one-time join token) and remove one (admin).

Thin over `cli.client.Client`. `node add NAME` prints the join token alone
on stdout (so `schedulearn node add gpu1 > gpu1.join` keeps it in a file)
and, on stderr, how to start that node's agent with it. `node rm NAME`
revokes the node's credential (its agent stops at its next call) and
removes the node; its running jobs are requeued.
"""

from __future__ import annotations

import re
import time
from typing import Annotated

import typer
from rich.console import Console

from schedulearn.cli.jobs import JsonOpt, ServerOpt, TokenOpt, connect

err = Console(stderr=True, highlight=False)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """`90`, `90s`, `30m`, `1h`, `2d` -> seconds."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if found is None:
        raise typer.BadParameter(
            f"{text!r} is not a duration; write e.g. 900, 30m, 1h or 2d", param_hint="--expires"
        )
    return float(found[1]) * _UNITS[found[2] or "s"]


def add(
    name: Annotated[str, typer.Argument(help="The node's name (what its agent passes as --name)")],
    expires: Annotated[
        str, typer.Option("--expires", help="How long the join token works, e.g. 30m, 1h, 2d")
    ] = "1h",
    server: ServerOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Enroll a node (admin): print a one-time join token for its agent."""
    seconds = parse_duration(expires)
    with connect(server, token) as client:
        made = client.add_node(name, seconds)
        url = client.server
    if as_json:
        typer.echo(made.model_dump_json(indent=2))
        return
    typer.echo(made.join_token)
    until = time.strftime("%Y-%m-%d %H:%M", time.localtime(made.expires_at))
    err.print(
        f"join token for node [bold]{made.node}[/bold]: works once, until {until}. On "
        f"{made.node}, keep it in a file only you can read and start the agent with it:\n"
        f"  schedulearn agent --server {url} --name {made.node} --join-token-file FILE\n"
        "(or set SCHEDULEARN_JOIN_TOKEN). The agent exchanges it for the node's own "
        "credential, kept in its state directory."
    )


def rm(
    name: Annotated[str, typer.Argument(help="The node to remove")],
    server: ServerOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Remove a node (admin): revoke its credential; its running jobs are requeued."""
    with connect(server, token) as client:
        removed = client.remove_node(name)
    if as_json:
        typer.echo(removed.model_dump_json(indent=2))
        return
    lost = ", ".join(str(j) for j in removed.lost_jobs)
    err.print(
        f"removed node {removed.name}; its credential is revoked"
        + (f"; requeued jobs {lost}" if lost else "")
    )


def register(app: typer.Typer) -> None:
    """Add `schedulearn node add|rm` to the app."""
    node = typer.Typer(help="Enroll and remove nodes (admin).", no_args_is_help=True)
    node.command("add")(add)
    node.command("rm")(rm)
    app.add_typer(node, name="node")
