"""Print the throughput estimator's leave-one-model-out error (MAPE) on Gavel's table.

    uv run python bench/estimator_accuracy.py [PATH/simulation_throughputs.json]

Without a path it uses the copy packaged with Schedulearn (the same
figures). See `schedulearn.sim.estimator_accuracy` for the method.
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path

from schedulearn.core.estimator import builtin_table
from schedulearn.sim.estimator_accuracy import leave_one_out
from schedulearn.sim.gavel import load_gavel


def main() -> None:
    table = load_gavel(Path(sys.argv[1])) if len(sys.argv) > 1 else builtin_table("gavel")
    types = table.gpu_types()
    print(f"machine: {platform.node()} ({platform.machine()}), python {platform.python_version()}")
    print(f"models: {len(table.models())}, GPU types: {', '.join(types)}")
    header = f"{'question':<44}{'estimator':<11}" + "".join(f"{t:>8}" for t in types)
    print(header + f"{'overall':>9}{'cases':>7}")
    questions = [
        ("no measurement of the model", "cold", False),
        ("measured on one type, predict the others", "warm", False),
        ("no measurement, architecture unseen", "cold", True),
        ("one type, architecture unseen", "warm", True),
    ]
    for label, mode, by_arch in questions:
        for name, uniform in (("similar", False), ("baseline", True)):
            acc = leave_one_out(table, mode, uniform=uniform, by_architecture=by_arch)
            cells = "".join(f"{acc.per_type.get(t, float('nan')):>7.1f}%" for t in types)
            print(f"{label:<44}{name:<11}{cells}{acc.overall:>8.1f}%{acc.cases:>7}")
    print("MAPE in percent; baseline = the same relative speeds as the average model")


if __name__ == "__main__":
    main()
