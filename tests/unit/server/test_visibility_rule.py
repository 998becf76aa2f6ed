"""The visibility rule itself (`server.services.visibility`): who may see a job's
details, which fields those are, and that a field added to `JobPublic` by hand
must be placed on one side or the other."""

from __future__ import annotations

from schedulearn.core.views import JobView, Role, declared
from schedulearn.protocol import JobPublic, JobState, Launcher
from schedulearn.server.auth import Caller
from schedulearn.server.auth import Role as TokenRole
from schedulearn.server.services.visibility import DETAILS, may_see_details, public_view

ALICE = Caller("alice", TokenRole.USER)
BOB = Caller("bob", TokenRole.USER)
ADMIN = Caller("root", TokenRole.ADMIN)

# The JobPublic fields everyone sees beyond the declared scheduling fields
# (core.views.JobView: SUBMITTED and KEPT are queue facts, shown like squeue).
QUEUE_FACTS = {
    "state", "image", "shm_size", "launcher", "array_id", "array_index", "max_restarts",
    "restarts", "attempt", "ended_at", "exit_code", "queue_position", "waiting_reason",
    "duration_estimate", "duration_source", "predicted_start_at", "predicted_end_at", "time_left",
    "migrations", "resizes", "details_hidden",
}  # fmt: skip


def _job() -> JobPublic:
    return JobPublic(
        id=12, name="run", user="alice", state=JobState.RUNNING, command=["python", "t.py"],
        image=None, gpus=1, min_gpus=None, max_gpus=None, cpus=0.0, memory_gb=0.0,
        gpu_type=None, priority=0, deadline=None, estimated_duration=None, model=None,
        preemptible=False, env={"K": "v"}, workdir="/w", shm_size=None, launcher=Launcher.NONE,
        array_id=None, array_index=None, max_restarts=3, restarts=0, attempt=1,
        submitted_at=1.0, started_at=2.0, ended_at=None, exit_code=None, message="m",
        placement={"n1": [0]}, progress=None, secret_env_keys=["TOKEN"],
    )  # fmt: skip


def test_the_owner_and_admins_see_details_and_no_one_else() -> None:
    assert may_see_details(ALICE, "alice") and may_see_details(ADMIN, "alice")
    assert not may_see_details(BOB, "alice")
    job = _job()
    assert public_view(job, ALICE) is job and public_view(job, ADMIN) is job
    hidden = public_view(job, BOB)
    assert hidden.details_hidden
    assert all(getattr(hidden, name) is None for name in DETAILS)
    kept = set(JobPublic.model_fields) - set(DETAILS) - {"details_hidden"}
    assert {n: getattr(hidden, n) for n in kept} == {n: getattr(job, n) for n in kept}


def test_every_public_field_is_a_queue_fact_or_a_detail() -> None:
    scheduling = set(declared(JobView, Role.SUBMITTED, Role.KEPT))
    unplaced = set(JobPublic.model_fields) - set(DETAILS) - scheduling - QUEUE_FACTS
    assert not unplaced, (
        f"JobPublic fields {sorted(unplaced)} are neither details (visibility.DETAILS: "
        "owner and admins only) nor queue facts (QUEUE_FACTS here: everyone); place each"
    )
    assert not set(DETAILS) & scheduling, "a scheduling field is everyone's to see"


def test_an_acct_row_holds_no_detail_so_it_may_list_every_job() -> None:
    # `acct` lists every job to everyone (services.accounting): that is right only
    # while none of its fields is a detail. A detail added to it must fail here.
    from schedulearn.protocol import AcctRow

    assert not set(AcctRow.model_fields) & {*DETAILS, "env", "secret_env", "logs"}
    # Its job fields are ones JobPublic shows to everyone; the rest are figures
    # computed from the job's history (times, GPU-hours).
    computed = {"queue", "waited_seconds", "ran_seconds", "gpu_hours"}
    assert set(AcctRow.model_fields) - computed <= set(JobPublic.model_fields) - set(DETAILS)
