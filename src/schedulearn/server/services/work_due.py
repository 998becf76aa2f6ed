"""Which of the nodes whose work polls wait have something to read (`server.workwatch`).

One set of queries for every waiting poll of a replica together, once a
second, instead of each poll reading its own node's work: a node is due
when it has a start not yet sent or a stop order not yet sent (the rows
`agents.take_work` hands out), or when the credential its poll came with
was revoked or has expired (the poll's next read refuses it, as
`enrollment.identify` does). Read-only: the woken polls take their work
themselves.
"""

from __future__ import annotations

from sqlalchemy import BindParameter, bindparam, or_, select
from sqlmodel import Session

from schedulearn.server.models import JobPart, NodeCredential, PartStatus, Token
from schedulearn.server.services.lifecycle import LIVE

_PARTS = JobPart.__table__
_NODES: BindParameter[list[str]] = bindparam("nodes", expanding=True)
_DIGESTS: BindParameter[list[str]] = bindparam("digests", expanding=True)

# The conditions of `agents._NEW_PARTS` and `agents._STOPS`, for many nodes at once.
_WITH_STARTS = (
    select(_PARTS.c.node)
    .where(
        _PARTS.c.node.in_(_NODES),
        _PARTS.c.status == PartStatus.ASSIGNED,
        _PARTS.c.delivered == False,  # noqa: E712
    )
    .distinct()
)
_WITH_STOPS = (
    select(_PARTS.c.node)
    .where(
        _PARTS.c.node.in_(_NODES),
        _PARTS.c.stop_reason != None,  # noqa: E711
        _PARTS.c.stop_sent == False,  # noqa: E712
        _PARTS.c.status.in_(LIVE),
    )
    .distinct()
)
_CREDENTIALS = NodeCredential.__table__
_REVOKED = select(_CREDENTIALS.c.hash).where(
    _CREDENTIALS.c.hash.in_(_DIGESTS),
    _CREDENTIALS.c.revoked_at != None,  # noqa: E711
)
_TOKENS = Token.__table__
_ENDED_TOKENS = select(_TOKENS.c.hash).where(
    _TOKENS.c.hash.in_(_DIGESTS),
    or_(_TOKENS.c.revoked_at != None, _TOKENS.c.expires_at <= bindparam("now")),  # noqa: E711
)


def due_nodes(
    session: Session, nodes: list[str], digests: list[str], now: float
) -> tuple[set[str], set[str]]:
    """(the nodes with work to send, the credential hashes now refused) among those given."""
    conn = session.connection()
    due = set(conn.execute(_WITH_STARTS, {"nodes": nodes}).scalars())
    due |= set(conn.execute(_WITH_STOPS, {"nodes": nodes}).scalars())
    refused = set(conn.execute(_REVOKED, {"digests": digests}).scalars())
    refused |= set(conn.execute(_ENDED_TOKENS, {"digests": digests, "now": now}).scalars())
    return due, refused
