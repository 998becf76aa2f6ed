"""Node capabilities: the one feasibility rule, and every policy obeying it.

`can_run` is checked on its own; then the shared helpers (`FreePool`,
`GpuLedger`) are shown to apply it; then every registered policy is run
on random snapshots whose nodes differ in container runtime and labels,
and no decision may put a job on a node that cannot run it. The fixed
scenarios first prove a capable node exists and gets the job, so "never
on the wrong node" is not passed by never placing anything.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from snapshots import NOW, elastic_job, fill, replay

from schedulearn.core import (
    ClusterView,
    FreePool,
    GpuLedger,
    InvalidDecision,
    JobView,
    NodeView,
    Placement,
    Resize,
    Start,
    available,
    create,
)
from schedulearn.core.capabilities import (
    NO_ACCOUNT,
    PLAIN,
    ExecutorKind,
    NodeCapabilities,
    can_run,
    check_label,
    unrunnable,
    why_not,
)

SPECS = [
    *available(),
    "fifo:backfill=true",
    "elastic-fifo:min_age=0",
    "srtf:margin=0:min_gain=0",
    "edf:preempt=true",
    "tiresias:queues=3:threshold=50,500:starvation_factor=1",
    "timeslice:quantum=10",
]
BOTH = frozenset({ExecutorKind.PROCESS, ExecutorKind.CONTAINER})
DOCKER = NodeCapabilities(executors=BOTH, container_runtime="docker 27.1")


def job(job_id: int = 1, gpus: int = 1, **fields: Any) -> JobView:
    return JobView(id=job_id, submitted_at=float(job_id), gpus=gpus, **fields)


def node(name: str, gpus: int = 4, caps: NodeCapabilities = PLAIN, gpu_type: str = "") -> NodeView:
    return NodeView.new(name, gpus, gpu_type=gpu_type, capabilities=caps)


# --- the rule -------------------------------------------------------------------


def test_an_image_needs_a_container_executor_and_a_runtime() -> None:
    image = job(image="pytorch:2")
    assert not can_run(image, node("plain"))
    assert can_run(image, node("docker", caps=DOCKER))
    # A container executor without a runtime runs nothing.
    no_runtime = NodeCapabilities(executors=BOTH)
    assert not can_run(image, node("broken", caps=no_runtime))
    assert why_not(image, node("plain")) == "node 'plain' has no container runtime"


def test_a_plain_job_needs_the_process_executor() -> None:
    containers_only = NodeCapabilities(
        executors=frozenset({ExecutorKind.CONTAINER}), container_runtime="podman 5"
    )
    assert can_run(job(), node("plain"))
    assert not can_run(job(), node("c", caps=containers_only))
    assert can_run(job(image="x"), node("c", caps=containers_only))


def test_constraints_are_a_subset_of_labels() -> None:
    labelled = node("ib", caps=NodeCapabilities(labels=frozenset({"ib", "a100-80g"})))
    assert can_run(job(constraints=("ib",)), labelled)
    assert can_run(job(constraints=("ib", "a100-80g")), labelled)
    assert not can_run(job(constraints=("ib", "nvme")), labelled)
    assert not can_run(job(constraints=("ib",)), node("plain"))
    assert why_not(job(constraints=("nvme",)), labelled) == "node 'ib' lacks label 'nvme'"


def test_gpu_type_counts_only_when_the_job_asks_for_gpus() -> None:
    v100 = node("v", gpu_type="v100")
    assert can_run(job(gpu_type="v100"), v100)
    assert not can_run(job(gpu_type="k80"), v100)
    assert can_run(job(gpus=0, gpu_type="k80"), v100)


def test_capabilities_round_trip_and_tolerate_what_they_do_not_know() -> None:
    caps = NodeCapabilities(BOTH, "docker 27.1", frozenset({"ib", "rack=r1"}))
    assert NodeCapabilities.from_dict(caps.as_dict()) == caps
    newer = {**caps.as_dict(), "executors": ["process", "wasm"], "unix_accounts": ["ann"]}
    assert NodeCapabilities.from_dict(newer).executors == {ExecutorKind.PROCESS}
    assert NodeCapabilities.from_dict(None) == PLAIN


@pytest.mark.parametrize("bad", ["", "-ib", "has space", "x" * 101, "a,b"])
def test_a_bad_label_says_what_a_label_may_contain(bad: str) -> None:
    with pytest.raises(ValueError, match="letters, digits"):
        check_label(bad)


def test_unrunnable_names_what_is_missing_and_what_is_present() -> None:
    nodes = [
        node("n1", caps=NodeCapabilities(labels=frozenset({"ib"}))),
        node("n2", caps=NodeCapabilities(labels=frozenset({"nvme"}))),
    ]
    why = unrunnable(job(constraints=("a100-80g",)), nodes)
    assert why is not None
    assert "no node has label 'a100-80g'; labels present: ib, nvme" in why
    assert "--label a100-80g" in why
    together = unrunnable(job(constraints=("ib", "nvme")), nodes)
    assert together is not None and "n1: ib; n2: nvme" in together
    image = unrunnable(job(image="x"), nodes)
    assert image is not None and "no node runs container images" in image
    assert unrunnable(job(constraints=("ib",)), nodes) is None
    assert unrunnable(job(image="x"), []) is None  # nothing to judge by


# --- the shared helpers apply it ------------------------------------------------------


def test_every_pool_method_skips_nodes_that_cannot_run_the_job() -> None:
    # The plain node comes first and is the best fit: only the rule sends the job on.
    nodes = (node("plain", 2), node("docker", 4, DOCKER))
    image = job(image="pytorch:2", gpus=2)
    pool = FreePool(nodes)
    for placement in (pool.first_fit(image), pool.best_fit(image), pool.pack(image)):
        assert placement == Placement.single("docker", [0, 1])
    assert [n.name for n in pool.candidates(image, 2)] == ["docker"]
    assert pool.first_fit(job(gpus=2)) == Placement.single("plain", [0, 1])
    # A gang only over capable nodes: 6 GPUs exist, but only 4 can run it.
    assert pool.gang(job(image="x", gpus=6)) is None
    assert pool.gang(job(gpus=6)) is not None


def test_the_ledger_refuses_a_placement_on_a_node_that_cannot_run_the_job() -> None:
    ledger = GpuLedger([node("plain"), node("docker", caps=DOCKER)])
    image = job(image="pytorch:2")
    with pytest.raises(InvalidDecision, match="node 'plain' has no container runtime"):
        ledger.apply([Start(1, Placement.single("plain", [0]))], {1: image})
    ledger.apply([Start(1, Placement.single("docker", [0]))], {1: image})
    assert ledger.node_view("docker").capabilities == DOCKER  # snapshots keep them


# --- every policy --------------------------------------------------------------------


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize(
    ("needs", "caps"),
    [
        ({"image": "pytorch:2"}, DOCKER),
        ({"constraints": ("ib",)}, NodeCapabilities(labels=frozenset({"ib"}))),
    ],
    ids=["image", "constraint"],
)
def test_each_policy_sends_the_job_to_the_only_node_that_can_run_it(
    spec: str, needs: dict[str, object], caps: NodeCapabilities
) -> None:
    # The incapable node is first in scan order and has the most room.
    nodes = (node("plain", 8), node("able", 2, caps))
    view = ClusterView(1000.0, nodes, (job(1, 1, estimated_duration=60.0, **needs),))
    decisions = create(spec).decide(view)
    assert decisions == [Start(1, Placement.single("able", [0]))]


@pytest.mark.parametrize("spec", SPECS)
def test_each_policy_leaves_a_job_no_node_can_run_waiting(spec: str) -> None:
    # The plain job arrives first (a FIFO head that cannot run would block the
    # rest, as a job of a GPU type no node has does): it starts, the others wait.
    view = ClusterView(
        1000.0,
        (node("plain", 8), node("ib", 2, NodeCapabilities(labels=frozenset({"ib"})))),
        (
            job(1, 1, estimated_duration=60.0),
            job(2, 1, image="pytorch:2", estimated_duration=60.0),
            job(3, 1, constraints=("nvme",), estimated_duration=60.0),
        ),
    )
    started = {d.job_id for d in create(spec).decide(view) if isinstance(d, Start)}
    assert started == {1}


CAPS = [
    PLAIN,
    DOCKER,
    NodeCapabilities(labels=frozenset({"ib"})),
    NodeCapabilities(BOTH, "podman 5", frozenset({"ib", "nvme"})),
    NodeCapabilities(frozenset({ExecutorKind.CONTAINER}), "docker 27", frozenset({"nvme"})),
]


@st.composite
def snapshots(draw: st.DrawFn) -> ClusterView:
    types = draw(st.sampled_from([[""], ["k80", "v100"]]))
    nodes = tuple(
        NodeView.new(
            f"n{i}",
            draw(st.integers(0, 8)),
            gpu_type=draw(st.sampled_from(types)),
            cpus=draw(st.sampled_from([0.0, 16.0])),
            capabilities=draw(st.sampled_from(CAPS)),
        )
        for i in range(draw(st.integers(1, 6)))
    )
    fields: dict[str, st.SearchStrategy[object]] = {
        "cpus": st.sampled_from([0.0, 0.0, 4.0]),
        "gpu_type": st.sampled_from([None, None, *[t for t in types if t]]),
        "deadline": st.one_of(st.none(), st.floats(0, 3 * NOW)),
        "estimated_duration": st.one_of(st.none(), st.floats(1, 5000)),
        "preemptible": st.booleans(),
        "attained_gpu_seconds": st.sampled_from([0.0, 60.0, 10_000.0]),
        "image": st.sampled_from([None, None, "pytorch:2"]),
        "constraints": st.sampled_from([(), (), ("ib",), ("nvme",), ("ib", "nvme")]),
    }

    def a_job(job_id: int) -> JobView:
        return elastic_job(draw, job_id, most_gpus=8, widest=10, fields=fields)

    return fill(draw, nodes, a_job, running=6, pending=(1, 8)).view()


@pytest.mark.parametrize("spec", SPECS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(view=snapshots())
def test_no_policy_places_a_job_on_a_node_that_cannot_run_it(spec: str, view: ClusterView) -> None:
    decisions = create(spec).decide(view)
    jobs = {j.id: j for j in (*view.pending, *view.running)}
    by_name = {n.name: n for n in view.nodes}
    for d in decisions:
        if isinstance(d, Start | Resize):
            j = jobs[d.job_id]
            for name in d.placement.nodes:
                assert can_run(j, by_name[name]), why_not(j, by_name[name])
    # And the ledger, which every host applies a pass through, agrees.
    replay(view, decisions)


def test_the_wire_and_the_core_share_one_label_pattern() -> None:
    from schedulearn import protocol
    from schedulearn.core import capabilities

    assert protocol.LABEL_PATTERN == capabilities.LABEL_PATTERN


# --- unix accounts (nodes whose agent runs jobs as their owners) ----------------------

ALICE_ONLY = NodeCapabilities(accounts=frozenset({"root", "alice"}))
BOB_ONLY = NodeCapabilities(accounts=frozenset({"root", "bob"}))


def test_a_node_that_runs_jobs_as_their_owners_needs_the_owners_account() -> None:
    alice = job(user="alice", account="alice")
    assert can_run(alice, node("a", caps=ALICE_ONLY))
    assert not can_run(alice, node("b", caps=BOB_ONLY))
    assert why_not(alice, node("b", caps=BOB_ONLY)) == (
        "node 'b' has no unix account 'alice' (user 'alice' runs jobs as it)"
    )
    # A node that runs every job as its agent's user takes anyone's.
    assert can_run(alice, node("plain"))
    # A view that does not know the account (the simulator) is not restricted.
    assert can_run(job(user="alice"), node("b", caps=BOB_ONLY))
    # An owner with no account at all goes only where accounts do not matter.
    nobody = job(user="carol", account=NO_ACCOUNT)
    assert not can_run(nobody, node("a", caps=ALICE_ONLY))
    assert can_run(nobody, node("plain"))


def test_accounts_round_trip_and_none_means_any() -> None:
    assert NodeCapabilities.from_dict(ALICE_ONLY.as_dict()) == ALICE_ONLY
    assert NodeCapabilities.from_dict(PLAIN.as_dict()).accounts is None
    assert NodeCapabilities.from_dict({"executors": ["process"]}).accounts is None


def test_unrunnable_says_which_account_is_missing_and_what_to_do() -> None:
    nodes = [node("b", caps=BOB_ONLY)]
    why = unrunnable(job(user="alice", account="alice"), nodes)
    assert why is not None and "no node has unix account 'alice'" in why
    assert "useradd alice" in why
    none = unrunnable(job(user="carol", account=NO_ACCOUNT), nodes)
    assert none is not None and "user 'carol' has no unix account" in none
    assert unrunnable(job(user="bob", account="bob"), nodes) is None


@pytest.mark.parametrize("spec", SPECS)
def test_each_policy_sends_a_job_only_where_its_owner_has_an_account(spec: str) -> None:
    # The node without the account is first in scan order and has the most room.
    nodes = (node("bobs", 8, BOB_ONLY), node("alices", 2, ALICE_ONLY))
    alice = job(1, 1, estimated_duration=60.0, user="alice", account="alice")
    decisions = create(spec).decide(ClusterView(1000.0, nodes, (alice,)))
    assert decisions == [Start(1, Placement.single("alices", [0]))]
    # The best fit by count alone would be the 1-GPU node without the account.
    pool = FreePool((node("bobs", 1, BOB_ONLY), node("alices", 2, ALICE_ONLY)))
    assert pool.best_fit(alice) == pool.first_fit(alice) == Placement.single("alices", [0])
