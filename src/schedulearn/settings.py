"""Server settings (pydantic-settings): read from `SCHEDULEARN_*` environment
variables, built once by the entry point and passed in, never a module global.

`create_app(settings)` takes one of these, so every test gets its own
database by building its own `ServerSettings(database_url=...)`.
"""

from __future__ import annotations

from pathlib import Path

import platformdirs
from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

APP_NAME = "schedulearn"


def data_dir() -> Path:
    """Where the server keeps its SQLite file by default (the user's data directory)."""
    return Path(platformdirs.user_data_dir(APP_NAME))


def config_dir() -> Path:
    """Where the CLI keeps its configuration (server address, token)."""
    return Path(platformdirs.user_config_dir(APP_NAME))


def default_database_url() -> str:
    return f"sqlite:///{data_dir() / 'schedulearn.db'}"


class ServerSettings(BaseSettings):
    """Everything the server needs; environment variables `SCHEDULEARN_<FIELD>`."""

    model_config = SettingsConfigDict(env_prefix="SCHEDULEARN_", extra="ignore")

    database_url: str = Field(
        default_factory=default_database_url,
        description="sqlite:///path or postgresql://user@host/db (psycopg 3)",
    )
    host: str = "127.0.0.1"
    port: int = 8642
    database_connect_timeout_seconds: float = Field(
        default=3.0,
        ge=2,
        le=300,
        description="PostgreSQL: a new connection not made in this many seconds fails (503)",
    )
    database_statement_timeout_seconds: float = Field(
        default=30.0,
        ge=0,
        description="PostgreSQL cancels one statement that runs longer (0: no limit)",
    )
    database_answer_seconds: float = Field(
        default=3.0,
        ge=0,
        description="PostgreSQL: once the database has answered nothing for this many seconds "
        "while a query runs (frozen, hung host) and a 1 s SELECT 1 probe gets no answer, "
        "requests get 503 with Retry-After and /readyz says so (0: wait as long as it takes)",
    )
    default_policy: str = Field(
        default="fifo", description="Policy in force until an admin sets one"
    )
    # Tokens: when given, these are stored (hashed) at start so a deployment
    # or a test knows them in advance; otherwise the server makes them at
    # first start and writes them to `token_file` (0600), never to a log.
    admin_token: str | None = None
    agent_token: str | None = None
    token_file: str | None = Field(
        default=None,
        description="Where the tokens made at first start are written (mode 0600); default: "
        "`first-tokens` next to the SQLite file, or in the user's data directory",
    )
    auth_cache_seconds: float = Field(
        default=2.0,
        ge=0,
        description="How long a checked token is trusted without asking the database again. "
        "This replica honours a revocation, an expiry or a disabled user at once; other "
        "replicas within this many seconds (0: every request asks the database)",
    )
    web_login_seconds: float = Field(
        default=300.0,
        gt=0,
        le=86400,
        description="How long a one-time sign-in link from `schedulearn web-login` works",
    )
    user_priority_min: int = Field(
        default=-100, description="Lowest priority a user (not an admin) may give a job"
    )
    user_priority_max: int = Field(
        default=0,
        description="Highest priority a user may give a job, unless their user record sets "
        "its own (`schedulearn user add NAME --priority-max N`); admins have no bound",
    )
    heartbeat_seconds: float = Field(
        default=2.0,
        gt=0,
        description="How often each node heartbeats, until the cluster is too large for "
        "max_heartbeats_per_second",
    )
    max_heartbeats_per_second: float | None = Field(
        default=100.0,
        gt=0,
        description="The heartbeats a second the server asks of all its nodes together: past "
        "it, the interval each node is told, the node timeout and the lease all grow with "
        "the number of healthy nodes (1,000 nodes at 2 s and 100 a second: every 10 s, down "
        "after 50 s); empty: never stretched",
    )
    node_timeout_seconds: float = Field(
        default=10.0, gt=0, description="A node silent this long is marked down"
    )
    heartbeat_flush_seconds: float = Field(
        default=0.5,
        ge=0,
        description="A heartbeat from a node known to be up is answered at once and written "
        "with the others heard meanwhile, in one transaction this often (liveness is soft "
        "state: a crash loses at most these seconds of it); 0: each heartbeat is written "
        "in its own transaction before its reply",
    )
    lease_seconds: float | None = Field(
        default=None,
        gt=0,
        description="Each heartbeat the server answers renews the node's lease for this long; "
        "an agent that cannot renew it stops its jobs when it lapses, before the node timeout "
        "lets the server run them elsewhere (default: 3/4 of node_timeout_seconds). "
        "lease_seconds + lease_grace_seconds must stay under 9/10 of node_timeout_seconds",
    )
    lease_grace_seconds: float | None = Field(
        default=None,
        ge=0,
        description="When a lease lapses, how long a job has between SIGTERM and SIGKILL "
        "(default: 3/20 of node_timeout_seconds)",
    )
    tick_seconds: float = Field(
        default=1.0, gt=0, description="Longest sleep of the scheduler loop between passes"
    )
    max_body_bytes: int = Field(default=4 * 1024 * 1024, gt=0)
    header_timeout_seconds: float = Field(
        default=20.0,
        gt=0,
        description="A request's headers must arrive whole within this many seconds (else 408)",
    )
    body_timeout_seconds: float = Field(
        default=20.0,
        gt=0,
        description="A request's body must arrive within this many seconds, plus one more for "
        "every body_min_bytes_per_second bytes received (else 408)",
    )
    body_min_bytes_per_second: int = Field(default=500, gt=0)
    max_concurrent_reads: int = Field(
        default=4,
        gt=0,
        description="Reads (GET) worked on at once; more wait their turn (`server.guard`)",
    )
    max_wait_seconds: float = Field(default=30.0, gt=0, description="Cap on agent long-polls")
    stop_grace_seconds: float = Field(default=10.0, ge=0)
    checkpoint_dir: str | None = Field(
        default=None,
        description="Per-job checkpoint directories go under this path on the agent hosts; "
        "unset lets each agent choose",
    )
    checkpoint_store_dir: str | None = Field(
        default=None,
        description="Where the server keeps checkpoints agents upload when no shared "
        "checkpoint_dir is set (default: a `checkpoints` folder next to the SQLite file, "
        "or under the user's data directory)",
    )
    checkpoint_max_bytes: int = Field(
        default=2 * 1024**3, gt=0, description="Largest checkpoint upload accepted (bytes)"
    )
    queue_min_run_seconds: float = Field(
        default=300.0,
        ge=0,
        description="With tenant queues: a job runs at least this long before the fair-share "
        "layer preempts it to give its GPUs back to a queue below its guarantee or share",
    )
    queue_half_life_seconds: float = Field(
        default=7 * 24 * 3600.0,
        gt=0,
        description="With tenant queues: past GPU use counts half after this long (usage decay)",
    )
    log_stored_max_bytes: int = Field(
        default=8 * 1024**2,
        ge=64 * 1024,
        description="Most bytes of one job's output kept in the database: its first half "
        "(the head) and its latest half (the tail); a marker line between them says how much "
        "was cut, and the agent then uploads each attempt's whole output (`logs --full`)",
    )
    log_full_max_bytes: int = Field(
        default=2 * 1024**3,
        gt=0,
        description="Largest full log (one attempt's whole output) an agent may upload",
    )
    log_store_dir: str | None = Field(
        default=None,
        description="Where the server keeps full logs agents upload (default: a `logs` "
        "folder next to the SQLite file, or under the user's data directory)",
    )
    log_retention_days: float = Field(
        default=30.0,
        ge=0,
        description="Logs (stored lines and full logs) of jobs that ended more than this "
        "many days ago are deleted; 0 keeps them forever",
    )
    min_resize_age_seconds: float = Field(
        default=120.0,
        ge=0,
        description="Default `min_age` of policies that resize jobs (elastic-fifo): a job is "
        "never resized sooner than this after it (re)started; a policy spec's own min_age wins",
    )
    gang_base_port: int = Field(
        default=29500, description="MASTER_PORT of a gang is this + job id % 10000"
    )
    log_level: str = "info"

    @property
    def lease(self) -> tuple[float, float]:
        """(lease, grace): the lease each heartbeat grants, and the SIGTERM-to-SIGKILL
        time of a job stopped because its node's lease lapsed (`docs/operations.md`)."""
        return lease_timing(self.node_timeout_seconds, self.lease_seconds, self.lease_grace_seconds)

    @model_validator(mode="after")
    def _lease_fits(self) -> ServerSettings:
        lease, grace = self.lease
        if lease + grace > LEASE_SHARE * self.node_timeout_seconds:
            raise ValueError(
                f"lease_seconds ({lease:g}) + lease_grace_seconds ({grace:g}) must stay under "
                f"{LEASE_SHARE:g} x node_timeout_seconds ({self.node_timeout_seconds:g}): a node's "
                "jobs must be stopped before the server may run them elsewhere; lower "
                "SCHEDULEARN_LEASE_SECONDS / SCHEDULEARN_LEASE_GRACE_SECONDS or raise "
                "SCHEDULEARN_NODE_TIMEOUT_SECONDS"
            )
        if lease <= self.heartbeat_seconds:
            raise ValueError(
                f"lease_seconds ({lease:g}) must be longer than heartbeat_seconds "
                f"({self.heartbeat_seconds:g}), or every node's lease lapses between two "
                "heartbeats; raise SCHEDULEARN_LEASE_SECONDS (or the node timeout it defaults "
                "from) or lower SCHEDULEARN_HEARTBEAT_SECONDS"
            )
        return self


# The lease and its grace take at most this share of the node timeout; the
# rest is the margin for the job to be gone once SIGKILLed (the agent's guard,
# `agent.leaseguard`, sleeps until the lease's very end, not in fixed steps).
LEASE_SHARE = 0.9
_LEASE_DEFAULT = 0.75
_GRACE_DEFAULT = 0.15


def lease_timing(
    node_timeout: float, lease: float | None = None, grace: float | None = None
) -> tuple[float, float]:
    """The lease and its grace, each the setting given or its share of `node_timeout`."""
    return (
        _LEASE_DEFAULT * node_timeout if lease is None else lease,
        _GRACE_DEFAULT * node_timeout if grace is None else grace,
    )
