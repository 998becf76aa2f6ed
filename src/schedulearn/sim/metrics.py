"""Turn a run's job records and series into its `Summary` figures.

Definitions (all times in seconds):
- a job is a unit as users count it: a task group counts once, from its
  first submission to its last task's end (see `results.job_units`);
- makespan: from the first submission to the last completion;
- JCT: completion minus submission; p95/p99 by linear interpolation
  between order statistics;
- queueing delay: first start minus submission;
- GPU utilisation: busy GPU-seconds over total GPU-seconds, from the
  first submission to the last completion (time-weighted);
- slowdown: JCT over the seconds the job would take alone at its
  requested size; fairness is Jain's index of the slowdowns,
  `(sum x)^2 / (n * sum x^2)`, 1.0 when every job is slowed alike.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from schedulearn.sim.results import JobRecord, Series, Summary, job_units


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of already sorted values; 0.0 when empty."""
    if not sorted_values:
        return 0.0
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def jain(values: Sequence[float]) -> float:
    """Jain's fairness index; 1.0 for no values or all-equal values."""
    if not values:
        return 1.0
    square_sum = sum(v * v for v in values)
    if square_sum == 0:
        return 1.0
    return sum(values) ** 2 / (len(values) * square_sum)


def busy_gpu_seconds(series: Series, start: float, end: float) -> float:
    """Integral of busy GPUs over [start, end] of a step series."""
    times, busy = series.times, series.busy_gpus
    total = 0.0
    # Pairs (t_i, t_{i+1}); the last step lasts until `end`.
    for t, t_next, b in zip(times, (*times[1:], end), busy, strict=True):
        lo = t if t > start else start
        hi = t_next if t_next < end else end
        if hi > lo:
            total += b * (hi - lo)
    return total


def summarize(records: Sequence[JobRecord], series: Series, total_gpus: int) -> Summary:
    units = job_units(records)
    jcts: list[float] = []
    delays: list[float] = []
    slowdowns: list[float] = []
    deadlines = met = 0
    for u in units:
        if u.first_start is not None:
            delays.append(u.first_start - u.submitted_at)
        if u.deadline is not None:
            deadlines += 1
            if u.end is not None and u.end <= u.deadline + 1e-9:
                met += 1
        if u.end is None:
            continue
        jct = u.end - u.submitted_at
        jcts.append(jct)
        if u.isolated > 0:
            slowdowns.append(jct / u.isolated)
    jcts.sort()
    ends = [r.end for r in records if r.end is not None]
    first = min((r.submitted_at for r in records), default=0.0)
    last = max(ends, default=first)
    span = last - first
    util = (
        busy_gpu_seconds(series, first, last) / (total_gpus * span)
        if span > 0 and total_gpus > 0
        else 0.0
    )
    return Summary(
        jobs=len(units),
        finished=len(jcts),
        unfinished=len(units) - len(jcts),
        makespan=span if ends else 0.0,
        mean_jct=sum(jcts) / len(jcts) if jcts else 0.0,
        median_jct=percentile(jcts, 50),
        p95_jct=percentile(jcts, 95),
        p99_jct=percentile(jcts, 99),
        mean_queueing_delay=sum(delays) / len(delays) if delays else 0.0,
        gpu_utilisation=util,
        deadlines=deadlines,
        deadlines_met=met,
        preemptions=sum(r.preemptions for r in records),
        migrations=sum(r.migrations for r in records),
        resizes=sum(r.resizes for r in records),
        mean_slowdown=sum(slowdowns) / len(slowdowns) if slowdowns else 0.0,
        fairness=jain(slowdowns),
    )
