"""Commands that change a job after submission: hold, release, update, resubmit.

`hold` keeps a pending job from starting (it keeps its place in the queue)
until `release`; `update ID --priority N` changes its priority within the
caller's range; `resubmit ID` submits a new job with the same spec (its
secret values excepted: they are never sent back, so give them again with
`--secret-env`). Each reports every id it was given, and exits 1 if any failed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from schedulearn.cli.common import JsonOpt, ServerOpt, TokenOpt, connect, dump, error, note

if TYPE_CHECKING:
    from schedulearn.cli.client import Client
    from schedulearn.protocol import JobPublic

IdsArg = Annotated[list[int], typer.Argument(help="Job ids")]


def _each(
    ids: list[int],
    server: str | None,
    token: str | None,
    as_json: bool,
    act: Callable[[Client, int], JobPublic],
    done: Callable[[JobPublic], str],
) -> None:
    from schedulearn.cli.client import ApiError

    results: list[dict[str, Any]] = []
    with connect(server, token) as client:
        for job_id in ids:
            try:
                job = act(client, job_id)
            except ApiError as exc:
                results.append({"id": job_id, "error": exc.message})
                continue
            results.append({"id": job_id, "state": job.state.value, "text": done(job)})
    if as_json:
        dump([{k: v for k, v in r.items() if k != "text"} for r in results])
    else:
        for r in results:
            if "error" in r:
                error(f"job {r['id']}: {r['error']}")
            else:
                print(r["text"])
    if any("error" in r for r in results):
        raise typer.Exit(1)


def hold(
    job_ids: IdsArg, server: ServerOpt = None, token: TokenOpt = None, as_json: JsonOpt = False
) -> None:
    """Keep pending jobs from starting until `schedulearn release`."""
    _each(job_ids, server, token, as_json, lambda c, i: c.hold(i), lambda j: f"job {j.id}: held")


def release(
    job_ids: IdsArg, server: ServerOpt = None, token: TokenOpt = None, as_json: JsonOpt = False
) -> None:
    """Let held jobs start again."""
    _each(job_ids, server, token, as_json, lambda c, i: c.release(i), _released)


def _released(job: JobPublic) -> str:
    return f"job {job.id}: released"


def update(
    job_ids: IdsArg,
    priority: Annotated[int, typer.Option("--priority", help="The new priority")],
    server: ServerOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Change jobs' priority (within your range)."""
    from schedulearn.protocol import JobUpdate

    changes = JobUpdate(priority=priority)
    _each(
        job_ids,
        server,
        token,
        as_json,
        lambda c, i: c.update(i, changes),
        lambda j: f"job {j.id}: priority {j.priority}",
    )


def resubmit(
    job_id: Annotated[int, typer.Argument(help="The job to submit again")],
    server: ServerOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Submit a new job with the same spec as job ID (a finished one, typically)."""
    from schedulearn.protocol import JobSpec

    with connect(server, token) as client:
        old = client.job(job_id)
        if old.details_hidden or old.command is None:
            error(f"job {job_id} belongs to {old.user}; you may resubmit only your own jobs")
            raise typer.Exit(1)
        spec = JobSpec.model_validate(spec_of(old))
        reply = client.submit(spec)
    if as_json:
        dump(reply)
        return
    print(f"submitted job {reply.ids[0]} (again: job {job_id})")
    if old.secret_env_keys:
        note(f"its secret env ({', '.join(old.secret_env_keys)}) is not copied; pass --secret-env")


def spec_of(job: JobPublic) -> dict[str, Any]:
    """The spec fields of `job` that differ from a spec's defaults."""
    from schedulearn.protocol import JobSpec

    shown = job.model_dump(mode="json")
    spec: dict[str, Any] = {}
    for name, info in JobSpec.model_fields.items():
        if name in ("count", "array_start", "array_limit", "secret_env"):
            continue
        value = shown.get(name)
        if value is None or value == info.get_default(call_default_factory=True):
            continue
        spec[name] = value
    if job.memory_gb:
        spec["memory"] = f"{job.memory_gb:g}G"
    if job.estimated_duration:
        spec["estimated_duration"] = f"{job.estimated_duration:g}s"
    return spec


COMMANDS: list[tuple[str, Callable[..., None]]] = [
    ("hold", hold),
    ("release", release),
    ("update", update),
    ("resubmit", resubmit),
]


def register(app: typer.Typer) -> None:
    for name, fn in COMMANDS:
        app.command(name)(fn)
