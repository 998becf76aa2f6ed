"""The agent's credential never reaches a job (issue 11): a real agent process
holding its node credential in its environment (SCHEDULEARN_AGENT_TOKEN)
runs a job that prints its whole environment, under the process executor and
in a container on a real Docker engine; the credential is in neither, nor on
the agent's command line."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from agent_support import AdminApi, ServerProc, StartAgent, join_token

from waiting import wait_until


def _credential(server: ServerProc, node: str) -> str:
    joined = httpx.post(
        f"{server.url}/api/v1/agent/join", json={"join_token": join_token(server.url, node)}
    )
    assert joined.status_code == 200, joined.text
    return str(joined.json()["credential"])


def _env_of_a_job(
    server: ServerProc, api: AdminApi, start_agent: StartAgent, node: str, **spec: object
) -> tuple[str, list[str], bytes]:
    secret = _credential(server, node)
    extra = ("--executor", "docker") if spec.get("image") else ()
    agent = start_agent(node, gpus=1, extra=extra, env={"SCHEDULEARN_AGENT_TOKEN": secret})
    wait_until(lambda: api.node(node), 30, f"{node} to register")
    assert agent.popen is not None
    argv = Path(f"/proc/{agent.popen.pid}/cmdline").read_bytes()
    job_id = api.submit(gpus=1, **spec)
    done = api.wait_state(job_id, {"succeeded", "failed"}, timeout=90)
    assert done["state"] == "succeeded", done
    return secret, api.texts(job_id), argv


def test_a_process_job_sees_no_agent_credential(
    server: ServerProc, api: AdminApi, start_agent: StartAgent
) -> None:
    secret, lines, argv = _env_of_a_job(server, api, start_agent, "p1", command="env")
    env = dict(line.rstrip("\n").split("=", 1) for line in lines if "=" in line)
    assert env["SCHEDULEARN_JOB_ID"]  # the job's own variables are there: it printed its env
    assert not any(secret in line for line in lines)
    assert not [k for k in env if k in ("SCHEDULEARN_AGENT_TOKEN", "SCHEDULEARN_JOIN_TOKEN")]
    assert secret.encode() not in argv


@pytest.mark.docker
def test_a_container_job_sees_no_agent_credential(
    server: ServerProc, api: AdminApi, start_agent: StartAgent, docker_image: str
) -> None:
    secret, lines, argv = _env_of_a_job(
        server, api, start_agent, "c1", command="env", image=docker_image
    )
    env = dict(line.rstrip("\n").split("=", 1) for line in lines if "=" in line)
    assert env["SCHEDULEARN_JOB_ID"]
    assert not any(secret in line for line in lines)
    assert "SCHEDULEARN_AGENT_TOKEN" not in env
    assert secret.encode() not in argv
