"""Turn a `--workload SPEC|PATH` argument into workloads.

A PATH is a CSV in a known trace format (Philly, Pollux, Tiresias; see
`traces`). A SPEC is `kind[:key=value...]`:

  poisson:n=100:rate=0.01      Poisson arrivals (see `synthetic`)
  uniform:n=100:window=3600    arrivals uniform over a window
  bursts:5,10,15,20            the original Schedulearn experiment, one workload per size
  tetris                       40 jobs x 30 tasks, the Tetris packing experiment
  gavel[:n=300][:rate=2]       Gavel's models on K80/P100/V100 (see `gavel`)
  philly[:path=FILE][:limit=N] the Philly trace (default: the packaged sample)
  pollux[:path=FILE][:adaptive=true|CAP][:lengths=none|declared|learned]
                               a Pollux workload (default: the packaged sample);
                               `adaptive` makes its jobs adaptive (see `adaptive`);
                               `lengths` what a policy may know of each job's
                               length (see `lengths_of`)
  tiresias[:path=FILE]         a Tiresias job CSV (default: the packaged sample)

Any spec also takes `constraint=LABEL[,LABEL]` and `constrained=SHARE`:
that share of its jobs (default all) need those node labels (see
`constraints`; the cluster labels nodes with `label=`).

A trace PATH may carry the same options: `workload-6.csv:adaptive` (or
`:adaptive=32` for a GPU cap other than 64), `:lengths=declared`. A directory stands for
every `.csv` in it, in name order (`workloads/:adaptive` too). Some specs give several
workloads (`bursts:5,10`), so the result is a list.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from importlib import resources
from pathlib import Path

from schedulearn.sim.jobs import SimInputError, Workload
from schedulearn.sim.workloads.adaptive import DEFAULT_CAP
from schedulearn.sim.workloads.constraints import with_constraints
from schedulearn.sim.workloads.options import Options
from schedulearn.sim.workloads.synthetic import bursts, poisson, uniform
from schedulearn.sim.workloads.tetris import tetris
from schedulearn.sim.workloads.traces import (
    detect,
    load_philly,
    load_pollux,
    load_tiresias,
)

SAMPLES = {
    "philly": "philly-sample.csv",
    "pollux": "pollux-sample.csv",
    "tiresias": "tiresias-sample.csv",
}
DEFAULT_CLUSTERS = {"philly": "256x8", "pollux": "16x4", "tiresias": "32x4:cpus=40:mem=256"}


def _gavel(opts: Options, seed: int) -> Workload:
    # Gavel's profile table loads only for a Gavel workload.
    from schedulearn.sim.workloads.gavel import gavel

    return gavel(opts, seed)


_GENERATORS: dict[str, Callable[[Options, int], Workload]] = {
    "poisson": poisson,
    "uniform": uniform,
    "tetris": tetris,
    "gavel": _gavel,
}
KINDS = ("poisson", "uniform", "bursts", "tetris", "gavel", "philly", "pollux", "tiresias")


def sample_path(kind: str) -> Path:
    """The packaged sample of trace format `kind`."""
    return Path(str(resources.files("schedulearn.sim.data").joinpath(SAMPLES[kind])))


def parse_workload(text: str, seed: int = 0) -> list[Workload]:
    """Workloads for a `--workload` argument."""
    text = text.strip()
    if not text:
        raise SimInputError(
            "empty --workload; give a spec such as poisson:n=100 or a trace CSV path"
        )
    directory, _, option = text.rpartition(":") if ":" in text else (text, "", "")
    if not Path(directory).expanduser().is_dir():
        directory, option = text, ""
    if Path(directory).expanduser().is_dir():
        # DIR[:adaptive]: every trace CSV in it, by name.
        files = sorted(Path(directory).expanduser().glob("*.csv"))
        if not files:
            raise SimInputError(f"directory {directory!r} holds no .csv trace; give a trace file")
        return [w for f in files for w in parse_workload(f"{f}:{option}" if option else str(f))]
    head, sep, tail = text.partition(".csv:")
    if sep and text.split(":", 1)[0].strip().lower() not in KINDS:
        # PATH.csv:adaptive[=CAP]
        parts = [f"{t}=true" if t.strip() == "adaptive" else t for t in tail.split(":")]
        opts = Options.parse("trace:" + ":".join(parts))
        cap = _adaptive_cap(opts)
        lengths = opts.text("lengths", "")
        opts.finish()
        path = Path(head + ".csv").expanduser()
        return [lengths_of(_mark_adaptive(_load(detect(path), path, None), cap), lengths)]
    path = Path(text).expanduser()
    if path.suffix == ".csv" or path.is_file():
        return [_load(detect(path), path, None)]
    opts = Options.parse(text)
    # Options every kind takes: taken out before the generator checks its own.
    labels = [v for v in opts.pairs.pop("constraint", "").split(",") if v.strip()]
    share_text = opts.pairs.pop("constrained", "1")
    try:
        share = float(share_text)
    except ValueError:
        raise SimInputError(f"{opts.kind}: constrained={share_text!r} is not a number") from None
    return [with_constraints(w, labels, share, seed) for w in _parse(opts, seed)]


def _parse(opts: Options, seed: int) -> list[Workload]:
    if opts.kind in _GENERATORS:
        return [_GENERATORS[opts.kind](opts, seed)]
    if opts.kind == "bursts":
        return bursts(opts, seed)
    if opts.kind in SAMPLES:
        given = opts.text("path", "")
        limit = opts.integer("limit", 0, low=0)
        cap = _adaptive_cap(opts) if opts.kind == "pollux" else None
        lengths = opts.text("lengths", "") if opts.kind == "pollux" else ""
        opts.finish()
        trace = Path(given).expanduser() if given else sample_path(opts.kind)
        if given and detect(trace) != opts.kind:
            raise SimInputError(f"{given!r} is a {detect(trace)} trace, not {opts.kind}")
        return [lengths_of(_mark_adaptive(_load(opts.kind, trace, limit or None), cap), lengths)]
    raise SimInputError(
        f"unknown workload {opts.kind!r}; give a CSV path or one of: {', '.join(KINDS)}"
    )


def _adaptive_cap(opts: Options) -> int | None:
    """`adaptive=true` (cap 64), `adaptive=N` (cap N) or `adaptive=false`/absent (None)."""
    value = opts.text("adaptive", "false").strip().lower()
    if value in ("", "true", "yes", "1", "adaptive"):
        return DEFAULT_CAP
    if value in ("false", "no", "0"):
        return None
    try:
        cap = int(value)
    except ValueError:
        cap = 0
    if cap < 1:
        raise SimInputError(
            f"bad adaptive={value!r}; write adaptive=true or adaptive=N with a GPU cap N >= 1"
        )
    return cap


LENGTHS = ("none", "declared", "learned")


def lengths_of(workload: Workload, lengths: str) -> Workload:
    """What a policy may know of the length of jobs of measured applications.

    `none`: nothing but their progress so far (and, per job, what the
    trace's `declares_total` column declares); `declared`: every job
    declares its total epochs, so its remaining work is known; `learned`:
    estimates learned from jobs that already ended (the mean progress of
    ended jobs of the same model), beside any declared totals. Empty: as
    the trace says.
    """
    value = lengths.strip().lower()
    if not value:
        return workload
    if value not in LENGTHS:
        raise SimInputError(f"bad lengths={lengths!r}; write one of {', '.join(LENGTHS)}")
    jobs = workload.jobs
    if value == "declared":
        jobs = tuple(replace(j, declares_total=True) if j.app else j for j in jobs)
    return replace(workload, jobs=jobs, params={**workload.params, "lengths": value})


def _mark_adaptive(workload: Workload, cap: int | None) -> Workload:
    """Ask for adaptive jobs; the runner applies it once the measured tables are loaded."""
    if cap is None:
        return workload
    params = {**workload.params, "adaptive": str(cap)}
    return replace(workload, params=params)


def _load(kind: str, path: Path, limit: int | None) -> Workload:
    if kind == "philly":
        workload = load_philly(path, limit)
    elif kind == "pollux":
        workload = load_pollux(path)
    else:
        workload = load_tiresias(path)
    if limit and kind != "philly":
        workload = Workload(
            workload.name, workload.jobs[:limit], workload.description, workload.source
        )
    return Workload(
        workload.name,
        workload.jobs,
        workload.description,
        workload.source,
        workload.params,
        DEFAULT_CLUSTERS[kind],
    )
