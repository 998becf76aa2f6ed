"""`python -m schedulearn.agent`: the same as `schedulearn agent`."""

from __future__ import annotations

import typer

from schedulearn.cli import agent_cmd

app = typer.Typer(add_completion=False)
app.command()(agent_cmd.agent)

if __name__ == "__main__":
    app()
