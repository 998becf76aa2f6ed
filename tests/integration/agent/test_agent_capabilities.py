"""Node capabilities end to end: two real agent processes against a real server.

One agent offers host processes only and is the best fit for a 1-GPU job;
the other also offers Docker (a real engine) and carries the label `ib`.
An image job must run on the Docker node (before capabilities reached the
core it went to the plain node, whose agent then failed it), a job with
`--constraint ib` on the labelled node, and a plain job still on the plain
node, which shows the rule filters rather than steers everything one way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
from agent_support import ADMIN_TOKEN, AdminApi, ServerProc, StartAgent

from waiting import wait_until


def registered(api: AdminApi, name: str) -> dict[str, Any]:
    node: dict[str, Any] = wait_until(lambda: api.node(name), 20, f"node {name} to register")
    return node


def cli(server_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`schedulearn ARGS` as a user runs it, against the test server."""
    env = {
        **os.environ,
        "SCHEDULEARN_SERVER": server_url,
        "SCHEDULEARN_TOKEN": ADMIN_TOKEN,
        "COLUMNS": "300",  # one table row, one error line
    }
    return subprocess.run(
        [sys.executable, "-m", "schedulearn.cli.main", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


@pytest.mark.docker
def test_image_and_constrained_jobs_go_only_to_nodes_that_can_run_them(
    api: AdminApi, start_agent: StartAgent, docker_image: str, server: ServerProc
) -> None:
    start_agent("plain", gpus=1)  # told nothing: host processes only, no label
    docker_node = ("--executor", "docker", "--executor", "subprocess", "--label", "ib")
    start_agent("box", gpus=2, extra=docker_node)
    plain, box = registered(api, "plain"), registered(api, "box")
    assert plain["capabilities"] == {
        "executors": ["process"],
        "container_runtime": "",
        "labels": [],
        "accounts": None,  # runs every job as the agent's own user (--run-jobs-as agent)
    }
    assert box["capabilities"]["executors"] == ["container", "process"]
    assert box["capabilities"]["container_runtime"].startswith("docker ")
    assert box["capabilities"]["labels"] == ["ib"]

    # The plain node holds exactly one GPU, so it is the best fit for each
    # 1-GPU job below: only the capability rule sends a job elsewhere.
    image_job = api.submit(image=docker_image, command="echo in a container", gpus=1)
    done = api.wait_state(image_job, {"succeeded", "failed"}, timeout=60)
    assert (done["state"], done["placement"]) == ("succeeded", {"box": [0]}), done
    assert api.texts(image_job) == ["in a container"]

    url = server.url
    submitted = cli(url, "submit", "--constraint", "ib", "--json", "--", "echo on ib")
    assert submitted.returncode == 0, submitted.stderr
    constrained = int(json.loads(submitted.stdout)["ids"][0])
    done = api.wait_state(constrained, {"succeeded", "failed"}, timeout=30)
    assert (done["state"], done["placement"], done["constraints"]) == (
        "succeeded",
        {"box": [0]},
        ["ib"],
    ), done

    anywhere = api.submit(command="echo anywhere", gpus=1)
    done = api.wait_state(anywhere, {"succeeded", "failed"}, timeout=30)
    assert (done["state"], done["placement"]) == ("succeeded", {"plain": [0]}), done

    # No node has the label: refused at submission, naming the labels there are.
    refused = cli(url, "submit", "--constraint", "a100-80g", "--", "echo never")
    assert refused.returncode != 0
    assert "no node has label 'a100-80g'; labels present: ib" in refused.stdout + refused.stderr

    listing = cli(url, "nodes")
    assert listing.returncode == 0, listing.stderr
    rows = [line.split() for line in listing.stdout.splitlines()]
    box_row = " ".join(next(row for row in rows if row[:1] == ["box"]))
    assert "container" in box_row and "docker" in box_row and "ib" in box_row
