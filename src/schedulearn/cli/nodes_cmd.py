"""`schedulearn nodes`: list the nodes; `nodes drain|resume|rm NAME` (admin).

A drained node keeps running the jobs it has and takes no new one (the
scheduler treats it as unavailable: `core.eligibility`); `drain --reason`
says why (the REASON column shows it until the node resumes); `resume` gives it
work again; `rm` removes a node, the way to forget a stopped agent's node
(its credential is revoked and any jobs it still had are requeued).
Enrolling a node is `schedulearn node add` (`cli.node_cmd`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from schedulearn.cli.common import JsonOpt, ServerOpt, TokenOpt, connect, dump, note
from schedulearn.cli.table import Column, print_table

if TYPE_CHECKING:
    from schedulearn.protocol import CapabilitiesPublic, NodePublic


def _runs(caps: CapabilitiesPublic) -> str:
    """`process,container (docker 27.1.1)`: the executor kinds and the runtime found."""
    runtime = f" ({caps.container_runtime})" if caps.container_runtime else ""
    return (",".join(caps.executors) or "-") + runtime


def node_state(n: NodePublic) -> str:
    """up, down, drained (up, taking no new job) or down,drained."""
    if n.drained:
        return "drained" if n.healthy else "down,drained"
    return "up" if n.healthy else "down"


def _holders(n: NodePublic) -> str:
    held = sorted({g.job_id for g in n.gpus if g.job_id is not None})
    return ",".join(map(str, held)) or "-"


def _types(n: NodePublic) -> str:
    return ",".join(sorted({g.type for g in n.gpus if g.type})) or "-"


NODE_COLUMNS: list[Column[NodePublic]] = [
    Column("node", "NODE", lambda n: n.name, keep=True),
    Column(
        "state",
        "STATE",
        node_state,
        keep=True,
        colour=lambda n: "green" if node_state(n) == "up" else "yellow" if n.healthy else "red",
    ),
    Column("address", "ADDRESS", lambda n: n.address, drop=5),
    Column("gpus", "GPUS", lambda n: str(len(n.gpus)), drop=1),
    Column("free", "FREE", lambda n: str(sum(1 for g in n.gpus if g.job_id is None)), drop=1),
    Column("type", "TYPE", _types, drop=4),
    Column("cpus", "CPUS", lambda n: f"{n.cpus:g}", drop=3),
    Column("memory", "MEMORY", lambda n: f"{n.memory_gb:g}G", drop=3),
    Column("runs", "RUNS", lambda n: _runs(n.capabilities), drop=6),
    Column("labels", "LABELS", lambda n: ",".join(n.capabilities.labels) or "-", drop=7),
    # What confines its jobs (cgroup v1/v2, none): a node running jobs uncontained shows it.
    Column("containment", "CONTAINMENT", lambda n: n.containment or "-", drop=8),
    Column("holders", "HOLDERS", _holders, shrink=True, min_width=7, drop=2),
    # Why an admin drained it (`nodes drain NAME --reason`); "-" when not drained.
    Column("reason", "REASON", lambda n: n.drain_reason or "-", shrink=True, min_width=8, drop=2),
]

app = typer.Typer(
    help="Nodes and their GPUs; `nodes drain|resume|rm NAME` (admin).",
    invoke_without_command=True,
)


@app.callback()
def nodes(
    ctx: typer.Context, server: ServerOpt = None, token: TokenOpt = None, as_json: JsonOpt = False
) -> None:
    """Nodes and their GPUs; `nodes drain|resume|rm NAME` (admin)."""
    if ctx.invoked_subcommand is not None:
        return
    with connect(server, token) as client:
        listing = client.nodes()
    if as_json:
        dump(listing)
        return
    print_table(listing.items, NODE_COLUMNS)


NameArg = Annotated[str, typer.Argument(help="The node's name (see `schedulearn nodes`)")]


@app.command("drain")
def drain(
    name: NameArg,
    reason: Annotated[
        str,
        typer.Option(
            "--reason",
            help="Why, shown in `schedulearn nodes` and on the web's Cluster page "
            "(at most 200 characters)",
        ),
    ] = "",
    server: ServerOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Take no new job on the node; its running jobs go on (admin)."""
    with connect(server, token) as client:
        node = client.drain_node(name, reason)
    if as_json:
        dump(node)
        return
    running = _holders(node)
    print(
        f"node {node.name} drained"
        + (f" ({node.drain_reason})" if node.drain_reason else "")
        + ": it takes no new job"
        + (f"; still running jobs {running}" if running != "-" else "; nothing runs there")
    )


@app.command("resume")
def resume(
    name: NameArg, server: ServerOpt = None, token: TokenOpt = None, as_json: JsonOpt = False
) -> None:
    """Let a drained node take new jobs again (admin)."""
    with connect(server, token) as client:
        node = client.resume_node(name)
    if as_json:
        dump(node)
        return
    print(f"node {node.name} resumed: it takes new jobs ({node_state(node)})")


@app.command("rm")
def rm(
    name: NameArg, server: ServerOpt = None, token: TokenOpt = None, as_json: JsonOpt = False
) -> None:
    """Remove a node, e.g. one whose agent was stopped for good (admin): its
    credential is revoked, jobs it still had are requeued."""
    with connect(server, token) as client:
        removed = client.remove_node(name)
    if as_json:
        dump(removed)
        return
    lost = ", ".join(str(j) for j in removed.lost_jobs)
    print(f"removed node {removed.name}" + (f"; requeued jobs {lost}" if lost else ""))
    note("its credential is revoked: its agent must enroll again (schedulearn node add)")


def register(root: typer.Typer) -> None:
    """Add `schedulearn nodes [drain|resume|rm]` to the app."""
    root.add_typer(app, name="nodes")
