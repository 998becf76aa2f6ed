"""Loaders for the public trace formats (the checkout's `traces/`), and writers for them.

Formats, recognised by their header:
- Philly (`timestamp,duration,num_gpus,gpu_time,cluster`): submission
  times become seconds from the first submission; the virtual cluster
  id becomes the job's `user` and its `queue` (`simulate --tenants philly`).
- Pollux workloads (`name,time,application,num_replicas,batch_size`):
  no duration; the job names its application and batch size, and the
  measured speed model supplies its work. An optional `declares_total`
  column (true/false) says which jobs declare their total epochs (what a
  policy may then know; see `spec.lengths_of`).
- Tiresias (`job_id,num_gpu,submit_time,iterations,model_name,duration,interval`).

Every trace job is preemptible (checkpointing training jobs). Samples
shipped in `schedulearn/sim/data/` are written by `write_sample` from
these loaders, in the same formats, so the loaders read them too.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from schedulearn.sim.jobs import SimInputError, SimJob, Workload

PHILLY = ("timestamp", "duration", "num_gpus")
POLLUX = ("name", "time", "application", "num_replicas", "batch_size")
TIRESIAS = ("job_id", "num_gpu", "submit_time", "duration")


def _rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    if not path.is_file():
        raise SimInputError(f"workload file {str(path)!r} does not exist; check the path")
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        rows = list(reader)
        return list(reader.fieldnames or []), rows


def detect(path: Path) -> str:
    """`philly`, `pollux` or `tiresias`, from the file's header."""
    header, _ = _rows(path)
    for kind, columns in (("philly", PHILLY), ("pollux", POLLUX), ("tiresias", TIRESIAS)):
        if all(c in header for c in columns):
            return kind
    raise SimInputError(
        f"{str(path)!r} is not a known trace; expected the columns of Philly "
        f"({', '.join(PHILLY)}), Pollux ({', '.join(POLLUX)}) or Tiresias ({', '.join(TIRESIAS)})"
    )


def _bad(path: Path, line: int, exc: Exception) -> SimInputError:
    return SimInputError(f"{str(path)!r} line {line}: {exc}; fix or remove that row")


def load_philly(path: Path, limit: int | None = None) -> Workload:
    _, rows = _rows(path)
    stamps: list[tuple[float, dict[str, str], int]] = []
    for i, row in enumerate(rows, start=2):
        try:
            # fromisoformat is several times faster than strptime; UTC avoids DST gaps.
            when = datetime.fromisoformat(row["timestamp"]).replace(tzinfo=UTC).timestamp()
        except ValueError as exc:
            raise _bad(path, i, exc) from None
        stamps.append((when, row, i))
    stamps.sort(key=lambda s: (s[0], s[2]))
    if limit is not None:
        stamps = stamps[:limit]
    origin = stamps[0][0] if stamps else 0.0
    jobs = []
    for k, (when, row, line) in enumerate(stamps):
        try:
            gpus = int(row["num_gpus"])
            duration = max(1.0, float(row["duration"]))
        except ValueError as exc:
            raise _bad(path, line, exc) from None
        jobs.append(
            SimJob(
                id=k,
                submitted_at=when - origin,
                gpus=gpus,
                duration=duration,
                name=f"philly-{k}",
                user=row.get("cluster", ""),
                queue=row.get("cluster", ""),
            )
        )
    return Workload(
        path.stem, tuple(jobs), "Microsoft Philly trace (Jeon et al., ATC'19)", str(path)
    )


def _flag(text: str) -> bool:
    """An optional yes/no column: empty is no."""
    value = text.strip().lower()
    if value in ("", "0", "false", "no"):
        return False
    if value in ("1", "true", "yes"):
        return True
    raise ValueError(f"declares_total must be true or false, not {text!r}")


def load_pollux(path: Path) -> Workload:
    _, rows = _rows(path)
    jobs = []
    for k, row in enumerate(rows):
        try:
            jobs.append(
                SimJob(
                    id=k,
                    submitted_at=float(row["time"]),
                    gpus=int(row["num_replicas"]),
                    name=row["name"],
                    app=row["application"],
                    model=row["application"],
                    batch_size=int(row["batch_size"]),
                    declares_total=_flag(row.get("declares_total", "")),
                )
            )
        except ValueError as exc:
            raise _bad(path, k + 2, exc) from None
    return Workload(path.stem, tuple(jobs), "Pollux evaluation workload (OSDI'21)", str(path))


def load_tiresias(path: Path) -> Workload:
    _, rows = _rows(path)
    jobs = []
    for k, row in enumerate(rows):
        try:
            jobs.append(
                SimJob(
                    id=int(row["job_id"]),
                    submitted_at=float(row["submit_time"]),
                    gpus=int(row["num_gpu"]),
                    duration=float(row["duration"]),
                    name=f"{row.get('model_name', 'job')}-{row['job_id']}",
                    model=row.get("model_name") or None,
                )
            )
        except ValueError as exc:
            raise _bad(path, k + 2, exc) from None
    return Workload(path.stem, tuple(jobs), "Tiresias simulator job trace (NSDI'19)", str(path))


LOADERS: dict[str, Callable[[Path], Workload]] = {
    "philly": load_philly,
    "pollux": load_pollux,
    "tiresias": load_tiresias,
}


def load_trace(path: Path) -> Workload:
    """Load any of the known trace formats."""
    return LOADERS[detect(path)](path)


def write_sample(workload: Workload, kind: str, out: Path) -> None:
    """Write `workload` in trace format `kind`, so that `load_trace` reads it back."""
    with out.open("w", newline="") as fh:
        w = csv.writer(fh)
        if kind == "philly":
            w.writerow(["timestamp", "duration", "num_gpus", "gpu_time", "cluster"])
            base = datetime(2017, 10, 1, tzinfo=UTC).timestamp()
            for j in workload.jobs:
                stamp = datetime.fromtimestamp(base + j.submitted_at, UTC).strftime(
                    "%Y-%m-%d %H:%M:%S"
                )
                duration = j.duration or 0.0
                w.writerow([stamp, duration, j.gpus, duration * j.gpus, j.user])
        elif kind == "pollux":
            w.writerow(list(POLLUX))
            for j in workload.jobs:
                w.writerow([j.name, f"{j.submitted_at:g}", j.app, j.gpus, j.batch_size])
        elif kind == "tiresias":
            w.writerow(
                [
                    "job_id",
                    "num_gpu",
                    "submit_time",
                    "iterations",
                    "model_name",
                    "duration",
                    "interval",
                ]
            )
            for j in workload.jobs:
                w.writerow(
                    [
                        j.id,
                        j.gpus,
                        f"{j.submitted_at:g}",
                        0,
                        j.model or "",
                        f"{j.duration or 0:g}",
                        0,
                    ]
                )
        else:
            raise SimInputError(f"unknown trace format {kind!r}; use philly, pollux or tiresias")
