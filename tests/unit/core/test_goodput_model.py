"""The goodput model: fitting step times, statistical efficiency, the best batch."""

from __future__ import annotations

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
