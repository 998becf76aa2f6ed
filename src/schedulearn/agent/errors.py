"""The agent's fatal errors and the messages that explain a server's refusal.

`AgentError` ends the agent process with its message, which says what to
change. The server refusing this node's credential or its protocol is
fatal wherever it is heard (enrolment, registration, the work loop, the
heartbeat thread); the messages are written here once.
"""

from __future__ import annotations

from schedulearn.agent.client import Rejected


class AgentError(RuntimeError):
    """The agent cannot go on; the message says what to change."""


def protocol_refused(server: str, exc: Rejected) -> str:
    return f"the server {server} refused this agent: {exc.message}"


def token_refused(server: str, exc: Rejected) -> str:
    return (
        f"the server {server} refused this node's credential (HTTP {exc.status}: {exc.message}); "
        "stopping. If the node was removed or its credential revoked, an admin enrolls it "
        "again with `schedulearn node add NAME`; start the agent with that join token "
        "(--join-token-file or SCHEDULEARN_JOIN_TOKEN)"
    )
