"""Leave-one-model-out accuracy of the throughput estimator (mean absolute percentage error).

For each profiled model M (one of Gavel's 26 model/batch-size
combinations), M is removed from the table and estimated back, in the
one-GPU configuration on the table's GPU types:

- `cold`: no measurement of M at all. Compared: the relative speeds
  (speed on a type over the geometric mean over the types), since no
  absolute figure can be known for an unseen model;
- `warm`: M measured on one type (each type in turn); its steps/s on
  the other types are estimated and compared.

`by_architecture=True` also removes M's other batch sizes (the harder
"unseen architecture" question). The baseline is the same estimator
with `uniform=True`: every other model counts the same ("the same
relative speed as the average model").
"""

from __future__ import annotations

from dataclasses import dataclass

from schedulearn.core.estimator import Estimator
from schedulearn.core.throughput import ProfileTable, ThroughputProfile


@dataclass(frozen=True, slots=True)
class Accuracy:
    """MAPE (percent) per GPU type and overall, over `cases` estimates."""

    mode: str
    per_type: dict[str, float]
    overall: float
    cases: int


def leave_one_out(
    table: ProfileTable,
    mode: str,
    uniform: bool = False,
    by_architecture: bool = False,
    neighbours: int = 3,
) -> Accuracy:
    if mode not in ("cold", "warm"):
        raise ValueError(f"mode must be cold or warm, not {mode!r}")
    types = table.gpu_types()
    errors: dict[str, list[float]] = {t: [] for t in types}
    config = (1, False)
    for key in table.models():
        actual = table.rates(key, config)
        if not all(t in actual for t in types):
            continue
        name = table.name_of(key)
        dropped = [k for k in table.models() if k == key or (by_architecture and k[0] == key[0])]
        rest = table.without(dropped)
        if mode == "cold":
            est = Estimator(rest, neighbours, uniform).speeds(str(name), types)
            mean = _geomean([actual[t] for t in types])
            for t in types:
                truth = actual[t] / mean
                errors[t].append(abs(est.relative(t) - truth) / truth)
            continue
        for anchor in types:
            trial = rest.without(())
            trial.add(ThroughputProfile(name.arch, anchor, actual[anchor], 1, name.batch_size))
            est = Estimator(trial, neighbours, uniform).speeds(str(name), types)
            for t in types:
                got = est.of(t).steps_per_second
                if t != anchor and got is not None:
                    errors[t].append(abs(got - actual[t]) / actual[t])
    per_type = {t: 100 * sum(e) / len(e) for t, e in errors.items() if e}
    flat = [x for e in errors.values() for x in e]
    overall = 100 * sum(flat) / len(flat) if flat else float("nan")
    return Accuracy(mode, per_type, overall, len(flat))


def _geomean(values: list[float]) -> float:
    product = 1.0
    for v in values:
        product *= v
    return float(product ** (1.0 / len(values)))
