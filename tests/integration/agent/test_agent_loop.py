"""The agent loop against a real server process: jobs run and report, logs
arrive, cancel works, a restarted agent re-adopts its jobs (or stops the
ones the server wrote off), and no exit report is lost while the server
is down. Every process is real, on 127.0.0.1."""

from __future__ import annotations

import contextlib
import signal
import sqlite3
from pathlib import Path

import pytest
from agent_support import AdminApi, AgentProc, ServerProc, StartAgent, pid_alive

from schedulearn.agent.state import JobRecord
from waiting import wait_until


def registered(api: AdminApi, name: str, timeout: float = 20.0) -> None:
    wait_until(lambda: api.node(name), timeout, f"node {name} to register")


def settle(agent: AgentProc, api: AdminApi, job_id: int) -> None:
    """Wait until the agent has recorded the server's acknowledgement of the lines
    the server holds: a SIGKILL between the server's commit and that record
    makes the next agent send those lines again (with the same sequence numbers)."""
    lines = len(api.logs(job_id))

    def acked() -> int:
        uri = f"file:{agent.state_dir / 'agent.db'}?mode=ro"
        with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=5)) as db:
            rows = db.execute("SELECT record FROM runs WHERE job_id = ?", (job_id,)).fetchall()
        return max((JobRecord.from_json(text).next_seq for (text,) in rows), default=0)

    wait_until(
        acked, 10, f"agent {agent.name} to record {lines} lines acked", until=lambda n: n >= lines
    )


def line_starting(api: AdminApi, job_id: int, prefix: str) -> str | None:
    return next((t for t in api.texts(job_id) if t.startswith(prefix)), None)


def test_a_job_runs_and_its_output_and_exit_code_reach_the_server(
    api: AdminApi, start_agent: StartAgent
) -> None:
    start_agent("n1", gpus=4)
    registered(api, "n1")
    job_id = api.submit(
        name="hello",
        command="echo gpus=$CUDA_VISIBLE_DEVICES job=$SCHEDULEARN_JOB_ID; echo warn >&2; "
        "for i in 1 2 3; do echo line $i; done; exit 3",
        gpus=2,
    )
    job = api.wait_state(job_id, {"failed", "succeeded"})
    assert job["state"] == "failed"
    assert job["exit_code"] == 3
    logs = api.logs(job_id)
    stdout = [ln["text"] for ln in logs if ln["stream"] == "stdout"]
    assert stdout[0] == f"gpus={','.join(map(str, job['placement']['n1']))} job={job_id}"
    assert stdout[1:] == ["line 1", "line 2", "line 3"]
    assert [ln["text"] for ln in logs if ln["stream"] == "stderr"] == ["warn"]
    seqs = [ln["seq"] for ln in logs]
    assert seqs == sorted(set(seqs))


def test_output_and_progress_arrive_while_the_run_goes_on_and_after_the_last_look(
    api: AdminApi, start_agent: StartAgent, tmp_path: Path
) -> None:
    """The shipping task starts with the first line and the progress tail one
    interval after the start; what the run writes after their last look is
    sent when it ends, before its exit is reported."""
    start_agent("n1", gpus=1)
    registered(api, "n1")
    go = tmp_path / "go"

    def report(step: int) -> str:
        line = f'{{"at": %s, "step": {step}}}'
        return f'printf \'{line}\\n\' "$(date +%s)" >> "$SCHEDULEARN_PROGRESS_FILE"'

    job_id = api.submit(
        command=f"echo early; {report(1)}; while [ ! -e {go} ]; do sleep 0.05; done; "
        f"echo late; {report(2)}",
        gpus=1,
    )
    wait_until(lambda: api.texts(job_id), 20, "the first line while the job runs")
    wait_until(
        lambda: (api.job(job_id).get("progress") or {}).get("step"),
        20,
        "the first progress report while the job runs",
    )
    assert api.job(job_id)["state"] == "running"
    assert api.texts(job_id) == ["early"]
    go.touch()
    assert api.wait_state(job_id, {"succeeded", "failed"})["state"] == "succeeded"
    assert api.texts(job_id) == ["early", "late"]
    assert api.job(job_id)["progress"]["step"] == 2


def test_many_short_jobs_all_end_and_every_line_arrives_once(
    api: AdminApi, start_agent: StartAgent
) -> None:
    start_agent("n1", gpus=4)
    registered(api, "n1")
    ids = [
        api.submit(command=f"for i in $(seq 1 50); do echo {n}-$i; done", gpus=1) for n in range(12)
    ]
    for n, job_id in enumerate(ids):
        assert api.wait_state(job_id, {"succeeded", "failed"})["state"] == "succeeded"
        assert api.texts(job_id) == [f"{n}-{i}" for i in range(1, 51)]


def test_cancel_stops_a_running_job_with_sigterm(api: AdminApi, start_agent: StartAgent) -> None:
    start_agent("n1", gpus=2)
    registered(api, "n1")
    job_id = api.submit(
        command="trap 'echo bye; exit 0' TERM; echo pid $$; while true; do sleep 0.1; done",
        gpus=1,
    )
    api.wait_state(job_id, {"running"})
    line = wait_until(lambda: line_starting(api, job_id, "pid "), 10, "the job's pid line")
    pid = int(line.split()[1])
    assert pid_alive(pid)
    api.cancel(job_id)
    assert api.wait_state(job_id, {"cancelled", "failed", "succeeded"})["state"] == "cancelled"
    wait_until(lambda: "bye" in api.texts(job_id), 10, "the job's SIGTERM handler output")
    wait_until(lambda: not pid_alive(pid), 10, "the job's process to end")


def test_a_job_that_cannot_start_fails_with_the_reason(
    api: AdminApi, start_agent: StartAgent
) -> None:
    start_agent("n1", gpus=1)
    registered(api, "n1")
    job_id = api.submit(command=["no-such-program-xyz"], gpus=1)
    job = api.wait_state(job_id, {"failed", "pending"}, timeout=20)
    job = api.wait_state(job_id, {"failed"}, timeout=30)
    assert "'no-such-program-xyz' was not found on node 'n1'" in job["message"]


def test_a_restarted_agent_readopts_its_running_job(
    api: AdminApi, start_agent: StartAgent, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    agent = start_agent("n1", gpus=2)
    registered(api, "n1")
    job_id = api.submit(
        command=f"echo pid $$; echo before; while [ ! -e {gate} ]; do sleep 0.05; done; "
        "echo after; exit 0",
        gpus=2,
    )
    api.wait_state(job_id, {"running"})
    wait_until(lambda: "before" in api.texts(job_id), 10, "the first lines")
    line = line_starting(api, job_id, "pid ")
    assert line is not None, api.texts(job_id)
    pid = int(line.split()[1])

    settle(agent, api, job_id)
    agent.kill()  # SIGKILL: the agent cannot tidy up; the job must live on
    assert pid_alive(pid)
    again = start_agent("n1", gpus=2)
    wait_until(lambda: "re-adopted job" in again.log(), 15, "the agent to re-adopt the job")
    gate.touch()
    job = api.wait_state(job_id, {"succeeded", "failed", "pending", "lost"})
    assert job["state"] == "succeeded"
    assert job["attempt"] == 1
    assert api.texts(job_id) == [f"pid {pid}", "before", "after"]


def test_an_exit_while_the_agent_was_down_is_reported_by_the_next_agent(
    api: AdminApi, start_agent: StartAgent, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    ended = tmp_path / "ended"
    agent = start_agent("n1", gpus=1)
    registered(api, "n1")
    job_id = api.submit(
        command=f"echo started; while [ ! -e {gate} ]; do sleep 0.05; done; echo ending; "
        f"touch {ended}; exit 5",
        gpus=1,
    )
    api.wait_state(job_id, {"running"})
    wait_until(lambda: "started" in api.texts(job_id), 10, "the first line")
    settle(agent, api, job_id)
    agent.kill()
    gate.touch()
    # The job ends while no agent watches it (the shim records its exit code).
    wait_until(ended.exists, 10, "the job to end")
    start_agent("n1", gpus=1)
    job = api.wait_state(job_id, {"failed", "succeeded"})
    assert (job["state"], job["exit_code"], job["attempt"]) == ("failed", 5, 1)
    assert api.texts(job_id) == ["started", "ending"]


@pytest.mark.parametrize("server", [{"node_timeout": 3.0}], indirect=True)
def test_an_agent_back_too_late_stops_the_run_the_server_wrote_off(
    api: AdminApi, start_agent: StartAgent
) -> None:
    agent = start_agent("n1", gpus=1)
    registered(api, "n1")
    job_id = api.submit(command="echo pid $$; sleep 120", gpus=1)
    api.wait_state(job_id, {"running"})
    line = wait_until(lambda: line_starting(api, job_id, "pid "), 10, "the pid line")
    old_pid = int(line.split()[1])
    agent.kill()
    # The server's node timeout (3 s here) passes: the node is down, the job requeued.
    api.wait_state(job_id, {"pending", "lost"}, timeout=30)
    # The lease (shorter than the node timeout) lapsed first: its guard stopped the run.
    wait_until(lambda: not pid_alive(old_pid), 20, "the written-off run to be stopped")
    again = start_agent("n1", gpus=1)
    job = api.wait_state(job_id, {"running"}, timeout=20)
    assert job["attempt"] >= 2
    assert "wrote off job" in again.log()


@pytest.mark.parametrize("server", [{"node_timeout": 3.0}], indirect=True)
def test_an_agent_silent_too_long_registers_again_and_stops_the_written_off_run(
    api: AdminApi, start_agent: StartAgent
) -> None:
    agent = start_agent("n1", gpus=1)
    registered(api, "n1")
    job_id = api.submit(command="echo pid $$; sleep 120", gpus=1)
    api.wait_state(job_id, {"running"})
    line = wait_until(lambda: line_starting(api, job_id, "pid "), 10, "the pid line")
    old_pid = int(line.split()[1])
    assert agent.popen is not None
    agent.popen.send_signal(signal.SIGSTOP)  # a hung agent: no heartbeats
    try:
        api.wait_state(job_id, {"pending", "lost"}, timeout=30)
    finally:
        agent.popen.send_signal(signal.SIGCONT)
    wait_until(lambda: not pid_alive(old_pid), 30, "the written-off run to be stopped")
    job = api.wait_state(job_id, {"running"}, timeout=30)
    assert job["attempt"] >= 2
    # Thawed, it finds its lease lapsed and registers again before anything else.
    assert "registered again after the lease lapsed" in agent.log()


def test_no_exit_report_is_lost_while_the_server_is_down(
    api: AdminApi, server: ServerProc, start_agent: StartAgent, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    ended = tmp_path / "ended"
    start_agent("n1", gpus=1)
    registered(api, "n1")
    job_id = api.submit(
        command=f"echo up; while [ ! -e {gate} ]; do sleep 0.05; done; echo down; "
        f"touch {ended}; exit 0",
        gpus=1,
    )
    api.wait_state(job_id, {"running"})
    wait_until(lambda: "up" in api.texts(job_id), 10, "the first line")
    server.kill()
    gate.touch()
    wait_until(ended.exists, 10, "the job to end")
    server.start_ready()
    job = api.wait_state(job_id, {"succeeded", "failed"}, timeout=40)
    assert (job["state"], job["exit_code"]) == ("succeeded", 0)
    assert api.texts(job_id) == ["up", "down"]


def test_an_agent_with_a_wrong_token_exits_and_says_what_to_change(
    server: ServerProc, start_agent: StartAgent
) -> None:
    agent = start_agent("n1", gpus=1, token="not-the-token")
    assert agent.popen is not None
    assert agent.popen.wait(30) == 2
    assert "refused this node's credential (HTTP 401" in agent.log()
    assert "schedulearn node add NAME" in agent.log()
    # A secret on argv is readable by every local user: it works, with a warning.
    assert "--token puts a secret on the command line" in agent.log()


def test_sigterm_leaves_jobs_running_unless_told_to_stop_them(
    api: AdminApi, start_agent: StartAgent
) -> None:
    agent = start_agent("n1", gpus=2)
    registered(api, "n1")
    job_id = api.submit(command="echo pid $$; sleep 120", gpus=1)
    api.wait_state(job_id, {"running"})
    line = wait_until(lambda: line_starting(api, job_id, "pid "), 10, "the pid line")
    pid = int(line.split()[1])
    assert agent.stop() == 0
    assert pid_alive(pid)  # a plain agent exit (an upgrade, say) keeps the job

    stopper = start_agent("n1", gpus=2, extra=("--stop-jobs-on-exit",))
    wait_until(lambda: "re-adopted job" in stopper.log(), 15, "the re-adoption")
    assert stopper.popen is not None
    stopper.popen.send_signal(signal.SIGTERM)
    assert stopper.popen.wait(30) == 0
    wait_until(lambda: not pid_alive(pid), 10, "the job to be stopped")
    # Its SIGTERM exit was reported before the agent went away.
    job = api.wait_state(job_id, {"failed", "succeeded", "cancelled"}, timeout=20)
    assert job["exit_code"] == 128 + signal.SIGTERM


@pytest.mark.docker
def test_a_container_job_runs_is_cancelled_and_is_readopted_after_a_restart(
    api: AdminApi, start_agent: StartAgent, docker_image: str, tmp_path: Path
) -> None:
    extra = ("--executor", "docker", "--executor", "subprocess")
    agent = start_agent("d1", gpus=2, extra=extra)
    registered(api, "d1")
    # A checkpoint file is the gate: the container sees its checkpoint dir only.
    job_id = api.submit(
        image=docker_image,
        command="echo in container gpus=$NVIDIA_VISIBLE_DEVICES; "
        "while [ ! -e $SCHEDULEARN_CHECKPOINT_DIR/go ]; do sleep 0.1; done; echo finished",
        gpus=1,
    )
    api.wait_state(job_id, {"running"})
    first = wait_until(
        lambda: line_starting(api, job_id, "in container"), 20, "the container's first line"
    )
    settle(agent, api, job_id)
    agent.kill()
    again = start_agent("d1", gpus=2, extra=extra)
    wait_until(lambda: "re-adopted job" in again.log(), 20, "the container's re-adoption")
    (checkpoints,) = (tmp_path / "state-d1" / "checkpoints").glob(str(job_id))
    (checkpoints / "go").touch()
    job = api.wait_state(job_id, {"succeeded", "failed"}, timeout=40)
    assert (job["state"], job["attempt"]) == ("succeeded", 1)
    assert api.texts(job_id) == [first, "finished"]

    doomed = api.submit(image=docker_image, command="echo ready; sleep 300", gpus=1)
    wait_until(lambda: "ready" in api.texts(doomed), 20, "the second container")
    api.cancel(doomed)
    assert api.wait_state(doomed, {"cancelled", "failed"}, timeout=30)["state"] == "cancelled"
