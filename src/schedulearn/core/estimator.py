"""The throughput estimator: a job's expected speed on every GPU type.

`Estimator(table).speeds(model, gpu_types, gpu_count, spread)` answers,
for each asked type, with a `TypeSpeed`:

- **measured**: the table has this model, configuration and type;
- **similar**: estimated from the `neighbours` most similar profiled
  models (k-nearest neighbours, weights 1 / (0.25 + distance));
- **default**: nothing is known (no model was ever profiled on that
  type; the model name is missing; or the model was never measured and
  no profiled model shares even its kind): relative speed 1.0, i.e.
  type-agnostic (the average type), and no steps/s.

Similarity between the job's model M and a profiled model P:
- features: 0 for the same architecture, 1 for the same family
  (ResNet-18 vs ResNet-50), 2 for the same kind (vision, attention,
  recurrent, rl, gan, recommendation), 3 otherwise; plus 0.25 per
  doubling of batch size between them; plus |log10| of the ratio of
  parameter counts when both are known;
- measured speeds: when M is measured on two or more types that P is
  measured on too, plus 4 x the spread (standard deviation, natural log)
  of M/P over those types: models whose speed-ups between types agree
  are alike whatever their names.

Estimates work in log space. When M is measured on some types (anchors),
the speed on an unmeasured type u is M's anchor speed times P's ratio
u/anchor, averaged over the anchors and over the neighbours: absolute
steps/s. When M is measured nowhere, its relative profile (speeds over
their geometric mean) is the neighbours' weighted relative profile; it
gets steps/s only when a neighbour is the same architecture at another
batch size (steps/s scaled by the batch-size ratio).

`relative` is the speed on a type over the geometric mean of the speeds
on the asked types: the "speed-up against the average type" the
`similarity` policy ranks jobs by. A configuration (GPU count, spread)
no model was profiled in falls back to the GPU count alone, then to one
GPU, whose ratios between types are the best knowledge there is.

Pure; results are cached per (table version, question).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from schedulearn.core.throughput import (
    Config,
    ModelKey,
    ModelName,
    ProfileTable,
    model_key,
    parse_model,
)


class Source(StrEnum):
    """Where an estimate comes from."""

    MEASURED = "measured"
    SIMILAR = "similar"
    DEFAULT = "default"


@dataclass(frozen=True, slots=True)
class TypeSpeed:
    """The expected speed of one job on one GPU type."""

    gpu_type: str
    relative: float  # speed over the geometric mean of the asked types' speeds
    steps_per_second: float | None  # None when no absolute figure can be given
    source: Source


@dataclass(frozen=True, slots=True)
class SpeedEstimate:
    """A job's expected speed on each asked GPU type, in the order asked."""

    model: str | None
    # The configuration the figures are for: the asked one, or the fallback used.
    gpu_count: int
    spread: bool
    types: tuple[TypeSpeed, ...]
    basis: tuple[str, ...] = ()  # the similar models the estimate leans on, nearest first

    def of(self, gpu_type: str) -> TypeSpeed:
        wanted = gpu_type.strip().lower()
        for speed in self.types:
            if speed.gpu_type == wanted:
                return speed
        raise KeyError(gpu_type)

    def relative(self, gpu_type: str) -> float:
        return self.of(gpu_type).relative

    def fastest(self) -> str:
        """The asked type with the highest expected speed (the first among equals)."""
        return max(self.types, key=lambda s: s.relative).gpu_type

    @property
    def is_default(self) -> bool:
        return all(s.source is Source.DEFAULT for s in self.types)


_FEATURE_WEIGHT_BATCH = 0.25
_RATIO_WEIGHT = 4.0
_SOFTEN = 0.25
_UNLIKE = 3.0  # feature distance of models with nothing in common


def feature_distance(a: ModelName, b: ModelName) -> float:
    """How unlike two models are by name: architecture, family, kind, batch, size."""
    if a.key == b.key:
        d = 0.0
    elif a.family == b.family:
        d = 1.0
    elif a.kind and a.kind == b.kind:
        d = 2.0
    else:
        d = 3.0
    if a.batch_size is not None and b.batch_size is not None:
        d += _FEATURE_WEIGHT_BATCH * abs(math.log2(a.batch_size / b.batch_size))
    elif (a.batch_size is None) != (b.batch_size is None):
        d += 0.5
    if a.key != b.key and a.params_m and b.params_m:
        d += abs(math.log10(a.params_m / b.params_m))
    return d


class Estimator:
    """Expected speeds from a `ProfileTable`; see the module docstring for the rule.

    `neighbours` is k of the k-nearest neighbours; `uniform=True` gives
    the naive baseline instead (every other model counts the same: "the
    same relative speed as the average model").
    """

    def __init__(self, table: ProfileTable, neighbours: int = 3, uniform: bool = False) -> None:
        if neighbours < 1:
            raise ValueError(f"neighbours must be at least 1, not {neighbours}")
        self.table = table
        self.neighbours = neighbours
        self.uniform = uniform
        self._cache: dict[tuple[object, ...], SpeedEstimate] = {}
        self._cache_version = table.version

    def speeds(
        self,
        model: str | None,
        gpu_types: Sequence[str],
        gpu_count: int = 1,
        spread: bool = False,
        batch_size: int | None = None,
    ) -> SpeedEstimate:
        """The job's expected speed on each of `gpu_types` (duplicates dropped)."""
        if self._cache_version != self.table.version:
            self._cache.clear()
            self._cache_version = self.table.version
        types = tuple(dict.fromkeys(t.strip().lower() for t in gpu_types))
        cache_key = (model, types, gpu_count, spread, batch_size)
        hit = self._cache.get(cache_key)
        if hit is None:
            hit = self._cache[cache_key] = self._estimate(
                model, types, max(1, gpu_count), spread, batch_size
            )
        return hit

    # --- the rule ------------------------------------------------------------

    def _estimate(
        self,
        model: str | None,
        types: tuple[str, ...],
        count: int,
        spread: bool,
        batch_size: int | None,
    ) -> SpeedEstimate:
        if model is None or not model.strip() or not types:
            return _default(model, types, count, spread)
        name = parse_model(model, batch_size)
        key = model_key(name)
        config = self._config(key, count, spread)
        known = {t for k in self.table.models() for t in self.table.rates(k, config)}
        own = dict(self.table.rates(key, config))
        logs: dict[str, float] = {t: math.log(v) for t, v in own.items()}
        sources = {t: Source.MEASURED for t in types if t in own}
        basis: list[str] = []
        missing = [t for t in types if t not in own and t in known]
        if missing and own:
            for t in missing:
                value, used = self._anchored(name, key, config, logs, t)
                if value is not None:
                    logs[t] = value
                    sources[t] = Source.SIMILAR
                    basis.extend(b for b in used if b not in basis)
        elif missing:
            centred, absolute, used = self._cold(name, key, config, missing)
            logs.update(absolute if absolute else centred)
            for t in centred:
                sources[t] = Source.SIMILAR
            basis.extend(used)
            if not absolute:
                # Relative only: say so by giving no steps/s for these types.
                return _assemble(model, types, config, own, logs, sources, basis, absolute=False)
        return _assemble(model, types, config, own, logs, sources, basis, absolute=True)

    def _config(self, key: ModelKey, count: int, spread: bool) -> Config:
        """The configuration to answer in: the asked one when anything was measured in it."""
        chain: list[Config] = [(count, spread), (count, False), (1, False)]
        for config in chain:
            if self.table.rates(key, config):
                return config
        for config in chain:
            if any(self.table.rates(k, config) for k in self.table.models()):
                return config
        return chain[0]

    def _ranked(
        self, name: ModelName, key: ModelKey, config: Config, fit: Mapping[ModelKey, float]
    ) -> list[tuple[float, ModelKey]]:
        """Candidates (with data in `config`, not the model itself) by distance, nearest first."""
        ranked = []
        for other in self.table.models():
            if other == key or not self.table.rates(other, config):
                continue
            d = 0.0 if self.uniform else feature_distance(name, self.table.name_of(other))
            ranked.append((d + _RATIO_WEIGHT * fit.get(other, 0.0), other))
        ranked.sort(key=lambda pair: (pair[0], pair[1][0], pair[1][1] or 0))
        return ranked

    def _anchored(
        self,
        name: ModelName,
        key: ModelKey,
        config: Config,
        logs: Mapping[str, float],
        target: str,
    ) -> tuple[float | None, list[str]]:
        """Log speed on `target` from the model's own measurements and its neighbours' ratios."""
        preds: dict[ModelKey, float] = {}
        fit: dict[ModelKey, float] = {}
        for other in self.table.models():
            rates = self.table.rates(other, config)
            overlap = [t for t in logs if t in rates]
            if other == key or target not in rates or not overlap:
                continue
            diffs = [logs[t] - math.log(rates[t]) for t in overlap]
            mean = sum(diffs) / len(diffs)
            preds[other] = mean + math.log(rates[target])
            if len(diffs) >= 2 and not self.uniform:
                fit[other] = math.sqrt(sum((x - mean) ** 2 for x in diffs) / len(diffs))
        ranked = [(d, k) for d, k in self._ranked(name, key, config, fit) if k in preds]
        chosen = ranked if self.uniform else ranked[: self.neighbours]
        if not chosen:
            return None, []
        return _weighted(chosen, preds), [str(self.table.name_of(k)) for _, k in chosen]

    def _cold(
        self, name: ModelName, key: ModelKey, config: Config, targets: list[str]
    ) -> tuple[dict[str, float], dict[str, float], list[str]]:
        """Relative (centred) log speeds on `targets`, and absolute ones when a
        same-architecture neighbour allows; plus the neighbours used."""
        centred_by: dict[ModelKey, dict[str, float]] = {}
        for other in self.table.models():
            rates = self.table.rates(other, config)
            if other == key or not all(t in rates for t in targets):
                continue
            logs = {t: math.log(rates[t]) for t in targets}
            mean = sum(logs.values()) / len(logs)
            centred_by[other] = {t: v - mean for t, v in logs.items()}
        ranked = [(d, k) for d, k in self._ranked(name, key, config, {}) if k in centred_by]
        if not self.uniform:
            # Nothing alike by name (not even the kind): no estimate, the default.
            ranked = [(d, k) for d, k in ranked if d < _UNLIKE]
        chosen = ranked if self.uniform else ranked[: self.neighbours]
        if not chosen:
            return {}, {}, []
        centred = {t: _weighted(chosen, {k: centred_by[k][t] for _, k in chosen}) for t in targets}
        absolute: dict[str, float] = {}
        same_arch = [k for _, k in chosen if k[0] == key[0]]
        if same_arch and not self.uniform:
            levels: dict[ModelKey, float] = {}
            for other in same_arch:
                rates = self.table.rates(other, config)
                level = sum(math.log(rates[t]) for t in targets) / len(targets)
                if name.batch_size and other[1]:
                    level += math.log(other[1] / name.batch_size)
                levels[other] = level
            level = _weighted([(d, k) for d, k in chosen if k in levels], levels)
            absolute = {t: level + c for t, c in centred.items()}
        return centred, absolute, [str(self.table.name_of(k)) for _, k in chosen]


def _weighted(chosen: list[tuple[float, ModelKey]], values: Mapping[ModelKey, float]) -> float:
    weights = [(1.0 / (_SOFTEN + d), k) for d, k in chosen]
    total = sum(w for w, _ in weights)
    return sum(w * values[k] for w, k in weights) / total


def _default(model: str | None, types: tuple[str, ...], count: int, spread: bool) -> SpeedEstimate:
    return SpeedEstimate(
        model, count, spread, tuple(TypeSpeed(t, 1.0, None, Source.DEFAULT) for t in types)
    )


def _assemble(
    model: str | None,
    types: tuple[str, ...],
    config: Config,
    measured: Mapping[str, float],
    logs: Mapping[str, float],
    sources: Mapping[str, Source],
    basis: list[str],
    absolute: bool,
) -> SpeedEstimate:
    """Normalise over the asked types that have a figure; the rest are default (1.0)."""
    have = [t for t in types if t in logs]
    mean = sum(logs[t] for t in have) / len(have) if have else 0.0
    speeds = []
    for t in types:
        if t in logs:
            rate = measured.get(t, math.exp(logs[t]) if absolute else None)
            speeds.append(TypeSpeed(t, math.exp(logs[t] - mean), rate, sources[t]))
        else:
            speeds.append(TypeSpeed(t, 1.0, None, Source.DEFAULT))
    return SpeedEstimate(model, config[0], config[1], tuple(speeds), tuple(basis))


def builtin_table(name: str) -> ProfileTable:
    """A profile table shipped with Schedulearn, by name (`gavel`)."""
    if name == "gavel":
        from schedulearn.core.gavel_profiles import gavel_table

        return gavel_table()
    raise ValueError(f"unknown profile table {name!r}; the built-in one is 'gavel'")
