"""Gradient statistics from a step's pieces: what the goodput model's efficiency needs.

A data-parallel step averages several gradients, one per piece of the
batch (each replica's local batch, and each accumulation micro-step).
The spread between a piece's gradient and their mean tells how noisy the
gradient is (McCandlish et al., "An Empirical Model of Large-Batch
Training", 2018, appendix A): with `k` pieces of `b` samples each, `B =
k * b`, the mean squared norm of the pieces' gradients `|g_b|^2` and the
squared norm of their mean `|g_B|^2`,

    sqr = (B |g_B|^2 - b |g_b|^2) / (B - b)      the true gradient's |G|^2
    var = (|g_b|^2 - |g_B|^2) / (1/b - 1/B)      the per-sample noise tr(S)

are unbiased. `GradientNoise` smooths both (an exponential average with
bias correction, as Pollux's AdaptDL does: one step's estimate is very
noisy) and gives the noise at the job's initial batch, `var / init`,
which is the `grad_var` of `core.goodput` (its `grad_sqr` is `sqr`).
A step of one piece carries no spread, so it leaves the estimate as is.

Standard library only; owns nothing but its running averages.
"""

from __future__ import annotations

from dataclasses import dataclass

DECAY = 0.95  # weight of the past per step: about the last 20 steps count


@dataclass(slots=True)
class GradientNoise:
    """Running estimates of the gradient's squared norm and per-sample variance."""

    sqr_avg: float = 0.0
    var_avg: float = 0.0
    weight: float = 0.0  # sum of the decayed weights, for the bias correction
    decay: float = DECAY

    def update(self, piece_sqr: float, mean_sqr: float, piece_batch: float, pieces: int) -> bool:
        """Fold in one step; False (nothing learnt) for a step of one piece.

        `piece_sqr` is the mean over the `pieces` pieces of the squared norm
        of each piece's gradient (of its mean loss over `piece_batch`
        samples), `mean_sqr` the squared norm of the pieces' mean gradient.
        """
        if pieces < 2 or piece_batch <= 0:
            return False
        if not (piece_sqr >= 0 and mean_sqr >= 0):
            raise ValueError("squared gradient norms cannot be negative (or NaN)")
        b = float(piece_batch)
        big = b * pieces
        sqr = (big * mean_sqr - b * piece_sqr) / (big - b)
        var = (piece_sqr - mean_sqr) / (1.0 / b - 1.0 / big)
        self.sqr_avg = self.decay * self.sqr_avg + (1.0 - self.decay) * sqr
        self.var_avg = self.decay * self.var_avg + (1.0 - self.decay) * var
        self.weight = self.decay * self.weight + (1.0 - self.decay)
        return True

    @property
    def known(self) -> bool:
        return self.weight > 0.0

    @property
    def sqr(self) -> float | None:
        """Smoothed |G|^2 (None before any estimate)."""
        return self.sqr_avg / self.weight if self.known else None

    def var_at(self, init_batch: int) -> float | None:
        """Smoothed gradient variance at a batch of `init_batch` (None before any estimate).

        Never negative: a negative smoothed variance (possible early on,
        from noise) means no measurable noise yet.
        """
        if not self.known:
            return None
        return max(self.var_avg / self.weight, 0.0) / init_batch

    def noise_scale(self) -> float | None:
        """The gradient noise scale `tr(S) / |G|^2`, in samples (None when unknown)."""
        sqr = self.sqr
        var = self.var_at(1)
        if sqr is None or var is None or sqr <= 0:
            return None
        return var / sqr

    def state(self) -> dict[str, float]:
        return {"sqr_avg": self.sqr_avg, "var_avg": self.var_avg, "weight": self.weight}

    @classmethod
    def restore(cls, state: dict[str, float] | None) -> GradientNoise:
        if not state:
            return cls()
        return cls(float(state["sqr_avg"]), float(state["var_avg"]), float(state["weight"]))
