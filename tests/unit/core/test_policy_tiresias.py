"""Tiresias: queues by attained GPU-seconds, FIFO inside, preemption across, starvation guard."""

from __future__ import annotations

import pytest
from core_scenario import Scenario, job, node, preempts, started_ids, starts

from schedulearn.core import create
from schedulearn.core.capabilities import ExecutorKind, NodeCapabilities
from schedulearn.core.policies.tiresias import Tiresias
from schedulearn.core.views import NodeView

HOUR = 3600.0


def test_defaults_follow_the_pollux_artifact() -> None:
    t = create("tiresias")
    assert isinstance(t, Tiresias)
    assert t.thresholds == [16 * HOUR]
    assert t.tick_seconds == 60


def test_queue_is_set_by_attained_gpu_seconds() -> None:
    t = Tiresias(queues=3, threshold="100,1000", starvation_factor=0)
    assert t.queue_of(job(1, attained_gpu_seconds=99.0), 0) == 0
    assert t.queue_of(job(1, attained_gpu_seconds=100.0), 0) == 1
    assert t.queue_of(job(1, attained_gpu_seconds=5000.0), 0) == 2
    # A running job accrues GPUs x seconds: 4 GPUs for 30 s = 120 GPU-seconds.
    s = Scenario(node("a", 4))
    running = s.run(job(2, gpus=4), {"a": [0, 1, 2, 3]}, started_at=0.0)
    assert t.queue_of(running, 20) == 0
    assert t.queue_of(running, 30) == 1


def test_missing_thresholds_grow_tenfold() -> None:
    assert Tiresias(queues=4, threshold=10).thresholds == [10.0, 100.0, 1000.0]


def test_bad_thresholds_say_what_to_change() -> None:
    with pytest.raises(ValueError, match="ascending"):
        create("tiresias:queues=3:threshold=500,100")
    with pytest.raises(ValueError, match="at most 1"):
        create("tiresias:threshold=1,2")
    with pytest.raises(ValueError, match="GPU-seconds"):
        create("tiresias:threshold=lots")


def test_fifo_inside_a_queue() -> None:
    s = Scenario(node("a", 1))
    pending = [job(2, submitted_at=5.0), job(1, submitted_at=1.0)]
    assert started_ids(s.decide(create("tiresias"), 10, pending)) == [1]


def test_a_higher_queue_goes_before_an_earlier_submission() -> None:
    s = Scenario(node("a", 1))
    old = job(1, submitted_at=0.0, attained_gpu_seconds=20 * HOUR, service_seconds=20 * HOUR)
    new = job(2, submitted_at=100.0)
    policy = create("tiresias:starvation_factor=0")
    assert started_ids(s.decide(policy, 200, [old, new])) == [2]


def test_a_waiting_job_preempts_a_job_of_a_lower_queue() -> None:
    s = Scenario(node("a", 2))
    s.run(job(90, preemptible=True, attained_gpu_seconds=17 * HOUR), {"a": [0]})
    s.run(job(91, preemptible=True), {"a": [1]}, started_at=0.0)
    decisions = s.decide(create("tiresias"), 100, [job(1)])
    assert preempts(decisions) == {90}
    assert starts(decisions)[1].gpus_on("a") == (0,)


def test_jobs_of_the_same_queue_never_preempt_each_other() -> None:
    s = Scenario(node("a", 1))
    s.run(job(90, preemptible=True), {"a": [0]}, started_at=0.0)
    assert s.decide(create("tiresias"), 100, [job(1)]) == []


def test_non_preemptible_jobs_keep_running_in_any_queue() -> None:
    s = Scenario(node("a", 1))
    s.run(job(90, attained_gpu_seconds=100 * HOUR), {"a": [0]})
    assert s.decide(create("tiresias"), 100, [job(1)]) == []


def test_starvation_guard_promotes_a_long_waiting_job() -> None:
    # Job 1 ran 2 h (reaching queue 1), was preempted at t=10,000 and has
    # waited 25 h since: more than 10 x its 2 h of service.
    starving = job(
        1,
        submitted_at=0.0,
        queued_at=10_000.0,
        service_seconds=2 * HOUR,
        attained_gpu_seconds=17 * HOUR,
    )
    newcomer = job(2, submitted_at=90_000.0)
    now = 10_000.0 + 25 * HOUR
    assert started_ids(
        Scenario(node("a", 1)).decide(create("tiresias"), now, [starving, newcomer])
    ) == [1]
    off = create("tiresias:starvation_factor=0")
    assert started_ids(Scenario(node("a", 1)).decide(off, now, [starving, newcomer])) == [2]


def test_a_promoted_job_keeps_the_top_queue_while_it_runs() -> None:
    s = Scenario(node("a", 1))
    # It waited 30 h before this run began, against 2 h of earlier service:
    # it was promoted, so a newcomer in queue 0 does not preempt it.
    s.run(
        job(
            90,
            preemptible=True,
            queued_at=0.0,
            service_seconds=2 * HOUR,
            attained_gpu_seconds=17 * HOUR,
        ),
        {"a": [0]},
        started_at=30 * HOUR,
    )
    assert s.decide(create("tiresias"), 31 * HOUR, [job(1, submitted_at=31 * HOUR)]) == []
    # Without the guard it is a queue-1 job and yields.
    assert preempts(
        s.decide(
            create("tiresias:starvation_factor=0"), 31 * HOUR, [job(2, submitted_at=31 * HOUR)]
        )
    ) == {90}


def test_preempts_the_lowest_queue_first_and_only_what_it_needs() -> None:
    s = Scenario(node("a", 3))
    t = create("tiresias:queues=3:threshold=100,1000:starvation_factor=0")
    s.run(job(90, preemptible=True, attained_gpu_seconds=500.0), {"a": [0]})  # queue 1
    s.run(job(91, preemptible=True, attained_gpu_seconds=5000.0), {"a": [1]})  # queue 2
    s.run(job(92, preemptible=True, attained_gpu_seconds=6000.0, submitted_at=95.0), {"a": [2]})
    decisions = s.decide(t, 100, [job(1)])
    # Both 91 and 92 are in queue 2; 92 was submitted later, so it yields.
    assert preempts(decisions) == {92}


# --- mode=artifact: the rules of the Tiresias in Pollux's artifact -----------


def test_artifact_mode_refuses_what_it_does_not_have() -> None:
    with pytest.raises(ValueError, match="no starvation guard"):
        create("tiresias:mode=artifact:starvation_factor=10")
    with pytest.raises(ValueError, match="2 queues"):
        create("tiresias:mode=artifact:queues=3")
    with pytest.raises(ValueError, match="mode must be one of"):
        create("tiresias:mode=nsdi")


def test_artifact_mode_preempts_inside_queue_0_for_an_earlier_job() -> None:
    # Both in queue 0: the earlier job (8 GPUs) comes first in the count walk,
    # so the later running job is suspended; our default never preempts
    # inside a queue.
    s = Scenario(node("a", 4), node("b", 4))
    s.run(job(2, gpus=4, submitted_at=10.0, preemptible=True), {"a": [0, 1, 2, 3]}, 20.0)
    early = job(1, gpus=8, submitted_at=0.0)
    artifact = s.decide(create("tiresias:mode=artifact"), 60, [early])
    assert preempts(artifact) == {2}
    assert started_ids(artifact) == [1]
    assert preempts(s.decide(create("tiresias:starvation_factor=0"), 60, [early])) == set()


def test_artifact_mode_skips_a_job_that_does_not_fit_and_takes_the_most_free_node() -> None:
    s = Scenario(node("a", 4), node("b", 4))
    s.run(job(9, gpus=3, submitted_at=0.0), {"a": [0, 1, 2]}, started_at=0.0)
    big = job(1, gpus=8, submitted_at=1.0)  # 5 left: waits, later jobs go on
    small = job(2, gpus=2, submitted_at=2.0)
    decisions = s.decide(create("tiresias:mode=artifact"), 60, [big, small])
    assert preempts(decisions) == set()
    # Node b has 4 free, a has 1: b first (our default packs onto the tightest fit).
    assert starts(decisions)[2].nodes == ("b",)


def test_artifact_mode_orders_queue_1_by_demotion() -> None:
    t = create("tiresias:mode=artifact:threshold=100")
    s = Scenario(node("a", 1))
    # Job 1 (earlier submitted) crosses the threshold later than job 2.
    s.run(job(2, submitted_at=5.0, preemptible=True), {"a": [0]}, started_at=0.0)
    # t=200: job 2 has 200 GPU-s (queue 1, seen now); job 1 waits in queue 0 and takes the GPU.
    assert started_ids(t.decide(s.view(200, [job(1, submitted_at=0.0)]))) == [1]
    s2 = Scenario(node("a", 1))
    one = job(1, submitted_at=0.0, attained_gpu_seconds=50.0, preemptible=True)
    s2.run(one, {"a": [0]}, started_at=200.0)
    waiting_2 = job(2, submitted_at=5.0, attained_gpu_seconds=200.0, service_seconds=200.0)
    # Job 2 was seen in queue 1 first (t=200): it goes before job 1 (seen at 260).
    assert started_ids(t.decide(s2.view(260, [waiting_2]))) == [2]


def test_a_users_failed_plain_job_does_not_hold_back_their_job_with_an_image() -> None:
    """A plain job that could make no room bars its user's later jobs of as many
    GPUs for the pass, but only those asking GPUs alone: one with an image runs
    on other nodes (container ones), and may make room there."""
    containers = NodeCapabilities(
        executors=frozenset({ExecutorKind.CONTAINER}), container_runtime="docker 27"
    )
    s = Scenario(node("p", 2), NodeView.new("c", 2, capabilities=containers))
    s.run(job(10, gpus=2, preemptible=False), {"p": [0, 1]})
    long = job(11, gpus=2, image="img", attained_gpu_seconds=20 * HOUR, preemptible=True)
    s.run(long, {"c": [0, 1]}, started_at=0.0)
    plain = job(1, gpus=2, user="u", submitted_at=100.0)
    imaged = job(2, gpus=2, user="u", submitted_at=101.0, image="img")
    policy = create("tiresias:starvation_factor=0")
    assert preempts(s.decide(policy, 200, [plain, imaged])) == {11}
