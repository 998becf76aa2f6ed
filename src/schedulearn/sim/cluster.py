"""Simulated clusters: parse a shape such as `3x4` or a Tiresias cluster file into nodes.

Shape syntax (segments joined by `+`, each `NODESxGPUS` followed by
optional `:` fields):

    3x4                          3 servers with 4 GPUs each
    2x8+4x4                      2 servers of 8 GPUs and 4 of 4
    36x1:k80+24x4:v100           GPU types (any word without `=`)
    20x4:cpus=32:mem=128         CPUs and memory (GB) per server
    2x8:v100:label=ib+4x4        node labels (repeat label=, or label=ib,nvme), which
                                 jobs ask for with constraints (Slurm features)

Without `cpus=`/`mem=` a server gets 12 CPUs and 32 GB per GPU (a
4-GPU server then has 48 cores and 128 GB, the original Schedulearn
testbed). A path to a CSV in the Tiresias simulator's format
(`num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node`,
e.g. `n32g4.csv`) is read as that many identical servers.

The result is a `ClusterSpec`: the nodes as idle `NodeView`s, in the
order policies scan them.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path

from schedulearn.core.capabilities import PLAIN, NodeCapabilities, check_label
from schedulearn.core.views import NodeView
from schedulearn.sim.jobs import SimInputError

DEFAULT_CPUS_PER_GPU = 12.0
DEFAULT_MEMORY_GB_PER_GPU = 32.0
_SEGMENT = re.compile(r"^(\d+)x(\d+)$")
_TIRESIAS_COLUMNS = ("num_switch", "num_node_p_switch", "num_gpu_p_node")
# Every column this module reads from a Tiresias cluster file (the last two optional).
TIRESIAS_CLUSTER_COLUMNS = (*_TIRESIAS_COLUMNS, "num_cpu_p_node", "mem_p_node")


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """A named cluster: its nodes, idle, in scan order."""

    name: str
    nodes: tuple[NodeView, ...]

    @property
    def total_gpus(self) -> int:
        return sum(n.num_gpus for n in self.nodes)

    @property
    def largest_node_gpus(self) -> int:
        return max((n.num_gpus for n in self.nodes), default=0)

    def describe(self) -> str:
        shapes: dict[tuple[int, str, float, float, tuple[str, ...]], int] = {}
        for n in self.nodes:
            key = (
                n.num_gpus,
                n.gpu_type,
                n.cpus,
                n.memory_gb,
                tuple(sorted(n.capabilities.labels)),
            )
            shapes[key] = shapes.get(key, 0) + 1
        parts = [
            f"{count}x{gpus}{':' + kind if kind else ''}:cpus={cpus:g}:mem={mem:g}"
            + (f":label={','.join(labels)}" if labels else "")
            for (gpus, kind, cpus, mem, labels), count in shapes.items()
        ]
        return "+".join(parts)


def parse_cluster(spec: str) -> ClusterSpec:
    """Build a cluster from a shape string or a Tiresias cluster CSV path."""
    text = spec.strip()
    if not text:
        raise SimInputError("empty --cluster; give a shape such as 3x4 or 2x8+4x4:v100")
    if text.endswith(".csv") or "/" in text:
        return _from_tiresias_csv(Path(text))
    nodes: list[tuple[int, str, float, float, NodeCapabilities]] = []
    for segment in text.split("+"):
        nodes.extend(_parse_segment(segment.strip(), text))
    width = len(str(len(nodes) - 1))
    views = tuple(
        NodeView.new(f"n{i:0{width}d}", gpus, kind, cpus, mem, capabilities=caps)
        for i, (gpus, kind, cpus, mem, caps) in enumerate(nodes)
    )
    return ClusterSpec(text, views)


def _parse_segment(
    segment: str, whole: str
) -> list[tuple[int, str, float, float, NodeCapabilities]]:
    head, *fields = segment.split(":")
    match = _SEGMENT.match(head.strip())
    if match is None:
        raise SimInputError(
            f"bad cluster segment {segment!r} in {whole!r}; write NODESxGPUS such as 3x4, "
            "optionally :TYPE, :cpus=N, :mem=GB, :label=L, and join segments with +"
        )
    count, gpus = int(match.group(1)), int(match.group(2))
    if count <= 0:
        raise SimInputError(f"cluster segment {segment!r} has no nodes; use at least 1x{gpus}")
    kind = ""
    cpus = max(1.0, gpus * DEFAULT_CPUS_PER_GPU)
    mem = max(DEFAULT_MEMORY_GB_PER_GPU, gpus * DEFAULT_MEMORY_GB_PER_GPU)
    labels: set[str] = set()
    for field_ in fields:
        key, sep, value = field_.partition("=")
        key = key.strip().lower()
        if not sep:
            kind = key
            continue
        if key in ("label", "labels"):
            try:
                labels.update(check_label(v.strip()) for v in value.split(","))
            except ValueError as exc:
                raise SimInputError(f"cluster segment {segment!r}: {exc}") from None
            continue
        try:
            number = float(value)
        except ValueError:
            raise SimInputError(
                f"cluster field {field_!r} in {whole!r} needs a number, e.g. cpus=32"
            ) from None
        if number < 0:
            raise SimInputError(f"cluster field {field_!r} in {whole!r} must not be negative")
        if key in ("cpus", "cpu"):
            cpus = number
        elif key in ("mem", "memory", "mem_gb"):
            mem = number
        else:
            raise SimInputError(
                f"unknown cluster field {key!r} in {whole!r}; use cpus=N, mem=GB, label=L "
                "or a GPU type"
            )
    caps = NodeCapabilities(labels=frozenset(labels)) if labels else PLAIN
    return [(gpus, kind, cpus, mem, caps)] * count


def _from_tiresias_csv(path: Path) -> ClusterSpec:
    if not path.is_file():
        raise SimInputError(
            f"cluster file {str(path)!r} does not exist; give a shape such as 3x4 "
            "or the path of a Tiresias cluster CSV such as n32g4.csv"
        )
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    if not rows or any(c not in rows[0] for c in _TIRESIAS_COLUMNS):
        raise SimInputError(
            f"{str(path)!r} is not a Tiresias cluster file; it needs the columns "
            + ", ".join(_TIRESIAS_COLUMNS)
        )
    nodes: list[NodeView] = []
    for r, row in enumerate(rows):
        prefix = f"r{r}" if len(rows) > 1 else ""
        try:
            switches = int(row["num_switch"])
            per_switch = int(row["num_node_p_switch"])
            gpus = int(row["num_gpu_p_node"])
            cpus = float(row.get("num_cpu_p_node") or gpus * DEFAULT_CPUS_PER_GPU)
            mem = float(row.get("mem_p_node") or gpus * DEFAULT_MEMORY_GB_PER_GPU)
        except ValueError as exc:
            raise SimInputError(f"bad number in cluster file {str(path)!r}: {exc}") from None
        for s in range(switches):
            for n in range(per_switch):
                nodes.append(NodeView.new(f"{prefix}s{s}n{n:03d}", gpus, "", cpus, mem))
    return ClusterSpec(path.stem, tuple(nodes))
