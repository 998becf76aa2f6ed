"""Stops are graceful for string commands too (issue 14 item 3).

A string command runs under `/bin/sh -c`; before the fix the shell died at
SIGTERM, the run ended, and the agent killed the program before it saved.
Here, with real server and agent processes:

- the digits example submitted as a YAML job file whose command is a shell
  string (a compound `&&` list, as job files and the web form write them)
  is moved to the other agent mid-epoch: its log says "stop requested:
  saved epoch E step S", and it resumes on the other agent from that very
  step, samples into the epoch; then it is cancelled mid-epoch and says
  "stop requested" again; the shell ran nothing after the program;
- a string command in a container on the real Docker engine: the program
  the shell runs gets the SIGTERM (Docker's init hands it to the group),
  says so, and the shell runs nothing after it.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_cluster import Cluster
from live_examples import (
    RESUMED,
    STOPPED_ANYWHERE,
    job,
    live_cluster,
    move_to_the_other_agent_mid_epoch,
)

from dependencies import Dependency, missing
from schedulearn.cli.localcluster import AgentProcess
from waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
ENGINE_SCRIPT = REPO / "tests" / "integration" / "agent" / "docker_engine.sh"
TEST_IMAGE = "schedulearn-test-busybox:latest"  # what docker_engine.sh builds

DIGITS_YAML = f"""\
name: digits
command: >-
  cd {REPO} && python examples/train_digits.py --epochs 30 --sleep-per-step 0.02
  && echo after-the-program
gpus: 1
preemptible: true
env:
  PYTHONUNBUFFERED: "1"
"""


def test_a_yaml_string_command_stops_gracefully_and_resumes_mid_epoch(tmp_path: Path) -> None:
    with live_cluster(tmp_path, {"a": 1, "b": 1}) as cluster:
        with cluster.client() as c:
            (job_id,) = c.submit_yaml(DIGITS_YAML).ids
        assert isinstance(job(cluster, job_id).command, str)
        move_to_the_other_agent_mid_epoch(cluster, job_id, timeout=120)

        def resumed() -> re.Match[str] | None:
            return RESUMED.search(cluster.log_text(job_id))

        found = wait_until(resumed, 120, "the job to resume on the other agent")
        text = cluster.log_text(job_id)
        stopped = STOPPED_ANYWHERE.search(text)
        assert stopped, text
        if stopped[2]:
            # It resumed where it saved: the same epoch and step, samples into the epoch.
            assert (found[1], found[2]) == (stopped[1], stopped[2]), text
            assert int(found[3]) > 0, text
        else:
            # The stop came as an epoch ended (a loaded machine's timing: the
            # script saw it only after its epoch's report): it resumed at the
            # start of the next epoch, from the state saved with that report.
            assert found[1] == stopped[1] and int(found[3]) == 0, text

        # Cancelled mid-epoch on its new node: it saves and says so again.
        steps = int(found[2])
        wait_until(
            lambda: (p := job(cluster, job_id).progress) and (p.step or 0) > steps,
            120,
            "progress after the resume",
        )
        with cluster.client() as c:
            c.cancel(job_id)
        cluster.wait_state(job_id, {"cancelled"})
        wait_until(
            lambda: len(STOPPED_ANYWHERE.findall(cluster.log_text(job_id))) == 2,
            30,
            "the second 'stop requested' line",
        )
        assert "after-the-program" not in cluster.log_text(job_id)


@pytest.fixture
def docker_cluster(tmp_path: Path) -> Iterator[Cluster]:
    if subprocess.run(["bash", str(ENGINE_SCRIPT)], capture_output=True, timeout=600).returncode:
        missing(Dependency.DOCKER, f"{ENGINE_SCRIPT} could not start the engine or build the image")
    cluster = Cluster(tmp_path)
    try:
        cluster.start()
        agent = AgentProcess(
            cluster.server.url,
            "",
            "d1",
            1,
            tmp_path / "agent-d1.log",
            tmp_path / "state-d1",
            extra=["--executor", "docker", "--stop-jobs-on-exit"],
        )
        agent.enroll(cluster.server)
        agent.start()
        cluster.agents["d1"] = agent
        cluster.wait_nodes(1)
        yield cluster
    finally:
        cluster.stop()


@pytest.mark.docker
def test_a_string_command_in_a_container_passes_the_stop_to_its_program(
    docker_cluster: Cluster,
) -> None:
    program = "trap 'echo stop requested; exit 143' TERM; echo started; while :; do sleep 0.2; done"
    command = f'sh -c "{program}"; echo after-the-program'
    with docker_cluster.client() as c:
        (job_id,) = c.submit_yaml(f"command: |\n  {command}\nimage: {TEST_IMAGE}\ngpus: 1\n").ids
    docker_cluster.wait_state(job_id, {"running"}, timeout=60)
    wait_until(lambda: "started" in docker_cluster.log_text(job_id), 60, "the program to start")
    with docker_cluster.client() as c:
        c.cancel(job_id)
    docker_cluster.wait_state(job_id, {"cancelled"})
    wait_until(
        lambda: "stop requested" in docker_cluster.log_text(job_id),
        30,
        "the program to say it was asked to stop",
    )
    assert "after-the-program" not in docker_cluster.log_text(job_id)
