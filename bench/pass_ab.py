"""One scheduling pass, this checkout against another, interleaved pass by pass.

`bench/pass_scale.py` times one checkout; on a shared, loaded host two runs
a minute apart see different loads, and a 20% speed-up drowns in it. This
runs both in one process, alternating (before, after, after, before, ...)
on the same snapshots, so both meet the same load; it prints the CPU
milliseconds of the fastest pass of each and checks that both decided as
many things. The other checkout's `schedulearn` package is copied into a
temporary directory as `schedulearn_before` (its imports renamed), so the
two registries and view classes do not meet. Cells and snapshots are
`pass_scale.py`'s (1,000 nodes x 8 GPUs, 10,000 waiting; half free, and full
with nothing preemptible; each pass's snapshot rebuilt as the live server
builds one). Nothing is asserted but equal decision counts. Run it by hand:

    git worktree add /tmp/main main   # or any checkout
    uv run python bench/pass_ab.py /tmp/main/src --policy goodput,similarity/3\\ types
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from machine import describe, speed_line
from pass_scale import POLICIES

ALIAS = "schedulearn_before"


def _copy_as_alias(src: Path, into: Path) -> None:
    """`src/schedulearn` copied to `into/ALIAS`, every import of it renamed."""
    target = into / ALIAS
    shutil.copytree(src / "schedulearn", target)
    pattern = re.compile(r"\bschedulearn(?=[.\s])")
    for path in target.rglob("*.py"):
        path.write_text(pattern.sub(ALIAS, path.read_text()))


def _side(package: str) -> tuple[ModuleType, Any, ModuleType]:
    core = __import__(f"{package}.core", fromlist=["create"])
    schedulable = __import__(f"{package}.core.eligibility", fromlist=["x"]).schedulable
    snapshots = __import__(f"{package}.sim.snapshots", fromlist=["x"])
    return core, schedulable, snapshots


def _rebuilt(core: ModuleType, view: Any, now: float) -> Any:
    """As `pass_scale.rebuilt`, with the side's own view classes."""
    from dataclasses import replace

    nodes = tuple(replace(n, gpus=tuple(replace(g) for g in n.gpus)) for n in view.nodes)
    running = tuple(
        replace(j, placement=core.Placement.of(j.placement.as_dict()) if j.placement else None)
        for j in view.running
    )
    return core.ClusterView(now, nodes, tuple([*view.pending]), running)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path, help="the other checkout's src directory")
    parser.add_argument("--policy", default=POLICIES, help="comma-separated cells")
    parser.add_argument("--runs", type=int, default=9, help="timed passes a side per cell [9]")
    parser.add_argument("--seed", type=int, default=36)
    args = parser.parse_args()
    if not (args.before / "schedulearn" / "sim" / "snapshots.py").exists():
        sys.exit(
            f"{args.before} has no schedulearn/sim/snapshots.py: give a checkout's src "
            "directory; for one older than the generator's move, copy this checkout's "
            "src/schedulearn/sim/snapshots.py into it first"
        )
    print(describe())
    print(speed_line())
    with tempfile.TemporaryDirectory() as tmp:
        _copy_as_alias(args.before, Path(tmp))
        sys.path.insert(0, tmp)
        sides = {"before": _side(ALIAS), "after": _side("schedulearn")}
        print(f"CPU ms of the fastest of {args.runs} passes a side, interleaved (before / after)")
        for spec in args.policy.split(","):
            name, _, typed = spec.partition("/")
            cells = []
            for full in (False, True):
                best = {"before": float("inf"), "after": float("inf")}
                decided = {}
                state = {}
                for label, (core, schedulable, snapshots) in sides.items():
                    changes = {"free_share": 0.0, "preemptible": 0.0} if full else {}
                    shape = snapshots.Shape(
                        nodes=1000,
                        gpus_per_node=8,
                        pending=10_000,
                        gpu_types=snapshots.TYPES if typed else (),
                        **changes,
                    )
                    view = snapshots.scale_view(shape, args.seed)
                    policy = core.create(name)
                    policy.decide(schedulable(view))  # the warm-up pass
                    state[label] = (core, schedulable, view, policy)
                for k in range(args.runs):
                    for label in ("before", "after") if k % 2 == 0 else ("after", "before"):
                        core, schedulable, view, policy = state[label]
                        this = _rebuilt(core, view, view.now + k + 1)
                        c0 = time.process_time()
                        decided[label] = len(policy.decide(schedulable(this)))
                        best[label] = min(best[label], (time.process_time() - c0) * 1000)
                if decided["before"] != decided["after"]:
                    print(f"  {spec}: before decided {decided['before']}, after {decided['after']}")
                cells.append((best["before"], best["after"], decided["after"]))
            (hb, ha, hd), (fb, fa, _) = cells
            print(
                f"{spec:<20} half free {hb:7.1f} / {ha:7.1f}  ({hd:,} decisions)   "
                f"full {fb:5.1f} / {fa:5.1f}",
                flush=True,
            )
    print(speed_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
