"""The checkout's `traces/` is what the project's own writers make of the public files."""

from __future__ import annotations

import json
from pathlib import Path

from schedulearn.sim.gavel import gavel_json, load_gavel
from schedulearn.sim.workloads.samples import CHECKOUT_TRACES, write_traces


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "README.md"
    }


def test_the_shipped_traces_are_written_from_the_public_files(
    public_traces: Path, tmp_path: Path
) -> None:
    written = write_traces(public_traces, tmp_path)
    assert len(written) == len(_files(tmp_path))
    shipped = _files(CHECKOUT_TRACES)
    assert shipped.keys() == _files(tmp_path).keys()
    changed = [name for name, data in _files(tmp_path).items() if shipped[name] != data]
    assert changed == [], "regenerate: python -m schedulearn.sim.workloads.samples ../shared/traces"


def test_the_gavel_writer_reads_back(traces: Path, tmp_path: Path) -> None:
    table = load_gavel(traces / "gavel" / "simulation_throughputs.json")
    out = tmp_path / "again.json"
    out.write_text(json.dumps(gavel_json(table)))
    again = load_gavel(out)
    assert sorted(map(repr, again.profiles())) == sorted(map(repr, table.profiles()))
    assert len(list(table.profiles())) > 50
