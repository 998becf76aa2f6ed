"""The `schedulearn` entry point: one Typer app that gathers every command group.

Each command module owns its commands and exposes `register(app)`; this
module only wires them together, so adding a command never touches it
beyond one import.
"""

from __future__ import annotations

import typer

from schedulearn.cli import (
    agent_cmd,
    identity_cmd,
    live,
    node_cmd,
    profiles_cmd,
    queue_cmd,
    simulate,
)

app = typer.Typer(
    name="schedulearn",
    help="Schedule deep-learning training jobs on GPU servers, or simulate policies on traces.",
    no_args_is_help=True,
    add_completion=False,
)

for _module in (simulate, live, agent_cmd, node_cmd, profiles_cmd, identity_cmd, queue_cmd):
    _module.register(app)

if __name__ == "__main__":
    app()
