"""Wire models shared by the server, the node agents and the CLI.

This module owns the shape of every message that crosses the network:

- the agent contract (HTTP under `/api/v1/agent`, bearer agent token):
  registration, heartbeats, the long-polled work batches (assignments
  and stop orders), job events and log batches;
- the user API's request and response bodies (job specs, job and node
  listings, policy, errors), so the CLI reads typed objects too.

It imports only pydantic, the standard library and `core` (the goodput
record a job's progress report carries), never the server or the agent.
The job and node fields a policy reads are declared once on
`core.views.JobView` and `NodeView`: `JobSpec`, `JobPublic`,
`NodeRegistration` and `NodePublic` carry each declared field they do not
spell out themselves in a block at the end of the class, which
`scripts/new-field` writes (`server.fieldcode`). Times are seconds since
the epoch (floats), as everywhere else in Schedulearn. The `attempt`
number on every job report lets the server ignore reports from an older
run of a job that was requeued.

Upgrades. Every model is either a request (`_Request`: what a client or
an agent sends; unknown fields are refused, so a typo in a job spec fails
loudly) or a reply (`_Reply`: what the server answers, down to the work
batches agents read; unknown fields are ignored, so a newer server may add
a field without breaking an older CLI or agent). A field added to a
request needs a default, so that requests of older clients stay valid.

Clients and agents send `PROTOCOL_HEADER: <PROTOCOL_VERSION>` on every
call. The protocol version is one whole number, raised by one whenever a
release changes the wire in a way a peer could notice (a call or a request
field added, a field removed, a meaning changed). The wire of each version
is checked in (`schedulearn/wire/protocol-<N>.json`, see
`schedulearn.protocol_schema`), and tests/unit/test_wire_schema.py fails
when this module's models or the routes differ from the current one; a
client learns the server's version once and gates each call on it
(`schedulearn.protocol_calls`). A server speaks every version from `OLDEST_PROTOCOL`
to its own `PROTOCOL_VERSION`, and refuses a call outside that range with
a 400 that names both (`protocol_refusal`):

- a client older than `OLDEST_PROTOCOL`: the server no longer serves what
  it needs (a field it relies on was removed or changed its meaning);
  upgrade the client. A release raises `OLDEST_PROTOCOL` only for such a
  change; adding fields never needs it.
- a client newer than the server: refused only when it sends the version
  it speaks; a client of protocol 3 or later speaks the server's newest
  version instead, for every call that version knows, and refuses the
  rest itself, naming the server's version (`protocol_calls`).

A call without the header is taken as protocol `UNVERSIONED_PROTOCOL` (1):
what releases before the header spoke, whose clients (the CLI and agent of
0.1.0) send none. curl, browsers and the web pages send none either, so
they keep working for as long as a server speaks protocol 1. Clients of
protocol 1 refuse unknown reply fields, so the server leaves out of its
replies to them every field protocol 1 did not have
(`schedulearn.protocol_history`).
"""

from __future__ import annotations

import re
import typing
from contextvars import ContextVar
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    ValidationInfo,
    field_validator,
    model_validator,
)

from schedulearn.core import dependencies
from schedulearn.core.goodput import GoodputReport

API_PREFIX = "/api/v1"
AGENT_PREFIX = "/api/v1/agent"

# Environment variables a job sees (besides CUDA_VISIBLE_DEVICES and, in a
# container, NVIDIA_VISIBLE_DEVICES). Gangs also get the torch rendezvous ones.
ENV_JOB_ID = "SCHEDULEARN_JOB_ID"
ENV_NUM_GPUS = "SCHEDULEARN_NUM_GPUS"
# A task of a job array (`submit --array 0-9`): the array's id (its first
# job's), this task's index, the number of tasks. Slurm's SLURM_ARRAY_*.
ENV_ARRAY_ID = "SCHEDULEARN_ARRAY_ID"
ENV_ARRAY_INDEX = "SCHEDULEARN_ARRAY_INDEX"
ENV_ARRAY_SIZE = "SCHEDULEARN_ARRAY_SIZE"
ENV_CHECKPOINT_DIR = "SCHEDULEARN_CHECKPOINT_DIR"
ENV_PROGRESS_FILE = "SCHEDULEARN_PROGRESS_FILE"
GANG_ENV = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NODE_RANK")


def _no_nul(value: object, where: str = "") -> None:
    """Refuse a NUL anywhere in `value`, naming where (a field, an env key) so the
    user knows what to change; a value is never repeated: it may be a secret."""
    if isinstance(value, str):
        if "\x00" in value:
            raise ValueError(f"{where or 'text'} may not contain NUL characters")
    elif isinstance(value, dict):
        for k, v in value.items():
            if isinstance(k, str) and "\x00" in k:
                raise ValueError(f"{where + ' ' if where else ''}key {k!r} may not contain NUL")
            _no_nul(v, f"{where}[{k!r}]" if where else str(k))
    elif isinstance(value, list):
        for v in value:
            _no_nul(v, where)


# True while a model's validation runs on data its outermost model has
# checked for NUL (a context variable: validation may run on any thread).
_NUL_CHECKED: ContextVar[bool] = ContextVar("_NUL_CHECKED", default=False)


class _Wire(BaseModel):
    """Base of every wire model: numbers are finite (infinities and NaN do not
    survive JSON). Every model derives from `_Request`, `_RequestPart` or
    `_Reply`."""

    # defer_build: a model's validator is built when first used, not at import,
    # so a CLI command pays only for the models it reads.
    model_config = ConfigDict(allow_inf_nan=False, defer_build=True)


class _Request(_Wire):
    """What a client or an agent sends: unknown fields are refused, so typos fail
    loudly, and text with a NUL is refused (PostgreSQL cannot store it).

    NUL is checked where text enters, here, and not again in replies: a reply
    carries what the server took through a request or made itself, and walking
    every reply the server builds and every reply a client reads cost about 4%
    of the server's CPU and 2% of an agent's under `bench/api_load.py`.
    """

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="wrap")
    @classmethod
    def _reject_nul(cls, data: object, handler: ModelWrapValidatorHandler[Self]) -> Self:
        # The outermost model walks all its data once; the models inside it
        # (a log batch's ten thousand lines) skip their part.
        if _NUL_CHECKED.get():
            return handler(data)
        _no_nul(data)
        checked = _NUL_CHECKED.set(True)
        try:
            return handler(data)
        finally:
            _NUL_CHECKED.reset(checked)


class _RequestPart(_Wire):
    """An item of a request that is never sent on its own (a log batch's
    lines): unknown fields are refused as in `_Request`, and the request
    holding it walks it for NUL with the rest of its data.

    It has no validator of its own: a Python validator on each of a batch's
    ten thousand lines, even one that only saw the walk was done, doubled
    the cost of validating the batch. tests/unit/test_protocol_wire.py
    checks that each part is reached only from inside a request.
    """

    model_config = ConfigDict(extra="forbid")


_R = typing.TypeVar("_R", bound=_Request)
# JSON text holds a NUL only as the six bytes \u0000: a raw control
# character is not JSON (the parser refuses it), and \u has no other case.
_NUL_ESCAPE = rb"\u0000"


def request_from_json(model: type[_R], body: bytes) -> _R:
    r"""`model.model_validate_json(body)`, walked for NUL only where one can be.

    A body without the escape `\u0000` holds no NUL, so its validation skips
    the walk; one with it (or with an escaped backslash before `u0000`) is
    walked as usual. The walk was a tenth of the server's CPU while it took
    a flood of output.
    """
    if _NUL_ESCAPE in body:
        return model.model_validate_json(body)
    checked = _NUL_CHECKED.set(True)
    try:
        return model.model_validate_json(body)
    finally:
        _NUL_CHECKED.reset(checked)


class _Reply(_Wire):
    """What the server answers: unknown fields are ignored, so a newer server may
    add a field without breaking an older client or agent."""

    model_config = ConfigDict(extra="ignore")


# --- protocol version -----------------------------------------------------------

PROTOCOL_HEADER = "Schedulearn-Protocol"
# The server's range ("1..3") on every /api/ reply (protocol 3 on; protocol 2
# servers send it on a refusal only), so a client learns what the server speaks.
SERVER_PROTOCOL_HEADER = "Schedulearn-Server-Protocol"
# 1: releases up to 0.1.0, which sent no header and refused unknown reply fields.
# 2: replies tolerate unknown fields; clients send PROTOCOL_HEADER.
# 3: every /api/ reply carries SERVER_PROTOCOL_HEADER, and GET /api/v1/protocol
#    answers it; the calls and fields added after 2 (schedulearn/wire/protocol-3.json
#    has the whole wire; protocol_calls.SINCE the calls). A client learns the
#    server's version once and sends an older server only what it knows.
# 4: a node's drain reason (the drain call's `reason`, NodePublic.drain_reason);
#    web sign-in (PUT /api/v1/users/{name}/password, POST /api/v1/web-login);
#    queue trees: a queue's `parent` (QueueCreate, QueueUpdate with `clear_parent`,
#    QueuePublic); a protocol 3 server gets no parent (the CLI refuses to send one).
# 5: a heartbeat says which work batch its agent had acted on (`Heartbeat.work_through`,
#    echoing `WorkBatch.at`), so a heartbeat that waited in a busy server's queue loses
#    no run it could not have listed; an older server gets heartbeats without it.
PROTOCOL_VERSION = 5
OLDEST_PROTOCOL = 1
UNVERSIONED_PROTOCOL = 1


def speaks() -> str:
    """The versions this release's server accepts, e.g. "1..2" (or "2")."""
    if OLDEST_PROTOCOL == PROTOCOL_VERSION:
        return str(PROTOCOL_VERSION)
    return f"{OLDEST_PROTOCOL}..{PROTOCOL_VERSION}"


def protocol_of(header: str | None) -> int:
    """The version a `PROTOCOL_HEADER` value (None: absent) names; ValueError when malformed."""
    if header is None:
        return UNVERSIONED_PROTOCOL
    try:
        return int(header.strip())
    except ValueError:
        raise ValueError(
            f"the {PROTOCOL_HEADER} header must be a whole number such as "
            f"{PROTOCOL_VERSION}; got {header[:50]!r}"
        ) from None


class ProtocolRange(_Reply):
    """What `GET /api/v1/protocol` answers: the versions this server speaks."""

    oldest: int
    newest: int


def protocol_refusal(header: str | None, caller: str) -> str | None:
    """Why the server refuses a call whose `PROTOCOL_HEADER` is `header` (None when absent),
    or None when it serves it. `caller` names the client in the message ("agent", "CLI")."""
    try:
        version = protocol_of(header)
    except ValueError as exc:
        return str(exc)
    if version < OLDEST_PROTOCOL:
        return (
            f"this {caller} speaks protocol {version}, this server speaks {speaks()}; "
            f"upgrade the {caller}"
        )
    if version > PROTOCOL_VERSION:
        return (
            f"this {caller} speaks protocol {version}, this server speaks {speaks()}; "
            f"upgrade the server (or use a {caller} of the server's release)"
        )
    return None


# Integers that fit every database's 64-bit (ids) or 32-bit (small) columns.
Id = Annotated[int, Field(ge=0, le=2**62)]
Small = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]


# --- declared fields (core.views) -------------------------------------------

# Declared text fields on the wire, bounded as every hand-written field is
# (declared integers are `Small`). The blocks of declared fields at the end
# of JobSpec, JobPublic, NodeRegistration and NodePublic use them.
BoundedText = Annotated[str, Field(max_length=1000)]


# --- enums --------------------------------------------------------------------


class JobState(StrEnum):
    """A job's life: pending -> assigned -> running -> succeeded|failed|cancelled;
    preempting -> pending; lost when its node stops answering; timeout when
    stopped at its time limit (`--time`)."""

    PENDING = "pending"
    ASSIGNED = "assigned"
    RUNNING = "running"
    PREEMPTING = "preempting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    LOST = "lost"
    TIMEOUT = "timeout"

    @property
    def is_final(self) -> bool:
        return self in _FINAL_STATES

    @property
    def holds_gpus(self) -> bool:
        return self in _HOLDING_STATES


_FINAL_STATES = frozenset(
    {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT}
)
_HOLDING_STATES = frozenset({JobState.ASSIGNED, JobState.RUNNING, JobState.PREEMPTING})


class Launcher(StrEnum):
    NONE = "none"
    TORCHRUN = "torchrun"
    HOROVOD = "horovod"


class Executor(StrEnum):
    SUBPROCESS = "subprocess"
    DOCKER = "docker"


class StopReason(StrEnum):
    CANCEL = "cancel"
    PREEMPT = "preempt"
    LOST = "lost"
    GANG_FAILED = "gang_failed"


class EventKind(StrEnum):
    STARTED = "started"
    EXITED = "exited"
    FAILED_TO_START = "failed_to_start"


class LogStream(StrEnum):
    STDOUT = "stdout"
    STDERR = "stderr"


# --- agent contract -----------------------------------------------------------


class GpuInfo(_Request):
    index: int = Field(ge=0, le=4096)
    uuid: str = Field(default="", max_length=200)
    type: str = Field(default="", max_length=100)
    memory_mb: int = Field(default=0, ge=0, le=2**31 - 1)


class RunningJobReport(_Request):
    """A job an agent still runs (sent on registration and in every heartbeat)."""

    job_id: Id
    attempt: Small


# The longest unix account name Linux tools accept (useradd: 32; a little room).
UNIX_NAME_MAX = 64


# A node label and a job constraint: one word, as `core.capabilities.LABEL_PATTERN`
# (a unit test keeps the two the same; protocol imports no other package module).
LABEL_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/=-]{0,99}$"
Label = Annotated[str, Field(pattern=LABEL_PATTERN)]


class CapabilitiesReport(_Request):
    """What an agent's node can run (`core.capabilities.NodeCapabilities` on the wire)."""

    executors: list[Annotated[str, Field(max_length=50)]] = Field(
        default_factory=lambda: ["process"],
        max_length=20,
        description="Kinds of executor offered: process, container",
    )
    container_runtime: str = Field(
        default="", max_length=200, description="The container runtime found, '' for none"
    )
    labels: list[Label] = Field(default_factory=list, max_length=100)
    accounts: list[Annotated[str, Field(max_length=UNIX_NAME_MAX)]] | None = Field(
        default=None,
        max_length=100_000,
        description="Unix accounts jobs may run as on this node (an agent started as root "
        "runs each job as its owner's); None: every job runs as the agent's own user",
    )


class CapabilitiesPublic(CapabilitiesReport, _Reply):
    """A node's capabilities as the API shows them: a reply, so unknown fields are ignored."""

    model_config = ConfigDict(extra="ignore")


CONTAINMENT_DESCRIPTION = (
    "What confines the node's process jobs: cgroup v1, cgroup v2, container (an agent "
    "offering containers only), none (--no-cgroups); empty from an older agent"
)


class NodeRegistration(_Request):
    name: str = Field(min_length=1, max_length=200)
    address: str = Field(
        default="127.0.0.1", max_length=200, description="Address other nodes reach it at"
    )
    gpus: list[GpuInfo] = Field(default_factory=list)
    cpus: float = Field(default=0.0, ge=0)
    memory_gb: float = Field(default=0.0, ge=0)
    executors: list[Executor] = Field(default_factory=lambda: [Executor.SUBPROCESS])
    capabilities: CapabilitiesReport | None = Field(
        default=None,
        description="None from an agent older than capabilities: derived from executors",
    )
    running: list[RunningJobReport] = Field(default_factory=list)
    containment: str = Field(default="", max_length=100, description=CONTAINMENT_DESCRIPTION)

    @model_validator(mode="after")
    def _distinct_gpus(self) -> NodeRegistration:
        indices = [g.index for g in self.gpus]
        if len(set(indices)) != len(indices):
            raise ValueError(f"GPU indices must be distinct; got {sorted(indices)}")
        return self

    # Declared on core.views.NodeView: written by scripts/new-field, do not edit.
    # End of the declared fields.


class RegistrationReply(_Reply):
    heartbeat_seconds: float
    adopt: list[int] = Field(
        default_factory=list, description="Jobs the server still considers running here"
    )
    lost: list[int] = Field(default_factory=list, description="Jobs the agent must stop")
    lease_seconds: float | None = Field(
        default=None,
        description="The node's lease, renewed by this reply: counted from when the agent sent "
        "its request, it stops its jobs if no later reply renews it (None: no lease)",
    )
    lease_grace_seconds: float = Field(
        default=0.0, description="SIGTERM to SIGKILL of a job stopped because its lease lapsed"
    )


class GpuSample(_Request):
    index: int = Field(ge=0, le=4096)
    utilization_pct: float = Field(default=0.0, ge=0, le=100)
    memory_used_mb: int = Field(default=0, ge=0, le=2**31 - 1)


class Heartbeat(_Request):
    name: str = Field(min_length=1, max_length=200)
    gpus: list[GpuSample] = Field(default_factory=list)
    running: list[RunningJobReport] = Field(default_factory=list)
    work_through: float | None = Field(
        default=None,
        description="The `at` of the newest work batch this agent had acted on when it built "
        "this heartbeat (the server's clock, echoed): a run handed out after it is not yet in "
        "`running`, and its absence is no sign that the run ended (None: judged as before, "
        "by when the server records the heartbeat) (protocol 5)",
    )


class HeartbeatReply(_Reply):
    heartbeat_seconds: float
    reregister: bool = Field(
        default=False, description="The server does not know this node (or marked it down)"
    )
    lease_seconds: float | None = Field(
        default=None,
        description="The node's lease, renewed by this reply: counted from when the agent sent "
        "its request, it stops its jobs if no later reply renews it (None: no lease)",
    )
    lease_grace_seconds: float = Field(
        default=0.0, description="SIGTERM to SIGKILL of a job stopped because its lease lapsed"
    )


class GangInfo(_Reply):
    world_size: int = Field(description="Number of nodes in the gang")
    node_rank: int
    master_addr: str
    master_port: int
    nproc_per_node: int


# The server's default `checkpoint_max_bytes`; an agent packs no larger a tar
# for a server too old to name its limit in the assignment.
DEFAULT_CHECKPOINT_MAX_BYTES = 2 * 1024**3


class CheckpointRef(_Reply):
    """A checkpoint the server holds for a job (uploaded by the agent of an earlier attempt)."""

    attempt: int = Field(description="The attempt that saved it")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size_bytes: int = Field(ge=0)


class ProgressReport(_Request):
    """One `schedulearn.runtime.report(...)` call of a job, as the agent read it."""

    at: float
    step: int | None = None
    epoch: int | None = None
    loss: float | None = None
    accuracy: float | None = None
    samples_per_sec: float | None = None
    total_epochs: int | None = None
    # Declared once, in core: the adaptive runtime writes it, the server's
    # goodput model reads it (`server.services.goodput`).
    goodput: GoodputReport | None = Field(
        default=None,
        description="Batch configuration, step times and gradient statistics "
        "(`runtime.AdaptiveBatch`), for goodput-aware policies",
    )
    metrics: dict[Annotated[str, Field(max_length=100)], float] = Field(
        default_factory=dict, max_length=50, description="Any other keyword the job reported"
    )


class ProgressPublic(ProgressReport, _Reply):
    """A progress report as the API shows it: a reply, so unknown fields are ignored."""

    model_config = ConfigDict(extra="ignore")


class ProgressBatch(_Request):
    """New progress reports of one run, oldest first (`POST .../jobs/{id}/progress`)."""

    attempt: Small
    node: str = Field(default="", max_length=200)
    reports: list[ProgressReport] = Field(max_length=1000)


class Assignment(_Reply):
    """Start one job (or one node's part of a gang) on these GPUs."""

    job_id: int
    attempt: int
    name: str = ""
    user: str = ""
    command: list[str] | str
    image: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    # Values no reply to a user ever holds; the agent puts them in the job's
    # environment and never logs them (repr=False keeps them out of reprs).
    secret_env: dict[str, str] = Field(default_factory=dict, repr=False)
    workdir: str | None = None
    gpus: list[int] = Field(default_factory=list, description="GPU indices on this node")
    cpus: float = 0.0
    memory_gb: float = 0.0
    shm_size: str | None = None
    launcher: Launcher = Launcher.NONE
    executor: Executor = Executor.SUBPROCESS
    gang: GangInfo | None = None
    checkpoint_dir: str | None = None
    checkpoint: CheckpointRef | None = Field(
        default=None,
        description="Download this checkpoint from the server into the job's checkpoint "
        "directory before starting (no shared checkpoint path)",
    )
    upload_checkpoint: bool = Field(
        default=False,
        description="After a preemption, pack the checkpoint directory and upload it to "
        "the server before reporting the exit (rank 0 of a job without a shared path)",
    )
    checkpoint_max_bytes: int | None = Field(
        default=None,
        gt=0,
        description="The largest checkpoint the server takes: the agent stops packing "
        "before its tar passes it (None: the server's default)",
    )
    run_as: RunAs | None = Field(
        default=None,
        description="The owner's unix account: an agent started as root runs the job as "
        "it; None when the owner has none (such an agent then refuses the job)",
    )


class StopOrder(_Reply):
    job_id: int
    attempt: int
    reason: StopReason
    grace_seconds: float = 10.0


class WorkBatch(_Reply):
    starts: list[Assignment] = Field(default_factory=list)
    stops: list[StopOrder] = Field(default_factory=list)
    at: float | None = Field(
        default=None,
        description="When the server took this batch (its clock): the agent echoes it in its "
        "heartbeats' `work_through` once it has acted on the batch (None: an older server)",
    )


class JobEvent(_Request):
    attempt: Small
    node: str = Field(
        default="", max_length=200, description="The reporting node (tells a gang's parts apart)"
    )
    kind: EventKind
    exit_code: Small | None = None
    message: str = Field(default="", max_length=10_000)
    at: float
    on_its_own: bool = Field(
        default=False,
        description="An exit: the run ended before any stop order reached it, so its exit "
        "code is its own even if the server has begun preempting the job meanwhile",
    )


# An exit report's message starts with this when the kernel's OOM killer ended
# the run in its memory limit ("out of memory: limit 8 GB"): the server makes
# it the job's reason instead of the bare exit code the kill leaves.
OOM_MESSAGE_PREFIX = "out of memory"


class JobEventReport(JobEvent):
    """A `JobEvent` with the job it is about, for `EventBatch`."""

    job_id: Id


class EventBatch(_Request):
    """Events of many jobs at once: an agent sends what piled up while its last
    batch was on the way, and the server records them in one transaction."""

    events: list[JobEventReport] = Field(min_length=1, max_length=1000)


# The longest line of output the server takes (agents cut lines far shorter).
LOG_LINE_MAX_CHARS = 1_000_000


class LogLine(_RequestPart):
    seq: Id
    stream: LogStream = LogStream.STDOUT
    text: str = Field(max_length=LOG_LINE_MAX_CHARS)
    at: float


class LogBatch(_Request):
    attempt: Small
    node: str = Field(
        default="", max_length=200, description="The reporting node (tells a gang's parts apart)"
    )
    lines: list[LogLine] = Field(max_length=10_000)


class Ack(_Reply):
    ok: bool = True
    ignored: bool = Field(default=False, description="The report was for an old attempt")
    full_log_wanted: bool = Field(
        default=False,
        description="(log batches) The server cut this job's stored log at its per-job cap: "
        "upload the attempt's whole output when it ends",
    )


class EventAcks(_Reply):
    acks: list[Ack] = Field(
        description="One per event, in order; `ok: false` means it was not recorded "
        "(a temporary failure): send it again"
    )


# --- user API -----------------------------------------------------------------

_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def env_key_problem(key: str) -> str | None:
    """What is wrong with `key` as an environment variable's name, or None."""
    if not key:
        return "remove the empty key"
    if _ENV_KEY.match(key):
        return None
    if "=" in key:
        return "a name cannot hold '='; give KEY and VALUE apart (submit --env KEY=VALUE)"
    if "\0" in key:
        return "a name cannot hold a NUL byte"
    if key[0].isdigit():
        return "a name cannot start with a digit"
    return "use letters, digits and '_' only (e.g. MY_VAR)"


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$", re.IGNORECASE)
_GB_PER_UNIT = {"": 1.0, "k": 1 / 1024**2, "m": 1 / 1024, "g": 1.0, "t": 1024.0}
_SECONDS_PER_UNIT = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_memory_gb(value: float | int | str) -> float:
    """`16`, `16G`, `512Mi`, `1.5T` -> gigabytes."""
    if isinstance(value, int | float):
        return float(value)
    match = _SIZE.match(value)
    if not match:
        raise ValueError(f"memory {value!r} is not a size; write e.g. 16G, 512M or 16")
    return float(match.group(1)) * _GB_PER_UNIT[match.group(2).lower()]


def parse_duration(value: float | int | str) -> float:
    """`90`, `90s`, `30m`, `2h`, `1d` -> seconds."""
    if isinstance(value, int | float):
        return float(value)
    match = _DURATION.match(value)
    if not match:
        raise ValueError(f"duration {value!r} is not a duration; write e.g. 90, 30m or 2h")
    return float(match.group(1)) * _SECONDS_PER_UNIT[match.group(2).lower()]


_CLOCK_TIME = re.compile(r"^\s*(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)\s*$")


def parse_time_limit(value: float | int | str) -> float:
    """A wall-clock limit: what `parse_duration` reads, or Slurm's clock forms
    `MM:SS`, `HH:MM:SS`, `D-HH:MM:SS` -> seconds."""
    if isinstance(value, str) and (clock := _CLOCK_TIME.match(value)):
        days, hours, minutes, seconds = (int(g or 0) for g in clock.groups())
        return float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)
    try:
        return parse_duration(value)
    except ValueError:
        raise ValueError(
            f"time limit {value!r} is not a duration; write e.g. 90 (seconds), 30m, 4h, "
            "1d or 1-12:00:00"
        ) from None


def parse_array(text: str) -> tuple[int, int, int | None]:
    """A job array as `submit --array` and the web form's Array field write it:
    `0-9%2` -> (first index 0, 10 tasks, at most 2 at once); `4` -> (0, 4, None)."""
    body, sep, limit_text = text.strip().partition("%")
    first_text, dash, last_text = body.partition("-")
    try:
        if dash:
            first, last = int(first_text), int(last_text)
        else:
            first, last = 0, int(first_text) - 1
        limit = int(limit_text) if sep else None
    except ValueError:
        first, last, limit = 0, -1, None
    if first < 0 or last < first or (limit is not None and limit < 1):
        raise ValueError(
            f"{text!r}: write FIRST-LAST (0-9: ten tasks, indices 0 to 9) or a count (10), "
            "optionally %N to run at most N at once (0-9%2)"
        )
    return first, last - first + 1, limit


Name = Annotated[str, Field(max_length=200)]


class JobSpec(_Request):
    """What a user submits (JSON, or the same keys in YAML)."""

    name: Name = ""
    command: (
        list[Annotated[str, Field(max_length=10_000)]] | Annotated[str, Field(max_length=100_000)]
    ) = Field(description="argv list, or a shell string run with /bin/sh -c")
    image: str | None = Field(default=None, max_length=500)
    gpus: int | None = Field(default=None, ge=0, le=4096)
    min_gpus: int | None = Field(default=None, ge=0, le=4096)
    max_gpus: int | None = Field(default=None, ge=0, le=4096)
    cpus: float = Field(default=0.0, ge=0, le=100_000)
    memory: float | str = Field(default=0.0, description="GB as a number, or e.g. '16G'")
    gpu_type: str | None = Field(default=None, max_length=100)
    priority: int = Field(default=0, ge=-1_000_000, le=1_000_000)
    deadline: float | datetime | None = Field(
        default=None, description="Epoch seconds or an ISO 8601 time"
    )
    estimated_duration: float | str | None = Field(
        default=None, description="Seconds, or e.g. '30m', '2h'"
    )
    model: str | None = Field(default=None, max_length=200)
    preemptible: bool = False
    env: dict[Annotated[str, Field(max_length=200)], Annotated[str, Field(max_length=10_000)]] = (
        Field(default_factory=dict)
    )
    secret_env: dict[
        Annotated[str, Field(max_length=200)],
        Annotated[str, Field(max_length=10_000)],
    ] = Field(
        default_factory=dict,
        repr=False,
        description="Variables the job sees whose values are never shown again, to "
        "anyone (replies list the keys only); stored in the server's database as given",
    )
    workdir: str | None = Field(default=None, max_length=4096)
    shm_size: str | None = Field(default=None, max_length=50)
    launcher: Launcher = Launcher.NONE
    count: int = Field(default=1, ge=1, le=1000, description="Submit a job array of this size")
    array_start: int = Field(
        default=0,
        ge=0,
        le=10**6,
        description="With count: the first task's index (`--array 5-9`: 5, count 5); task i "
        "gets index array_start + i, in SCHEDULEARN_ARRAY_INDEX",
    )
    array_limit: int | None = Field(
        default=None,
        ge=1,
        le=1000,
        description="At most this many tasks of the array run at once (`--array 0-9%2`: 2)",
    )
    max_restarts: int = Field(default=3, ge=0, le=100)
    constraints: list[Label] = Field(
        default_factory=list,
        max_length=50,
        description="Node labels the job needs, all of them (like Slurm features)",
    )
    time_limit: float | str | None = Field(
        default=None,
        description="Wall-clock limit of the job's run time (Slurm's --time): seconds, or "
        "e.g. '30m', '4h', '1-12:00:00'; at the limit the job gets SIGTERM, then SIGKILL "
        "after the grace period, and ends 'timeout'",
    )
    dependency: str | None = Field(
        default=None,
        max_length=1000,
        description="Start only after other jobs end (Slurm's --dependency): "
        "afterok|afterany|afternotok:ID[:ID...], several joined by ','; an array's id "
        "stands for every task of the array",
    )

    @field_validator("time_limit")
    @classmethod
    def _time_limit_is_duration(cls, value: float | str | None) -> float | str | None:
        if value is not None and not 0 < parse_time_limit(value) <= 10 * 365 * 86400:
            raise ValueError("time_limit must be more than 0 and at most ten years")
        return value

    @field_validator("dependency")
    @classmethod
    def _dependency_parses(cls, value: str | None) -> str | None:
        # Stored canonical (`afterok:12:13,afterany:14`); a bad one says what to write.
        return None if value is None or not value.strip() else dependencies.canonical(value)

    @field_validator("command")
    @classmethod
    def _command_not_empty(cls, value: list[str] | str) -> list[str] | str:
        if (isinstance(value, str) and not value.strip()) or (
            isinstance(value, list) and not value
        ):
            raise ValueError("command is empty; give an argv list or a shell string")
        return value

    @field_validator("memory")
    @classmethod
    def _memory_is_size(cls, value: float | str) -> float | str:
        gb = parse_memory_gb(value)
        if gb < 0 or gb > 1_000_000:
            raise ValueError("memory must be between 0 and 1000000 GB")
        return value

    @field_validator("estimated_duration")
    @classmethod
    def _duration_is_duration(cls, value: float | str | None) -> float | str | None:
        if value is not None and not 0 <= parse_duration(value) <= 10 * 365 * 86400:
            raise ValueError("estimated_duration must be between 0 and ten years")
        return value

    @field_validator("deadline")
    @classmethod
    def _deadline_finite(cls, value: float | datetime | None) -> float | datetime | None:
        if isinstance(value, float | int) and not 0 <= value < 1e11:
            raise ValueError("deadline must be epoch seconds (or an ISO 8601 time)")
        return value

    @field_validator("env", "secret_env")
    @classmethod
    def _env_keys_are_names(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        # Checked here, so the CLI, the API and the web form all refuse a key
        # the agent could not put in an environment, at submit (it once failed
        # only when the job started). The key only: a value may be a secret.
        # (A NUL in a key or value is refused before, by `_no_nul`, naming the key.)
        for key in value:
            problem = env_key_problem(key)
            if problem is not None:
                raise ValueError(f"{info.field_name} key {key!r} is not a variable name: {problem}")
        return value

    @model_validator(mode="after")
    def _secrets_not_in_env(self) -> JobSpec:
        both = sorted(set(self.env) & set(self.secret_env))
        if both:
            raise ValueError(
                f"{', '.join(both)} is in both env and secret_env; give it in one of them"
            )
        return self

    @model_validator(mode="after")
    def _sizes_agree(self) -> JobSpec:
        if (self.min_gpus is None) != (self.max_gpus is None):
            raise ValueError("give both min_gpus and max_gpus for an elastic job, or neither")
        if self.min_gpus is not None and self.max_gpus is not None:
            if self.min_gpus > self.max_gpus:
                raise ValueError(f"min_gpus ({self.min_gpus}) is above max_gpus ({self.max_gpus})")
            if self.gpus is not None and not self.min_gpus <= self.gpus <= self.max_gpus:
                raise ValueError(f"gpus ({self.gpus}) must lie between min_gpus and max_gpus")
        return self

    # Normalised figures the server stores.
    @property
    def requested_gpus(self) -> int:
        if self.gpus is not None:
            return self.gpus
        if self.min_gpus is not None:
            return self.min_gpus
        return 1

    @property
    def memory_gb(self) -> float:
        return parse_memory_gb(self.memory)

    @property
    def estimated_seconds(self) -> float | None:
        return None if self.estimated_duration is None else parse_duration(self.estimated_duration)

    @property
    def time_limit_seconds(self) -> float | None:
        return None if self.time_limit is None else parse_time_limit(self.time_limit)

    @property
    def deadline_epoch(self) -> float | None:
        if isinstance(self.deadline, datetime):
            return self.deadline.timestamp()
        return self.deadline

    # Declared on core.views.JobView: written by scripts/new-field, do not edit.
    queue: BoundedText = ""
    # End of the declared fields.


class JobPublic(_Reply):
    """One job as the API shows it.

    To a caller other than its owner or an admin, the job's details
    (`server.services.visibility.DETAILS`: command, env, workdir, message,
    progress, checkpoint, secret_env_keys) are null and `details_hidden` is true.
    """

    id: int
    name: str
    user: str
    state: JobState
    command: list[str] | str | None
    image: str | None
    gpus: int
    min_gpus: int | None
    max_gpus: int | None
    cpus: float
    memory_gb: float
    gpu_type: str | None
    priority: int
    deadline: float | None
    estimated_duration: float | None
    model: str | None
    preemptible: bool
    env: dict[str, str] | None
    workdir: str | None
    shm_size: str | None
    launcher: Launcher
    array_id: int | None
    array_index: int | None
    max_restarts: int
    restarts: int
    attempt: int
    submitted_at: float
    started_at: float | None
    ended_at: float | None
    exit_code: int | None
    message: str | None
    placement: dict[str, list[int]] | None
    queue_position: int | None = Field(
        default=None, description="1 for the head of the queue; None unless pending"
    )
    waiting_reason: str | None = None
    duration_estimate: float | None = Field(
        default=None,
        description="Expected total run time in seconds (see `duration_source`); "
        "None when unknown. Pending and running jobs only",
    )
    time_left: float | None = Field(
        default=None,
        description="A running job with a time_limit: seconds of run time it has left "
        "before it is stopped (as of the reply)",
    )
    duration_source: Literal["progress", "estimate", "history"] | None = Field(
        default=None,
        description="progress: extrapolated from the progress the job reports; estimate: "
        "the submitted estimated_duration, or the time_limit when nothing else gives a "
        "figure; history: median run time of similar finished jobs (same user and name, "
        "or same command); each bounded by the time_limit",
    )
    predicted_start_at: float | None = Field(
        default=None,
        description="Pending jobs: when the job is expected to start (epoch seconds), "
        "from simulating the current cluster forward under the policy in force; None "
        "when it cannot be predicted (it waits on a job of unknown duration)",
    )
    predicted_end_at: float | None = Field(
        default=None,
        description="Pending and running jobs: when the job is expected to end (epoch "
        "seconds), by the same forecast; None when unknown",
    )
    preemptions: int = Field(default=0, description="Times the job was suspended and requeued")
    migrations: int = Field(default=0, description="Times the job was moved to other GPUs")
    resizes: int = Field(default=0, description="Times the job was restarted at a new size")
    progress: ProgressPublic | None = Field(
        default=None, description="The latest progress the job reported (any attempt)"
    )
    checkpoint: CheckpointRef | None = Field(
        default=None, description="The checkpoint the server holds for the job, if any"
    )
    secret_env_keys: list[str] | None = Field(
        default_factory=list,
        description="The keys of the job's secret_env; their values are never shown",
    )
    details_hidden: bool = Field(
        default=False,
        description="True when the caller is neither the job's owner nor an admin: "
        "command, env, workdir, message, progress, checkpoint and secret_env_keys are "
        "then null (hidden, not empty)",
    )

    # Declared on core.views.JobView: written by scripts/new-field, do not edit.
    constraints: tuple[BoundedText, ...] = ()
    queue: BoundedText = ""
    array_size: Small | None = None
    array_limit: Small | None = None
    held: bool = False
    dependency: BoundedText | None = None
    time_limit: float | None = None
    # End of the declared fields.


def spec_again(job: JobPublic) -> JobSpec:
    """The spec that submits `job` again (`schedulearn resubmit`, the web's Resubmit):
    its spec fields that differ from a spec's defaults. Never its secret values (they
    are never sent back), nor its array's count and limit: it is one new job."""
    shown = job.model_dump(mode="json")
    spec: dict[str, typing.Any] = {}
    for name, info in JobSpec.model_fields.items():
        if name in ("count", "array_start", "array_limit", "secret_env"):
            continue
        value = shown.get(name)
        if value is None or value == info.get_default(call_default_factory=True):
            continue
        spec[name] = value
    if job.memory_gb:
        spec["memory"] = f"{job.memory_gb:g}G"
    if job.estimated_duration:
        spec["estimated_duration"] = f"{job.estimated_duration:g}s"
    return JobSpec.model_validate(spec)


class JobUpdate(_Request):
    """What may change after submission (`schedulearn update ID --priority N`)."""

    priority: int | None = Field(
        default=None, ge=-(2**31), le=2**31 - 1, description="The new priority"
    )


class JobMove(_Request):
    """Move (or resize) a running preemptible job, through checkpoint and restart."""

    placement: dict[Annotated[str, Field(min_length=1, max_length=200)], list[int]] = Field(
        min_length=1,
        max_length=64,
        description='Target GPUs by node, e.g. {"n2": [0, 1]}; the same number of GPUs is '
        "a migration, another number (within min_gpus..max_gpus) a resize",
    )


class ProgressHistory(_Reply):
    job_id: int
    reports: list[ProgressPublic] = Field(description="Oldest first; the server keeps the last 200")


class JobList(_Reply):
    items: list[JobPublic]
    total: int
    offset: int
    limit: int


class SubmitReply(_Reply):
    ids: list[int]
    jobs: list[JobPublic]


class GpuPublic(_Reply):
    index: int
    uuid: str
    type: str
    memory_mb: int
    job_id: int | None
    utilization_pct: float | None
    memory_used_mb: int | None


class NodePublic(_Reply):
    name: str
    address: str
    healthy: bool
    cpus: float
    memory_gb: float
    executors: list[str]
    last_seen: float
    gpus: list[GpuPublic]
    capabilities: CapabilitiesPublic = Field(
        default_factory=CapabilitiesPublic,
        description="What the node can run: executor kinds, container runtime, labels",
    )
    drained: bool = Field(
        default=False,
        description="Drained by an admin: its running jobs go on, no new job starts there",
    )
    containment: str = Field(default="", description=CONTAINMENT_DESCRIPTION)

    # Declared on core.views.NodeView: written by scripts/new-field, do not edit.
    drain_reason: BoundedText = ""
    # End of the declared fields.


class NodeList(_Reply):
    items: list[NodePublic]


class PolicyPublic(_Reply):
    spec: str
    name: str
    tick_seconds: float | None
    available: list[str]


class PolicyForecast(_Reply):
    """One policy's predicted figures for the current queue (see `PolicyPreview`)."""

    spec: str
    in_force: bool
    mean_jct: float | None = Field(
        description="Mean job completion time in seconds, from each job's submission, "
        "over the compared jobs (see `PolicyPreview.compared`)"
    )
    makespan: float | None = Field(
        description="Seconds from now until the last predicted end of a compared job"
    )
    utilisation: float | None = Field(
        description="Busy GPU-seconds over healthy GPU-seconds, from now to the makespan"
    )
    predicted: int = Field(description="Jobs whose end is predicted")
    unknown: int = Field(description="Jobs whose end is not (no duration estimate, or behind one)")
    preemptions: int
    wall_seconds: float = Field(description="How long the simulation took")
    error: str | None = Field(default=None, description="Why this policy has no figures")


class PolicyPreview(_Reply):
    """The current queue simulated forward under each policy, for comparison."""

    at: float
    in_force: str
    pending: int
    running: int
    without_estimate: int = Field(description="Pending or running jobs with no duration estimate")
    compared: int = Field(
        default=0,
        description="Jobs whose end every listed policy predicts: mean JCT, makespan and "
        "utilisation are over these, so the rows compare like with like",
    )
    horizon_seconds: float
    policies: list[PolicyForecast]


class PolicySet(_Request):
    spec: str = Field(min_length=1, max_length=500, description="e.g. fifo or fifo:backfill=true")


class LogLinePublic(_Reply):
    seq: int
    attempt: int
    stream: LogStream
    text: str
    at: float


class LogPage(_Reply):
    job_id: int
    lines: list[LogLinePublic]
    next_after: int = Field(description="Pass as `after` to fetch only newer lines")


# --- users and tokens (identity) -------------------------------------------------

USER_NAME_PATTERN = r"^[A-Za-z0-9_.@-]+$"
# POSIX portable user names (useradd's default rule, upper case allowed).
UNIX_ACCOUNT_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}$"


class RunAs(_Reply):
    """The unix account a user's jobs run as on the GPU hosts (an agent started as
    root switches to it; an agent started as an ordinary user runs everything as itself)."""

    account: str = Field(description="The account's name on the GPU hosts")
    allow_root: bool = Field(
        default=False, description="An admin allowed this user's jobs to run as root"
    )


class UserCreate(_Request):
    name: str = Field(min_length=1, max_length=100, pattern=USER_NAME_PATTERN)
    unix_account: str | None = Field(
        default=None,
        pattern=UNIX_ACCOUNT_PATTERN,
        description="The unix account their jobs run as on the GPU hosts (default: the name)",
    )
    allow_root: bool = Field(
        default=False, description="Allow this user's jobs to run as root (unix_account root)"
    )
    priority_max: int | None = Field(
        default=None,
        ge=-1_000_000,
        le=1_000_000,
        description="Highest priority this user may give a job (default: the server's setting)",
    )


class UserUpdate(_Request):
    """Change a user's record; fields left out stay as they are."""

    unix_account: str | None = Field(default=None, pattern=UNIX_ACCOUNT_PATTERN)
    allow_root: bool | None = None
    priority_max: int | None = Field(default=None, ge=-1_000_000, le=1_000_000)
    clear_priority_max: bool = Field(
        default=False, description="Go back to the server's priority range"
    )
    disabled: bool | None = Field(
        default=None,
        description="true: their tokens and web sessions stop working at once; false: again",
    )


class UserPublic(_Reply):
    name: str
    unix_account: str = Field(description="The account their jobs run as on the GPU hosts")
    allow_root: bool
    priority_min: int = Field(description="Lowest priority they may give a job")
    priority_max: int = Field(description="Highest priority they may give a job")
    priority_max_own: bool = Field(
        default=False, description="priority_max is set on this user (not the server's)"
    )
    created_at: float
    disabled_at: float | None = None


class UserList(_Reply):
    items: list[UserPublic]


class TokenState(StrEnum):
    ACTIVE = "active"
    EXPIRED = "expired"
    REVOKED = "revoked"


class TokenCreate(_Request):
    user: str | None = Field(
        default=None,
        min_length=1,
        max_length=100,
        pattern=USER_NAME_PATTERN,
        description="Who the token is for (default: the caller)",
    )
    role: Literal["user", "admin", "agent"] = "user"
    name: str = Field(default="", max_length=100, description="A label to tell tokens apart")
    expires: str | None = Field(
        default=None,
        max_length=40,
        description="When it stops working: a span from now (90m, 12h, 30d, 8w) or a UTC "
        "date or time (2027-01-31, 2027-01-31T18:00); default: never",
    )


class TokenPublic(_Reply):
    id: int = 0
    user: str
    role: str
    name: str = ""
    expires_at: float | None = None
    token: str = Field(description="Shown once; the server stores only its hash")


class TokenInfo(_Reply):
    """A token as `token list` shows it: never its secret."""

    id: int
    user: str
    role: str
    name: str
    state: TokenState
    created_at: float
    expires_at: float | None = None
    last_used_at: float | None = Field(
        default=None, description="Last time it was checked (to within a minute)"
    )
    revoked_at: float | None = None


class TokenList(_Reply):
    items: list[TokenInfo]


PASSWORD_MIN_LENGTH = 10


class PasswordSet(_Request):
    """A user's web sign-in password (their own, or anyone's as admin)."""

    password: str = Field(max_length=1000, repr=False)

    @field_validator("password")
    @classmethod
    def _long_enough(cls, value: str) -> str:
        if len(value) < PASSWORD_MIN_LENGTH:
            raise ValueError(
                f"the password is {len(value)} characters; give at least {PASSWORD_MIN_LENGTH}"
            )
        return value


class PasswordSetReply(_Reply):
    user: str
    role: str = Field(description="What a web sign-in with it gets: user or admin")
    set_at: float


class WebLoginLink(_Reply):
    """A one-time web sign-in link (`schedulearn web-login`)."""

    user: str
    role: str
    code: str = Field(description="Works once, until expires_at")
    path: str = Field(description="Open the server's address with this path in a browser")
    expires_at: float


class WhoAmI(_Reply):
    user: str
    role: str
    priority_min: int | None = Field(
        default=None, description="Lowest priority you may give a job (none: no bound)"
    )
    priority_max: int | None = Field(
        default=None, description="Highest priority you may give a job (none: no bound)"
    )


class Health(_Reply):
    status: Literal["ok"] = "ok"
    database: str
    policy: str


class ErrorBody(_Reply):
    """Every error the API returns: what went wrong and what to change."""

    error: str
    detail: str | list[dict[str, object]] | None = None


class TransitionPublic(_Reply):
    """One change of a job's state (its history, oldest first)."""

    at: float
    from_state: JobState
    to_state: JobState
    attempt: int
    message: str


class JobHistory(_Reply):
    job_id: int
    transitions: list[TransitionPublic]
    details_hidden: bool = Field(
        default=False,
        description="True when the caller is neither the job's owner nor an admin: "
        "the transitions' messages (which may quote the command or workdir) are blank",
    )


# --- throughput profiles ------------------------------------------------------


class ProfileIn(_Request):
    """One measured speed to store (`POST /api/v1/profiles`)."""

    model: str = Field(min_length=1, max_length=200)
    batch_size: int | None = Field(default=None, ge=1, le=10**7)
    gpu_type: str = Field(min_length=1, max_length=100)
    gpu_count: int = Field(default=1, ge=1, le=4096)
    spread: bool = Field(default=False, description="The GPUs sat on more than one server")
    steps_per_sec: float = Field(gt=0, description="Training steps (iterations) per second")


class ProfileImport(_Request):
    """Profiles to store, e.g. read from a Gavel throughput file by the CLI."""

    source: str = Field(default="import", max_length=200)
    profiles: list[ProfileIn] = Field(max_length=100_000)


class ProfilePublic(_Reply):
    model: str
    batch_size: int | None
    gpu_type: str
    gpu_count: int
    spread: bool
    steps_per_sec: float
    samples_per_sec: float | None = Field(
        description="As reported by jobs (None for imported profiles)"
    )
    source: str = Field(description="'job N' for a profile measured live, or the import's name")
    reports: int
    updated_at: float


class ProfileList(_Reply):
    items: list[ProfilePublic]


class ProfileImportReply(_Reply):
    stored: int


# --- node enrollment (per-node credentials) ------------------------------------

NodeName = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.@:-]+$")]


class NodeAdd(_Request):
    """`schedulearn node add NAME`: a one-time join token for a node (admin)."""

    name: NodeName
    expires_seconds: float = Field(
        default=3600.0, gt=0, le=7 * 86400, description="How long the join token is valid"
    )


class JoinTokenPublic(_Reply):
    node: str
    join_token: str = Field(description="Shown once; works once, until `expires_at`")
    expires_at: float


class NodeJoin(_Request):
    """An agent exchanges a join token for its node's credential (`/api/v1/agent/join`)."""

    join_token: str = Field(min_length=1, max_length=500)


class NodeJoined(_Reply):
    node: str = Field(description="The node the credential is bound to")
    credential: str = Field(description="The agent's credential for this node; shown once")


class NodeRemoved(_Reply):
    name: str
    lost_jobs: list[int] = Field(default_factory=list, description="Jobs requeued by the removal")


# --- tenant queues and usage (issue 12) --------------------------------------------

QUEUE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
QueueName = Annotated[str, Field(min_length=1, max_length=63, pattern=QUEUE_NAME_PATTERN)]
UserName = Annotated[str, Field(min_length=1, max_length=100, pattern=USER_NAME_PATTERN)]
# GPU type ("" = any type) -> guaranteed GPUs of that type.
Guarantee = dict[Annotated[str, Field(max_length=100)], Annotated[int, Field(ge=0, le=1_000_000)]]


class QueueBase(_Request):
    """What a queue is promised: guaranteed GPUs (per GPU type, "" = any), a limit, a
    weight, and the queue it sits under (`parent`: it shares that queue's guarantee
    with its siblings first, docs/queues.md "Queue trees").
    `QueuePublic` derives from it too (a reply, so unknown fields are ignored there)."""

    guaranteed: Guarantee = Field(
        default_factory=dict,
        description='GPU type -> guaranteed GPUs ("" = any type): {"": 8} or {"v100": 4}',
    )
    limit: int | None = Field(
        default=None, ge=0, le=1_000_000, description="The most GPUs it may hold at once"
    )
    weight: float = Field(default=1.0, gt=0, le=1_000_000, description="Share of idle GPUs")
    parent: QueueName | None = Field(
        default=None,
        description="The queue it sits under (its guarantee is part of the parent's); "
        "None: a root queue",
    )


class QueueCreate(QueueBase):
    """`schedulearn queue add NAME` (admin)."""

    name: QueueName
    users: list[UserName] = Field(
        default_factory=list,
        max_length=10_000,
        description="Members: who may submit to it (none: everyone may)",
    )
    default_for: list[UserName] = Field(
        default_factory=list,
        max_length=10_000,
        description="Members whose jobs go to this queue when they name none",
    )
    overcommit: bool = Field(
        default=False,
        description="Accept a guarantee that takes the queues' total beyond the cluster's GPUs",
    )


class QueueUpdate(_Request):
    """`schedulearn queue set NAME` (admin); fields left out stay as they are."""

    guaranteed: Guarantee | None = None
    limit: int | None = Field(default=None, ge=0, le=1_000_000)
    clear_limit: bool = Field(default=False, description="Remove the limit")
    weight: float | None = Field(default=None, gt=0, le=1_000_000)
    parent: QueueName | None = Field(default=None, description="Move it under this queue")
    clear_parent: bool = Field(default=False, description="Make it a root queue")
    add_users: list[UserName] = Field(default_factory=list, max_length=10_000)
    remove_users: list[UserName] = Field(default_factory=list, max_length=10_000)
    default_for: list[UserName] = Field(
        default_factory=list,
        max_length=10_000,
        description="Make this queue these users' default (they become members)",
    )
    overcommit: bool = Field(
        default=False,
        description="Accept a guarantee that takes the queues' total beyond the cluster's GPUs",
    )


class QueuePublic(QueueBase, _Reply):
    model_config = ConfigDict(extra="ignore")

    name: str
    guaranteed_gpus: int = Field(description="All guaranteed GPUs, every type")
    users: list[str] = Field(default_factory=list, description="Members (none: open to everyone)")
    default_for: list[str] = Field(default_factory=list)
    used: int = Field(default=0, description="GPUs its jobs hold now")
    pending_jobs: int = 0
    pending_gpus: int = 0
    share: float = Field(default=0.0, description="Its fair share of the GPUs now")
    declared: bool = Field(default=True, description="False: the undeclared best-effort default")
    created_at: float = 0.0

    @property
    def summary(self) -> str:
        """ "team-a uses 12 of its 8 guaranteed GPUs" """
        return f"{self.name} uses {self.used} of its {self.guaranteed_gpus} guaranteed GPUs"


class QueueList(_Reply):
    items: list[QueuePublic]
    promised: int = Field(
        default=0,
        description="Guaranteed GPUs of the root queues together (a child's are its parent's)",
    )
    cluster_gpus: int = Field(default=0, description="GPUs of every registered node")

    def tree(self) -> list[tuple[int, QueuePublic]]:
        """The items as a tree, each with its depth: every root queue in listed order,
        followed by its children (depth 1), theirs (depth 2), ... An item whose
        parent is not listed is shown as a root."""
        names = {q.name for q in self.items}
        children: dict[str, list[QueuePublic]] = {}
        for q in self.items:
            if q.parent is not None and q.parent in names:
                children.setdefault(q.parent, []).append(q)
        out: list[tuple[int, QueuePublic]] = []

        def walk(q: QueuePublic, depth: int) -> None:
            out.append((depth, q))
            for child in children.get(q.name, []):
                walk(child, depth + 1)

        for q in self.items:
            if q.parent is None or q.parent not in names:
                walk(q, 0)
        return out

    def summary_of(self, q: QueuePublic) -> str:
        """`q.summary`, or for a parent what its own jobs hold of the part of its
        guarantee left to them now (`used` and `guaranteed_gpus` are its own jobs'):
        "research's own jobs use 0 of the 1 GPUs its guarantee leaves them (3 are
        promised to its children)"."""
        if not any(c.parent == q.name for c in self.items):
            return q.summary
        return (
            f"{q.name}'s own jobs use {q.used} of the {q.guaranteed_gpus} GPUs its guarantee "
            f"leaves them ({self.children_promised(q.name)} are promised to its children)"
        )

    def children_promised(self, name: str) -> int:
        """The GPUs queue `name`'s children are declared guaranteed together (0: none;
        `guaranteed_gpus` would count what a child inherits from its parent too)."""
        return sum(sum(q.guaranteed.values()) for q in self.items if q.parent == name)

    @property
    def promised_text(self) -> str:
        """ "queues promise 8 of the cluster's 8 GPUs" (and "overcommitted" beyond it)"""
        text = f"queues promise {self.promised} of the cluster's {self.cluster_gpus} GPUs"
        if self.cluster_gpus and self.promised > self.cluster_gpus:
            text += f" (overcommitted by {self.promised - self.cluster_gpus})"
        return text


class QueueRemoved(_Reply):
    name: str


class QueueSamplePublic(_Reply):
    at: float
    queue: str
    used: int
    guaranteed: int
    share: float


class QueueHistory(_Reply):
    """Each queue's use and fair share over time (samples as they changed)."""

    since: float
    samples: list[QueueSamplePublic]


class UsageBy(StrEnum):
    USER = "user"
    QUEUE = "queue"


class UsageRow(_Reply):
    key: str = Field(description="The user or the queue")
    gpu_hours: float = Field(description="GPU-hours held in the window (clipped to it)")
    jobs: int = Field(description="Jobs submitted in the window")
    started: int = Field(description="Of those, jobs that have started")
    mean_wait_seconds: float | None = Field(
        default=None, description="Mean time from submission to first start, of started jobs"
    )


class UsageReport(_Reply):
    by: UsageBy
    since: float
    until: float
    rows: list[UsageRow]


class AcctRow(_Reply):
    """One job's accounting line (`schedulearn acct`, like Slurm's `sacct`).

    Only fields every signed-in user sees of any job
    (`server.services.visibility`): no detail of the job is in it."""

    id: int
    name: str
    user: str
    queue: str = Field(description="The job's queue (the default queue when it named none)")
    state: JobState
    exit_code: int | None
    submitted_at: float
    started_at: float | None = Field(description="Its first start (None: never started)")
    ended_at: float | None
    waited_seconds: float = Field(
        description="From submission to its first start (to its end, or now, when it never started)"
    )
    ran_seconds: float = Field(
        description="Time its attempts held GPUs, every attempt, up to now for one running"
    )
    gpu_hours: float = Field(description="GPU-hours its attempts held, every attempt")
    restarts: int
    preemptions: int


class AcctReport(_Reply):
    """The jobs active in [since, until] that the filters keep, oldest first."""

    since: float
    until: float
    total: int = Field(description="Jobs the filters keep; `rows` holds the first `limit`")
    rows: list[AcctRow]
