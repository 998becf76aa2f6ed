"""The database tables (SQLModel) and nothing else.

Owns the schema; the Alembic migrations in `migrations/` create it, and
`tests/integration/test_migrations.py` checks that the two agree. The
API's request and response bodies live in `schedulearn.protocol` (the CLI
and the agent read them too); `services.jobs.to_public` turns a row into
a `JobPublic`.

The scheduling fields of `job` and `node` are declared once, on
`core.views.JobView` and `NodeView`. `Job` and `Node` carry a column for
each stored field they do not spell out, in the block at the end of each
class that `scripts/new-field` writes (`server.fieldcode`; the column
itself follows the declaration: `server.declared.column`); the same
command generates the Alembic revision that adds the column to existing
databases. A column spelled out by hand may add a primary key, an index
or the server's own default; `tests/integration/test_declared_fields.py`
keeps it in agreement with the declaration.
States are enums (`JobState`, `PartStatus`), stored as text.

State that guards the invariants:
- `Allocation` has one row per held GPU with (node, gpu_index) as its
  primary key, so the database itself refuses to give a GPU twice;
- `Job.state` is written only by `server.states` (conditional updates).
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar

from sqlalchemy import JSON, BigInteger, Column, Index, Integer, Table, Text, false, text
from sqlmodel import Field, SQLModel

from schedulearn.core.views import JobView, NodeView
from schedulearn.protocol import JobState
from schedulearn.server.declared import EnumText, column

if TYPE_CHECKING:

    class _Table(SQLModel):
        # SQLModel sets `__table__` on each table model but does not declare it.
        __table__: ClassVar[Table]

else:
    _Table = SQLModel


class PartStatus(StrEnum):
    """One node's part of an attempt: assigned -> running -> exited | lost."""

    ASSIGNED = "assigned"
    RUNNING = "running"
    EXITED = "exited"
    LOST = "lost"


# Columns a revision added to a table with rows: the database fills the old
# rows with 0, and a database built from the models has the same default.
_ZERO_FOR_OLD_ROWS = {"server_default": "0"}


def _state_where(name: str, where: str) -> Index:
    """A partial index on `state` of the job rows where `where` holds (both databases)."""
    return Index(name, "state", sqlite_where=text(where), postgresql_where=text(where))


class Job(_Table, table=True):
    __table_args__ = (
        Index("ix_job_state_queue", "state", "queued_at", "id"),
        # A listing filtered by state pages by id (migration 0010).
        Index("ix_job_state_id", "state", "id"),
        Index("ix_job_user_id", "user", "id"),
        Index("ix_job_array", "array_id"),
        # Every scheduling round reads the jobs with a time limit and the
        # waiting jobs with a dependency (`timelimits.enforce`,
        # `dependencies.settle`): partial indexes hold those alone, so a long
        # queue of jobs with neither is not read each round (migration 0019).
        _state_where("ix_job_limited", "time_limit IS NOT NULL"),
        _state_where("ix_job_dependent", "dependency IS NOT NULL"),
        # And whether a waiting job resumes on a drained placement, or needs
        # no GPU (`scheduling.resume`, `snapshot.could_change`; migration 0020).
        _state_where("ix_job_resuming", "resume_kind IS NOT NULL"),
        _state_where("ix_job_gpuless", "gpus = 0 OR min_gpus = 0"),
    )

    id: int | None = Field(default=None, primary_key=True)
    name: str = ""
    user: str = ""
    state: JobState = Field(default=JobState.PENDING, sa_type=EnumText(JobState))
    command: Any = Field(sa_column=Column(JSON, nullable=False))
    image: str | None = None
    executor: str = "subprocess"
    gpus: int = 1
    min_gpus: int | None = None
    max_gpus: int | None = None
    cpus: float = 0.0
    memory_gb: float = 0.0
    gpu_type: str | None = None
    priority: int = 0
    deadline: float | None = None
    estimated_duration: float | None = None
    model: str | None = None
    preemptible: bool = False
    env: Any = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    # `JobSpec.secret_env`: delivered to the agent, never shown (only its keys);
    # plain JSON like `env` (docs/visibility.md says who can read the database).
    secret_env: Any = Field(default=None, sa_column=Column(JSON, nullable=True))
    workdir: str | None = None
    shm_size: str | None = None
    launcher: str = "none"
    array_id: int | None = None
    array_index: int | None = None
    max_restarts: int = 3
    restarts: int = 0
    # Requeues because the job's node went down (`lifecycle.LossCause`):
    # counted apart from `restarts`, which are the job's own.
    node_losses: int = Field(default=0, sa_column_kwargs=_ZERO_FOR_OLD_ROWS)
    attempt: int = 0
    submitted_at: float = 0.0
    queued_at: float = 0.0
    started_at: float | None = None
    ended_at: float | None = None
    service_seconds: float = 0.0
    attained_gpu_seconds: float = 0.0
    preemptions: int = 0
    # Live preemption (issue 5): how often the job was moved or resized, and
    # the placement a resize or migration in flight resumes it on.
    migrations: int = Field(default=0, sa_column_kwargs=_ZERO_FOR_OLD_ROWS)
    resizes: int = Field(default=0, sa_column_kwargs=_ZERO_FOR_OLD_ROWS)
    resume_placement: Any = Field(default=None, sa_column=Column(JSON, nullable=True))
    resume_kind: str | None = None
    # The latest progress report (`protocol.ProgressReport` as JSON).
    progress: Any = Field(default=None, sa_column=Column(JSON, nullable=True))
    exit_code: int | None = None
    message: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    placement: Any = Field(default=None, sa_column=Column(JSON, nullable=True))

    # Declared on core.views.JobView: written by scripts/new-field, do not edit.
    constraints: Any = column(JobView, "constraints")
    queue: str = column(JobView, "queue")
    array_size: int | None = column(JobView, "array_size")
    array_limit: int | None = column(JobView, "array_limit")
    held: bool = column(JobView, "held")
    dependency: str | None = column(JobView, "dependency")
    time_limit: float | None = column(JobView, "time_limit")
    # End of the declared fields.


class JobTransition(_Table, table=True):
    """History of a job's states (written by `server.states` only)."""

    __tablename__ = "job_transition"
    id: int | None = Field(default=None, primary_key=True)
    job_id: int = Field(index=True)
    at: float
    from_state: JobState = Field(sa_type=EnumText(JobState))
    to_state: JobState = Field(sa_type=EnumText(JobState))
    attempt: int = 0
    message: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))


class Node(_Table, table=True):
    name: str = Field(primary_key=True)
    address: str = "127.0.0.1"
    cpus: float = 0.0
    memory_gb: float = 0.0
    executors: Any = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    healthy: bool = True
    registered_at: float = 0.0
    last_seen: float = 0.0

    # Declared on core.views.NodeView: written by scripts/new-field, do not edit.
    capabilities: Any = column(NodeView, "capabilities")
    drained: bool = column(NodeView, "drained")
    drain_reason: str = column(NodeView, "drain_reason")
    containment: str = column(NodeView, "containment")
    # End of the declared fields.


class Gpu(_Table, table=True):
    node: str = Field(primary_key=True)
    index: int = Field(primary_key=True)
    uuid: str = ""
    type: str = ""
    memory_mb: int = 0


class Allocation(_Table, table=True):
    """One held GPU. The primary key is the no-GPU-given-twice rule."""

    node: str = Field(primary_key=True)
    gpu_index: int = Field(primary_key=True)
    job_id: int = Field(index=True)
    attempt: int


class JobPart(_Table, table=True):
    """One node's part of one attempt of a job (a gang has several)."""

    __tablename__ = "job_part"
    __table_args__ = (
        Index("ix_job_part_node_status", "node", "status"),
        # Every report of an agent finds its part by these (migration 0011 says why).
        Index("ix_job_part_job_attempt_node", "job_id", "attempt", "node"),
    )

    id: int | None = Field(default=None, primary_key=True)
    job_id: int
    attempt: int
    node: str
    rank: int = 0
    gpus: Any = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    status: PartStatus = Field(default=PartStatus.ASSIGNED, sa_type=EnumText(PartStatus))
    delivered: bool = False
    stop_reason: str | None = None
    stop_sent: bool = False
    exit_code: int | None = None
    last_reported: float = 0.0


class JobCheckpoint(_Table, table=True):
    """The last checkpoint an agent uploaded for a job (the file lives under
    the server's data directory; this row says which attempt and its hash)."""

    __tablename__ = "job_checkpoint"

    job_id: int = Field(primary_key=True)
    attempt: int
    node: str = ""
    sha256: str
    size_bytes: int
    uploaded_at: float


class ProgressRecord(_Table, table=True):
    """A short history of a job's progress reports (the latest is also on `Job`)."""

    __tablename__ = "progress_record"
    __table_args__ = (Index("ix_progress_record_job_id", "job_id", "id"),)

    id: int | None = Field(default=None, primary_key=True)
    job_id: int
    attempt: int
    at: float
    report: Any = Field(sa_column=Column(JSON, nullable=False))


class LogRecord(_Table, table=True):
    __tablename__ = "log_record"
    __table_args__ = (Index("ix_log_record_job_id", "job_id", "id"),)

    id: int | None = Field(default=None, primary_key=True)
    job_id: int
    attempt: int
    node: str = ""
    # 64 bits: a run numbers its lines up to the protocol's bound (2**62).
    # SQLite's INTEGER holds 64 bits already, and stays as it is.
    seq: int = Field(
        default=0,
        sa_column=Column(BigInteger().with_variant(Integer(), "sqlite"), nullable=False),
    )
    stream: str = "stdout"
    text: str = Field(sa_column=Column(Text, nullable=False))
    at: float


class Token(_Table, table=True):
    """An API token: only its SHA-256 is kept (`server.auth`, `services.tokens`).

    A token ends when it is revoked (`revoked_at`) or expires (`expires_at`);
    its row stays so `token list --all` can show when and why.
    """

    __table_args__ = (Index("ix_token_hash", "hash", unique=True), Index("ix_token_user", "user"))

    id: int | None = Field(default=None, primary_key=True)
    hash: str
    user: str
    role: str
    name: str = ""
    created_at: float
    expires_at: float | None = None
    last_used_at: float | None = None
    revoked_at: float | None = None


class User(_Table, table=True):
    """A person who submits jobs (`services.users`): who they are on the GPU hosts
    (`unix_account`, their name when unset), whether their jobs may run as root,
    how high they may set a job's priority, and whether they are disabled."""

    __tablename__ = "app_user"

    name: str = Field(primary_key=True)
    unix_account: str | None = None
    allow_root: bool = False
    priority_max: int | None = None
    created_at: float
    disabled_at: float | None = None
    # Web sign-in by password (`services.passwords`): a salted scrypt hash, never the
    # password; the role a sign-in gets (the role of the token that set it when the
    # user set their own, `user` when an admin set it); when it was set.
    password_hash: str | None = None
    password_role: str | None = None
    password_set_at: float | None = None


class WebSession(_Table, table=True):
    """A signed-in browser (`web.session`): the cookie holds a random id, this row its
    SHA-256, the token it signed in with and its CSRF token. Deleting the row (sign-out,
    token revoked) ends the session at once, on every replica."""

    __tablename__ = "web_session"
    __table_args__ = (Index("ix_web_session_token_id", "token_id"),)

    id_hash: str = Field(primary_key=True)
    token_id: int
    csrf: str
    created_at: float
    expires_at: float
    # A password sign-in makes a token for its session alone (`services.passwords`);
    # signing out revokes it with the session.
    own_token: bool = Field(default=False, sa_column_kwargs={"server_default": false()})


class WebLoginCode(_Table, table=True):
    """A one-time sign-in link (`services.login_codes`, `schedulearn web-login`): the
    SHA-256 of its code, the token of the CLI that asked for it (the browser signs in
    as that token), when it ends and when it was used (once only)."""

    __tablename__ = "web_login_code"

    code_hash: str = Field(primary_key=True)
    token_id: int
    created_at: float
    expires_at: float
    used_at: float | None = None


class ThroughputRecord(_Table, table=True):
    """A throughput profile: how fast a model trains on a number of GPUs of one type.

    Filled from the samples/s that running jobs report and from imported
    tables (Gavel's format). `batch_size` 0 means not known; the speed
    is then kept in samples/s (relative speeds between GPU types, which
    is what placement needs, do not depend on the unit).
    """

    __tablename__ = "throughput_profile"

    model: str = Field(primary_key=True)
    batch_size: int = Field(default=0, primary_key=True)
    gpu_type: str = Field(primary_key=True)
    gpu_count: int = Field(default=1, primary_key=True)
    spread: bool = Field(default=False, primary_key=True)
    steps_per_sec: float
    samples_per_sec: float | None = None
    source: str = ""
    reports: int = 1
    updated_at: float = 0.0


class Setting(_Table, table=True):
    key: str = Field(primary_key=True)
    value: str


class CredentialKind(StrEnum):
    """How a node credential came to be (`services.enrollment` makes them)."""

    JOINED = "joined"  # exchanged for a join token from `schedulearn node add`
    LOCAL = "local"  # made by `schedulearn up` for its own local agent
    BOUND_TOKEN = "bound-token"  # an old-style agent token, bound at its first registration


class JoinToken(_Table, table=True):
    """A one-time token `node add` printed (its hash): exchanged once, before it expires."""

    __tablename__ = "join_token"

    hash: str = Field(primary_key=True)
    node: str = Field(index=True)
    created_at: float
    expires_at: float
    used_at: float | None = None


class NodeCredential(_Table, table=True):
    """What an agent authenticates with (its hash), bound to one node; `node rm` revokes it."""

    __tablename__ = "node_credential"

    hash: str = Field(primary_key=True)
    node: str = Field(index=True)
    kind: CredentialKind = Field(sa_type=EnumText(CredentialKind))
    created_at: float
    revoked_at: float | None = None


class IdempotencyRecord(_Table, table=True):
    """A submission's `Idempotency-Key` and the jobs it made (`services.idempotency`)."""

    __tablename__ = "idempotency_key"

    user: str = Field(primary_key=True)
    key: str = Field(primary_key=True)
    fingerprint: str  # sha256 of the spec as parsed: the same key with another body is refused
    job_ids: str  # JSON list, in the order the reply gave them
    created_at: float = Field(index=True)  # keys expire a day after


class TenantQueue(_Table, table=True):
    """A tenant queue (a team, a project): what it is promised (`services.queue_admin`).

    `guaranteed` maps a GPU type to GPUs of that type ("" = any type), as
    `core.fairshare_queues.Queue` has it; `gpu_limit` caps what it may hold
    at once (None: no cap); `weight` is its share of idle capacity; `parent`
    puts it under another queue, whose guarantee its children share first
    (`core.fairshare_fill`; None: a root queue).
    """

    __tablename__ = "tenant_queue"

    name: str = Field(primary_key=True)
    guaranteed: Any = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    gpu_limit: int | None = None
    weight: float = 1.0
    created_at: float = 0.0
    parent: str | None = None


class QueueMember(_Table, table=True):
    """A user's membership of a queue; `is_default`: their jobs go there when they name none."""

    __tablename__ = "queue_member"

    queue: str = Field(primary_key=True)
    user: str = Field(primary_key=True, index=True)
    is_default: bool = False


class QueueUsage(_Table, table=True):
    """A queue's decayed GPU-seconds (`usage` as of `at`) and the GPUs it held since
    (`busy`): the live form of `core.fairshare_queues.UsageMeter`, settled on read.
    `served` and `serving` are the same for its jobs that fit its guarantee
    (`Tenancy.served`, which the queue is judged ahead or behind on), and
    `owed` and `owing` for the GPUs it was owed (`Tenancy.owed`: `owed_rate`
    of what those jobs ask for, running or waiting)."""

    __tablename__ = "queue_usage"

    queue: str = Field(primary_key=True)
    usage: float = 0.0
    busy: int = 0
    served: float = Field(default=0.0, sa_column_kwargs=_ZERO_FOR_OLD_ROWS)
    serving: int = Field(default=0, sa_column_kwargs=_ZERO_FOR_OLD_ROWS)
    owed: float = Field(default=0.0, sa_column_kwargs=_ZERO_FOR_OLD_ROWS)
    owing: int = Field(default=0, sa_column_kwargs=_ZERO_FOR_OLD_ROWS)
    at: float = 0.0
    half_life: float = 7 * 24 * 3600.0  # seconds; the server's setting when it was written


class QueueSample(_Table, table=True):
    """A queue's GPUs in use and fair share at a moment (the Queues page's chart)."""

    __tablename__ = "queue_sample"
    __table_args__ = (Index("ix_queue_sample_at", "at"),)

    id: int | None = Field(default=None, primary_key=True)
    at: float
    queue: str
    used: int = 0
    guaranteed: int = 0
    share: float = 0.0


class GoodputState(_Table, table=True):
    """What a job reported of its goodput (`services.goodput`): the newest
    `core.goodput.GoodputReport` and the distinct steps it measured, one
    per (nodes, GPUs, local batch), over all its attempts."""

    __tablename__ = "goodput_state"

    job_id: int = Field(primary_key=True)
    at: float  # time of the newest report
    report: Any = Field(sa_column=Column(JSON, nullable=False))
    samples: Any = Field(sa_column=Column(JSON, nullable=False))


class JobLogUsage(_Table, table=True):
    """What a job's stored log holds (`services.logs`): the head kept whole,
    the tail kept last-in, and what was cut between them (the marker row)."""

    __tablename__ = "job_log_usage"

    job_id: int = Field(primary_key=True)
    head_bytes: int = 0
    tail_bytes: int = 0
    # The `log_record` row that names the cut; set once the head is full.
    marker_id: int | None = None
    cut_bytes: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    cut_lines: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))


class JobFullLog(_Table, table=True):
    """An attempt's complete output, uploaded by its agent when it ended
    (`services.full_logs`; the file lives under the server's log store)."""

    __tablename__ = "job_full_log"

    job_id: int = Field(primary_key=True)
    attempt: int = Field(primary_key=True)
    node: str = ""
    size_bytes: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    sha256: str = ""
    uploaded_at: float = 0.0
