"""The network and overlap terms of the step-time model, fitted from measured steps.

Pollux (Qiao et al., OSDI'21; petuum/adaptdl `adaptdl/goodput.py`, read,
not copied) models one optimiser step on `replicas` GPUs as compute and
gradient synchronisation that overlap:

    optim = (compute ** gamma + network ** gamma) ** (1 / gamma)

with `gamma` in [1, 10]: 1 means no overlap (the two add up), large
values the step takes as long as the longer of the two. A measured
step's `sync_time` is only the synchronisation left *exposed* after the
backward pass, so it shrinks as the local batch (the compute) grows: on
Pollux's imagenet tables two nodes of four GPUs expose 0.41 s at a local
batch of 20 and 0.006 s at 200, the step taking 0.56 and 1.01 s. An
additive model fitted at one of those points is wrong at the other by
40% or more; the overlapped one is right at both.

The fit (`fit_network`), standard library only: for each `gamma` of a
fixed grid, the network time each multi-GPU sample implies
(`implied_network`) is fitted by a line in `max(replicas - 2, 0)` per
kind of link (within a node; across nodes), then scaled by the factor
(from a geometric grid) that minimises the error in log step time; the
`gamma` with the least error, plus Pollux's small pull towards 1, wins.
Where every sample can be fitted exactly (one multi-GPU configuration)
that pull keeps the additive model. Pure and deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import NamedTuple

GAMMAS = (1.0, 1.5, 2.0, 3.0, 5.0, 10.0)
# Scale factors tried on each line fitted in implied-network space: the implied
# network of a sample whose compute hides it is ill-defined at large gamma, so the
# line is corrected against the step times themselves.
SCALES = tuple(2.0 ** (k / 4) for k in range(-8, 9))
GAMMA_PULL = 1e-3  # Pollux's regulariser towards a smaller gamma


class NetPoint(NamedTuple):
    """One measured multi-GPU step: its link, its compute as the model predicts it, its time."""

    nodes: int
    replicas: int
    compute: float  # predicted compute of one micro-step (seconds)
    step: float  # measured micro-step plus synchronisation (seconds)


class NetworkFit(NamedTuple):
    alpha_r: float
    beta_r: float
    alpha_n: float
    beta_n: float
    gamma: float


def optim_time(compute: float, network: float, gamma: float) -> float:
    """The last micro-step and the synchronisation, overlapped by `gamma`."""
    if network <= 0.0:
        return compute
    if compute <= 0.0:
        return network
    if gamma == 1.0:
        return compute + network
    top = max(compute, network)
    total: float = (compute / top) ** gamma + (network / top) ** gamma
    return top * math.pow(total, 1.0 / gamma)


def implied_network(step: float, compute: float, gamma: float) -> float:
    """The network time that, overlapped with `compute`, takes `step` (0 if none)."""
    if step <= compute:
        return 0.0
    if gamma == 1.0:
        return step - compute
    return step * math.pow(1.0 - math.pow(compute / step, gamma), 1.0 / gamma)


def nonneg_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Intercept and slope of the least-squares line, both kept non-negative (a
    negative slope gives the mean; a negative intercept the line through the origin)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx <= 0:
        return max(my, 0.0), 0.0
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    intercept = my - slope * mx
    if slope < 0:
        return max(my, 0.0), 0.0
    if intercept < 0:
        sxy = sum(x * y for x, y in zip(xs, ys, strict=True))
        sx2 = sum(x * x for x in xs)
        return 0.0, max(sxy / sx2, 0.0) if sx2 > 0 else 0.0
    return intercept, slope


def _group(points: Sequence[NetPoint], gamma: float) -> tuple[float, float, float]:
    """(alpha, beta, sum of squared log errors) of one link's points at `gamma`."""
    xs = [float(max(p.replicas - 2, 0)) for p in points]
    alpha, beta = nonneg_line(xs, [implied_network(p.step, p.compute, gamma) for p in points])
    best = (alpha, beta, math.inf)
    for k in SCALES if alpha + beta > 0 else (1.0,):
        a, b = alpha * k, beta * k
        err = 0.0
        for p, x in zip(points, xs, strict=True):
            pred = optim_time(p.compute, a + b * x, gamma)
            err += (math.log(max(pred, 1e-12)) - math.log(max(p.step, 1e-12))) ** 2
        if err < best[2]:
            best = (a, b, err)
    return best


@lru_cache(maxsize=4096)
def fit_network(points: tuple[NetPoint, ...]) -> NetworkFit:
    """Network lines within and across nodes and the overlap, from multi-GPU steps.

    With no multi-node step, crossing nodes is taken to cost 10% more than
    staying within one (Pollux's prior); with no multi-GPU step at all the
    network is free (an optimistic model, so that bigger sizes get tried).

    Kept per set of points: a job's model is refitted whenever its gradient
    noise moves, with the same steps (workload-6 adaptive: 13,750 fits of
    1,005 sets of points, most of a replay's time)."""
    intra = [p for p in points if p.nodes == 1 and p.replicas > 1]
    inter = [p for p in points if p.nodes > 1]
    if not intra and not inter:
        return NetworkFit(0.0, 0.0, 0.0, 0.0, 1.0)
    best: tuple[float, NetworkFit] | None = None
    for gamma in GAMMAS:
        ar, br, er = _group(intra, gamma) if intra else (0.0, 0.0, 0.0)
        an, bn, en = _group(inter, gamma) if inter else (ar * 1.1, br * 1.1, 0.0)
        score = math.sqrt((er + en) / (len(intra) + len(inter))) + GAMMA_PULL * (gamma - 1) ** 2
        if best is None or score < best[0] - 1e-12:
            best = (score, NetworkFit(ar, br, an, bn, gamma))
    assert best is not None
    return best[1]
