"""The Submit form: its fields, and turning what was typed into a `JobSpec`.

Owns the mapping between form fields and the job spec, and where each
error is shown: beside the field it is about. The spec's own validation
(`protocol.JobSpec`) decides what is valid, so the form accepts exactly
what the API and the CLI accept; this module only reads the form's
strings (blank means "not given") and routes each message to its field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from schedulearn.protocol import JobSpec, Launcher, parse_array

# (name, label, hint) in the order the form shows them; `command` is required.
FIELDS: tuple[tuple[str, str, str], ...] = (
    ("name", "Name", "a label for listings, e.g. resnet50-lr0.1"),
    ("command", "Command", "run with /bin/sh -c on the node, e.g. python train.py --epochs 10"),
    ("image", "Container image", "leave blank to run on the host; e.g. pytorch/pytorch:2.3.0"),
    ("gpus", "GPUs", "how many GPUs (default 1; 0 for a CPU-only job)"),
    ("min_gpus", "Min GPUs", "elastic jobs only: the fewest GPUs it runs on"),
    ("max_gpus", "Max GPUs", "elastic jobs only: the most GPUs it can use"),
    ("gpu_type", "GPU type", "e.g. a100; blank for any"),
    ("cpus", "CPUs", "CPU cores beside the GPUs"),
    ("memory", "Memory", "e.g. 16G or 512M"),
    ("launcher", "Launcher", "torchrun starts one process per GPU"),
    ("priority", "Priority", "higher runs first under priority-aware policies"),
    ("estimated_duration", "Estimated duration", "e.g. 90s, 30m, 2h (SRTF uses it)"),
    ("deadline", "Deadline", "EDF runs the earliest deadline first"),
    ("model", "Model", "e.g. resnet50 (for GPU-type-aware placement)"),
    ("preemptible", "Preemptible", "the job may be suspended and resumed from a checkpoint"),
    ("env", "Environment", "one KEY=value per line"),
    (
        "secret_env",
        "Secret environment",
        "one KEY=value per line; the job sees the values, nobody is shown them again "
        "(not even you)",
    ),
    ("workdir", "Working directory", "where the command runs; blank for the agent's default"),
    ("shm_size", "Shared memory", "containers only, e.g. 8g"),
    ("count", "Count", "submit a job array of this many copies"),
    (
        "array",
        "Array",
        "instead of Count: FIRST-LAST[%N], e.g. 0-9%2 (tasks 0 to 9, at most 2 at once)",
    ),
    ("max_restarts", "Max restarts", "how often to requeue it when its node is lost"),
    (
        "time_limit",
        "Time limit",
        "e.g. 30m, 4h, 1-12:00:00; then it is stopped and ends timeout",
    ),
    (
        "dependency",
        "Dependency",
        "start after other jobs end: afterok:12, afterany:12:13, afternotok:14",
    ),
    ("queue", "Queue", "the tenant queue (team); blank for your default queue"),
    ("constraints", "Node labels", "labels the node must have, comma-separated, e.g. nvlink"),
)
FIELD_NAMES = tuple(f[0] for f in FIELDS)
# Form fields that set JobSpec fields of other names (tests/unit/test_every_job_option.py
# checks that every JobSpec field is set by some form field).
SETS: dict[str, tuple[str, ...]] = {"array": ("count", "array_start", "array_limit")}
LAUNCHERS = tuple(launcher.value for launcher in Launcher)


@dataclass(slots=True)
class SubmitForm:
    """What was typed, the spec it makes (None while it has errors) and the errors."""

    values: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    spec: JobSpec | None = None
    secret_dropped: bool = False  # secrets were typed; a form shown again is without them

    @property
    def form_error(self) -> str | None:
        return self.errors.get("__all__")


_FRIENDLY = {
    "int_parsing": "Give a whole number",
    "int_from_float": "Give a whole number",
    "float_parsing": "Give a number",
    "missing": "Give a command to run, e.g. python train.py",
}


def _clean(message: str) -> str:
    for prefix in ("Value error, ", "Assertion failed, "):
        if message.startswith(prefix):
            message = message[len(prefix) :]
    return message


def _parse_env(text: str, secret: bool = False) -> tuple[dict[str, str], str | None]:
    env: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            # A secret line is not quoted back: it may be the secret itself.
            shown = "" if secret else f" ({line[:40]!r})"
            return (
                env,
                f"Line {number}{shown} is not KEY=value; write one KEY=value a line",
            )
        env[key.strip()] = value
    return env, None


def _read_array(text: str, data: dict[str, Any]) -> str | None:
    """The Array field into count, array_start and array_limit, or what is wrong."""
    if data.get("count", "1") != "1":  # the blank form's Count is 1
        return "Give Array or Count, not both"
    try:
        first, size, limit = parse_array(text)
    except ValueError as exc:
        return str(exc)
    data.update(count=size, array_start=first)
    if limit is not None:
        data["array_limit"] = limit
    return None


def _field_of_model_error(message: str) -> str:
    """Which field a whole-spec error (sizes that disagree) belongs beside."""
    if "min_gpus" in message or "max_gpus" in message:
        return "min_gpus"
    return "gpus"


def parse(form: Mapping[str, Any]) -> SubmitForm:
    result = SubmitForm(values={k: str(form.get(k, "") or "") for k in FIELD_NAMES})
    values = result.values
    values["preemptible"] = "on" if form.get("preemptible") else ""
    data: dict[str, Any] = {}
    for key in FIELD_NAMES:
        raw = values[key].strip()
        if key == "preemptible":
            data[key] = bool(raw)
        elif key in ("env", "secret_env"):
            env, problem = _parse_env(values[key], secret=key == "secret_env")
            if problem:
                result.errors[key] = problem
            data[key] = env
        elif key == "constraints":
            data[key] = [label.strip() for label in raw.split(",") if label.strip()]
        elif key == "array" and raw:
            problem = _read_array(raw, data)
            if problem:
                result.errors[key] = problem
        elif raw:
            data[key] = raw
    # Secret values are never sent back, not even in the form they came from:
    # after an error they must be typed again.
    result.secret_dropped = bool(values["secret_env"].strip())
    values["secret_env"] = ""
    # Validate even when the form already has an error, so every field's
    # problem shows at once rather than one per round trip.
    try:
        spec = JobSpec.model_validate(data)
        if not result.errors:
            result.spec = spec
    except ValidationError as exc:
        for err in exc.errors():
            loc = [str(x) for x in err.get("loc", ())]
            where = loc[0] if loc and loc[0] in FIELD_NAMES else None
            if loc and loc[0] in ("array_start", "array_limit"):
                where = "array"
            message = _FRIENDLY.get(str(err.get("type")), _clean(str(err.get("msg", "invalid"))))
            if where == "deadline":
                message = "Give a date and time, e.g. 2030-06-01 18:00, or epoch seconds"
            if where is None:
                where = _field_of_model_error(message)
            result.errors.setdefault(where, message)
    return result


def refusal_field(message: str) -> str:
    """Beside which field a refusal ("this job can never run here: ...") is shown."""
    text = message.lower()
    if text.startswith("priority "):
        return "priority"
    if text.startswith("--dependency"):
        return "dependency"
    if "queue" in text:
        return "queue"
    if "label" in text:
        return "constraints"
    if "container" in text or "image" in text:
        return "image"
    if "gpu types" in text or "gpu_type" in text:
        return "gpu_type"
    if " cpus" in text:
        return "cpus"
    if " gb" in text or "memory" in text:
        return "memory"
    if "gpu" in text:
        return "gpus"
    return "__all__"
