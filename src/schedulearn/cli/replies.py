"""The server's replies that the quickest commands read, without pydantic.

`schedulearn jobs` and `whoami` must answer in a fraction of a second
(issue 15: at most 0.3 s in all); importing pydantic and building the wire
models of `schedulearn.protocol` takes longer than that on its own. These
frozen dataclasses hold what those commands read from the server's JSON:
each field is named and typed as in its `protocol` model (`JobRow` ~
`JobPublic`, `JobRows` ~ `JobList`, `Identity` ~ `WhoAmI`), and a field the
model does not need to show a listing is left out, as a `_Reply` ignores
fields it does not know. tests/unit/cli/test_replies.py checks the names and
types against the models and that both read the same values from one reply.

A reply that does not fit (a missing field, a wrong type, a number that is
not finite: what the wire models refuse too) raises `ReplyError` naming the
field. NUL in text is not looked for: requests are where it is refused
(`protocol._Request`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol


class ReplyError(ValueError):
    """The server's JSON is not the reply this command expects."""


_REQUIRED = object()


class _Fields:
    """Typed reads of one JSON object (`what` names it in errors)."""

    def __init__(self, data: object, what: str) -> None:
        if not isinstance(data, dict):
            raise ReplyError(f"{what}: expected a JSON object, got {type(data).__name__}")
        self._data: dict[str, Any] = data
        self._what = what

    def _raw(self, name: str, default: object) -> Any:
        if name in self._data:
            return self._data[name]
        if default is _REQUIRED:
            raise ReplyError(f"{self._what}: field {name!r} is missing")
        return default

    def _wrong(self, name: str, wanted: str, value: object) -> ReplyError:
        return ReplyError(f"{self._what}: field {name!r} should be {wanted}, got {value!r:.80}")

    def integer(self, name: str) -> int:
        value = self._raw(name, _REQUIRED)
        if type(value) is not int:
            raise self._wrong(name, "an integer", value)
        return value

    def integer_or_none(self, name: str, default: object = _REQUIRED) -> int | None:
        return None if self._raw(name, default) is None else self.integer(name)

    def number(self, name: str) -> float:
        value = self._raw(name, _REQUIRED)
        if type(value) not in (int, float) or not math.isfinite(value):
            raise self._wrong(name, "a finite number", value)
        return float(value)

    def number_or_none(self, name: str, default: object = _REQUIRED) -> float | None:
        return None if self._raw(name, default) is None else self.number(name)

    def flag(self, name: str, default: object = _REQUIRED) -> bool:
        value = self._raw(name, default)
        if type(value) is not bool:
            raise self._wrong(name, "true or false", value)
        return value

    def text(self, name: str) -> str:
        value = self._raw(name, _REQUIRED)
        if type(value) is not str:
            raise self._wrong(name, "text", value)
        return value

    def command(self, name: str) -> list[str] | str | None:
        value = self._raw(name, _REQUIRED)
        if value is None or type(value) is str:
            return value
        if isinstance(value, list) and all(type(v) is str for v in value):
            return list(value)
        raise self._wrong(name, "text, a list of text or null", value)

    def placement(self, name: str) -> dict[str, list[int]] | None:
        value = self._raw(name, _REQUIRED)
        if value is None:
            return None
        if isinstance(value, dict) and all(
            type(k) is str and isinstance(v, list) and all(type(g) is int for g in v)
            for k, v in value.items()
        ):
            return {k: list(v) for k, v in value.items()}
        raise self._wrong(name, "GPU indices by node name, or null", value)

    def objects(self, name: str) -> list[object]:
        value = self._raw(name, _REQUIRED)
        if not isinstance(value, list):
            raise self._wrong(name, "a list", value)
        return value


class JobFacts(Protocol):
    """What the job texts of `cli.job_output` read: a `JobRow` or a
    `protocol.JobPublic` has it."""

    @property
    def id(self) -> int: ...
    @property
    def user(self) -> str: ...
    @property
    def command(self) -> list[str] | str | None: ...
    @property
    def details_hidden(self) -> bool: ...
    @property
    def array_id(self) -> int | None: ...
    @property
    def array_index(self) -> int | None: ...
    @property
    def placement(self) -> dict[str, list[int]] | None: ...


@dataclass(frozen=True)
class JobRow:
    """One job as `schedulearn jobs` lists it (fields of `protocol.JobPublic`)."""

    id: int
    name: str
    user: str
    # A `protocol.JobState` value ('pending', 'running', ...).
    state: str
    command: list[str] | str | None
    gpus: int
    min_gpus: int | None
    max_gpus: int | None
    priority: int
    array_id: int | None
    array_index: int | None
    submitted_at: float
    started_at: float | None
    ended_at: float | None
    exit_code: int | None
    placement: dict[str, list[int]] | None
    predicted_start_at: float | None
    predicted_end_at: float | None
    details_hidden: bool

    @classmethod
    def from_json(cls, data: object) -> JobRow:
        f = _Fields(data, "job")
        return cls(
            id=f.integer("id"),
            name=f.text("name"),
            user=f.text("user"),
            state=f.text("state"),
            command=f.command("command"),
            gpus=f.integer("gpus"),
            min_gpus=f.integer_or_none("min_gpus"),
            max_gpus=f.integer_or_none("max_gpus"),
            priority=f.integer("priority"),
            array_id=f.integer_or_none("array_id"),
            array_index=f.integer_or_none("array_index"),
            submitted_at=f.number("submitted_at"),
            started_at=f.number_or_none("started_at"),
            ended_at=f.number_or_none("ended_at"),
            exit_code=f.integer_or_none("exit_code"),
            placement=f.placement("placement"),
            predicted_start_at=f.number_or_none("predicted_start_at", None),
            predicted_end_at=f.number_or_none("predicted_end_at", None),
            details_hidden=f.flag("details_hidden", False),
        )


@dataclass(frozen=True)
class JobRows:
    """A page of `GET /jobs` (`protocol.JobList`)."""

    items: list[JobRow]
    total: int
    offset: int
    limit: int

    @classmethod
    def from_json(cls, data: object) -> JobRows:
        f = _Fields(data, "job list")
        return cls(
            items=[JobRow.from_json(item) for item in f.objects("items")],
            total=f.integer("total"),
            offset=f.integer("offset"),
            limit=f.integer("limit"),
        )


@dataclass(frozen=True)
class Identity:
    """Who the token in use belongs to (`protocol.WhoAmI`, all of it)."""

    user: str
    role: str
    priority_min: int | None
    priority_max: int | None

    @classmethod
    def from_json(cls, data: object) -> Identity:
        f = _Fields(data, "whoami")
        return cls(
            user=f.text("user"),
            role=f.text("role"),
            priority_min=f.integer_or_none("priority_min", None),
            priority_max=f.integer_or_none("priority_max", None),
        )
