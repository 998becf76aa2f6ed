"""`runtime.AdaptiveBatch` and the gradient noise estimate, as a training script uses them."""

from __future__ import annotations

import dataclasses
import json
import math
import pickle
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import schedulearn.runtime
from schedulearn.agent.progress import parse_line
from schedulearn.core.goodput import GoodputModel, GoodputReport
from schedulearn.runtime import AdaptiveBatch
from schedulearn.runtime.gradnoise import GradientNoise

RUNTIME = Path(schedulearn.runtime.__file__).parent


def _noisy_steps(noise: GradientNoise, true_sqr: float, per_sample_var: float, b: int, k: int,
                 steps: int, seed: int = 0) -> None:  # fmt: skip
    """Feed `steps` steps of `k` pieces of `b` samples drawn around a true gradient."""
    rng = random.Random(seed)
    dim = 50
    g = [math.sqrt(true_sqr / dim)] * dim
    sd = math.sqrt(per_sample_var / dim / b)  # a piece's mean over b samples
    for _ in range(steps):
        pieces = [[gi + rng.gauss(0.0, sd) for gi in g] for _ in range(k)]
        mean = [sum(col) / k for col in zip(*pieces, strict=True)]
        piece_sqr = sum(sum(x * x for x in p) for p in pieces) / k
        noise.update(piece_sqr, sum(x * x for x in mean), b, k)


def test_the_noise_estimate_recovers_the_true_statistics() -> None:
    noise = GradientNoise(decay=0.999)
    _noisy_steps(noise, true_sqr=2.0, per_sample_var=64.0, b=8, k=4, steps=3000)
    assert noise.sqr == pytest.approx(2.0, rel=0.1)
    assert noise.var_at(1) == pytest.approx(64.0, rel=0.1)
    assert noise.noise_scale() == pytest.approx(32.0, rel=0.15)
    # At the initial batch the variance is the per-sample one over that batch.
    per_sample = noise.var_at(1)
    assert per_sample is not None and noise.var_at(32) == pytest.approx(per_sample / 32)


def test_a_step_of_one_piece_teaches_nothing_and_bad_norms_are_refused() -> None:
    noise = GradientNoise()
    assert noise.update(1.0, 1.0, 32, 1) is False and noise.sqr is None
    assert noise.var_at(32) is None and noise.noise_scale() is None
    with pytest.raises(ValueError, match="cannot be negative"):
        noise.update(-1.0, 1.0, 32, 2)


def test_a_first_run_uses_the_initial_batch_and_rate() -> None:
    batch = AdaptiveBatch(32, max_batch=256, max_local_batch=64, target=100, replicas=4)
    assert (batch.batch_size, batch.local_batch, batch.accum_steps) == (32, 8, 0)
    assert batch.lr_scale == 1.0 and not batch.done
    assert "batch size 32 (8 per GPU), lr scale 1" in batch.describe()


def _measured(replicas: int, state: dict[str, Any] | None = None, **limits: int) -> AdaptiveBatch:
    """A job that measured steps on one GPU (0.1 s + 1 ms a sample) and a noisy gradient."""
    batch = AdaptiveBatch(
        32, max_batch=limits.get("max_batch", 512), max_local_batch=limits.get("local", 64),
        target=1000, replicas=replicas, state=state,
    )  # fmt: skip
    for atomic in (32, 16):
        batch.local_batch, batch.batch_size = atomic, atomic * replicas
        for _ in range(5):
            batch.record_step(0.1 + 0.001 * atomic * (batch.accum_steps + 1))
    _noisy_steps(batch.noise, true_sqr=1.0, per_sample_var=300.0, b=8, k=4, steps=400)
    return batch


def test_more_gpus_and_more_noise_mean_a_bigger_batch_and_a_scaled_rate() -> None:
    one = _measured(1)
    one.adapt()
    four = AdaptiveBatch(32, max_batch=512, max_local_batch=64, target=1000, replicas=4,
                         state=one.state_dict())  # fmt: skip
    assert four.batch_size > one.batch_size >= 32
    for b in (one, four):
        assert b.batch_size == b.replicas * b.local_batch * (b.accum_steps + 1)
        assert b.local_batch <= 64
        # AdaScale: the gain of the batch under the measured noise, between 1 and linear.
        gain = GoodputModel(b.limits, None, b.model().noise).gain(b.batch_size)
        assert b.lr_scale == pytest.approx(gain) and 1.0 < b.lr_scale <= b.batch_size / 32
    # It is the batch the scheduler's model rates best on that allocation.
    best = four.model().best(1, 4)
    assert best is not None and best.batch == four.batch_size


def test_a_local_batch_over_the_memory_limit_is_accumulated() -> None:
    batch = _measured(1, local=16)
    batch.adapt()
    assert batch.local_batch <= 16
    assert batch.accum_steps >= 1 and batch.batch_size == batch.local_batch * (
        batch.accum_steps + 1
    )


def test_progress_counts_steps_at_the_initial_batch_until_the_target() -> None:
    batch = _measured(4)
    before, scale = batch.progress, batch.lr_scale
    made = batch.record_step(0.2)
    assert made == scale and batch.progress == pytest.approx(before + scale)
    batch.target = batch.progress
    assert batch.done


def test_the_state_survives_a_checkpoint_and_a_restart() -> None:
    batch = _measured(2)
    for copy in (pickle.loads(pickle.dumps(batch.state_dict())),
                 json.loads(json.dumps(batch.state_dict()))):  # fmt: skip
        again = AdaptiveBatch(32, max_batch=512, max_local_batch=64, target=1000, replicas=2,
                              state=copy)  # fmt: skip
        assert (again.progress, again.steps) == (batch.progress, batch.steps)
        assert again.noise.sqr == batch.noise.sqr
        assert again.model().params == batch.model().params
        assert again.batch_size == _choice(batch)


def _choice(batch: AdaptiveBatch) -> int:
    batch.adapt()
    return batch.batch_size


def test_bad_settings_say_what_to_change() -> None:
    with pytest.raises(ValueError, match="init_batch <= max_batch"):
        AdaptiveBatch(64, max_batch=32)
    with pytest.raises(ValueError, match="nodes <= replicas"):
        AdaptiveBatch(32, replicas=2, nodes=3)
    with pytest.raises(ValueError, match="target"):
        AdaptiveBatch(32, target=float("nan"))
    with pytest.raises(ValueError, match="step_time"):
        AdaptiveBatch(32).record_step(-1.0)


def test_the_report_line_is_what_the_agent_reads(tmp_path: Path) -> None:
    """The runtime writes the goodput record's fields (declared once, on the core's
    `GoodputReport`); the agent reads them back unchanged."""
    progress = tmp_path / "progress.jsonl"
    script = (
        "from schedulearn import runtime\n"
        "b = runtime.AdaptiveBatch(32, max_batch=256, target=50, replicas=2)\n"
        "b.record_step(0.25, sync_time=0.05, piece_sqr=3.0, mean_sqr=2.0)\n"
        "b.report(epoch=1, loss=0.5)\n"
    )
    env = {"SCHEDULEARN_PROGRESS_FILE": str(progress), "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=60)
    (line,) = progress.read_text().splitlines()
    written = json.loads(line)["goodput"]
    assert set(written) == {f.name for f in dataclasses.fields(GoodputReport)}
    report = parse_line(line)
    assert report is not None and report.goodput is not None and report.epoch == 1
    got = report.goodput
    assert (got.replicas, got.batch_size, got.step_time, got.sync_time) == (2, 32, 0.25, 0.05)
    assert got.progress == 1.0 and got.target == 50
    assert got.grad_sqr is not None and got.grad_var is not None


def test_the_runtime_imports_only_the_standard_library_and_the_pure_core() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))
    try:
        from test_core_imports import outside_imports
    finally:
        sys.path.pop(0)
    offenders = {}
    for path in sorted(RUNTIME.glob("*.py")):
        found = [
            name
            for name in outside_imports(path.read_text(), "schedulearn.runtime")
            if not name.startswith("schedulearn.runtime")
        ]
        if found:
            offenders[path.name] = found
    assert offenders == {}
    # And importing the runtime does not load the core until AdaptiveBatch is used.
    code = "import sys, schedulearn.runtime; print('schedulearn.core' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
