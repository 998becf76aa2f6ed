"""The `schedulearn` entry point: one Typer app that gathers every command group.

Each command module owns its commands and exposes `register(app)`. This
module names which module owns which command (`COMMANDS`) and loads a
module only when one of its commands runs: `schedulearn whoami` never
imports the simulator, the agent or the server, so it starts in a fraction
of the time. `schedulearn --help` loads them all (it lists every command).
Adding a command is one line in `COMMANDS`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

import typer
from typer.core import TyperGroup

from schedulearn.cli import params
from schedulearn.startup import loading

if TYPE_CHECKING:
    # The click that Typer carries (its own copy, not the `click` package).
    from typer._click.core import Command, Context

# Command (or command group) name -> the module whose `register(app)` adds it.
COMMANDS: dict[str, str] = {
    "simulate": "schedulearn.cli.simulate",
    "server": "schedulearn.cli.live",
    "up": "schedulearn.cli.live",
    "submit": "schedulearn.cli.jobs",
    "jobs": "schedulearn.cli.jobs",
    "show": "schedulearn.cli.job_output",
    "logs": "schedulearn.cli.job_output",
    "cancel": "schedulearn.cli.job_admin",
    "nodes": "schedulearn.cli.nodes_cmd",
    "policy": "schedulearn.cli.jobs",
    "whoami": "schedulearn.cli.jobs",
    "hold": "schedulearn.cli.job_admin",
    "release": "schedulearn.cli.job_admin",
    "update": "schedulearn.cli.job_admin",
    "resubmit": "schedulearn.cli.job_admin",
    "agent": "schedulearn.cli.agent_cmd",
    "node": "schedulearn.cli.node_cmd",
    "profiles": "schedulearn.cli.profiles_cmd",
    "user": "schedulearn.cli.identity_cmd",
    "token": "schedulearn.cli.identity_cmd",
    "web-login": "schedulearn.cli.identity_cmd",
    "queue": "schedulearn.cli.queue_cmd",
    "usage": "schedulearn.cli.queue_cmd",
    "acct": "schedulearn.cli.acct_cmd",
}


def load_command(name: str) -> Command | None:
    """The click command `name`, from its module (imported now), or None."""
    module = COMMANDS.get(name)
    if module is None:
        return None
    holder = typer.Typer()
    with loading():
        importlib.import_module(module).register(holder)
    return typer.main.get_group(holder).commands.get(name)


class LazyGroup(TyperGroup):
    """A group whose commands are imported when first looked up, and whose
    plain parameters are converted without pydantic (`cli.params`)."""

    def parse_args(self, ctx: Context, args: list[str]) -> list[str]:
        params.install(self.get_params(ctx))
        return super().parse_args(ctx, args)

    def resolve_command(
        self, ctx: Context, args: list[str]
    ) -> tuple[str | None, Command | None, list[str]]:
        name, found, rest = super().resolve_command(ctx, args)
        if found is not None:
            params.install_tree(found, ctx)
        return name, found, rest

    def list_commands(self, ctx: Context) -> list[str]:
        return sorted({*COMMANDS, *super().list_commands(ctx)})

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        found = super().get_command(ctx, cmd_name)
        if found is None:
            found = load_command(cmd_name)
            if found is not None:
                self.add_command(found, cmd_name)
        return found


app = typer.Typer(
    name="schedulearn",
    help="Schedule deep-learning training jobs on GPU servers, or simulate policies on traces.",
    no_args_is_help=True,
    add_completion=True,
    cls=LazyGroup,
)


def _version(value: bool) -> None:
    if value:
        from schedulearn import __version__

        typer.echo(f"schedulearn {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", help="Print the version and exit", callback=_version, is_eager=True
    ),
) -> None:
    """Schedule deep-learning training jobs on GPU servers, or simulate policies on traces.

    Shell completion: `schedulearn --install-completion` (bash, zsh, fish, PowerShell)."""


if __name__ == "__main__":
    app()
