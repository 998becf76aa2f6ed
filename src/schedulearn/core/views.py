"""Frozen snapshots of the cluster that a policy reads: GPUs, nodes, jobs.

A policy never sees mutable state. The simulator and the live scheduler
each build a `ClusterView` and hand it to `Policy.decide`. Views are
built to be cheap to reuse: a running job's view stays valid while it
runs, because time-dependent figures (attained service, remaining time)
are computed from `now` rather than stored.

`JobView` and `NodeView` are also the one declaration of a job's and a
node's fields: each field says its `Role` in its metadata, and the wire
models (`protocol`), the database tables (`server.models`), the
simulator's `SimJob` and the server's row mapping derive from that or
map by name (see docs/adding-a-field.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import KW_ONLY, dataclass, field
from enum import StrEnum
from operator import attrgetter
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

if TYPE_CHECKING:
    from schedulearn.core.dependencies import Outcome
    from schedulearn.core.fairshare_queues import Tenancy
    from schedulearn.core.goodput import JobGoodput

from schedulearn.core.capabilities import PLAIN, NodeCapabilities


class Role(StrEnum):
    """Where a declared field of a view comes from, and so where it goes.

    SUBMITTED: given by whoever creates the thing (a user's `JobSpec`, a
        workload's `SimJob`, an agent's `NodeRegistration`); stored in a
        column and shown in the public model.
    KEPT: kept by the server (or the simulator) while the thing lives;
        stored and shown, never submitted.
    INTERNAL: kept and stored, not shown.
    VIEW: computed when the view is built; neither stored nor shown.
    """

    SUBMITTED = "submitted"
    KEPT = "kept"
    INTERNAL = "internal"
    VIEW = "view"

    @property
    def stored(self) -> bool:
        return self is not Role.VIEW

    @property
    def shown(self) -> bool:
        return self in (Role.SUBMITTED, Role.KEPT)


# Field metadata: `queue: str = field(default="", metadata=SUBMITTED)`.
SUBMITTED: Mapping[str, Role] = MappingProxyType({"role": Role.SUBMITTED})
KEPT: Mapping[str, Role] = MappingProxyType({"role": Role.KEPT})
INTERNAL: Mapping[str, Role] = MappingProxyType({"role": Role.INTERNAL})
VIEW: Mapping[str, Role] = MappingProxyType({"role": Role.VIEW})


class UndeclaredField(TypeError):
    """A view field without a role (add `metadata=SUBMITTED`, `KEPT`, `INTERNAL` or `VIEW`)."""


def role_of(cls: type, name: str) -> Role:
    """The declared role of field `name` of the view class `cls`."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            role = f.metadata.get("role")
            if not isinstance(role, Role):
                raise UndeclaredField(
                    f"{cls.__name__}.{name} declares no role: give it "
                    "field(..., metadata=SUBMITTED | KEPT | INTERNAL | VIEW) in core/views.py"
                )
            return role
    raise KeyError(f"{cls.__name__} has no field {name!r}")


def declared(cls: type, *roles: Role) -> tuple[str, ...]:
    """Names of the fields of view class `cls` with one of `roles`, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(cls) if role_of(cls, f.name) in roles)


class _Dataclass(Protocol):
    """Any dataclass instance (what `dataclasses.fields` takes)."""

    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]


V = TypeVar("V", bound=_Dataclass)
# Per view class: its init field names and one getter for all of them.
# Derived from the class alone, so a cache of constants, not state.
_GETTERS: dict[type, tuple[tuple[str, ...], attrgetter[Any]]] = {}


def rebuild(view: V, **changes: Any) -> V:
    """A copy of a frozen view with `changes`, every other field copied by name.

    Cheaper than `dataclasses.replace` (which the simulator would pay on
    every start and stop), and like it never drops a field: a field
    added to the view is carried without editing any caller.
    """
    cls = type(view)
    got = _GETTERS.get(cls)
    if got is None:
        names = tuple(f.name for f in dataclasses.fields(cls) if f.init)
        got = _GETTERS[cls] = (names, attrgetter(*names))
    values = dict(zip(got[0], got[1](view), strict=True))
    values.update(changes)
    return cls(**values)


# A frozen view's fields set without its __init__ (`Placement.single`).
_new = object.__new__
_set = object.__setattr__

# CPUs a job without GPUs reserves when it names no `cpus` of its own.
ZERO_GPU_CPU_SLOT = 1.0


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a job runs: node name -> the GPU indices it holds there.

    Stored as a sorted tuple of pairs so that a placement is hashable and
    two equal placements compare equal. A CPU-only task holds a node with
    an empty GPU tuple.
    """

    parts: tuple[tuple[str, tuple[int, ...]], ...]
    # Derived once: the ledger, the policies and the simulator read it many
    # times per pass. Not part of equality, hashing or the constructor.
    num_gpus: int = field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self) -> None:
        parts = self.parts
        # One part, inline: a pass on a large cluster makes thousands of these.
        n = len(parts[0][1]) if len(parts) == 1 else sum([len(g) for _, g in parts])
        object.__setattr__(self, "num_gpus", n)

    @classmethod
    def of(cls, gpus_by_node: Mapping[str, Iterable[int]]) -> Placement:
        return cls(tuple(sorted((n, tuple(sorted(g))) for n, g in gpus_by_node.items())))

    @classmethod
    def single(cls, node: str, gpus: Iterable[int]) -> Placement:
        # What `cls(((node, held),))` makes, set field by field: a frozen class's
        # __init__ and __post_init__ cost twice this, and a pass on a large
        # cluster makes thousands (issue 36).
        held = tuple(sorted(gpus))
        placement = _new(cls)
        _set(placement, "parts", ((node, held),))
        _set(placement, "num_gpus", len(held))
        return placement

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.parts)

    @property
    def num_nodes(self) -> int:
        return len(self.parts)

    def gpus_on(self, node: str) -> tuple[int, ...]:
        for name, gpus in self.parts:
            if name == node:
                return gpus
        return ()

    def as_dict(self) -> dict[str, list[int]]:
        return {n: list(g) for n, g in self.parts}

    def __iter__(self) -> Iterator[tuple[str, tuple[int, ...]]]:
        return iter(self.parts)

    def __str__(self) -> str:
        return " ".join(f"{n}:{','.join(map(str, g)) or '-'}" for n, g in self.parts)


@dataclass(frozen=True, slots=True)
class GpuView:
    """One GPU of a node. `job_id` is the job holding it, or None when free."""

    index: int
    type: str = ""
    uuid: str = ""
    memory_mb: int = 0
    job_id: int | None = None


@dataclass(frozen=True, slots=True)
class NodeView:
    """One server: its GPUs and the CPU and memory still unreserved; also
    the declaration of a node's fields (each says its `Role`)."""

    name: str = field(metadata=SUBMITTED)
    # Registered by the agent too, but kept in the `gpu` table: mapped by
    # `server.services.snapshot.load_nodes`.
    gpus: tuple[GpuView, ...] = field(metadata=VIEW)
    cpus: float = field(default=0.0, metadata=SUBMITTED)
    memory_gb: float = field(default=0.0, metadata=SUBMITTED)
    free_cpus: float = field(default=0.0, metadata=VIEW)
    free_memory_gb: float = field(default=0.0, metadata=VIEW)
    healthy: bool = field(default=True, metadata=KEPT)
    # What the node can run (executors, container runtime, labels; see
    # core.capabilities). The agent reports it at registration, where it
    # travels as `protocol.CapabilitiesReport`.
    capabilities: NodeCapabilities = field(default=PLAIN, metadata=SUBMITTED)
    # Drained by an admin (`schedulearn nodes drain`): its running jobs go on,
    # no new job starts there (core.eligibility treats it as unavailable).
    drained: bool = field(default=False, metadata=KEPT)
    # Why it was drained, as the admin said (`nodes drain NAME --reason "fan"`); ""
    # when none was given or the node is not drained. Shown, never scheduled on.
    drain_reason: str = field(default="", metadata=KEPT)
    # What confines the node's process jobs, as its agent reports it: "cgroup v1",
    # "cgroup v2", "container" (an agent offering containers only), or "none"
    # (`--no-cgroups`); "" from an agent older than this field.
    containment: str = field(default="", metadata=SUBMITTED)
    # Derived in __post_init__; policies read it on every pass, so compute once.
    free_gpu_indices: tuple[int, ...] = field(init=False, default=(), metadata=VIEW)

    def __post_init__(self) -> None:
        free = tuple(g.index for g in self.gpus if g.job_id is None)
        object.__setattr__(self, "free_gpu_indices", free if self.healthy else ())

    @classmethod
    def new(
        cls,
        name: str,
        num_gpus: int,
        gpu_type: str = "",
        cpus: float = 0.0,
        memory_gb: float = 0.0,
        gpu_memory_mb: int = 0,
        capabilities: NodeCapabilities = PLAIN,
    ) -> NodeView:
        """An idle, healthy node with GPUs indexed 0..num_gpus-1."""
        gpus = tuple(GpuView(i, gpu_type, f"{name}-gpu{i}", gpu_memory_mb) for i in range(num_gpus))
        return cls(name, gpus, cpus, memory_gb, cpus, memory_gb, True, capabilities)

    @property
    def num_gpus(self) -> int:
        return len(self.gpus)

    @property
    def num_free_gpus(self) -> int:
        return len(self.free_gpu_indices)

    @property
    def gpu_type(self) -> str:
        """The type of the node's GPUs ('' when unknown or mixed-free)."""
        return self.gpus[0].type if self.gpus else ""


@dataclass(frozen=True, slots=True)
class JobView:
    """What a policy knows about one job; also the declaration of a job's
    scheduling fields (each says its `Role`; see docs/adding-a-field.md).

    Sizes: `gpus` is the size the user asked for. An elastic job also
    gives `min_gpus` and `max_gpus` and may run at any size in between.

    Service accounting for a running job is split in two so that the
    view need not be rebuilt as time passes: `service_seconds` and
    `attained_gpu_seconds` hold what was accrued before the current run
    segment, which began at `started_at` on `placement`.
    """

    id: int = field(metadata=KEPT)
    submitted_at: float = field(metadata=KEPT)
    gpus: int = field(metadata=SUBMITTED)
    # Keyword-only from here: `SimJob` extends the view with positional fields.
    _: KW_ONLY
    name: str = field(default="", metadata=SUBMITTED)
    user: str = field(default="", metadata=KEPT)
    # The tasks of one logical job (simulated workloads only).
    group: str | None = field(default=None, metadata=VIEW)
    min_gpus: int | None = field(default=None, metadata=SUBMITTED)
    max_gpus: int | None = field(default=None, metadata=SUBMITTED)
    cpus: float = field(default=0.0, metadata=SUBMITTED)
    memory_gb: float = field(default=0.0, metadata=SUBMITTED)
    gpu_type: str | None = field(default=None, metadata=SUBMITTED)
    priority: int = field(default=0, metadata=SUBMITTED)
    deadline: float | None = field(default=None, metadata=SUBMITTED)
    estimated_duration: float | None = field(default=None, metadata=SUBMITTED)
    model: str | None = field(default=None, metadata=SUBMITTED)
    preemptible: bool = field(default=False, metadata=SUBMITTED)
    # What the node must offer (core.capabilities.can_run): a container for a
    # job with an image, and every label named in `constraints`.
    image: str | None = field(default=None, metadata=SUBMITTED)
    constraints: tuple[str, ...] = field(default=(), metadata=SUBMITTED)
    # The owner's unix account (a node that runs jobs as their owners must
    # have it; core.capabilities); None: not known, which restricts nothing.
    # Computed per pass from the user records (neither stored nor shown).
    account: str | None = field(default=None, metadata=VIEW)
    # The tenant queue (team, project) the job belongs to; "" is the default
    # queue. Read by the fair-share layer (core.fairshare) when queues are set.
    queue: str = field(default="", metadata=SUBMITTED)
    # Queue and run state.
    queued_at: float | None = field(default=None, metadata=INTERNAL)
    placement: Placement | None = field(default=None, metadata=KEPT)
    started_at: float | None = field(default=None, metadata=KEPT)
    service_seconds: float = field(default=0.0, metadata=INTERNAL)
    attained_gpu_seconds: float = field(default=0.0, metadata=INTERNAL)
    preemptions: int = field(default=0, metadata=KEPT)
    # A task of a job array (`submit --array 0-9%2`): the array's id (its
    # first job's), how many tasks it has, and how many may run at once
    # (None: no limit). `core.eligibility` keeps the limit for every policy.
    array_id: int | None = field(default=None, metadata=KEPT)
    array_size: int | None = field(default=None, metadata=KEPT)
    array_limit: int | None = field(default=None, metadata=SUBMITTED)
    # Held by its owner or an admin (`schedulearn hold`): it keeps its place
    # but does not start until released.
    held: bool = field(default=False, metadata=KEPT)
    # Starts only once other jobs have ended as named (`submit --dependency
    # afterok:12:13,afterany:14`), in the text `core.dependencies` parses;
    # None: no dependency. `core.eligibility` keeps it for every policy.
    dependency: str | None = field(default=None, metadata=SUBMITTED)
    # The wall-clock limit in seconds of run time (`submit --time 4h`): the
    # host stops the job there (`core.timelimits`) and it ends `timeout`;
    # estimates fall back on it (`expected_duration`). None: no limit.
    time_limit: float | None = field(default=None, metadata=SUBMITTED)
    # Fraction done, when the simulator knows it (not the live progress report).
    progress: float | None = field(default=None, metadata=VIEW)
    # Being stopped and still holding its GPUs (a live host shows such jobs
    # as running under tenant queues, `snapshot.build`): whatever makes room
    # takes it first (`core.preemption`, `core.fairshare_reclaim`), since it
    # is going anyway. Never set in the simulator, whose preemptions free
    # GPUs at once.
    stopping: bool = field(default=False, metadata=VIEW)

    @property
    def is_running(self) -> bool:
        return self.placement is not None

    @property
    def is_elastic(self) -> bool:
        return self.least_gpus != self.most_gpus

    @property
    def least_gpus(self) -> int:
        return self.gpus if self.min_gpus is None else self.min_gpus

    @property
    def most_gpus(self) -> int:
        return self.gpus if self.max_gpus is None else self.max_gpus

    @property
    def allocated_gpus(self) -> int:
        return 0 if self.placement is None else self.placement.num_gpus

    @property
    def waiting_since(self) -> float:
        """When the job last entered the queue (submission or preemption)."""
        return self.submitted_at if self.queued_at is None else self.queued_at

    def service_at(self, now: float) -> float:
        """Seconds the job has run in total, as of `now`."""
        if self.started_at is None:
            return self.service_seconds
        return self.service_seconds + max(0.0, now - self.started_at)

    def attained_at(self, now: float) -> float:
        """GPU-seconds of service the job has received, as of `now`."""
        if self.started_at is None or self.placement is None:
            return self.attained_gpu_seconds
        return self.attained_gpu_seconds + self.placement.num_gpus * max(0.0, now - self.started_at)

    @property
    def expected_duration(self) -> float | None:
        """The run time to plan with: the estimate, bounded by the time limit
        (a job never runs past it), or the limit alone when there is no
        estimate; None when neither is known."""
        if self.estimated_duration is None:
            return self.time_limit
        if self.time_limit is None:
            return self.estimated_duration
        return min(self.estimated_duration, self.time_limit)

    def remaining_at(self, now: float) -> float | None:
        """Expected seconds left at the requested size (`expected_duration`),
        or None if unknown."""
        expected = self.expected_duration
        if expected is None:
            return None
        return max(0.0, expected - self.service_at(now))

    def cpus_on(self, node_cpus: float) -> float:
        """CPUs the job reserves on a node with `node_cpus` CPUs: its own `cpus`,
        or, for a job without GPUs that names none, one slot
        (`ZERO_GPU_CPU_SLOT`) on a node that declared its CPU count.

        Why: a job without GPUs reserves nothing else, so without a slot
        any number of them land on one node at once (a 1,000-job array on
        one agent, whose launches then starve its heartbeats).
        """
        if self.cpus or self.most_gpus > 0 or node_cpus <= 0:
            return self.cpus
        return ZERO_GPU_CPU_SLOT

    def demand_on(
        self, placement: Placement, gpus_here: int, node_cpus: float = 0.0
    ) -> tuple[float, float]:
        """CPUs and memory (GB) one part of `placement` reserves on its node
        (`node_cpus`: that node's CPU count, for `cpus_on`).

        A gang's CPU and memory demand is split over its nodes in
        proportion to the GPUs each part holds.
        """
        whole = placement.num_gpus
        cpus = self.cpus_on(node_cpus)
        if whole <= 0 or placement.num_nodes == 1:
            return cpus, self.memory_gb
        return cpus * gpus_here / whole, self.memory_gb * gpus_here / whole


@dataclass(frozen=True, slots=True)
class ClusterView:
    """A snapshot: the time, the nodes, the queue in arrival order, the running jobs."""

    now: float
    nodes: tuple[NodeView, ...]
    pending: tuple[JobView, ...]
    running: tuple[JobView, ...] = ()
    # Optional: free GPUs per node, aligned with `nodes` (0 for an unhealthy
    # node). A host that keeps these counts current as GPUs change hands
    # (the simulator does) passes them so that policies need not count every
    # node on every pass; when given they must agree with `nodes`.
    free_counts: tuple[int, ...] | None = None
    # Optional: what the host knows of each job's goodput (job id -> measured
    # steps, gradient statistics, work left), for goodput-aware policies.
    goodput: Mapping[int, JobGoodput] | None = None
    # Optional: the tenant queues (guarantees, limits, weights) and their
    # decayed usage, filled by the host; None means no queues. Read by the
    # fair-share layer (core.fairshare), which is why it lives in the view:
    # see core/fairshare_queues.py for why queues are not policy options.
    tenancy: Tenancy | None = None
    # Optional: what became of each job that a pending job's `dependency`
    # names (job or array id -> core.dependencies.Outcome), filled by the
    # host; read by core.eligibility. None: no pending job names any.
    outcomes: Mapping[int, Outcome] | None = None

    @property
    def free_gpus(self) -> int:
        if self.free_counts is not None:
            return sum(self.free_counts)
        return sum(n.num_free_gpus for n in self.nodes)

    @property
    def total_gpus(self) -> int:
        return sum(n.num_gpus for n in self.nodes if n.healthy)

    def node(self, name: str) -> NodeView:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def job(self, job_id: int) -> JobView:
        for j in self.pending:
            if j.id == job_id:
                return j
        for j in self.running:
            if j.id == job_id:
                return j
        raise KeyError(job_id)
