"""Workload generators, trace loaders (on the real shared files) and cluster shapes."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from schedulearn.sim import SimInputError, parse_cluster
from schedulearn.sim.workloads.spec import parse_workload, sample_path
from schedulearn.sim.workloads.synthetic import THESIS_MODELS
from schedulearn.sim.workloads.traces import (
    detect,
    load_philly,
    load_pollux,
    load_tiresias,
    load_trace,
    write_sample,
)

# --- clusters ------------------------------------------------------------------


def test_cluster_shapes() -> None:
    c = parse_cluster("3x4")
    assert [n.num_gpus for n in c.nodes] == [4, 4, 4]
    assert c.nodes[0].cpus == 48 and c.nodes[0].memory_gb == 128
    mixed = parse_cluster("2x8+4x4")
    assert mixed.total_gpus == 32 and mixed.largest_node_gpus == 8
    typed = parse_cluster("2x1:k80+1x4:v100:cpus=32:mem=256")
    assert [n.gpu_type for n in typed.nodes] == ["k80", "k80", "v100"]
    assert typed.nodes[2].cpus == 32 and typed.nodes[2].memory_gb == 256
    assert len({n.name for n in parse_cluster("12x1").nodes}) == 12


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("3by4", "write NODESxGPUS"),
        ("0x4", "has no nodes"),
        ("3x4:cpus=lots", "needs a number"),
        ("3x4:disk=5", "unknown cluster field"),
        ("missing/cluster.csv", "does not exist"),
    ],
)
def test_bad_cluster_shapes_say_what_to_write(spec: str, message: str) -> None:
    with pytest.raises(SimInputError, match=message):
        parse_cluster(spec)


def test_tiresias_cluster_files(traces: Path) -> None:
    c = parse_cluster(str(traces / "tiresias" / "n32g4.csv"))
    assert len(c.nodes) == 32 and c.total_gpus == 128
    assert c.nodes[0].cpus == 40 and c.nodes[0].memory_gb == 256
    big = parse_cluster(str(traces / "tiresias" / "n160g8.csv"))
    assert len(big.nodes) == 160 and big.largest_node_gpus == 8


# --- generators ----------------------------------------------------------------


def test_poisson_is_reproducible_and_honours_its_options() -> None:
    (a,) = parse_workload("poisson:n=200:rate=0.1:gpus=1,4:weights=3,1", seed=7)
    (b,) = parse_workload("poisson:n=200:rate=0.1:gpus=1,4:weights=3,1", seed=7)
    (c,) = parse_workload("poisson:n=200:rate=0.1:gpus=1,4:weights=3,1", seed=8)
    assert a.jobs == b.jobs and a.jobs != c.jobs
    assert len(a) == 200
    assert {j.gpus for j in a.jobs} == {1, 4}
    assert all(j.preemptible for j in a.jobs)
    mean_gap = a.jobs[-1].submitted_at / 199
    assert 5 < mean_gap < 15  # rate 0.1/s: one job every 10 s on average


def test_uniform_deadlines_and_elastic_jobs() -> None:
    (w,) = parse_workload("uniform:n=50:window=100:deadline=2:elastic=true:dist=fixed:duration=60")
    assert all(0 <= j.submitted_at <= 100 for j in w.jobs)
    for j in w.jobs:
        assert j.duration == 60
        assert j.deadline == pytest.approx(j.submitted_at + 120, abs=1e-3)
        assert j.min_gpus is not None and j.max_gpus == 2 * j.gpus


def test_bursts_reproduce_the_thesis_experiment() -> None:
    workloads = parse_workload("bursts:5,10,15,20")
    assert [w.name for w in workloads] == ["bursts-5", "bursts-10", "bursts-15", "bursts-20"]
    assert [len(w) for w in workloads] == [20, 40, 60, 80]
    for w in workloads:
        assert w.default_cluster == "3x4"
        assert sorted({j.submitted_at for j in w.jobs}) == [0, 10, 20, 30]
        for j in w.jobs:
            assert j.model is not None and 1 <= j.gpus <= 4
            assert j.duration == THESIS_MODELS[j.model][j.gpus - 1]


def test_tetris_workload_shape() -> None:
    (w,) = parse_workload("tetris", seed=3)
    assert len(w) == 1200
    groups = Counter(j.group for j in w.jobs)
    assert len(groups) == 40 and set(groups.values()) == {30}
    assert all(0 <= j.submitted_at <= 3000 for j in w.jobs)
    # Demands differ between jobs along all three resources.
    assert len({j.gpus for j in w.jobs}) > 2
    assert len({j.cpus for j in w.jobs}) > 5 and len({j.memory_gb for j in w.jobs}) > 5
    assert w.default_cluster == "20x4:cpus=32:mem=128"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("poisson:n=10:colour=red", "has no option colour; its options are"),
        ("poisson:n=ten", "is not a number"),
        ("poisson:rate=0", "rate must be positive"),
        ("bursts:5:model=bert", "unknown model 'bert'"),
        ("zipf:n=3", "unknown workload 'zipf'"),
        ("no/such/file.csv", "does not exist"),
    ],
)
def test_bad_workload_specs_say_what_to_change(spec: str, message: str) -> None:
    with pytest.raises(SimInputError, match=message):
        parse_workload(spec)


# --- trace loaders, on the real files ------------------------------------------


@pytest.mark.slow
def test_philly_loader_reads_the_whole_trace(traces: Path) -> None:
    w = load_philly(traces / "philly" / "philly-jobs.csv")
    assert len(w) == 82_247
    sizes = Counter(j.gpus for j in w.jobs)
    assert sizes[1] == 76_627 and max(sizes) == 128
    assert w.jobs[0].submitted_at == 0.0
    assert all(a.submitted_at <= b.submitted_at for a, b in zip(w.jobs, w.jobs[1:], strict=False))
    assert all(j.preemptible and j.duration and j.duration >= 1 for j in w.jobs)
    assert len({j.user for j in w.jobs}) == 15


def test_pollux_loader(traces: Path) -> None:
    w = load_pollux(traces / "pollux" / "workloads" / "workload-6.csv")
    assert len(w) == 160
    assert {j.app for j in w.jobs} == {
        "bert",
        "cifar10",
        "deepspeech2",
        "imagenet",
        "ncf",
        "yolov3",
    }
    assert all(j.duration is None and j.batch_size for j in w.jobs)
    assert 27_000 < w.jobs[-1].submitted_at < 29_000


def test_tiresias_loader(traces: Path) -> None:
    w = load_tiresias(traces / "tiresias" / "60_job.csv")
    assert len(w) == 60
    assert max(j.gpus for j in w.jobs) == 8
    assert w.jobs[0].model == "vgg19" and w.jobs[0].duration == 164


def test_format_detection(traces: Path, tmp_path: Path) -> None:
    assert detect(traces / "philly" / "philly-jobs.csv") == "philly"
    assert detect(traces / "pollux" / "workloads" / "workload-1.csv") == "pollux"
    assert detect(traces / "tiresias" / "60_job.csv") == "tiresias"
    odd = tmp_path / "odd.csv"
    odd.write_text("a,b\n1,2\n")
    with pytest.raises(SimInputError, match="not a known trace"):
        detect(odd)


@pytest.mark.parametrize("kind", ["pollux", "tiresias"])
def test_written_samples_read_back(kind: str, traces: Path, tmp_path: Path) -> None:
    source = {
        "pollux": traces / "pollux" / "workloads" / "workload-6.csv",
        "tiresias": traces / "tiresias" / "60_job.csv",
    }[kind]
    original = load_trace(source)
    out = tmp_path / "sample.csv"
    write_sample(original, kind, out)
    again = load_trace(out)
    for a, b in zip(original.jobs, again.jobs, strict=True):
        assert (a.submitted_at, a.gpus, a.duration, a.app, a.batch_size) == (
            b.submitted_at,
            b.gpus,
            b.duration,
            b.app,
            b.batch_size,
        )


def test_packaged_samples_are_heads_of_the_real_traces(traces: Path) -> None:
    philly = load_philly(sample_path("philly"))
    full = load_philly(traces / "philly" / "philly-jobs.csv", limit=len(philly))
    assert len(philly) == 1000
    assert [(j.submitted_at, j.gpus, j.duration, j.user) for j in philly.jobs] == [
        (j.submitted_at, j.gpus, j.duration, j.user) for j in full.jobs
    ]
    pollux = load_pollux(sample_path("pollux"))
    real = load_pollux(traces / "pollux" / "workloads" / "workload-6.csv")
    assert [j.name for j in pollux.jobs] == [j.name for j in real.jobs[: len(pollux)]]


def test_trace_specs_use_packaged_samples_and_default_clusters() -> None:
    (philly,) = parse_workload("philly:limit=100")
    assert len(philly) == 100 and philly.default_cluster == "256x8"
    (tiresias,) = parse_workload("tiresias")
    assert len(tiresias) == 30 and tiresias.default_cluster == "32x4:cpus=40:mem=256"
