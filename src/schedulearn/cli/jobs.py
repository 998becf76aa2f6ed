"""User commands against a running server: submit, jobs, show, logs, cancel,
nodes, policy, whoami (users and tokens: `cli.identity_cmd`; hold, release,
update and resubmit: `cli.job_admin`; node administration: `cli.nodes_cmd`).

Thin over `cli.client.Client`: parse flags, make one call, print a table
(`cli.table`, or JSON with `--json`, for scripts). Only Typer and the
standard library are imported at start; the client, the wire models, YAML
and Rich when a command needs them (see `cli.main`).
"""

from __future__ import annotations

import os
import sys
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
    clock,
    connect,
    dump,
    err,
    error,
    note,
    out,
    span,
    until,
)
from schedulearn.cli.table import Column, FormatError, parse_format, print_table

if TYPE_CHECKING:
    from schedulearn.cli.client import Client
    from schedulearn.protocol import JobPublic, ProgressReport

__all__ = ["JsonOpt", "ServerOpt", "TokenOpt", "connect", "err", "out"]

# Older names, still imported by other command modules.
_dump = dump
_ago = ago
_span = span
_until = until

_FINAL = ("succeeded", "failed", "cancelled", "lost")
_STATE_COLOUR = {
    "pending": "yellow",
    "assigned": "cyan",
    "running": "green",
    "preempting": "magenta",
    "succeeded": "green",
    "failed": "red",
    "cancelled": "dim",
    "lost": "red",
}


def _placement(job: JobPublic) -> str:
    if not job.placement:
        return "-"
    return " ".join(f"{n}:{','.join(map(str, g)) or '-'}" for n, g in job.placement.items())


def hidden_note(job: JobPublic) -> str:
    """Why a job's details are not shown (the server sent them as null)."""
    return f"job {job.id} belongs to {job.user}; only its owner and admins see its details"


def command_text(job: JobPublic) -> str:
    """The whole command as one line ('(hidden)' when the caller may not see it)."""
    if job.command is None:
        return "(hidden)" if job.details_hidden else "-"
    return job.command if isinstance(job.command, str) else " ".join(job.command)


def array_text(job: JobPublic) -> str:
    """`ARRAYID_INDEX` for a task of a job array (Slurm's form), else '-'."""
    if job.array_id is None:
        return "-"
    return f"{job.array_id}_{job.array_index}"


def _ran(job: JobPublic) -> str:
    if job.started_at is None:
        return "-"
    return span((job.ended_at or time.time()) - job.started_at)


def _gpus(job: JobPublic) -> str:
    return str(job.gpus) if job.min_gpus is None else f"{job.min_gpus}-{job.max_gpus}"


# The columns of `jobs`, in their default order. On a narrow terminal the
# command is shortened first, then columns go highest `drop` first; the id
# and the state always stay whole.
JOB_COLUMNS: list[Column[JobPublic]] = [
    Column("id", "ID", lambda j: str(j.id), keep=True),
    Column("array", "ARRAY", array_text, drop=3),
    Column("name", "NAME", lambda j: j.name or "-", drop=4),
    Column("user", "USER", lambda j: j.user, drop=6),
    Column(
        "state",
        "STATE",
        lambda j: j.state.value,
        keep=True,
        colour=lambda j: _STATE_COLOUR.get(j.state.value),
    ),
    Column("gpus", "GPUS", _gpus, drop=2),
    Column("where", "WHERE", _placement, drop=7),
    Column("submitted", "SUBMITTED", lambda j: ago(j.submitted_at), drop=8),
    Column("ran", "RAN", _ran, drop=5),
    Column(
        "starts",
        "STARTS ~",
        lambda j: until(j.predicted_start_at, j.state.value == "pending"),
        drop=9,
    ),
    Column(
        "ends", "ENDS ~", lambda j: until(j.predicted_end_at, j.state.value not in _FINAL), drop=10
    ),
    Column("priority", "PRIO", lambda j: str(j.priority), drop=11),
    Column("exit", "EXIT", lambda j: "-" if j.exit_code is None else str(j.exit_code), drop=11),
    Column("command", "COMMAND", command_text, shrink=True, min_width=12, drop=1),
]
# Shown unless --format picks them: rarely wanted in the everyday listing.
_EXTRA_COLUMNS = ("priority", "exit")


def job_columns(fmt: str | None) -> list[Column[JobPublic]]:
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
    body, sep, limit_text = text.partition("%")
    first_text, dash, last_text = body.partition("-")
    try:
        if dash:
            first, last = int(first_text), int(last_text)
        else:
            first, last = 0, int(first_text) - 1
        limit = int(limit_text) if sep else None
    except ValueError:
        first, last, limit = 0, -1, None
    if first < 0 or last < first or (limit is not None and limit < 1):
        raise typer.BadParameter(
            f"{text!r}: write FIRST-LAST (0-9: ten tasks, indices 0 to 9) or a count (10), "
            "optionally %N to run at most N at once (0-9%2)",
            param_hint="--array",
        )
    return first, last - first + 1, limit


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
    import yaml
    from pydantic import ValidationError

    from schedulearn.protocol import JobSpec

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
    try:
        spec = JobSpec.model_validate(data)
    except ValidationError as exc:
        for e in exc.errors():
            loc = ".".join(str(x) for x in e["loc"])
            error(f"{loc}: {e['msg']}")
        raise typer.Exit(2) from None
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
            raise typer.Exit(_stream(client, ids[0]))
        if wait:
            raise typer.Exit(_wait(client, ids[0]))


def _exit_code(job: JobPublic) -> int:
    """What the command exits with for a job that ended: its own code when it
    ran to an exit, else 1 (cancelled, lost, failed to start)."""
    if job.state.value == "succeeded":
        return 0
    return job.exit_code if job.exit_code not in (None, 0) else 1


def _ended_text(job: JobPublic) -> str:
    return f"job {job.id} {job.state.value}" + (f": {job.message}" if job.message else "")


def _emit(line: Any, timestamps: bool = False) -> None:
    stream = sys.stderr if line.stream.value == "stderr" else sys.stdout
    stamp = clock(line.at) + " " if timestamps else ""
    stream.write(stamp + line.text + ("" if line.text.endswith("\n") else "\n"))
    stream.flush()


def _stream(client: Client, job_id: int, after: int = 0, timestamps: bool = False) -> int:
    """Print the job's output as it comes; the exit code its command ends with."""
    from schedulearn.protocol import JobPublic

    for item in client.follow(job_id, after):
        if isinstance(item, JobPublic):
            note(_ended_text(item))
            return _exit_code(item)
        _emit(item, timestamps)
    return 1


def _wait(client: Client, job_id: int) -> int:
    pause = 0.2
    while True:
        job = client.job(job_id)
        if job.state.value in _FINAL:
            note(_ended_text(job))
            return _exit_code(job)
        time.sleep(pause)
        pause = min(pause * 1.5, 2.0)


MineOpt = Annotated[bool, typer.Option("--mine", help="Only your own jobs")]
StateOpt = Annotated[list[str] | None, typer.Option("--state", "-s", help="Filter (repeatable)")]
UserOpt = Annotated[str | None, typer.Option("--user", "-u", help="Only this user's jobs")]
NameOpt = Annotated[str | None, typer.Option("--name", help="Only jobs of this name")]


def _who(client: Client, mine: bool, user: str | None) -> str | None:
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
        page = client.jobs(state, _who(client, mine, user), name, offset, limit)
    if as_json:
        dump(page)
        return
    print_table(page.items, columns)
    if page.total > offset + len(page.items):
        note(f"{len(page.items)} of {page.total}; more with --offset {offset + limit}")


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
        dump(job)
        return
    sys.stdout.write(show_text(job) + "\n")


# The fields a server sends as null to a caller who may not see them.
_DETAILS = ("command", "env", "workdir", "message", "progress", "checkpoint", "secret_env_keys")
# Shown in the heading lines, not again in the field list.
_HEADED = ("id", "name", "user", "state", "details_hidden", "duration_source", "array_index")


def _text(value: Any) -> str:
    """A value as a person reads it: lists comma-separated, mappings as k=v."""
    if isinstance(value, dict):
        return ", ".join(f"{k}={_text(v)}" for k, v in value.items()) or "-"
    if isinstance(value, list | tuple):
        return ", ".join(_text(v) for v in value) or "-"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def show_text(job: JobPublic) -> str:
    """`schedulearn show` for a person: a heading, then one `field  value` line each."""
    head = f"job {job.id}" + (f" ({job.name})" if job.name else "") + f" of {job.user}"
    if job.array_id is not None:
        head += f", task {job.array_index} of array {job.array_id}"
    state = job.state.value
    if job.queue_position is not None:
        state += f", number {job.queue_position} in the queue"
    lines = [head, f"  {'state':<20} {state}"]
    if job.waiting_reason:
        lines.append(f"  {'waiting because':<20} {job.waiting_reason}")
    for key, value in job.model_dump(mode="json").items():
        if key in _HEADED or key in ("queue_position", "waiting_reason"):
            continue
        if job.details_hidden and key in _DETAILS:
            lines.append(f"  {key:<20} (hidden)")
            continue
        if value in (None, {}, "", []):
            continue
        if key == "command":
            text = command_text(job)
        elif key.endswith("_at") and isinstance(value, float):
            when = until(value, True) if value > time.time() else ago(value)
            text = ("~ " if key.startswith("predicted_") else "") + f"{clock(value)} ({when})"
        elif key == "duration_estimate" and isinstance(value, float):
            text = f"{span(value)} (from {job.duration_source or '?'})"
        elif key == "estimated_duration" and isinstance(value, float):
            text = span(value)
        elif key == "memory_gb":
            key, text = "memory", f"{value:g} GB"
        elif key == "placement" and job.placement:
            text = _placement(job)
        elif key == "progress" and job.progress is not None:
            text = progress_text(job.progress)
        elif key == "secret_env_keys":
            text = _text(value) + " (values never shown)"
        elif key == "checkpoint" and job.checkpoint is not None:
            text = (
                f"attempt {job.checkpoint.attempt}, {job.checkpoint.size_bytes:,} bytes "
                f"(sha256 {job.checkpoint.sha256[:12]})"
            )
        else:
            text = _text(value)
        lines.append(f"  {key.replace('_', ' '):<20} {text}")
    if job.details_hidden:
        lines.append(f"command, env, workdir, logs and progress hidden: {hidden_note(job)}")
    return "\n".join(lines)


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
    return ", ".join(parts) + f" ({ago(p.at)})"


def not_started_text(job: JobPublic) -> str:
    """What `logs` says for a job with no output because it has not started."""
    text = f"job {job.id} has not started yet ({job.state.value}"
    if job.queue_position is not None:
        text += f", number {job.queue_position} in the queue"
    text += ")"
    if job.waiting_reason:
        text += f": {job.waiting_reason}"
    if job.predicted_start_at is not None:
        at = job.predicted_start_at
        text += f"; expected to start {until(at, True)} (~{clock(at)})"
    else:
        text += "; no start time can be predicted yet"
    return text


def logs(
    job_id: Annotated[int, typer.Argument()],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing until it ends")
    ] = False,
    tail: Annotated[
        int | None, typer.Option("--tail", "-n", min=0, help="Only the last N lines")
    ] = None,
    timestamps: Annotated[
        bool, typer.Option("--timestamps", "-t", help="Start each line with when it was written")
    ] = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Print a job's output (`-f` streams it until the job ends)."""
    with connect(server, token) as client:
        lines: list[Any] = []
        after = 0
        while True:
            page = client.logs(job_id, after)
            if tail is None:
                for line in page.lines:
                    _emit(line, timestamps)
            else:
                lines = [*lines, *page.lines][-tail:] if tail else []
            if not page.lines:
                break
            after = page.next_after
        for line in lines:
            _emit(line, timestamps)
        if after == 0:
            job = client.job(job_id)
            if job.started_at is None and job.state.value not in _FINAL:
                note(not_started_text(job))
        if follow:
            raise typer.Exit(_stream(client, job_id, after, timestamps))


def _task(text: str) -> tuple[int, int | None]:
    """`12` -> job 12; `12_3` -> task 3 of array 12."""
    head, sep, index = text.partition("_")
    try:
        return int(head), (int(index) if sep else None)
    except ValueError:
        raise typer.BadParameter(
            f"{text!r}: write a job id (14) or an array task (12_3)", param_hint="JOB_IDS"
        ) from None


def _targets(
    client: Client,
    given: list[str],
    arrays: list[int],
    states: list[str] | None,
    user: str | None,
    name: str | None,
) -> list[int | str]:
    """The ids to act on: those given, each task of the arrays, and the unfinished
    jobs the filters match. A task that does not exist stays as its text."""
    targets: list[int | str] = []
    tasks = [_task(t) for t in given]
    for job_id, index in tasks:
        if index is None:
            targets.append(job_id)
    wanted_arrays = {*arrays, *(a for a, i in tasks if i is not None)}
    for array_id in sorted(wanted_arrays):
        members = _array_members(client, array_id)
        if array_id in arrays:
            targets += [j.id for j in members]
        for a, i in tasks:
            if a == array_id and i is not None:
                found = [j.id for j in members if j.array_index == i]
                targets += found or [f"{a}_{i}"]
    if states or user or name:
        active = states or ["pending", "assigned", "running", "preempting"]
        offset = 0
        while True:
            page = client.jobs(active, user, name, offset, 1000, order="asc")
            targets += [j.id for j in page.items]
            offset += len(page.items)
            if not page.items or offset >= page.total:
                break
    return list(dict.fromkeys(targets))


def _array_members(client: Client, array_id: int) -> list[JobPublic]:
    """The tasks of array `array_id` (its first job's id)."""
    members: list[JobPublic] = []
    offset = 0
    while True:
        page = client.jobs(None, None, None, offset, 1000, order="asc", array=array_id)
        members += page.items
        offset += len(page.items)
        if not page.items or offset >= page.total:
            return members


def cancel(
    job_ids: Annotated[
        list[str] | None, typer.Argument(help="Job ids (14) or array tasks (12_3)")
    ] = None,
    array: Annotated[
        list[int] | None, typer.Option("--array", help="Every task of this array (repeatable)")
    ] = None,
    state: StateOpt = None,
    user: UserOpt = None,
    name: NameOpt = None,
    mine: MineOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Cancel jobs (a running job is stopped); says what became of each.

    `cancel 14 15`, `cancel 12_3`, `cancel --array 12`, or every unfinished job
    a filter matches: `cancel --mine`, `--user U`, `--name N`, `--state pending`."""
    from schedulearn.cli.client import ApiError

    if not (job_ids or array or state or user or name or mine):
        raise typer.BadParameter("name the jobs to cancel (ids, --array, or a filter like --mine)")
    results: list[dict[str, Any]] = []
    with connect(server, token) as client:
        who = _who(client, mine, user)
        targets = _targets(client, job_ids or [], array or [], state, who, name)
        for target in targets:
            if isinstance(target, str):
                results.append({"id": target, "error": f"no array task {target}"})
                continue
            try:
                job = client.cancel(target)
            except ApiError as exc:
                results.append({"id": target, "error": exc.message})
                continue
            results.append({"id": target, "state": job.state.value})
    if as_json:
        dump(results)
    else:
        for r in results:
            if "error" in r:
                error(f"job {r['id']}: {r['error']}")
            else:
                print(f"job {r['id']}: {r['state']}")
        if not results:
            note("no job matched; nothing cancelled")
    if any("error" in r for r in results):
        raise typer.Exit(1)


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
        out.print(forecasts.preview_table(preview))
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
    ("show", show),
    ("logs", logs),
    ("cancel", cancel),
    ("policy", policy),
    ("whoami", whoami),
]


def register(app: typer.Typer) -> None:
    for name, fn in COMMANDS:
        app.command(name)(fn)
