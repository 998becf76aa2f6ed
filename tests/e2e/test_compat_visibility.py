"""The visibility model with the previous release's CLI and agent (protocol 1),
and those of protocol 2 (`test_compat.OLDER_CLIENTS`).

Protocol 1 and 2 clients refuse a null command or env; to one of them another
user's job comes with those fields empty (`protocol_history.NOT_NULL`), so
the old CLI still lists and shows it, with nothing of its details. A
protocol 1 or 2 agent knows no `secret_env`: it gets the secrets in `env`
(`protocol_history.FOLDED`), so the job still sees them.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import httpx
from e2e_cluster import ADMIN
from test_compat import (  # noqa: F401
    OldCli,
    _submitted,
    _wait,
    cluster,
    previous_protocol,
    previous_src,
)

from schedulearn.cli.client import Client
from schedulearn.cli.localcluster import AgentProcess, ServerProcess
from schedulearn.protocol import JobSpec

SECRET = "compat-s3cret-0b7e"


def _token(server: ServerProcess, user: str) -> str:
    reply = httpx.post(
        f"{server.url}/api/v1/tokens",
        json={"user": user, "role": "user"},
        headers={"Authorization": f"Bearer {ADMIN}"},
        # The test's first API call: it waits for the server's app to load,
        # which took over 10 s on a busy 2-core machine (a ReadTimeout in CI).
        timeout=60,
    )
    assert reply.status_code == 201, reply.text
    return str(reply.json()["token"])


def test_old_clients_see_hidden_details_as_empty_and_old_agents_get_secrets(
    cluster: tuple[ServerProcess, AgentProcess],  # noqa: F811
    previous_src: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    server, agent = cluster
    alice, bob = _token(server, "alice"), _token(server, "bob")
    spec = JobSpec(
        name="alices-secret-run",
        command='printf %s "$TOKEN" | sha256sum',
        gpus=1,
        env={"WANDB_API_KEY": "wandb-compat-3391"},
        secret_env={"TOKEN": SECRET},
    )
    with Client(server.url, alice) as client:
        job_id = client.submit(spec).ids[0]
    done = _wait(
        server,
        agent,
        lambda c: (j := c.job(job_id)).state in ("succeeded", "failed") and j,
        "the job on the previous release's agent to end",
    )
    assert done.state == "succeeded", done.message
    with Client(server.url, alice) as client:
        output = "".join(line.text for line in client.logs(job_id, 0).lines)
    assert hashlib.sha256(SECRET.encode()).hexdigest() in output

    old_bob = OldCli(previous_src, tmp_path, server.url)
    old_bob.env["SCHEDULEARN_TOKEN"] = bob
    listing = old_bob("jobs")
    assert "alices-secret-run" in listing and "sha256sum" not in listing
    shown = json.loads(old_bob("show", "--json", str(job_id)))
    assert shown["user"] == "alice" and shown["state"] == "succeeded"
    assert (shown["command"], shown["env"], shown["workdir"]) == ("", {}, None)
    assert "details_hidden" not in shown  # a field protocol 1 does not know
    text = old_bob("show", str(job_id))
    assert "alices-secret-run" in text and "wandb-compat" not in text and SECRET not in text
