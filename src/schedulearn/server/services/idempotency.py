"""Idempotent submission: a repeated `Idempotency-Key` gets the jobs of its first request.

A client that loses the reply to a submission cannot know whether it was
accepted; trying again without a key could make the jobs twice. With a key
(one per submission, chosen by the client; the CLI sends one), `submit`
looks the key up for the caller's user: a key seen before with the same
spec returns the jobs it made then (and makes none); with another spec it
is refused (409), since the client reused a key by mistake. A new key is
stored with the ids of the jobs it made in the same transaction that
inserts them, so either both are committed or neither. Keys expire a day
after their first use (`TTL_SECONDS`); expired ones are deleted as new
keyed submissions come in.

On PostgreSQL, concurrent requests with one key (several replicas) are
serialised by a transaction-level advisory lock on the key, taken in
sorted order. The module owns the `idempotency_key` table.
"""

from __future__ import annotations

import hashlib
import json
from typing import NamedTuple

from sqlalchemy import delete, func, select
from sqlmodel import Session, col

from schedulearn.protocol import JobSpec
from schedulearn.server.auth import Caller
from schedulearn.server.errors import Conflict
from schedulearn.server.models import IdempotencyRecord, Job
from schedulearn.server.services import jobs, snapshot
from schedulearn.server.services.jobs import Submitted
from schedulearn.server.wakeups import Changes

TTL_SECONDS = 24 * 3600.0
MAX_KEY_LENGTH = 200


class Submission(NamedTuple):
    """One request's spec, its caller and its key (None: not idempotent)."""

    spec: JobSpec
    caller: Caller
    key: str | None = None


def fingerprint(spec: JobSpec) -> str:
    """The spec as parsed (so a JSON and a YAML body of one spec match)."""
    return hashlib.sha256(spec.model_dump_json().encode()).hexdigest()


def submit(
    session: Session,
    raw: list[Submission | tuple[JobSpec, Caller]],
    now: float,
    shape: snapshot.ShapeCache | None = None,
) -> list[Submitted | Exception]:
    """`jobs.submit` for a batch in which some submissions carry a key."""
    items = [Submission(*item) for item in raw]
    results: list[Submitted | Exception | None] = [None] * len(items)
    prints = [fingerprint(it.spec) if it.key else "" for it in items]
    firsts: dict[tuple[str, str], int] = {}  # a key twice in one batch: the first makes the jobs
    repeats: list[int] = []
    keyed = [(i, it) for i, it in enumerate(items) if it.key]
    if keyed:
        _lock(session, sorted({(it.caller.user, it.key or "") for _, it in keyed}))
        expired = col(IdempotencyRecord.created_at) < now - TTL_SECONDS
        session.execute(delete(IdempotencyRecord).where(expired))
        for i, it in keyed:
            name = (it.caller.user, it.key or "")
            row = session.get(IdempotencyRecord, name)
            if row is not None:
                results[i] = _replay(session, row, prints[i], it.key or "")
            elif name in firsts:
                repeats.append(i)
            else:
                firsts[name] = i
    fresh = [i for i, r in enumerate(results) if r is None and i not in repeats]

    def record(made: list[Submitted | Exception]) -> None:
        for i, result in zip(fresh, made, strict=True):
            it = items[i]
            if it.key and isinstance(result, Submitted):
                ids = [job.id for job in result.jobs]
                session.add(
                    IdempotencyRecord(
                        user=it.caller.user,
                        key=it.key,
                        fingerprint=prints[i],
                        job_ids=json.dumps(ids),
                        created_at=now,
                    )
                )
        session.flush()

    if fresh:
        specs = [(items[i].spec, items[i].caller) for i in fresh]
        made = jobs.submit(session, specs, now, shape, before_commit=record)
        for i, result in zip(fresh, made, strict=True):
            results[i] = result
    else:
        session.commit()  # the expired keys' deletion
    for i in repeats:
        it = items[i]
        first = results[firsts[(it.caller.user, it.key or "")]]
        if prints[i] != prints[firsts[(it.caller.user, it.key or "")]]:
            results[i] = _reused(it.key or "")
        elif isinstance(first, Submitted):
            results[i] = Submitted(list(first.jobs), Changes())
        else:
            results[i] = first if first is not None else _reused(it.key or "")
    return [r if r is not None else _reused("") for r in results]


def _lock(session: Session, names: list[tuple[str, str]]) -> None:
    if session.get_bind().dialect.name != "postgresql":
        return  # SQLite: one writer at a time already
    for user, key in names:
        session.execute(select(func.pg_advisory_xact_lock(func.hashtext(f"{user}\n{key}"))))


def _replay(
    session: Session, row: IdempotencyRecord, print_: str, key: str
) -> Submitted | Exception:
    if row.fingerprint != print_:
        return _reused(key)
    ids: list[int] = json.loads(row.job_ids)
    found = {
        job.id: job for job in session.execute(select(Job).where(col(Job.id).in_(ids))).scalars()
    }
    return Submitted([jobs.to_public(found[i]) for i in ids if i in found], Changes())


def _reused(key: str) -> Conflict:
    return Conflict(
        f"the Idempotency-Key {key!r} was already used for a different job spec in the last "
        f"{TTL_SECONDS / 3600:g} hours; send a new key with a new submission"
    )
