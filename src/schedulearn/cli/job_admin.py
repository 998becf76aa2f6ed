"""Commands that change a job after submission: cancel, hold, release, update,
resubmit.

`cancel` takes ids, array tasks (`12_3`), whole arrays (`--array 12`) and
filters (`--mine`, `--user`, `--name`, `--state`), and reports what became
of each job.

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

from schedulearn.cli.common import JsonOpt, ServerOpt, Servers, TokenOpt, connect, dump, error, note
from schedulearn.cli.jobs import MineOpt, NameOpt, StateOpt, UserOpt, who_is

if TYPE_CHECKING:
    from schedulearn.cli.client import Client
    from schedulearn.protocol import JobPublic

IdsArg = Annotated[list[int], typer.Argument(help="Job ids")]


def _each(
    ids: list[int],
    server: Servers,
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
    from schedulearn.protocol import spec_again

    with connect(server, token) as client:
        old = client.job(job_id)
        if old.details_hidden or old.command is None:
            error(f"job {job_id} belongs to {old.user}; you may resubmit only your own jobs")
            raise typer.Exit(1)
        reply = client.submit(spec_again(old))
    if as_json:
        dump(reply)
        return
    print(f"submitted job {reply.ids[0]} (again: job {job_id})")
    if old.secret_env_keys:
        note(f"its secret env ({', '.join(old.secret_env_keys)}) is not copied; pass --secret-env")


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
        who = who_is(client, mine, user)
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


COMMANDS: list[tuple[str, Callable[..., None]]] = [
    ("cancel", cancel),
    ("hold", hold),
    ("release", release),
    ("update", update),
    ("resubmit", resubmit),
]


def register(app: typer.Typer) -> None:
    for name, fn in COMMANDS:
        app.command(name)(fn)
