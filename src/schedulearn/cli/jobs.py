"""User commands against a running server: submit, jobs, show, logs, cancel,
nodes, policy, whoami (users and tokens: `cli.identity_cmd`).

Thin over `cli.client.Client`: parse flags, make one call, print a Rich
table (or JSON with `--json`, for scripts).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from schedulearn.cli import forecasts
from schedulearn.cli.client import ApiError, Client
from schedulearn.cli.config import resolve
from schedulearn.protocol import (
    CapabilitiesPublic,
    JobPublic,
    JobSpec,
    JobState,
    LogLinePublic,
    ProgressReport,
)

out = Console()
err = Console(stderr=True)

ServerOpt = Annotated[
    str | None, typer.Option("--server", help="Server URL [env SCHEDULEARN_SERVER, config file]")
]
TokenOpt = Annotated[
    str | None, typer.Option("--token", help="API token [env SCHEDULEARN_TOKEN, config file]")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table")]


@contextmanager
def connect(server: str | None, token: str | None) -> Iterator[Client]:
    config = resolve(server, token)
    try:
        with Client(config.server, config.token) as client:
            yield client
    except ApiError as exc:
        err.print(f"[red]error:[/red] {exc.message}", highlight=False)
        raise typer.Exit(1) from None


def _dump(obj: Any) -> None:
    if hasattr(obj, "model_dump"):
        obj = obj.model_dump(mode="json")
    sys.stdout.write(json.dumps(obj, indent=2) + "\n")


def _ago(t: float | None) -> str:
    if t is None:
        return "-"
    return _span(time.time() - t) + " ago"


def _span(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(max(0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


_STATE_STYLE = {
    JobState.PENDING: "yellow",
    JobState.ASSIGNED: "cyan",
    JobState.RUNNING: "green",
    JobState.PREEMPTING: "magenta",
    JobState.SUCCEEDED: "bold green",
    JobState.FAILED: "red",
    JobState.CANCELLED: "dim",
    JobState.LOST: "red",
}


def _placement(job: JobPublic) -> str:
    if not job.placement:
        return "-"
    return " ".join(f"{n}:{','.join(map(str, g)) or '-'}" for n, g in job.placement.items())


def hidden_note(job: JobPublic) -> str:
    """Why a job's details are not shown (the server sent them as null)."""
    return f"job {job.id} belongs to {job.user}; only its owner and admins see its details"


def _command(job: JobPublic) -> str:
    if job.command is None:
        return "(hidden)" if job.details_hidden else "-"
    text = job.command if isinstance(job.command, str) else " ".join(job.command)
    return text if len(text) <= 40 else text[:37] + "..."


def _until(t: float | None, active: bool) -> str:
    """A predicted time as 'in 5m02s'; '?' when an active job's is unknown."""
    if t is None:
        return "?" if active else "-"
    return "now" if t <= time.time() else "in " + _span(t - time.time())


def job_table(items: list[JobPublic]) -> Table:
    table = Table(box=None, header_style="bold")
    columns = ("ID", "NAME", "USER", "STATE", "GPUS", "WHERE", "SUBMITTED", "RAN")
    for col in (*columns, "STARTS ~", "ENDS ~", "COMMAND"):
        table.add_column(col, no_wrap=True, overflow="ellipsis")
    for j in items:
        ran = None
        if j.started_at is not None:
            ran = (j.ended_at or time.time()) - j.started_at
        style = _STATE_STYLE.get(j.state, "")
        table.add_row(
            str(j.id),
            j.name or "-",
            j.user,
            f"[{style}]{j.state.value}[/{style}]" if style else j.state.value,
            str(j.gpus) if j.min_gpus is None else f"{j.min_gpus}-{j.max_gpus}",
            _placement(j),
            _ago(j.submitted_at),
            _span(ran),
            _until(j.predicted_start_at, j.state is JobState.PENDING),
            _until(j.predicted_end_at, not j.state.is_final),
            _command(j),
        )
    return table


def _parse_env(pairs: list[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"--env {pair!r}: write KEY=VALUE")
        env[key] = value
    return env


def _parse_secret_env(items: list[str]) -> dict[str, str]:
    """`KEY=VALUE`, or `KEY` alone: the value of KEY in this shell's environment
    (which keeps it off the command line, where `ps` would show it)."""
    env = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not key:
            raise typer.BadParameter("--secret-env: write KEY=VALUE, or KEY to take $KEY from here")
        if not sep:
            if key not in os.environ:
                raise typer.BadParameter(
                    f"--secret-env {key}: ${key} is not set here; set it, or write {key}=VALUE"
                )
            value = os.environ[key]
        env[key] = value
    return env


def submit(
    command: Annotated[list[str] | None, typer.Argument(help="The command, after --")] = None,
    file: Annotated[
        Path | None, typer.Option("-f", "--file", help="A job spec (YAML or JSON)")
    ] = None,
    gpus: Annotated[int | None, typer.Option("--gpus", "-g", help="GPUs (default 1)")] = None,
    image: Annotated[
        str | None, typer.Option("--image", help="Run in this container image")
    ] = None,
    name: Annotated[str | None, typer.Option("--name", "-n")] = None,
    cpus: Annotated[float | None, typer.Option("--cpus")] = None,
    memory: Annotated[str | None, typer.Option("--memory", help="e.g. 16G")] = None,
    gpu_type: Annotated[str | None, typer.Option("--gpu-type")] = None,
    priority: Annotated[int | None, typer.Option("--priority")] = None,
    count: Annotated[int | None, typer.Option("--count", help="Submit a job array")] = None,
    launcher: Annotated[
        str | None, typer.Option("--launcher", help="none|torchrun|horovod")
    ] = None,
    estimated: Annotated[
        str | None, typer.Option("--estimated-duration", help="e.g. 30m, 2h")
    ] = None,
    preemptible: Annotated[bool | None, typer.Option("--preemptible/--not-preemptible")] = None,
    queue: Annotated[
        str | None,
        typer.Option("--queue", "-q", help="The tenant queue (team) [your default queue]"),
    ] = None,
    env: Annotated[list[str] | None, typer.Option("--env", "-e", help="KEY=VALUE")] = None,
    secret_env: Annotated[
        list[str] | None,
        typer.Option(
            "--secret-env",
            help="KEY=VALUE the job sees but nobody is shown, you included; KEY alone "
            "takes $KEY from this shell (off the command line)",
        ),
    ] = None,
    workdir: Annotated[str | None, typer.Option("--workdir", help="Default: here")] = None,
    constraint: Annotated[
        list[str] | None,
        typer.Option(
            "--constraint",
            help="A node label the job needs (agents get them with --label); repeatable",
        ),
    ] = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Submit a job: `schedulearn submit --gpus 2 -- python train.py`."""
    data: dict[str, Any] = {}
    if file is not None:
        try:
            loaded = yaml.safe_load(file.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise typer.BadParameter(f"cannot read {file}: {exc}") from None
        if not isinstance(loaded, dict):
            raise typer.BadParameter(f"{file} must hold one job spec (a mapping)")
        data.update(loaded)
    if command:
        # One argument with spaces is a shell line; several are an argv list.
        data["command"] = command[0] if len(command) == 1 and " " in command[0] else command
    flags = {
        "gpus": gpus,
        "image": image,
        "name": name,
        "cpus": cpus,
        "memory": memory,
        "gpu_type": gpu_type,
        "priority": priority,
        "count": count,
        "launcher": launcher,
        "estimated_duration": estimated,
        "preemptible": preemptible,
        "queue": queue,
        "workdir": workdir,
    }
    data.update({k: v for k, v in flags.items() if v is not None})
    if env:
        data["env"] = {**data.get("env", {}), **_parse_env(env)}
    if secret_env:
        data["secret_env"] = {**data.get("secret_env", {}), **_parse_secret_env(secret_env)}
    if constraint:
        data["constraints"] = [*data.get("constraints", []), *constraint]
    if "command" not in data:
        raise typer.BadParameter("no command: put it after --, or in the file given with -f")
    if not data.get("image") and not data.get("workdir"):
        # A local process job runs where it was submitted from, like a shell would.
        data["workdir"] = os.getcwd()
    try:
        spec = JobSpec.model_validate(data)
    except ValidationError as exc:
        for e in exc.errors():
            loc = ".".join(str(x) for x in e["loc"])
            err.print(f"[red]error:[/red] {loc}: {e['msg']}", highlight=False)
        raise typer.Exit(2) from None
    with connect(server, token) as client:
        reply = client.submit(spec)
    if as_json:
        _dump(reply)
        return
    ids = reply.ids
    if len(ids) == 1:
        out.print(f"submitted job {ids[0]}")
    else:
        out.print(f"submitted jobs {ids[0]}..{ids[-1]} (array of {len(ids)})")


def jobs(
    state: Annotated[
        list[str] | None, typer.Option("--state", "-s", help="Filter (repeatable)")
    ] = None,
    user: Annotated[str | None, typer.Option("--user", "-u")] = None,
    name: Annotated[str | None, typer.Option("--name")] = None,
    limit: Annotated[int, typer.Option("--limit")] = 50,
    offset: Annotated[int, typer.Option("--offset")] = 0,
    server: ServerOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List jobs, newest first."""
    with connect(server, token) as client:
        page = client.jobs(state, user, name, offset, limit)
    if as_json:
        _dump(page)
        return
    out.print(job_table(page.items))
    if page.total > offset + len(page.items):
        out.print(
            f"[dim]{len(page.items)} of {page.total}; more with --offset {offset + limit}[/dim]"
        )


def show(
    job_id: Annotated[int, typer.Argument()],
    server: ServerOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """One job in full, with its place in the queue and why it waits."""
    with connect(server, token) as client:
        job = client.job(job_id)
    if as_json:
        _dump(job)
        return
    table = Table(box=None, show_header=False)
    table.add_column(style="bold")
    table.add_column()
    for key, value in job.model_dump(mode="json").items():
        if key == "details_hidden":
            continue
        if job.details_hidden and key in _DETAILS:
            table.add_row(key, "[dim](hidden)[/dim]")
            continue
        if value in (None, {}, "", []) and key not in ("message",):
            continue
        if key.endswith("_at") and isinstance(value, float):
            when = _until(value, True) if value > time.time() else _ago(value)
            value = f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(value))} ({when})"
            if key.startswith("predicted_"):
                value = "~ " + value
        elif key == "duration_estimate" and isinstance(value, float):
            value = f"{_span(value)} (from {job.duration_source or '?'})"
        elif key == "duration_source":
            continue
        elif key == "progress" and job.progress is not None:
            value = progress_text(job.progress)
        elif key == "secret_env_keys":
            value = ", ".join(value) + " (values never shown)"
        elif key == "checkpoint" and job.checkpoint is not None:
            value = (
                f"attempt {job.checkpoint.attempt}, {job.checkpoint.size_bytes:,} bytes "
                f"(sha256 {job.checkpoint.sha256[:12]})"
            )
        table.add_row(key, str(value))
    out.print(table)
    if job.details_hidden:
        out.print(f"command, env, workdir, logs and progress hidden: {hidden_note(job)}")


# The fields a server sends as null to a caller who may not see them.
_DETAILS = ("command", "env", "workdir", "message", "progress", "checkpoint", "secret_env_keys")


def progress_text(p: ProgressReport) -> str:
    """A progress report in one line: 'epoch 3/10, step 1200, loss 0.2310, ...'."""
    parts = []
    if p.epoch is not None:
        parts.append(f"epoch {p.epoch}" + (f"/{p.total_epochs}" if p.total_epochs else ""))
    if p.step is not None:
        parts.append(f"step {p.step}")
    if p.loss is not None:
        parts.append(f"loss {p.loss:.4g}")
    if p.accuracy is not None:
        parts.append(f"accuracy {p.accuracy:.4g}")
    if p.samples_per_sec is not None:
        parts.append(f"{p.samples_per_sec:.4g} samples/s")
    parts += [f"{k} {v:.4g}" for k, v in sorted(p.metrics.items())]
    return ", ".join(parts) + f" ({_ago(p.at)})"


def logs(
    job_id: Annotated[int, typer.Argument()],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing until it ends")
    ] = False,
    full: Annotated[
        bool,
        typer.Option(
            "--full",
            help="Every line, also those the server cut from its stored copy (uploaded by the "
            "agent when each attempt ends); stdout and stderr together, on stdout",
        ),
    ] = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Print a job's output (`-f` streams it until the job ends; `--full` every line)."""

    def emit(line: LogLinePublic) -> None:
        stream = sys.stderr if line.stream.value == "stderr" else sys.stdout
        stream.write(line.text + ("" if line.text.endswith("\n") else "\n"))
        stream.flush()

    with connect(server, token) as client:
        if full:
            out_bytes = sys.stdout.buffer
            for chunk in client.full_log(job_id):
                out_bytes.write(chunk)
            out_bytes.flush()
            return
        if follow:
            for item in client.follow(job_id):
                if isinstance(item, JobPublic):
                    err.print(
                        f"[dim]job {item.id} {item.state.value}[/dim] {item.message or ''}",
                        highlight=False,
                    )
                    if item.state is not JobState.SUCCEEDED:
                        raise typer.Exit(1)
                else:
                    emit(item)
            return
        after = 0
        while True:
            page = client.logs(job_id, after)
            for line in page.lines:
                emit(line)
            if not page.lines:
                return
            after = page.next_after


def cancel(
    job_ids: Annotated[list[int], typer.Argument()],
    server: ServerOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Cancel jobs (a running job is stopped)."""
    with connect(server, token) as client:
        done = [client.cancel(i) for i in job_ids]
    if as_json:
        _dump([j.model_dump(mode="json") for j in done])
        return
    for job in done:
        out.print(f"job {job.id}: {job.state.value}")


def _runs(caps: CapabilitiesPublic) -> str:
    """`process,container (docker 27.1.1)`: the executor kinds and the runtime found."""
    runtime = f" ({caps.container_runtime})" if caps.container_runtime else ""
    return (",".join(caps.executors) or "-") + runtime


def nodes(server: ServerOpt = None, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Nodes and their GPUs."""
    with connect(server, token) as client:
        listing = client.nodes()
    if as_json:
        _dump(listing)
        return
    table = Table(box=None, header_style="bold")
    columns = ("NODE", "STATE", "ADDRESS", "GPUS", "FREE", "TYPE", "CPUS", "MEMORY", "RUNS")
    for col in (*columns, "LABELS", "HOLDERS"):
        table.add_column(col)
    for n in listing.items:
        holders = sorted({g.job_id for g in n.gpus if g.job_id is not None})
        table.add_row(
            n.name,
            "[green]up[/green]" if n.healthy else "[red]down[/red]",
            n.address,
            str(len(n.gpus)),
            str(sum(1 for g in n.gpus if g.job_id is None)),
            ",".join(sorted({g.type for g in n.gpus if g.type})) or "-",
            f"{n.cpus:g}",
            f"{n.memory_gb:g}G",
            _runs(n.capabilities),
            ",".join(n.capabilities.labels) or "-",
            ",".join(map(str, holders)) or "-",
        )
    out.print(table)


def policy(
    spec: Annotated[
        str | None,
        typer.Argument(help="Switch to this policy (admin), or `preview` to compare policies"),
    ] = None,
    policies: Annotated[
        str | None,
        typer.Option("--policy", "-p", help="With preview: comma-separated specs [all]"),
    ] = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show the policy in force, switch it (`schedulearn policy fifo:backfill=true`),
    or simulate the current queue under each policy (`schedulearn policy preview
    [--policy fifo,srtf]`)."""
    if spec == "preview":
        with connect(server, token) as client:
            preview = client.policy_preview(policies)
        if as_json:
            _dump(preview)
            return
        out.print(forecasts.preview_table(preview))
        out.print(f"[dim]{forecasts.preview_note(preview)}[/dim]", highlight=False)
        return
    if policies:
        raise typer.BadParameter("--policy goes with `schedulearn policy preview`")
    with connect(server, token) as client:
        current = client.set_policy(spec) if spec else client.policy()
    if as_json:
        _dump(current)
        return
    out.print(f"policy: [bold]{current.spec}[/bold]" + (" (switched)" if spec else ""))
    out.print(f"[dim]available: {', '.join(current.available)}[/dim]")


def whoami(server: ServerOpt = None, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """The user and role of the token in use."""
    with connect(server, token) as client:
        me = client.whoami()
    if as_json:
        _dump(me)
        return
    out.print(f"{me.user} ({me.role})")


COMMANDS: list[tuple[str, Callable[..., None]]] = [
    ("submit", submit),
    ("jobs", jobs),
    ("show", show),
    ("logs", logs),
    ("cancel", cancel),
    ("nodes", nodes),
    ("policy", policy),
    ("whoami", whoami),
]


def register(app: typer.Typer) -> None:
    for name, fn in COMMANDS:
        app.command(name)(fn)
