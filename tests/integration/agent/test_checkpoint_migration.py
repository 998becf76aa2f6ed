"""Migration and live elastic resizing with real processes: the checkpoint
travels through the server to another agent, the job restarts at its new
size with the matching environment, and counters record what happened."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_support import AdminApi, ServerProc, StartAgent
from live_support import (
    messages,
    set_policy,
    start_server,
    train_command,
    wait_field,
    write_script,
)

from waiting import wait_until


@pytest.fixture
def server(agent_database_url: str, tmp_path: Path) -> Iterator[ServerProc]:
    proc = start_server(
        agent_database_url,
        tmp_path / "server.log",
        SCHEDULEARN_STOP_GRACE_SECONDS="10",
        SCHEDULEARN_CHECKPOINT_STORE_DIR=str(tmp_path / "server-checkpoints"),
        SCHEDULEARN_MIN_RESIZE_AGE_SECONDS="2",
    )
    try:
        yield proc
    finally:
        proc.kill()


@pytest.fixture
def api(server: ServerProc) -> Iterator[AdminApi]:
    client = AdminApi(server.url)
    try:
        yield client
    finally:
        client.close()


def _starts(api: AdminApi, job_id: int) -> list[str]:
    return [t["text"] for t in api.logs(job_id) if t["text"].startswith("start step=")]


def _field(pattern: str, line: str) -> str:
    """What `pattern`'s group matched in `line` (a start line prints every field)."""
    found = re.search(pattern, line)
    assert found is not None, (pattern, line)
    return found.group(1)


def _sizes(starts: list[str]) -> list[int]:
    """The GPU count of each run, in order, from its start lines."""
    return [int(_field(r"gpus=(\d+)", s)) for s in starts]


def test_a_moved_job_continues_on_another_agent(
    api: AdminApi, start_agent: StartAgent, tmp_path: Path
) -> None:
    script = write_script(tmp_path)
    start_agent("n1", gpus=2)
    start_agent("n2", gpus=2)
    wait_until(lambda: len(api.http.get("/nodes").json()["items"]) == 2, 30, "two nodes")
    job = api.submit(command=train_command(script, 50, 0.1), gpus=2, preemptible=True)
    running = api.wait_state(job, ["running"], timeout=30)
    source = next(iter(running["placement"]))
    target = "n2" if source == "n1" else "n1"
    wait_until(lambda: (p := api.job(job)["progress"]) and p["step"] >= 5, 30, "step 5")

    refused = api.http.post(f"/jobs/{job}/move", json={"placement": {target: [0, 1, 2]}})
    assert refused.status_code == 400, refused.text  # n2 has no GPU 2

    moved = api.http.post(f"/jobs/{job}/move", json={"placement": {target: [0, 1]}})
    assert moved.status_code == 200, moved.text
    assert moved.json()["state"] == "preempting"
    done = api.wait_state(job, ["succeeded"], timeout=120)
    assert done["migrations"] == 1 and done["preemptions"] == 0 and done["resizes"] == 0
    assert done["placement"] == {target: [0, 1]}
    history = messages(api, job)
    assert f"migrating from {source}:0,1 to {target}:0,1" in history, history
    assert "checkpoint of attempt 1 saved on the server" in history, history
    starts = _starts(api, job)
    stopped = [t["text"] for t in api.logs(job) if t["text"].startswith("stopping at")]
    assert len(starts) == 2 and len(stopped) == 1
    assert starts[1].startswith(f"start step={stopped[0].split('=')[1]} ")
    assert any(t["text"] == "done step=50" for t in api.logs(job))


def test_a_job_not_preemptible_cannot_be_moved(
    api: AdminApi, start_agent: StartAgent, tmp_path: Path
) -> None:
    start_agent("n1", gpus=2)
    job = api.submit(command="sleep 30", gpus=1)
    api.wait_state(job, ["running"], timeout=30)
    r = api.http.post(f"/jobs/{job}/move", json={"placement": {"n1": [1]}})
    assert r.status_code == 400 and "not preemptible" in r.json()["error"]
    assert api.job(job)["state"] == "running"
    api.cancel(job)


def test_elastic_fifo_grows_and_shrinks_a_job_through_checkpoints(
    api: AdminApi, start_agent: StartAgent, tmp_path: Path
) -> None:
    script = write_script(tmp_path)
    # min_age comes from SCHEDULEARN_MIN_RESIZE_AGE_SECONDS=2 (the spec sets none).
    set_policy(api, "elastic-fifo")
    start_agent("n1", gpus=3)
    job = api.submit(
        command=train_command(script, 400, 0.1), min_gpus=1, max_gpus=3, preemptible=True
    )
    # Alone on the node, it grows to its maximum once it is old enough.
    try:
        wait_field(api, job, "resizes", 1, timeout=90)
    except AssertionError:
        raise AssertionError(messages(api, job)) from None
    big = api.wait_state(job, ["running"], timeout=60)
    assert sum(len(g) for g in big["placement"].values()) == 3
    wait_until(lambda: any("gpus=3" in s for s in _starts(api, job)), 30, "a start at 3 GPUs")
    # A newcomer that needs 2 GPUs makes it shrink back to 1.
    newcomer = api.submit(command="sleep 2", gpus=2)
    api.wait_state(newcomer, ["running"], timeout=90)
    shrunk = api.job(job)
    assert shrunk["resizes"] == 2, messages(api, job)

    def shrank(sizes: list[int]) -> bool:
        return 3 in sizes and 1 in sizes[sizes.index(3) + 1 :]

    wait_until(lambda: shrank(_sizes(_starts(api, job))), 60, "a restart at 1 after the one at 3")
    starts = _starts(api, job)
    # The first run, at 1 GPU, may be grown before its process printed a line:
    # on a loaded host Python can take the whole min_age (2 s) to start. It
    # then did no step, and the run at 3 GPUs starts at step 0.
    sizes = _sizes(starts)
    if sizes[:1] == [3]:
        sizes.insert(0, 1)  # that first run printed nothing
    assert sizes[:3] == [1, 3, 1], starts
    for s, n in zip(starts, _sizes(starts), strict=True):
        cuda = _field(r"cuda=(\S*)", s)
        assert len(cuda.split(",")) == n and f"world={n}" in s, s
    # Each restart resumed where the last one stopped.
    steps = [int(_field(r"step=(\d+)", s)) for s in starts]
    assert steps == sorted(steps) and steps[-1] > 0, starts
    history = messages(api, job)
    assert "resizing from 1 to 3 GPUs" in history and "resizing from 3 to 1 GPUs" in history
    api.cancel(job)


def test_defrag_moves_a_job_so_a_newcomer_gets_one_node(
    api: AdminApi, start_agent: StartAgent, tmp_path: Path
) -> None:
    script = write_script(tmp_path)
    set_policy(api, "defrag")  # min_age: SCHEDULEARN_MIN_RESIZE_AGE_SECONDS=2
    start_agent("n1", gpus=2)
    wait_until(lambda: len(api.http.get("/nodes").json()["items"]) == 1, 30, "n1")
    mover = api.submit(command=train_command(script, 80, 0.1), gpus=1, preemptible=True)
    filler = api.submit(command="sleep 6", gpus=1)
    assert api.wait_state(mover, ["running"], timeout=30)["placement"] == {"n1": [0]}
    assert api.wait_state(filler, ["running"], timeout=30)["placement"] == {"n1": [1]}
    start_agent("n2", gpus=2)
    steady = api.submit(command="sleep 60", gpus=1)  # not preemptible: never moved
    assert api.wait_state(steady, ["running"], timeout=30)["placement"] == {"n2": [0]}
    api.wait_state(filler, ["succeeded"], timeout=30)
    # One GPU free on each node: rather than spread it, defrag moves `mover`.
    wide = api.submit(command="sleep 1", gpus=2)
    done = api.wait_state(wide, ["succeeded"], timeout=90)
    assert done["placement"] == {"n1": [0, 1]}, messages(api, wide)
    finished = api.wait_state(mover, ["succeeded"], timeout=120)
    assert finished["migrations"] == 1 and finished["placement"] == {"n2": [1]}
    starts = _starts(api, mover)
    assert len(starts) == 2 and not starts[1].startswith("start step=0 "), starts
    assert api.job(steady)["migrations"] == 0
    api.cancel(steady)
