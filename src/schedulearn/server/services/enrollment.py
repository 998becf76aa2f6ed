"""Which node an agent is: join tokens, node credentials, revocation.

Owns the `join_token` and `node_credential` tables. Every agent request
carries a credential bound to exactly one node (`identify` says which);
`services.agent_access` then lets it act only on that node and on the
attempts placed there.

How a node gets its credential:

- `schedulearn node add NAME` (admin) makes a join token: random, shown
  once, stored hashed, single use, expiring (`JOIN_TOKEN_SECONDS` by
  default). The agent exchanges it (`POST /api/v1/agent/join`) for a
  credential bound to NAME and keeps that 0600 in its state directory.
- `schedulearn up` makes its local agent's credential directly
  (`local_credential`), with no join step.
- Compatibility, trust on first use: an old-style agent-role token (made
  by `token create --role agent`, or `SCHEDULEARN_AGENT_TOKEN` on the
  server, as agents of the previous release use with `--token`) is bound
  to the node it first registers, and from then on is that node's
  credential: refused for any other node name and for any other node's
  jobs. A node that already has a live credential cannot be claimed by an
  unbound token. So one old token serves one node; each further node is
  enrolled with `node add`.

A node has at most one live credential: a new one (a join, `up`) revokes
the node's older ones. `schedulearn node rm NAME` revokes the node's
credential, voids its unused join tokens and removes the node (its jobs
are lost and requeued); the agent's next call is refused with 401 and it
stops, saying so. Revoked rows are kept, so that the refusal can say why.

Lookups are cached per process for `CACHE_SECONDS` (every agent request
needs one); `forget_node` drops a revoked node's entries at once in this
process, and other API replicas notice within `CACHE_SECONDS`.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from sqlalchemy import bindparam, update
from sqlmodel import Session, col, select

from schedulearn.protocol import JoinTokenPublic, NodeJoined, NodeRemoved
from schedulearn.server.auth import Role, hash_token
from schedulearn.server.errors import Conflict, Forbidden, NotFound, Unauthorized
from schedulearn.server.models import (
    Allocation,
    CredentialKind,
    Gpu,
    Job,
    JobPart,
    JoinToken,
    Node,
    NodeCredential,
    Token,
)
from schedulearn.server.services import lifecycle
from schedulearn.server.wakeups import Changes

JOIN_TOKEN_SECONDS = 3600.0
CACHE_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class AgentIdentity:
    """Who an agent request is: the node its credential is bound to.

    `node` is None for an old-style agent token not bound yet; such a
    token may only register, which binds it.
    """

    digest: str
    node: str | None

    @property
    def bound(self) -> str:
        if self.node is None:
            raise Forbidden(
                "this agent token is not bound to a node yet; the agent's registration binds "
                "it (or enroll the node with `schedulearn node add NAME` and --join-token)"
            )
        return self.node


def new_secret(prefix: str) -> str:
    return f"{prefix}_{secrets.token_urlsafe(32)}"


# --- identify ------------------------------------------------------------------


# Built once, a plain read: every pass of every agent's long poll checks its
# credential (an ORM `session.get` was 40% of the work handout in
# `bench/api_load.py`'s latency phase).
_CREDENTIAL = select(NodeCredential.node, NodeCredential.revoked_at).where(
    NodeCredential.hash == bindparam("digest")
)


def identify(session: Session, digest: str, now: float) -> AgentIdentity:
    """The identity of a credential's hash; 401/403 with what to do otherwise."""
    cred = session.connection().execute(_CREDENTIAL, {"digest": digest}).first()
    if cred is not None:
        if cred.revoked_at is not None:
            raise Unauthorized(
                f"the credential of node {cred.node!r} was revoked (the node was removed or "
                f"enrolled again); enroll it with `schedulearn node add {cred.node}` and start "
                "its agent with the new join token"
            )
        return AgentIdentity(digest, cred.node)
    token = session.exec(select(Token).where(Token.hash == digest)).first()
    if token is not None and (
        token.revoked_at is not None or (token.expires_at is not None and token.expires_at <= now)
    ):
        raise Unauthorized(
            "this agent token was revoked or has expired; enroll the node with "
            "`schedulearn node add NAME` and start its agent with the join token"
        )
    if token is None:
        raise Unauthorized(
            "unknown agent credential; enroll this node with `schedulearn node add NAME` "
            "(admin) and start the agent with that join token (--join-token-file)"
        )
    if token.role != Role.AGENT.value:
        raise Forbidden(
            "this route is for node agents; a user or admin token cannot act as a node "
            "(enroll one with `schedulearn node add NAME`)"
        )
    return AgentIdentity(digest, None)


class CredentialCache:
    """Credential hash -> bound identity, for `CACHE_SECONDS` (the clock is passed in)."""

    def __init__(self, seconds: float = CACHE_SECONDS) -> None:
        self.seconds = seconds
        self._known: dict[str, tuple[AgentIdentity, float]] = {}

    def get(self, digest: str, now: float) -> AgentIdentity | None:
        found = self._known.get(digest)
        if found is None or now - found[1] > self.seconds:
            return None
        return found[0]

    def keep(self, who: AgentIdentity, now: float) -> None:
        if who.node is not None:  # an unbound token changes at its registration
            if len(self._known) > 10_000:
                self._known.clear()
            self._known[who.digest] = (who, now)

    def forget_node(self, node: str) -> None:
        for digest in [d for d, (who, _) in self._known.items() if who.node == node]:
            del self._known[digest]


# --- making credentials --------------------------------------------------------


def _revoke_all(session: Session, node: str, now: float) -> None:
    session.execute(
        update(NodeCredential)
        .where(col(NodeCredential.node) == node, col(NodeCredential.revoked_at) == None)  # noqa: E711
        .values(revoked_at=now)
    )


def _new_credential(session: Session, node: str, kind: CredentialKind, now: float) -> str:
    _revoke_all(session, node, now)
    secret = new_secret("slnode")
    session.add(NodeCredential(hash=hash_token(secret), node=node, kind=kind, created_at=now))
    return secret


def add_node(
    session: Session, name: str, now: float, seconds: float = JOIN_TOKEN_SECONDS
) -> JoinTokenPublic:
    """A one-time join token for node `name` (stored hashed; shown once)."""
    secret = new_secret("sljoin")
    session.add(
        JoinToken(hash=hash_token(secret), node=name, created_at=now, expires_at=now + seconds)
    )
    session.commit()
    return JoinTokenPublic(node=name, join_token=secret, expires_at=now + seconds)


def join(session: Session, join_token: str, now: float) -> NodeJoined:
    """Exchange a join token, once and before it expires, for its node's credential."""
    digest = hash_token(join_token)
    row = session.get(JoinToken, digest)
    if row is None:
        raise Unauthorized("unknown join token; ask an admin for one (`schedulearn node add NAME`)")
    # A conditional update: of two agents racing with the same token, one wins.
    taken = session.execute(
        update(JoinToken)
        .where(
            col(JoinToken.hash) == digest,
            col(JoinToken.used_at) == None,  # noqa: E711
            col(JoinToken.expires_at) > now,
        )
        .values(used_at=now)
    )
    if taken.rowcount != 1:  # type: ignore[attr-defined]  # sqlmodel types execute() as Result; an UPDATE gives a CursorResult
        session.rollback()
        why = "was already used" if row.used_at is not None else "has expired"
        raise Unauthorized(
            f"this join token for node {row.node!r} {why}; join tokens work once and for a "
            f"short time: make a new one with `schedulearn node add {row.node}`"
        )
    secret = _new_credential(session, row.node, CredentialKind.JOINED, now)
    session.commit()
    return NodeJoined(node=row.node, credential=secret)


def local_credential(session: Session, node: str, known: str | None, now: float) -> str:
    """`schedulearn up`'s local agent: `known` if still `node`'s live credential, else a new one."""
    if known:
        row = session.get(NodeCredential, hash_token(known))
        if row is not None and row.node == node and row.revoked_at is None:
            return known
    secret = _new_credential(session, node, CredentialKind.LOCAL, now)
    session.commit()
    return secret


def bind_on_registration(session: Session, who: AgentIdentity, node: str, now: float) -> str:
    """Trust on first use: bind an old-style agent token to the node it registers.

    Returns the node the caller acts as. Commits nothing (the registration does).
    """
    if who.node is not None:
        return who.node
    live = session.exec(
        select(NodeCredential.hash).where(
            NodeCredential.node == node,
            NodeCredential.revoked_at == None,  # noqa: E711
        )
    ).first()
    if live is not None:
        raise Forbidden(
            f"node {node!r} is enrolled with its own credential; this agent token cannot act "
            "for it (start the agent with the node's credential, or `schedulearn node rm` "
            "and `node add` it again)"
        )
    session.add(
        NodeCredential(hash=who.digest, node=node, kind=CredentialKind.BOUND_TOKEN, created_at=now)
    )
    return node


# --- removing a node -----------------------------------------------------------


def remove_node(session: Session, name: str, now: float) -> tuple[NodeRemoved, Changes]:
    """Revoke `name`'s credentials, void its join tokens, lose its jobs, drop the node."""
    node = session.get(Node, name)
    creds = session.exec(select(NodeCredential).where(NodeCredential.node == name)).all()
    joins = session.exec(select(JoinToken).where(JoinToken.node == name)).all()
    if node is None and not creds and not joins:
        raise NotFound(f"no node {name!r}; list the nodes with `schedulearn nodes`")
    _revoke_all(session, name, now)
    session.execute(
        update(JoinToken)
        .where(col(JoinToken.node) == name, col(JoinToken.used_at) == None)  # noqa: E711
        .values(used_at=now)
    )
    changes = Changes(scheduler=True, nodes={name})
    lost: list[int] = []
    for part in session.exec(
        select(JobPart).where(col(JobPart.node) == name, col(JobPart.status).in_(lifecycle.LIVE))
    ).all():
        job = session.get(Job, part.job_id)
        if job is not None:
            lost.append(part.job_id)
            why = f"node {name} was removed"
            lost_cause = lifecycle.LossCause.NODE_DOWN
            changes.merge(lifecycle.part_lost(session, job, part, now, why, lost_cause))
    held = session.exec(select(Allocation).where(Allocation.node == name)).first()
    if held is not None:
        raise Conflict(f"node {name!r} still holds GPUs of job {held.job_id}; try again")
    for gpu in session.exec(select(Gpu).where(Gpu.node == name)).all():
        session.delete(gpu)
    if node is not None:
        session.delete(node)
    session.commit()
    return NodeRemoved(name=name, lost_jobs=sorted(set(lost))), changes
