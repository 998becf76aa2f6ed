"""Enrolment: a node started with a join token exchanges it for its credential.

An admin's `schedulearn node add NAME` makes a join token for one node.
The agent started with it asks the server for the node's own credential
(`AgentClient.join`, retried while the server is unreachable) and keeps
that in the state directory (`agent.credential`) with a digest of the
join token, so a restart with the same token uses the stored credential
instead of asking again. A token for another node, or one the server
refuses, ends the agent with a message saying what to change.
"""

from __future__ import annotations

import asyncio
import logging

from schedulearn.agent import credential
from schedulearn.agent.client import AgentClient, AuthRejected, ProtocolRefused, Rejected
from schedulearn.agent.config import AgentConfig
from schedulearn.agent.errors import AgentError, protocol_refused
from schedulearn.agent.retry import Retry, Stopped

log = logging.getLogger(__name__)


async def enroll(config: AgentConfig, client: AgentClient, stop: asyncio.Event) -> str | None:
    """The credential this node talks to the server with, set on `client`.

    Without a join token, the configured token; with one, the stored
    credential it was exchanged for, else a new one from the server. None
    when `stop` was set before the server answered.
    """
    join_token = config.join_token
    if not join_token:
        return config.token
    digest = credential.join_digest(join_token)
    stored = credential.load(config.state_dir)
    if stored is not None and stored.join_digest == digest and stored.node == config.name:
        log.info("node %s is enrolled with this join token already", config.name)
        client.set_token(stored.credential)
        return stored.credential
    retry = Retry(f"join {config.server}", stop=stop)
    try:
        joined = await retry.run(lambda: client.join(join_token))
    except Stopped:
        return None
    except AuthRejected as exc:
        raise AgentError(
            f"the server {config.server} refused the join token: {exc.message}"
        ) from exc
    except ProtocolRefused as exc:
        raise AgentError(protocol_refused(config.server, exc)) from exc
    except Rejected as exc:
        raise AgentError(f"the server refused the join token: {exc}") from exc
    if joined.node != config.name:
        raise AgentError(
            f"that join token is for node {joined.node!r}, but this agent is "
            f"{config.name!r}; start it with --name {joined.node}, or ask for a join "
            f"token for {config.name!r} (`schedulearn node add {config.name}`)"
        )
    path = credential.save(
        config.state_dir, credential.StoredCredential(joined.node, joined.credential, digest)
    )
    log.info("node %s enrolled; its credential is kept in %s", joined.node, path)
    client.set_token(joined.credential)
    return joined.credential
