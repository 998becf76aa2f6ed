"""Every declared job and node field travels end to end, by name.

The fields are those `core.views.JobView` and `NodeView` declare (see
docs/adding-a-field.md). Each test gives every declared field a value
other than its default and checks that each one arrives: spec -> row ->
view -> public in the live system (on SQLite, and PostgreSQL with
SCHEDULEARN_TEST_POSTGRES=1), spec -> `SimJob` -> view -> run views in
the simulator, registration -> row -> view -> public for nodes. A field
dropped anywhere on the way fails here, naming the field.
"""

from __future__ import annotations

import dataclasses
import enum
import typing
from typing import Any

import pytest
from pydantic import TypeAdapter
from sqlalchemy import update
from sqlalchemy.types import TypeDecorator
from sqlmodel import Session, col

from schedulearn.core.capabilities import NodeCapabilities
from schedulearn.core.views import (
    JobView,
    NodeView,
    Placement,
    Role,
    declared,
    rebuild,
    role_of,
)
from schedulearn.protocol import (
    CapabilitiesPublic,
    JobPublic,
    JobSpec,
    JobState,
    NodePublic,
    NodeRegistration,
)
from schedulearn.server import fieldcode
from schedulearn.server.auth import Caller
from schedulearn.server.auth import Role as CallerRole
from schedulearn.server.declared import unwrap
from schedulearn.server.models import Job, Node, TenantQueue
from schedulearn.server.services import agents, jobs, nodes, snapshot
from schedulearn.sim.jobs import SimJob
from schedulearn.sim.runstate import running_view, stopped_view

JOB_HINTS = typing.get_type_hints(JobView)
NODE_HINTS = typing.get_type_hints(NodeView)
# Declared fields a spec gives under another name (its wire form).
WIRE_NAME = {"memory_gb": "memory"}


def other_than(annotation: Any, default: Any, salt: int) -> Any:
    """A value of `annotation` that differs from `default` (and from other fields')."""
    inner, _ = unwrap(annotation)
    if inner is bool:
        return not default
    if inner is int:
        return (default or 0) + 3 + salt
    if inner is float:
        return (default or 0.0) + 2.5 + salt
    if isinstance(inner, type) and issubclass(inner, enum.Enum):
        return next(m for m in inner if m != default)
    if inner is str:
        return f"v{salt}"
    if inner is Placement:
        return Placement.single("n1", [salt % 4])
    origin, args = typing.get_origin(inner), typing.get_args(inner)
    if origin in (tuple, frozenset, list):
        return origin([other_than(args[0], None, salt), other_than(args[0], None, salt + 1)])
    if isinstance(inner, type) and dataclasses.is_dataclass(inner):
        hints = typing.get_type_hints(inner)
        return inner(
            **{
                f.name: other_than(hints[f.name], _default(f), salt + i)
                for i, f in enumerate(dataclasses.fields(inner))
                if f.init
            }
        )
    raise AssertionError(f"teach other_than() a value of type {annotation!r}")


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def values_for(view: type, hints: dict[str, Any], *roles: Role) -> dict[str, Any]:
    fields = {f.name: f for f in dataclasses.fields(view)}
    return {
        name: other_than(hints[name], _default(fields[name]), i)
        for i, name in enumerate(declared(view, *roles))
    }


def submitted_values() -> dict[str, Any]:
    values = values_for(JobView, JOB_HINTS, Role.SUBMITTED)
    # The one rule between fields: min_gpus <= gpus <= max_gpus.
    values.update(gpus=4, min_gpus=2, max_gpus=6)
    # A dependency is Slurm's text naming a job that exists (the session's first).
    values.update(dependency="afterany:1")
    return values


def spec_for(values: dict[str, Any]) -> JobSpec:
    return JobSpec.model_validate(
        {"command": ["true"], **{WIRE_NAME.get(n, n): v for n, v in values.items()}}
    )


def wire(value: Any) -> Any:
    """A view value as the public model holds it."""
    if isinstance(value, Placement):
        return value.as_dict()
    if isinstance(value, NodeCapabilities):
        return CapabilitiesPublic.model_validate(value.as_dict())
    return value


def sent(values: dict[str, Any], hints: dict[str, Any]) -> dict[str, Any]:
    """View values in their JSON form, as a client sends them."""
    return {n: TypeAdapter(hints[n]).dump_python(v, mode="json") for n, v in values.items()}


def arrived(expected: dict[str, Any], got: object, where: str) -> None:
    missing = {
        n: (v, getattr(got, n, "<no such field>"))
        for n, v in expected.items()
        if getattr(got, n, None) != v
    }
    assert not missing, f"declared fields lost on the way to {where}: {missing}"


# --- the declaration itself ----------------------------------------------------


def test_every_view_field_declares_its_role() -> None:
    for view in (JobView, NodeView):
        for f in dataclasses.fields(view):
            assert isinstance(role_of(view, f.name), Role)


def test_the_tables_hold_every_stored_field_with_the_declared_type() -> None:
    stored = (Role.SUBMITTED, Role.KEPT, Role.INTERNAL)
    for view, hints, table in (
        (JobView, JOB_HINTS, Job.__table__),
        (NodeView, NODE_HINTS, Node.__table__),
    ):
        for name in declared(view, *stored):
            assert name in table.c, f"{view.__name__}.{name} has no column in {table.name}"
            inner, optional = unwrap(hints[name])
            column = table.c[name]
            if not optional:
                assert not column.nullable, f"{table.name}.{name} is nullable; the view is not"
            if inner in (int, float, str, bool):
                kind = column.type
                kind = kind.impl_instance if isinstance(kind, TypeDecorator) else kind
                assert kind.python_type is inner, f"{table.name}.{name} is {kind}, not {inner}"


def test_the_wire_models_carry_every_shown_field() -> None:
    for model, view, roles in (
        (JobSpec, JobView, (Role.SUBMITTED,)),
        (JobPublic, JobView, (Role.SUBMITTED, Role.KEPT)),
        (NodeRegistration, NodeView, (Role.SUBMITTED,)),
        (NodePublic, NodeView, (Role.SUBMITTED, Role.KEPT)),
    ):
        for name in declared(view, *roles):
            on_model = name in model.model_fields or hasattr(model, name)
            assert on_model, f"{model.__name__} lacks the declared field {name}"


@dataclasses.dataclass(frozen=True)
class _View:
    name: str = dataclasses.field(default="", metadata={"role": Role.SUBMITTED})
    queue: str = dataclasses.field(default="default", metadata={"role": Role.SUBMITTED})
    tags: tuple[str, ...] = dataclasses.field(default=(), metadata={"role": Role.SUBMITTED})
    fraction: float = dataclasses.field(default=0.0, metadata={"role": Role.VIEW})


_MODEL_SOURCE = """
from pydantic import BaseModel
from schedulearn.protocol import BoundedText, Small


class Model(BaseModel):
    name: str = ""

    # Declared on core.views._View: written by scripts/new-field, do not edit.
    # End of the declared fields.
"""


def test_a_declared_field_a_model_does_not_spell_out_is_written_into_it() -> None:
    target = fieldcode.Target("model.py", "Model", _View, (Role.SUBMITTED,), table=False)
    source = fieldcode.render(_MODEL_SOURCE, target)
    assert 'queue: BoundedText = "default"' in source
    assert "tags: tuple[BoundedText, ...] = ()" in source
    assert "name: BoundedText" not in source  # spelled out by the model
    assert "fraction" not in source  # a VIEW field is not submitted
    assert fieldcode.render(source, target) == source  # written once, then current
    namespace: dict[str, Any] = {}
    exec(compile(source, "model.py", "exec", dont_inherit=True), namespace)
    model = namespace["Model"]
    got = model.model_validate({"queue": "gpu-a", "tags": ["x"]})
    assert (got.queue, got.tags) == ("gpu-a", ("x",))
    with pytest.raises(ValueError, match="at most 1000"):
        model.model_validate({"queue": "q" * 1001})


# --- the live system: spec -> row -> view -> public ------------------------------


@pytest.fixture
def session(session: Session) -> Session:
    """conftest's session, with the queue the invented `queue` value names (a
    submission names an existing queue, services.queues) and job 1, which the
    invented `dependency` names (a submission names jobs that exist)."""
    session.add(TenantQueue(name=submitted_values()["queue"]))
    session.commit()
    [first] = jobs.submit(
        session, [(JobSpec(command=["true"]), Caller("ann", CallerRole.USER))], 1.0
    )
    assert isinstance(first, jobs.Submitted) and first.jobs[0].id == 1  # what `dependency` names
    # Ended, so the queue holds only the job each test submits.
    session.execute(update(Job).where(col(Job.id) == 1).values(state=JobState.SUCCEEDED))
    session.commit()
    return session


def test_a_job_keeps_every_declared_field_from_spec_to_public(session: Session) -> None:
    values = submitted_values()
    [result] = jobs.submit(session, [(spec_for(values), Caller("ann", CallerRole.USER))], 100.0)
    assert isinstance(result, jobs.Submitted), result
    job_id = result.jobs[0].id
    assert job_id is not None

    [queued] = snapshot.pending_views(session)
    arrived(values, queued, "the pending view (pending_views)")
    [cached] = snapshot.PendingCache().load(session)
    arrived(values, cached, "the pending view (PendingCache)")
    public = jobs.show(session, job_id, "fifo", 0.0)
    arrived({n: wire(v) for n, v in values.items()}, public, "JobPublic")


def test_a_job_keeps_every_field_the_server_keeps(session: Session) -> None:
    [result] = jobs.submit(
        session, [(spec_for(submitted_values()), Caller("ann", CallerRole.USER))], 100.0
    )
    assert isinstance(result, jobs.Submitted)
    job_id = result.jobs[0].id
    kept = values_for(JobView, JOB_HINTS, Role.KEPT, Role.INTERNAL)
    kept.pop("id")
    stored = {n: v.as_dict() if isinstance(v, Placement) else v for n, v in kept.items()}
    session.execute(update(Job).where(col(Job.id) == job_id).values(**stored))
    session.commit()

    [queued] = snapshot.pending_views(session)
    arrived(kept, queued, "the pending view")
    shown = {n: wire(v) for n, v in kept.items() if role_of(JobView, n).shown}
    arrived(shown, jobs.show(session, job_id, "fifo", 0.0), "JobPublic")


def test_a_running_job_keeps_every_declared_field_in_the_pass(session: Session) -> None:
    values = submitted_values()
    [result] = jobs.submit(session, [(spec_for(values), Caller("ann", CallerRole.USER))], 100.0)
    assert isinstance(result, jobs.Submitted)
    session.execute(
        update(Job)
        .where(col(Job.id) == result.jobs[0].id)
        .values(state="running", placement={"n1": [0]}, started_at=101.0)
    )
    session.commit()
    [running] = snapshot.build(session, 102.0).view.running
    arrived(values, running, "a running job's view (snapshot.build)")


def test_a_node_keeps_every_declared_field_from_registration_to_public(session: Session) -> None:
    values = values_for(NodeView, NODE_HINTS, Role.SUBMITTED)
    reg = NodeRegistration.model_validate({**sent(values, NODE_HINTS), "gpus": [{"index": 0}]})
    timing = agents.AgentTiming(1.0, 5.0, 1.0, 29500, None)
    agents.register(session, reg, 10.0, timing)

    [view], _, _ = snapshot.load_nodes(session)
    arrived(values, view, "NodeView")
    [public] = nodes.list_nodes(session, {}).items
    arrived({n: wire(v) for n, v in values.items()}, public, "NodePublic")

    kept = values_for(NodeView, NODE_HINTS, Role.KEPT, Role.INTERNAL)
    session.execute(update(Node).where(col(Node.name) == view.name).values(**kept))
    session.commit()
    [view], _, _ = snapshot.load_nodes(session)
    arrived(kept, view, "NodeView")
    [public] = nodes.list_nodes(session, {}).items
    arrived({n: v for n, v in kept.items() if role_of(NodeView, n).shown}, public, "NodePublic")


# --- the simulator: SimJob -> view -> run views -----------------------------------


def test_a_simulated_job_keeps_every_declared_field() -> None:
    values = submitted_values()
    job = SimJob(**{"id": 7, "submitted_at": 3.0, **values})
    pending = job.view(values["estimated_duration"])
    arrived(values, pending, "SimJob.view")

    every = values_for(JobView, JOB_HINTS, *Role)
    full = JobView(**every)
    placement = Placement.single("n2", [1])
    started = running_view(full, placement, 50.0, 0.5)
    unchanged = {n: v for n, v in every.items() if n not in ("placement", "started_at", "progress")}
    arrived(unchanged, started, "running_view")
    stopped = stopped_view(started, 60.0, 0.6, preempted=False)
    untouched = {
        n: v
        for n, v in unchanged.items()
        if n not in ("service_seconds", "attained_gpu_seconds", "queued_at", "preemptions")
    }
    arrived(untouched, stopped, "stopped_view")
    assert rebuild(full) == full
