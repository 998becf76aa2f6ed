"""User commands against a running server: submit, jobs, policy, whoami
(show and logs: `cli.job_output`; cancel, hold, release, update and
resubmit: `cli.job_admin`; nodes: `cli.nodes_cmd`; users and tokens:
`cli.identity_cmd`).

Thin over `cli.client.Client`: parse flags, make one call, print a table
(`cli.table`, or JSON with `--json`, for scripts). Only Typer and the
standard library are imported at start; the client, the wire models, YAML
and Rich when a command needs them (see `cli.main`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from schedulearn.cli.common import (
    JsonOpt,
    ServerOpt,
    TokenOpt,
    ago,
    connect,
    dump,
    err,
    error,
    note,
    out,
    span,
    until,
)
from schedulearn.cli.job_output import (
    FINAL,
    array_text,
    command_text,
    hidden_note,
    placement_text,
    progress_text,
)
from schedulearn.cli.job_output import stream as stream_to_end
from schedulearn.cli.job_output import wait as wait_for_end
from schedulearn.cli.table import Column, FormatError, parse_format, print_table

if TYPE_CHECKING:
    from schedulearn.cli.client import Client
    from schedulearn.cli.replies import JobRow
    from schedulearn.protocol import JobSpec

__all__ = [
    "JsonOpt",
    "ServerOpt",
    "TokenOpt",
    "connect",
    "err",
    "hidden_note",
    "out",
    "progress_text",
]

# Older names, still imported by other command modules.
_dump = dump
_ago = ago
_span = span
_until = until

_STATE_COLOUR = {
    "pending": "yellow",
    "assigned": "cyan",
    "running": "green",
    "preempting": "magenta",
    "succeeded": "green",
    "failed": "red",
    "cancelled": "dim",
    "lost": "red",
    "timeout": "red",
}


def _ran(job: JobRow) -> str:
    if job.started_at is None:
        return "-"
    return span((job.ended_at or time.time()) - job.started_at)


def _gpus(job: JobRow) -> str:
    return str(job.gpus) if job.min_gpus is None else f"{job.min_gpus}-{job.max_gpus}"


# The columns of `jobs`, in their default order. On a narrow terminal the
# command is shortened first, then columns go highest `drop` first; the id
# and the state always stay whole.
JOB_COLUMNS: list[Column[JobRow]] = [
    Column("id", "ID", lambda j: str(j.id), keep=True),
    Column("array", "ARRAY", array_text, drop=3),
    Column("name", "NAME", lambda j: j.name or "-", drop=4),
    Column("user", "USER", lambda j: j.user, drop=6),
    Column(
        "state",
        "STATE",
        lambda j: j.state,
        keep=True,
        colour=lambda j: _STATE_COLOUR.get(j.state),
    ),
    Column("gpus", "GPUS", _gpus, drop=2),
    Column("where", "WHERE", placement_text, drop=7),
    Column("submitted", "SUBMITTED", lambda j: ago(j.submitted_at), drop=8),
    Column("ran", "RAN", _ran, drop=5),
    Column(
        "starts",
        "STARTS ~",
        lambda j: until(j.predicted_start_at, j.state == "pending"),
        drop=9,
    ),
    Column("ends", "ENDS ~", lambda j: until(j.predicted_end_at, j.state not in FINAL), drop=10),
    Column("priority", "PRIO", lambda j: str(j.priority), drop=11),
    Column("exit", "EXIT", lambda j: "-" if j.exit_code is None else str(j.exit_code), drop=11),
    Column("command", "COMMAND", command_text, shrink=True, min_width=12, drop=1),
]
# Shown unless --format picks them: rarely wanted in the everyday listing.
_EXTRA_COLUMNS = ("priority", "exit")


def job_columns(fmt: str | None) -> list[Column[JobRow]]:
    """The columns `--format` names, or the default ones."""
    if fmt is None:
        return [c for c in JOB_COLUMNS if c.key not in _EXTRA_COLUMNS]
    try:
        return parse_format(fmt, JOB_COLUMNS)
    except FormatError as exc:
        raise typer.BadParameter(str(exc), param_hint="--format") from None


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


def parse_array(text: str) -> tuple[int, int, int | None]:
    """`0-9%2` -> (first index 0, 10 tasks, at most 2 at once); `4` -> (0, 4, None)."""
    from schedulearn.protocol import parse_array as parse

    try:
        return parse(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--array") from None


# Each JobSpec field and the flag of `submit` that sets it: a validation error
# names the flag too, and tests/unit/test_every_job_option.py fails when a field
# has no flag here (or the flag is not one of `submit`'s).
SPEC_FLAGS: dict[str, str] = {
    "name": "--name",
    "command": "COMMAND",
    "image": "--image",
    "gpus": "--gpus",
    "min_gpus": "--min-gpus",
    "max_gpus": "--max-gpus",
    "cpus": "--cpus",
    "memory": "--memory",
    "gpu_type": "--gpu-type",
    "priority": "--priority",
    "deadline": "--deadline",
    "estimated_duration": "--estimated-duration",
    "model": "--model",
    "preemptible": "--preemptible",
    "env": "--env",
    "secret_env": "--secret-env",
    "workdir": "--workdir",
    "shm_size": "--shm-size",
    "launcher": "--launcher",
    "count": "--count",
    "array_start": "--array",
    "array_limit": "--array",
    "max_restarts": "--max-restarts",
    "constraints": "--constraint",
    "time_limit": "--time",
    "dependency": "--dependency",
    "queue": "--queue",
}


def submit(
    command: Annotated[list[str] | None, typer.Argument(help="The command, after --")] = None,
    file: Annotated[
        Path | None, typer.Option("-f", "--file", help="A job spec (YAML or JSON)")
    ] = None,
    gpus: Annotated[int | None, typer.Option("--gpus", "-g", help="GPUs (default 1)")] = None,
    min_gpus: Annotated[
        int | None,
        typer.Option("--min-gpus", help="An elastic job's fewest GPUs (with --max-gpus)"),
    ] = None,
    max_gpus: Annotated[
        int | None,
        typer.Option("--max-gpus", help="An elastic job's most GPUs (with --min-gpus)"),
    ] = None,
    image: Annotated[
        str | None, typer.Option("--image", help="Run in this container image")
    ] = None,
    name: Annotated[str | None, typer.Option("--name", "-n")] = None,
    cpus: Annotated[float | None, typer.Option("--cpus")] = None,
    memory: Annotated[str | None, typer.Option("--memory", help="e.g. 16G")] = None,
    gpu_type: Annotated[str | None, typer.Option("--gpu-type")] = None,
    priority: Annotated[int | None, typer.Option("--priority")] = None,
    count: Annotated[
        int | None, typer.Option("--count", help="Submit a job array of this many tasks")
    ] = None,
    array: Annotated[
        str | None,
        typer.Option(
            "--array",
            help="A job array: FIRST-LAST[%N], e.g. 0-9%2 (tasks 0 to 9, at most 2 running "
            "at once); each task sees SCHEDULEARN_ARRAY_ID, _INDEX and _SIZE",
        ),
    ] = None,
    launcher: Annotated[
        str | None, typer.Option("--launcher", help="none|torchrun|horovod")
    ] = None,
    estimated: Annotated[
        str | None, typer.Option("--estimated-duration", help="e.g. 30m, 2h")
    ] = None,
    preemptible: Annotated[bool | None, typer.Option("--preemptible/--not-preemptible")] = None,
    deadline: Annotated[
        str | None,
        typer.Option(
            "--deadline",
            help="When it should be done, e.g. 2030-06-01T18:00 (local time) or epoch "
            "seconds; edf runs the earliest first",
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option("--model", help="The model it trains, e.g. resnet50 (GPU-type placement)"),
    ] = None,
    shm_size: Annotated[
        str | None, typer.Option("--shm-size", help="Containers only: /dev/shm size, e.g. 8g")
    ] = None,
    max_restarts: Annotated[
        int | None,
        typer.Option("--max-restarts", help="How often to requeue it when its node is lost [3]"),
    ] = None,
    time_limit: Annotated[
        str | None,
        typer.Option(
            "--time",
            "-t",
            help="Wall-clock limit, e.g. 30m, 4h, 1-12:00:00: then SIGTERM, SIGKILL after "
            "a grace period, and the job ends timeout",
        ),
    ] = None,
    dependency: Annotated[
        str | None,
        typer.Option(
            "--dependency",
            "-d",
            help="Start after other jobs end: afterok|afterany|afternotok:ID[:ID...], "
            "several joined by ','; an array's id means all its tasks",
        ),
    ] = None,
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
    follow: Annotated[
        bool,
        typer.Option(
            "--follow", help="Stream the job's output until it ends; exit with its exit code"
        ),
    ] = False,
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait until the job ends; exit with its exit code")
    ] = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Submit a job: `schedulearn submit --gpus 2 -- python train.py`."""
    data = _spec_file(file) if file is not None else {}
    if command:
        # One argument with spaces is a shell line; several are an argv list.
        data["command"] = command[0] if len(command) == 1 and " " in command[0] else command
    flags = {
        "gpus": gpus,
        "min_gpus": min_gpus,
        "max_gpus": max_gpus,
        "deadline": deadline,
        "model": model,
        "shm_size": shm_size,
        "max_restarts": max_restarts,
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
        "dependency": dependency,
        "time_limit": time_limit,
        "queue": queue,
        "workdir": workdir,
    }
    data.update({k: v for k, v in flags.items() if v is not None})
    if array is not None:
        if count is not None:
            raise typer.BadParameter("give --array or --count, not both", param_hint="--array")
        first, size, limit = parse_array(array)
        data.update(count=size, array_start=first)
        if limit is not None:
            data["array_limit"] = limit
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
    if (follow or wait) and data.get("count", 1) > 1:
        raise typer.BadParameter("--follow and --wait take one job, not an array")
    spec = _job_spec(data)
    with connect(server, token) as client:
        reply = client.submit(spec)
        ids = reply.ids
        if as_json:
            dump(reply)
        elif len(ids) == 1:
            (note if follow or wait else print)(f"submitted job {ids[0]}")
        else:
            print(f"submitted jobs {ids[0]}..{ids[-1]} (array {ids[0]} of {len(ids)})")
        if follow:
            raise typer.Exit(stream_to_end(client, ids[0]))
        if wait:
            raise typer.Exit(wait_for_end(client, ids[0]))


def _spec_file(file: Path) -> dict[str, Any]:
    """The job spec in a YAML or JSON file, as a mapping the flags then override."""
    import yaml

    try:
        loaded = yaml.safe_load(file.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise typer.BadParameter(f"cannot read {file}: {exc}") from None
    if not isinstance(loaded, dict):
        raise typer.BadParameter(f"{file} must hold one job spec (a mapping)")
    return dict(loaded)


def _job_spec(data: dict[str, Any]) -> JobSpec:
    """The spec validated; each error printed with where it is, then exit 2."""
    from pydantic import ValidationError

    from schedulearn.protocol import JobSpec
    from schedulearn.protocol_errors import explain

    try:
        return JobSpec.model_validate(data)
    except ValidationError as exc:
        for e in explain(JobSpec, exc.errors()):
            loc = ".".join(str(x) for x in e["loc"])
            flag = SPEC_FLAGS.get(str(e["loc"][0])) if e["loc"] else None
            where = f"{loc} ({flag})" if flag and flag != "COMMAND" else loc
            message = str(e["msg"]).removeprefix("Value error, ")
            error(f"{where}: {message}" if where else message)
        raise typer.Exit(2) from None


MineOpt = Annotated[bool, typer.Option("--mine", help="Only your own jobs")]
StateOpt = Annotated[list[str] | None, typer.Option("--state", "-s", help="Filter (repeatable)")]
UserOpt = Annotated[str | None, typer.Option("--user", "-u", help="Only this user's jobs")]
NameOpt = Annotated[str | None, typer.Option("--name", help="Only jobs of this name")]


def who_is(client: Client, mine: bool, user: str | None) -> str | None:
    if mine and user:
        raise typer.BadParameter("give --mine or --user, not both", param_hint="--mine")
    return client.whoami().user if mine else user


def jobs(
    state: StateOpt = None,
    user: UserOpt = None,
    name: NameOpt = None,
    mine: MineOpt = False,
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            "-o",
            help="Columns, comma-separated: "
            + ",".join(c.key for c in JOB_COLUMNS)
            + " (the listing is cut to fit a terminal, never when piped)",
        ),
    ] = None,
    limit: Annotated[int, typer.Option("--limit")] = 50,
    offset: Annotated[int, typer.Option("--offset")] = 0,
    server: ServerOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List jobs, newest first."""
    columns = job_columns(fmt)
    with connect(server, token) as client:
        who = who_is(client, mine, user)
        if as_json:
            # The whole wire model, validated (for scripts); the table reads
            # rows without pydantic (`cli.replies`: start-up, issue 15).
            dump(client.jobs(state, who, name, offset, limit))
            return
        page = client.job_rows(state, who, name, offset, limit)
    print_table(page.items, columns)
    if page.total > offset + len(page.items):
        note(f"{len(page.items)} of {page.total}; more with --offset {offset + limit}")


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
        from schedulearn.cli import forecasts

        with connect(server, token) as client:
            preview = client.policy_preview(policies)
        if as_json:
            dump(preview)
            return
        from schedulearn.cli.fitting import print_fitted

        print_fitted(out, forecasts.preview_table(preview), forecasts.PREVIEW_DROP, err)
        out.print(f"[dim]{forecasts.preview_note(preview)}[/dim]", highlight=False)
        return
    if policies:
        raise typer.BadParameter("--policy goes with `schedulearn policy preview`")
    with connect(server, token) as client:
        current = client.set_policy(spec) if spec else client.policy()
    if as_json:
        dump(current)
        return
    print(f"policy: {current.spec}" + (" (switched)" if spec else ""))
    print(f"available: {', '.join(current.available)}")


def whoami(server: ServerOpt = None, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """The user and role of the token in use."""
    with connect(server, token) as client:
        me = client.whoami()
    if as_json:
        dump(me)
        return
    print(f"{me.user} ({me.role})")


COMMANDS: list[tuple[str, Callable[..., None]]] = [
    ("submit", submit),
    ("jobs", jobs),
    ("policy", policy),
    ("whoami", whoami),
]


def register(app: typer.Typer) -> None:
    for name, fn in COMMANDS:
        app.command(name)(fn)
