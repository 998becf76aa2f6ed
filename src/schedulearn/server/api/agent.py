"""/api/v1/agent: the node agents' side of the contract in `schedulearn.protocol`.

Every route but `/join` needs a node credential (`deps.agent`: which node
the caller is) and calls `services.agent_access`, which lets it act only
on its own node and on the attempts placed there (403 otherwise, with
nothing changed). `/join` exchanges a one-time join token from
`schedulearn node add` for that credential.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import FileResponse, Response

from schedulearn.protocol import (
    Ack,
    CheckpointRef,
    EventAcks,
    EventBatch,
    Heartbeat,
    HeartbeatReply,
    JobEvent,
    LogBatch,
    NodeJoin,
    NodeJoined,
    NodeRegistration,
    ProgressBatch,
    RegistrationReply,
    WorkBatch,
)
from schedulearn.server.api.below import json_reply
from schedulearn.server.api.deps import Agent, JobId, State
from schedulearn.server.errors import ERROR_RESPONSES
from schedulearn.server.services import agent_access, agents, checkpoints, enrollment, full_logs
from schedulearn.server.services.enrollment import AgentIdentity
from schedulearn.server.services.heartbeats import Beat
from schedulearn.server.services.uploads import Upload
from schedulearn.server.state import AppState
from schedulearn.server.wakeups import wait_for

router = APIRouter(prefix="/api/v1/agent", tags=["agent"], responses=ERROR_RESPONSES)

# The work poll's query bounds, for the route and `fast_agent.FastAgent`.
MIN_WAIT, MAX_WAIT = 0.0, 3600.0  # seconds
NODE_NAME_MAX = 200


@router.post(
    "/join",
    response_model=NodeJoined,
    summary="Exchange a one-time join token (`schedulearn node add`) for the node's credential",
)
async def join(body: NodeJoin, state: State) -> NodeJoined:
    joined = await state.db.run(enrollment.join, body.join_token, state.clock.now())
    state.credentials.forget_node(joined.node)  # the node's older credential is revoked
    return joined


@router.post("/register", response_model=RegistrationReply)
async def register(body: NodeRegistration, state: State, who: Agent) -> RegistrationReply:
    done = await state.db.run(agent_access.register, who, body, state.clock.now(), state.timing)
    state.shape.invalidate()
    state.orphan_stops.pop(body.name, None)
    state.wakeups.notify(done.changes)
    return done.reply


@router.post("/heartbeat", response_model=HeartbeatReply)
async def heartbeat(body: Heartbeat, state: State, who: Agent) -> Response:
    return await record_heartbeat(state, who, body)


async def record_heartbeat(state: AppState, who: AgentIdentity, body: Heartbeat) -> Response:
    """A heartbeat recorded, and the reply (the route and `fast_agent.FastAgent`
    both answer with this: every node sends one every `heartbeat_seconds`).

    From a node known to be up, answered at once and written with the
    others in the next group commit (`heartbeat_book`); else written in its
    own transaction first, which says whether the node must register again.
    """
    now, book = state.clock.now(), state.heartbeats
    heard = False
    if book is not None and body.name:
        agent_access.own_node(who, body.name)  # 403 for another node's credential
        heard = book.hear(body, now)
    if heard:
        known = True
    else:
        beat = await state.db.run(agent_access.heartbeat, who, body, now, state.timing)
        if book is not None:
            book.learned(body.name, now, beat.known)
        _heartbeat_written(state, body.name, beat)
        known = beat.known
    state.samples[body.name] = body.gpus
    lease = state.timing.lease_reply() if known else {}
    return json_reply(
        HeartbeatReply(
            heartbeat_seconds=state.timing.heartbeat_seconds, reregister=not known, **lease
        )
    )


def heartbeats_written(state: AppState, written: list[tuple[Heartbeat, Beat]]) -> None:
    """A group commit's heartbeats written (`HeartbeatBook`): their stop orders and wake-ups."""
    for body, beat in written:
        _heartbeat_written(state, body.name, beat)


def _heartbeat_written(state: AppState, node: str, beat: Beat) -> None:
    if beat.orphans:
        state.orphan_stops[node] = agents.orphan_orders(beat.orphans, state.timing)
        state.wakeups.wake_nodes([node])
    state.wakeups.notify(beat.changes)


@router.get("/work", response_model=WorkBatch, summary="Long-poll for starts and stops")
async def work(
    request: Request,
    state: State,
    who: Agent,
    node: Annotated[str, Query(min_length=1, max_length=NODE_NAME_MAX)],
    wait: Annotated[float, Query(ge=MIN_WAIT, le=MAX_WAIT)] = 0.0,
) -> Response:
    return await take_work(state, who, node, wait, request.is_disconnected)


async def take_work(
    state: AppState,
    who: AgentIdentity,
    node: str,
    wait: float,
    disconnected: Callable[[], Awaitable[bool]],
) -> Response:
    """The work poll's reply: starts and stops for `node`, waiting up to
    `wait` seconds for some (the route and `fast_agent.FastAgent` both
    answer with this)."""
    wait = min(wait, state.settings.max_wait_seconds)
    node = agent_access.own_node(who, node)
    event = state.wakeups.node(node)
    deadline = state.clock.now() + wait
    with state.work_watch.waiting(node, who.digest):
        while True:
            # Clear before reading: a wake-up that lands during the read is kept.
            event.clear()
            batch = await state.db.run(
                agent_access.take_work, who, node, state.clock.now(), state.timing
            )
            orphans = state.orphan_stops.pop(node, None)
            if orphans:
                batch.stops.extend(orphans)
            left = deadline - state.clock.now()
            if batch.starts or batch.stops or left <= 0:
                return json_reply(batch)
            # Read again when woken: by this replica's own writes, or by
            # `work_watch`'s one read a second for every waiting poll (work or
            # a revocation another replica wrote), or at the deadline. Awake
            # every second meanwhile, to notice an agent that went away (so a
            # shutdown does not wait on its poll).
            while not await wait_for(event, min(left, 1.0)):
                if await disconnected():
                    return json_reply(WorkBatch())
                left = deadline - state.clock.now()
                if left <= 0:
                    break


@router.post("/jobs/{job_id}/events", response_model=Ack)
async def event(job_id: JobId, body: JobEvent, state: State, who: Agent) -> Ack:
    changes = await state.db.run(agent_access.record_event, who, job_id, body, state.clock.now())
    state.wakeups.notify(changes)
    return Ack(ignored=not changes.jobs)


@router.post("/events", response_model=EventAcks, summary="Events of many jobs at once")
async def events(body: EventBatch, state: State, who: Agent) -> Response:
    return await record_events(state, who, body)


async def record_events(state: AppState, who: AgentIdentity, body: EventBatch) -> Response:
    """A batch of job events recorded, and its acknowledgements (the route and
    `fast_agent.FastAgent` both answer with this)."""
    done = await state.db.run(agent_access.record_events, who, body.events, state.clock.now())
    state.wakeups.notify(done.changes)
    return json_reply(EventAcks(acks=done.acks))


@router.post("/jobs/{job_id}/logs", response_model=Ack)
async def job_logs(job_id: JobId, body: LogBatch, state: State, who: Agent) -> Response:
    return await record_logs(state, who, job_id, body)


async def record_logs(state: AppState, who: AgentIdentity, job_id: int, body: LogBatch) -> Response:
    """A log batch stored, and its acknowledgement (the route and
    `fast_agent.FastAgent` both answer with this)."""
    # With the batches of other runs that arrive meanwhile, in one transaction.
    appended = await state.log_batcher.add((who, job_id, body))
    state.wakeups.notify(appended.changes)
    return json_reply(Ack(full_log_wanted=appended.full_log_wanted))


@router.post("/jobs/{job_id}/progress", response_model=Ack, summary="New progress reports")
async def job_progress(job_id: JobId, body: ProgressBatch, state: State, who: Agent) -> Ack:
    changes = await state.db.run(agent_access.record_progress, who, job_id, body)
    state.wakeups.notify(changes)
    return Ack()


# `checkpoints.receive` and `full_logs.receive`: (body, store, job, attempt, node,
# sha256, size limit, declared length) -> the file received, not yet kept.
Receiver = Callable[
    [AsyncIterator[bytes], Path, int, int, str, str, int, int | None], Awaitable[Upload]
]


async def _receive(
    state: AppState,
    request: Request,
    who: AgentIdentity,
    job_id: int,
    attempt: int,
    node: str,
    sha256: str,
    *,
    receive: Receiver,
    store: Path,
    limit: int,
) -> Upload:
    """Check that the agent may upload for this attempt, then stream the body through
    `receive` into `store` (at most `limit` bytes)."""
    # Checked before the body is read: a refused upload writes nothing.
    node = await state.db.run(agent_access.may_upload, who, job_id, attempt, node)
    length = request.headers.get("content-length")
    declared = int(length) if length and length.isdigit() else None
    return await receive(request.stream(), store, job_id, attempt, node, sha256, limit, declared)


@router.put(
    "/jobs/{job_id}/checkpoint",
    response_model=CheckpointRef,
    summary="Upload a preempted job's checkpoint directory (a tar, streamed)",
    responses={413: {"description": "Over the server's checkpoint_max_bytes"}},
)
async def put_checkpoint(
    job_id: JobId,
    request: Request,
    state: State,
    who: Agent,
    attempt: Annotated[int, Query(ge=1, le=2**31 - 1)],
    sha256: Annotated[str, Header(alias="X-Checkpoint-Sha256", max_length=64)],
    node: Annotated[str, Query(max_length=200)] = "",
) -> CheckpointRef:
    store = checkpoints.store_dir(state.settings)
    limit = state.settings.checkpoint_max_bytes
    sent = (state, request, who, job_id, attempt, node, sha256)
    upload = await _receive(*sent, receive=checkpoints.receive, store=store, limit=limit)
    return await state.db.run(checkpoints.commit, store, upload, state.clock.now())


@router.put(
    "/jobs/{job_id}/full-log",
    response_model=Ack,
    summary="Upload an attempt's whole output (the server cut its stored log), streamed",
    responses={413: {"description": "Over the server's log_full_max_bytes"}},
)
async def put_full_log(
    job_id: JobId,
    request: Request,
    state: State,
    who: Agent,
    attempt: Annotated[int, Query(ge=1, le=2**31 - 1)],
    sha256: Annotated[str, Header(alias="X-Log-Sha256", max_length=64)],
    node: Annotated[str, Query(max_length=200)] = "",
) -> Ack:
    store = full_logs.store_dir(state.settings)
    limit = state.settings.log_full_max_bytes
    sent = (state, request, who, job_id, attempt, node, sha256)
    upload = await _receive(*sent, receive=full_logs.receive, store=store, limit=limit)
    await state.db.run(full_logs.commit, store, upload, state.clock.now())
    return Ack()


@router.get(
    "/jobs/{job_id}/checkpoint",
    summary="Download the job's latest checkpoint (a tar; its hash in X-Checkpoint-Sha256)",
    response_class=FileResponse,
)
async def get_checkpoint(job_id: JobId, state: State, who: Agent) -> FileResponse:
    store = checkpoints.store_dir(state.settings)
    path, ref = await state.db.run(agent_access.download, who, store, job_id)
    return FileResponse(
        path,
        media_type="application/x-tar",
        headers={"X-Checkpoint-Sha256": ref.sha256, "X-Checkpoint-Attempt": str(ref.attempt)},
    )
