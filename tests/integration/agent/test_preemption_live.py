"""Live preemption with real server and agent processes: a preempted job
saves at a step boundary, its checkpoint travels through the server, and
it resumes where it stopped on another node; jobs not marked preemptible
are never touched."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_support import AdminApi, ServerProc, StartAgent
from live_support import (
    messages,
    set_policy,
    start_server,
    train_command,
    write_script,
)

from waiting import wait_until


@pytest.fixture
def live_server(agent_database_url: str, tmp_path: Path) -> Iterator[ServerProc]:
    proc = start_server(
        agent_database_url,
        tmp_path / "server.log",
        SCHEDULEARN_STOP_GRACE_SECONDS="10",
        SCHEDULEARN_CHECKPOINT_STORE_DIR=str(tmp_path / "server-checkpoints"),
    )
    yield proc
    proc.kill()


@pytest.fixture
def live_api(live_server: ServerProc) -> Iterator[AdminApi]:
    client = AdminApi(live_server.url)
    yield client
    client.close()


@pytest.fixture
def server(live_server: ServerProc) -> ServerProc:
    """`start_agent` (from conftest) connects its agents to this test's server."""
    return live_server


def test_preempted_job_resumes_from_its_checkpoint_on_another_node(
    live_api: AdminApi, start_agent: StartAgent, tmp_path: Path
) -> None:
    api = live_api
    script = write_script(tmp_path)
    set_policy(api, "srtf")
    start_agent("n1", gpus=1)
    long_job = api.submit(
        name="long",
        command=train_command(script, 60, 0.1),
        gpus=1,
        preemptible=True,
        estimated_duration=3600,
    )
    api.wait_state(long_job, ["running"], timeout=30)
    # Let it make some progress (and report it) before the short job arrives.
    wait_until(
        lambda: (p := api.job(long_job)["progress"]) and p["step"] >= 5,
        30,
        "the long job to report step 5",
    )
    short = api.submit(name="short", command="sleep 8", gpus=1, estimated_duration=5)
    back = api.wait_state(long_job, ["pending"], timeout=30)
    assert back["preemptions"] == 1
    history = messages(api, long_job)
    assert "checkpoint of attempt 1 saved on the server" in history, history
    assert back["checkpoint"] is not None and back["checkpoint"]["attempt"] == 1
    api.wait_state(short, ["running"], timeout=30)
    # n1 is busy with the short job: the long job resumes on a new node.
    start_agent("n2", gpus=1)
    done = api.wait_state(long_job, ["succeeded"], timeout=90)
    assert done["placement"] == {"n2": [0]}
    assert done["progress"]["step"] == 60
    texts = [line["text"] for line in api.logs(long_job)]
    stopped = [t for t in texts if t.startswith("stopping at step=")]
    starts = [t for t in texts if t.startswith("start step=")]
    assert len(stopped) == 1 and len(starts) == 2, texts
    stopped_at = int(stopped[0].split("=")[1])
    # The second attempt began exactly where the first one stopped.
    assert starts[1].startswith(f"start step={stopped_at} "), texts
    assert stopped_at >= 5
    assert "done step=60" in texts
    assert api.wait_state(short, ["succeeded"], timeout=30)


def test_a_job_not_preemptible_is_never_preempted(
    live_api: AdminApi, start_agent: StartAgent, tmp_path: Path
) -> None:
    api = live_api
    set_policy(api, "srtf")
    start_agent("n1", gpus=1)
    steady = api.submit(name="steady", command="sleep 6", gpus=1, estimated_duration=3600)
    api.wait_state(steady, ["running"], timeout=30)
    short = api.submit(name="short", command="true", gpus=1, estimated_duration=1)
    done = api.wait_state(steady, ["succeeded"], timeout=60)
    assert done["preemptions"] == 0 and done["attempt"] == 1
    assert "preempting" not in messages(api, steady)
    api.wait_state(short, ["succeeded"], timeout=30)


def test_timeslice_jobs_take_turns_and_both_finish_every_step_once(
    live_api: AdminApi, start_agent: StartAgent, tmp_path: Path
) -> None:
    api = live_api
    script = write_script(tmp_path)
    set_policy(api, "timeslice:quantum=3")
    start_agent("n1", gpus=1)
    first = api.submit(command=train_command(script, 60, 0.1), gpus=1, preemptible=True)
    api.wait_state(first, ["running"], timeout=30)
    second = api.submit(command=train_command(script, 60, 0.1), gpus=1, preemptible=True)
    for job_id in (first, second):
        done = api.wait_state(job_id, ["succeeded"], timeout=180)
        assert done["preemptions"] >= 1, messages(api, job_id)
        texts = [line["text"] for line in api.logs(job_id)]
        # The script asserts that no step was skipped or repeated across resumes.
        assert "done step=60" in texts, texts
