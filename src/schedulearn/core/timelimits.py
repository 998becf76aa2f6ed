"""Wall-clock limits (`submit --time 4h`, Slurm's `--time`): when a job has
used up its time, for the live server (which stops it) and for `show`.

A job's limit counts its run time over every attempt (`JobView.service_at`):
a job preempted here resumes from its checkpoint rather than starting over,
so the limit bounds its total run time and a resume does not grant it
again. The host stops an expired job with a grace signal first, then a
kill, and records it as `timeout` with `expired_reason`.
Estimates fall back on the limit through `JobView.expected_duration`.
Standard library only; `now` is passed in.
"""

from __future__ import annotations

from collections.abc import Iterable

from schedulearn.core.views import JobView


def left_of(limit: float | None, served: float) -> float | None:
    """Seconds of run time left under `limit` after `served` seconds (0 once
    used up); None without a limit. The simulator stops its jobs by this too."""
    return None if limit is None else max(0.0, limit - served)


def time_left(job: JobView, now: float) -> float | None:
    """Seconds of run time the job has left under its limit, as of `now`."""
    return left_of(job.time_limit, job.service_at(now))


def expired(jobs: Iterable[JobView], now: float) -> list[JobView]:
    """The jobs that have used up their limit, by id: running ones, and waiting
    ones whose earlier runs used it up (preempted at their limit), which
    would otherwise start only to be stopped at once."""
    out = [j for j in jobs if time_left(j, now) == 0.0]
    return sorted(out, key=lambda j: j.id)


def span(seconds: float) -> str:
    """`4h`, `90m`, `1h30m`, `45s`: a limit as a person would write it."""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [
        f"{hours}h" if hours else "",
        f"{minutes}m" if minutes else "",
        f"{secs}s" if secs else "",
    ]
    return "".join(parts) or "0s"


def expired_reason(job: JobView) -> str:
    """The message of a job stopped at its limit."""
    limit = span(job.time_limit or 0.0)
    return (
        f"stopped at its time limit ({limit}, --time): SIGTERM, then SIGKILL after the grace period"
    )
