"""Options of a workload spec (`kind:key=value:key=value`), read with types and checked.

Every generator reads its options through `Options`, which refuses
unknown keys and malformed values with a message naming the valid keys,
so a typo in a spec is an error rather than a silently ignored setting.
"""

from __future__ import annotations

from collections.abc import Iterable

from schedulearn.sim.jobs import SimInputError


class Options:
    """Parsed `key=value` options of one spec, consumed by typed getters."""

    def __init__(self, kind: str, pairs: dict[str, str], positional: list[str]) -> None:
        self.kind = kind
        self.pairs = pairs
        self.positional = positional
        self._used: set[str] = set()

    @classmethod
    def parse(cls, spec: str) -> Options:
        kind, *parts = spec.strip().split(":")
        pairs: dict[str, str] = {}
        positional: list[str] = []
        for part in parts:
            key, sep, value = part.partition("=")
            if sep:
                pairs[key.strip().lower().replace("-", "_")] = value.strip()
            elif part.strip():
                positional.append(part.strip())
        return cls(kind.strip().lower(), pairs, positional)

    def _get(self, key: str) -> str | None:
        self._used.add(key)
        return self.pairs.get(key)

    def text(self, key: str, default: str) -> str:
        value = self._get(key)
        return default if value is None else value

    def number(self, key: str, default: float, low: float | None = None) -> float:
        value = self._get(key)
        if value is None:
            return default
        try:
            number = float(value)
        except ValueError:
            raise SimInputError(f"{self.kind}: {key}={value!r} is not a number") from None
        if low is not None and number < low:
            raise SimInputError(f"{self.kind}: {key} must be at least {low:g}, not {value}")
        return number

    def integer(self, key: str, default: int, low: int | None = None) -> int:
        value = self.number(key, float(default), low)
        if value != int(value):
            raise SimInputError(f"{self.kind}: {key} must be a whole number, not {value:g}")
        return int(value)

    def numbers(self, key: str, default: Iterable[float]) -> list[float]:
        value = self._get(key)
        if value is None:
            return list(default)
        try:
            out = [float(v) for v in value.replace(";", ",").split(",") if v.strip()]
        except ValueError:
            raise SimInputError(
                f"{self.kind}: {key}={value!r} must be numbers separated by commas"
            ) from None
        if not out:
            raise SimInputError(f"{self.kind}: {key} needs at least one number")
        return out

    def flag(self, key: str, default: bool) -> bool:
        value = self._get(key)
        if value is None:
            return default
        lowered = value.lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise SimInputError(f"{self.kind}: {key}={value!r} must be true or false")

    def finish(self, positional_ok: bool = False) -> None:
        """Refuse keys no getter asked for, naming the ones that were (the valid ones)."""
        unknown = sorted(set(self.pairs) - self._used)
        if unknown:
            raise SimInputError(
                f"workload {self.kind!r} has no option {', '.join(unknown)}; "
                f"its options are: {', '.join(sorted(self._used))}"
            )
        if self.positional and not positional_ok:
            raise SimInputError(
                f"workload {self.kind!r} got {':'.join(self.positional)!r}; "
                "write options as key=value"
            )
