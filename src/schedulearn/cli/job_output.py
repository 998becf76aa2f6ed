"""How a job reads for a person: `show`, `logs`, and the lines `submit
--follow/--wait` print; the text helpers `jobs` shares (command, array task).

Owns the human `show` (a heading, then one `field  value` line each, no
Python lists or dicts), what `logs` says about a job that has not started,
and the exit code a followed or awaited job gives the command.
"""

from __future__ import annotations

import sys
import time
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
    note,
    span,
    until,
)

if TYPE_CHECKING:
    from schedulearn.cli.client import Client
    from schedulearn.cli.replies import JobFacts
    from schedulearn.protocol import JobPublic, ProgressReport

# Not "lost": a lost job is on its way back to the queue (or to failed).
FINAL = ("succeeded", "failed", "cancelled", "timeout")


def placement_text(job: JobFacts) -> str:
    if not job.placement:
        return "-"
    return " ".join(f"{n}:{','.join(map(str, g)) or '-'}" for n, g in job.placement.items())


def hidden_note(job: JobFacts) -> str:
    """Why a job's details are not shown (the server sent them as null)."""
    return f"job {job.id} belongs to {job.user}; only its owner and admins see its details"


def command_text(job: JobFacts) -> str:
    """The whole command as one line ('(hidden)' when the caller may not see it)."""
    if job.command is None:
        return "(hidden)" if job.details_hidden else "-"
    return job.command if isinstance(job.command, str) else " ".join(job.command)


def array_text(job: JobFacts) -> str:
    """`ARRAYID_INDEX` for a task of a job array (Slurm's form), else '-'."""
    if job.array_id is None:
        return "-"
    return f"{job.array_id}_{job.array_index}"


def exit_code(job: JobPublic) -> int:
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


def say_why_it_waits(client: Client, job_id: int, pause: float = 0.5) -> None:
    """While the job is pending, say why on stderr (at once, and again whenever the
    reason changes); return once it has left the queue. A job held back by its
    queue would otherwise leave `submit --follow` silent for as long as it waits."""
    said: str | None = None
    while True:
        job = client.job(job_id)
        if job.state.value != "pending":
            return
        if job.waiting_reason != said:
            note(not_started_text(job))
            said = job.waiting_reason
        time.sleep(pause)
        pause = min(pause * 1.5, 5.0)


def stream(client: Client, job_id: int, after: int = 0, timestamps: bool = False) -> int:
    """Print the job's output as it comes; the exit code its command ends with."""
    from schedulearn.protocol import JobPublic

    say_why_it_waits(client, job_id)
    for item in client.follow(job_id, after):
        if isinstance(item, JobPublic):
            note(_ended_text(item))
            return exit_code(item)
        _emit(item, timestamps)
    return 1


def wait(client: Client, job_id: int) -> int:
    say_why_it_waits(client, job_id)
    pause = 0.2
    while True:
        job = client.job(job_id)
        if job.state.value in FINAL:
            note(_ended_text(job))
            return exit_code(job)
        time.sleep(pause)
        pause = min(pause * 1.5, 2.0)


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
    if state.startswith("pending") and job.predicted_start_at is None:
        # Said rather than left out: no forecast places its start yet.
        lines.append(f"  {'predicted start':<20} unknown: no forecast places it yet")
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
        elif key in ("estimated_duration", "time_limit", "time_left") and isinstance(
            value, float | int
        ):
            text = span(value)
        elif key == "memory_gb":
            key, text = "memory", f"{value:g} GB"
        elif key == "placement" and job.placement:
            text = placement_text(job)
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
    with connect(server, token) as client:
        if full:
            for chunk in client.full_log(job_id):
                sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
            return
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
            # A pending job followed is told why it waits by `stream` itself.
            said = follow and job.state.value == "pending"
            if job.started_at is None and job.state.value not in FINAL and not said:
                note(not_started_text(job))
        if follow:
            raise typer.Exit(stream(client, job_id, after, timestamps))


def register(app: typer.Typer) -> None:
    app.command("show")(show)
    app.command("logs")(logs)
