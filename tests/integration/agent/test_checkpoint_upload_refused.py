"""A checkpoint over the server's size limit (refused by the agent while it
packs, as the server would refuse it) is never lost silently: the job's
history says so, and the job resumes from the copy the agent kept when it
restarts on the same node."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_support import AdminApi, ServerProc, StartAgent
from live_support import messages, start_server, train_command, write_script

from waiting import wait_until


@pytest.fixture
def server(agent_database_url: str, tmp_path: Path) -> Iterator[ServerProc]:
    proc = start_server(
        agent_database_url,
        tmp_path / "server.log",
        SCHEDULEARN_STOP_GRACE_SECONDS="10",
        SCHEDULEARN_CHECKPOINT_STORE_DIR=str(tmp_path / "server-checkpoints"),
        SCHEDULEARN_CHECKPOINT_MAX_BYTES="4000",
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


def test_a_refused_upload_is_said_and_the_local_copy_is_used(
    api: AdminApi, start_agent: StartAgent, tmp_path: Path
) -> None:
    script = write_script(tmp_path)
    start_agent("n1", gpus=2)
    job = api.submit(command=train_command(script, 40, 0.1, pad=20_000), gpus=1, preemptible=True)
    api.wait_state(job, ["running"], timeout=30)
    wait_until(lambda: (p := api.job(job)["progress"]) and p["step"] >= 5, 30, "step 5")
    r = api.http.post(f"/jobs/{job}/move", json={"placement": {"n1": [1]}})
    assert r.status_code == 200, r.text
    done = api.wait_state(job, ["succeeded"], timeout=120)
    history = messages(api, job)
    # The agent knows the server's limit (the assignment names it) and stops
    # packing before its tar passes it: nothing that large is written or sent.
    said = "checkpoint upload failed: the checkpoint directory is over the server's limit"
    assert f"{said} of 4000 bytes" in history, history
    assert "SCHEDULEARN_CHECKPOINT_MAX_BYTES" in history
    assert done["checkpoint"] is None and done["migrations"] == 1
    starts = [t["text"] for t in api.logs(job) if t["text"].startswith("start step=")]
    assert len(starts) == 2 and not starts[1].startswith("start step=0 "), starts
