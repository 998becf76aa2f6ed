"""What older protocol versions know, so the server can answer their clients.

Clients of protocol 1 (Schedulearn 0.1.0's CLI and agent) refuse any reply
field they do not know. `REPLY_FIELDS[1]` lists, per reply model, the
fields protocol 1 had (taken from commit fe41f5c's `protocol.py`), and
`downgrade` leaves every other field out of a reply body, so a field added
since then never reaches them. Clients of protocols 1 and 2 also get
stand-ins for values they required and a newer server may send as null
(`NOT_NULL`). The whole wire of each version is checked in
(`schedulearn/wire/protocol-<N>.json`); `tests/unit/test_wire_schema.py`
checks these tables against it. Nothing here needs editing when a field is
added: the table is a record of the past. A new table is added only when
a later version's clients turn out to refuse unknown fields too (none do:
from protocol 2 on, replies ignore them).

Imports only pydantic and the standard library.
"""

from __future__ import annotations

import enum
import types
from collections.abc import Mapping
from functools import cache
from typing import Annotated, Union, get_args, get_origin

from pydantic import BaseModel

Known = Mapping[str, frozenset[str]]

_PROGRESS_V1 = frozenset(
    {"at", "step", "epoch", "loss", "accuracy", "samples_per_sec", "total_epochs", "metrics"}
)

REPLY_FIELDS: dict[int, Known] = {
    1: {
        "Ack": frozenset({"ok", "ignored"}),
        "Assignment": frozenset({
            "job_id", "attempt", "name", "user", "command", "image", "env", "workdir", "gpus",
            "cpus", "memory_gb", "shm_size", "launcher", "executor", "gang", "checkpoint_dir",
            "checkpoint", "upload_checkpoint",
        }),
        "CheckpointRef": frozenset({"attempt", "sha256", "size_bytes"}),
        "ErrorBody": frozenset({"error", "detail"}),
        "EventAcks": frozenset({"acks"}),
        "GangInfo": frozenset(
            {"world_size", "node_rank", "master_addr", "master_port", "nproc_per_node"}
        ),
        "GpuPublic": frozenset({
            "index", "uuid", "type", "memory_mb", "job_id", "utilization_pct", "memory_used_mb",
        }),
        "Health": frozenset({"status", "database", "policy"}),
        "HeartbeatReply": frozenset({"heartbeat_seconds", "reregister"}),
        "JobHistory": frozenset({"job_id", "transitions"}),
        "JobList": frozenset({"items", "total", "offset", "limit"}),
        "JobPublic": frozenset({
            "id", "name", "user", "state", "command", "image", "gpus", "min_gpus", "max_gpus",
            "cpus", "memory_gb", "gpu_type", "priority", "deadline", "estimated_duration",
            "model", "preemptible", "env", "workdir", "shm_size", "launcher", "array_id",
            "array_index", "max_restarts", "restarts", "attempt", "submitted_at", "started_at",
            "ended_at", "exit_code", "message", "placement", "queue_position", "waiting_reason",
            "duration_estimate", "duration_source", "predicted_start_at", "predicted_end_at",
            "preemptions", "migrations", "resizes", "progress", "checkpoint",
        }),
        "LogLinePublic": frozenset({"seq", "attempt", "stream", "text", "at"}),
        "LogPage": frozenset({"job_id", "lines", "next_after"}),
        "NodeList": frozenset({"items"}),
        "NodePublic": frozenset({
            "name", "address", "healthy", "cpus", "memory_gb", "executors", "last_seen", "gpus",
        }),
        "PolicyForecast": frozenset({
            "spec", "in_force", "mean_jct", "makespan", "utilisation", "predicted", "unknown",
            "preemptions", "wall_seconds", "error",
        }),
        "PolicyPreview": frozenset({
            "at", "in_force", "pending", "running", "without_estimate", "compared",
            "horizon_seconds", "policies",
        }),
        "PolicyPublic": frozenset({"spec", "name", "tick_seconds", "available"}),
        "ProfileImportReply": frozenset({"stored"}),
        "ProfileList": frozenset({"items"}),
        "ProfilePublic": frozenset({
            "model", "batch_size", "gpu_type", "gpu_count", "spread", "steps_per_sec",
            "samples_per_sec", "source", "reports", "updated_at",
        }),
        # Protocol 1 called it ProgressReport, in requests and replies alike.
        "ProgressPublic": _PROGRESS_V1,
        "ProgressReport": _PROGRESS_V1,
        "ProgressHistory": frozenset({"job_id", "reports"}),
        "RegistrationReply": frozenset({"heartbeat_seconds", "adopt", "lost"}),
        "StopOrder": frozenset({"job_id", "attempt", "reason", "grace_seconds"}),
        "SubmitReply": frozenset({"ids", "jobs"}),
        "TokenPublic": frozenset({"user", "role", "token"}),
        "TransitionPublic": frozenset({"at", "from_state", "to_state", "attempt", "message"}),
        "WhoAmI": frozenset({"user", "role"}),
        "WorkBatch": frozenset({"starts", "stops"}),
    },
}  # fmt: skip


# Fields protocol 1 required to be non-null that a newer reply may send as null
# (a job's details, hidden from callers other than its owner and admins): a
# client of protocol 1 gets these stand-ins, read as "nothing shown".
# Protocol 2's clients tolerate unknown fields but still required these three
# (protocol-2.json: JobPublic's command, env and message are not nullable).
_HIDDEN_DETAILS: Mapping[str, Mapping[str, object]] = {
    "JobPublic": {"command": "", "env": {}, "message": ""}
}
NOT_NULL: dict[int, Mapping[str, Mapping[str, object]]] = {1: _HIDDEN_DETAILS, 2: _HIDDEN_DETAILS}
# Mappings a version's clients lack, folded into one they know (model ->
# lacking field -> known field): an agent of protocol 1 or 2 gets a job's
# `secret_env` in its `env`, so the job still sees its variables.
_SECRET_ENV: Mapping[str, Mapping[str, str]] = {"Assignment": {"secret_env": "env"}}
FOLDED: dict[int, Mapping[str, Mapping[str, str]]] = {1: _SECRET_ENV, 2: _SECRET_ENV}
# Enum values a version's clients lack, given as one they know (enum -> value
# -> stand-in): a job stopped at its time limit (`timeout`, protocol 3) reads
# as `failed` to a client of protocol 1 or 2, which would refuse the value.
_TIMEOUT: Mapping[str, Mapping[str, str]] = {"JobState": {"timeout": "failed"}}
VALUES: dict[int, Mapping[str, Mapping[str, str]]] = {1: _TIMEOUT, 2: _TIMEOUT}


# The versions whose clients get rewritten replies.
DOWNGRADED = frozenset(REPLY_FIELDS) | frozenset(NOT_NULL) | frozenset(FOLDED) | frozenset(VALUES)


def needs_downgrade(model: type[BaseModel], version: int) -> bool:
    """Whether a `model` reply may hold what clients of `version` cannot read."""
    return version in DOWNGRADED and _needs(model, version)


@cache
def _needs(model: type[BaseModel], version: int) -> bool:
    names = REPLY_FIELDS.get(version, {}).get(model.__name__)
    if names is not None and not names.issuperset(model.model_fields):
        return True
    if model.__name__ in NOT_NULL.get(version, {}) or model.__name__ in FOLDED.get(version, {}):
        return True
    lacking = VALUES.get(version, {})
    if lacking and any(
        e.__name__ in lacking for f in model.model_fields.values() for e in _enums_in(f.annotation)
    ):
        return True
    return any(
        _needs(sub, version)
        for field in model.model_fields.values()
        for sub in _models_in(field.annotation)
        if sub is not model
    )


def downgrade(model: type[BaseModel], data: object, version: int) -> object:
    """`data` (a `model` reply as parsed JSON) without the fields `version` does not know."""
    if version not in DOWNGRADED:
        return data
    known = _Old(
        REPLY_FIELDS.get(version, {}),
        NOT_NULL.get(version, {}),
        FOLDED.get(version, {}),
        VALUES.get(version, {}),
    )
    return _model(model, data, known)


class _Old:
    """What a version's clients know, the stand-ins they need for nulls, and the
    fields folded into others for them."""

    def __init__(
        self,
        names: Known,
        not_null: Mapping[str, Mapping[str, object]],
        folded: Mapping[str, Mapping[str, str]],
        values: Mapping[str, Mapping[str, str]],
    ) -> None:
        self.names = names
        self.not_null = not_null
        self.folded = folded
        self.values = values

    def get(self, model: str) -> frozenset[str] | None:
        return self.names.get(model)


def _model(model: type[BaseModel], data: object, known: _Old) -> object:
    if not isinstance(data, dict):
        return data
    names = known.get(model.__name__)
    stand_ins = known.not_null.get(model.__name__, {})
    for lacking, into in known.folded.get(model.__name__, {}).items():
        extra, base = data.get(lacking), data.get(into)
        if isinstance(extra, dict) and extra and isinstance(base, dict):
            data = {**data, into: {**base, **extra}}
    out = {}
    for key, value in data.items():
        if names is not None and key not in names:
            continue
        if value is None and key in stand_ins:
            out[key] = stand_ins[key]
            continue
        field = model.model_fields.get(key)
        out[key] = value if field is None else _value(field.annotation, value, known)
    return out


def _value(annotation: object, value: object, known: _Old) -> object:
    if isinstance(value, str) and known.values:
        for enum in _enums_in(annotation):
            stand_in = known.values.get(enum.__name__, {}).get(value)
            if stand_in is not None:
                return stand_in
    origin = get_origin(annotation)
    if origin is Annotated:
        return _value(get_args(annotation)[0], value, known)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _model(annotation, value, known)
    if origin is list and isinstance(value, list):
        (item,) = get_args(annotation)
        return [_value(item, v, known) for v in value]
    if origin is dict and isinstance(value, dict):
        item = get_args(annotation)[1]
        return {k: _value(item, v, known) for k, v in value.items()}
    if origin in (Union, types.UnionType) and isinstance(value, dict):
        # `X | None` and the like: the first model the union allows.
        for arg in get_args(annotation):
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                return _model(arg, value, known)
    return value


def _enums_in(annotation: object) -> list[type[enum.Enum]]:
    """The enums `annotation` names (`JobState`, `JobState | None`, `Annotated[...]`)."""
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return [annotation]
    found: list[type[enum.Enum]] = []
    for arg in get_args(annotation):
        found.extend(_enums_in(arg))
    return found


def _models_in(annotation: object) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in get_args(annotation):
        found.extend(_models_in(arg))
    return found
