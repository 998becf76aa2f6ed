"""Throughput profiles: how fast a model trains on a GPU type, and the table that holds them.

A `ThroughputProfile` is one measurement: model, batch size, GPU type,
GPU count, whether the GPUs were spread over several servers, and the
training speed in steps per second. Reports in samples per second are
turned into steps per second with the batch size
(`ThroughputProfile.from_samples`).

A `ProfileTable` holds profiles by model; it answers lookups, takes new
profiles (`add`; the latest measurement of a key wins) and imports
Gavel's throughput table (`from_gavel`: `data[gpu_type]["('ResNet-50
(batch size 64)', 1)"]["null"]`, `*_unconsolidated` types for jobs
spread over servers).

Model names are parsed into a `ModelName`: the architecture ("ResNet-50"),
the batch size when the name carries one ("(batch size 64)", "bs=64"),
and the features the estimator compares models by: family (resnet,
transformer, lm, a3c, cyclegan, recommendation, ...), kind (vision,
attention, recurrent, rl, gan, recommendation) and parameter count for
well-known architectures. `parse_gavel_key` reads Gavel's
`"('LM (batch size 20)', 4)"` keys into (model, scale).

Pure: no I/O. The table's `version` grows with every change, so callers
that cache estimates (the `Estimator`) can tell when to forget them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

# Families by name prefix (longest match wins), and the kind each belongs to.
FAMILY_KIND: dict[str, str] = {
    "resnet": "vision",
    "resnext": "vision",
    "vgg": "vision",
    "densenet": "vision",
    "mobilenet": "vision",
    "efficientnet": "vision",
    "inception": "vision",
    "alexnet": "vision",
    "yolo": "vision",
    "vit": "attention",
    "transformer": "attention",
    "bert": "attention",
    "gpt": "attention",
    "t5": "attention",
    "lm": "recurrent",
    "lstm": "recurrent",
    "rnn": "recurrent",
    "gru": "recurrent",
    "deepspeech": "recurrent",
    "a3c": "rl",
    "dqn": "rl",
    "ppo": "rl",
    "cyclegan": "gan",
    "dcgan": "gan",
    "gan": "gan",
    "recommendation": "recommendation",
    "ncf": "recommendation",
    "dlrm": "recommendation",
}
# Parameters (millions) of well-known architectures, by normalised name
# (torchvision's and the original papers' figures). Others are unknown.
KNOWN_PARAMS_M: dict[str, float] = {
    "resnet18": 11.7,
    "resnet34": 21.8,
    "resnet50": 25.6,
    "resnet101": 44.5,
    "resnet152": 60.2,
    "vgg16": 138.4,
    "vgg19": 143.7,
    "densenet121": 8.0,
    "mobilenetv2": 3.5,
    "alexnet": 61.1,
    "bertbase": 110.0,
    "bertlarge": 340.0,
}

_BATCH_IN_PARENS = re.compile(r"^(?P<arch>.*?)\s*\(\s*batch[ _-]?size\s*(?P<bs>\d+)\s*\)\s*$", re.I)
_BATCH_SUFFIX = re.compile(
    r"^(?P<arch>.*?)[\s,:@/]+(?:bs|batch|batch_size)\s*=?\s*(?P<bs>\d+)$", re.I
)
_GAVEL_KEY = re.compile(r"^\(\s*'(?P<model>[^']*)'\s*,\s*(?P<scale>\d+)\s*\)$")


def normalise(name: str) -> str:
    """A name for matching: lower case, letters and digits only ("ResNet-50" -> "resnet50")."""
    return "".join(ch for ch in name.lower() if ch.isalnum())


@dataclass(frozen=True, slots=True)
class ModelName:
    """A model name taken apart: what the estimator compares models by."""

    arch: str  # as written, without the batch size: "ResNet-50"
    batch_size: int | None
    key: str  # normalised arch: "resnet50"
    family: str  # "resnet"
    kind: str  # "vision", or "" when the family is not known
    params_m: float | None  # millions of parameters, when known

    def __str__(self) -> str:
        return (
            self.arch if self.batch_size is None else f"{self.arch} (batch size {self.batch_size})"
        )


def parse_model(text: str, batch_size: int | None = None) -> ModelName:
    """Parse "ResNet-50 (batch size 64)", "resnet50 bs=64" or "A3C".

    An explicit `batch_size` overrides one found in the name.
    """
    arch, found = text.strip(), None
    for pattern in (_BATCH_IN_PARENS, _BATCH_SUFFIX):
        match = pattern.match(arch)
        if match is not None:
            arch, found = match.group("arch").strip(), int(match.group("bs"))
            break
    key = normalise(arch)
    family = max((f for f in FAMILY_KIND if key.startswith(f)), key=len, default="")
    if not family:
        family = re.sub(r"\d.*$", "", key) or key
    return ModelName(
        arch=arch,
        batch_size=batch_size if batch_size is not None else found,
        key=key,
        family=family,
        kind=FAMILY_KIND.get(family, ""),
        params_m=KNOWN_PARAMS_M.get(key),
    )


def parse_gavel_key(key: str) -> tuple[ModelName, int]:
    """Gavel's "('ResNet-50 (batch size 64)', 2)" -> (the model, scale factor 2)."""
    match = _GAVEL_KEY.match(key.strip())
    if match is None:
        raise ValueError(
            f"not a Gavel throughput key: {key!r}; expected \"('MODEL (batch size N)', SCALE)\""
        )
    return parse_model(match.group("model")), int(match.group("scale"))


@dataclass(frozen=True, slots=True)
class ThroughputProfile:
    """One measured speed: `steps_per_second` of a model on `gpu_count` GPUs of `gpu_type`.

    `spread` is True when the GPUs sat on more than one server (Gavel's
    `*_unconsolidated` types).
    """

    model: str
    gpu_type: str
    steps_per_second: float
    gpu_count: int = 1
    batch_size: int | None = None
    spread: bool = False

    def __post_init__(self) -> None:
        if not (math.isfinite(self.steps_per_second) and self.steps_per_second > 0):
            raise ValueError(
                f"throughput of {self.model!r} on {self.gpu_type!r} must be a positive "
                f"number of steps per second, not {self.steps_per_second!r}"
            )
        if self.gpu_count < 1:
            raise ValueError(f"gpu_count must be at least 1, not {self.gpu_count}")
        if not self.gpu_type.strip():
            raise ValueError(f"profile of {self.model!r} names no GPU type")

    @classmethod
    def from_samples(
        cls,
        model: str,
        gpu_type: str,
        samples_per_second: float,
        batch_size: int,
        gpu_count: int = 1,
        spread: bool = False,
    ) -> ThroughputProfile:
        """A profile from a samples/s report: steps/s = samples/s / batch size."""
        if batch_size < 1:
            raise ValueError(
                f"batch size must be at least 1 to convert samples/s, not {batch_size}"
            )
        return cls(model, gpu_type, samples_per_second / batch_size, gpu_count, batch_size, spread)

    @property
    def name(self) -> ModelName:
        return parse_model(self.model, self.batch_size)


# (normalised arch, batch size) identifies a model; (GPU count, spread) a configuration.
ModelKey = tuple[str, int | None]
Config = tuple[int, bool]


def model_key(name: ModelName) -> ModelKey:
    return name.key, name.batch_size


class ProfileTable:
    """Measured speeds by model, configuration and GPU type (steps per second)."""

    def __init__(self, profiles: Iterable[ThroughputProfile] = ()) -> None:
        self._names: dict[ModelKey, ModelName] = {}
        self._rates: dict[ModelKey, dict[Config, dict[str, float]]] = {}
        self.version = 0
        for profile in profiles:
            self.add(profile)

    def add(self, profile: ThroughputProfile) -> None:
        """Record a measurement; a later one for the same key replaces the earlier."""
        name = profile.name
        key = model_key(name)
        self._names.setdefault(key, name)
        configs = self._rates.setdefault(key, {})
        by_type = configs.setdefault((profile.gpu_count, profile.spread), {})
        by_type[profile.gpu_type.strip().lower()] = profile.steps_per_second
        self.version += 1

    @classmethod
    def from_gavel(
        cls, data: Mapping[str, Mapping[str, Mapping[str, float | None]]]
    ) -> ProfileTable:
        """Import Gavel's `simulation_throughputs.json` (parsed): its jobs-alone ("null") entries.

        A zero or missing entry means "not measured" and is skipped.
        """
        table = cls()
        for raw_type, entries in data.items():
            gpu_type, _, suffix = raw_type.partition("_")
            spread = suffix == "unconsolidated"
            for raw_key, entry in entries.items():
                name, scale = parse_gavel_key(raw_key)
                rate = entry.get("null")
                if rate is None or rate <= 0:
                    continue
                table.add(
                    ThroughputProfile(
                        name.arch, gpu_type, float(rate), scale, name.batch_size, spread
                    )
                )
        return table

    # --- reading -----------------------------------------------------------

    def lookup(
        self,
        model: str,
        gpu_type: str,
        gpu_count: int = 1,
        spread: bool = False,
        batch_size: int | None = None,
    ) -> float | None:
        """Measured steps/s of `model` on `gpu_type`, or None when never measured."""
        key = model_key(parse_model(model, batch_size))
        return self.rates(key, (gpu_count, spread)).get(gpu_type.strip().lower())

    def rates(self, key: ModelKey, config: Config) -> Mapping[str, float]:
        """Steps/s by GPU type of one model in one configuration (empty when unmeasured)."""
        return self._rates.get(key, {}).get(config, {})

    def configs(self, key: ModelKey) -> list[Config]:
        return sorted(self._rates.get(key, {}))

    def name_of(self, key: ModelKey) -> ModelName:
        return self._names[key]

    def models(self) -> list[ModelKey]:
        """Every profiled model, in the order first seen."""
        return list(self._rates)

    def gpu_types(self) -> list[str]:
        """Every GPU type with at least one profile, sorted."""
        return sorted(
            {t for configs in self._rates.values() for rates in configs.values() for t in rates}
        )

    def profiles(self) -> Iterator[ThroughputProfile]:
        for key, configs in self._rates.items():
            name = self._names[key]
            for (count, spread), by_type in configs.items():
                for gpu_type, rate in by_type.items():
                    yield ThroughputProfile(
                        name.arch, gpu_type, rate, count, name.batch_size, spread
                    )

    def without(self, keys: Iterable[ModelKey]) -> ProfileTable:
        """A copy without the given models (for leave-one-model-out tests)."""
        drop = set(keys)
        return ProfileTable(p for p in self.profiles() if model_key(p.name) not in drop)

    def __len__(self) -> int:
        return sum(len(r) for configs in self._rates.values() for r in configs.values())

    def __contains__(self, model: object) -> bool:
        return isinstance(model, str) and model_key(parse_model(model)) in self._rates
