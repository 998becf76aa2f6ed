"""The measured speed model: training speed read from the Pollux application tables.

For each application (bert, cifar10, deepspeech2, imagenet, ncf, yolov3)
a directory holds `placements.csv`, `scalability.csv` and
`validation-<batch>.csv` measured on real clusters (see
`traces/README.md`). This module follows the method of
Pollux's simulator (petuum/adaptdl, `osdi21-artifact`), re-implemented:

- a job trains a fixed number of epochs (`EPOCHS`); epoch `e` ends at
  the progress where the smallest of the validation tables marks it;
- local batch `ceil(batch / gpus)`, split into gradient-accumulation
  steps above the application's largest measured local batch (and, as
  Pollux does, at least one accumulation step for a single GPU whose
  batch exceeds the smallest measured batch);
- step time from `placements.csv` for the placement (GPUs per node,
  as the table's smallest rotation) interpolated linearly over the local
  batch; for placements not in the table, interpolated over local batch,
  then GPUs, then nodes (capped at 16) from both tables. Pollux uses a
  3-D Delaunay interpolation here; ours is separable by default, and
  `interpolation="delaunay"` takes Pollux's (`sim.interp3d`, with scipy);
- progress per second in epoch `e` is `gain / step_time`, `gain =
  (var + sqr) / (var / scale + sqr)`, `scale = batch /
  smallest_measured_batch`, with the gradient statistics of epoch `e`
  interpolated between the two nearest measured batch sizes;
- every (re)allocation costs `realloc_cost` (30 s) of no progress;
- with `artifact_time` (`simulate --artifact-time`; off by default)
  time is computed as in Pollux's simulator, two rules that ours does
  not follow otherwise: every epoch ends on a whole second (it rounds
  the time to each epoch's end, `EpochCurve`), and a placement's GPUs
  are ranked node by node from the node holding the most (its
  Tiresias takes GPUs from the most free node first and its placement
  is the per-node counts in that order; ours otherwise reads them in
  node-name order). The tables key step times by that order (`2244`
  and `2424` differ by a few percent). Each rule moves a job's end by
  seconds, which at 60 s rounds can move a preemption by a round.

An *adaptive* job (one that names an application but no batch size;
see `schedulearn.sim.workloads.adaptive`) picks its batch size itself,
as a job under Pollux's AdaptDL library does: at each epoch it runs the
batch that maximises its progress rate on the placement it was given,
among the configurations `core.goodput.batch_configs` allows (the same
candidates the `goodput` policy's model considers). In a replay the
engine has each job choose with the model it fitted from its own
measurements (`sim.job_learning`), as Pollux's jobs do;
`adaptive_rates` here is the choice made with the true tables, kept for
`estimate` and as the reference a learnt choice is compared with.

Jobs without an application (or with one that has no table) fall back
to the linear model. Work units here are Pollux's progress units.
"""

from __future__ import annotations

import bisect
import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

from schedulearn.core.goodput import BatchLimits, batch_configs
from schedulearn.core.views import Placement
from schedulearn.sim.interp3d import Delaunay3D
from schedulearn.sim.jobs import SimInputError, SimJob
from schedulearn.sim.speed import ClusterShape, Curve, LinearSpeed

# How step times of placements no table measured are interpolated (module doc).
INTERPOLATIONS = ("separable", "delaunay")
EPOCHS = {"bert": 2, "cifar10": 100, "deepspeech2": 80, "imagenet": 90, "ncf": 10, "yolov3": 50}
MAX_LOCAL_BSZ = {"yolov3": 8}
MAX_TABLE_NODES = 16

_Series = tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]  # bsz, step, sync


def _interp(
    xs: tuple[float, ...] | list[float], ys: tuple[float, ...] | list[float], x: float
) -> float:
    """Piecewise-linear interpolation, extended linearly past both ends."""
    if len(xs) == 1:
        return ys[0]
    i = bisect.bisect_left(xs, x)
    i = min(max(i, 1), len(xs) - 1)
    x0, x1 = xs[i - 1], xs[i]
    y0, y1 = ys[i - 1], ys[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def _series(rows: list[list[str]]) -> _Series:
    """(local batch, step time, sync time) columns of table rows as one series:
    duplicate local batch sizes averaged (in the rows' order), then sorted."""
    steps: dict[float, list[float]] = {}
    syncs: dict[float, list[float]] = {}
    for row in rows:
        bsz = float(row[0])
        if bsz in steps:
            steps[bsz].append(float(row[1]))
            syncs[bsz].append(float(row[2]))
        else:
            steps[bsz] = [float(row[1])]
            syncs[bsz] = [float(row[2])]
    keys = sorted(steps)
    return (
        tuple(keys),
        tuple(sum(steps[k]) / len(steps[k]) for k in keys),
        tuple(sum(syncs[k]) / len(syncs[k]) for k in keys),
    )


def canonical(counts: tuple[int, ...]) -> tuple[int, ...]:
    """The lexicographically smallest rotation: the placement tables' key."""
    counts = tuple(c for c in counts if c)
    if not counts:
        return counts
    return min(counts[i:] + counts[:i] for i in range(len(counts)))


@dataclass(frozen=True, slots=True)
class _Validation:
    batch: int
    progress: tuple[float, ...]
    grad_sqr: tuple[float, ...]
    grad_var: tuple[float, ...]


class AppTables:
    """The measured tables of one application, loaded from its directory."""

    def __init__(self, directory: Path, delaunay: bool = False) -> None:
        self.name = directory.name
        # Pollux's 3-D interpolation for placements not in the table (None: ours).
        self._nd = Delaunay3D(directory) if delaunay else None
        if self.name not in EPOCHS:
            raise SimInputError(
                f"no epoch count for application {self.name!r}; known: {', '.join(sorted(EPOCHS))}"
            )
        self.epochs = EPOCHS[self.name]
        # The speed tables' rows, grouped by placement and by shape (nodes,
        # GPUs) in the files' order, as text: a series is made of a group's
        # numbers when a run first looks it up (`_placement`, `_shape`), and a
        # run looks up a few dozen of the hundreds measured.
        self._placement_rows: dict[tuple[int, ...], list[list[str]]] = {}
        self._shape_rows: dict[tuple[int, int], list[list[str]]] = {}
        # A placement string's two groups, worked out once: the table repeats
        # each placement for every local batch measured.
        groups: dict[str, tuple[list[list[str]], list[list[str]]]] = {}
        for row in read_columns(directory / "placements.csv", _PLACEMENT_COLUMNS):
            both = groups.get(row[3])
            if both is None:
                counts = tuple(int(c) for c in row[3])
                both = groups[row[3]] = (
                    self._placement_rows.setdefault(canonical(counts), []),
                    self._shape_rows.setdefault((len(counts), sum(counts)), []),
                )
            both[0].append(row)
            both[1].append(row)
        bszs = [float(row[0]) for rows in self._placement_rows.values() for row in rows]
        for row in read_columns(directory / "scalability.csv", _SCALABILITY_COLUMNS):
            self._shape_rows.setdefault((int(row[3]), int(row[4])), []).append(row)
        self._placements: dict[tuple[int, ...], _Series] = {}
        # Per node count: the GPU counts measured and their series.
        self.node_counts = tuple(sorted({n for n, _ in self._shape_rows}))
        self._shapes: dict[int, tuple[tuple[int, ...], tuple[_Series, ...]]] = {}
        validation: list[_Validation] = []
        for path in directory.glob("validation-*.csv"):
            rows = read_columns(path, TABLE_COLUMNS["validation"])
            progress, sqr, var = (tuple(map(float, c)) for c in zip(*rows, strict=True))
            validation.append(_Validation(int(path.stem.split("-")[-1]), progress, sqr, var))
        if not validation or not bszs:
            raise SimInputError(f"{str(directory)!r} lacks placements.csv or validation-*.csv")
        self.validation = tuple(sorted(validation, key=lambda v: v.batch))
        self.batches = tuple(v.batch for v in self.validation)
        self.init_batch = self.batches[0]
        self.max_batch = self.batches[-1]
        self.min_local = int(min(bszs))
        self.max_local = MAX_LOCAL_BSZ.get(self.name, int(max(bszs)))
        # Progress at the end of each epoch: the smallest over the tables.
        self.epoch_ends = tuple(
            min(v.progress[e] for v in self.validation) for e in range(self.epochs)
        )

    @property
    def total_work(self) -> float:
        return self.epoch_ends[-1]

    def _placement(self, key: tuple[int, ...]) -> _Series | None:
        """The series measured on placement `key` (a canonical one), if any."""
        series = self._placements.get(key)
        if series is None:
            rows = self._placement_rows.get(key)
            if rows is None:
                return None
            series = self._placements[key] = _series(rows)
        return series

    def _shape(self, nodes: int) -> tuple[tuple[int, ...], tuple[_Series, ...]]:
        """The GPU counts measured on `nodes` nodes, and their series."""
        shape = self._shapes.get(nodes)
        if shape is None:
            reps = tuple(sorted(r for m, r in self._shape_rows if m == nodes))
            series = tuple(_series(self._shape_rows[nodes, r]) for r in reps)
            shape = self._shapes[nodes] = (reps, series)
        return shape

    def throughput(self, counts: tuple[int, ...], local_bsz: float) -> tuple[float, float]:
        """(step time, sync time) in seconds for `counts` GPUs per node at a local batch."""
        key = canonical(counts)
        series = self._placement(key)
        if series is not None:
            xs, steps, syncs = series
            return _interp(xs, steps, local_bsz), _interp(xs, syncs, local_bsz)
        nodes, gpus = min(len(key), MAX_TABLE_NODES), sum(key)
        if self._nd is not None:
            got = self._nd(nodes, gpus, local_bsz)
            if got is not None:
                return got
        i = bisect.bisect_left(self.node_counts, nodes)
        if i < len(self.node_counts) and self.node_counts[i] == nodes:
            return self._at_nodes(nodes, gpus, local_bsz)
        lo = self.node_counts[max(i - 1, 0)]
        hi = self.node_counts[min(i, len(self.node_counts) - 1)]
        s_lo, y_lo = self._at_nodes(lo, gpus, local_bsz)
        s_hi, y_hi = self._at_nodes(hi, gpus, local_bsz)
        w = (nodes - lo) / (hi - lo) if hi != lo else 0.0
        return s_lo + (s_hi - s_lo) * w, y_lo + (y_hi - y_lo) * w

    def _at_nodes(self, nodes: int, gpus: int, local_bsz: float) -> tuple[float, float]:
        reps, series = self._shape(nodes)
        steps = [_interp(s[0], s[1], local_bsz) for s in series]
        syncs = [_interp(s[0], s[2], local_bsz) for s in series]
        g = min(max(gpus, reps[0]), reps[-1])  # no extrapolation over GPU counts
        reps_f = [float(r) for r in reps]
        return _interp(reps_f, steps, g), _interp(reps_f, syncs, g)

    def grad_stats(self, batch: float, epoch: int) -> tuple[float, float]:
        """(grad_sqr, grad_var) at epoch `epoch`, between the nearest measured batches."""
        batch = min(max(batch, self.init_batch), self.max_batch)
        i = bisect.bisect_left(self.batches, batch)
        hi = self.validation[i]
        if hi.batch == batch or i == 0:
            return hi.grad_sqr[epoch], hi.grad_var[epoch]
        lo = self.validation[i - 1]
        w = (batch - lo.batch) / (hi.batch - lo.batch)
        sqr = lo.grad_sqr[epoch] + (hi.grad_sqr[epoch] - lo.grad_sqr[epoch]) * w
        var = lo.grad_var[epoch] + (hi.grad_var[epoch] - lo.grad_var[epoch]) * w
        return sqr, var

    def batch_split(self, batch: int, gpus: int) -> tuple[int, int]:
        """(atomic local batch, accumulation steps) for a total batch over `gpus` GPUs."""
        local = math.ceil(batch / gpus - 1e-8)
        accum = math.ceil(local / self.max_local - 1e-8) - 1
        if gpus == 1 and batch > self.init_batch:
            accum = max(1, accum)
        atomic = math.ceil(local / (accum + 1) - 1e-8)
        atomic = min(atomic, int(self.max_batch / (gpus * (accum + 1))))
        return max(atomic, 1), accum

    def limits(self, fixed_batch: int | None = None) -> BatchLimits:
        """The batch limits of this application, for the goodput model."""
        return BatchLimits(
            self.init_batch, self.max_batch, self.min_local, self.max_local, fixed_batch
        )

    def adaptive_rates(
        self, counts: tuple[int, ...]
    ) -> tuple[tuple[float, ...], tuple[tuple[int, int, int], ...]]:
        """Per epoch: the best progress rate on `counts` GPUs per node, and the
        (total batch, atomic batch, accumulation steps) that reaches it."""
        gpus = sum(counts)
        configs = batch_configs(self.limits(), gpus)
        if not configs:
            # More GPUs than the batch limits allow: the smallest local batch each.
            atomic = max(1, self.max_batch // gpus)
            configs = ((gpus * atomic, atomic, 0),)
        timed = []
        for batch, atomic, accum in configs:
            step, sync = self.throughput(counts, atomic)
            timed.append((batch, atomic, accum, step + (step - sync) * accum))
        rates: list[float] = []
        choices: list[tuple[int, int, int]] = []
        for e in range(self.epochs):
            best, choice = -1.0, configs[0]
            for batch, atomic, accum, total in timed:
                sqr, var = self.grad_stats(batch, e)
                scale = batch / self.init_batch
                rate = (var + sqr) / (var / scale + sqr) / total
                if rate > best:
                    best, choice = rate, (batch, atomic, accum)
            rates.append(best)
            choices.append(choice)
        return tuple(rates), tuple(choices)

    def epoch_rates(self, counts: tuple[int, ...], batch: int) -> tuple[float, ...]:
        """Progress per second in each epoch on `counts` GPUs per node."""
        gpus = sum(counts)
        atomic, accum = self.batch_split(batch, gpus)
        actual = gpus * atomic * (accum + 1)
        scale = actual / self.init_batch
        step, sync = self.throughput(counts, atomic)
        total = step + (step - sync) * accum
        rates = []
        for e in range(self.epochs):
            sqr, var = self.grad_stats(actual, e)
            gain = (var + sqr) / (var / scale + sqr)
            rates.append(gain / total)
        return tuple(rates)


@dataclass(frozen=True, slots=True)
class EpochCurve:
    """Piecewise-constant progress rate: one rate per epoch.

    With `whole_seconds` every epoch end falls on a whole second counted
    from the start of the run (`MeasuredSpeed(artifact_time=True)`):
    the time left in an epoch is rounded to the nearest second (Python's
    `round`) and progress jumps to the epoch's end then, as Pollux's
    simulator computes it (`Job.step`: `delta = round(...)`, then
    `progress = next_progress`). Within an epoch progress still grows at
    the epoch's rate, so a job stopped mid-epoch keeps what it did.
    """

    ends: tuple[float, ...]
    rates: tuple[float, ...]
    # Per epoch (total batch, atomic batch, accumulation steps) when the job
    # chose them (adaptive jobs); empty for a fixed batch.
    choices: tuple[tuple[int, int, int], ...] = ()
    whole_seconds: bool = False
    # Where each epoch starts, and the seconds a whole epoch takes (`_to_end`
    # from its start): a replay asks for the time to a job's end at every
    # start and stop, over up to a hundred epochs, and all but the first
    # are whole. The same floats `_to_end` gives, so sums come out the same.
    _starts: tuple[float, ...] = field(init=False, repr=False, compare=False)
    _full: tuple[float, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        starts = (0.0, *self.ends[:-1]) if self.ends else ()
        object.__setattr__(self, "_starts", starts)
        full = tuple(self._to_end(start, e) for e, start in enumerate(starts))
        object.__setattr__(self, "_full", full)

    def epoch(self, done: float) -> int:
        """The epoch under way after `done` units of work."""
        return min(bisect.bisect_right(self.ends, done), len(self.ends) - 1)

    def _to_end(self, position: float, e: int) -> float:
        """Seconds from `position` to the end of epoch `e`."""
        exact = (self.ends[e] - position) / self.rates[e]
        return float(round(exact)) if self.whole_seconds else exact

    def seconds_to(self, done: float, target: float) -> float:
        ends, starts, full = self.ends, self._starts, self._full
        count, short_of = len(ends), target - 1e-12
        seconds = 0.0
        e = bisect.bisect_right(ends, done)
        position = done
        while e < count and position < short_of:
            end = ends[e]
            if target >= end:
                seconds += full[e] if position == starts[e] else self._to_end(position, e)
                position = end
            else:
                seconds += (target - position) / self.rates[e]
                position = target
            e += 1
        return seconds

    def advance(self, done: float, seconds: float) -> float:
        ends, starts, full = self.ends, self._starts, self._full
        e = bisect.bisect_right(ends, done)
        position = done
        while e < len(ends) and seconds > 0:
            need = full[e] if position == starts[e] else self._to_end(position, e)
            if need > seconds:
                # Short of the epoch's end: never past it, even when the
                # whole-second end comes later than the exact one.
                return min(self.ends[e], position + seconds * self.rates[e])
            seconds -= need
            position = self.ends[e]
            e += 1
        return position


class MeasuredSpeed:
    """Measured tables for jobs that name an application; the linear model otherwise."""

    def __init__(
        self,
        apps_dir: Path | None,
        fallback: LinearSpeed | None = None,
        realloc_cost: float = 30.0,
        artifact_time: bool = False,
        interpolation: str = "separable",
    ) -> None:
        if interpolation not in INTERPOLATIONS:
            raise SimInputError(
                f"unknown interpolation {interpolation!r}; use one of {', '.join(INTERPOLATIONS)}"
            )
        self.interpolation = interpolation
        self.fallback = fallback or LinearSpeed()
        self.realloc_cost = realloc_cost
        # Pollux's simulator's rules of time (module doc): off by default.
        self.artifact_time = artifact_time
        self.apps: dict[str, AppTables] = {}
        self.apps_dir = apps_dir
        if apps_dir is not None:
            if not apps_dir.is_dir():
                raise SimInputError(
                    f"application tables {str(apps_dir)!r} not found; point --apps at "
                    "the pollux/apps directory of the checkout's traces/"
                )
            for sub in sorted(p for p in apps_dir.iterdir() if p.is_dir()):
                if (sub / "placements.csv").is_file() and sub.name in EPOCHS:
                    self.apps[sub.name] = AppTables(sub, interpolation == "delaunay")
        self._curves: dict[tuple[str, tuple[int, ...], int], EpochCurve] = {}

    def counts_of(self, placement: Placement) -> tuple[int, ...]:
        """GPUs per node in rank order: node-name order, or with `artifact_time`
        the node holding the most first (the artifact's allocation order)."""
        counts = tuple(len(g) for _, g in placement if g)
        if self.artifact_time:
            counts = tuple(sorted(counts, reverse=True))
        return counts

    def _tables(self, job: SimJob) -> AppTables | None:
        if job.app is None:
            return None
        tables = self.apps.get(job.app)
        if tables is None and job.duration is None:
            where = str(self.apps_dir) if self.apps_dir else "none given"
            raise SimInputError(
                f"job {job.name or job.id} names application {job.app!r} but no table for it "
                f"was loaded ({where}); pass --apps with the Pollux pollux/apps directory"
            )
        # A job without a batch size is adaptive: it picks its batch per epoch.
        return tables

    def work(self, job: SimJob) -> float:
        tables = self._tables(job)
        return self.fallback.work(job) if tables is None else tables.total_work

    def curve(self, job: SimJob, placement: Placement, shape: ClusterShape) -> Curve:
        tables = self._tables(job)
        if tables is None:
            return self.fallback.curve(job, placement, shape)
        counts = self.counts_of(placement)
        return self._curve(tables, counts, job.batch_size)

    def _curve(self, tables: AppTables, counts: tuple[int, ...], batch: int | None) -> EpochCurve:
        key = (tables.name, canonical(counts), batch or 0)
        curve = self._curves.get(key)
        if curve is None:
            if batch:
                rates = tables.epoch_rates(counts, batch)
                curve = EpochCurve(tables.epoch_ends, rates, (), self.artifact_time)
            else:
                rates, choices = tables.adaptive_rates(canonical(counts))
                curve = EpochCurve(tables.epoch_ends, rates, choices, self.artifact_time)
            self._curves[key] = curve
        return curve

    def tables_of(self, job: SimJob) -> AppTables | None:
        """The measured tables of the job's application, if it names one."""
        return self._tables(job)

    def switch_cost(self, job: SimJob, first: bool) -> float:
        if self._tables(job) is None:
            return self.fallback.switch_cost(job, first)
        return self.realloc_cost

    def estimate(self, job: SimJob, shape: ClusterShape) -> float:
        """Seconds of running at the requested size on the fewest nodes, costs excluded."""
        tables = self._tables(job)
        if tables is None:
            return self.fallback.estimate(job, shape)
        counts = ideal_counts(job.gpus, shape)
        curve = self._curve(tables, counts, job.batch_size)
        return curve.seconds_to(0.0, tables.total_work)


def ideal_counts(gpus: int, shape: ClusterShape) -> tuple[int, ...]:
    """GPUs per node when `gpus` GPUs fill the biggest nodes first."""
    sizes = sorted(shape.node_sizes, reverse=True) or [gpus]
    counts: list[int] = []
    left = gpus
    for size in sizes:
        if left <= 0:
            break
        take = min(size, left)
        counts.append(take)
        left -= take
    if left > 0:
        counts.append(left)
    return tuple(counts)


# The columns read from each kind of table ("validation" for every validation-<batch>.csv).
TABLE_COLUMNS = {
    "placements": ("placement", "local_bsz", "step_time", "sync_time"),
    "scalability": ("num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time"),
    "validation": ("progress", "grad_sqr", "grad_var"),
}
# As AppTables reads them: a series' three columns first (`_series`).
_PLACEMENT_COLUMNS = ("local_bsz", "step_time", "sync_time", "placement")
_SCALABILITY_COLUMNS = ("local_bsz", "step_time", "sync_time", "num_nodes", "num_replicas")


def read_table(path: Path) -> list[dict[str, str]]:
    """The rows of one measured table (CSV with a header)."""
    if not path.is_file():
        raise SimInputError(f"measured table {str(path)!r} is missing")
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def read_columns(path: Path, columns: tuple[str, ...]) -> list[list[str]]:
    """The named columns of one measured table, row by row, in `columns`' order
    (a plain reader: several times faster than a dict per row)."""
    if not path.is_file():
        raise SimInputError(f"measured table {str(path)!r} is missing")
    with path.open(newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, [])
        missing = [c for c in columns if c not in header]
        if missing:
            raise SimInputError(
                f"measured table {str(path)!r} lacks the column(s) {', '.join(missing)}; "
                f"it has {', '.join(header) or 'no header'}"
            )
        at = [header.index(c) for c in columns]
        rows = list(reader)
    if not rows:
        raise SimInputError(f"measured table {str(path)!r} has a header but no rows")
    width = len(header)
    for line, row in enumerate(rows, start=2):
        if len(row) != width:
            raise SimInputError(
                f"measured table {str(path)!r}, line {line}: {len(row)} fields where the "
                f"header names {width}"
            )
    if at == list(range(width)):
        return rows
    return [[row[i] for i in at] for row in rows]
