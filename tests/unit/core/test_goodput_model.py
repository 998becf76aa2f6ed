"""The goodput model: fitting step times, statistical efficiency, the best batch."""

from __future__ import annotations

from dataclasses import replace

import pytest

from schedulearn.core.goodput import (
    BatchLimits,
    GoodputModel,
    JobGoodput,
    StepSample,
    ThroughputParams,
    batch_configs,
    fit_throughput,
    noise_ratio,
)
from schedulearn.core.goodput_fit import implied_network, optim_time

TRUE = ThroughputParams(
    alpha_c=0.02, beta_c=0.001, alpha_r=0.01, beta_r=0.002, alpha_n=0.05, beta_n=0.01
)
LIMITS = BatchLimits(init_batch=128, max_batch=4096, min_local=32, max_local=512)


def measured(nodes: int, replicas: int, atomic: int) -> StepSample:
    compute = TRUE.compute_time(atomic)
    net = TRUE.network_time(nodes, replicas)
    return StepSample(nodes, replicas, atomic, compute + net, net)


def test_the_fit_recovers_a_model_it_was_measured_on() -> None:
    samples = (
        measured(1, 1, 32),
        measured(1, 1, 128),
        measured(1, 2, 64),
        measured(1, 4, 64),
        measured(2, 8, 64),
        measured(4, 16, 64),
    )
    fitted = fit_throughput(samples)
    for nodes, replicas, atomic in [(1, 3, 100), (3, 12, 200), (1, 1, 256)]:
        assert fitted.step_time(nodes, replicas, atomic, 0) == pytest.approx(
            TRUE.step_time(nodes, replicas, atomic, 0), rel=1e-6
        )


def test_priors_for_what_was_never_measured() -> None:
    one = fit_throughput((measured(1, 1, 64),))
    # One batch size seen: half of the compute time is taken as constant.
    assert one.alpha_c == pytest.approx(TRUE.compute_time(64) / 2)
    # No multi-GPU step seen: the network is free (optimistic, so bigger sizes get tried).
    assert one.network_time(1, 4) == 0.0 and one.network_time(2, 8) == 0.0
    intra = fit_throughput((measured(1, 1, 64), measured(1, 4, 64)))
    # No multi-node step seen: crossing nodes costs 10% more than within one.
    assert intra.network_time(2, 4) == pytest.approx(1.1 * intra.network_time(1, 4))
    with pytest.raises(ValueError, match="at least one sample"):
        fit_throughput(())


def test_statistical_efficiency_falls_with_the_batch_and_rises_with_noise() -> None:
    quiet = GoodputModel(LIMITS, TRUE, noise=0.1)
    noisy = GoodputModel(LIMITS, TRUE, noise=10.0)
    assert quiet.efficiency(128) == noisy.efficiency(128) == 1.0
    assert quiet.efficiency(1024) < quiet.efficiency(256) < 1.0
    assert noisy.efficiency(1024) > quiet.efficiency(1024)
    # At the noise scale (init batch x var/sqr) the efficiency is (n + 1) / 2n, about one half.
    assert noisy.efficiency(128 * 10.0) == pytest.approx(11 / 20)


def test_the_best_batch_grows_with_the_noise_and_the_gpus() -> None:
    quiet = GoodputModel(LIMITS, TRUE, noise=0.05)
    noisy = GoodputModel(LIMITS, TRUE, noise=20.0)
    q, n = quiet.best(1, 4), noisy.best(1, 4)
    assert q is not None and n is not None
    assert n.batch > q.batch
    more = noisy.best(2, 8)
    assert more is not None and more.batch >= n.batch
    assert noisy.speed(2, 8) > noisy.speed(1, 1) > 0


def test_batch_configs_respect_the_limits() -> None:
    for replicas in (1, 2, 3, 8, 64):
        for batch, atomic, accum in batch_configs(LIMITS, replicas):
            assert LIMITS.min_local <= atomic <= LIMITS.max_local
            assert batch == replicas * atomic * (accum + 1) <= LIMITS.max_batch
            assert batch >= min(LIMITS.init_batch, replicas * atomic)
    # Past max_batch / min_local GPUs no configuration is allowed.
    assert batch_configs(LIMITS, LIMITS.max_replicas + 1) == ()
    fixed = BatchLimits(128, 4096, 32, 512, fixed_batch=1024)
    assert {b for b, _, _ in batch_configs(fixed, 4)} == {1024}


def test_equal_reports_share_one_fitted_model() -> None:
    samples = (measured(1, 1, 64), measured(1, 2, 64))
    a = JobGoodput(LIMITS, samples, 1.0, 2.0, remaining=100.0)
    b = JobGoodput(LIMITS, samples, 1.0, 2.0 * 1.001, remaining=50.0)
    assert a.model() is b.model()  # noise ratios within the same 3% step
    assert JobGoodput(LIMITS).model().measured is False
    assert noise_ratio(None, 1.0) is None and noise_ratio(2.0, 0.0) == 0.0
    with pytest.raises(ValueError, match="init_batch"):
        BatchLimits(0, 10)


# Compute and network that overlap (Pollux's gamma): the exposed sync time shrinks as
# the compute grows, as in Pollux's measured tables (imagenet on two nodes of four
# GPUs exposes 0.41 s at a local batch of 20 and 0.006 s at 200).
OVERLAPPED = ThroughputParams(
    alpha_c=0.02, beta_c=0.004, alpha_r=0.01, beta_r=0.0, alpha_n=0.4, beta_n=0.01, gamma=6.0
)


def overlapped(nodes: int, replicas: int, atomic: int) -> StepSample:
    step = OVERLAPPED.step_time(nodes, replicas, atomic, 0)
    return StepSample(nodes, replicas, atomic, step, step - OVERLAPPED.compute_time(atomic))


def test_overlap_is_learnt_from_steps_whose_exposed_sync_shrinks() -> None:
    samples = (
        overlapped(1, 1, 16),
        overlapped(1, 1, 200),
        overlapped(2, 8, 16),
        overlapped(2, 8, 64),
        overlapped(2, 8, 128),
    )
    assert samples[2].sync_time > 10 * samples[4].sync_time  # the shape of the tables
    fitted = fit_throughput(samples)
    assert fitted.gamma > 1.0
    # Where it was not measured (a local batch of 256 on 4 nodes) the fitted model
    # is within 10%; the additive one (gamma 1 on the same lines) is off by more.
    truth = OVERLAPPED.step_time(4, 16, 256, 0)
    assert fitted.step_time(4, 16, 256, 0) == pytest.approx(truth, rel=0.1)
    additive = replace(fitted, gamma=1.0)
    assert abs(additive.step_time(4, 16, 256, 0) / truth - 1) > 0.1


def test_overlap_stays_additive_where_one_configuration_cannot_tell() -> None:
    # One multi-GPU configuration fits any overlap exactly: the pull towards 1 keeps it additive.
    fitted = fit_throughput((overlapped(1, 1, 64), overlapped(2, 8, 64)))
    assert fitted.gamma == 1.0
    assert fitted.step_time(2, 8, 64, 0) == pytest.approx(
        OVERLAPPED.step_time(2, 8, 64, 0), rel=1e-3
    )


def test_overlap_helpers_are_inverse() -> None:
    for gamma in (1.0, 2.0, 10.0):
        step = optim_time(0.3, 0.2, gamma)
        assert max(0.3, 0.2) <= step <= 0.5 + 1e-12
        assert implied_network(step, 0.3, gamma) == pytest.approx(0.2)
    assert implied_network(0.1, 0.3, 2.0) == 0.0  # compute alone takes longer
