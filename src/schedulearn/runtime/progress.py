"""`report()`: send training progress to the agent, and on to the server.

The agent gives each job a progress file (`SCHEDULEARN_PROGRESS_FILE`)
and tails it; `report` appends one JSON line per call, from rank 0 only.
A file rather than a socket keeps a training script free of network code
and makes progress survive an agent restart. With no agent (the
variable unset) `report` returns at once.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from typing import IO, TYPE_CHECKING, Any

from schedulearn.runtime.env import PROGRESS_FILE, is_main_process

if TYPE_CHECKING:
    from schedulearn.core.goodput import GoodputReport

_handle: IO[str] | None = None
_handle_path: str | None = None


def report(
    *,
    step: int | None = None,
    epoch: int | None = None,
    loss: float | None = None,
    accuracy: float | None = None,
    samples_per_sec: float | None = None,
    total_epochs: int | None = None,
    goodput: GoodputReport | None = None,
    **metrics: float,
) -> None:
    """Record where training stands; any keyword beyond the named ones is a metric.

    `goodput` is what `AdaptiveBatch.report` adds: the job's batch
    configuration, step times and gradient statistics, for the scheduler.
    """
    path = os.environ.get(PROGRESS_FILE)
    if not path or not is_main_process():
        return
    record: dict[str, Any] = {"at": time.time()}
    named = {
        "step": step,
        "epoch": epoch,
        "loss": loss,
        "accuracy": accuracy,
        "samples_per_sec": samples_per_sec,
        "total_epochs": total_epochs,
    }
    for key, value in {**named, **metrics}.items():
        if value is None:
            continue
        number = float(value)
        if not math.isfinite(number):
            continue  # JSON has no NaN; a diverged loss is simply not reported
        record[key] = int(value) if isinstance(value, int) else number
    if goodput is not None:
        record["goodput"] = dataclasses.asdict(goodput)
    _write(path, json.dumps(record, separators=(",", ":")))


def _write(path: str, line: str) -> None:
    global _handle, _handle_path
    if _handle is None or _handle_path != path:
        _handle = open(path, "a", encoding="utf-8")  # noqa: SIM115 - kept open across calls
        _handle_path = path
    _handle.write(line + "\n")
    _handle.flush()
