"""Everything one running app holds, hung on `app.state.sl` by `create_app`.

Owns the in-memory parts of the server: the token and node-credential caches, wake-up events,
the submission batcher, the count of failed web sign-ins, the latest GPU
samples from heartbeats (shown by `nodes`, never stored), stop orders
for runs an agent reported that the server does not know, and the
heartbeats heard but not yet written (`heartbeat_book`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from fastapi import Request

from schedulearn.clock import Clock
from schedulearn.protocol import GpuSample, JobSpec, LogBatch, StopOrder
from schedulearn.server.auth import Caller, TokenCache
from schedulearn.server.batching import Batcher
from schedulearn.server.db import Database
from schedulearn.server.heartbeat_book import HeartbeatBook
from schedulearn.server.heartbeat_pace import HeartbeatPace
from schedulearn.server.metrics import Metrics
from schedulearn.server.scheduler import Scheduler
from schedulearn.server.services.agents import AgentTiming
from schedulearn.server.services.enrollment import AgentIdentity, CredentialCache
from schedulearn.server.services.idempotency import Submission
from schedulearn.server.services.jobs import Submitted
from schedulearn.server.services.logs import Appended
from schedulearn.server.services.predictions import Predictor
from schedulearn.server.services.snapshot import ShapeCache
from schedulearn.server.throttle import SignInThrottle
from schedulearn.server.wakeups import Wakeups
from schedulearn.server.workwatch import WorkWatch
from schedulearn.settings import ServerSettings


@dataclass(slots=True)
class AppState:
    settings: ServerSettings
    db: Database
    clock: Clock
    wakeups: Wakeups
    tokens: TokenCache
    metrics: Metrics
    scheduler: Scheduler
    submitter: Batcher[Submission | tuple[JobSpec, Caller], Submitted]
    # Log batches of many runs in one transaction (`agent_access.append_logs_many`).
    log_batcher: Batcher[tuple[AgentIdentity, int, LogBatch], Appended]
    pace: HeartbeatPace
    shape: ShapeCache
    predictions: Predictor
    work_watch: WorkWatch
    samples: dict[str, list[GpuSample]] = field(default_factory=dict)
    orphan_stops: dict[str, list[StopOrder]] = field(default_factory=lambda: defaultdict(list))
    credentials: CredentialCache = field(default_factory=CredentialCache)
    # Failed password sign-ins of this process (server.throttle).
    sign_ins: SignInThrottle = field(default_factory=SignInThrottle)
    # None: each heartbeat is written before its reply (heartbeat_flush_seconds 0).
    heartbeats: HeartbeatBook | None = None

    @property
    def timing(self) -> AgentTiming:
        """The heartbeat interval, node timeout and lease in force (`heartbeat_pace`)."""
        return self.pace.timing


def get_state(request: Request) -> AppState:
    state: AppState = request.app.state.sl
    return state
