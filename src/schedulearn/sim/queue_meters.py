"""The simulator's tenant-queue meters: what each queue held, was served and was owed.

Owns the three decayed figures a fair-share pass reads from `Tenancy`, kept
from the replay's own events as the live server keeps them in `queue_usage`:

- `usage`: GPUs each queue held;
- `served`: the part of it by jobs that fit their queue's own guarantee
  (`fits_guarantee`), which a queue is judged ahead or behind on;
- `owed`: the integral of `owed_rate` over the GPUs its fitting jobs ask for,
  waiting or running: what its guarantee alone would have given them.

The engine reports each change (`held`, `asked`) and sets the time before a
pass (`at`); the `tenancy` it puts in each view reads the meters lazily, as
of that time.
"""

from __future__ import annotations

from schedulearn.core.fairshare_queues import (
    DEFAULT_QUEUE,
    Tenancy,
    UsageMeter,
    fits_guarantee,
    owed_rate,
    own_guarantee,
)
from schedulearn.sim.jobs import SimJob


class QueueMeters:
    """The decayed usage, served use and owed GPU-time of every queue in a replay."""

    def __init__(self, declared: Tenancy, capacity: int) -> None:
        half_life = declared.half_life
        self._usage = UsageMeter(half_life)
        self._served = UsageMeter(half_life)
        self._owed = UsageMeter(half_life)
        self._capacity = capacity
        self._fits: dict[int, bool] = {}  # job id -> `fits_guarantee`
        self._asked: dict[str, int] = {}  # queue -> GPUs its fitting jobs ask for
        self.tenancy = Tenancy(
            declared.queues,
            self._usage.live(),
            half_life,
            self._served.live(),
            self._owed.live(),
        )

    def at(self, t: float) -> None:
        """The next pass reads the meters as of `t`."""
        self._usage.now = self._served.now = self._owed.now = t

    def held(self, t: float, job: SimJob, gpus: int) -> None:
        """`job`'s queue holds `gpus` more (or fewer) GPUs from `t` on."""
        self._usage.change(t, job.queue, gpus)
        if self._fits_of(job):
            self._served.change(t, job.queue, gpus)

    def asked(self, t: float, job: SimJob, gpus: int) -> None:
        """`job`'s queue's fitting jobs ask for `gpus` more (or fewer) from `t` on."""
        if not self._fits_of(job):
            return
        queue = job.queue or DEFAULT_QUEUE
        own = own_guarantee(self.tenancy, queue, self._capacity)
        before = self._asked.get(queue, 0)
        after = self._asked[queue] = before + gpus
        delta = owed_rate(own, after) - owed_rate(own, before)
        if delta:
            self._owed.change(t, queue, delta)

    def _fits_of(self, job: SimJob) -> bool:
        """`fits_guarantee` for `job`. Fixed for a job in a replay (fixed queues
        and GPUs): asked once, not at every start and stop."""
        fits = self._fits.get(job.id)
        if fits is None:
            fits = fits_guarantee(self.tenancy, job.queue, job.gpus, self._capacity)
            self._fits[job.id] = fits
        return fits
